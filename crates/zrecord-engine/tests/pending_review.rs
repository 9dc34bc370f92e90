//! Review of the pending-appends record (`durable.zr`, version 2): kills,
//! power cuts and failed calls around deferred appends, their sync, the
//! open that adopts them and the deletes that arm the marker after them;
//! and a `meta.zr` whose write-back a failed fsync lost before a same-boot
//! reopen (the disk then holds an older header than the cache, and
//! pending appends leave `meta.zr` alone until their sync).

mod common;
use common::workload::read_all;
use common::{at_sync, tagged};
use std::path::Path;
use zrecord_engine::sim::{SimVfs, Snapshot};
use zrecord_engine::{Codec, Engine, EngineConfig, OpenMode};

const DIR: &str = "/s";

/// A store's records, in index order.
type Records = Vec<Vec<u8>>;

fn cfg(v: &SimVfs) -> EngineConfig {
    common::sim(v)
}

fn append(e: &Engine, ks: std::ops::Range<u8>) {
    for k in ks {
        e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
    }
}

fn tags(ks: std::ops::Range<u8>) -> Vec<Vec<u8>> {
    ks.map(tagged).collect()
}

fn during(v: &SimVfs, f: impl FnOnce()) -> Vec<Snapshot> {
    v.record(true);
    f();
    v.record(false);
    v.take_snapshots()
}

/// Six synced, three pending, killed (160-byte chunks).
fn killed_pending() -> SimVfs {
    common::killed_with_appends_pending(Path::new(DIR), cfg).0
}

fn open_ok(v: &SimVfs, mode: OpenMode, what: &str) -> Vec<Vec<u8>> {
    let r = Engine::open_with(DIR, mode, cfg(v)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let rep = r.verify().unwrap();
    assert!(rep.is_ok(), "{what}: {rep:?}");
    read_all(&r).unwrap()
}

/// Opens `img` read-write (see [`open_ok`]) and checks it holds the six
/// synced records or all nine of [`killed_pending`].
fn synced_or_all(img: &SimVfs, what: &str) {
    let got = open_ok(img, OpenMode::ReadWrite, what);
    assert!(
        got == tags(0..6) || got == tags(0..9),
        "{what}: {}",
        got.len()
    );
}

#[test]
fn probe_kill_and_power_cut_at_every_point_of_an_adopting_open() {
    let killed = killed_pending();
    let snaps = during(&killed, || {
        let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&killed)).unwrap();
        assert_eq!(read_all(&r).unwrap(), tags(0..9));
        drop(r);
    });
    assert!(snaps.len() > 3);
    for (i, s) in snaps.iter().enumerate() {
        let got = open_ok(&s.kill_image(), OpenMode::ReadWrite, &format!("kill {i}"));
        assert_eq!(got, tags(0..9), "kill at {i}");
        for seed in 0..10 {
            synced_or_all(&s.crash_image(seed), &format!("cut {i}/{seed}"));
        }
    }
    // Once the open returned: durable.
    for seed in 0..10 {
        let got = open_ok(
            &killed.snapshot().crash_image(seed),
            OpenMode::ReadWrite,
            "after",
        );
        assert_eq!(got, tags(0..9), "seed {seed}");
    }
}

#[test]
fn probe_failed_adopting_open_then_kill_or_power_cut() {
    let killed = killed_pending();
    for n in 0..80 {
        let img = killed.fork();
        img.fail_at(Some(n));
        let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&img));
        img.fail_at(None);
        if let Ok(r) = r {
            assert_eq!(read_all(&r).unwrap(), tags(0..9));
            continue;
        }
        let at = img.snapshot();
        synced_or_all(&at.kill_image(), &format!("failed {n}"));
        for seed in 0..10 {
            synced_or_all(&at.crash_image(seed), &format!("{n}/{seed}"));
        }
    }
}

