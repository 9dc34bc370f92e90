//! Dense stores: guards against records that do not come back bit-exact
//! (every dtype, structured and big-endian ones included), appends of the
//! wrong shape slipping through, stores opened under the wrong dtype, shape,
//! kind or codec without an error naming both sides, and a second writer or
//! a writer beside readers getting in.

use ndarray::{Array, Array2, ArrayD, Axis, IxDyn, s};
use zrecord::{
    Bool, Codec, Complex, CreateOptions, DType, DenseCore, DenseStore, Durability, Element, Error,
    Indices, Kind, OpenOptions, RaggedCore, RaggedStore, probe,
};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Deterministic pseudo-random bytes.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

const ALL_DTYPES: &[&str] = &[
    "|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "<c8",
    "<c16", ">i2", ">i4", ">i8", ">u2", ">u4", ">u8", ">f2", ">f4", ">f8", ">c8", ">c16",
];

#[test]
fn every_dtype_round_trips_bit_exact_through_reopen() {
    let dir = tmp();
    for (k, name) in ALL_DTYPES.iter().enumerate() {
        let dt = DType::parse(name).unwrap();
        for codec in [Codec::Raw, Codec::Zstd] {
            let path = dir.path().join(format!("{k}-{}", codec.name()));
            let shape = [3u64, 2];
            let rb = 6 * dt.itemsize();
            let data = bytes(rb * 5, k as u64);
            {
                let core =
                    DenseCore::create(&path, &dt, &shape, &CreateOptions::new(codec)).unwrap();
                assert_eq!(core.append_bytes(&data[..rb * 2]).unwrap(), 0);
                assert_eq!(core.append_bytes(&data[rb * 2..]).unwrap(), 2);
                core.sync().unwrap();
            }
            let core = DenseCore::open(&path, &OpenOptions::read_only()).unwrap();
            assert_eq!(core.dtype(), &dt);
            assert_eq!(core.item_shape(), &shape);
            assert_eq!(core.record_bytes(), rb);
            assert_eq!(core.codec(), codec);
            let mut out = vec![0u8; rb * 3];
            core.gather_bytes_into(&[4, 0, 2], &mut out).unwrap();
            assert_eq!(&out[..rb], &data[4 * rb..5 * rb], "{name}");
            assert_eq!(&out[rb..2 * rb], &data[..rb], "{name}");
            assert_eq!(&out[2 * rb..], &data[2 * rb..3 * rb], "{name}");
        }
    }
}

#[test]
fn structured_dtype_round_trips() {
    let dir = tmp();
    // [('x', '<f4'), ('y', '>i2', (2,)), ('z', [('a', '|u1'), ('b', '<f8')])]
    let dt = zrecord::dtype::decode_identity(&{
        let mut v = Vec::new();
        let descr = rmpv::Value::Array(vec![
            rmpv::Value::Array(vec!["x".into(), "<f4".into()]),
            rmpv::Value::Array(vec![
                "y".into(),
                ">i2".into(),
                rmpv::Value::Array(vec![2.into()]),
            ]),
            rmpv::Value::Array(vec![
                "z".into(),
                rmpv::Value::Array(vec![
                    rmpv::Value::Array(vec!["a".into(), "|u1".into()]),
                    rmpv::Value::Array(vec!["b".into(), "<f8".into()]),
                ]),
            ]),
        ]);
        rmpv::encode::write_value(&mut v, &rmpv::Value::Map(vec![("dtype".into(), descr)]))
            .unwrap();
        v
    })
    .unwrap()
    .dtype;
    assert_eq!(dt.itemsize(), 4 + 4 + 9);
    let path = dir.path().join("s");
    let data = bytes(dt.itemsize() * 7, 3);
    {
        let core = DenseCore::create(&path, &dt, &[], &CreateOptions::new(Codec::Zstd)).unwrap();
        core.append_array_bytes(&dt, &[7], &data).unwrap();
    }
    let core = DenseCore::open(&path, &OpenOptions::default().dtype(dt.clone())).unwrap();
    let mut out = vec![0u8; data.len()];
    core.gather_bytes_into(&(0..7).collect::<Vec<_>>(), &mut out)
        .unwrap();
    assert_eq!(out, data);
}

