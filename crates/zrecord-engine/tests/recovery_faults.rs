//! Third review of deferred deletes: the recovering open itself fails,
//! is killed or loses power at every call, on the same boot (finishing a
//! killed writer's deletes) and on another (rolling them back); the next
//! open (and a power cut after the failed one) must find a whole state.

mod common;
use common::workload::read_all;
use common::{at_sync, tagged};
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, Engine, OpenMode};

const DIR: &str = "/s";

#[derive(Clone, Debug)]
enum Op {
    Append(std::ops::Range<u8>),
    Delete(Vec<u64>),
    Flush,
}

/// Runs `ops` after `synced` appends and a sync, kills the writer, and
/// returns the kill image with every state the store went through since
/// the sync (any of them is whole).
fn scenario(synced: u8, ops: &[Op]) -> (SimVfs, States) {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), common::sim(&v)).unwrap();
    for k in 0..synced {
        e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
    }
    e.sync().unwrap();
    let mut model: Vec<Vec<u8>> = (0..synced).map(tagged).collect();
    let mut states = vec![model.clone()];
    for op in ops {
        match op {
            Op::Append(ks) => {
                for k in ks.clone() {
                    e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
                    model.push(tagged(k));
                    states.push(model.clone());
                }
            }
            Op::Delete(ix) => {
                e.delete(ix).unwrap();
                let mut ix = ix.clone();
                ix.sort_unstable();
                ix.dedup();
                for &i in ix.iter().rev() {
                    let last = model.pop().unwrap();
                    if (i as usize) < model.len() {
                        model[i as usize] = last;
                    }
                }
                states.push(model.clone());
            }
            Op::Flush => assert!(e.verify().unwrap().is_ok()),
        }
    }
    assert_eq!(read_all(&e).unwrap(), model);
    let killed = v.snapshot().kill_image();
    std::mem::forget(e);
    (killed, states)
}

/// Every whole state of a scenario, as its records.
type States = Vec<Vec<Vec<u8>>>;

fn scenarios() -> Vec<(&'static str, SimVfs, States)> {
    use Op::*;
    let list: Vec<(&'static str, u8, Vec<Op>)> = vec![
        (
            "two deletes pending",
            6,
            vec![Append(6..8), Delete(vec![1]), Delete(vec![0])],
        ),
        (
            "two deletes flushed",
            6,
            vec![Append(6..8), Delete(vec![1]), Delete(vec![0]), Flush],
        ),
        (
            "a delete cuts segments off, appends refill, another pending",
            10,
            vec![
                Delete(vec![0, 1, 2, 3, 4, 5, 6]),
                Flush,
                Append(20..22),
                Delete(vec![1]),
            ],
        ),
        (
            "a cut-off delete pending",
            10,
            vec![Delete(vec![0, 1, 2, 3, 4, 5, 6]), Delete(vec![0])],
        ),
    ];
    list.into_iter()
        .map(|(name, synced, ops)| {
            let (v, states) = scenario(synced, &ops);
            (name, v, states)
        })
        .collect()
}

/// Opens `v` read-write with no faults: it must succeed, hold one of
/// `states` and verify clean.
fn check(v: &SimVfs, states: &[Vec<Vec<u8>>], what: &str) {
    let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(v))
        .unwrap_or_else(|err| panic!("{what}: reopen failed: {err}"));
    let got = read_all(&r).unwrap_or_else(|err| panic!("{what}: read: {err}"));
    assert!(states.contains(&got), "{what}: not a whole state: {got:?}");
    assert!(r.verify().unwrap().is_ok(), "{what}: verify");
}

/// A read-only open of `v`: a whole state that verifies, or an error.
fn check_read_only(v: &SimVfs, states: &[Vec<Vec<u8>>], what: &str) {
    if let Ok(r) = Engine::open_with(DIR, OpenMode::ReadOnly, common::sim(v)) {
        let got = read_all(&r).unwrap_or_else(|err| panic!("{what}: read-only read: {err}"));
        assert!(
            states.contains(&got),
            "{what}: read-only: not a whole state: {got:?}"
        );
        assert!(r.verify().unwrap().is_ok(), "{what}: read-only verify");
    }
}

