//! Failed fsyncs inside compactions and deletes, whose write-back the
//! kernel may then drop while the page cache keeps the bytes, followed by a
//! same-boot reopen, more work and power cuts (`writeback.zr`).

mod common;
use common::workload::read_all;
use common::{at_sync, tagged};
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, Engine, OpenMode};

const DIR: &str = "/s";

fn append(e: &Engine, ks: std::ops::Range<u8>) {
    for k in ks {
        e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
    }
}

/// Twelve records over several 160-byte chunks, three deleted, synced.
fn holey(v: &SimVfs) -> Engine {
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), common::sim(v)).unwrap();
    append(&e, 0..12);
    e.delete(&[0, 2, 4]).unwrap();
    e.sync().unwrap();
    e
}

/// For each I/O call of a compaction of [`holey`] in turn, up to the
/// first call count it completes within: the call, the disk after the
/// compaction failed there (its handle gone without a drop, as when
/// killed right after), and the error.
fn failed_compactions() -> Vec<(u64, SimVfs, zrecord_engine::Error)> {
    let mut out = Vec::new();
    for n in 0.. {
        let v = SimVfs::new();
        let mut e = holey(&v);
        v.fail_at(Some(n));
        let r = e.compact();
        v.fail_at(None);
        std::mem::forget(e);
        let Err(err) = r else { break };
        out.push((n, v, err));
    }
    out
}

fn is_sync_of(e: &zrecord_engine::Error, ext: &str) -> bool {
    matches!(e, zrecord_engine::Error::Io { path, op: "sync", .. }
        if path.extension().is_some_and(|x| x == ext))
}

/// On `v`, with `e` open on it after a failed call (same boot): a second
/// compaction (which finds the records where the cache shows them, and
/// cuts the chunks after them), appends `12..15` over the space it freed
/// and a sync, recorded; then `seeds` power cuts at every point, each
/// opening read-write to a store that verifies clean and holds `model`
/// (before the appends) or `after`.
fn compact_append_sync_then_cuts(
    v: &SimVfs,
    mut e: Engine,
    model: &[Vec<u8>],
    after: &[Vec<u8>],
    seeds: u64,
    what: &str,
) {
    v.record(true);
    e.compact().unwrap();
    append(&e, 12..15);
    e.sync().unwrap();
    v.record(false);
    assert_eq!(read_all(&e).unwrap(), after, "{what}");
    std::mem::forget(e);
    for (s, snap) in v.take_snapshots().iter().enumerate() {
        for seed in 0..seeds {
            let img = snap.crash_image(seed);
            let got = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img))
                .and_then(|e| {
                    let rep = e.verify()?;
                    assert!(rep.is_ok(), "{what}, point {s}, seed {seed}: {rep:?}");
                    read_all(&e)
                })
                .unwrap_or_else(|e| panic!("{what}, point {s}, seed {seed}: {e}"));
            assert!(
                got == model || got == after,
                "{what}, point {s}, seed {seed}: {} records",
                got.len()
            );
        }
    }
}

/// A compaction failing at each of its I/O calls in turn; a reopen on the
/// same boot; a second compaction (which finds the records where the
/// cache shows them, and cuts the chunks after them), appends over the
/// space it freed, a sync; a power cut at every point of that. Before
/// `writeback.zr` the disk kept the old entries of a batch whose loc fsync
/// failed, pointing at bytes past the new end of their chunk (then the
/// appends' bytes): the store did not open.
#[test]
fn a_compaction_whose_loc_or_chunk_fsync_failed_cannot_break_a_later_power_cut() {
    let model = read_all(&holey(&SimVfs::new())).unwrap();
    let mut after = model.clone();
    after.extend((12..15).map(tagged));
    let mut seen = [0usize; 2];
    for (n, v, err) in failed_compactions() {
        for (k, ext) in ["loc", "chunk"].iter().enumerate() {
            seen[k] += usize::from(is_sync_of(&err, ext));
        }
        let e = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&v)).unwrap();
        assert_eq!(read_all(&e).unwrap(), model, "call {n}: the reopen");
        compact_append_sync_then_cuts(&v, e, &model, &after, 4, &format!("call {n}"));
    }
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "failed fsyncs of loc / chunk files: {seen:?}"
    );
}

