//! Review of the kept `durable.zr` (a sync zeroes the marker's first
//! sector and the handle reuses the file, salting the next marker's log):
//! random chains of deferred deletes and syncs, appends, compactions,
//! durability switches, verifies, closes, failures at any call, kills and
//! read-only opens, then power cuts at every point; a script over a kept
//! file failed at each of its calls, or killed before each, then reopened
//! on the same boot, worked on, and cut; and a second marker whose records
//! line up with the first one's past the zeroed sector (fails without the
//! salt). Every image must open, verify clean and hold a state from the
//! last durable point on; a reopen after a kill, the killed op's state
//! before or after.
//!
//! Knobs: `KM_SEED=n` runs only seed n, `KM_SEEDS_X=k` k times the seeds.

mod common;
use common::Rng;
use common::workload::{Op, apply, random_op, read_all, run};
use zrecord_engine::sim::{SimVfs, Snapshot};
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, OpenMode};

const DIR: &str = "/s";

type Model = Vec<Vec<u8>>;

/// A snapshot and the states a power cut there may leave: `states[lo..hi]`.
struct Cut {
    snap: Snapshot,
    lo: usize,
    hi: usize,
    what: String,
}

struct Chain {
    v: SimVfs,
    states: Vec<Model>,
    durable: usize,
    cuts: Vec<Cut>,
    log: Vec<String>,
    /// Ops after which the handle kept a file with a log past its first
    /// sector (the case the salt is for).
    kept_seen: u64,
    /// After a kill: the first state the reopen may hold (the page cache
    /// holds every write, so nothing that returned is lost).
    floor: Option<usize>,
}

impl Chain {
    fn take(&mut self, what: &str) -> Vec<Snapshot> {
        let s = self.v.take_snapshots();
        let hi = self.states.len();
        for x in &s {
            self.cuts.push(Cut {
                snap: x.clone(),
                lo: self.durable,
                hi,
                what: format!("{what} (log {})", self.log.len()),
            });
        }
        s
    }

    fn allowed(&self, lo: usize, hi: usize, m: &Model) -> bool {
        let a = &self.states[lo..hi];
        // A large each-append commit lands in pieces: a prefix of a later
        // state that extends an earlier one.
        a.iter()
            .any(|s| s.len() >= m.len() && s[..m.len()] == m[..])
            && a.iter()
                .any(|s| m.len() >= s.len() && m[..s.len()] == s[..])
    }

    /// A handle gone (failed, killed, closed): reopen until it works, now
    /// and then with a failure or a read-only look first.
    fn reopen(&mut self, rng: &mut Rng, seed: u64) -> Engine {
        loop {
            if rng.below(4) == 0 {
                let r = Engine::open_with(DIR, OpenMode::ReadOnly, common::sim(&self.v));
                if let Ok(h) = &r {
                    let m = read_all(h).unwrap();
                    assert!(
                        self.allowed(self.durable, self.states.len(), &m),
                        "seed {seed}: a read-only open holds a state no handle saw\n{:#?}",
                        self.log
                    );
                }
                drop(r);
                self.log.push("READ-ONLY".into());
            }
            let f = (rng.below(3) == 0).then(|| rng.below(30));
            self.v.fail_at(f);
            let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&self.v));
            self.v.fail_at(None);
            self.log
                .push(format!("REOPEN fail {f:?} {:?}", r.as_ref().err()));
            let snaps = self.take("reopen");
            if let Ok(h) = r {
                if rng.below(5) == 0 && !snaps.is_empty() {
                    let s = snaps[rng.below(snaps.len() as u64) as usize].clone();
                    std::mem::forget(h);
                    self.v = s.kill_image();
                    self.v.record(true);
                    self.log.push("KILL REOPEN".into());
                    continue;
                }
                let m = read_all(&h).unwrap();
                let rep = h.verify().unwrap();
                assert!(
                    rep.is_ok(),
                    "seed {seed}: reopen verifies {rep:?}\n{:#?}",
                    self.log
                );
                let lo = self.floor.take().unwrap_or(self.durable);
                assert!(
                    self.allowed(lo, self.states.len(), &m),
                    "seed {seed}: the reopen holds a state no handle saw: {} records (from {lo}, durable {}, lengths {:?})\n{:#?}",
                    m.len(),
                    self.durable,
                    self.states.iter().map(|s| s.len()).collect::<Vec<_>>(),
                    self.log
                );
                self.states.push(m);
                self.durable = self.states.len() - 1;
                return h;
            }
            // A failed open may leave its own failure in the cache: a
            // poisoned writer's (no settle), like a kill. Its settle's
            // failure goes back to the durable point (and says so).
            self.floor = None;
        }
    }
}

