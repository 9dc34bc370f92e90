//! Edge cases of the loader's contract: scalar and odd-length ragged records,
//! zero-size dense items, resume at the largest start step, resume and
//! sharding across worker counts and prefetch depths, batches that outlive
//! their loader.

use std::collections::HashSet;

use loaderx::{Batch, DataLoader, Error, LoaderOptions, MAX_START_STEP, Mode, Stream};
use ndarray::{ArrayD, IxDyn};
use zrecord::{Codec, CreateOptions, DenseStore, RaggedStore};
use zsampler::Sampler;

const N: u64 = 97;

/// The shape of r[i]: [i % 4 + 1], or a scalar when i % 5 == 0, or [2, 1]
/// when i % 11 == 0.
fn shape_of(i: usize) -> Vec<usize> {
    if i.is_multiple_of(11) {
        vec![2, 1]
    } else if i.is_multiple_of(5) {
        vec![]
    } else {
        vec![i % 4 + 1]
    }
}

/// r[i]: f64 record of shape [`shape_of`]`(i)` filled with i; b[i]: u8 of shape [i % 3 + 1] (odd
/// lengths, so the f64 payloads of one batch do not all start 8-aligned
/// unless the batch aligns them). y[i] = i.
fn fixture(dir: &std::path::Path) -> Vec<(String, Stream)> {
    let r = RaggedStore::<f64>::create(dir.join("r"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let recs: Vec<ArrayD<f64>> = (0..N as usize)
        .map(|i| ArrayD::from_shape_fn(IxDyn(&shape_of(i)), |_| i as f64))
        .collect();
    r.append(recs.iter().map(|a| a.view())).unwrap();
    let b = RaggedStore::<u8>::create(dir.join("b"), &CreateOptions::new(Codec::Raw)).unwrap();
    let recs: Vec<ArrayD<u8>> = (0..N as usize)
        .map(|i| ArrayD::from_elem(IxDyn(&[i % 3 + 1]), i as u8))
        .collect();
    b.append(recs.iter().map(|a| a.view())).unwrap();
    let y = DenseStore::<i64>::create(dir.join("y"), &[], &CreateOptions::new(Codec::Raw)).unwrap();
    y.append(ndarray::Array1::from_iter(0..N as i64).view())
        .unwrap();
    vec![
        ("r".into(), Stream::from(r)),
        ("b".into(), Stream::from(b)),
        ("y".into(), Stream::from(y)),
    ]
}

fn check(batch: &Batch) {
    let r = batch.ragged::<f64>("r").unwrap();
    let b = batch.ragged::<u8>("b").unwrap();
    let y = batch.dense::<i64>("y").unwrap();
    for (k, &i) in batch.indices().iter().enumerate() {
        let i = i as usize;
        assert_eq!(y[[k]], i as i64);
        let want = shape_of(i);
        assert_eq!(r[k].shape(), want.as_slice(), "record {i}");
        assert!(r[k].iter().all(|&v| v == i as f64), "record {i}");
        assert_eq!(b[k].shape(), &[i % 3 + 1]);
        assert!(b[k].iter().all(|&v| v == i as u8));
    }
}

#[test]
fn scalar_and_odd_length_ragged_records_view_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        for batch_size in [1, 3, 8, 200] {
            let o = LoaderOptions {
                batch_size,
                mode,
                workers: 2,
                ..LoaderOptions::default()
            };
            for item in DataLoader::new(streams.clone(), o).unwrap().take(30) {
                check(&item.unwrap().value);
            }
        }
    }
}

/// A dense record of zero bytes is refused when the store is made, so no
/// loader ever has to view a zero-size item: the refusal is an error.
#[test]
fn zero_size_dense_items_are_refused_before_a_loader_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let made = DenseStore::<f32>::create(
        dir.path().join("x"),
        &[2, 0],
        &CreateOptions::new(Codec::Zstd),
    );
    assert!(made.is_err());
}

