//! Guards the `.npy` header reader against hostile or broken files: each
//! malformation (magic, version, header length, keys, values, shapes that
//! overflow, truncated header or payload) must produce its own specific error
//! before any large allocation, and no input may panic.

use proptest::prelude::*;
use zrecord::npy::{self, NpyHeader};
use zrecord::{DType, Error, NpyHeaderProblem};

fn with_dict(version: u8, dict: &str) -> Vec<u8> {
    let mut body = dict.as_bytes().to_vec();
    body.push(b'\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(body.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(&body);
    out
}

fn problem(bytes: &[u8]) -> NpyHeaderProblem {
    match NpyHeader::parse(bytes) {
        Err(Error::NpyHeader { problem, .. }) => problem,
        other => panic!("expected a header error, got {other:?}"),
    }
}

const GOOD: &str = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

#[test]
fn a_good_header_parses_in_every_version() {
    for v in [1, 2, 3] {
        let h = NpyHeader::parse(&with_dict(v, GOOD)).unwrap();
        assert_eq!(h.version, (v, 0));
        assert_eq!(h.shape, vec![2, 3]);
        assert_eq!(h.payload_bytes, 24);
        assert_eq!(h.dtype, DType::parse("<f4").unwrap());
    }
}

#[test]
fn each_malformation_has_its_error() {
    let good = with_dict(1, GOOD);
    let mut bad_magic = good.clone();
    bad_magic[1] = b'X';
    assert_eq!(problem(&bad_magic), NpyHeaderProblem::BadMagic);
    assert_eq!(problem(b"PK\x03\x04"), NpyHeaderProblem::BadMagic);
    let mut v4 = good.clone();
    v4[6] = 4;
    assert_eq!(problem(&v4), NpyHeaderProblem::UnsupportedVersion(4, 0));
    let mut v11 = good.clone();
    v11[7] = 1;
    assert_eq!(problem(&v11), NpyHeaderProblem::UnsupportedVersion(1, 1));
    assert!(matches!(
        problem(&good[..7]),
        NpyHeaderProblem::Truncated { .. }
    ));
    assert!(matches!(
        problem(&good[..good.len() - 1]),
        NpyHeaderProblem::Truncated { .. }
    ));
    // v2 length over 1 MiB: refused before reading it.
    let mut huge = b"\x93NUMPY\x02\x00".to_vec();
    huge.extend_from_slice(&(2u32 << 20).to_le_bytes());
    assert_eq!(problem(&huge), NpyHeaderProblem::TooLong(2 << 20));
    let mut latin = with_dict(3, GOOD);
    latin[20] = 0xff;
    assert_eq!(problem(&latin), NpyHeaderProblem::Encoding("UTF-8"));

    type Check = fn(&NpyHeaderProblem) -> bool;
    let cases: &[(&str, Check)] = &[
        ("{'fortran_order': False, 'shape': (2,)}", |p| {
            *p == NpyHeaderProblem::MissingKey("descr")
        }),
        ("{'descr': '<f4', 'shape': (2,)}", |p| {
            *p == NpyHeaderProblem::MissingKey("fortran_order")
        }),
        ("{'descr': '<f4', 'fortran_order': False}", |p| {
            *p == NpyHeaderProblem::MissingKey("shape")
        }),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
            |p| matches!(p, NpyHeaderProblem::UnexpectedKey(k) if k.contains("extra")),
        ),
        (
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
            |p| matches!(p, NpyHeaderProblem::UnexpectedKey(_)),
        ),
        ("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", |p| {
            matches!(
                p,
                NpyHeaderProblem::BadValue {
                    key: "fortran_order",
                    ..
                }
            )
        }),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': 2}",
            |p| matches!(p, NpyHeaderProblem::BadValue { key: "shape", .. }),
        ),
        (
            // `(2)` is the integer 2 in Python, not a tuple: NumPy refuses it.
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
            |p| matches!(p, NpyHeaderProblem::BadValue { key: "shape", .. }),
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
            |p| matches!(p, NpyHeaderProblem::BadValue { key: "shape", .. }),
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': ('a',)}",
            |p| matches!(p, NpyHeaderProblem::BadValue { key: "shape", .. }),
        ),
        ("{'descr': 4, 'fortran_order': False, 'shape': (2,)}", |p| {
            matches!(p, NpyHeaderProblem::BadValue { key: "descr", .. })
        }),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
            |p| matches!(p, NpyHeaderProblem::ShapeOverflow(_)),
        ),
        (
            "{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976,)}",
            |p| matches!(p, NpyHeaderProblem::ShapeOverflow(_)),
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
            |p| matches!(p, NpyHeaderProblem::Syntax(_)),
        ),
        ("['descr', '<f4']", |p| {
            matches!(p, NpyHeaderProblem::Syntax(_))
        }),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}",
            |p| matches!(p, NpyHeaderProblem::Syntax(_)),
        ),
        (
            "{'descr': '<f4', 'fortran_order': __import__('os'), 'shape': (2,)}",
            |p| matches!(p, NpyHeaderProblem::Syntax(_)),
        ),
    ];
    for (dict, ok) in cases {
        for v in [1, 2] {
            let p = problem(&with_dict(v, dict));
            assert!(ok(&p), "{dict}: got {p:?}");
        }
    }
    // Unsupported dtypes name the dtype, and the file when there is one.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.npy");
    for d in ["'|O'", "'<U3'", "'|S2'", "'<M8[s]'", "[('a', '|O')]"] {
        let dict = format!("{{'descr': {d}, 'fortran_order': False, 'shape': (2,)}}");
        match NpyHeader::parse(&with_dict(1, &dict)) {
            Err(Error::UnsupportedDType { .. }) => {}
            other => panic!("{d}: {other:?}"),
        }
        std::fs::write(&path, with_dict(1, &dict)).unwrap();
        match zrecord::npy::read_header(&path) {
            Err(e @ Error::UnsupportedDType { .. }) => {
                assert!(e.to_string().contains("objects.npy"), "{d}: {e}");
            }
            other => panic!("{d}: {other:?}"),
        }
    }
}

