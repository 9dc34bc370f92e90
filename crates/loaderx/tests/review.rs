//! Adversarial probes of the loader's contract: batches as a pure function
//! of (seed, step, shard) whatever the pipeline does with its buffers,
//! errors mid-stream delivered at their step after every earlier batch,
//! threads that end on every way out, and caller values that must not panic.
//!
//! The waits here only detect a hang (generous bounds); no test asserts a
//! duration.

use std::sync::Mutex;
use std::time::Duration;

use loaderx::{Batch, DataLoader, Error, LoaderOptions, Mode, Stream};
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use zrecord::{Codec, CreateOptions, DenseStore, RaggedStore};
use zsampler::Sampler;

/// The tests that count the process's loader threads must not see another
/// test's: every test here holds this lock.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Threads of this process whose name starts with "loaderx-" (the
/// producer's and the workers'), from /proc (Linux only; elsewhere 0).
fn loader_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("loaderx-"))
        .count()
}

/// Waits (up to 20 s, only to detect a leak) until no loader thread is left.
fn assert_no_loader_threads(what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while loader_threads() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {} loader threads still running",
            loader_threads()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `f` on its own thread and fails if it does not finish in 30 s.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what}: hung (or panicked)"))
}

/// Mixed dense and ragged streams of `n` records: x[i] = [i, -i] (f32,
/// zstd), r[i] = i repeated i % 5 + 1 times (u16, ragged, zstd), s[i] = scalar i (i64, ragged raw).
fn mixed(dir: &std::path::Path, n: usize) -> Vec<(String, Stream)> {
    let x =
        DenseStore::<f32>::create(dir.join("x"), &[2], &CreateOptions::new(Codec::Zstd)).unwrap();
    x.append(
        Array2::from_shape_fn((n, 2), |(i, j)| if j == 0 { i as f32 } else { -(i as f32) }).view(),
    )
    .unwrap();
    let r = RaggedStore::<u16>::create(dir.join("r"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let recs: Vec<Array1<u16>> = (0..n)
        .map(|i| Array1::from_elem(i % 5 + 1, i as u16))
        .collect();
    r.append(recs.iter().map(|a| a.view())).unwrap();
    let s = RaggedStore::<i64>::create(dir.join("s"), &CreateOptions::new(Codec::Raw)).unwrap();
    let recs: Vec<ArrayD<i64>> = (0..n)
        .map(|i| ArrayD::from_elem(IxDyn(&[]), i as i64))
        .collect();
    s.append(recs.iter().map(|a| a.view())).unwrap();
    vec![
        ("x".into(), Stream::from(x)),
        ("r".into(), Stream::from(r)),
        ("s".into(), Stream::from(s)),
    ]
}

/// Every value of the batch, checked against the record it must be, and
/// returned as one flat vector (so that runs can be compared whole).
fn contents(b: &Batch) -> Vec<i64> {
    let x = b.dense::<f32>("x").unwrap();
    let r = b.ragged::<u16>("r").unwrap();
    let s = b.ragged::<i64>("s").unwrap();
    assert_eq!(x.shape(), &[b.len(), 2]);
    assert_eq!((r.len(), s.len()), (b.len(), b.len()));
    let mut out = Vec::new();
    for (k, &i) in b.indices().iter().enumerate() {
        assert_eq!(x[[k, 0]], i as f32, "x[{i}]");
        assert_eq!(x[[k, 1]], -(i as f32), "x[{i}]");
        assert_eq!(r[k].shape(), &[i as usize % 5 + 1], "r[{i}]");
        assert!(r[k].iter().all(|&v| v == i as u16), "r[{i}]");
        assert_eq!(s[k].shape(), &[] as &[usize], "s[{i}]");
        out.push(i as i64);
        out.extend(r[k].iter().map(|&v| i64::from(v)));
        out.push(s[k][IxDyn(&[])]);
    }
    out
}

/// Steps and contents of the first `take` batches of a loader whose
/// consumer keeps every third batch it gets until the end (so the pool
/// makes new buffers while recycled ones are in use too).
fn run(
    streams: &[(String, Stream)],
    o: LoaderOptions,
    take: usize,
) -> Vec<(u64, Vec<u64>, Vec<i64>)> {
    let loader = DataLoader::new(streams.to_vec(), o).unwrap();
    let mut kept = Vec::new();
    let mut out = Vec::new();
    for item in loader.take(take) {
        let s = item.unwrap();
        out.push((s.step, s.value.indices().to_vec(), contents(&s.value)));
        if s.step % 3 == 0 {
            kept.push(s.value);
        }
    }
    // The kept batches still read what they read when they came.
    for b in &kept {
        let (_, idx, c) = out.iter().find(|(st, _, _)| *st == b.step()).unwrap();
        assert_eq!(b.indices(), idx.as_slice());
        assert_eq!(&contents(b), c);
    }
    out
}

#[test]
fn mixed_streams_are_a_pure_function_of_seed_step_and_shard() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let n = 53;
    let streams = mixed(dir.path(), n);
    for (mode, batch_size) in [
        (Mode::Cyclic, 8),
        (Mode::Cyclic, 60),
        (Mode::Iid, 8),
        (Mode::Sequential, 70),
    ] {
        let base = LoaderOptions {
            batch_size,
            mode,
            seed: 0xdead_beef,
            workers: 0,
            prefetch: 1,
            ..LoaderOptions::default()
        };
        let sampler = Sampler::new(n as u64, batch_size, mode, base.seed).unwrap();
        let fresh = run(&streams, base.clone(), 20);
        for (k, (step, idx, _)) in fresh.iter().enumerate() {
            assert_eq!(*step, k as u64);
            assert_eq!(idx, &sampler.batch(*step));
        }
        for (workers, prefetch, start) in [(1, 1, 0u64), (3, 2, 5), (6, 9, 11), (2, 1, 19)] {
            let o = LoaderOptions {
                workers,
                prefetch,
                start_step: start,
                ..base.clone()
            };
            let got = run(&streams, o, 20 - start as usize);
            assert_eq!(
                got,
                fresh[start as usize..],
                "{mode:?} w{workers} p{prefetch} k{start}"
            );
        }
        // Two and three ranks together: the single-process batch, in order,
        // no index lost or repeated (as lanes).
        for world in [2usize, 3] {
            let mut joined: Vec<(Vec<u64>, Vec<i64>)> = vec![Default::default(); 20];
            for rank in 0..world {
                let o = LoaderOptions {
                    shard: Some((rank, world)),
                    workers: rank + 1,
                    ..base.clone()
                };
                for (step, idx, c) in run(&streams, o, 20) {
                    joined[step as usize].0.extend(idx);
                    joined[step as usize].1.extend(c);
                }
            }
            for (k, (idx, c)) in joined.iter().enumerate() {
                assert_eq!(
                    (idx, c),
                    (&fresh[k].1, &fresh[k].2),
                    "{mode:?} world {world} step {k}"
                );
            }
        }
    }
    assert_no_loader_threads("after the determinism runs");
}

#[test]
fn one_record_stores_and_ranks_past_the_length() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let streams = mixed(dir.path(), 1);
    for mode in [Mode::Cyclic, Mode::Iid, Mode::Sequential] {
        for batch_size in [1, 4] {
            let o = LoaderOptions {
                batch_size,
                mode,
                seed: u64::MAX,
                workers: 2,
                ..LoaderOptions::default()
            };
            let want = if mode == Mode::Cyclic { 1 } else { batch_size };
            for (step, idx, _) in run(&streams, o.clone(), 5) {
                assert_eq!(idx, vec![0; want], "{mode:?} B{batch_size} step {step}");
            }
            // Two ranks over one record: an error unless the global batch
            // has a lane for each.
            let o = LoaderOptions {
                shard: Some((1, 2)),
                ..o
            };
            match DataLoader::new(streams.clone(), o) {
                Ok(l) => {
                    assert!(want >= 2, "{mode:?} B{batch_size}");
                    for s in l.take(3) {
                        assert_eq!(s.unwrap().value.indices(), vec![0; want / 2].as_slice());
                    }
                }
                Err(Error::Sampler(zsampler::Error::WorldExceedsBatch { world: 2, .. })) => {
                    assert!(want < 2, "{mode:?} B{batch_size}")
                }
                Err(e) => panic!("{mode:?} B{batch_size}: {e}"),
            }
        }
    }
    assert_no_loader_threads("after the one-record runs");
}

/// `close_within` takes any `Duration`; `Duration::MAX` ("wait as long as it
/// takes") must not panic on the deadline's arithmetic.
#[test]
fn close_within_the_longest_duration_waits_instead_of_panicking() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let streams = mixed(dir.path(), 20);
    let ended = within("close_within(Duration::MAX)", move || {
        let mut l = DataLoader::new(
            streams,
            LoaderOptions {
                batch_size: 4,
                workers: 2,
                ..LoaderOptions::default()
            },
        )
        .unwrap();
        l.next().unwrap().unwrap();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            l.close_within(Duration::MAX)
        }))
        .map_err(|p| {
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        })
    });
    assert_eq!(ended, Ok(true));
    assert_no_loader_threads("after close_within(Duration::MAX)");
}
