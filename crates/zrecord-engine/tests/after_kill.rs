//! A writer killed mid-operation, then a new handle on the same boot that
//! works on and reports success, then a power cut: everything the new handle
//! reported durable must survive.
//!
//! The killed writer may have removed `durable.zr` or `intent.zr` without
//! the directory fsync that makes the removal durable, and may have left
//! loc, chunk and header bytes in the page cache only. A power cut then
//! brings a stale marker back (rolling the store back past the new handle's
//! durable work, or naming a frontier its entries overrun), replays a stale
//! intent over later operations, or leaves durable loc entries pointing at
//! bytes a later compaction freed. A read-write open therefore makes the
//! state it starts from durable, marker or not. Found by an adversarial
//! review; each named case failed before that.

mod common;
use common::Rng;
use common::workload::{Op, apply, random_op, read_all, run};
use std::path::{Path, PathBuf};
use zrecord_engine::sim::{SimVfs, Snapshot};
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, OpenMode};

const DIR: &str = "/s";

fn opts(d: Durability) -> CreateOptions {
    CreateOptions {
        durability: d,
        ..CreateOptions::new(Codec::Raw)
    }
}

fn rec(k: u8) -> Vec<u8> {
    vec![k; 30 + k as usize % 20]
}

fn app(e: &Engine, k: u8) {
    let r = rec(k);
    e.append_var(&r, &[0, r.len()]).unwrap();
}

/// The first byte of each record (records are one repeated byte here).
fn tags(e: &Engine) -> Vec<u8> {
    read_all(e).unwrap().iter().map(|r| r[0]).collect()
}

fn open(v: &SimVfs, m: OpenMode) -> zrecord_engine::Result<Engine> {
    Engine::open_with(DIR, m, common::sim(v))
}

fn p(name: &str) -> PathBuf {
    Path::new(DIR).join(name)
}

/// Whether `name` is gone from the page cache at `s` but still on disk
/// (what a power cut would leave): its removal is not durable yet.
/// For `durable.zr`, zeroed counts as gone: a sync ends a marker its
/// handle keeps that way, fsynced after.
fn removal_pending(s: &Snapshot, name: &str) -> bool {
    let live = |b: Option<Vec<u8>>| b.is_some_and(|b| b.is_empty() || b.iter().any(|&x| x != 0));
    !live(s.kill_image().read_file(&p(name))) && live(s.crash_image(0).read_file(&p(name)))
}

/// The snapshots `f` leaves on `v`.
fn during(v: &SimVfs, f: impl FnOnce()) -> Vec<Snapshot> {
    v.record(true);
    f();
    v.record(false);
    v.take_snapshots()
}

/// A kill image taken where `name`'s removal is not durable yet.
fn killed_with_pending_removal(snaps: &[Snapshot], name: &str) -> SimVfs {
    snaps
        .iter()
        .find(|s| removal_pending(s, name))
        .unwrap_or_else(|| panic!("no point between {name}'s removal and the directory fsync"))
        .kill_image()
}

#[test]
fn a_marker_removed_by_a_killed_sync_does_not_come_back() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &opts(Durability::AtSync), common::sim(&v)).unwrap();
    app(&e, 0);
    app(&e, 9);
    e.sync().unwrap();
    e.delete(&[1]).unwrap(); // arms the marker, naming length 2
    app(&e, 1);
    app(&e, 2);
    let killed = killed_with_pending_removal(&during(&v, || e.sync().unwrap()), "durable.zr");
    std::mem::forget(e);

    let mut b = open(&killed, OpenMode::ReadWrite).unwrap();
    assert_eq!(tags(&b), [0, 1, 2]);
    b.set_durability(Durability::EachAppend).unwrap();
    app(&b, 3); // no new file: no directory fsync of its own
    b.sync().unwrap();
    b.close().unwrap();

    let r = open(&killed.snapshot().crash_image(0), OpenMode::ReadWrite).unwrap();
    assert_eq!(tags(&r), [0, 1, 2, 3]);
}

#[test]
fn a_stale_marker_cannot_make_the_store_unopenable() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &opts(Durability::AtSync), common::sim(&v)).unwrap();
    app(&e, 0);
    app(&e, 1);
    app(&e, 7);
    e.sync().unwrap();
    e.delete(&[2]).unwrap(); // arms the marker, naming length 3
    app(&e, 2);
    let killed = killed_with_pending_removal(&during(&v, || e.sync().unwrap()), "durable.zr");
    std::mem::forget(e);

    let mut b = open(&killed, OpenMode::ReadWrite).unwrap();
    b.set_durability(Durability::EachAppend).unwrap();
    b.delete(&[2, 1]).unwrap(); // tail only: one header write
    app(&b, 9); // lands past the marker's frontier
    b.close().unwrap();

    let r = open(&killed.snapshot().crash_image(0), OpenMode::ReadWrite).unwrap();
    assert_eq!(tags(&r), [0, 9]);
}

