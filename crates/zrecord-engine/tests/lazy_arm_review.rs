//! Review of the lazily synced delete marker (`durable.zr` armed unsynced,
//! made durable with its directory entry by the first flush): failed
//! calls at that flush, then a same-boot reopen that finishes the logged
//! deletes, then power cuts.

mod common;
use common::workload::read_all;
use common::{at_sync, tagged};
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, Engine, EngineConfig, OpenMode};

const DIR: &str = "/s";

fn cfg(v: &SimVfs) -> EngineConfig {
    common::sim(v)
}

fn append(e: &Engine, ks: std::ops::Range<u8>) -> zrecord_engine::Result<()> {
    for k in ks {
        e.append_var(&tagged(k), &[0, tagged(k).len()])?;
    }
    Ok(())
}

/// Six synced records, then a deferred delete of record 1 (the marker is
/// armed, its record logged, nothing written in place).
fn deleted_one(v: &SimVfs) -> Engine {
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(v)).unwrap();
    append(&e, 0..6).unwrap();
    e.sync().unwrap();
    e.delete(&[1]).unwrap();
    e
}

/// The states a power cut may leave: the synced six, or the delete done.
fn before_or_after(got: &[Vec<u8>]) -> bool {
    let before: Vec<Vec<u8>> = (0..6).map(tagged).collect();
    let after: Vec<Vec<u8>> = [0, 5, 2, 3, 4].into_iter().map(tagged).collect();
    got == before || got == after
}

/// The first flush after a deferred delete (here an append's, or a
/// verify's) fails at some call: a failed fsync of the marker leaves its
/// bytes in the cache only, which the kernel then calls clean. A reopen on
/// the same boot finishes the logged delete in place; a power cut at any
/// point of that reopen, or after it, must open to one of the two states.
fn flush_fails_then_reopen_then_cut(op: impl Fn(&Engine) -> zrecord_engine::Result<()>) {
    let mut failed = 0;
    for n in 0..12 {
        let v = SimVfs::new();
        let e = deleted_one(&v);
        v.fail_at(Some(n));
        let r = op(&e);
        v.fail_at(None);
        if r.is_ok() {
            continue;
        }
        failed += 1;
        std::mem::forget(e);
        v.record(true);
        let reopened = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v));
        v.record(false);
        let mut snaps = v.take_snapshots();
        snaps.push(v.snapshot());
        if let Ok(e) = reopened {
            assert!(before_or_after(&read_all(&e).unwrap()), "call {n}: reopen");
            drop(e);
        }
        for (i, s) in snaps.iter().enumerate() {
            for seed in 0..8 {
                let what = format!("call {n}, step {i}, seed {seed}");
                let img = s.crash_image(seed);
                let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&img))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let rep = r.verify().unwrap();
                assert!(rep.is_ok(), "{what}: {rep:?}");
                let got = read_all(&r).unwrap();
                assert!(before_or_after(&got), "{what}: {got:?}");
            }
        }
    }
    assert!(failed > 0);
}

#[test]
fn a_failed_first_flush_at_an_append_then_a_same_boot_reopen_survives_power_cuts() {
    flush_fails_then_reopen_then_cut(|e| append(e, 6..7));
}

#[test]
fn a_failed_first_flush_at_a_verify_then_a_same_boot_reopen_survives_power_cuts() {
    flush_fails_then_reopen_then_cut(|e| e.verify().map(|_| ()));
}

#[test]
fn a_failed_first_flush_at_a_sync_then_a_same_boot_reopen_survives_power_cuts() {
    flush_fails_then_reopen_then_cut(|e| e.sync());
}

/// Deferred deletes, appends, a verify and a sync after a durable point,
/// each step's writes snapshotted: every power cut (ordered or not) at
/// every point opens to a store that verifies, holding at least the five
/// records every state after the sync point keeps.
#[test]
fn probe_power_cuts_at_every_point_of_lazily_armed_deletes() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(&v)).unwrap();
    append(&e, 0..6).unwrap();
    e.sync().unwrap();
    v.record(true);
    e.delete(&[1]).unwrap();
    e.delete(&[0]).unwrap();
    append(&e, 6..9).unwrap();
    e.delete(&[2]).unwrap();
    e.verify().unwrap();
    e.delete(&[3, 4]).unwrap();
    append(&e, 9..10).unwrap();
    e.sync().unwrap();
    v.record(false);
    let end: Vec<Vec<u8>> = read_all(&e).unwrap();
    drop(e);
    let snaps = v.take_snapshots();
    assert!(snaps.len() > 10);
    for (i, s) in snaps.iter().enumerate() {
        for seed in 0..6 {
            for (how, img) in [
                ("ordered", s.crash_image(seed)),
                ("unordered", s.crash_image_unordered(seed)),
            ] {
                let what = format!("step {i}, {how} cut {seed}");
                let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&img))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let rep = r.verify().unwrap();
                assert!(rep.is_ok(), "{what}: {rep:?}");
                let got = read_all(&r).unwrap();
                let before: Vec<Vec<u8>> = (0..6).map(tagged).collect();
                // Before the sync: the synced six (a roll-back); after it,
                // its state. (States between are a finished open's.)
                assert!(
                    got == before || got == end || i + 1 < snaps.len(),
                    "{what}: {got:?}"
                );
                let mut sorted = got.clone();
                sorted.sort();
                sorted.dedup();
                assert_eq!(sorted.len(), got.len(), "{what}: a record repeated");
            }
        }
    }
    // The last snapshot is after the sync: every cut holds its state.
    let last = v.snapshot();
    for seed in 0..6 {
        let img = last.crash_image_unordered(seed);
        let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&img)).unwrap();
        assert_eq!(read_all(&r).unwrap(), end, "after the sync, cut {seed}");
    }
}
