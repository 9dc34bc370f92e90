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

/// Runs `f` on its own thread and fails if it does not finish in 30 s (a
/// panic in `f` is passed on as itself).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("{what}: hung"),
    }
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
    let window = o.prefetch + o.workers + 1;
    let mut loader = DataLoader::new(streams.to_vec(), o).unwrap();
    let mut kept = Vec::new();
    let mut out = Vec::new();
    for item in loader.by_ref().take(take) {
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
    // Holding a third of `take` batches, the pool made buffers past its
    // first ones: the runs read from new slots as well as recycled ones.
    if take / 3 > window {
        assert!(loader.slots_made() > window, "{}", loader.slots_made());
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

/// A dense store of `n` records of 512 bytes (zstd) whose chunk bytes from
/// the middle on are overwritten after it is opened, and the records that no
/// longer read (found one at a time through a second handle).
fn half_corrupted(dir: &std::path::Path, n: usize) -> (Stream, Vec<bool>) {
    let x =
        DenseStore::<u8>::create(dir.join("x"), &[512], &CreateOptions::new(Codec::Zstd)).unwrap();
    x.append(Array2::from_shape_fn((n, 512), |(i, j)| ((i * 131 + j * 7) % 251) as u8).view())
        .unwrap();
    x.sync().unwrap();
    let stream = Stream::from(x);
    let chunk = dir.join("x").join("0.chunk");
    let mut bytes = std::fs::read(&chunk).unwrap();
    let half = bytes.len() / 2;
    for b in &mut bytes[half..] {
        *b ^= 0x5A;
    }
    std::fs::write(&chunk, &bytes).unwrap();
    let Stream::Dense(core) = &stream else {
        unreachable!()
    };
    let bad: Vec<bool> = (0..n as u64)
        .map(|i| core.gather_bytes_into(&[i], &mut [0u8; 512]).is_err())
        .collect();
    assert!(!bad[0] && bad.iter().any(|&b| b), "{bad:?}");
    (stream, bad)
}

/// A store that fails mid-stream: every batch before the first bad one
/// arrives intact and in order, then one error naming the stream and that
/// step, then the end; in every pipeline shape, and no thread is left.
#[test]
fn a_store_failing_mid_stream_fails_at_its_step_after_every_earlier_batch() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let n = 64;
    let (stream, bad) = half_corrupted(dir.path(), n);
    let bs = 4;
    let first_bad_step = (0..n / bs)
        .find(|s| bad[s * bs..(s + 1) * bs].iter().any(|&b| b))
        .unwrap() as u64;
    assert!(first_bad_step > 0);
    for ordered in [true, false] {
        for (workers, prefetch) in [(0, 1), (1, 1), (3, 2), (4, 8)] {
            let stream = stream.clone();
            let what = format!("ordered {ordered} w{workers} p{prefetch}");
            let got = within(&what.clone(), move || {
                let l = DataLoader::new(
                    [("img", stream)],
                    LoaderOptions {
                        batch_size: bs,
                        mode: Mode::Sequential,
                        workers,
                        prefetch,
                        ordered,
                        ..LoaderOptions::default()
                    },
                )
                .unwrap();
                l.map(|r| r.map(|s| s.step)).collect::<Vec<_>>()
            });
            let (last, oks) = got.split_last().unwrap();
            match last {
                Err(Error::Store { step, stream, .. }) => {
                    assert_eq!((*step, stream.as_str()), (first_bad_step, "img"), "{what}")
                }
                other => panic!("{what}: {other:?}"),
            }
            let mut oks: Vec<u64> = oks.iter().map(|r| *r.as_ref().unwrap()).collect();
            if ordered {
                assert_eq!(oks, (0..first_bad_step).collect::<Vec<_>>(), "{what}");
            } else {
                // Unordered: an earlier step still in a worker when the
                // error arrives is never delivered (the loader ends), but no
                // step past the failing one is.
                oks.sort();
                assert!(oks.iter().all(|&s| s < first_bad_step), "{what}: {oks:?}");
            }
            assert_no_loader_threads(&what);
        }
    }
}

/// A transform error at step 5 produced while step 3 is still in its
/// (slow) transform comes out after steps 0..5, not before; the threads end
/// after each way a loader can fail.
#[test]
fn a_later_error_waits_for_earlier_steps_and_every_failure_ends_the_threads() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let streams = mixed(dir.path(), 40);
    for panics in [false, true] {
        let streams = streams.clone();
        let got = within("error ordering", move || {
            let (five_tx, five_rx) = crossbeam_channel::unbounded::<()>();
            let l = DataLoader::with_transform(
                streams,
                LoaderOptions {
                    batch_size: 4,
                    workers: 3,
                    prefetch: 2,
                    ..LoaderOptions::default()
                },
                move |b: Batch| match b.step() {
                    3 => {
                        // Until step 5 has failed (bounded: scheduling may
                        // differ; the order must hold either way).
                        let _ = five_rx.recv_timeout(Duration::from_secs(5));
                        Ok(b.step())
                    }
                    5 => {
                        let _ = five_tx.send(());
                        if panics {
                            panic!("five");
                        }
                        Err(format!("bad batch {}", b.step()))
                    }
                    s => Ok(s),
                },
            )
            .unwrap();
            l.map(|r| r.map(|s| s.value).map_err(|e| loaderx::error_chain(&e)))
                .collect::<Vec<_>>()
        });
        let want_err = if panics {
            "transform panicked at step 5: five"
        } else {
            "transform failed at step 5: bad batch 5"
        };
        assert_eq!(
            got,
            vec![Ok(0), Ok(1), Ok(2), Ok(3), Ok(4), Err(want_err.to_string())]
        );
        assert_no_loader_threads("after a transform failure");
    }
}

