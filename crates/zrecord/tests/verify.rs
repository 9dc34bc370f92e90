//! Guards `verify` on typed stores: a ragged record whose shape disagrees
//! with its payload (or whose shape record is not a rank plus dims) must be
//! reported by its logical index, every one of them, while healthy records
//! and healthy stores report nothing.

use ndarray::{ArrayD, IxDyn};
use zrecord::{Codec, CreateOptions, DenseStore, OpenOptions, RaggedCore, RaggedStore};

/// Overwrites the first 8 bytes of physical record `phys` in a raw store.
fn poke_u64(dir: &std::path::Path, phys: u64, value: u64) {
    let loc = std::fs::read(dir.join("0.loc")).unwrap();
    let e = &loc[(phys * 16) as usize..(phys * 16 + 16) as usize];
    let offset = u32::from_le_bytes(e[0..4].try_into().unwrap()) as usize;
    let chunk = u32::from_le_bytes(e[12..16].try_into().unwrap());
    let path = dir.join(format!("{chunk}.chunk"));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
}

/// A ragged store of 20 records of shape `[2, i % 5 + 1]`, verified clean;
/// the directory guard and the store's path.
fn twenty_records(codec: Codec) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r");
    let s = RaggedStore::<i32>::create(&path, &CreateOptions::new(codec)).unwrap();
    let recs: Vec<ArrayD<i32>> = (0..20)
        .map(|i| ArrayD::from_shape_fn(IxDyn(&[2, (i % 5 + 1) as usize]), |d| d[1] as i32))
        .collect();
    s.append(recs.iter().map(|a| a.view())).unwrap();
    s.sync().unwrap();
    assert!(s.core().verify().unwrap().is_ok());
    (dir, path)
}

#[test]
fn ragged_verify_reports_every_shape_payload_disagreement_by_index() {
    let (_dir, path) = twenty_records(Codec::Raw);
    // Record 3: the shape claims rank 5 but holds 2 dims. Record 11: its
    // first dim becomes 7, so the shape needs more bytes than the payload.
    poke_u64(&path, 2 * 3 + 1, 5);
    {
        let loc = std::fs::read(path.join("0.loc")).unwrap();
        let e = &loc[(2 * 11 + 1) * 16..(2 * 11 + 1) * 16 + 16];
        let offset = u32::from_le_bytes(e[0..4].try_into().unwrap()) as usize;
        let mut bytes = std::fs::read(path.join("0.chunk")).unwrap();
        bytes[offset + 8..offset + 16].copy_from_slice(&7u64.to_le_bytes());
        std::fs::write(path.join("0.chunk"), bytes).unwrap();
    }
    let core = RaggedCore::open(&path, &OpenOptions::read_only()).unwrap();
    let rep = core.verify().unwrap();
    let bad: Vec<u64> = rep.bad.iter().map(|(i, _)| *i).collect();
    assert_eq!(bad, [3, 11], "{:?}", rep.bad);
    assert!(rep.bad[0].1.contains("rank 5"), "{}", rep.bad[0].1);
    assert!(
        rep.bad[1].1.contains("payload decodes to"),
        "{}",
        rep.bad[1].1
    );
}

#[test]
fn dense_verify_is_clean_on_a_healthy_store_and_names_garbled_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let s = DenseStore::<u16>::create(&path, &[64], &CreateOptions::new(Codec::Zstd)).unwrap();
    s.append(ndarray::Array2::<u16>::from_shape_fn((50, 64), |(i, j)| (i * j) as u16).view())
        .unwrap();
    s.sync().unwrap();
    assert!(s.core().verify().unwrap().is_ok());
    drop(s);
    // Garble the frame of record 7 (zstd): verify names it, and only it.
    let loc = std::fs::read(path.join("0.loc")).unwrap();
    let offset = u32::from_le_bytes(loc[7 * 16..7 * 16 + 4].try_into().unwrap()) as usize;
    let mut bytes = std::fs::read(path.join("0.chunk")).unwrap();
    for b in &mut bytes[offset + 4..offset + 12] {
        *b ^= 0xff;
    }
    std::fs::write(path.join("0.chunk"), bytes).unwrap();
    let core = zrecord::DenseCore::open(&path, &OpenOptions::read_only()).unwrap();
    let rep = core.verify().unwrap();
    assert!(!rep.is_ok());
    assert!(rep.bad.iter().all(|(i, _)| *i == 7), "{:?}", rep.bad);
}

/// The shape records are read a batch per gather; one that does not decode
/// fails its batch, which is then read record by record: the unreadable one
/// is named, and the others of the batch are still checked (record 11's
/// shape frame is replaced by record 12's, a valid frame of another shape).
#[test]
fn ragged_verify_checks_a_whole_batch_around_an_unreadable_shape_record() {
    let (_dir, path) = twenty_records(Codec::Zstd);
    let loc = std::fs::read(path.join("0.loc")).unwrap();
    let entry = |phys: usize| {
        let e = &loc[phys * 16..phys * 16 + 16];
        let offset = u32::from_le_bytes(e[0..4].try_into().unwrap()) as usize;
        let len = u32::from_le_bytes(e[4..8].try_into().unwrap()) as usize;
        (offset, len)
    };
    let mut bytes = std::fs::read(path.join("0.chunk")).unwrap();
    // Record 4's shape frame: garbled past its magic number.
    let (o4, l4) = entry(2 * 4 + 1);
    for b in &mut bytes[o4 + 4..o4 + l4] {
        *b ^= 0xA5;
    }
    // Record 11's shape frame becomes record 12's ([2, 3] for a [2, 2]
    // payload): frames of 24 bytes of shape, the same length.
    let ((o11, l11), (o12, l12)) = (entry(2 * 11 + 1), entry(2 * 12 + 1));
    assert_eq!(l11, l12);
    let twelve = bytes[o12..o12 + l12].to_vec();
    bytes[o11..o11 + l11].copy_from_slice(&twelve);
    std::fs::write(path.join("0.chunk"), bytes).unwrap();

    let core = RaggedCore::open(&path, &OpenOptions::read_only()).unwrap();
    let rep = core.verify().unwrap();
    let mut bad: Vec<u64> = rep.bad.iter().map(|(i, _)| *i).collect();
    bad.dedup();
    assert_eq!(bad, [4, 11], "{:?}", rep.bad);
    let says = |i: u64, what: &str| rep.bad.iter().any(|(j, m)| *j == i && m.contains(what));
    assert!(says(4, "shape record unreadable"), "{:?}", rep.bad);
    assert!(says(11, "payload decodes to"), "{:?}", rep.bad);
}