#[test]
fn probe_kill_and_cut_at_every_point_of_appends_sync_and_delete() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(&v)).unwrap();
    append(&e, 0..6);
    e.sync().unwrap();
    // Points and the states a kill there may show / a cut may show.
    let mut pts: Vec<(Snapshot, Vec<Records>, Vec<Records>)> = Vec::new();
    let mut push = |snaps: Vec<Snapshot>, kill: Vec<Records>, cut: Vec<Records>| {
        for s in snaps {
            pts.push((s, kill.clone(), cut.clone()));
        }
    };
    let s6 = tags(0..6);
    let mut prev = s6.clone();
    for k in 6..9u8 {
        let snaps = during(&v, || append(&e, k..k + 1));
        let mut next = prev.clone();
        next.push(tagged(k));
        push(snaps, vec![prev.clone(), next.clone()], vec![s6.clone()]);
        prev = next;
    }
    let s9 = prev.clone();
    let snaps = during(&v, || e.sync().unwrap());
    push(snaps, vec![s9.clone()], vec![s6.clone(), s9.clone()]);
    append(&e, 9..11);
    let s11 = tags(0..11);
    let mut d = s11.clone();
    d.swap_remove(2);
    let snaps = during(&v, || e.delete(&[2]).unwrap());
    push(
        snaps,
        vec![s11.clone(), d.clone()],
        vec![s9.clone(), s11.clone(), d.clone()],
    );
    append(&e, 11..12);
    let mut d2 = d.clone();
    d2.push(tagged(11));
    let snaps = during(&v, || e.sync().unwrap());
    push(
        snaps,
        vec![d2.clone()],
        vec![s11.clone(), d.clone(), d2.clone()],
    );
    let snaps = during(&v, || append(&e, 12..13));
    let mut d3 = d2.clone();
    d3.push(tagged(12));
    push(snaps, vec![d2.clone(), d3.clone()], vec![d2.clone()]);
    std::mem::forget(e);
    for (i, (s, kill, cut)) in pts.iter().enumerate() {
        let got = open_ok(&s.kill_image(), OpenMode::ReadWrite, &format!("kill {i}"));
        assert!(kill.contains(&got), "kill {i}: {} records", got.len());
        for seed in 0..8 {
            let img = s.crash_image(seed);
            let got = open_ok(&img, OpenMode::ReadOnly, &format!("ro cut {i}/{seed}"));
            assert!(
                cut.contains(&got),
                "ro cut {i}/{seed}: {} records",
                got.len()
            );
            let got = open_ok(&img, OpenMode::ReadWrite, &format!("cut {i}/{seed}"));
            assert!(cut.contains(&got), "cut {i}/{seed}: {} records", got.len());
        }
    }
}

/// Random ops on a chain of handles over one simulated disk, with kills,
/// power cuts, read-only opens of kill images and failed calls between.
#[test]
fn probe_random_chain() {
    use common::Rng;
    use common::workload::{Op, apply, random_op, run};
    for seed in 0..60u64 {
        let mut rng = Rng(seed + 1000);
        let mut v = SimVfs::new();
        let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(&v)).unwrap();
        let mut model: Vec<Vec<u8>> = Vec::new();
        // Records a power cut may leave: from the last durable one on.
        let mut allowed: Vec<Vec<Vec<u8>>> = vec![model.clone()];
        for step in 0..120 {
            let what = format!("seed {seed} step {step}");
            let op = random_op(&mut rng, model.len(), 40);
            // Failures in any op (compactions and deletes included since
            // `writeback.zr`: their failed loc fsyncs broke later cuts).
            let inject = rng.below(12) == 0;
            if inject {
                v.fail_at(Some(rng.below(25)));
            }
            let r = run(&mut e, &op);
            v.fail_at(None);
            let mut after = model.clone();
            apply(&mut after, &op);
            match r {
                Ok(()) => {
                    model = after;
                    if matches!(op, Op::Sync | Op::Compact) {
                        allowed = vec![model.clone()];
                    } else {
                        allowed.push(model.clone());
                    }
                }
                Err(_) => {
                    // Poisoned (or not): a same-boot reopen shows a state
                    // from the last durable one on, or the failed op's.
                    allowed.push(after);
                    std::mem::forget(e);
                    let got = open_ok(&v, OpenMode::ReadWrite, &what);
                    assert!(allowed.contains(&got), "{what}: after failed {op:?}");
                    model = got;
                    allowed = vec![model.clone()];
                    e = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v)).unwrap();
                    assert_eq!(read_all(&e).unwrap(), model, "{what}");
                    continue;
                }
            }
            match rng.below(10) {
                0 => {
                    // Kill: every returned op stands.
                    let k = v.snapshot().kill_image();
                    std::mem::forget(e);
                    let got = open_ok(&k, OpenMode::ReadOnly, &what);
                    assert_eq!(got, model, "{what}: kill, read-only");
                    v = k;
                    e = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v)).unwrap();
                    assert_eq!(read_all(&e).unwrap(), model, "{what}: kill");
                    allowed = vec![model.clone()];
                }
                1 => {
                    let c = v.snapshot().crash_image(rng.next());
                    std::mem::forget(e);
                    v = c;
                    let got = open_ok(&v, OpenMode::ReadOnly, &what);
                    assert!(allowed.contains(&got), "{what}: cut, read-only");
                    e = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v)).unwrap();
                    let got = read_all(&e).unwrap();
                    assert!(allowed.contains(&got), "{what}: cut");
                    model = got;
                    allowed = vec![model.clone()];
                }
                _ => {}
            }
        }
    }
}

