//! Guards the rule that a caller's bad input gets an error naming the store
//! (its path), record or argument at fault, never a panic, and loses nothing
//! already appended: the messages here once left out the store, or the call
//! panicked.

use ndarray::{Array2, array};
use zrecord::{
    Codec, CreateOptions, DType, DenseStore, DictSource, DictTier, Error, Indices, OpenOptions,
    RaggedBatch, RaggedStore, train_dict,
};

/// Regression: `RaggedBatch::view` returned a `Result` but panicked
/// ("index out of bounds: the len is 2 but the index is 5") for a record
/// past the batch's end.
#[test]
fn a_ragged_batch_view_past_its_end_is_an_error_naming_the_record_and_length() {
    let dir = tempfile::tempdir().unwrap();
    let r =
        RaggedStore::<i32>::create(dir.path().join("r"), &CreateOptions::new(Codec::Raw)).unwrap();
    r.append([array![1, 2].view(), array![3].view()]).unwrap();
    let mut batch = RaggedBatch::new();
    r.gather_into(&[0, 1], &mut batch).unwrap();
    for k in [2, 5, usize::MAX] {
        let e = batch.view::<i32>(k).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        let m = e.to_string();
        assert!(m.contains(&format!("record {k} ")), "{m}");
        assert!(m.contains("batch of 2 records"), "{m}");
    }
    let empty = RaggedBatch::new();
    let m = empty.view::<i32>(0).unwrap_err().to_string();
    assert!(m.contains("batch of 0 records"), "{m}");
    assert_eq!(batch.view::<i32>(1).unwrap(), array![3].into_dyn().view());
}

/// Regression: "append needs at least one record", "7 bytes are not a whole
/// number of 12-byte records" and "shape [1, 3] of <f4 needs 12 bytes, 11
/// given" named no store, where the other append errors (dtype, shape) do.
#[test]
fn a_bad_dense_append_names_the_store_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dense");
    let s = DenseStore::<f32>::create(&path, &[3], &CreateOptions::new(Codec::Zstd)).unwrap();
    s.append(Array2::<f32>::ones((2, 3)).view()).unwrap();
    let shown = path.display().to_string();
    let f4 = DType::parse("<f4").unwrap();
    let failures = [
        s.append(Array2::<f32>::zeros((0, 3)).view()).unwrap_err(),
        s.core().append_bytes(&[]).unwrap_err(),
        s.core().append_bytes(&[0u8; 7]).unwrap_err(),
        s.core()
            .append_array_bytes(&f4, &[1, 3], &[0u8; 11])
            .unwrap_err(),
    ];
    for e in failures {
        let m = e.to_string();
        assert!(m.contains(&shown), "{m}");
    }
    assert_eq!(s.len(), 2);
    assert_eq!(
        s.gather(Indices::all()).unwrap(),
        Array2::<f32>::ones((2, 3)).into_dyn()
    );
}

/// Regression: an empty ragged append said "append needs at least one
/// record", naming no store.
#[test]
fn an_empty_ragged_append_names_the_store_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ragged");
    let r = RaggedStore::<i32>::create(&path, &CreateOptions::new(Codec::Raw)).unwrap();
    r.append([array![1, 2].view()]).unwrap();
    let m = r
        .append(Vec::<ndarray::ArrayView1<i32>>::new())
        .unwrap_err()
        .to_string();
    assert!(m.contains(&path.display().to_string()), "{m}");
    let b = RaggedStore::<u8>::create(dir.path().join("bytes"), &CreateOptions::new(Codec::Raw))
        .unwrap();
    let m = b.append_bytes(std::iter::empty()).unwrap_err().to_string();
    assert!(
        m.contains(&dir.path().join("bytes").display().to_string()),
        "{m}"
    );
    assert_eq!(r.len(), 1);
    assert_eq!(r.get(0).unwrap(), array![1, 2].into_dyn());
}

/// Regression: training on an empty store said "cannot train a zstd
/// dictionary on an empty store", not which; an array source with
/// `record_bytes: 0` said "2 bytes are not a whole number of 0-byte records".
#[test]
fn dictionary_training_on_an_empty_store_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let dense = dir.path().join("dense");
    let d = DenseStore::<f32>::create(&dense, &[3], &CreateOptions::new(Codec::Raw)).unwrap();
    let m = train_dict(DictSource::Dense(d.core()), DictTier::Fast)
        .unwrap_err()
        .to_string();
    assert!(m.contains(&dense.display().to_string()), "{m}");
    let ragged = dir.path().join("ragged");
    let r = RaggedStore::<u8>::create(&ragged, &CreateOptions::new(Codec::Raw)).unwrap();
    let m = train_dict(DictSource::Ragged(r.core()), DictTier::Fast)
        .unwrap_err()
        .to_string();
    assert!(m.contains(&ragged.display().to_string()), "{m}");
    let m = train_dict(
        DictSource::Array {
            data: &[1, 2],
            record_bytes: 0,
        },
        DictTier::Fast,
    )
    .unwrap_err()
    .to_string();
    assert!(m.contains("record_bytes"), "{m}");
    // The store is still usable afterwards.
    d.append(Array2::<f32>::zeros((1, 3)).view()).unwrap();
    drop(d);
    let d = DenseStore::<f32>::open_with(&dense, &OpenOptions::read_only()).unwrap();
    assert_eq!(d.len(), 1);
}