#[test]
fn truncated_payloads_are_errors_never_zero_filled() {
    let dir = tempfile::tempdir().unwrap();
    let a = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[10, 3]), |i| i[0] as f64);
    let path = dir.path().join("a.npy");
    npy::write(&path, &a).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let t = dir.path().join("t.npy");
    std::fs::write(&t, &bytes[..bytes.len() - 1]).unwrap();
    match npy::read::<f64>(&t) {
        Err(Error::NpyTruncated {
            expected, found, ..
        }) => assert_eq!((expected, found), (240, 239)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        npy::read_untyped(&t),
        Err(Error::NpyTruncated { .. })
    ));
    assert!(matches!(
        npy::read_from(&bytes[..bytes.len() - 1]),
        Err(Error::NpyTruncated { .. })
    ));
    // A header claiming a huge payload over a tiny file: an error, not an
    // allocation of the claimed size.
    let lying = with_dict(
        1,
        "{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000,)}",
    );
    std::fs::write(&t, &lying).unwrap();
    assert!(matches!(
        npy::read::<f64>(&t),
        Err(Error::NpyTruncated { .. })
    ));
    assert!(matches!(
        npy::read_from(&lying[..]),
        Err(Error::NpyTruncated { .. })
    ));
    // Header-only read succeeds on the same file: payload is checked by readers.
    assert_eq!(npy::read_header(&t).unwrap().shape, vec![100000000000]);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = NpyHeader::parse(&bytes);
        let _ = npy::read_from(&bytes[..]);
    }

    #[test]
    fn mutated_headers_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = with_dict(1, "{'descr': [('x', '>f4'), ('y', '<i2', (2,))], 'fortran_order': True, 'shape': (2, 3), }");
        bytes.extend_from_slice(&[7u8; 48]);
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let _ = NpyHeader::parse(&bytes);
        let _ = npy::read_from(&bytes[..]);
    }
}

fn write_header_only(dir: &std::path::Path, name: &str, shape: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    std::fs::write(&p, with_dict(1, &dict)).unwrap();
    p
}