fn typed_round_trip<T: Element + PartialEq>(make: impl Fn(usize) -> T) {
    let dir = tmp();
    let path = dir.path().join("t");
    let a = Array::from_shape_fn((6, 2, 3), |(i, j, k)| make(i * 6 + j * 3 + k)).into_dyn();
    {
        let s = DenseStore::<T>::create(&path, &[2, 3], &CreateOptions::new(Codec::Zstd)).unwrap();
        s.append(a.slice(s![..4, .., ..])).unwrap();
        // A non-contiguous view is copied into C order.
        let reversed = a.slice(s![4..;-1, .., ..]);
        assert_eq!(s.append(reversed).unwrap(), 4);
    }
    let s = DenseStore::<T>::open(&path).unwrap();
    assert_eq!(s.len(), 6);
    let got = s.gather(..).unwrap();
    assert_eq!(got.slice(s![..4, .., ..]), a.slice(s![..4, .., ..]));
    assert_eq!(got.index_axis(Axis(0), 4), a.index_axis(Axis(0), 5));
    assert_eq!(s.get(-1).unwrap(), a.index_axis(Axis(0), 4));
}

#[test]
fn typed_stores_of_every_element_type() {
    typed_round_trip(|i| i as i8);
    typed_round_trip(|i| i as i16 * -300);
    typed_round_trip(|i| i as i32 * -70_000);
    typed_round_trip(|i| i as i64 * -(1 << 40));
    typed_round_trip(|i| i as u8);
    typed_round_trip(|i| i as u16 * 1000);
    typed_round_trip(|i| i as u32 * 100_000);
    typed_round_trip(|i| i as u64 * (1 << 40));
    typed_round_trip(|i| i as f32 / 3.0);
    typed_round_trip(|i| i as f64 / 7.0);
    typed_round_trip(|i| half::f16::from_f32(i as f32 / 4.0));
    typed_round_trip(|i| Bool::from(i % 3 == 0));
    typed_round_trip(|i| Complex {
        re: i as f32,
        im: -(i as f32),
    });
    typed_round_trip(|i| Complex {
        re: i as f64 / 3.0,
        im: 1.0,
    });
}

