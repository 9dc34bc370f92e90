//! Guards the loader's contract: every stream gathered at the same indices,
//! delivery in step order whatever the worker count, exact resume, errors
//! delivered as themselves followed by a clean stop, and a drop that never
//! hangs (even with every channel full).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loaderx::{Batch, DataLoader, Error, LoaderOptions, Mode, Stream};
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use zrecord::{Codec, CreateOptions, DenseCore, DenseStore, OpenOptions, RaggedStore};
use zsampler::Sampler;

const N: u64 = 1000;

/// Three aligned streams: x[i] = [i, i+0.5, i+0.25] (f32, zstd), y[i] = i
/// (i64, raw), tok[i] = 0..(i % 7 + 1) offset by i (i32, ragged, zstd).
fn fixture(dir: &std::path::Path) -> Vec<(String, Stream)> {
    let x =
        DenseStore::<f32>::create(dir.join("x"), &[3], &CreateOptions::new(Codec::Zstd)).unwrap();
    let xs = Array2::from_shape_fn((N as usize, 3), |(i, j)| i as f32 + [0.0, 0.5, 0.25][j]);
    x.append(xs.view()).unwrap();
    let y = DenseStore::<i64>::create(dir.join("y"), &[], &CreateOptions::new(Codec::Raw)).unwrap();
    y.append(Array1::from_iter(0..N as i64).view()).unwrap();
    let t = RaggedStore::<i32>::create(dir.join("tok"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let toks: Vec<ArrayD<i32>> = (0..N as i32)
        .map(|i| ArrayD::from_shape_fn(IxDyn(&[(i % 7 + 1) as usize]), |d| i + d[0] as i32))
        .collect();
    t.append(toks.iter().map(|a| a.view())).unwrap();
    vec![
        ("x".into(), Stream::from(x)),
        ("y".into(), Stream::from(y)),
        ("tok".into(), Stream::from(t)),
    ]
}

fn check_batch(b: &Batch) {
    let x = b.dense::<f32>("x").unwrap();
    let y = b.dense::<i64>("y").unwrap();
    let tok = b.ragged::<i32>("tok").unwrap();
    assert_eq!(x.shape(), &[b.len(), 3]);
    assert_eq!(tok.len(), b.len());
    for (k, &i) in b.indices().iter().enumerate() {
        assert_eq!(y[[k]], i as i64);
        assert_eq!(x[[k, 1]], i as f32 + 0.5);
        assert_eq!(tok[k].shape(), &[(i % 7 + 1) as usize]);
        assert_eq!(tok[k][[0]], i as i32);
    }
}

fn opts(workers: usize, mode: Mode) -> LoaderOptions {
    LoaderOptions {
        batch_size: 64,
        mode,
        seed: 7,
        workers,
        ..LoaderOptions::default()
    }
}

#[test]
fn batches_are_aligned_across_streams_and_follow_the_sampler() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        let sampler = Sampler::new(N, 64, mode, 7).unwrap();
        let loader = DataLoader::new(streams.clone(), opts(2, mode)).unwrap();
        for (k, item) in loader.take(40).enumerate() {
            let item = item.unwrap();
            assert_eq!(item.step, k as u64);
            assert_eq!(item.value.indices(), sampler.batch(k as u64).as_slice());
            check_batch(&item.value);
        }
    }
}

#[test]
fn delivery_order_is_the_same_for_every_worker_count() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let run = |workers| -> Vec<Vec<u64>> {
        // A transform with uneven cost makes workers finish out of order.
        let loader =
            DataLoader::with_transform(streams.clone(), opts(workers, Mode::Iid), |b: Batch| {
                if b.step().is_multiple_of(3) {
                    std::thread::sleep(Duration::from_millis(3));
                }
                Ok::<_, Error>(b.indices().to_vec())
            })
            .unwrap();
        loader.take(30).map(|r| r.unwrap().value).collect()
    };
    let reference = run(0);
    assert_eq!(run(1), reference);
    assert_eq!(run(4), reference);
}