/// A panic is reported as `TransformPanicked` at its step whatever the
/// worker count and order, with a non-string payload too, and the loader
/// then ends.
/// Regression: a loader over empty stores failed with the sampler's "the
/// index space is empty (n = 0): there is nothing to sample", naming no
/// stream.
#[test]
fn a_loader_over_empty_streams_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let x = DenseStore::<f32>::create(dir.path().join("x"), &[2], &CreateOptions::new(Codec::Raw))
        .unwrap();
    let y =
        RaggedStore::<u8>::create(dir.path().join("y"), &CreateOptions::new(Codec::Raw)).unwrap();
    let Err(e) = DataLoader::new(
        [("images", Stream::from(x)), ("tokens", Stream::from(y))],
        LoaderOptions::default(),
    ) else {
        panic!("empty streams are refused");
    };
    assert!(matches!(e, Error::EmptyStreams { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains(r#""images": 0"#) && m.contains(r#""tokens": 0"#),
        "{m}"
    );
}

#[test]
fn a_transform_panic_is_reported_at_its_step_in_every_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    for workers in [0, 1, 3] {
        for ordered in [true, false] {
            for string in [true, false] {
                let o = LoaderOptions {
                    batch_size: 4,
                    workers,
                    ordered,
                    ..LoaderOptions::default()
                };
                let mut loader = DataLoader::with_transform(streams.clone(), o, move |b: Batch| {
                    if b.step() == 3 {
                        if string {
                            panic!("exploded at {}", b.step());
                        }
                        std::panic::panic_any(7u32);
                    }
                    Ok::<_, Error>(b.step())
                })
                .unwrap();
                let mut ok = HashSet::new();
                let err = loop {
                    match loader.next().expect("ends only after the error") {
                        Ok(s) => assert!(ok.insert(s.value)),
                        Err(e) => break e,
                    }
                };
                match err {
                    Error::TransformPanicked { step: 3, message } => {
                        assert!(!string || message.contains("exploded at 3"), "{message}")
                    }
                    other => panic!("w{workers} {ordered} {string}: {other:?}"),
                }
                if ordered {
                    assert_eq!(ok, (0..3).collect());
                }
                assert!(!ok.contains(&3));
                assert!(loader.next().is_none());
            }
        }
    }
}

fn indices(streams: &[(String, Stream)], o: LoaderOptions, take: usize) -> Vec<(u64, Vec<u64>)> {
    DataLoader::with_transform(streams.to_vec(), o, |b: Batch| {
        check(&b);
        Ok::<_, Error>(b.indices().to_vec())
    })
    .unwrap()
    .take(take)
    .map(|r| {
        let s = r.unwrap();
        (s.step, s.value)
    })
    .collect()
}

#[test]
fn resume_equals_the_fresh_stream_for_every_workers_and_prefetch() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        let base = LoaderOptions {
            batch_size: 10,
            mode,
            seed: u64::MAX,
            ..LoaderOptions::default()
        };
        let fresh = indices(&streams, base.clone(), 30);
        for (workers, prefetch) in [(0, 1), (1, 1), (3, 2), (5, 7)] {
            for k in [0u64, 1, 9, 17] {
                let o = LoaderOptions {
                    workers,
                    prefetch,
                    start_step: k,
                    ..base.clone()
                };
                let got = indices(&streams, o, 30 - k as usize);
                assert_eq!(
                    got,
                    fresh[k as usize..],
                    "{mode:?} w{workers} p{prefetch} k{k}"
                );
            }
        }
    }
}

#[test]
fn the_largest_start_step_runs_in_both_orders() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        let s = Sampler::new(N, 10, mode, 3).unwrap();
        for ordered in [true, false] {
            let o = LoaderOptions {
                batch_size: 10,
                mode,
                seed: 3,
                start_step: MAX_START_STEP,
                workers: 2,
                ordered,
                ..LoaderOptions::default()
            };
            let got = indices(&streams, o, 12);
            let steps: HashSet<u64> = got.iter().map(|(step, _)| *step).collect();
            assert_eq!(steps.len(), got.len());
            for (k, (step, idx)) in got.iter().enumerate() {
                if ordered {
                    assert_eq!(*step, MAX_START_STEP + k as u64);
                } else {
                    // Unordered: a slow step may be overtaken, not lost.
                    assert!(*step >= MAX_START_STEP);
                }
                assert_eq!(idx, &s.batch(*step));
            }
        }
    }
    let o = LoaderOptions {
        start_step: MAX_START_STEP + 1,
        ..LoaderOptions::default()
    };
    assert!(matches!(
        DataLoader::new(streams, o),
        Err(Error::Config {
            option: "start_step",
            ..
        })
    ));
}

#[test]
fn shards_of_a_step_are_disjoint_slices_covering_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    // Uneven: 10 = 3 + 3 + 4; cyclic with n < batch: 97 over 7 ranks.
    for (mode, batch_size, world) in [
        (Mode::Cyclic, 10, 3),
        (Mode::Iid, 10, 4),
        (Mode::Sequential, 7, 7),
        (Mode::Cyclic, 500, 7),
    ] {
        let base = LoaderOptions {
            batch_size,
            mode,
            workers: 2,
            ..LoaderOptions::default()
        };
        let whole = indices(&streams, base.clone(), 12);
        let mut joined = vec![Vec::new(); 12];
        for rank in 0..world {
            let o = LoaderOptions {
                shard: Some((rank, world)),
                start_step: 3,
                ..base.clone()
            };
            for (k, (step, idx)) in indices(&streams, o, 9).into_iter().enumerate() {
                assert_eq!(step, 3 + k as u64);
                joined[3 + k].extend(idx);
            }
        }
        for (k, j) in joined.iter().enumerate().skip(3) {
            assert_eq!(j, &whole[k].1, "{mode:?} step {k}");
            if mode == Mode::Cyclic {
                assert_eq!(j.iter().collect::<HashSet<_>>().len(), j.len());
            }
        }
    }
}

