//! Guards against a killed writer leaving a store that does not open, is
//! still locked, or holds something other than a prefix of the operations
//! that returned. A child process (this test binary, re-executed) appends,
//! deletes and compacts, printing each commit as it returns; the parent
//! SIGKILLs it at random moments (at least a third of them during a
//! compaction: the child stops after a compaction's first move until the
//! parent answers, so a busy box cannot make the kill miss it), then reopens at once and checks the state is the committed
//! prefix or that plus the operation in flight, bit-exact. Odd seeds append
//! with deferred durability (`Durability::AtSync`): nothing is fsynced before
//! a commit, and a kill must still lose nothing that returned.

mod common;
use common::Rng;
use common::workload::{Op, apply, random_op, read_all, run};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, EngineConfig, OpenMode};

const CHILD: &str = "ZRECORD_KILL_TEST_CHILD";
const KILLS: u64 = 300;
const OPS_PER_CHILD: u64 = 60;

fn cfg() -> EngineConfig {
    EngineConfig {
        chunk_capacity: 16 << 10,
        loc_segment_entries: 128,
        flush_bytes: 2048,
        ..EngineConfig::default()
    }
}

/// The ops a child with `seed` runs on a store of `len` records.
fn ops(seed: u64, mut model: Vec<Vec<u8>>) -> Vec<(Op, Vec<Vec<u8>>)> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    // Deferred writers compact less often: a compaction makes the appends
    // before it durable (removing the marker), and its fsyncs dominate.
    let every = match durability(seed) {
        Durability::EachAppend => 4,
        Durability::AtSync => 12,
    };
    for k in 0..OPS_PER_CHILD {
        let op = if k % every == every - 1 {
            Op::Compact
        } else {
            random_op(&mut rng, model.len(), 120)
        };
        apply(&mut model, &op);
        out.push((op, model.clone()));
    }
    out
}

fn durability(seed: u64) -> Durability {
    if seed % 2 == 1 {
        Durability::AtSync
    } else {
        Durability::EachAppend
    }
}

