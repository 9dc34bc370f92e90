//! Guards the multi-stream length check the loader relies on: stores that
//! must line up record for record (an image stream and its labels) but do
//! not must be reported with every stream's length, not just the first
//! disagreement, and equal stores must pass with their common length.

use ndarray::{Array1, Array2};
use zrecord::{Codec, CreateOptions, DenseStore, Error, RaggedStore, check_equal_lengths};

#[test]
fn unequal_streams_report_every_length() {
    let dir = tempfile::tempdir().unwrap();
    let images = DenseStore::<u8>::create(
        dir.path().join("img"),
        &[4],
        &CreateOptions::new(Codec::Raw),
    )
    .unwrap();
    let labels =
        DenseStore::<i64>::create(dir.path().join("lab"), &[], &CreateOptions::new(Codec::Raw))
            .unwrap();
    let text = RaggedStore::<u8>::create(dir.path().join("txt"), &CreateOptions::new(Codec::Zstd))
        .unwrap();
    images.append(Array2::<u8>::zeros((5, 4)).view()).unwrap();
    labels.append(Array1::<i64>::zeros(5).view()).unwrap();
    text.append_bytes([&b"a"[..], b"b", b"c", b"d", b"e"])
        .unwrap();
    let streams = || {
        [
            ("images", images.len()),
            ("labels", labels.len()),
            ("text", text.len()),
        ]
    };
    assert_eq!(check_equal_lengths(streams()).unwrap(), 5);

    labels.append(Array1::<i64>::zeros(2).view()).unwrap();
    text.append_bytes([&b"f"[..]]).unwrap();
    match check_equal_lengths(streams()) {
        Err(e @ Error::LengthMismatch { .. }) => {
            let Error::LengthMismatch { lengths } = &e else {
                unreachable!()
            };
            assert_eq!(
                lengths,
                &vec![
                    ("images".to_string(), 5),
                    ("labels".to_string(), 7),
                    ("text".to_string(), 6)
                ]
            );
            let msg = e.to_string();
            assert!(
                msg.contains("images=5") && msg.contains("labels=7") && msg.contains("text=6"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(check_equal_lengths(std::iter::empty()).is_err());
    assert_eq!(check_equal_lengths([("only", 0)]).unwrap(), 0);
}