fn chain(seed: u64, opts: &CreateOptions) -> Chain {
    let mut rng = Rng(seed);
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, opts, common::sim(&v)).unwrap();
    v.record(true);
    let mut c = Chain {
        v,
        states: vec![Vec::new()],
        durable: 0,
        cuts: Vec::new(),
        log: Vec::new(),
        kept_seen: 0,
        floor: None,
    };
    let n = 10 + rng.below(30);
    for _ in 0..n {
        let cur = c.states.last().unwrap().clone();
        let kind = rng.below(20);
        let op = match kind {
            0..=6 if cur.len() > 8 => {
                let groups = cur.len() as u64;
                let k = 1 + rng.below(6);
                Op::Delete((0..k).map(|_| rng.below(groups)).collect(), 1)
            }
            7..=9 => Op::Sync,
            10 => Op::Compact,
            11..=15 => Op::Var(
                (0..4 + rng.below(12))
                    .map(|_| {
                        let t = rng.next() as u8;
                        vec![t; 1 + rng.below(24) as usize]
                    })
                    .collect(),
            ),
            _ => random_op(&mut rng, cur.len(), 40),
        };
        let special = rng.below(26);
        let fail = (rng.below(5) == 0).then(|| rng.below(25));
        c.v.fail_at(fail);
        let r = match special {
            0 => e
                .verify()
                .map(|rep| assert!(fail.is_some() || rep.is_ok(), "{rep:?}")),
            1 => e.set_durability(Durability::EachAppend),
            2 => e.set_durability(Durability::AtSync),
            3 => e.compact_steps(1 + rng.below(3)).map(|_| ()),
            _ => run(&mut e, &op),
        };
        c.v.fail_at(None);
        let mut after = cur.clone();
        if special > 3 {
            apply(&mut after, &op);
        }
        let desc = match special {
            0 => "Verify".to_string(),
            1 => "EachAppend".to_string(),
            2 => "AtSync".to_string(),
            3 => "CompactSteps".to_string(),
            _ => format!("{op:?}"),
        };
        c.log.push(
            format!("{desc} fail {fail:?} {:?}", r.as_ref().err())
                .chars()
                .take(140)
                .collect(),
        );
        c.states.push(after);
        // A kept file whose earlier log runs past its zeroed sector.
        if let Some(b) = c.v.read_file(std::path::Path::new("/s/durable.zr"))
            && b.len() > 560
            && b[..8].iter().all(|&x| x == 0)
        {
            c.kept_seen += 1;
        }
        let snaps = c.take(&desc);
        let durable_op = special == 1
            || special == 3
            || (special > 3 && matches!(op, Op::Sync | Op::Compact))
            || (special > 3 && e.durability() == Durability::EachAppend);
        let kill = r.is_ok() && !snaps.is_empty() && rng.below(8) == 0;
        if r.is_ok() && durable_op && !kill {
            c.durable = c.states.len() - 1;
        }
        if r.is_ok() && !kill {
            if rng.below(10) == 0 {
                // Close and reopen (the kept file removed at drop).
                let r = e.close();
                c.log.push(format!("CLOSE {:?}", r.as_ref().err()));
                c.take("close");
                if r.is_ok() {
                    c.durable = c.states.len() - 1;
                }
                e = c.reopen(&mut rng, seed);
            }
            continue;
        }
        std::mem::forget(e);
        if kill {
            let s = snaps[rng.below(snaps.len() as u64) as usize].clone();
            c.v = s.kill_image();
            c.v.record(true);
            c.log.push("KILL".into());
            c.floor = Some(c.states.len() - 2);
        }
        e = c.reopen(&mut rng, seed);
    }
    c.cuts.push(Cut {
        snap: c.v.snapshot(),
        lo: c.durable,
        hi: c.states.len(),
        what: "end".into(),
    });
    std::mem::forget(e);
    c
}