#[test]
fn unordered_delivery_yields_every_step_once() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let o = LoaderOptions {
        ordered: false,
        ..opts(4, Mode::Cyclic)
    };
    let loader = DataLoader::new(streams, o).unwrap();
    // Unordered: the first 50 items need not be steps 0..50 (a step still
    // in a slow worker is overtaken by later ones), but no step may come
    // twice and none may be lost: keep reading until 0..50 have all come.
    let mut seen = std::collections::HashSet::new();
    let mut below = 0;
    for r in loader.take(5000) {
        let step = r.unwrap().step;
        assert!(seen.insert(step), "step {step} delivered twice");
        below += usize::from(step < 50);
        if below == 50 {
            return;
        }
    }
    panic!("steps below 50 missing after 5000 items: have {below}");
}

#[test]
fn a_loader_started_at_step_k_continues_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let from_zero: Vec<Vec<u64>> = DataLoader::new(streams.clone(), opts(3, Mode::Cyclic))
        .unwrap()
        .take(40)
        .map(|r| r.unwrap().value.indices().to_vec())
        .collect();
    let resumed = DataLoader::new(
        streams,
        LoaderOptions {
            start_step: 25,
            ..opts(3, Mode::Cyclic)
        },
    )
    .unwrap();
    assert_eq!(resumed.step(), 25);
    let tail: Vec<(u64, Vec<u64>)> = resumed
        .take(15)
        .map(|r| {
            let s = r.unwrap();
            (s.step, s.value.indices().to_vec())
        })
        .collect();
    for (k, (step, idx)) in tail.iter().enumerate() {
        assert_eq!(*step, 25 + k as u64);
        assert_eq!(idx, &from_zero[25 + k]);
    }
}

#[derive(Debug, PartialEq)]
struct Boom(u64);
impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "boom at {}", self.0)
    }
}
impl std::error::Error for Boom {}

#[test]
fn a_transform_error_comes_out_as_itself_then_the_loader_stops() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    for workers in [0, 3] {
        let mut loader =
            DataLoader::with_transform(streams.clone(), opts(workers, Mode::Iid), |b: Batch| {
                if b.step() == 5 {
                    Err(Boom(b.step()))
                } else {
                    Ok(b.step())
                }
            })
            .unwrap();
        for k in 0..5 {
            assert_eq!(loader.next().unwrap().unwrap().value, k);
        }
        match loader.next().unwrap() {
            Err(Error::Transform { step, source }) => {
                assert_eq!(step, 5);
                assert_eq!(source.downcast_ref::<Boom>(), Some(&Boom(5)));
            }
            other => panic!("expected the transform error, got {other:?}"),
        }
        assert!(loader.next().is_none());
    }
}