#[test]
fn a_delete_intent_removed_by_a_killed_delete_is_not_replayed() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &opts(Durability::EachAppend), common::sim(&v)).unwrap();
    for k in 0..6 {
        app(&e, k);
    }
    // A swap-last delete goes through intent.zr.
    let killed = killed_with_pending_removal(&during(&v, || e.delete(&[1]).unwrap()), "intent.zr");
    std::mem::forget(e);

    let mut b = open(&killed, OpenMode::ReadWrite).unwrap();
    assert_eq!(tags(&b), [0, 5, 2, 3, 4]);
    b.set_durability(Durability::EachAppend).unwrap();
    app(&b, 7); // no new file
    b.close().unwrap();

    let r = open(&killed.snapshot().crash_image(0), OpenMode::ReadWrite).unwrap();
    assert_eq!(tags(&r), [0, 5, 2, 3, 4, 7]);
}

#[test]
fn a_move_intent_removed_by_a_killed_compaction_cannot_revive_a_deleted_record() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &opts(Durability::EachAppend), common::sim(&v)).unwrap();
    for r in [vec![0u8; 20], vec![1u8; 40]] {
        e.append_var(&r, &[0, r.len()]).unwrap();
    }
    e.delete(&[0]).unwrap();
    // Record 1 moves to 0..40, over its own bytes: through intent.zr.
    let killed = killed_with_pending_removal(&during(&v, || e.compact().unwrap()), "intent.zr");
    std::mem::forget(e);

    let mut b = open(&killed, OpenMode::ReadWrite).unwrap();
    assert_eq!(read_all(&b).unwrap(), [vec![1u8; 40]]);
    b.set_durability(Durability::EachAppend).unwrap();
    b.delete(&[0]).unwrap();
    b.append_var(&[7u8; 25], &[0, 25]).unwrap();
    b.close().unwrap();

    let r = open(&killed.snapshot().crash_image(0), OpenMode::ReadWrite).unwrap();
    assert_eq!(read_all(&r).unwrap(), [vec![7u8; 25]]);
    assert!(r.verify().unwrap().is_ok());
}

#[test]
fn a_marker_removed_by_a_killed_recovering_open_does_not_come_back() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &opts(Durability::AtSync), common::sim(&v)).unwrap();
    app(&e, 0);
    app(&e, 9);
    e.sync().unwrap();
    e.delete(&[1]).unwrap(); // arms the marker
    app(&e, 1);
    app(&e, 2);
    let first = v.snapshot().kill_image();
    std::mem::forget(e);
    // The read-write open settles the marker; kill it inside that.
    let snaps = during(&first, || drop(open(&first, OpenMode::ReadWrite).unwrap()));
    let killed = killed_with_pending_removal(&snaps, "durable.zr");

    let mut c = open(&killed, OpenMode::ReadWrite).unwrap();
    assert_eq!(tags(&c), [0, 1, 2]);
    c.set_durability(Durability::EachAppend).unwrap();
    app(&c, 3);
    c.close().unwrap();

    let r = open(&killed.snapshot().crash_image(0), OpenMode::ReadWrite).unwrap();
    assert_eq!(tags(&r), [0, 1, 2, 3]);
}

#[test]
fn a_failed_directory_fsync_in_sync_leaves_no_stale_marker_behind_the_reopen() {
    // No kill: sync()'s last directory fsync fails, the caller reopens.
    for call in 0..40u64 {
        let v = SimVfs::new();
        let e = Engine::create_with(DIR, &opts(Durability::AtSync), common::sim(&v)).unwrap();
        app(&e, 0);
        e.sync().unwrap();
        app(&e, 1);
        v.fail_at(Some(call));
        let failed = e.sync().is_err();
        v.fail_at(None);
        if !(failed && removal_pending(&v.snapshot(), "durable.zr")) {
            continue;
        }
        drop(e);
        let mut b = open(&v, OpenMode::ReadWrite).unwrap();
        let mut want = tags(&b);
        b.set_durability(Durability::EachAppend).unwrap();
        app(&b, 5);
        want.push(5);
        b.close().unwrap();
        let r = open(&v.snapshot().crash_image(0), OpenMode::ReadWrite).unwrap();
        assert_eq!(tags(&r), want, "failing call {call}");
        return;
    }
    panic!("no failing call left the marker's removal pending");
}