fn check(opts: &CreateOptions, seeds: std::ops::Range<u64>) {
    let k: u64 = std::env::var("KM_SEEDS_X")
        .ok()
        .and_then(|x| x.parse().ok())
        .unwrap_or(1);
    let seeds = seeds.start * k..seeds.end * k;
    let seeds = match std::env::var("KM_SEED").ok().and_then(|x| x.parse().ok()) {
        Some(x) if seeds.contains(&x) => x..x + 1,
        Some(_) => 0..0,
        None => seeds,
    };
    let mut bad = 0;
    let mut images = 0;
    let mut kept = 0;
    for seed in seeds {
        let c = chain(seed, opts);
        kept += c.kept_seen;
        for (i, cut) in c.cuts.iter().enumerate() {
            for cs in [0, 1, 2 + seed * 7 + i as u64] {
                for unordered in [false, true] {
                    images += 1;
                    let img = if unordered {
                        cut.snap.crash_image_unordered(cs)
                    } else {
                        cut.snap.crash_image(cs)
                    };
                    let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img))
                        .and_then(|e| {
                            let rep = e.verify()?;
                            Ok((rep.is_ok(), read_all(&e)?))
                        });
                    let ok = matches!(&r, Ok((true, m)) if c.allowed(cut.lo, cut.hi, m));
                    if !ok {
                        bad += 1;
                        if bad <= 3 {
                            eprintln!(
                                "seed {seed} cut {i}/{} at {} ({}..{} of {} states) crash {cs} unordered {unordered}: {:?}\n{:#?}",
                                c.cuts.len(),
                                cut.what,
                                cut.lo,
                                cut.hi,
                                c.states.len(),
                                r.as_ref().map(|(v, m)| (v, m.len())),
                                c.log
                            );
                        }
                    }
                }
            }
        }
    }
    eprintln!("{images} images, {bad} bad, kept files with a log seen {kept}");
    assert!(kept > 10, "{kept}");
    assert_eq!(bad, 0);
}

fn opts(codec: Codec) -> CreateOptions {
    CreateOptions {
        durability: Durability::AtSync,
        ..CreateOptions::new(codec)
    }
}

#[test]
fn kept_marker_random_chains_survive_power_cuts_raw() {
    check(&opts(Codec::Raw), 0..60);
}

#[test]
fn kept_marker_random_chains_survive_power_cuts_zstd() {
    check(&opts(Codec::Zstd), 0..40);
}

fn vars(k: u8, n: u8) -> Op {
    Op::Var((k..k + n).map(|t| vec![t; 3 + t as usize % 20]).collect())
}