/// Regression: a 128-byte file declaring shape (20000000, 0) made
/// `read_blocks` build twenty million empty arrays (seconds and GiB of
/// memory, all declared by the header and backed by nothing). Zero-width
/// arrays are refused by block reads, read whole as NumPy does, and no-row
/// arrays with overflowing trailing dims neither panic nor allocate.
#[test]
fn zero_width_and_zero_row_arrays_cost_nothing_the_file_does_not_back() {
    use zrecord::npy::Parallelism;
    let dir = tempfile::tempdir().unwrap();
    for shape in ["(20000000, 0)", "(1000000000000, 3, 0)", "(2, 0)"] {
        let p = write_header_only(dir.path(), "z.npy", shape);
        for par in [Parallelism::Sequential, Parallelism::Auto] {
            match npy::read_blocks::<f32>(&p, par) {
                Err(e @ Error::ShapeMismatch { .. }) => {
                    assert!(e.to_string().contains("zero-width"), "{e}")
                }
                Err(e) => panic!("{shape}: {e}"),
                Ok(blocks) => panic!("{shape}: {} blocks from a header", blocks.len()),
            }
        }
        let whole: ndarray::ArrayD<f32> = npy::read(&p).unwrap();
        assert_eq!(whole.len(), 0);
        assert_eq!(
            whole.shape()[0] as u64,
            npy::read_header(&p).unwrap().shape[0] as u64
        );
    }
    for shape in ["(0, 3)", "(0, 1099511627776, 1099511627776)"] {
        let p = write_header_only(dir.path(), "e.npy", shape);
        // No panic on the overflowing trailing dims: that shape is a header
        // error (NumPy cannot allocate it either), (0, 3) no blocks.
        match npy::read_blocks::<f32>(&p, Parallelism::Auto) {
            Ok(blocks) => assert!(blocks.is_empty()),
            Err(e) => assert!(e.to_string().contains("overflows"), "{e}"),
        }
        let _ = npy::read_prefix::<f32>(&p, 0, None);
    }
}

/// Regression: a header whose nonzero dimensions overflow was accepted as
/// long as a dimension before the overflow was 0 (element count 0),
/// although NumPy refuses such a shape ("array is too big"): `npy_header`
/// reported it as valid and Python's `load_npy` then failed inside NumPy
/// with a message that named no file. The header reader now applies
/// NumPy's rule: the nonzero dimensions times the item size must fit in
/// `isize`.
#[test]
fn a_shape_numpy_cannot_allocate_is_refused_even_with_a_zero_dimension() {
    use zrecord::npy::Parallelism;
    let dir = tempfile::tempdir().unwrap();
    for shape in [
        "(5, 0, 4611686018427387904, 4)",
        "(0, 4611686018427387904, 4)",
        "(2305843009213693952, 0)",
        "(0, 1099511627776, 1099511627776)",
    ] {
        let p = write_header_only(dir.path(), "o.npy", shape);
        let named = |e: Error| {
            let m = e.to_string();
            assert!(
                m.contains("o.npy") && m.contains("overflows"),
                "{shape}: {m}"
            );
        };
        match NpyHeader::parse(&std::fs::read(&p).unwrap()) {
            Err(Error::NpyHeader {
                problem: NpyHeaderProblem::ShapeOverflow(_),
                ..
            }) => {}
            other => panic!("{shape}: {other:?}"),
        }
        named(npy::read_header(&p).unwrap_err());
        named(npy::read::<f32>(&p).unwrap_err());
        named(npy::read_untyped(&p).unwrap_err());
        named(npy::read_prefix::<f32>(&p, 0, None).unwrap_err());
        for par in [Parallelism::Sequential, Parallelism::Auto] {
            named(npy::read_blocks::<f32>(&p, par).unwrap_err());
        }
    }
    // The largest shapes NumPy allocates still parse.
    let p = write_header_only(dir.path(), "ok.npy", "(0, 2305843009213693951)");
    assert_eq!(npy::read_header(&p).unwrap().payload_bytes, 0);
}

#[test]
fn a_shape_written_as_a_list_is_refused_as_numpy_refuses_it() {
    for shape in ["[2, 3]", "[]", "([2, 3])"] {
        let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
        match problem(&with_dict(1, &dict)) {
            NpyHeaderProblem::BadValue {
                key: "shape",
                detail,
            } => {
                assert!(detail.contains("is a list, not a tuple"), "{detail}")
            }
            other => panic!("{shape}: {other:?}"),
        }
    }
    // Lists elsewhere (a structured descr) and tuples in any spelling stay.
    for dict in [
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': ((2, 3)), }",
        "{'shape': (2,3,),'fortran_order': False, 'descr': '<f4'}",
        "{'descr': [('a', '<f4', (2,))], 'fortran_order': False, 'shape': (), }",
    ] {
        NpyHeader::parse(&with_dict(1, dict)).unwrap_or_else(|e| panic!("{dict}: {e}"));
    }
}
