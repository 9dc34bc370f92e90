//! Guards identity decoding against panics and silent acceptance on hostile
//! bytes (it reads `store.zr` from disk), and encode/decode against losing
//! any part of a dtype or shape.

use proptest::prelude::*;
use zrecord::dtype::{decode_identity, encode_identity_dense, encode_identity_ragged};
use zrecord::{DType, Field};

fn scalar() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![
        "|b1", "|i1", "|u1", "<i2", ">i2", "<i4", ">i4", "<i8", ">i8", "<u2", ">u2", "<u4", "<u8",
        ">u8", "<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "<c8", ">c8", "<c16", ">c16",
    ])
    .prop_map(|s| DType::parse(s).unwrap())
}

fn dtype() -> impl Strategy<Value = DType> {
    scalar().prop_recursive(3, 12, 4, |inner| {
        prop::collection::vec((inner, prop::collection::vec(1usize..4, 0..3)), 1..4).prop_map(
            |fs| {
                DType::Structured(
                    fs.into_iter()
                        .enumerate()
                        .map(|(i, (dtype, shape))| Field {
                            name: format!("f{i}"),
                            title: None,
                            dtype,
                            shape,
                        })
                        .collect(),
                )
            },
        )
    })
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_identity(&bytes);
    }

    #[test]
    fn decoding_mutated_identities_never_panics(
        dt in dtype(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode_identity_dense(&dt, &[2, 3]);
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let _ = decode_identity(&bytes);
    }

    #[test]
    fn identity_round_trips(dt in dtype(), shape in prop::collection::vec(0u64..1 << 40, 0..5)) {
        let id = decode_identity(&encode_identity_dense(&dt, &shape)).unwrap();
        prop_assert_eq!(&id.dtype, &dt);
        prop_assert_eq!(id.item_shape, Some(shape));
        let id = decode_identity(&encode_identity_ragged(&dt)).unwrap();
        prop_assert_eq!(id.dtype, dt);
        prop_assert_eq!(id.item_shape, None);
    }
}