/// Short random workloads with failed calls, kills and power cuts between
/// ops, then power cuts: every image opens, and verifies clean.
#[test]
fn probe_short_workloads_then_power_cuts() {
    // Failures as in `probe_random_chain`.
    let found = common::workload::short_workloads_then_power_cuts(
        0..4000,
        Path::new(DIR),
        cfg,
        true,
        |rng, _| (rng.below(5) == 0).then(|| rng.below(25)),
    );
    assert_eq!(found, 0);
}

fn meta_cached_and_on_disk(v: &SimVfs) -> (Vec<u8>, Vec<u8>) {
    let p = Path::new(DIR).join("meta.zr");
    let cut = v.snapshot().crash_image(0);
    (v.read_file(&p).unwrap(), cut.read_file(&p).unwrap())
}

/// For each of the first `calls` I/O calls: the store `make` builds, then
/// `op` failing at that call. Where the failure left `meta.zr` on disk
/// older than in the cache, a reopen on the same boot must hold `after`;
/// it appends `extra` (deferred) and is killed, and every power cut then
/// opens to `after`, `after` plus `extra`, or one of `also`. Returns how
/// many calls lost the write-back.
fn reopen_after_a_lost_meta_write_back(
    calls: u64,
    make: impl Fn(&SimVfs) -> Engine,
    op: impl Fn(&mut Engine) -> zrecord_engine::Result<()>,
    after: &Records,
    extra: std::ops::Range<u8>,
    also: &[Records],
) -> usize {
    let mut seen = 0;
    for n in 0..calls {
        let v = SimVfs::new();
        let mut e = make(&v);
        v.fail_at(Some(n));
        let r = op(&mut e);
        v.fail_at(None);
        let (cached, disk) = meta_cached_and_on_disk(&v);
        if r.is_ok() || cached == disk {
            continue;
        }
        seen += 1;
        std::mem::forget(e);
        let e = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v)).unwrap();
        assert_eq!(&read_all(&e).unwrap(), after, "call {n}: the reopen");
        append(&e, extra.clone());
        let mut all = after.clone();
        all.extend(tags(extra.clone()));
        let at = v.snapshot();
        std::mem::forget(e);
        for seed in 0..12 {
            let got = open_ok(
                &at.crash_image(seed),
                OpenMode::ReadWrite,
                &format!("{n}/{seed}"),
            );
            assert!(
                got == *after || got == all || also.contains(&got),
                "call {n}, seed {seed}: {got:?}"
            );
        }
    }
    seen
}

/// An each-append delete of the last record whose `meta.zr` fsync fails
/// (the kernel then calls the page clean: the shorter length stays in the
/// cache, the disk keeps the longer one); a reopen on the same boot, a
/// deferred append, a power cut. The append went to slot 5, which the
/// `meta.zr` on disk still names, and `meta.zr` was never rewritten.
#[test]
fn a_meta_write_back_lost_before_a_reopen_cannot_garble_or_break_a_power_cut() {
    let make = |v: &SimVfs| {
        let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(v)).unwrap();
        append(&e, 0..6);
        e.sync().unwrap();
        e.set_durability(zrecord_engine::Durability::EachAppend)
            .unwrap();
        e
    };
    // The state before the failed delete is one the reopen's caller was
    // never shown, but a failed op may leave it.
    let seen = reopen_after_a_lost_meta_write_back(
        12,
        make,
        |e| e.delete(&[5]),
        &tags(0..5),
        9..10,
        &[tags(0..6)],
    );
    assert!(seen > 0, "no failed meta.zr write-back");
}

/// The same through a compaction whose final `meta.zr` fsync fails: the
/// disk keeps the header naming `1.chunk`, which the compaction emptied of
/// live records in the cache only; a same-boot reopen's append then
/// recreates (truncates) `1.chunk`, and a power cut left a store that did
/// not open.
#[test]
fn a_compaction_whose_header_write_back_failed_cannot_break_a_power_cut() {
    let make = |v: &SimVfs| {
        let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(v)).unwrap();
        append(&e, 0..6); // 30..35 bytes each: chunks 0 and 1 (160 bytes)
        e.delete(&[0, 1, 2]).unwrap();
        e.sync().unwrap();
        e
    };
    let model = read_all(&make(&SimVfs::new())).unwrap();
    let seen = reopen_after_a_lost_meta_write_back(200, make, |e| e.compact(), &model, 6..9, &[]);
    assert!(seen > 0, "no failed meta.zr write-back");
}