/// Regression: ten one-byte records (say, single-character labels) killed
/// the process with SIGFPE inside zstd's trainer.
#[test]
fn training_on_a_few_one_byte_records_errs_instead_of_crashing() {
    for n in [8, 9, 10] {
        let recs = vec![&b"a"[..]; n];
        let e = train_dict(DictSource::records(recs), DictTier::Fast).unwrap_err();
        let m = e.to_string();
        assert!(m.contains(&format!("on {n} samples of {n} bytes")), "{m}");
    }
}

/// Regression: an `NpyArray` whose data does not fit its shape converted
/// with "invalid argument: ShapeError/OutOfBounds: out of bounds indexing",
/// naming neither the shape nor the sizes.
#[test]
fn an_npy_array_whose_data_misfits_its_shape_says_both_sizes() {
    let a = zrecord::npy::NpyArray {
        dtype: DType::parse("<f4").unwrap(),
        shape: vec![2, 3],
        data: vec![0u8; 7],
    };
    let m = a.into_typed::<f32>().unwrap_err().to_string();
    assert!(
        m.contains("[2, 3]") && m.contains("24 bytes") && m.contains("holds 7"),
        "{m}"
    );
}

/// Regression: an index past the end said "index 1 is out of range for a
/// store of 1 records", naming no store (a loader reads several) and
/// counting one record as "1 records". Every way in names the store:
/// `get`, `gather` (any index form), `delete`, and the byte-level cores.
#[test]
fn an_index_past_the_end_names_the_store_and_counts_one_record_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let dpath = dir.path().join("dense");
    let mut d = DenseStore::<f32>::create(&dpath, &[2], &CreateOptions::new(Codec::Raw)).unwrap();
    d.append(Array2::<f32>::ones((1, 2)).view()).unwrap();
    let rpath = dir.path().join("ragged");
    let mut r = RaggedStore::<i32>::create(&rpath, &CreateOptions::new(Codec::Raw)).unwrap();
    r.append([array![1, 2].view()]).unwrap();
    let at = |path: &std::path::Path, i: i64| {
        format!(
            "{}: record index {i} is out of range for 1 record",
            path.display()
        )
    };
    let mut out = [0u8; 8];
    let mut batch = RaggedBatch::new();
    let cases = [
        (&dpath, 1, d.get(1).unwrap_err()),
        (&dpath, -2, d.gather(&[0i64, -2][..]).unwrap_err()),
        (
            &dpath,
            1,
            d.core().gather_bytes_into(&[1], &mut out).unwrap_err(),
        ),
        (&rpath, 1, r.get(1).unwrap_err()),
        (&rpath, 3, r.gather(Indices::Positions(&[3])).unwrap_err()),
        (&rpath, 1, r.gather_into(&[1], &mut batch).unwrap_err()),
    ];
    for (path, i, e) in cases {
        assert!(
            matches!(&e, Error::IndexOutOfRange { path: Some(p), len: 1, .. } if p == path),
            "{e:?}"
        );
        assert_eq!(e.to_string(), at(path, i));
    }
    assert_eq!(d.delete(5).unwrap_err().to_string(), at(&dpath, 5));
    assert_eq!(r.delete(-2).unwrap_err().to_string(), at(&rpath, -2));
    assert_eq!((d.len(), r.len()), (1, 1));
    // Without a store, `resolve` names none.
    let m = zrecord::resolve(&Indices::One(2), 2)
        .unwrap_err()
        .to_string();
    assert_eq!(m, "record index 2 is out of range for 2 records");
}

/// Counts of one record say "1 record": a mask for the wrong length and a
/// batch view past the end.
#[test]
fn counts_of_one_record_are_singular() {
    let m = zrecord::resolve(&Indices::Mask(&[true, false]), 1)
        .unwrap_err()
        .to_string();
    assert!(
        m.ends_with("boolean mask of length 2 for a store of 1 record"),
        "{m}"
    );
    let dir = tempfile::tempdir().unwrap();
    let r =
        RaggedStore::<i32>::create(dir.path().join("r"), &CreateOptions::new(Codec::Raw)).unwrap();
    r.append([array![1, 2].view()]).unwrap();
    let mut batch = RaggedBatch::new();
    r.gather_into(&[0], &mut batch).unwrap();
    let m = batch.view::<i32>(1).unwrap_err().to_string();
    assert!(m.ends_with("ragged batch of 1 record"), "{m}");
}