/// A script over a kept file (its first marker's log runs past the zeroed
/// sector), with the I/O call `fail` from its start failing; the handle
/// then goes (killed if `kill`) and a same-boot reopen (after a read-only
/// look) does more work. Returns the chain and whether the failure fired.
fn scripted(fail: u64, kill: bool, codec: Codec) -> (Chain, bool) {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &opts(codec), common::sim(&v)).unwrap();
    let mut model: Model = Vec::new();
    let mut pre = vec![vars(0, 40), Op::Sync];
    for g in [3u64, 17, 5, 20, 8, 1] {
        pre.push(Op::Delete(vec![g, g + 2, g + 9], 1));
    }
    pre.push(Op::Sync);
    for op in &pre {
        run(&mut e, op).unwrap();
        apply(&mut model, op);
    }
    let kept = v.read_file(std::path::Path::new("/s/durable.zr")).unwrap();
    assert!(kept.len() > 600 && kept[..512].iter().all(|&x| x == 0));
    v.record(true);
    let mut c = Chain {
        v,
        states: vec![model],
        durable: 0,
        cuts: Vec::new(),
        log: Vec::new(),
        kept_seen: 0,
        floor: None,
    };
    let script = vec![
        vars(50, 5),
        Op::Delete(vec![2, 7], 1),
        vars(60, 3),
        Op::Delete(vec![1, 4, 9], 1),
        Op::Sync,
        vars(70, 2),
        Op::Sync,
        Op::Delete(vec![0], 1),
        Op::Delete(vec![5, 6], 1),
        Op::Sync,
        Op::Compact,
        Op::Delete(vec![3], 1),
        vars(80, 2),
        Op::Sync,
    ];
    let start = c.v.calls();
    let mut fired = false;
    let mut rng = Rng(fail.wrapping_mul(31) + kill as u64);
    for op in &script {
        let done = c.v.calls() - start;
        c.v.fail_at(fail.checked_sub(done).filter(|&n| n < 1 << 40));
        let r = run(&mut e, op);
        c.v.fail_at(None);
        let mut after = c.states.last().unwrap().clone();
        apply(&mut after, op);
        c.log.push(
            format!("{op:?} {:?}", r.as_ref().err())
                .chars()
                .take(120)
                .collect(),
        );
        c.states.push(after);
        let snaps = c.take(&format!("{op:?}"));
        if r.is_ok() {
            if matches!(op, Op::Sync | Op::Compact) {
                c.durable = c.states.len() - 1;
            }
            continue;
        }
        fired = true;
        std::mem::forget(e);
        if kill && !snaps.is_empty() {
            c.v = snaps[snaps.len() - 1].kill_image();
            c.v.record(true);
            c.log.push("KILL".into());
        }
        e = c.reopen(&mut rng, fail);
        for op in [Op::Delete(vec![1, 2], 1), Op::Sync, vars(90, 2), Op::Sync] {
            run(&mut e, &op).unwrap();
            let mut after = c.states.last().unwrap().clone();
            apply(&mut after, &op);
            c.states.push(after);
            c.log.push(format!("{op:?}"));
            c.take(&format!("after {op:?}"));
            if matches!(op, Op::Sync) {
                c.durable = c.states.len() - 1;
            }
        }
        break;
    }
    drop(e);
    c.take("close");
    c.cuts.push(Cut {
        snap: c.v.snapshot(),
        lo: c.durable,
        hi: c.states.len(),
        what: "end".into(),
    });
    (c, fired)
}

fn check_scripted(codec: Codec) {
    let mut bad = 0;
    let mut fired = 0;
    for kill in [false, true] {
        for fail in 0..400 {
            let (c, f) = scripted(fail, kill, codec);
            if !f {
                break;
            }
            fired += 1;
            bad += bad_cuts(&c, &format!("fail {fail} kill {kill}"), fail);
        }
    }
    eprintln!("{fired} failures, {bad} bad");
    assert!(fired > 50);
    assert_eq!(bad, 0);
}

#[test]
fn kept_marker_failure_at_every_call_then_reopen_and_power_cuts_raw() {
    check_scripted(Codec::Raw);
}

#[test]
fn kept_marker_failure_at_every_call_then_reopen_and_power_cuts_zstd() {
    check_scripted(Codec::Zstd);
}

/// Power cuts of `c`'s cuts (a few seeds each, ordered and not): the
/// number that open to a state outside their range or fail to verify.
fn bad_cuts(c: &Chain, tag: &str, salt: u64) -> usize {
    let mut bad = 0;
    for (i, cut) in c.cuts.iter().enumerate() {
        for (cs, unordered) in [
            (0, false),
            (1, false),
            (2 + salt * 13 + i as u64, false),
            (3 + salt + i as u64, true),
        ] {
            {
                let img = if unordered {
                    cut.snap.crash_image_unordered(cs)
                } else {
                    cut.snap.crash_image(cs)
                };
                let r =
                    Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img)).and_then(|e| {
                        let rep = e.verify()?;
                        Ok((rep.is_ok(), read_all(&e)?))
                    });
                if !matches!(&r, Ok((true, m)) if c.allowed(cut.lo, cut.hi, m)) {
                    bad += 1;
                    if bad <= 2 {
                        eprintln!(
                            "{tag} cut {i}/{} at {} ({}..{}) crash {cs} unordered {unordered}: {:?}\n{:#?}",
                            c.cuts.len(),
                            cut.what,
                            cut.lo,
                            cut.hi,
                            r.as_ref().map(|(v, m)| (v, m.len())),
                            c.log
                        );
                    }
                }
            }
        }
    }
    bad
}