#[test]
fn a_panicking_transform_is_reported_not_propagated() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let mut loader = DataLoader::with_transform(streams, opts(2, Mode::Iid), |b: Batch| {
        if b.step() == 2 {
            panic!("transform exploded");
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    assert!(loader.next().unwrap().is_ok());
    assert!(loader.next().unwrap().is_ok());
    match loader.next().unwrap() {
        Err(Error::TransformPanicked { step: 2, message }) => assert!(message.contains("exploded")),
        other => panic!("expected a panic report, got {other:?}"),
    }
    assert!(loader.next().is_none());
}

#[test]
fn a_gather_error_names_the_stream_and_step() {
    let dir = tempfile::tempdir().unwrap();
    let x = DenseStore::<u8>::create(
        dir.path().join("x"),
        &[4096],
        &CreateOptions::new(Codec::Zstd),
    )
    .unwrap();
    let data = Array2::from_shape_fn((64, 4096), |(i, j)| ((i * 31 + j) % 251) as u8);
    x.append(data.view()).unwrap();
    x.sync().unwrap();
    let stream = Stream::from(x);
    // Overwrite the compressed payloads: every record now fails to decode.
    let chunk = dir.path().join("x").join("0.chunk");
    let len = std::fs::metadata(&chunk).unwrap().len() as usize;
    std::fs::write(&chunk, vec![0xA5u8; len]).unwrap();
    let mut loader = DataLoader::new(
        [("x", stream)],
        LoaderOptions {
            batch_size: 8,
            ..opts(2, Mode::Iid)
        },
    )
    .unwrap();
    match loader.next().unwrap() {
        Err(Error::Store {
            step: 0, stream, ..
        }) => assert_eq!(stream, "x"),
        other => panic!("expected a store error, got {other:?}"),
    }
    assert!(loader.next().is_none());
}

#[test]
fn dropping_a_loader_with_full_channels_returns_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let made = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let m = Arc::clone(&made);
    std::thread::spawn(move || {
        let mut loader =
            DataLoader::with_transform(streams, opts(4, Mode::Iid), move |b: Batch| {
                m.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(b)
            })
            .unwrap();
        // Hold two batches, never read the rest: every queue fills up.
        let a = loader.next().unwrap().unwrap();
        let b = loader.next().unwrap().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(loader);
        drop((a, b));
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("dropping the loader hung");
    // Backpressure: with nobody reading, the pipeline stopped after filling
    // its window (prefetch 4 + workers 4 + 1) plus the two batches taken.
    assert!(
        made.load(Ordering::SeqCst) <= 4 + 4 + 1 + 2,
        "{}",
        made.load(Ordering::SeqCst)
    );
}

#[test]
fn streams_of_different_lengths_are_refused_listing_every_length() {
    let dir = tempfile::tempdir().unwrap();
    let a = DenseStore::<u8>::create(dir.path().join("a"), &[2], &CreateOptions::new(Codec::Raw))
        .unwrap();
    a.append(Array2::<u8>::zeros((10, 2)).view()).unwrap();
    let b = DenseStore::<u8>::create(dir.path().join("b"), &[2], &CreateOptions::new(Codec::Raw))
        .unwrap();
    b.append(Array2::<u8>::zeros((12, 2)).view()).unwrap();
    let err = DataLoader::new(
        [("a", Stream::from(a)), ("b", Stream::from(b))],
        LoaderOptions::default(),
    )
    .expect_err("unequal lengths must be refused");
    let msg = err.to_string();
    assert!(
        msg.contains("\"a\": 10") && msg.contains("\"b\": 12"),
        "{msg}"
    );
    assert!(matches!(
        DataLoader::new(Vec::<(String, Stream)>::new(), LoaderOptions::default()),
        Err(Error::NoStreams)
    ));
}

#[test]
fn typed_views_reject_a_wrong_name_kind_or_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let mut loader = DataLoader::new(streams, opts(1, Mode::Iid)).unwrap();
    let b = loader.next().unwrap().unwrap().value;
    assert!(matches!(
        b.dense::<f32>("nope"),
        Err(Error::NoSuchStream { .. })
    ));
    assert!(matches!(b.dense::<f64>("x"), Err(Error::WrongType { .. })));
    assert!(matches!(
        b.dense::<i32>("tok"),
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(b.ragged::<f32>("x"), Err(Error::WrongType { .. })));
    assert_eq!(b.names().collect::<Vec<_>>(), ["x", "y", "tok"]);
}

#[test]
fn read_only_handles_feed_several_loaders_at_once() {
    let dir = tempfile::tempdir().unwrap();
    drop(fixture(dir.path()));
    let ro = || {
        DenseCore::open(
            dir.path().join("x"),
            &OpenOptions {
                read_only: true,
                ..OpenOptions::default()
            },
        )
        .unwrap()
    };
    let l1 = DataLoader::new([("x", Stream::from(ro()))], opts(1, Mode::Cyclic)).unwrap();
    let l2 = DataLoader::new([("x", Stream::from(ro()))], opts(1, Mode::Cyclic)).unwrap();
    for (a, b) in l1.zip(l2).take(10) {
        let (a, b) = (a.unwrap().value, b.unwrap().value);
        assert_eq!(a.dense::<f32>("x").unwrap(), b.dense::<f32>("x").unwrap());
    }
}

#[test]
fn a_consumer_may_keep_every_batch_it_took() {
    // An identity loader's items are the pool's batch slots: collecting more
    // than the pool held used to stall the producer for good, then (with a
    // 50 ms wait per new slot) for 50 s over these 1000 batches.
    for workers in [0, 4] {
        let dir = tempfile::tempdir().unwrap();
        let streams = fixture(dir.path());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let o = LoaderOptions {
                prefetch: 1,
                ..opts(workers, Mode::Cyclic)
            };
            let loader = DataLoader::new(streams, o).unwrap();
            let kept: Vec<_> = loader.take(1000).map(|s| s.unwrap()).collect();
            done_tx.send(kept).unwrap();
        });
        let kept = done_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the loader stalled while the consumer kept its batches");
        for (k, s) in kept.iter().enumerate() {
            assert_eq!(s.step, k as u64);
            check_batch(&s.value);
        }
    }
}

#[test]
fn a_consumer_that_drops_its_batches_never_grows_the_pool() {
    // The producer makes a new buffer only when the consumer waits while
    // every buffer is in a batch it keeps. One that drops each batch (the
    // usual loop, and every non-identity transform) must never see the pool
    // grow, however often it waits: new 64 MiB buffers there cost RSS and
    // page faults (a first version grew it to 50 buffers).
    for workers in [0, 2] {
        let dir = tempfile::tempdir().unwrap();
        let streams = fixture(dir.path());
        let o = LoaderOptions {
            prefetch: 2,
            ..opts(workers, Mode::Cyclic)
        };
        let window = o.prefetch + o.workers + 1;
        let mut loader = DataLoader::new(streams, o).unwrap();
        for k in 0..300u64 {
            let s = loader.next().unwrap().unwrap();
            assert_eq!(s.step, k);
            check_batch(&s.value);
        }
        assert_eq!(loader.slots_made(), window, "workers {workers}");
        // While one keeping the batches grows it by what it keeps.
        let kept: Vec<_> = (&mut loader).take(40).map(|s| s.unwrap()).collect();
        assert!(loader.slots_made() >= 40, "{}", loader.slots_made());
        drop(kept);
    }
}

#[test]
fn counts_that_could_only_end_in_an_abort_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for o in [
        LoaderOptions {
            prefetch: loaderx::MAX_PREFETCH + 1,
            ..LoaderOptions::default()
        },
        LoaderOptions {
            prefetch: 1 << 40,
            ..LoaderOptions::default()
        },
        LoaderOptions {
            workers: loaderx::MAX_WORKERS + 1,
            ..LoaderOptions::default()
        },
        LoaderOptions {
            start_step: u64::MAX,
            ..LoaderOptions::default()
        },
    ] {
        match DataLoader::new(fixture(dir.path()), o) {
            Err(Error::Config { detail, .. }) => {
                assert!(
                    detail.contains("allowed") || detail.contains("wrap"),
                    "{detail}"
                )
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        std::fs::remove_dir_all(dir.path()).unwrap();
        std::fs::create_dir(dir.path()).unwrap();
    }
}

/// Regression: a dense batch buffer too large to allocate (here 2^32
/// records of 64 MiB: 2^58 bytes, past any address space) aborted the
/// process from the producer thread. It is refused when the loader is
/// built, naming the option and the stream.
#[test]
fn a_batch_too_large_to_allocate_is_refused_at_construction() {
    let dir = tempfile::tempdir().unwrap();
    let big = DenseStore::<u8>::create(
        dir.path().join("big"),
        &[1 << 26],
        &CreateOptions::new(Codec::Raw),
    )
    .unwrap();
    big.append(Array2::<u8>::zeros((1, 1 << 26)).view())
        .unwrap();
    let o = LoaderOptions {
        batch_size: zsampler::MAX_BATCH_SIZE,
        mode: Mode::Iid,
        ..LoaderOptions::default()
    };
    match DataLoader::new([("big", Stream::from(big))], o) {
        Err(
            e @ Error::Config {
                option: "batch_size",
                ..
            },
        ) => {
            let m = e.to_string();
            assert!(
                m.contains("\"big\"") && m.contains("cannot allocate"),
                "{m}"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// Pins what `DataLoader`'s docs say: the record count is fixed when the
/// loader is built, so later appends are never sampled, and an append to
/// one stream only is not detected.
#[test]
fn records_appended_after_the_loader_is_built_are_never_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let mk = |name: &str| {
        let s =
            DenseStore::<i64>::create(dir.path().join(name), &[], &CreateOptions::new(Codec::Raw))
                .unwrap();
        s.append(Array1::from_iter(0..100i64).view()).unwrap();
        Arc::new(s.into_core())
    };
    let (y, z) = (mk("y"), mk("z"));
    let o = LoaderOptions {
        batch_size: 30,
        mode: Mode::Sequential,
        ..LoaderOptions::default()
    };
    let mut loader = DataLoader::new(
        [("y", Stream::from(Arc::clone(&y))), ("z", Stream::from(z))],
        o,
    )
    .unwrap();
    let first = loader.next().unwrap().unwrap();
    assert_eq!(first.step, 0);
    drop(first);
    let more: Vec<i64> = (100..200).collect();
    y.append_bytes(bytemuck::cast_slice(&more)).unwrap();
    assert_eq!(y.len(), 200);
    for item in loader.take(20) {
        let b = item.unwrap().value;
        let ys = b.dense::<i64>("y").unwrap();
        assert!(ys.iter().all(|&v| v < 100), "step {}: {ys}", b.step());
        assert!(b.indices().iter().all(|&i| i < 100));
    }
}

/// Pins `LoaderOptions::batch_size`'s docs: in Cyclic mode a store of fewer
/// records than `batch_size` gives batches of all of them; the other modes
/// give `batch_size`.
#[test]
fn a_store_smaller_than_the_batch_gives_short_batches_only_in_cyclic_mode() {
    let dir = tempfile::tempdir().unwrap();
    for (mode, want) in [(Mode::Cyclic, 10), (Mode::Sequential, 64), (Mode::Iid, 64)] {
        let path = dir.path().join(format!("{mode:?}"));
        let s = DenseStore::<i64>::create(&path, &[], &CreateOptions::new(Codec::Raw)).unwrap();
        s.append(Array1::from_iter(0..10i64).view()).unwrap();
        let o = LoaderOptions {
            batch_size: 64,
            mode,
            ..LoaderOptions::default()
        };
        let loader = DataLoader::new([("y", Stream::from(s))], o).unwrap();
        for item in loader.take(3) {
            let b = item.unwrap().value;
            assert_eq!(b.len(), want, "{mode:?}");
            if mode == Mode::Cyclic {
                let mut seen = b.indices().to_vec();
                seen.sort_unstable();
                assert_eq!(seen, (0..10).collect::<Vec<u64>>());
            }
        }
    }
}

/// Regression: `Stream` and `DataLoader` had no `Debug`, so neither could
/// sit in a `#[derive(Debug)]` struct or be printed while debugging.
#[test]
fn streams_and_loaders_print_their_names_lengths_and_options() {
    fn debug<T: std::fmt::Debug>() {}
    debug::<Stream>();
    debug::<DataLoader<Batch>>();
    debug::<DataLoader<u64>>();
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let x = format!("{:?}", streams[0].1);
    assert!(x.starts_with("Dense {"), "{x}");
    assert!(
        x.contains("item_shape: [3]") && x.contains("len: 1000"),
        "{x}"
    );
    assert!(x.contains("<f4"), "{x}");
    let tok = format!("{:?}", streams[2].1);
    assert!(
        tok.starts_with("Ragged {") && tok.contains("len: 1000"),
        "{tok}"
    );
    let loader = DataLoader::new(streams, opts(2, Mode::Cyclic)).unwrap();
    let l = format!("{loader:?}");
    for part in [
        "DataLoader {",
        "(\"x\", 1000)",
        "(\"tok\", 1000)",
        "batch_size: 64",
        "workers: 2",
        "step: 0",
    ] {
        assert!(l.contains(part), "{part} in {l}");
    }
}

#[test]
fn closing_does_not_wait_forever_for_a_blocked_transform() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut loader =
            DataLoader::with_transform(streams, opts(2, Mode::Iid), move |b: Batch| {
                if b.step() >= 1 {
                    // Blocks until the test lets go (after the close).
                    let _ = release_rx.recv();
                }
                Ok::<_, Error>(b.len())
            })
            .unwrap();
        assert_eq!(loader.next().unwrap().unwrap().value, 64);
        std::thread::sleep(Duration::from_millis(100)); // both workers block
        let all_ended = loader.close_within(Duration::from_millis(200));
        done_tx.send(all_ended).unwrap();
    });
    let all_ended = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("closing waited for the blocked transforms");
    assert!(!all_ended, "two transforms were still blocked");
    drop(release_tx); // the detached workers finish and end
}

/// Regression: `next()` delivering a transform's error first stopped the
/// pipeline and waited for its threads, so a slow transform on another
/// worker held the error back for as long as it ran (up to `CLOSE_WAIT`,
/// 30 s). The error now comes at once; close waits for the threads.
#[test]
fn an_error_is_delivered_without_waiting_for_a_slow_transform() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut loader =
            DataLoader::with_transform(streams, opts(2, Mode::Iid), move |b: Batch| {
                match b.step() {
                    // Fails once step 1 is in its (slow) transform.
                    0 => {
                        let _ = started_rx.recv_timeout(Duration::from_secs(5));
                        Err("step 0 fails".to_string())
                    }
                    1 => {
                        let _ = started_tx.send(());
                        let _ = release_rx.recv_timeout(Duration::from_secs(60));
                        Ok(b.len())
                    }
                    _ => Ok(b.len()),
                }
            })
            .unwrap();
        let first = loader.next().unwrap();
        done_tx
            .send(first.map(|s| s.step).map_err(|e| e.to_string()))
            .unwrap();
        // The close waits for the slow transform, released by the test.
        loader.close();
    });
    let first = done_rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the error waited for the slow transform");
    assert_eq!(first.unwrap_err(), "transform failed at step 0");
    drop(release_tx);
}

