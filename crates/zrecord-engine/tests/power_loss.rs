//! Guards against power loss leaving a store that does not open, or opens in
//! a state that was never committed. A simulated disk (`sim::SimVfs`) keeps
//! synced bytes apart from unsynced writes; a scripted workload (every append
//! form, deletes, compactions, syncs) is snapshotted before every mutating
//! I/O call, and from each snapshot several crash images are built (each
//! unsynced write kept, dropped or torn at sectors; a prefix of unsynced
//! directory operations). Every image must open, hold exactly the last
//! synced state or a later committed one (bit-exact), and accept an append.
//! Both durabilities run: with each-append durability every operation that
//! returned must survive; with deferred appends and deletes
//! (`Durability::AtSync`) a power cut may roll back to the last sync. An image of a killed process
//! (every write issued, same boot) must hold every operation that returned
//! under either.

mod common;
use common::Rng;
use common::workload::{Op, apply, random_op, read_all, run};
use std::path::Path;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, EngineConfig, Error, OpenMode};

const IMAGES_PER_POINT: u64 = 10;

/// The tiny layout, or with `big` records up to 1,500 bytes in 8 KiB chunks:
/// writes that span 512-byte sectors, which a crash image may tear.
fn cfg(vfs: &SimVfs, big: bool) -> EngineConfig {
    EngineConfig {
        chunk_capacity: if big { 8192 } else { 160 },
        ..common::sim(vfs)
    }
}

fn script(seed: u64, big: bool) -> Vec<Op> {
    let mut rng = Rng(seed);
    let mut model: Vec<Vec<u8>> = Vec::new();
    let mut ops = Vec::new();
    for step in 0..36 {
        let op = match step {
            s if s % 12 == 11 => Op::Compact,
            s if s % 5 == 4 => Op::Sync,
            _ => random_op(&mut rng, model.len(), if big { 1500 } else { 40 }),
        };
        apply(&mut model, &op);
        ops.push(op);
    }
    ops
}

/// What one workload exercised.
#[derive(Default)]
struct Counts {
    scenarios: u64,
    intents: usize,
    markers: usize,
    kills: u64,
    ro_refusals: u64,
}

fn check_codec(codec: Codec, seed: u64, durability: Durability, big: bool) -> Counts {
    check_ops(codec, durability, big, script(seed, big))
}

