//! Adversarial review of the typed API: custom elements whose dtype is
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
