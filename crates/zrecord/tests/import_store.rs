//! Store importers: guards against `.npy` and text imports whose stored rows
//! differ from a full read (across batch and window boundaries, big-endian
//! and Fortran-order files, comments, options), batches larger than asked,
//! imports into a store of the wrong dtype or shape that proceed instead of
//! failing with both sides named, and truncated files that append a partial
//! import.

use ndarray::{ArrayD, IxDyn};
use zrecord::npy::{self, NpyArray};
use zrecord::text::{self, LoadTxtOptions};
use zrecord::{Codec, CreateOptions, DType, DenseCore, Element, Error};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Every record of `store`, as bytes in order.
fn all_bytes(store: &DenseCore) -> Vec<u8> {
    let idx: Vec<u64> = (0..store.len()).collect();
    let mut out = vec![0u8; idx.len() * store.record_bytes()];
    store.gather_bytes_into(&idx, &mut out).unwrap();
    out
}

fn raw() -> CreateOptions {
    CreateOptions::new(Codec::Raw)
}

#[test]
fn npy_import_in_small_batches_equals_full_read() {
    let dir = tmp();
    let p = dir.path().join("a.npy");
    let a = ArrayD::from_shape_fn(IxDyn(&[7, 3, 2]), |i| {
        (i[0] * 100 + i[1] * 10 + i[2]) as f32 - 0.5
    });
    npy::write(&p, &a).unwrap();
    for (batch, want_batches) in [(Some(2), 4), (Some(1), 7), (Some(100), 1), (None, 1)] {
        let s = dir.path().join(format!("s{want_batches}_{batch:?}"));
        let store = DenseCore::create(&s, &f32::dtype(), &[3, 2], &CreateOptions::new(Codec::Zstd))
            .unwrap();
        let done = npy::import_into(&p, &store, batch).unwrap();
        assert_eq!((done.first, done.rows, done.batches), (0, 7, want_batches));
        let full: ArrayD<f32> = npy::read(&p).unwrap();
        let want: &[u8] = bytemuck::cast_slice(full.as_slice().unwrap());
        assert_eq!(all_bytes(&store), want);
        // A second import appends after the first.
        let again = npy::import_into(&p, &store, Some(3)).unwrap();
        assert_eq!((again.first, again.rows, again.batches), (7, 7, 3));
        assert_eq!(store.len(), 14);
    }
}

#[test]
fn npy_import_to_store_takes_dtype_and_trailing_shape() {
    let dir = tmp();
    let p = dir.path().join("v.npy");
    let a = ArrayD::from_shape_fn(IxDyn(&[5]), |i| i[0] as i64 * -3);
    npy::write(&p, &a).unwrap();
    let store = npy::import_to_store(&p, dir.path().join("s"), &raw(), Some(2)).unwrap();
    assert_eq!(store.dtype(), &i64::dtype());
    assert!(store.item_shape().is_empty());
    assert_eq!(store.len(), 5);
    assert_eq!(
        all_bytes(&store),
        bytemuck::cast_slice::<i64, u8>(a.as_slice().unwrap())
    );
}

/// A big-endian `(4, 3)` `>i4` file with values `0..12`.
fn write_big_endian(p: &std::path::Path) -> Vec<i32> {
    let vals: Vec<i32> = (0..12).map(|v| v * 1000 - 7).collect();
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_be_bytes()).collect();
    let a = NpyArray {
        dtype: DType::parse(">i4").unwrap(),
        shape: vec![4, 3],
        data,
    };
    npy::write_untyped(p, &a).unwrap();
    vals
}

#[test]
fn npy_big_endian_imports_as_stored_or_converted_to_native() {
    let dir = tmp();
    let p = dir.path().join("be.npy");
    let vals = write_big_endian(&p);
    let be = npy::import_to_store(&p, dir.path().join("be"), &raw(), Some(3)).unwrap();
    assert_eq!(be.dtype(), &DType::parse(">i4").unwrap());
    let be_bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_be_bytes()).collect();
    assert_eq!(all_bytes(&be), be_bytes);

    let native = DenseCore::create(dir.path().join("le"), &i32::dtype(), &[3], &raw()).unwrap();
    npy::import_into(&p, &native, Some(3)).unwrap();
    assert_eq!(all_bytes(&native), bytemuck::cast_slice::<i32, u8>(&vals));
}