fn check_ops(codec: Codec, durability: Durability, big: bool, ops: Vec<Op>) -> Counts {
    let dir = Path::new("/store");
    let vfs = SimVfs::new();
    let opts = CreateOptions {
        durability,
        ..CreateOptions::new(codec)
    };
    let mut e = Engine::create_with(dir, &opts, cfg(&vfs, big)).unwrap();
    // states[j] = committed content after j ops; bounds[j] = snapshots taken
    // before op j started.
    let mut states = vec![Vec::<Vec<u8>>::new()];
    let mut starts = Vec::new();
    vfs.record(true);
    for op in &ops {
        starts.push(vfs.snapshot_count());
        run(&mut e, op).unwrap();
        let mut m = states.last().unwrap().clone();
        apply(&mut m, op);
        states.push(m);
    }
    vfs.record(false);
    let mut snaps = vfs.take_snapshots();
    snaps.push(vfs.snapshot());
    drop(e);
    assert!(snaps.len() > 100, "workload too small: {}", snaps.len());
    let with_intent = snaps
        .iter()
        .filter(|s| s.has_file(&dir.join("intent.zr")))
        .count();
    let with_marker = snaps
        .iter()
        .filter(|s| s.has_file(&dir.join("durable.zr")))
        .count();

    let mut scenarios = 0;
    let mut kills = 0;
    let (mut ro_opens, mut ro_refusals) = (0u64, 0u64);
    for (p, snap) in snaps.iter().enumerate() {
        // Op in flight: the last one that started at or before p.
        let j = starts.iter().rposition(|&s| s <= p).unwrap_or(0);
        let done = |k: usize| {
            if k + 1 < starts.len() {
                starts[k + 1] <= p
            } else {
                p == snaps.len() - 1
            }
        };
        // Last sync (or create) fully done before snapshot p; under
        // each-append durability, the last operation of any kind.
        let synced = (0..ops.len())
            .filter(|&k| {
                done(k)
                    && (durability == Durability::EachAppend
                        || matches!(ops[k], Op::Sync | Op::Compact))
            })
            .map(|k| k + 1)
            .max()
            .unwrap_or(0);
        let hi = if p == snaps.len() - 1 {
            ops.len()
        } else {
            j + 1
        };
        // A killed process: every operation that returned is there.
        let returned = (0..ops.len())
            .filter(|&k| done(k))
            .map(|k| k + 1)
            .max()
            .unwrap_or(0);
        let image = snap.kill_image();
        let ro = Engine::open_with(dir, OpenMode::ReadOnly, cfg(&image, big));
        if let Ok(ro) = ro {
            let got = read_all(&ro).unwrap();
            assert!(
                (returned..=hi).any(|k| states[k] == got),
                "{codec:?} {durability:?} point {p}: read-only open after a kill lost a returned operation"
            );
            drop(ro);
        }
        let k =
            Engine::open_with(dir, OpenMode::ReadWrite, cfg(&image, big)).unwrap_or_else(|err| {
                panic!("{codec:?} {durability:?} point {p}: open after a kill failed: {err}")
            });
        let got = read_all(&k).unwrap();
        assert!(
            (returned..=hi).any(|k| states[k] == got),
            "{codec:?} {durability:?} point {p}: after a kill, {} records match no state in {returned}..={hi}",
            got.len()
        );
        drop(k);
        kills += 1;
        for seed in 0..IMAGES_PER_POINT {
            let image = snap.crash_image(seed * 7919 + p as u64);
            let image = if seed < 2 {
                snap.crash_image(seed)
            } else {
                image
            };
            // A read-only open applies a pending delete in memory, or refuses
            // a pending compaction move with a clear error.
            match Engine::open_with(dir, OpenMode::ReadOnly, cfg(&image, big)) {
                Ok(ro) => {
                    let got = read_all(&ro).unwrap();
                    assert!(
                        (synced..=hi).any(|k| states[k] == got),
                        "{codec:?} point {p} image {seed}: read-only open shows an uncommitted state"
                    );
                    ro_opens += 1;
                }
                Err(Error::RecoveryNeeded { .. }) => ro_refusals += 1,
                Err(err) => panic!("{codec:?} point {p} image {seed}: read-only open: {err}"),
            }
            let mut r = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&image, big))
                .unwrap_or_else(|err| {
                    panic!("{codec:?} point {p} image {seed}: open failed: {err}")
                });
            let got = read_all(&r).unwrap_or_else(|err| {
                panic!("{codec:?} point {p} image {seed}: read failed: {err}")
            });
            let ok = (synced..=hi).any(|k| states[k] == got);
            if !ok && std::env::var("PL_DEBUG").is_ok() {
                for (k, st) in states.iter().enumerate().take(hi + 1).skip(synced) {
                    eprintln!(
                        "state {k}: {:?}",
                        st.iter().map(|r| &r[..r.len().min(6)]).collect::<Vec<_>>()
                    );
                }
                for (k, o) in ops.iter().enumerate().take(hi) {
                    eprintln!(
                        "op {k} start {}: {}",
                        starts[k],
                        format!("{o:?}").chars().take(150).collect::<String>()
                    );
                }
                eprintln!(
                    "got: {:?}",
                    got.iter().map(|r| &r[..r.len().min(6)]).collect::<Vec<_>>()
                );
            }
            assert!(
                ok,
                "{codec:?} point {p} image {seed}: state with {} records matches no committed state in {synced}..={hi} (op {j}: {:?})",
                got.len(),
                ops.get(j)
                    .map(|o| format!("{o:?}").chars().take(60).collect::<String>())
            );
            let report = r.verify().unwrap();
            assert!(
                report.is_ok(),
                "{codec:?} point {p} image {seed}: {report:?}"
            );
            // Writable after recovery.
            r.set_durability(durability).unwrap();
            let n = r.len();
            r.append_var(b"after", &[0, 5]).unwrap();
            let mut out = [0u8; 5];
            r.gather_fixed(&[n], 5, &mut out).unwrap();
            assert_eq!(&out, b"after");
            r.compact().unwrap();
            scenarios += 1;
        }
    }
    assert!(ro_opens > 0);
    Counts {
        ro_refusals,
        scenarios,
        intents: with_intent,
        markers: with_marker,
        kills,
    }
}

#[test]
fn every_crash_image_opens_to_a_committed_state() {
    check_all(Durability::EachAppend);
}

#[test]
fn deferred_appends_roll_back_to_the_last_sync_after_a_power_cut() {
    check_all(Durability::AtSync);
}

