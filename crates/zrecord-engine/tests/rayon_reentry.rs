//! Guards against deadlocks when the engine is called from inside rayon
//! jobs (a caller's `par_iter` of appends or gathers). A rayon thread that
//! waits for its own parallel work runs other queued jobs meanwhile; if the
//! engine held a lock across that wait, a stolen job calling the engine
//! again on the same thread would block on that lock forever: an append
//! relocking the append mutex, or a gather's read lock held while a stolen
//! append waits for the write lock (and, with a writer queued, a stolen
//! gather waits for a read lock behind it).
//!
//! Each workload runs on a watchdog thread; the test fails (instead of
//! hanging) when the workload has not finished after a generous wait. The
//! wait is not a performance bound: the workloads take well under a second.

mod common;
use common::*;
use rayon::prelude::*;
use std::sync::mpsc;
use std::time::Duration;
use zrecord_engine::{Codec, CreateOptions, Engine, ReadPath};

/// Runs `f` on its own thread; panics if it neither returns nor panics in
/// `secs` seconds (a deadlock: the stuck thread is left behind).
fn finishes_within(secs: u64, what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(())) => {}
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: no progress in {secs} s, deadlocked"),
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// 128 batches of 16 zstd records appended from a `par_iter`: each append
/// compresses its batch on the pool, so its thread waits for pool work.
#[test]
fn appends_from_rayon_jobs_do_not_deadlock() {
    const W: usize = 16 << 10;
    for round in 0..4u64 {
        finishes_within(120, "parallel appends", move || {
            let dir = tempfile::tempdir().unwrap();
            let e = Engine::create(dir.path().join("s"), &CreateOptions::new(Codec::Zstd)).unwrap();
            pool(8).install(|| {
                (0..128u64).into_par_iter().for_each(|b| {
                    let recs: Vec<Vec<u8>> = (0..16)
                        .map(|k| record(round * 10_000 + b * 16 + k, W))
                        .collect();
                    e.append_fixed(&recs.concat(), W).unwrap();
                });
            });
            assert_eq!(e.len(), 128 * 16);
            assert!(e.verify().unwrap().is_ok());
        });
    }
}

/// Gathers large enough to run in parallel and single-record appends,
/// mixed in one `par_iter`: a gather waiting for its helpers may pick up an
/// append, whose commit needs the write lock.
#[test]
fn gathers_and_appends_mixed_in_rayon_jobs_do_not_deadlock() {
    for rp in [ReadPath::Mmap, ReadPath::Pread] {
        finishes_within(120, "gathers and appends in one par_iter", move || {
            let dir = tempfile::tempdir().unwrap();
            let cfg = zrecord_engine::EngineConfig {
                read_path: rp,
                ..Default::default()
            };
            let e = Engine::create_with(dir.path(), &CreateOptions::new(Codec::Zstd), cfg).unwrap();
            let expect = |i: u64| record(i, 1000);
            let first: Vec<Vec<u8>> = (0..256).map(expect).collect();
            e.append_fixed(&first.concat(), 1000).unwrap();
            pool(8).install(|| {
                (0..800u64).into_par_iter().for_each(|t| {
                    if t % 4 == 0 {
                        e.append_fixed(&record(1_000_000 + t, 1000), 1000).unwrap();
                        return;
                    }
                    let mut rng = Rng(t);
                    // 64 x ~5 us of estimated decode: well past the inline
                    // threshold, so each gather fans out.
                    let idx: Vec<u64> = (0..64).map(|_| rng.below(256)).collect();
                    let mut dst = vec![0u8; idx.len() * 1000];
                    e.gather_fixed(&idx, 1000, &mut dst).unwrap();
                    for (k, &i) in idx.iter().enumerate() {
                        assert_eq!(&dst[k * 1000..(k + 1) * 1000], &expect(i)[..]);
                    }
                });
            });
            assert_eq!(e.len(), 256 + 200);
        });
    }
}