/// The bases a recovering open starts from: the killed writer's disk on
/// the same boot, and power cuts after it (another boot).
fn bases(killed: &SimVfs) -> Vec<(String, SimVfs)> {
    let mut out = vec![("same boot".to_string(), killed.fork())];
    let snap = killed.snapshot();
    for seed in [0, 1, 2, 3, 5, 8] {
        out.push((format!("power cut seed {seed}"), snap.crash_image(seed)));
    }
    out
}

#[test]
fn a_recovering_open_that_fails_at_any_call_leaves_a_whole_state() {
    for (name, killed, states) in scenarios() {
        for (base_name, base) in bases(&killed) {
            for span in [1u64, 3] {
                let mut failed = 0;
                for n in 0..120u64 {
                    let img = base.fork();
                    img.fail_span(Some(n), span);
                    let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img));
                    img.fail_span(None, 0);
                    let what = format!("{name}, {base_name}, span {span} call {n}");
                    match r {
                        Ok(e) => {
                            let got = read_all(&e).unwrap();
                            assert!(states.contains(&got), "{what}: open: {got:?}");
                            drop(e);
                        }
                        Err(_) => failed += 1,
                    }
                    let snap = img.snapshot();
                    check_read_only(&img, &states, &what);
                    check(&img.fork(), &states, &what);
                    for seed in 0..8 {
                        check(
                            &snap.crash_image(seed),
                            &states,
                            &format!("{what}, then power cut {seed}"),
                        );
                    }
                }
                assert!(failed > 3, "{name}, {base_name}: only {failed} failures");
            }
        }
    }
}

#[test]
fn a_recovering_open_killed_or_cut_at_any_call_recovers_again() {
    for (name, killed, states) in scenarios() {
        for (base_name, base) in bases(&killed) {
            let img = base.fork();
            img.record(true);
            let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img))
                .unwrap_or_else(|err| panic!("{name}, {base_name}: {err}"));
            drop(r);
            img.record(false);
            for (k, s) in img.take_snapshots().iter().enumerate() {
                let what = format!("{name}, {base_name}, snapshot {k}");
                let kimg = s.kill_image();
                check_read_only(&kimg, &states, &format!("{what} killed"));
                // Killed, then killed again during the next recovery.
                let again = kimg.fork();
                again.record(true);
                check(&again, &states, &format!("{what} killed"));
                again.record(false);
                for (j, s2) in again.take_snapshots().iter().enumerate() {
                    check(
                        &s2.kill_image(),
                        &states,
                        &format!("{what} killed, {j} killed"),
                    );
                    check(
                        &s2.crash_image(2),
                        &states,
                        &format!("{what} killed, {j} cut"),
                    );
                }
                for seed in 0..10 {
                    let cimg = s.crash_image(seed);
                    check_read_only(&cimg, &states, &format!("{what} cut {seed}"));
                    check(&cimg, &states, &format!("{what} cut {seed}"));
                }
            }
        }
    }
}

/// A `sync` whose last call, the directory sync after the marker's
/// removal, fails: it put the marker's header and undo entries back,
/// unsynced, over files it had just made durable and with no marker left
/// to roll back with. A power cut then kept some of those entries under
/// the deletes' durable header: records lost and repeated.
#[test]
fn a_sync_that_fails_after_removing_the_marker_puts_nothing_back() {
    use Op::*;
    let (killed, states) = scenario(
        10,
        &[
            Delete(vec![0, 1, 2, 3, 4, 5, 6]),
            Flush,
            Append(20..22),
            Delete(vec![1]),
        ],
    );
    drop(killed);
    // The same writer, alive: its sync fails at every call in turn.
    let mut checked = 0;
    for call in 0..40u64 {
        let v = SimVfs::new();
        let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), common::sim(&v)).unwrap();
        for k in 0..10 {
            e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
        }
        e.sync().unwrap();
        e.delete(&[0, 1, 2, 3, 4, 5, 6]).unwrap();
        assert!(e.verify().unwrap().is_ok());
        for k in 20..22 {
            e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
        }
        e.delete(&[1]).unwrap();
        v.fail_at(Some(call));
        let failed = e.sync().is_err();
        v.fail_at(None);
        if !failed {
            break;
        }
        std::mem::forget(e);
        let snap = v.snapshot();
        check(&v.fork(), &states, &format!("sync call {call}"));
        for seed in 0..40 {
            check(
                &snap.crash_image(seed),
                &states,
                &format!("sync call {call}, power cut {seed}"),
            );
        }
        checked += 1;
    }
    assert!(checked > 5, "only {checked} failing calls");
}