/// The script run whole, killed before each of its mutating calls: a
/// same-boot reopen (after a read-only look now and then), more deletes
/// and syncs, then power cuts at every point after.
fn kill_at_every_call(codec: Codec) {
    let (c, fired) = scripted(u64::MAX, false, codec);
    assert!(!fired);
    let mut bad = 0;
    for (j, cut) in c.cuts.iter().enumerate().take(c.cuts.len() - 1) {
        let mut k = Chain {
            v: cut.snap.kill_image(),
            states: c.states[..cut.hi].to_vec(),
            durable: cut.lo,
            cuts: Vec::new(),
            log: vec![format!("KILL at {j} ({})", cut.what)],
            kept_seen: 0,
            floor: None,
        };
        k.v.record(true);
        k.floor = Some(cut.hi - 2);
        let mut rng = Rng(j as u64);
        let mut e = k.reopen(&mut rng, j as u64);
        for op in [
            Op::Delete(vec![1, 2], 1),
            Op::Sync,
            Op::Delete(vec![0], 1),
            vars(90, 2),
            Op::Sync,
        ] {
            run(&mut e, &op).unwrap();
            let mut after = k.states.last().unwrap().clone();
            apply(&mut after, &op);
            k.states.push(after);
            k.log.push(format!("{op:?}"));
            k.take(&format!("after {op:?}"));
            if matches!(op, Op::Sync) {
                k.durable = k.states.len() - 1;
            }
        }
        drop(e);
        k.take("close");
        k.cuts.push(Cut {
            snap: k.v.snapshot(),
            lo: k.durable,
            hi: k.states.len(),
            what: "end".into(),
        });
        bad += bad_cuts(&k, &format!("kill {j}"), j as u64);
    }
    assert!(c.cuts.len() > 50, "{}", c.cuts.len());
    assert_eq!(bad, 0);
}

#[test]
fn kept_marker_kill_at_every_call_then_reopen_and_power_cuts_raw() {
    kill_at_every_call(Codec::Raw);
}

#[test]
fn kept_marker_kill_at_every_call_then_reopen_and_power_cuts_zstd() {
    kill_at_every_call(Codec::Zstd);
}

/// The case the salt is for: a kept file's second marker whose records
/// line up with the first one's (single-index deletes, records of equal
/// length), so that past its own log, which ends past the zeroed sector,
/// lie whole records of the first.
/// A kill after its delete keeps that delete (an open on this boot
/// finishes it), and a power cut at any point of it opens to the state
/// the first marker's sync made durable, or the new one: never to the
/// first marker's undo entries put back over its deletes.
#[test]
fn a_marker_in_a_kept_file_never_takes_the_previous_markers_records() {
    for codec in [Codec::Raw, Codec::Zstd] {
        let v = SimVfs::new();
        let mut e = Engine::create_with(DIR, &opts(codec), common::sim(&v)).unwrap();
        let mut model: Model = Vec::new();
        let step = |e: &mut Engine, model: &mut Model, op: Op| {
            run(e, &op).unwrap();
            apply(model, &op);
        };
        step(&mut e, &mut model, vars(0, 40));
        step(&mut e, &mut model, Op::Sync);
        for i in 1..9 {
            step(&mut e, &mut model, Op::Delete(vec![i], 1));
        }
        step(&mut e, &mut model, Op::Sync);
        let first = model.clone();
        v.record(true);
        for i in [10, 12, 14] {
            step(&mut e, &mut model, Op::Delete(vec![i], 1));
        }
        let second = model.clone();
        v.record(false);
        let mut snaps = v.take_snapshots();
        snaps.push(v.snapshot());
        std::mem::forget(e);
        // Killed: this boot's open finishes the logged delete.
        let r = Engine::open_with(
            DIR,
            OpenMode::ReadWrite,
            common::sim(&snaps.last().unwrap().kill_image()),
        )
        .unwrap();
        assert!(r.verify().unwrap().is_ok());
        assert_eq!(
            read_all(&r).unwrap(),
            second,
            "{codec:?}: a killed writer's delete"
        );
        drop(r);
        for (i, s) in snaps.iter().enumerate() {
            for seed in 0..16 {
                let img = s.crash_image(seed);
                let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&img)).unwrap();
                assert!(
                    r.verify().unwrap().is_ok(),
                    "{codec:?} snap {i} seed {seed}"
                );
                let got = read_all(&r).unwrap();
                assert!(
                    got == first || got == second,
                    "{codec:?} snap {i} seed {seed}: {} records",
                    got.len()
                );
            }
        }
    }
}