#[test]
fn a_compaction_after_a_killed_compaction_is_durable_when_it_returns() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &opts(Durability::EachAppend), common::sim(&v)).unwrap();
    for r in [vec![0u8; 45], vec![1u8; 30], vec![2u8; 30]] {
        e.append_var(&r, &[0, r.len()]).unwrap();
    }
    e.delete(&[0]).unwrap();
    // Two moves without an intent (no overlap with their own bytes).
    let snaps = during(&v, || e.compact().unwrap());
    std::mem::forget(e);
    for (point, s) in snaps.iter().enumerate() {
        let killed = s.kill_image();
        let mut b = open(&killed, OpenMode::ReadWrite).unwrap();
        let seen = read_all(&b).unwrap();
        assert_eq!(seen, [vec![2u8; 30], vec![1u8; 30]]);
        b.compact().unwrap();
        drop(b);
        match open(&killed.snapshot().crash_image(0), OpenMode::ReadWrite) {
            Ok(r) => assert_eq!(read_all(&r).unwrap(), seen, "point {point}"),
            Err(err) => panic!("point {point}: {err}"),
        }
    }
}

/// Every kill point of a mixed workload, then a handle that runs durable
/// follow-ups (each-append) and closes, with and without a final `sync()`,
/// then power cuts: each must open to exactly what that handle saw.
#[test]
fn work_done_after_any_kill_survives_a_power_cut() {
    let mut scenarios = 0;
    for durability in [Durability::EachAppend, Durability::AtSync] {
        for (codec, seed) in [(Codec::Raw, 1), (Codec::Zstd, 2), (Codec::Raw, 3)] {
            scenarios += kill_then_cut(codec, seed, durability);
        }
    }
    eprintln!("{scenarios} power-cut images after a kill and a follow-up");
    assert!(scenarios > 10_000, "{scenarios}");
}

fn kill_then_cut(codec: Codec, seed: u64, durability: Durability) -> usize {
    let mut rng = Rng(seed);
    let mut model = Vec::new();
    let script: Vec<Op> = (0..24)
        .map(|step| {
            let op = match step {
                s if s % 8 == 7 => Op::Compact,
                s if s % 5 == 4 => Op::Sync,
                _ => random_op(&mut rng, model.len(), 40),
            };
            apply(&mut model, &op);
            op
        })
        .collect();
    let v = SimVfs::new();
    let o = CreateOptions {
        durability,
        ..CreateOptions::new(codec)
    };
    let mut e = Engine::create_with(DIR, &o, common::sim(&v)).unwrap();
    let snaps = during(&v, || {
        for op in &script {
            run(&mut e, op).unwrap();
        }
    });
    std::mem::forget(e);
    let mut n = 0;
    for (point, s) in snaps.iter().enumerate() {
        let killed = s.kill_image();
        let Ok(len) = open(&killed, OpenMode::ReadOnly).map(|r| r.len()) else {
            continue; // a kill inside the creation itself
        };
        let mut followups = vec![
            vec![Op::Var(vec![b"each-append".to_vec()])],
            vec![Op::Compact],
            vec![
                Op::Var(vec![b"B1".to_vec()]),
                Op::Compact,
                Op::Var(vec![b"B2".to_vec()]),
            ],
        ];
        if len > 0 {
            followups.push(vec![
                Op::Delete(vec![len - 1], 1),
                Op::Var(vec![b"B3".to_vec()]),
            ]);
            followups.push(vec![Op::Delete(vec![0], 1), Op::Compact]);
        }
        for (f, ops) in followups.iter().enumerate() {
            for final_sync in [true, false] {
                let img = killed.fork();
                let mut b = open(&img, OpenMode::ReadWrite)
                    .unwrap_or_else(|err| panic!("point {point}: reopen after the kill: {err}"));
                b.set_durability(Durability::EachAppend).unwrap();
                for op in ops {
                    run(&mut b, op).unwrap();
                }
                let view = read_all(&b).unwrap();
                if final_sync {
                    b.sync().unwrap();
                }
                b.close().unwrap();
                let after = img.snapshot();
                for cut in 0..3u64 {
                    n += 1;
                    let at = format!(
                        "{codec:?} {durability:?} seed {seed} point {point} follow-up {f} \
                         sync {final_sync} cut {cut}"
                    );
                    let r = open(
                        &after.crash_image(cut * 31 + point as u64 % 7),
                        OpenMode::ReadWrite,
                    )
                    .unwrap_or_else(|err| panic!("{at}: {err}"));
                    assert_eq!(read_all(&r).unwrap(), view, "{at}");
                    assert!(r.verify().unwrap().is_ok(), "{at}");
                }
            }
        }
    }
    n
}