#[test]
fn npy_fortran_order_imports_in_c_order() {
    let dir = tmp();
    let p = dir.path().join("f.npy");
    let (rows, cols) = (5usize, 3usize);
    // Fortran order: column after column.
    let mut bytes = npy::header_bytes(&f64::dtype(), &[rows, cols], true).unwrap();
    for c in 0..cols {
        for r in 0..rows {
            bytes.extend_from_slice(&((r * 10 + c) as f64).to_le_bytes());
        }
    }
    std::fs::write(&p, bytes).unwrap();
    let store = npy::import_to_store(&p, dir.path().join("s"), &raw(), Some(2)).unwrap();
    let full: ArrayD<f64> = npy::read(&p).unwrap();
    assert_eq!(full[[4, 2]], 42.0);
    assert_eq!(
        all_bytes(&store),
        bytemuck::cast_slice::<f64, u8>(full.as_standard_layout().as_slice().unwrap())
    );
}

#[test]
fn npy_import_into_wrong_store_names_both_sides() {
    let dir = tmp();
    let p = dir.path().join("a.npy");
    npy::write(&p, &ArrayD::<f32>::zeros(IxDyn(&[4, 3]))).unwrap();
    let wrong_dtype = DenseCore::create(dir.path().join("d"), &f64::dtype(), &[3], &raw()).unwrap();
    let e = npy::import_into(&p, &wrong_dtype, None).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("<f4") && msg.contains("<f8"), "{msg}");
    let wrong_shape = DenseCore::create(dir.path().join("s"), &f32::dtype(), &[4], &raw()).unwrap();
    let e = npy::import_into(&p, &wrong_shape, None).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("[4]") && msg.contains("[4, 3]"), "{msg}");
    assert!(wrong_dtype.is_empty() && wrong_shape.is_empty());
}

#[test]
fn npy_truncated_or_zero_d_imports_nothing() {
    let dir = tmp();
    let p = dir.path().join("a.npy");
    npy::write(&p, &ArrayD::<f32>::ones(IxDyn(&[10, 4]))).unwrap();
    let len = std::fs::metadata(&p).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(len - 5).unwrap();
    let store = DenseCore::create(dir.path().join("s"), &f32::dtype(), &[4], &raw()).unwrap();
    let e = npy::import_into(&p, &store, Some(1)).unwrap_err();
    assert!(matches!(e, Error::NpyTruncated { .. }), "{e:?}");
    assert!(store.is_empty());

    let z = dir.path().join("z.npy");
    npy::write(&z, &ArrayD::<f32>::from_elem(IxDyn(&[]), 1.0)).unwrap();
    let e = npy::import_to_store(&z, dir.path().join("z"), &raw(), None).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
}

/// Text with comments, blank lines, CRLF and a header row.
fn sample_text(rows: usize, sep: &str) -> String {
    let mut s = String::from("# generated\nh1 h2 h3 h4\n");
    for r in 0..rows {
        if r % 7 == 3 {
            // Indented only when splitting on whitespace: with a delimiter,
            // a line of blanks before a comment is a row, as in NumPy.
            s.push_str(if sep == " " {
                "\n   # a comment line\n"
            } else {
                "\n# a comment line\n"
            });
        }
        let vals: Vec<String> = (0..4)
            .map(|c| format!("{:.3}", (r * 4 + c) as f64 * 0.37 - 11.0))
            .collect();
        s.push_str(&vals.join(sep));
        if r % 5 == 0 {
            s.push_str("  # trailing");
        }
        s.push_str(if r % 3 == 0 { "\r\n" } else { "\n" });
    }
    s
}