/// Dropping a loader whose every queue is full, whose consumer holds
/// batches, or that never delivered anything, leaves no thread behind.
#[test]
fn dropped_loaders_leave_no_thread_in_any_state() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let streams = mixed(dir.path(), 40);
    for (workers, ordered) in [(0, true), (1, true), (4, true), (4, false)] {
        let o = LoaderOptions {
            batch_size: 8,
            workers,
            ordered,
            prefetch: 2,
            ..LoaderOptions::default()
        };
        // Never read. (The count sees a live loader's threads, so that
        // the checks after each drop can fail.)
        let seen = within("drop unread", {
            let (s, o) = (streams.clone(), o.clone());
            move || {
                let l = DataLoader::new(s, o).unwrap();
                // A thread names itself once it runs: wait for all of them.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                let mut seen = loader_threads();
                while seen < workers + 1 && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                    seen = loader_threads();
                }
                drop(l);
                seen
            }
        });
        if std::path::Path::new("/proc/self/task").exists() {
            assert_eq!(seen, workers + 1);
        }
        assert_no_loader_threads("unread");
        // Read a few, keep them, let the queues fill, drop the loader first.
        let kept = within("drop full", {
            let (s, o) = (streams.clone(), o.clone());
            move || {
                let mut l = DataLoader::new(s, o).unwrap();
                let kept: Vec<Batch> = (0..5).map(|_| l.next().unwrap().unwrap().value).collect();
                drop(l);
                kept
            }
        });
        assert_no_loader_threads("full queues");
        for b in &kept {
            contents(b);
        }
    }
}

/// A panic payload whose own `Drop` panics (what a transform that panics
/// with a guard object, say, can throw).
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("the payload's drop panics too");
    }
}

/// A transform that panics with a payload whose drop panics as well is
/// still reported at its step, on any worker count, and no thread is left.
/// Before, the second panic unwound the worker outside the transform: its
/// step never came and an ordered consumer waited for it for good.
#[test]
fn a_panic_payload_that_panics_when_dropped_is_still_reported() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let streams = mixed(dir.path(), 20);
    for workers in [3, 1, 0] {
        let streams = streams.clone();
        let got = within(&format!("w{workers}"), move || {
            let l = DataLoader::with_transform(
                streams,
                LoaderOptions {
                    batch_size: 4,
                    workers,
                    ..LoaderOptions::default()
                },
                |b: Batch| {
                    if b.step() == 2 {
                        std::panic::panic_any(Bomb);
                    }
                    Ok::<_, Error>(b.step())
                },
            )
            .unwrap();
            l.map(|r| r.map(|s| s.value).map_err(|e| e.to_string()))
                .collect::<Vec<_>>()
        });
        assert_eq!(
            got,
            vec![
                Ok(0),
                Ok(1),
                Err("transform panicked at step 2: non-string panic payload".into())
            ],
            "w{workers}"
        );
        assert_no_loader_threads("after a payload that panics when dropped");
    }
}