/// The record is left alone by a read-only open and used once: the first
/// read-write open on its boot rewrites the files it names (an fsync each)
/// and removes it. On another boot (a power cut; the record, never
/// fsynced, put on the disk by hand) an open only removes it.
#[test]
fn the_record_is_used_by_one_read_write_open_of_its_boot() {
    use zrecord_engine::vfs::Vfs as _;
    let name = std::path::Path::new(DIR).join("writeback.zr");
    let has = |v: &SimVfs| v.read_file(&name).is_some();
    // The first compaction call whose failure is a loc fsync's.
    let failed = || {
        failed_compactions()
            .into_iter()
            .find_map(|(_, v, e)| is_sync_of(&e, "loc").then_some(v))
            .expect("a compaction with a failed loc fsync")
    };
    // fsyncs of a read-write open (and its handle's close).
    let open_syncs = |v: &SimVfs| {
        let s = v.syncs();
        drop(Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(v)).unwrap());
        v.syncs() - s
    };
    let v = failed();
    assert!(has(&v), "no record after a failed loc fsync");
    let record = v.read_file(&name).unwrap();
    // The same store without the record.
    let bare = failed();
    bare.remove(&name).unwrap();
    let (cut, bare_cut) = (v.snapshot().crash_image(0), bare.snapshot().crash_image(0));
    assert!(!has(&cut), "the record was fsynced");

    // (It may refuse: the compaction left work for a writer to finish.)
    drop(Engine::open_with(DIR, OpenMode::ReadOnly, common::sim(&v)));
    assert!(has(&v), "a read-only open removed the record");
    let (with, without) = (open_syncs(&v), open_syncs(&bare));
    assert!(!has(&v), "the read-write open left the record");
    assert!(with > without, "the read-write open rewrote nothing");
    assert_eq!(
        open_syncs(&v),
        open_syncs(&bare),
        "a second open found work to do"
    );

    cut.write_file(&name, &record);
    assert_eq!(
        open_syncs(&cut),
        open_syncs(&bare_cut),
        "an open on another boot rewrote files"
    );
    assert!(!has(&cut), "an open on another boot left the record");
}

/// Short random workloads with failures injected in compactions and
/// deletes (and a reopen after each), then power cuts: every image opens
/// and verifies clean.
#[test]
fn probe_failures_in_compactions_and_deletes_then_power_cuts() {
    use common::workload::Op;
    let found = common::workload::short_workloads_then_power_cuts(
        0..3000,
        std::path::Path::new(DIR),
        common::sim,
        false,
        |rng, op| {
            (rng.below(3) == 0 && matches!(op, Op::Compact | Op::Delete(..))).then(|| rng.below(40))
        },
    );
    assert_eq!(found, 0);
}

/// A read-write open that meets an I/O error reading `writeback.zr` must
/// fail (leaving the record for the next open), not take the record for a
/// torn one and remove it unused: the compaction's lost loc write-back
/// then stayed lost, and a second compaction, appends over the space it
/// freed and a power cut left old entries past their chunk's new end.
#[test]
fn an_open_that_cannot_read_the_record_does_not_drop_it() {
    let model = read_all(&holey(&SimVfs::new())).unwrap();
    let mut after = model.clone();
    after.extend((12..15).map(tagged));
    let mut opened_past_a_failure = 0;
    for (n, v, err) in failed_compactions() {
        if !is_sync_of(&err, "loc") && !is_sync_of(&err, "chunk") {
            continue;
        }
        // Each call of the reopen fails in turn (up to past its last);
        // an open that fails is opened again, healthy.
        for m in 0..80 {
            let img = v.fork();
            img.fail_at(Some(m));
            let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img));
            img.fail_at(None);
            let e = match r {
                Ok(e) => {
                    opened_past_a_failure += 1;
                    e
                }
                Err(_) => Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img))
                    .unwrap_or_else(|e| panic!("call {n}, open call {m}: {e}")),
            };
            assert_eq!(read_all(&e).unwrap(), model, "call {n}, open call {m}");
            compact_append_sync_then_cuts(&img, e, &model, &after, 3, &format!("call {n}/{m}"));
        }
    }
    assert!(opened_past_a_failure > 0);
}

