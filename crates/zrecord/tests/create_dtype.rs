//! Creating a store from a hand-built `DType`: guards against `create`
//! accepting a dtype that `open` refuses (duplicate or missing field names,
//! named padding, a scalar size that does not exist, nesting past the
//! decoder's limit), which wrote data that could never be read back, and
//! against a one-byte scalar built with a byte order (`<i1`) reopening as a
//! different dtype (`|i1`).

use zrecord::dtype::MAX_NESTING;
use zrecord::{
    ByteOrder, Codec, CreateOptions, DType, DenseCore, Error, Field, OpenOptions, RaggedCore,
    ScalarKind,
};

fn f4() -> DType {
    DType::parse("<f4").unwrap()
}

fn field(name: &str, dtype: DType) -> Field {
    Field {
        name: name.into(),
        title: None,
        dtype,
        shape: vec![],
    }
}

fn nested(levels: usize) -> DType {
    let mut t = f4();
    for _ in 0..levels {
        t = DType::Structured(vec![field("n", t)]);
    }
    t
}

/// (what is wrong, the dtype, a fragment the error must contain).
fn unopenable() -> Vec<(&'static str, DType, &'static str)> {
    vec![
        (
            "duplicate field names",
            DType::Structured(vec![field("a", f4()), field("a", f4())]),
            r#"field "a": duplicate field name"#,
        ),
        (
            "unnamed non-padding field",
            DType::Structured(vec![field("x", f4()), field("", f4())]),
            "field #1: only padding fields may be unnamed",
        ),
        (
            "named padding",
            DType::Structured(vec![field("x", f4()), field("p", DType::Padding(4))]),
            r#"field "p": padding (|V4) must be unnamed"#,
        ),
        (
            "zero-byte padding",
            DType::Structured(vec![field("x", f4()), field("", DType::Padding(0))]),
            "field #1: bad padding size 0",
        ),
        (
            "a float of 3 bytes",
            DType::Scalar {
                kind: ScalarKind::Float,
                size: 3,
                order: ByteOrder::Little,
            },
            "<f3 is not a dtype",
        ),
        (
            "a float of 3 bytes inside a struct",
            DType::Structured(vec![field(
                "outer",
                DType::Structured(vec![field(
                    "inner",
                    DType::Scalar {
                        kind: ScalarKind::Float,
                        size: 3,
                        order: ByteOrder::Little,
                    },
                )]),
            )]),
            r#"field "outer"."inner": <f3 is not a dtype"#,
        ),
        (
            "a struct without fields",
            DType::Structured(vec![
                field("x", f4()),
                field("e", DType::Structured(vec![])),
            ]),
            r#"field "e": structured dtype without fields"#,
        ),
        ("nested 20 deep", nested(20), "nested deeper than 16"),
        (
            "top-level padding",
            DType::Padding(4),
            "void dtypes cannot be stored",
        ),
    ]
}

#[test]
fn create_refuses_what_open_would_refuse_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (what, dt, fragment)) in unopenable().into_iter().enumerate() {
        let dense = DenseCore::create(
            dir.path().join(format!("d{i}")),
            &dt,
            &[1],
            &CreateOptions::new(Codec::Raw),
        );
        let ragged = RaggedCore::create(
            dir.path().join(format!("r{i}")),
            &dt,
            &CreateOptions::new(Codec::Raw),
        );
        for (kind, err) in [("dense", dense.err()), ("ragged", ragged.err())] {
            match err {
                Some(e @ Error::UnsupportedDType { .. }) => {
                    assert!(
                        e.to_string().contains(fragment),
                        "{kind} {what}: {e} does not say {fragment:?}"
                    )
                }
                other => panic!("{kind} {what}: create gave {other:?}"),
            }
        }
        // Nothing was written: the refusal comes before any file.
        assert!(!dir.path().join(format!("d{i}")).join("meta.zr").exists());
    }
}

#[test]
fn nesting_up_to_the_decoder_limit_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let dt = nested(MAX_NESTING);
    let p = dir.path().join("s");
    let core = DenseCore::create(&p, &dt, &[2], &CreateOptions::new(Codec::Raw)).unwrap();
    core.append_bytes(&vec![7u8; core.record_bytes()]).unwrap();
    core.close().unwrap();
    let back = DenseCore::open(&p, &OpenOptions::default()).unwrap();
    assert_eq!(back.dtype(), &dt);
    assert!(
        DenseCore::create(
            dir.path().join("t"),
            &nested(MAX_NESTING + 1),
            &[2],
            &CreateOptions::new(Codec::Raw)
        )
        .is_err()
    );
}

#[test]
fn one_byte_scalars_with_a_byte_order_reopen_equal() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (kind, order)) in [
        (ScalarKind::Int, ByteOrder::Little),
        (ScalarKind::UInt, ByteOrder::Big),
        (ScalarKind::Bool, ByteOrder::Little),
    ]
    .into_iter()
    .enumerate()
    {
        let hand_built = DType::Scalar {
            kind,
            size: 1,
            order,
        };
        let in_struct = DType::Structured(vec![field("b", hand_built.clone()), field("f", f4())]);
        for (j, dt) in [hand_built.clone(), in_struct].into_iter().enumerate() {
            let p = dir.path().join(format!("d{i}_{j}"));
            let core = DenseCore::create(&p, &dt, &[3], &CreateOptions::new(Codec::Raw)).unwrap();
            let created = core.dtype().clone();
            core.append_array_bytes(&dt, &[1, 3], &vec![1u8; core.record_bytes()])
                .unwrap();
            core.close().unwrap();
            let reopened = DenseCore::open(&p, &OpenOptions::default()).unwrap();
            assert_eq!(reopened.dtype(), &created, "{dt}");
            drop(reopened);
            // Expecting the dtype as it was handed to create still opens.
            DenseCore::open(&p, &OpenOptions::read_only().dtype(dt.clone())).unwrap();

            let p = dir.path().join(format!("r{i}_{j}"));
            let core = RaggedCore::create(&p, &dt, &CreateOptions::new(Codec::Raw)).unwrap();
            let created = core.dtype().clone();
            core.close().unwrap();
            let reopened = RaggedCore::open(&p, &OpenOptions::default()).unwrap();
            assert_eq!(reopened.dtype(), &created, "{dt}");
        }
        assert_eq!(
            DenseCore::open(
                dir.path().join(format!("d{i}_0")),
                &OpenOptions::read_only()
            )
            .unwrap()
            .dtype()
            .to_numpy_str(),
            format!("|{}1", hand_built.to_numpy_str().as_bytes()[1] as char)
        );
    }
}