/// Regression: a loader closed (or dropped) on one of its own threads — a
/// transform holding the last handle, as a garbage collector running inside
/// a Python transform can arrange — waited for its own thread to end, which
/// it cannot while it is the one waiting: the whole limit (`CLOSE_WAIT` on
/// drop) went by, and `close_within` then reported a thread left running.
#[test]
fn a_loader_closed_from_inside_its_transform_does_not_wait_for_itself() {
    for workers in [0, 2] {
        let dir = tempfile::tempdir().unwrap();
        let streams = fixture(dir.path());
        let cell: Arc<std::sync::Mutex<Option<DataLoader<usize>>>> = Arc::default();
        let (done_tx, done_rx) = crossbeam_channel::bounded::<bool>(1);
        let c = Arc::clone(&cell);
        let loader =
            DataLoader::with_transform(streams, opts(workers, Mode::Iid), move |b: Batch| {
                if b.step() == 2 {
                    // Wait until the test has handed the loader over.
                    let loader = loop {
                        if let Some(l) = c.lock().unwrap().take() {
                            break l;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    };
                    let _ = done_tx.send(loader.close_within(Duration::from_secs(600)));
                }
                Ok::<_, Error>(b.len())
            })
            .unwrap();
        *cell.lock().unwrap() = Some(loader);
        let all_ended = done_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("closing from the loader's own thread waited for that thread");
        assert!(all_ended, "workers {workers}: the other threads all end");
    }
}

/// Regression: the batch's index buffers (the producer's, and each batch's
/// copy) were allocated infallibly in the producer thread, and nothing
/// checked them at construction when no stream was dense: a ragged-only
/// loader with a batch the allocator refuses was built, then aborted the
/// whole process from its producer thread.
#[test]
fn a_ragged_batch_too_large_to_index_is_refused_at_construction() {
    // 2^32 indices of 8 bytes: refused by the allocator on a machine with
    // less than 32 GiB to give; where it could be had, there is no abort to
    // guard against and nothing to check here.
    let mut probe: Vec<u64> = Vec::new();
    if probe.try_reserve_exact(zsampler::MAX_BATCH_SIZE).is_ok() {
        eprintln!("skipped: this machine can hold a batch of 2^32 indices");
        return;
    }
    drop(probe);
    let dir = tempfile::tempdir().unwrap();
    let t =
        RaggedStore::<i32>::create(dir.path().join("t"), &CreateOptions::new(Codec::Raw)).unwrap();
    let one = ArrayD::<i32>::zeros(IxDyn(&[3]));
    t.append(std::iter::once(one.view())).unwrap();
    let o = LoaderOptions {
        batch_size: zsampler::MAX_BATCH_SIZE,
        mode: Mode::Iid,
        ..LoaderOptions::default()
    };
    match DataLoader::new([("t", Stream::from(t))], o) {
        Err(
            e @ Error::Config {
                option: "batch_size",
                ..
            },
        ) => assert!(e.to_string().contains("indices"), "{e}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}