/// Our writer killed with three appends pending, then loaderx 1.7.2 (which
/// takes no lock and ignores `durable.zr`) killed in the middle of an
/// append over the same frontier: its bytes and entry written, its
/// `meta.zr` not. `meta.zr` is still the base the record names, so the open
/// took the appends' header over the reference's uncommitted entry: slot 6
/// read the reference's record (which never committed) and slot 7 bytes the
/// two share. Before 9a72b0d `meta.zr` named our appends and the reference
/// appended after them. The open now checks that the appended entries lie
/// where the appends placed them; a foreign record as long as ours still
/// passes (only a checksum of the appended bytes could tell).
#[test]
fn a_foreign_append_killed_before_its_header_is_not_taken_for_ours() {
    let cfg8 = common::sim_8k_chunks;
    let (killed, _) = common::killed_with_appends_pending(Path::new(DIR), cfg8);
    // The reference's append, killed before `meta.zr`: bytes and entry only.
    let meta = killed.read_file(&Path::new(DIR).join("meta.zr")).unwrap();
    let ours = killed.read_file(&Path::new(DIR).join("0.chunk")).unwrap();
    common::append_by_hand(&killed, Path::new(DIR), 4, &[42; 50]);
    let mut chunk = killed.read_file(&Path::new(DIR).join("0.chunk")).unwrap();
    if chunk.len() < ours.len() {
        chunk.extend_from_slice(&ours[chunk.len()..]);
    }
    killed.write_file(&Path::new(DIR).join("0.chunk"), &chunk);
    killed.write_file(&Path::new(DIR).join("meta.zr"), &meta);
    let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg8(&killed)).unwrap();
    let got = read_all(&r).unwrap();
    assert!(r.verify().unwrap().is_ok(), "records share bytes");
    assert!(got == tags(0..6) || got == tags(0..9), "{got:?}");
}

/// One thread appends, one syncs, one gathers; kill images taken meanwhile
/// hold every append that had returned, in order, and power-cut images a
/// prefix at least as long as the last sync that had returned.
#[test]
fn probe_threads_append_sync_gather_then_kills() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let v = SimVfs::new();
    let e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(&v)).unwrap();
    let (returned, synced, stop) = (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    // Images taken so far: the appender waits for one every 50 appends, so
    // a busy box cannot let it finish before any is taken.
    let taken = AtomicU64::new(0);
    let rec = |k: u64| vec![(k % 251) as u8; 1 + (k % 37) as usize];
    let mut images = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            for k in 0..400u64 {
                while k % 50 == 49 && taken.load(Ordering::Acquire) <= k / 50 {
                    std::thread::yield_now();
                }
                let r = rec(k);
                e.append_var(&r, &[0, r.len()]).unwrap();
                returned.store(k + 1, Ordering::Release);
            }
            stop.store(true, Ordering::Release);
        });
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                let n = returned.load(Ordering::Acquire);
                e.sync().unwrap();
                synced.store(n, Ordering::Release);
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                let n = e.len();
                if n > 0 {
                    let mut lens = [0u64];
                    e.record_lengths(&[n - 1], &mut lens, None).unwrap();
                }
            }
        });
        while !stop.load(Ordering::Acquire) {
            let (r, sy) = (
                returned.load(Ordering::Acquire),
                synced.load(Ordering::Acquire),
            );
            images.push((v.snapshot(), r, sy));
            taken.fetch_add(1, Ordering::Release);
            std::thread::yield_now();
        }
    });
    std::mem::forget(e);
    assert!(images.len() > 3);
    let check = |img: &SimVfs, at_least: u64, what: &str| {
        let got = open_ok(img, OpenMode::ReadOnly, what);
        assert!(
            got.len() as u64 >= at_least,
            "{what}: {} < {at_least}",
            got.len()
        );
        for (k, r) in got.iter().enumerate() {
            assert_eq!(*r, rec(k as u64), "{what}: record {k}");
        }
    };
    for (i, (s, r, sy)) in images.iter().enumerate().step_by(7) {
        check(&s.kill_image(), *r, &format!("kill {i}"));
        check(&s.crash_image(i as u64 + 2), *sy, &format!("cut {i}"));
    }
}