fn child(spec: &str) {
    let (dir, seed) = spec.split_once('|').unwrap();
    let seed: u64 = seed.parse().unwrap();
    let mut e = Engine::open_with(dir, OpenMode::ReadWrite, cfg()).unwrap();
    e.set_durability(durability(seed)).unwrap();
    let model = read_all(&e).unwrap();
    let mut out = std::io::stdout().lock();
    let mut answers = std::io::stdin().lock().lines();
    for (k, (op, _)) in ops(seed, model).iter().enumerate() {
        writeln!(out, "S {k} {}", matches!(op, Op::Compact) as u8).unwrap();
        out.flush().unwrap();
        if matches!(op, Op::Compact) {
            // One move, then say so and wait: the store is mid-compaction
            // until the parent answers (and may kill it meanwhile).
            if !e.compact_steps(1).unwrap() {
                writeln!(out, "M {k}").unwrap();
                out.flush().unwrap();
                answers.next().unwrap().unwrap();
                e.compact().unwrap();
            }
        } else {
            run(&mut e, op).unwrap();
        }
        writeln!(out, "C {k}").unwrap();
        out.flush().unwrap();
        if durability(seed) == Durability::AtSync {
            // A deferred writer outruns the parent's reads and exits before
            // the kill: pace it like a loop that works between appends.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[test]
fn killed_writer_leaves_a_prefix_of_its_commits() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    let t = std::time::Instant::now();
    // A process kill keeps the page cache, so durability is not under test
    // here: a memory file system (when there is one) keeps fsync cheap.
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let dir = tmp.path().join("store");
    drop(Engine::create_with(&dir, &CreateOptions::new(Codec::Zstd), cfg()).unwrap());
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(2026);
    let (mut kills, mut in_compaction, mut commits_seen) = (0u64, 0u64, 0u64);
    let mut markers_left = 0u64;
    for seed in 0..KILLS {
        let pre = {
            let e = Engine::open_with(&dir, OpenMode::ReadOnly, cfg()).unwrap();
            read_all(&e).unwrap()
        };
        let mut c = Command::new(&exe)
            .args([
                "--exact",
                "killed_writer_leaves_a_prefix_of_its_commits",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, format!("{}|{seed}", dir.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
        let mut answer = c.stdin.take().unwrap();
        let mut log: Vec<String> = Vec::new();
        // Kill in the first compaction (2 of 3: after its first move), or
        // after a random number of lines.
        let target_compact = seed % 3 != 2;
        let after = rng.below(OPS_PER_CHILD);
        let mut killed = false;
        for line in lines.by_ref() {
            let line = line.unwrap();
            let mid_compaction = line.starts_with("M ");
            let hit = if target_compact {
                mid_compaction
            } else {
                log.len() as u64 >= after
            };
            log.push(line);
            // A hit kills the child while it waits (3 of 4), or lets it go
            // on into the rest of the compaction first.
            if mid_compaction && (!hit || seed % 4 == 3) {
                writeln!(answer, "go").unwrap();
                answer.flush().unwrap();
            }
            if hit {
                // Deferred appends take microseconds: kill soon after.
                let us = rng.below(match (target_compact, durability(seed)) {
                    (true, _) => 300,
                    (false, Durability::AtSync) => 100,
                    (false, Durability::EachAppend) => 2000,
                });
                std::thread::sleep(Duration::from_micros(us));
                c.kill().unwrap();
                killed = true;
                break;
            }
        }
        // A child not killed runs to its end, answered at every compaction.
        for line in lines {
            let line = line.unwrap();
            if !killed && line.starts_with("M ") {
                writeln!(answer, "go").unwrap();
                answer.flush().unwrap();
            }
            log.push(line);
        }
        c.wait().unwrap();
        let log: Vec<&String> = log
            .iter()
            .filter(|l| l.starts_with("S ") || l.starts_with("C ") || l.starts_with("M "))
            .collect();
        let done = log.iter().filter(|l| l.starts_with("C ")).count();
        let last_is_mid_compaction = log.last().is_some_and(|l| l.starts_with("M "));
        kills += killed as u64;
        in_compaction += (killed && last_is_mid_compaction) as u64;
        commits_seen += done as u64;
        // A deferred writer killed between syncs leaves its marker.
        let marker = dir.join("durable.zr").exists();
        assert!(
            !marker || durability(seed) == Durability::AtSync,
            "kill {seed}: a marker without deferred appends"
        );
        markers_left += marker as u64;
        // The lock is free at once.
        let e = Engine::open_with(&dir, OpenMode::ReadWrite, cfg())
            .unwrap_or_else(|err| panic!("kill {seed}: reopen failed: {err}"));
        let got = read_all(&e).unwrap();
        let expected = ops(seed, pre.clone());
        let prefix = if done == 0 {
            &pre
        } else {
            &expected[done - 1].1
        };
        let ok = got == *prefix || expected.get(done).is_some_and(|(_, m)| got == *m);
        assert!(
            ok,
            "kill {seed}: {done} commits reported, store holds {} records matching neither",
            got.len()
        );
        let rep = e.verify().unwrap();
        assert!(rep.is_ok(), "kill {seed}: {rep:?}");
        assert!(
            !dir.join("durable.zr").exists(),
            "kill {seed}: a read-write open left the marker"
        );
    }
    eprintln!(
        "process kill: {kills} kills ({in_compaction} during compaction, {markers_left} leaving a deferred-append marker), {commits_seen} commits, in {:?}",
        t.elapsed()
    );
    assert!(
        markers_left >= 10,
        "only {markers_left} kills left a marker"
    );
    assert!(kills >= KILLS * 9 / 10, "only {kills} kills");
    assert!(
        in_compaction * 3 >= kills,
        "only {in_compaction} of {kills} kills during compaction"
    );
}