#[test]
fn text_import_over_many_windows_and_batches_equals_loadtxt() {
    let dir = tmp();
    for (sep, delim) in [(" ", None), (",", Some(b','))] {
        let p = dir.path().join("t.txt");
        std::fs::write(&p, sample_text(200, sep)).unwrap();
        for (usecols, max_rows, threads) in [
            (None, None, 1),
            (None, None, 2),
            (Some(vec![3, 1]), Some(150), 2),
            (None, Some(7), 1),
        ] {
            let o = LoadTxtOptions {
                delimiter: delim,
                skip_rows: 1,
                usecols,
                max_rows,
                threads,
                chunk_bytes: 64,
                ..Default::default()
            };
            let full = text::loadtxt::<f64>(&p, &o).unwrap();
            let s = dir.path().join(format!(
                "s{sep}{threads}{max_rows:?}{}",
                o.usecols.is_some()
            ));
            let store =
                DenseCore::create(&s, &f64::dtype(), &[full.ncols() as u64], &raw()).unwrap();
            let done = text::import_into(&p, &store, &o, Some(3)).unwrap();
            assert_eq!(done.rows as usize, full.nrows());
            assert!(done.batches >= (full.nrows() as u64).div_ceil(3));
            assert_eq!(
                all_bytes(&store),
                bytemuck::cast_slice::<f64, u8>(full.as_slice().unwrap())
            );

            let s32 = dir.path().join(format!(
                "f32{sep}{threads}{max_rows:?}{}",
                o.usecols.is_some()
            ));
            let store = text::import_to_store::<f32>(&p, &s32, &raw(), &o, None).unwrap();
            let full = text::loadtxt::<f32>(&p, &o).unwrap();
            assert_eq!(
                all_bytes(&store),
                bytemuck::cast_slice::<f32, u8>(full.as_slice().unwrap())
            );
        }
    }
}

#[test]
fn text_import_batches_never_exceed_batch_rows() {
    let dir = tmp();
    let p = dir.path().join("t.txt");
    std::fs::write(&p, sample_text(50, " ")).unwrap();
    let o = LoadTxtOptions {
        skip_rows: 1,
        ..Default::default()
    };
    // One window holds the whole file, so batches are exactly ceil(50 / 4).
    let store = DenseCore::create(dir.path().join("s"), &f64::dtype(), &[4], &raw()).unwrap();
    let done = text::import_into(&p, &store, &o, Some(4)).unwrap();
    assert_eq!((done.rows, done.batches), (50, 13));
}

#[test]
fn text_import_into_wrong_store_or_bad_text_fails() {
    let dir = tmp();
    let p = dir.path().join("t.txt");
    std::fs::write(&p, "1 2 3\n4 5 6\n").unwrap();
    let ints = DenseCore::create(dir.path().join("i"), &i32::dtype(), &[3], &raw()).unwrap();
    let e = text::import_into(&p, &ints, &LoadTxtOptions::default(), None).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("<i4"), "{e}");
    let narrow = DenseCore::create(dir.path().join("n"), &f64::dtype(), &[2], &raw()).unwrap();
    let e = text::import_into(&p, &narrow, &LoadTxtOptions::default(), None).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("[2]") && msg.contains("[3]"), "{msg}");

    std::fs::write(&p, "1 2 3\n4 x 6\n").unwrap();
    let store = DenseCore::create(dir.path().join("s"), &f64::dtype(), &[3], &raw()).unwrap();
    let e = text::import_into(&p, &store, &LoadTxtOptions::default(), None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TextParse {
                line: 2,
                column: 2,
                ..
            }
        ),
        "{e:?}"
    );

    let empty = dir.path().join("e.txt");
    std::fs::write(&empty, "# nothing\n\n").unwrap();
    let done = text::import_into(&empty, &store, &LoadTxtOptions::default(), None).unwrap();
    assert_eq!(done.rows, 0);
    let e = text::import_to_store::<f64>(
        &empty,
        dir.path().join("x"),
        &raw(),
        &LoadTxtOptions::default(),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
}

/// Regression: an empty `usecols` used to panic in the text importer
/// (`chunks(0)` over zero output columns); it is a clear error in the
/// importer now, and appends nothing. loadtxt gives NumPy's `(rows, 0)`.
#[test]
fn empty_usecols_is_an_error_not_a_panic() {
    let dir = tmp();
    let p = dir.path().join("t.txt");
    std::fs::write(&p, "1 2 3\n4 5 6\n").unwrap();
    let opts = LoadTxtOptions {
        usecols: Some(vec![]),
        ..LoadTxtOptions::default()
    };
    assert_eq!(text::loadtxt::<f64>(&p, &opts).unwrap().shape(), &[2, 0]);
    let store = DenseCore::create(dir.path().join("s"), &f64::dtype(), &[3], &raw()).unwrap();
    let err = text::import_into(&p, &store, &opts, Some(1)).unwrap_err();
    assert!(err.to_string().contains("usecols is empty"), "{err}");
    assert_eq!(store.len(), 0);
}