#[test]
fn every_index_form_gathers_what_numpy_would() {
    let dir = tmp();
    let s = DenseStore::<i64>::create(dir.path().join("i"), &[], &CreateOptions::new(Codec::Raw))
        .unwrap();
    s.append(Array::from_iter(0..10i64).view()).unwrap();
    let v = |idx: Indices<'_>| s.gather(idx).unwrap().into_raw_vec_and_offset().0;
    assert_eq!(v(Indices::One(-2)), vec![8]);
    assert_eq!(v(Indices::range(Some(1), Some(-1), 3)), vec![1, 4, 7]);
    assert_eq!(v(Indices::range(None, None, -4)), vec![9, 5, 1]);
    assert_eq!(v(Indices::List(&[3, -1, 3])), vec![3, 9, 3]);
    assert_eq!(v(Indices::Positions(&[0, 9])), vec![0, 9]);
    let mask: Vec<bool> = (0..10).map(|i| i % 4 == 1).collect();
    assert_eq!(v(Indices::Mask(&mask)), vec![1, 5, 9]);
    assert_eq!(v((2..5).into()), vec![2, 3, 4]);
    assert_eq!(s.get(0).unwrap().ndim(), 0);
    for bad in [10i64, -11] {
        match s.gather(bad) {
            Err(Error::IndexOutOfRange { index, len: 10, .. }) => {
                assert_eq!(index, i128::from(bad))
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(matches!(
        s.gather(&[0i64, 12][..]),
        Err(Error::IndexOutOfRange {
            index: 12,
            len: 10,
            ..
        })
    ));
    assert!(matches!(
        s.gather(&[true, false][..]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        s.core().gather_bytes_into(&[10], &mut [0u8; 8]),
        Err(Error::IndexOutOfRange {
            index: 10,
            len: 10,
            ..
        })
    ));
}

#[test]
fn gather_into_checks_shape_and_layout_and_fills_in_place() {
    let dir = tmp();
    let s = DenseStore::<f32>::create(dir.path().join("g"), &[3], &CreateOptions::new(Codec::Zstd))
        .unwrap();
    let a = Array2::from_shape_fn((5, 3), |(i, j)| (i * 3 + j) as f32);
    s.append(a.view()).unwrap();
    let mut out = Array2::<f32>::zeros((2, 3));
    s.gather_into(&[4, 1], out.view_mut()).unwrap();
    assert_eq!(out.row(0), a.row(4));
    assert_eq!(out.row(1), a.row(1));
    let mut wrong = Array2::<f32>::zeros((2, 4));
    assert!(matches!(
        s.gather_into(&[0, 1], wrong.view_mut()),
        Err(Error::ShapeMismatch { .. })
    ));
    let mut fortran = Array2::<f32>::zeros((3, 2));
    assert!(matches!(
        s.gather_into(&[0, 1], fortran.view_mut().reversed_axes()),
        Err(Error::InvalidArgument { .. })
    ));
}

/// Regression: a (3, 4) output for a 2-record gather said "gather from ..:
/// holds shape [3, 4], asked for [2, 4]", as if the store held [3, 4]. The
/// message must say the shape is the output view's and what the gather needs.
#[test]
fn gather_into_a_wrong_output_names_the_view_and_the_shape_needed() {
    let dir = tmp();
    let s = DenseStore::<f32>::create(dir.path().join("g"), &[4], &CreateOptions::new(Codec::Raw))
        .unwrap();
    s.append(Array2::<f32>::zeros((5, 4)).view()).unwrap();
    let mut wrong = Array2::<f32>::zeros((3, 4));
    let e = s.gather_into(&[1, 2], wrong.view_mut()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
    let m = e.to_string();
    assert!(m.starts_with("the output view of gather_into from "), "{m}");
    assert!(m.contains("holds shape [3, 4]"), "{m}");
    assert!(m.contains("[2, 4] (2 records of item shape [4])"), "{m}");
}

#[test]
fn append_of_the_wrong_shape_or_dtype_names_both() {
    let dir = tmp();
    let s = DenseStore::<f32>::create(
        dir.path().join("w"),
        &[2, 2],
        &CreateOptions::new(Codec::Raw),
    )
    .unwrap();
    let err = s.append(Array2::<f32>::zeros((3, 4)).view()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::ShapeMismatch { .. }));
    assert!(msg.contains("[3, 4]") && msg.contains("[2, 2]"), "{msg}");
    // The batch holds the wrong shape, not the store.
    assert!(msg.starts_with("the batch appended to"), "{msg}");
    let empty = ArrayD::<f32>::zeros(IxDyn(&[0, 2, 2]));
    assert!(s.append(empty.view()).is_err());
    let core = s.core();
    let err = core
        .append_array_bytes(&DType::parse("<f8").unwrap(), &[1, 2, 2], &[0u8; 32])
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("<f8") && msg.contains("<f4"), "{msg}");
    assert!(core.append_bytes(&[0u8; 15]).is_err());
    assert_eq!(s.len(), 0);
}

#[test]
fn opening_with_wrong_expectations_names_stored_and_asked() {
    let dir = tmp();
    let path = dir.path().join("e");
    drop(DenseStore::<f32>::create(&path, &[4], &CreateOptions::new(Codec::Zstd)).unwrap());
    let msg = |r: Result<DenseCore, Error>| r.unwrap_err().to_string();
    let m = msg(DenseCore::open(
        &path,
        &OpenOptions::default().dtype(DType::parse("<i4").unwrap()),
    ));
    assert!(m.contains("<f4") && m.contains("<i4"), "{m}");
    let m = msg(DenseCore::open(
        &path,
        &OpenOptions::default().item_shape(&[5]),
    ));
    assert!(m.contains("[4]") && m.contains("[5]"), "{m}");
    let m = msg(DenseCore::open(
        &path,
        &OpenOptions::default().codec(Codec::Raw),
    ));
    assert!(m.contains("zstd") && m.contains("raw"), "{m}");
    let m = DenseStore::<f64>::open(&path).unwrap_err().to_string();
    assert!(m.contains("<f4") && m.contains("<f8"), "{m}");
    let e = RaggedCore::open(&path, &OpenOptions::default()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::KindMismatch {
                stored: "dense",
                asked: "ragged",
                ..
            }
        ),
        "{e}"
    );
    // Big-endian is another dtype.
    let m = msg(DenseCore::open(
        &path,
        &OpenOptions::default().dtype(DType::parse(">f4").unwrap()),
    ));
    assert!(m.contains(">f4"), "{m}");
    assert_eq!(probe(&path).unwrap(), Some(Kind::Dense));
}

#[test]
fn durability_is_chosen_per_handle_and_close_syncs() {
    let dir = tmp();
    let path = dir.path().join("d");
    let marker = path.join("durable.zr");
    let rows = Array2::from_shape_fn((4, 16), |(i, j)| (i * 16 + j) as u16);
    // The default defers: a marker while appends are ahead of the disk.
    let s = DenseStore::<u16>::create(&path, &[16], &CreateOptions::new(Codec::Zstd)).unwrap();
    assert_eq!(s.durability(), Durability::AtSync);
    s.append(rows.view()).unwrap();
    assert!(marker.exists());
    s.close().unwrap();
    assert!(!marker.exists(), "close syncs");
    // Each-append at open: no marker, and the next open picks its own.
    let s = DenseStore::<u16>::open_with(
        &path,
        &OpenOptions::default().durability(Durability::EachAppend),
    )
    .unwrap();
    assert_eq!(s.durability(), Durability::EachAppend);
    s.append(rows.view()).unwrap();
    assert!(!marker.exists());
    drop(s);
    let s = DenseStore::<u16>::open(&path).unwrap();
    assert_eq!(s.durability(), Durability::AtSync);
    assert_eq!(s.len(), 8);
    drop(s);
    // Each-append at creation, ragged.
    let r = RaggedStore::<u8>::create(
        dir.path().join("r"),
        &CreateOptions {
            durability: Durability::EachAppend,
            ..CreateOptions::new(Codec::Raw)
        },
    )
    .unwrap();
    r.append([ndarray::arr1(&[1u8, 2]).into_dyn().view()])
        .unwrap();
    assert!(!dir.path().join("r/durable.zr").exists());
    r.close().unwrap();
}

#[test]
fn a_level_given_at_open_applies_to_that_handles_appends() {
    let dir = tmp();
    let path = dir.path().join("l");
    let rows = Array2::from_shape_fn((8, 4096), |(i, j)| ((i * 7 + j / 5) % 13) as u8);
    drop(DenseStore::<u8>::create(&path, &[4096], &CreateOptions::new(Codec::Zstd)).unwrap());
    let s = DenseStore::<u8>::open_with(&path, &OpenOptions::default().level(1)).unwrap();
    assert_eq!(s.core().level(), 1);
    s.append(rows.view()).unwrap();
    drop(s);
    let s = DenseStore::<u8>::open(&path).unwrap();
    assert_eq!(s.core().level(), 3, "the level is not stored");
    assert_eq!(s.gather(..).unwrap(), rows.into_dyn());
    drop(s);
    // Refused where it cannot apply, with the reason.
    let m = DenseCore::open(&path, &OpenOptions::read_only().level(1))
        .unwrap_err()
        .to_string();
    assert!(m.contains("read-only"), "{m}");
    let m = DenseCore::open(&path, &OpenOptions::default().level(99))
        .unwrap_err()
        .to_string();
    assert!(m.contains("99"), "{m}");
    let raw = dir.path().join("raw");
    drop(DenseStore::<u8>::create(&raw, &[4], &CreateOptions::new(Codec::Raw)).unwrap());
    let m = DenseCore::open(&raw, &OpenOptions::default().level(3))
        .unwrap_err()
        .to_string();
    assert!(m.contains("raw"), "{m}");
}

#[test]
fn probe_and_failed_creation() {
    let dir = tmp();
    assert_eq!(probe(dir.path().join("none")).unwrap(), None);
    assert!(matches!(
        DenseCore::open(dir.path().join("none"), &OpenOptions::default()),
        Err(Error::NotAStore { .. })
    ));
    let path = dir.path().join("half");
    drop(DenseStore::<u8>::create(&path, &[1], &CreateOptions::new(Codec::Raw)).unwrap());
    std::fs::remove_file(path.join("store.zr")).unwrap();
    let e = probe(&path).unwrap_err();
    assert!(e.to_string().contains("store.zr"), "{e}");
    let e = DenseCore::open(&path, &OpenOptions::default()).unwrap_err();
    assert!(e.to_string().contains("store.zr"), "{e}");
}

#[test]
fn malformed_store_zr_is_an_error_naming_it() {
    let dir = tmp();
    let path = dir.path().join("m");
    drop(DenseStore::<u8>::create(&path, &[3], &CreateOptions::new(Codec::Raw)).unwrap());
    let good = std::fs::read(path.join("store.zr")).unwrap();
    // record_bytes disagrees with the identity.
    let mut b = good.clone();
    b[8] = 4;
    std::fs::write(path.join("store.zr"), &b).unwrap();
    let e = DenseCore::open(&path, &OpenOptions::default()).unwrap_err();
    assert!(e.to_string().contains("store.zr"), "{e}");
    // Regression (audit f11): the size needed printed as Rust's `Some(3)`.
    assert!(
        e.to_string()
            .ends_with("record_bytes is 4, but item shape [3] of |u1 needs 3 bytes"),
        "{e}"
    );
    // The identity is not MessagePack.
    let mut b = good.clone();
    let n = b.len();
    b[n - 4..].copy_from_slice(&[0xc1; 4]);
    std::fs::write(path.join("store.zr"), &b).unwrap();
    let e = DenseCore::open(&path, &OpenOptions::default()).unwrap_err();
    assert!(e.to_string().contains("store.zr"), "{e}");
    // Truncated.
    std::fs::write(path.join("store.zr"), &good[..20]).unwrap();
    let e = probe(&path).unwrap_err();
    assert!(e.to_string().contains("store.zr"), "{e}");
}

#[test]
fn readers_share_writers_exclude() {
    let dir = tmp();
    let path = dir.path().join("l");
    {
        let s = DenseStore::<u32>::create(&path, &[2], &CreateOptions::new(Codec::Raw)).unwrap();
        s.append(Array2::<u32>::ones((4, 2)).view()).unwrap();
        s.sync().unwrap();
        // The creating handle holds the exclusive lock.
        assert!(DenseCore::open(&path, &OpenOptions::read_only()).is_err());
    }
    let r1 = DenseStore::<u32>::open_with(&path, &OpenOptions::read_only()).unwrap();
    let r2 = DenseStore::<u32>::open_with(&path, &OpenOptions::read_only()).unwrap();
    std::thread::scope(|sc| {
        for r in [&r1, &r2] {
            sc.spawn(move || assert_eq!(r.gather(..).unwrap().sum(), 8));
        }
    });
    assert!(r1.core().is_read_only());
    assert!(r1.core().append_bytes(&[0u8; 8]).is_err());
    let e = DenseStore::<u32>::open(&path).unwrap_err();
    assert!(e.to_string().contains("busy"), "{e}");
    drop((r1, r2));
    DenseStore::<u32>::open(&path).unwrap();
}

#[test]
fn delete_and_compact_keep_survivors_exact() {
    let dir = tmp();
    let path = dir.path().join("d");
    let mut s = DenseStore::<u16>::create(&path, &[8], &CreateOptions::new(Codec::Zstd)).unwrap();
    let a = Array2::from_shape_fn((20, 8), |(i, j)| (i * 100 + j) as u16);
    s.append(a.view()).unwrap();
    s.delete(Indices::range(None, None, 2)).unwrap();
    assert_eq!(s.len(), 10);
    let before = s.stats();
    s.compact().unwrap();
    let after = s.stats();
    assert!(after.chunk_bytes < before.chunk_bytes);
    let mut rows: Vec<u16> = s
        .gather(..)
        .unwrap()
        .rows()
        .into_iter()
        .map(|r| r[0])
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        (0..10).map(|i| (2 * i + 1) * 100).collect::<Vec<u16>>()
    );
    assert!(s.delete(10).is_err());
    s.delete(-1).unwrap();
    assert_eq!(s.len(), 9);
}

#[test]
fn creation_refuses_bad_codec_dictionary_pairs_and_widths() {
    let dir = tmp();
    let f4 = DType::parse("<f4").unwrap();
    let e = DenseCore::create(
        dir.path().join("a"),
        &f4,
        &[2],
        &CreateOptions::new(Codec::ZstdDict),
    )
    .unwrap_err();
    assert!(e.to_string().contains("dictionary"), "{e}");
    let mut opts = CreateOptions::new(Codec::Zstd);
    opts.dictionary = Some(vec![1, 2, 3]);
    let e = DenseCore::create(dir.path().join("b"), &f4, &[2], &opts).unwrap_err();
    assert!(e.to_string().contains("zstd_dict"), "{e}");
    assert!(
        DenseCore::create(
            dir.path().join("c"),
            &f4,
            &[0, 3],
            &CreateOptions::new(Codec::Raw)
        )
        .is_err()
    );
    assert!(
        DenseCore::create(
            dir.path().join("d"),
            &f4,
            &[1 << 40, 1 << 40],
            &CreateOptions::new(Codec::Raw)
        )
        .is_err()
    );
    // Nothing was left behind by the refused creations.
    assert_eq!(probe(dir.path().join("a")).unwrap(), None);
    assert_eq!(probe(dir.path().join("b")).unwrap(), None);
}

/// Regression: `gather(u64::MAX)` reported "index 9223372036854775807 is out
/// of range" (the u64 had been saturated to i64::MAX); the error now names
/// the index the caller passed.
#[test]
fn out_of_range_unsigned_index_is_named_as_passed() {
    let d = tmp();
    let s = DenseStore::<i64>::create(d.path().join("a"), &[], &CreateOptions::new(Codec::Raw))
        .unwrap();
    s.append(ndarray::Array1::from_iter(0..4i64).view())
        .unwrap();
    for (idx, shown) in [(u64::MAX, u64::MAX.to_string()), (4, "4".to_string())] {
        let e = s.gather(idx).unwrap_err();
        assert!(
            matches!(e, Error::IndexOutOfRange { index, len: 4, .. } if index == i128::from(idx)),
            "{e:?}"
        );
        assert!(e.to_string().contains(&format!("index {shown} ")), "{e}");
    }
    let e = s.gather(usize::MAX).unwrap_err();
    assert!(e.to_string().contains(&usize::MAX.to_string()), "{e}");
    assert_eq!(s.gather(3u64).unwrap().into_raw_vec_and_offset().0, vec![3]);
}

#[test]
fn an_open_during_anothers_creation_is_busy_not_broken() {
    // The creator holds meta.zr's lock until store.zr is in place; an open
    // in between used to call the store broken (InvalidStore in Python).
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s");
    std::fs::create_dir(&p).unwrap();
    let meta = std::fs::File::create(p.join("meta.zr")).unwrap();
    meta.lock().unwrap();
    let err = DenseCore::open(&p, &OpenOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            zrecord::Error::Engine(zrecord_engine::Error::StoreBusy { .. })
        ),
        "{err}"
    );
    // A creation that died (nobody holds the lock) is still reported as such.
    meta.unlock().unwrap();
    let err = DenseCore::open(&p, &OpenOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("did not finish") && msg.contains("create the store again (a create clears"),
        "{err}"
    );
}

