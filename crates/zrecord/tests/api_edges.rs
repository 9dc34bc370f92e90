//! The typed API at its edges: custom elements whose dtype is
//! spelled un-normalised, index forms at the edges, odd layouts, reader
//! threads beside a writer, read-only handles, degenerate dictionary
//! sources.

use ndarray::{Array1, Array2, Array3, ArrayD, IxDyn, arr0, s};
use zrecord::{
    ByteOrder, Codec, CreateOptions, DType, DenseStore, DictSource, DictTier, Element, Error,
    Field, Indices, OpenOptions, RaggedBatch, RaggedStore, ScalarKind, train_dict,
};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A record whose `Element` impl spells its one-byte field `<u1` (as a
/// hand-built dtype may): create stores it as `|u1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
struct Tagged {
    tag: u8,
    pad: [u8; 3],
    v: f32,
}
// SAFETY: repr(C), fields 1 + 3 + 4 bytes, no implicit padding, all Pod.
unsafe impl bytemuck::Zeroable for Tagged {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Tagged {}
impl Element for Tagged {
    const KIND: ScalarKind = ScalarKind::Int; // unread
    fn dtype() -> DType {
        DType::Structured(vec![
            Field {
                name: "tag".into(),
                title: None,
                dtype: DType::Scalar {
                    kind: ScalarKind::UInt,
                    size: 1,
                    order: ByteOrder::Little,
                },
                shape: vec![],
            },
            Field {
                name: "pad".into(),
                title: None,
                dtype: DType::Scalar {
                    kind: ScalarKind::UInt,
                    size: 1,
                    order: ByteOrder::Little,
                },
                shape: vec![3],
            },
            Field {
                name: "v".into(),
                title: None,
                dtype: f32::dtype(),
                shape: vec![],
            },
        ])
    }
}

#[test]
fn an_element_spelling_its_dtype_unnormalised_reopens_and_views() {
    let dir = tmp();
    let t = |i: usize| Tagged {
        tag: i as u8,
        pad: [0; 3],
        v: i as f32,
    };
    let p = dir.path().join("d");
    let s = DenseStore::<Tagged>::create(&p, &[], &CreateOptions::new(Codec::Raw)).unwrap();
    s.append(Array1::from_shape_fn(3, t).view()).unwrap();
    drop(s);
    let s = DenseStore::<Tagged>::open(&p).unwrap();
    assert_eq!(s.get(-1).unwrap().into_iter().next(), Some(t(2)));

    let p = dir.path().join("r");
    let r = RaggedStore::<Tagged>::create(&p, &CreateOptions::new(Codec::Raw)).unwrap();
    r.append([Array1::from_shape_fn(2, t).view()]).unwrap();
    let mut b = RaggedBatch::new();
    r.gather_into(&[0], &mut b).unwrap();
    assert_eq!(b.view::<Tagged>(0).unwrap()[1], t(1));
    drop(r);
    let r = RaggedStore::<Tagged>::open(&p).unwrap();
    assert_eq!(r.get(0).unwrap()[1], t(1));
}

#[test]
fn index_forms_at_the_edges() {
    let dir = tmp();
    let s = DenseStore::<i64>::create(dir.path().join("d"), &[2], &CreateOptions::new(Codec::Raw))
        .unwrap();
    s.append(Array2::from_shape_fn((5, 2), |(i, j)| (10 * i + j) as i64).view())
        .unwrap();
    let rows = |a: ArrayD<i64>| -> Vec<i64> { a.outer_iter().map(|r| r[0] / 10).collect() };
    assert_eq!(
        rows(s.gather(Indices::range(None, None, i64::MIN)).unwrap()),
        vec![4]
    );
    assert_eq!(
        rows(s.gather(Indices::range(None, None, i64::MAX)).unwrap()),
        vec![0]
    );
    assert_eq!(
        rows(
            s.gather(Indices::range(Some(i64::MAX), Some(i64::MIN), -2))
                .unwrap()
        ),
        vec![4, 2, 0]
    );
    assert_eq!(
        rows(
            s.gather(Indices::range(Some(i64::MIN), Some(i64::MAX), 2))
                .unwrap()
        ),
        vec![0, 2, 4]
    );
    let empty = s.gather(Indices::range(Some(3), Some(1), 1)).unwrap();
    assert_eq!(empty.shape(), &[0, 2]);
    assert_eq!(s.gather(&[] as &[i64; 0]).unwrap().shape(), &[0, 2]);
    for bad in [i64::MIN, i64::MAX, 5, -6] {
        match s.get(bad) {
            Err(Error::IndexOutOfRange { index, len: 5, .. }) => assert_eq!(index, i128::from(bad)),
            other => panic!("{bad}: {other:?}"),
        }
    }
    match s.gather(Indices::Mask(&[true; 4])) {
        Err(e @ Error::InvalidArgument { .. }) => {
            assert!(
                e.to_string().contains('4') && e.to_string().contains('5'),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rows(
            s.gather(Indices::Mask(&[false, true, false, false, true]))
                .unwrap()
        ),
        vec![1, 4]
    );
    match s.gather(u64::MAX) {
        Err(Error::IndexOutOfRange { index, .. }) => assert_eq!(index, i128::from(u64::MAX)),
        other => panic!("{other:?}"),
    }
    match s.gather(&[0u64, u64::MAX][..]) {
        Err(Error::IndexOutOfRange { index, .. }) => assert_eq!(index, i128::from(u64::MAX)),
        other => panic!("{other:?}"),
    }
    // gather_into: wrong shapes, wrong layout, out of range.
    let mut out = Array2::<i64>::zeros((2, 2));
    s.gather_into(&[4, 0], out.view_mut()).unwrap();
    assert_eq!(out[[0, 0]], 40);
    assert!(s.gather_into(&[4], out.view_mut()).is_err());
    assert!(s.gather_into(&[4, 9], out.view_mut()).is_err());
    let mut wide = Array2::<i64>::zeros((2, 4));
    assert!(
        s.gather_into(&[4, 0], wide.slice_mut(s![.., ..;2]))
            .is_err()
    );
    let mut t = Array2::<i64>::zeros((2, 2));
    assert!(
        s.gather_into(&[4, 0], t.view_mut().reversed_axes())
            .is_err()
    );
    let mut flat = Array1::<i64>::zeros(4);
    assert!(s.gather_into(&[4, 0], flat.view_mut()).is_err());
    let mut none = Array2::<i64>::zeros((0, 2));
    s.gather_into(&[], none.view_mut()).unwrap();
}

#[test]
fn appends_of_any_layout_store_c_order() {
    let dir = tmp();
    let s = DenseStore::<u16>::create(dir.path().join("d"), &[3], &CreateOptions::new(Codec::Zstd))
        .unwrap();
    let a = Array2::from_shape_fn((3, 3), |(i, j)| (10 * i + j) as u16);
    s.append(a.t()).unwrap();
    s.append(a.slice(s![..;-1, ..;2])).err().unwrap(); // (3, 2): wrong item shape
    let b = Array2::from_shape_fn((4, 6), |(i, j)| (100 * i + j) as u16);
    s.append(b.slice(s![..;-2, ..;2])).unwrap();
    let got = s.gather(..).unwrap();
    assert_eq!(got.shape(), &[5, 3]);
    assert_eq!(got.slice(s![..3, ..]).into_dyn(), a.t().into_dyn());
    assert_eq!(
        got.slice(s![3.., ..]).into_dyn(),
        b.slice(s![..;-2, ..;2]).into_dyn()
    );
    // zero-size batch: an error, nothing written
    assert!(s.append(Array2::<u16>::zeros((0, 3)).view()).is_err());
    assert_eq!(s.len(), 5);
    // Scalar store: 0-d and 1-d batches
    let sc = DenseStore::<f64>::create(dir.path().join("s"), &[], &CreateOptions::new(Codec::Raw))
        .unwrap();
    sc.append(arr0(1.5).view()).unwrap();
    sc.append(Array1::from(vec![2.5, 3.5]).view()).unwrap();
    assert_eq!(sc.get(-1).unwrap(), arr0(3.5).into_dyn());
    assert_eq!(sc.gather(..).unwrap().shape(), &[3]);
}

#[test]
fn ragged_scalars_high_ranks_and_batch_reuse() {
    let dir = tmp();
    let r =
        RaggedStore::<i16>::create(dir.path().join("r"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let r4 = ArrayD::from_shape_fn(IxDyn(&[2, 1, 3, 2]), |ix| {
        (ix[0] * 100 + ix[2] * 10 + ix[3]) as i16
    });
    let sc = arr0(7i16).into_dyn();
    let v = Array3::from_shape_fn((2, 3, 4), |(a, b, c)| (a * 12 + b * 4 + c) as i16);
    let vt = v.view().permuted_axes([2, 0, 1]).into_dyn();
    r.append([r4.view(), sc.view(), vt.view()]).unwrap();
    r.append([sc.view()]).unwrap();
    let mut b = RaggedBatch::new();
    r.gather_into(&[0, 1, 2, 3, 2, 0], &mut b).unwrap();
    assert_eq!(b.len(), 6);
    assert_eq!(b.view::<i16>(0).unwrap(), r4.view());
    assert_eq!(b.view::<i16>(1).unwrap(), sc.view());
    assert_eq!(b.view::<i16>(2).unwrap(), vt);
    assert_eq!(b.view::<i16>(5).unwrap(), r4.view());
    assert!(b.view::<u16>(0).is_err());
    r.gather_into(&[1], &mut b).unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b.offsets(), &[0, 2]);
    assert_eq!(b.dim_offsets(), &[0, 0]);
    assert_eq!(b.view::<i16>(0).unwrap(), sc.view());
    r.gather_into(&[], &mut b).unwrap();
    assert_eq!(b.len(), 0);
    assert!(b.data().is_empty());
    r.gather_into(&[2, 0], &mut b).unwrap();
    assert_eq!(b.view::<i16>(0).unwrap(), vt);
    // a batch gathered from a store of another dtype
    let f =
        RaggedStore::<f64>::create(dir.path().join("f"), &CreateOptions::new(Codec::Raw)).unwrap();
    f.append([Array1::from(vec![1.0, 2.0]).view()]).unwrap();
    f.gather_into(&[0], &mut b).unwrap();
    assert_eq!(b.view::<f64>(0).unwrap()[1], 2.0);
    assert!(b.view::<i16>(0).is_err());
    assert!(r.gather_into(&[4], &mut b).is_err());
    assert_eq!(b.len(), 0);
    assert_eq!(r.get(-4).unwrap(), r4);
    assert!(r.get(i64::MIN).is_err());
}

#[test]
fn read_only_handles_refuse_writes_with_a_clear_error() {
    let dir = tmp();
    let p = dir.path().join("d");
    DenseStore::<f32>::create(&p, &[2], &CreateOptions::new(Codec::Raw))
        .unwrap()
        .append(Array2::<f32>::zeros((3, 2)).view())
        .unwrap();
    let mut ro = DenseStore::<f32>::open_with(&p, &OpenOptions::read_only()).unwrap();
    let refused = |errors: [Error; 3]| {
        for e in errors {
            let m = zrecord::error_chain(&e);
            assert!(m.contains("read-only") || m.contains("read only"), "{m}");
        }
    };
    refused([
        ro.append(Array2::<f32>::zeros((1, 2)).view()).unwrap_err(),
        ro.delete(0).unwrap_err(),
        ro.compact().unwrap_err(),
    ]);
    assert_eq!(ro.len(), 3);
    ro.sync().unwrap();
    let pr = dir.path().join("r");
    RaggedStore::<u8>::create(&pr, &CreateOptions::new(Codec::Raw))
        .unwrap()
        .append_bytes([&b"ab"[..]])
        .unwrap();
    let mut rr = RaggedStore::<u8>::open_with(&pr, &OpenOptions::read_only()).unwrap();
    refused([
        rr.append_bytes([&b"x"[..]]).unwrap_err(),
        rr.delete(0).unwrap_err(),
        rr.compact().unwrap_err(),
    ]);
    // mismatched expectations name both sides
    let e = DenseStore::<f32>::open_with(&p, &OpenOptions::read_only().item_shape(&[3]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("[3]") && e.contains("[2]"), "{e}");
    let e = DenseStore::<f64>::open_with(&p, &OpenOptions::read_only())
        .unwrap_err()
        .to_string();
    assert!(e.contains("<f8") && e.contains("<f4"), "{e}");
    let e = DenseStore::<f32>::open_with(&p, &OpenOptions::read_only().codec(Codec::Zstd))
        .unwrap_err()
        .to_string();
    assert!(e.contains("zstd") && e.contains("raw"), "{e}");
    let e = RaggedStore::<f32>::open_with(&p, &OpenOptions::read_only())
        .unwrap_err()
        .to_string();
    assert!(e.contains("dense") && e.contains("ragged"), "{e}");
}

#[test]
fn train_dict_on_degenerate_sources_errs_or_trains_never_panics() {
    let dir = tmp();
    let d = DenseStore::<u8>::create(dir.path().join("d"), &[64], &CreateOptions::new(Codec::Raw))
        .unwrap();
    for tier in [DictTier::Fast, DictTier::Balanced, DictTier::Max] {
        assert!(train_dict(DictSource::from(&d), tier).is_err());
    }
    d.append(Array2::<u8>::from_elem((1, 64), 7).view())
        .unwrap();
    let _ = train_dict(DictSource::from(&d), DictTier::Fast);
    d.append(Array2::<u8>::from_elem((5000, 64), 7).view())
        .unwrap();
    for tier in [DictTier::Fast, DictTier::Balanced, DictTier::Max] {
        let _ = train_dict(DictSource::from(&d), tier);
    }
    let r =
        RaggedStore::<u8>::create(dir.path().join("r"), &CreateOptions::new(Codec::Raw)).unwrap();
    assert!(train_dict(DictSource::from(&r), DictTier::Fast).is_err());
    r.append_bytes([&b"x"[..]]).unwrap();
    let _ = train_dict(DictSource::from(&r), DictTier::Fast);
    let _ = train_dict(DictSource::records([&b""[..], &b""[..]]), DictTier::Fast);
    assert!(train_dict(DictSource::records(std::iter::empty()), DictTier::Fast).is_err());
    let _ = train_dict(
        DictSource::Array {
            data: &[],
            record_bytes: 4,
        },
        DictTier::Fast,
    )
    .unwrap_err();
    let _ = train_dict(
        DictSource::Array {
            data: &[1, 2, 3],
            record_bytes: 0,
        },
        DictTier::Fast,
    )
    .unwrap_err();
}

#[test]
fn f16_and_bool_elements_round_trip() {
    let dir = tmp();
    let h = DenseStore::<half::f16>::create(
        dir.path().join("h"),
        &[2],
        &CreateOptions::new(Codec::Raw),
    )
    .unwrap();
    h.append(Array2::from_elem((2, 2), half::f16::from_f32(1.5)).view())
        .unwrap();
    assert_eq!(h.get(1).unwrap()[[0]], half::f16::from_f32(1.5));
    assert_eq!(h.dtype().to_numpy_str(), "<f2");
    let b =
        RaggedStore::<zrecord::Bool>::create(dir.path().join("b"), &CreateOptions::new(Codec::Raw))
            .unwrap();
    b.append([Array1::from(vec![zrecord::Bool(1), zrecord::Bool(0)]).view()])
        .unwrap();
    assert!(b.get(0).unwrap()[[0]].get());
    assert_eq!(b.dtype().to_numpy_str(), "|b1");
}

/// Readers on many threads while two writers append through the same
/// handle: every record read is whole and is the record its index names
/// (record i of the dense store holds i in every slot; ragged record i has
/// i % 7 + 1 elements all equal to i).
#[test]
fn gathers_beside_appends_on_one_handle_see_whole_records() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tmp();
    for codec in [Codec::Raw, Codec::Zstd] {
        let d = DenseStore::<u64>::create(
            dir.path().join(format!("d{}", codec.name())),
            &[16],
            &CreateOptions::new(codec),
        )
        .unwrap();
        let r = RaggedStore::<u64>::create(
            dir.path().join(format!("r{}", codec.name())),
            &CreateOptions::new(codec),
        )
        .unwrap();
        let done = AtomicBool::new(false);
        let next = std::sync::Mutex::new(0u64);
        std::thread::scope(|sc| {
            for _ in 0..2 {
                sc.spawn(|| {
                    for _ in 0..150 {
                        // Appends of both stores are serialised by `next`
                        // so record i is the same i in both.
                        let mut n = next.lock().unwrap();
                        let base = *n;
                        let rows = Array2::from_shape_fn((8, 16), |(i, _)| base + i as u64);
                        assert_eq!(d.append(rows.view()).unwrap(), base);
                        let recs: Vec<Array1<u64>> = (0..8)
                            .map(|i| Array1::from_elem(((base + i) % 7 + 1) as usize, base + i))
                            .collect();
                        assert_eq!(r.append(recs.iter().map(|a| a.view())).unwrap(), base);
                        *n += 8;
                    }
                });
            }
            for t in 0..4u64 {
                let (d, r, done) = (&d, &r, &done);
                sc.spawn(move || {
                    let mut b = RaggedBatch::new();
                    let mut x = t + 1;
                    while !done.load(Ordering::Relaxed) {
                        let len = d.len().min(r.len());
                        if len == 0 {
                            continue;
                        }
                        let idx: Vec<u64> = (0..32)
                            .map(|_| {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                x % len
                            })
                            .collect();
                        let got = d.gather(&idx).unwrap();
                        for (k, row) in got.outer_iter().enumerate() {
                            assert!(row.iter().all(|&v| v == idx[k]), "dense {}", idx[k]);
                        }
                        r.gather_into(&idx, &mut b).unwrap();
                        for (k, &i) in idx.iter().enumerate() {
                            let v = b.view::<u64>(k).unwrap();
                            assert_eq!(v.len() as u64, i % 7 + 1);
                            assert!(v.iter().all(|&e| e == i), "ragged {i}");
                        }
                    }
                });
            }
            // The readers stop once the writers are done.
            while *next.lock().unwrap() < 2 * 150 * 8 {
                std::thread::yield_now();
            }
            done.store(true, Ordering::Relaxed);
        });
        assert_eq!((d.len(), r.len()), (2400, 2400));
    }
}

#[test]
fn deletes_of_empty_duplicate_and_every_form() {
    let dir = tmp();
    let mut d =
        DenseStore::<u32>::create(dir.path().join("d"), &[1], &CreateOptions::new(Codec::Zstd))
            .unwrap();
    d.append(Array2::from_shape_fn((10, 1), |(i, _)| i as u32).view())
        .unwrap();
    d.delete(&[] as &[i64; 0]).unwrap();
    d.delete(Indices::range(Some(3), Some(3), 1)).unwrap();
    assert_eq!(d.len(), 10);
    d.delete(&[1i64, 1, -1, -1]).unwrap();
    assert_eq!(d.len(), 8);
    let mut live: Vec<u32> = d.gather(..).unwrap().iter().copied().collect();
    live.sort();
    assert_eq!(live, vec![0, 2, 3, 4, 5, 6, 7, 8]);
    assert!(d.delete(Indices::Mask(&[true; 9])).is_err());
    assert!(d.delete(8u64).is_err());
    d.delete(Indices::range(None, None, -3)).unwrap();
    assert_eq!(d.len(), 5);
    d.compact().unwrap();
    d.delete(..).unwrap();
    assert_eq!(d.len(), 0);
    d.compact().unwrap();
    assert_eq!(d.gather(..).unwrap().shape(), &[0, 1]);
    assert!(d.get(0).is_err());
    d.append(Array2::from_elem((1, 1), 42u32).view()).unwrap();
    assert_eq!(d.get(0).unwrap()[[0]], 42);

    let mut r =
        RaggedStore::<u8>::create(dir.path().join("r"), &CreateOptions::new(Codec::Raw)).unwrap();
    r.append_bytes([&b"a"[..], b"bb", b"ccc"]).unwrap();
    r.delete(&[0i64, 0, 2]).unwrap();
    assert_eq!(
        r.gather(..).unwrap(),
        vec![ArrayD::from_shape_vec(IxDyn(&[2]), b"bb".to_vec()).unwrap()]
    );
    r.delete(..).unwrap();
    r.compact().unwrap();
    assert!(r.is_empty());
    r.append_bytes([&b"z"[..]]).unwrap();
    assert_eq!(r.get(0).unwrap().len(), 1);
}

/// Four f32 aligned to 16 bytes, as SIMD code declares them.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq)]
struct V4([f32; 4]);
// SAFETY: repr(C) over `[f32; 4]` (16 bytes), align 16 adds no padding.
unsafe impl bytemuck::Zeroable for V4 {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for V4 {}
impl Element for V4 {
    const KIND: ScalarKind = ScalarKind::Float; // unread
    fn dtype() -> DType {
        DType::Structured(vec![Field {
            name: "v".into(),
            title: None,
            dtype: f32::dtype(),
            shape: vec![4],
        }])
    }
}

/// Regression: a ragged gather views payloads inside a buffer aligned to 8
/// bytes, so records of a 16-aligned element came back as "cannot be viewed"
/// errors from `RaggedStore::gather` / `get` (whenever the shape records
/// before them summed to an odd number of words).
#[test]
fn ragged_records_of_an_over_aligned_element_gather() {
    let dir = tmp();
    let r =
        RaggedStore::<V4>::create(dir.path().join("r"), &CreateOptions::new(Codec::Raw)).unwrap();
    let v = |i: usize| V4([i as f32, 1.0, 2.0, 3.0]);
    // Rank 2: a 24-byte shape record each, so an odd number of them puts
    // the payloads 8 bytes past a 16-byte boundary.
    let recs: Vec<ArrayD<V4>> = (1..5)
        .map(|n| ArrayD::from_shape_fn(IxDyn(&[n, 1]), |ix| v(ix[0] + n)))
        .collect();
    r.append(recs.iter().map(|a| a.view())).unwrap();
    for idx in [vec![0i64], vec![1, 2], vec![3, 0, 2], vec![0, 1, 2, 3]] {
        let got = r.gather(&idx).unwrap();
        for (k, &i) in idx.iter().enumerate() {
            assert_eq!(got[k], recs[i as usize], "{idx:?}");
        }
    }
    assert_eq!(r.get(-1).unwrap(), recs[3]);
    // Views without copying, in a reused batch and in its clone.
    let mut b = RaggedBatch::new();
    for idx in [vec![0u64], vec![1, 2], vec![3, 0, 2], vec![2]] {
        r.gather_into(&idx, &mut b).unwrap();
        let c = b.clone();
        for (k, &i) in idx.iter().enumerate() {
            assert_eq!(b.view::<V4>(k).unwrap(), recs[i as usize].view(), "{idx:?}");
            assert_eq!(c.view::<V4>(k).unwrap(), recs[i as usize].view(), "{idx:?}");
        }
        assert_eq!(
            (c.offsets(), c.dims(), c.data()),
            (b.offsets(), b.dims(), b.data())
        );
    }
}