fn check_all(durability: Durability) {
    let t = std::time::Instant::now();
    let mut total = Counts::default();
    for (k, codec) in [Codec::Raw, Codec::Zstd].into_iter().enumerate() {
        for seed in 0..4 {
            // The fourth workload writes sector-spanning records.
            let c = check_codec(codec, 100 + seed + 10 * k as u64, durability, seed == 3);
            total.scenarios += c.scenarios;
            total.intents += c.intents;
            total.markers += c.markers;
            total.kills += c.kills;
            total.ro_refusals += c.ro_refusals;
        }
    }
    eprintln!(
        "power loss ({durability:?}): {} crash scenarios and {} kill images ({} crash points with an intent, {} with a durable.zr marker, {} read-only opens refused pending a move) in {:?}",
        total.scenarios,
        total.kills,
        total.intents,
        total.markers,
        total.ro_refusals,
        t.elapsed()
    );
    assert!(total.intents > 0, "the workloads never wrote an intent");
    match durability {
        Durability::EachAppend => assert_eq!(total.markers, 0, "a marker without deferred appends"),
        Durability::AtSync => assert!(
            total.markers > 100,
            "only {} crash points with a marker",
            total.markers
        ),
    }
    assert!(
        total.scenarios >= 10_000,
        "only {} scenarios",
        total.scenarios
    );
}

/// The edge cases of delete and compaction, scripted: deleting the last
/// record, unsorted and duplicated indices, compacting twice in a row,
/// deleting everything, compacting an empty store, appending after it,
/// grouped deletes down to nothing, and records that fill a chunk up to
/// one byte short of its capacity (the `>=` rollover rule).
#[test]
fn scripted_edge_cases_survive_every_crash_point() {
    let v = |lens: &[usize], tag: u8| {
        Op::Var(
            lens.iter()
                .enumerate()
                .map(|(k, &l)| vec![tag.wrapping_add(k as u8); l])
                .collect(),
        )
    };
    let ops = vec![
        v(&[10, 20, 30, 40, 50], 1),
        Op::Delete(vec![4], 1),
        Op::Delete(vec![2, 0, 2, 3], 1),
        Op::Compact,
        Op::Compact,
        v(&[159, 1, 158, 2], 20),
        Op::Delete(vec![0], 1),
        Op::Compact,
        Op::Delete(vec![0, 1, 2, 3], 1),
        Op::Compact,
        Op::Compact,
        Op::Sync,
        v(&[5, 6], 40),
        Op::Paired(vec![(vec![7; 70], vec![8; 3]), (vec![9; 90], vec![10; 4])]),
        Op::Delete(vec![2, 0, 1, 1], 2),
        Op::Compact,
        v(&[100, 100, 100], 60),
        Op::Delete(vec![1], 1),
        Op::Compact,
    ];
    for codec in [Codec::Raw, Codec::Zstd] {
        for durability in [Durability::EachAppend, Durability::AtSync] {
            let c = check_ops(codec, durability, false, ops.clone());
            assert!(c.scenarios > 1000, "{}", c.scenarios);
        }
    }
}

/// Compaction moves runs of records with one read and one write: many
/// small records of mixed sizes, a block of deleted bytes at the front (a
/// shift larger than the records after it, so runs grow long and span the
/// holes of scattered deletes), scattered deletes alone (a shift that
/// starts at one record, so runs stay short until it grows), and one small
/// record deleted (a shift of a few bytes: runs through intents, the
/// intent holding their bytes). Every crash point of each must open to a
/// committed state.
#[test]
fn coalesced_compaction_moves_survive_every_crash_point() {
    let var = |n: usize, tag: u8| {
        Op::Var(
            (0..n)
                .map(|k| vec![tag.wrapping_add(k as u8); 3 + (k * 7) % 15])
                .collect(),
        )
    };
    let ops = vec![
        var(120, 1),
        Op::Sync,
        // The first 30 records (indices 0..30 take the last 30's entries,
        // so their own bytes become one hole), then every fourth.
        Op::Delete((0..30).chain((30..90).step_by(4)).collect(), 1),
        Op::Compact,
        var(60, 130),
        // Scattered only: the shift starts at one record's size.
        Op::Delete((0..100).step_by(5).collect(), 1),
        Op::Compact,
        // One small record near the start: every record after it moves by
        // a few bytes, through intents that carry runs of records.
        var(90, 40),
        Op::Delete(vec![2], 1),
        Op::Compact,
    ];
    for codec in [Codec::Raw, Codec::Zstd] {
        for durability in [Durability::EachAppend, Durability::AtSync] {
            let c = check_ops(codec, durability, true, ops.clone());
            assert!(c.scenarios > 100, "{}", c.scenarios);
        }
    }
}