/// A sync of deferred deletes (armed, written in place by a flush) whose
/// fsync of a loc segment fails puts the durable header and the deletes'
/// undo entries back, then logs *done* (`Engine::sync`). A kill anywhere
/// in that put-back and a same-boot reopen must give the state before or
/// after the deletes, verified clean.
///
/// Found by the review of `writeback.zr` (it failed the same way before it,
/// at 435dffd): killed after the header was put back and before *done*
/// was logged, the same-boot open took the put-back header (length 14) as
/// this boot's over the deletes' entries still in place: records 11..13
/// shared bytes with 1, 5, 9. The put-back now makes the marker another
/// boot's first, so every later open rolls back.
#[test]
fn a_kill_while_a_failed_sync_puts_deletes_back_leaves_a_whole_state() {
    let build = |v: &SimVfs| {
        let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), common::sim(v)).unwrap();
        append(&e, 0..14);
        e.sync().unwrap();
        e.delete(&[1, 5, 9]).unwrap();
        // Written in place (the marker made durable).
        assert!(e.verify().unwrap().is_ok());
        e
    };
    let before: Vec<Vec<u8>> = (0..14).map(tagged).collect();
    let after = read_all(&build(&SimVfs::new())).unwrap();
    let mut killed = 0;
    for n in 0..60 {
        let v = SimVfs::new();
        let e = build(&v);
        v.record(true);
        v.fail_at(Some(n));
        let r = e.sync();
        v.fail_at(None);
        v.record(false);
        let Err(err) = r else { break };
        std::mem::forget(e);
        if !is_sync_of(&err, "loc") {
            let _ = v.take_snapshots();
            continue;
        }
        // A kill at every mutating call of the failed sync (those before
        // its failure are plain kills mid-sync).
        for (s, snap) in v.take_snapshots().iter().enumerate() {
            let img = snap.kill_image();
            killed += 1;
            let e = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img))
                .unwrap_or_else(|e| panic!("call {n}, point {s}: {e}"));
            let rep = e.verify().unwrap();
            assert!(rep.is_ok(), "call {n}, point {s}: {rep:?}");
            let got = read_all(&e).unwrap();
            assert!(
                got == before || got == after,
                "call {n}, point {s}: {} records",
                got.len()
            );
        }
    }
    assert!(killed > 0);
}

/// Two faults in one op (a second failed call 1 to 8 calls after the
/// first, so that it may hit the note of a failed fsync or the put-back
/// that follows), raw and zstd, a same-boot reopen after each error (and
/// another if that one fails), then a power cut at every point of the
/// chain: every image opens read-write and verifies clean.
#[test]
fn probe_two_failures_in_one_op_then_power_cuts_at_every_point() {
    use common::Rng;
    use common::workload::{apply, random_op, run};
    let mut bad = 0;
    for seed in 0..1500u64 {
        for codec in [Codec::Raw, Codec::Zstd] {
            let mut rng = Rng(seed * 7 + 3);
            let v = SimVfs::new();
            let mut e = Engine::create_with(DIR, &at_sync(codec), common::sim(&v)).unwrap();
            v.record(true);
            let mut model = Vec::new();
            let mut ops = Vec::new();
            for _ in 0..2 + rng.below(12) {
                let op = random_op(&mut rng, model.len(), 40);
                let fail = (rng.below(2) == 0).then(|| rng.below(60));
                if let Some(f) = fail {
                    v.fail_calls(&[f, f + 1 + rng.below(8)]);
                }
                let r = run(&mut e, &op);
                v.fail_calls(&[]);
                ops.push(format!("{op:?} fail {fail:?}: {:?}", r.as_ref().err()));
                if r.is_err() {
                    std::mem::forget(e);
                    let reopen = || Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&v));
                    e = reopen().or_else(|_| reopen()).unwrap();
                    model = read_all(&e).unwrap();
                    continue;
                }
                apply(&mut model, &op);
            }
            v.record(false);
            std::mem::forget(e);
            for (p, snap) in v.take_snapshots().iter().enumerate() {
                let img = snap.crash_image(p as u64);
                let ok = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img))
                    .and_then(|r| r.verify())
                    .map(|rep| rep.is_ok());
                if !matches!(ok, Ok(true)) {
                    bad += 1;
                    if bad < 3 {
                        eprintln!("seed {seed} {codec:?} point {p}: {ok:?}\n{ops:#?}");
                    }
                }
            }
        }
    }
    assert_eq!(bad, 0);
}