#[test]
fn batches_outlive_their_loader_and_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    let o = LoaderOptions {
        batch_size: 16,
        workers: 3,
        prefetch: 2,
        ..LoaderOptions::default()
    };
    let mut loader = DataLoader::new(streams, o).unwrap();
    let kept: Vec<Batch> = (0..20)
        .map(|_| loader.next().unwrap().unwrap().value)
        .collect();
    drop(loader);
    for (k, b) in kept.iter().enumerate() {
        assert_eq!(b.step(), k as u64);
        check(b);
    }
    // Dropping them in any order after the loader is gone is fine.
    let mut kept = kept;
    kept.reverse();
    drop(kept);
}

#[test]
fn unordered_delivery_from_a_start_step_gives_each_step_once() {
    let dir = tempfile::tempdir().unwrap();
    let streams = fixture(dir.path());
    for workers in [0, 1, 4] {
        let o = LoaderOptions {
            batch_size: 8,
            mode: Mode::Iid,
            workers,
            prefetch: 3,
            start_step: 1000,
            ordered: false,
            ..LoaderOptions::default()
        };
        let s = Sampler::new(N, 8, Mode::Iid, 42).unwrap();
        let mut loader = DataLoader::new(streams.clone(), o).unwrap();
        let mut seen = HashSet::new();
        let mut below = 0;
        let mut items = 0;
        while below < 40 {
            let item = loader.next().unwrap().unwrap();
            items += 1;
            assert!(items < 5000, "steps lost");
            assert!(item.step >= 1000);
            assert!(seen.insert(item.step), "step {} twice", item.step);
            assert_eq!(item.value.indices(), s.batch(item.step).as_slice());
            below += usize::from(item.step < 1040);
        }
        assert_eq!(loader.step(), 1000 + items);
    }
}

/// Stores the process keeps writing to while a loader reads them: every
/// batch still reads the records that were there when the loader was built,
/// intact, while appends seal and compress new chunks beside the reads.
#[test]
fn concurrent_appends_to_the_loaders_own_stores_do_not_disturb_batches() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let x = DenseStore::<i64>::create(dir.path().join("x"), &[3], &CreateOptions::new(Codec::Zstd))
        .unwrap();
    let t =
        RaggedStore::<i32>::create(dir.path().join("t"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let rec = |i: i64| ndarray::Array2::from_shape_fn((1, 3), |(_, j)| i * 3 + j as i64);
    let tok = |i: i64| ArrayD::from_elem(IxDyn(&[(i % 5 + 1) as usize]), i as i32);
    for i in 0..500 {
        x.append(rec(i).view()).unwrap();
        t.append([tok(i).view()]).unwrap();
    }
    let (x, t) = (Arc::new(x.into_core()), Arc::new(t.into_core()));
    let o = LoaderOptions {
        batch_size: 32,
        mode: Mode::Iid,
        workers: 2,
        ..LoaderOptions::default()
    };
    let loader = DataLoader::new(
        [
            ("x", Stream::from(Arc::clone(&x))),
            ("t", Stream::from(Arc::clone(&t))),
        ],
        o,
    )
    .unwrap();
    let writer = std::thread::spawn(move || {
        for i in 500..3000i64 {
            let r: Vec<i64> = (0..3).map(|j| i * 3 + j).collect();
            x.append_bytes(bytemuck::cast_slice(&r)).unwrap();
            let tk = vec![i as i32; (i % 5 + 1) as usize];
            t.append_records([(&[tk.len() as u64][..], bytemuck::cast_slice::<i32, u8>(&tk))])
                .unwrap();
        }
    });
    for item in loader.take(200) {
        let b = item.unwrap().value;
        let xs = b.dense::<i64>("x").unwrap();
        let ts = b.ragged::<i32>("t").unwrap();
        for (k, &i) in b.indices().iter().enumerate() {
            assert!(i < 500);
            let i = i as i64;
            assert_eq!(
                [xs[[k, 0]], xs[[k, 1]], xs[[k, 2]]],
                [i * 3, i * 3 + 1, i * 3 + 2]
            );
            assert_eq!(ts[k].shape(), &[(i % 5 + 1) as usize]);
            assert!(ts[k].iter().all(|&v| v == i as i32));
        }
    }
    writer.join().unwrap();
}