/// An intent run while the batch before it is not yet durable: record A
/// moves into the room left in chunk 0 (batched: its source stays
/// pending), B (no longer fitting chunk 0) moves to the start of chunk 1,
/// a shift below the intent threshold, onto bytes short of A's source, so
/// no flush comes first and the intent is written, applied and removed
/// with A's bytes unsynced and its entry unwritten; C then lands on A's
/// source (a flush first). Raw records sized to the byte: 8 KiB chunks,
/// intent threshold 128 bytes.
#[test]
fn an_intent_run_behind_a_batch_not_yet_durable_survives_every_crash_point() {
    let rec = |len: usize, tag: u8| -> Vec<u8> {
        (0..len)
            .map(|i| tag.wrapping_add((i % 251) as u8))
            .collect()
    };
    // Chunk 0: r0 0..4000, r1 (deleted) ..4100, r2 ..8180. Chunk 1: r3
    // (deleted) 0..60, A 60..115, B ..173, r6 (deleted) ..273, C ..323,
    // r8 ..363. After r2's shift of 100 bytes, chunk 0 has room for A
    // (55 bytes: 8080..8135) but not B (58); B moves 115 bytes down, onto
    // 0..58 (A's source starts at 60).
    let sizes = [4000, 100, 4080, 60, 55, 58, 100, 50, 40];
    let ops = vec![
        Op::Var(
            sizes
                .iter()
                .enumerate()
                .map(|(k, &n)| rec(n, 11 * k as u8))
                .collect(),
        ),
        Op::Sync,
        Op::Delete(vec![1, 3, 6], 1),
        Op::Compact,
        Op::Var(vec![rec(30, 200)]),
    ];
    for durability in [Durability::EachAppend, Durability::AtSync] {
        let c = check_ops(Codec::Raw, durability, true, ops.clone());
        assert!(c.scenarios > 100, "{}", c.scenarios);
    }
}

/// A power cut or kill at every I/O call of the open that replays a
/// pending multi-record move intent, for every way a compaction can leave
/// one: stopped by a failed I/O call at each point (a failed fsync of the
/// intent leaves it in the cache only, reported clean), or killed at each
/// point (the intent maybe not yet synced). The open must make the intent
/// durable before it writes over the records' bytes: otherwise a power cut
/// mid-replay keeps those writes and loses the intent that explains them.
/// Every image opens to the records (replay is idempotent).
#[test]
fn a_replay_cut_at_any_call_replays_again() {
    let dir = Path::new("/store");
    let rec = |k: usize| vec![k as u8 + 1; 20 + k * 3];
    let model0: Vec<Vec<u8>> = (0..24).map(rec).collect();
    let mut model = model0.clone();
    apply(&mut model, &Op::Delete(vec![2], 1));
    let setup = || {
        let v = SimVfs::new();
        let mut e =
            Engine::create_with(dir, &CreateOptions::new(Codec::Raw), cfg(&v, true)).unwrap();
        run(&mut e, &Op::Var(model0.clone())).unwrap();
        run(&mut e, &Op::Delete(vec![2], 1)).unwrap();
        run(&mut e, &Op::Sync).unwrap();
        (v, e)
    };
    // Stores a compaction left with an intent: stopped by a failed call,
    // or killed.
    let mut sources = Vec::new();
    for k in 0.. {
        let (v, mut e) = setup();
        v.fail_span(Some(k), u64::MAX / 2);
        let done = e.compact().is_ok();
        v.fail_span(None, 0);
        std::mem::forget(e);
        if done {
            break;
        }
        sources.push((format!("failed call {k}"), v));
    }
    let (v, mut e) = setup();
    v.record(true);
    e.compact().unwrap();
    v.record(false);
    for (p, snap) in v.take_snapshots().iter().enumerate() {
        sources.push((format!("killed at {p}"), snap.kill_image()));
    }
    let (mut pending, mut points) = (0, 0);
    for (what, v) in sources {
        let multi = v
            .read_file(&dir.join("intent.zr"))
            .is_some_and(|b| b.len() > 16 && b[5] == 3 && b[16] > 1);
        if !multi {
            continue;
        }
        pending += 1;
        // The open that replays, recorded call by call.
        v.record(true);
        let r = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&v, true)).unwrap();
        assert_eq!(read_all(&r).unwrap(), model, "{what}: the replay");
        v.record(false);
        drop(r);
        for (p, snap) in v.take_snapshots().iter().enumerate() {
            let images =
                std::iter::once(snap.kill_image()).chain((0..6).map(|s| snap.crash_image(s)));
            for (s, image) in images.enumerate() {
                let mut r = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&image, true))
                    .unwrap_or_else(|err| panic!("{what}, open call {p} image {s}: {err}"));
                assert_eq!(
                    read_all(&r).unwrap(),
                    model,
                    "{what}, open call {p} image {s}"
                );
                assert!(
                    r.verify().unwrap().is_ok(),
                    "{what}, open call {p} image {s}"
                );
                r.compact().unwrap();
                assert_eq!(
                    read_all(&r).unwrap(),
                    model,
                    "{what}, open call {p} image {s}"
                );
                points += 1;
            }
        }
    }
    assert!(pending > 4 && points > 100, "{pending} {points}");
}