/// Two f32 in one element: a user type whose `Element` impl says `f32`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
struct MisdeclaredPair([f32; 2]);
// SAFETY: a transparent wrapper of `[f32; 2]`, which is Pod.
unsafe impl bytemuck::Zeroable for MisdeclaredPair {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for MisdeclaredPair {}
impl Element for MisdeclaredPair {
    const KIND: zrecord::ScalarKind = zrecord::ScalarKind::Float;
    fn dtype() -> DType {
        f32::dtype()
    }
}

/// A `#[repr(C)]` struct stored as the structured dtype it describes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    x: f32,
    id: i32,
}
// SAFETY: repr(C), two 4-byte Pod fields, no padding.
unsafe impl bytemuck::Zeroable for Point {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Point {}
impl Element for Point {
    const KIND: zrecord::ScalarKind = zrecord::ScalarKind::Int; // unread: dtype() is given
    fn dtype() -> DType {
        DType::Structured(vec![
            zrecord::Field {
                name: "x".into(),
                title: None,
                dtype: f32::dtype(),
                shape: vec![],
            },
            zrecord::Field {
                name: "id".into(),
                title: None,
                dtype: i32::dtype(),
                shape: vec![],
            },
        ])
    }
}

#[test]
fn an_element_whose_dtype_does_not_describe_its_type_is_refused_everywhere() {
    let dir = tmp();
    // Before: an `<f4` store with item_shape [4] opened as `DenseStore<Pair>`,
    // then a gather panicked and an append of 2 rows wrote 4 records.
    let p = dir.path().join("f4");
    DenseStore::<f32>::create(&p, &[4], &CreateOptions::new(Codec::Raw))
        .unwrap()
        .append(Array2::<f32>::zeros((3, 4)).view())
        .unwrap();
    let why = |e: Error| {
        let m = e.to_string();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{m}");
        assert!(
            m.contains("MisdeclaredPair") && m.contains("8 bytes"),
            "{m}"
        );
    };
    why(DenseStore::<MisdeclaredPair>::open(&p).err().unwrap());
    why(DenseStore::<MisdeclaredPair>::create(
        dir.path().join("new"),
        &[2],
        &CreateOptions::new(Codec::Raw),
    )
    .err()
    .unwrap());
    why(RaggedStore::<MisdeclaredPair>::create(
        dir.path().join("r"),
        &CreateOptions::new(Codec::Raw),
    )
    .err()
    .unwrap());
    why(DType::of::<MisdeclaredPair>().unwrap_err());
    assert!(!dir.path().join("new").exists() && !dir.path().join("r").exists());
    assert_eq!(DenseStore::<f32>::open(&p).unwrap().len(), 3);
}

#[test]
fn a_repr_c_struct_is_an_element_of_its_structured_dtype() {
    let dir = tmp();
    let s =
        DenseStore::<Point>::create(dir.path().join("p"), &[2], &CreateOptions::new(Codec::Raw))
            .unwrap();
    let pts = Array2::from_shape_fn((3, 2), |(i, j)| Point {
        x: i as f32 + 0.5,
        id: (10 * i + j) as i32,
    });
    s.append(pts.view()).unwrap();
    drop(s);
    let s = DenseStore::<Point>::open(dir.path().join("p")).unwrap();
    assert_eq!(s.core().dtype().descr(), "[('x', '<f4'), ('id', '<i4')]");
    let got = s.gather(&[2i64, 0]).unwrap();
    assert_eq!(got[[0, 1]], pts[[2, 1]]);
    assert_eq!(got[[1, 0]], pts[[0, 0]]);
}

#[test]
fn an_entry_whose_length_is_not_the_record_size_is_a_corrupted_record() {
    let dir = tmp();
    let p = dir.path().join("d");
    let s = DenseStore::<u8>::create(&p, &[16], &CreateOptions::new(Codec::Zstd)).unwrap();
    s.append(Array2::<u8>::from_elem((3, 16), 9).view())
        .unwrap();
    drop(s);
    // Record 1's logic_length (bytes 8..12 of its 16-byte entry) says 15.
    let loc = p.join("0.loc");
    let mut b = std::fs::read(&loc).unwrap();
    b[16 + 8..16 + 12].copy_from_slice(&15u32.to_le_bytes());
    std::fs::write(&loc, b).unwrap();
    let s = match DenseStore::<u8>::open(&p) {
        Ok(s) => s,
        Err(e) => panic!("the damage is one record's, the store opens: {e}"),
    };
    assert_eq!(s.gather(&[0i64, 2]).unwrap().len(), 32);
    let e = s.gather(&[2i64, 1]).unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, Error::Corrupted { index: 1, .. }), "{m}");
    assert!(
        m.contains("its entry in 0.loc says 15 bytes, the store's records are 16"),
        "{m}"
    );
}
