//! Guards against opening a damaged store silently or with a panic: every
//! violation listed in FORMAT.md "On open, validate" is a typed error that
//! names the file.

mod common;
use common::*;
use std::fs::{self, OpenOptions};
use std::path::Path;
use zrecord_engine::{Codec, Engine, EngineConfig, Error, OpenMode, ReadPath};

/// A store of 12 raw records across several chunks and loc segments.
fn good(codec: Codec) -> (tempfile::TempDir, EngineConfig) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny(ReadPath::Mmap);
    let e = Engine::create_with(dir.path(), &options(codec), cfg.clone()).unwrap();
    let recs: Vec<Vec<u8>> = (0..12).map(|t| record(t, 70)).collect();
    e.append_fixed(&recs.concat(), 70).unwrap();
    e.sync().unwrap();
    drop(e);
    (dir, cfg)
}

fn open(dir: &Path, cfg: &EngineConfig) -> zrecord_engine::Result<Engine> {
    Engine::open_with(dir, OpenMode::ReadWrite, cfg.clone())
}

fn expect_corrupted(dir: &Path, cfg: &EngineConfig, file: &str, what: &str) {
    match open(dir, cfg) {
        Err(Error::Corrupted {
            file: f, detail, ..
        }) => {
            assert!(
                f.ends_with(file),
                "{what}: blamed {f:?} ({detail}), expected {file}"
            );
        }
        other => panic!("{what}: expected Corrupted naming {file}, got {other:?}"),
    }
}

fn patch(path: &Path, at: usize, bytes: &[u8]) {
    let mut b = fs::read(path).unwrap();
    b[at..at + bytes.len()].copy_from_slice(bytes);
    fs::write(path, b).unwrap();
}

fn set_len(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn the_fixture_opens() {
    for codec in CODECS {
        let (d, cfg) = good(codec);
        let e = open(d.path(), &cfg).unwrap();
        assert_eq!(e.len(), 12);
        assert_eq!(count_files(d.path(), "loc"), 3);
        if codec == Codec::Raw {
            assert_eq!(count_files(d.path(), "chunk"), 3);
        }
    }
}

#[test]
fn no_store_is_not_a_store() {
    let d = tempfile::tempdir().unwrap();
    let cfg = EngineConfig::default();
    assert!(matches!(open(d.path(), &cfg), Err(Error::NotAStore { .. })));
    assert!(matches!(
        open(&d.path().join("missing"), &cfg),
        Err(Error::NotAStore { .. })
    ));
}

#[test]
fn bad_meta_header_fields() {
    let cases: [(&str, usize, &[u8]); 4] = [
        ("magic", 0, b"ZREX"),
        ("version", 4, &[3]),
        ("version 5", 4, &[5]),
        ("codec", 5, &[3]),
    ];
    for (what, at, bytes) in cases {
        let (d, cfg) = good(Codec::Raw);
        patch(&d.path().join("meta.zr"), at, bytes);
        expect_corrupted(d.path(), &cfg, "meta.zr", what);
    }
    for len in [0u64, 31, 33] {
        let (d, cfg) = good(Codec::Raw);
        let p = d.path().join("meta.zr");
        if len > 32 {
            let mut b = fs::read(&p).unwrap();
            b.push(0);
            fs::write(&p, b).unwrap();
        } else {
            set_len(&p, len);
        }
        expect_corrupted(d.path(), &cfg, "meta.zr", "size");
    }
}

#[test]
fn missing_chunks() {
    let (d, cfg) = good(Codec::Raw);
    fs::remove_file(d.path().join("1.chunk")).unwrap();
    expect_corrupted(d.path(), &cfg, "1.chunk", "middle chunk missing");
    let (d, cfg) = good(Codec::Raw);
    fs::remove_file(d.path().join("0.chunk")).unwrap();
    expect_corrupted(d.path(), &cfg, "0.chunk", "first chunk missing");
    // tail_chunk pointing far past the files.
    let (d, cfg) = good(Codec::Raw);
    patch(&d.path().join("meta.zr"), 6, &u32::MAX.to_le_bytes());
    assert!(matches!(open(d.path(), &cfg), Err(Error::Corrupted { .. })));
}

#[test]
fn short_chunks() {
    let (d, cfg) = good(Codec::Raw);
    let meta = fs::read(d.path().join("meta.zr")).unwrap();
    let tail = u32::from_le_bytes(meta[6..10].try_into().unwrap());
    let off = u32::from_le_bytes(meta[10..14].try_into().unwrap());
    set_len(&d.path().join(format!("{tail}.chunk")), u64::from(off) - 1);
    expect_corrupted(d.path(), &cfg, &format!("{tail}.chunk"), "short tail chunk");
    // A full chunk shorter than the entries pointing into it.
    let (d, cfg) = good(Codec::Raw);
    set_len(&d.path().join("0.chunk"), 100);
    expect_corrupted(d.path(), &cfg, "0.loc", "short full chunk");
    // tail_offset past the capacity.
    let (d, cfg) = good(Codec::Raw);
    patch(&d.path().join("meta.zr"), 10, &400u32.to_le_bytes());
    expect_corrupted(d.path(), &cfg, "meta.zr", "tail_offset past capacity");
}

#[test]
fn short_or_missing_loc_segments() {
    let (d, cfg) = good(Codec::Raw);
    set_len(&d.path().join("2.loc"), 16 * 4 - 1);
    expect_corrupted(d.path(), &cfg, "2.loc", "short last segment");
    let (d, cfg) = good(Codec::Raw);
    fs::remove_file(d.path().join("1.loc")).unwrap();
    expect_corrupted(d.path(), &cfg, "1.loc", "missing segment");
    // A length far beyond the table: refused before allocating.
    let (d, cfg) = good(Codec::Raw);
    patch(&d.path().join("meta.zr"), 14, &u64::MAX.to_le_bytes());
    expect_corrupted(d.path(), &cfg, "3.loc", "huge length");
    let (d, _) = good(Codec::Raw);
    patch(&d.path().join("meta.zr"), 14, &(1u64 << 40).to_le_bytes());
    assert!(matches!(
        Engine::open(d.path(), OpenMode::ReadOnly),
        Err(Error::Corrupted { .. })
    ));
}

/// Regression (audit f15): a damaged record count in meta.zr was reported
/// as "0.loc: is 160 bytes, shorter than the 4294967296 its 268435456 live
/// entries need", blaming 0.loc alone with a per-segment count.
#[test]
fn a_record_count_the_loc_segment_lacks_names_both_files() {
    // The default 2^28-entry segments: 12 entries in 0.loc, and a count of
    // 2^32 that would need 2^28 of them there.
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::create(dir.path(), &options(Codec::Raw)).unwrap();
    let recs: Vec<Vec<u8>> = (0..12).map(|t| record(t, 70)).collect();
    e.append_fixed(&recs.concat(), 70).unwrap();
    e.close().unwrap();
    patch(&dir.path().join("meta.zr"), 14, &(1u64 << 32).to_le_bytes());
    let err = Engine::open(dir.path(), OpenMode::ReadOnly).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupted { file, .. } if file.ends_with("0.loc")),
        "{err:?}"
    );
    let m = err.to_string();
    assert!(
        m.contains(
            "meta.zr's record count, 4294967296, disagrees with 0.loc: that count needs 268435456 entries (4294967296 bytes) in 0.loc, but it holds 12 (192 bytes)"
        ),
        "{m}"
    );
}

/// Regression (audit f13): a dict.zr zstd cannot load was reported as
/// "corrupted store file …/dict.zr: invalid argument: dictionary cannot be
/// loaded", an "invalid argument" inside a corruption.
#[test]
fn an_unloadable_dict_zr_is_corruption_of_that_file_only() {
    let (d, cfg) = good(Codec::ZstdDict);
    let mut bad = 0xEC30_A437u32.to_le_bytes().to_vec();
    bad.extend_from_slice(&[0xFF; 60]);
    fs::write(d.path().join("dict.zr"), bad).unwrap();
    let err = open(d.path(), &cfg).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupted { file, .. } if file.ends_with("dict.zr")),
        "{err:?}"
    );
    let m = err.to_string();
    assert!(m.contains("zstd cannot load the 64-byte dictionary"), "{m}");
    assert!(!m.contains("invalid argument"), "{m}");
}

#[test]
fn entries_beyond_the_frontier() {
    // Entry 11 (the last) in 2.loc at entry 3.
    let at = 3 * 16;
    let cases: [(&str, usize, u32); 4] = [
        ("offset past the tail", at, 250),
        ("length past the tail", at + 4, 200),
        ("chunk past tail_chunk", at + 12, 99),
        ("empty record", at + 4, 0),
    ];
    for (what, off, v) in cases {
        let (d, cfg) = good(Codec::Raw);
        patch(&d.path().join("2.loc"), off, &v.to_le_bytes());
        expect_corrupted(d.path(), &cfg, "2.loc", what);
        assert!(
            matches!(
                open(d.path(), &cfg),
                Err(Error::Corrupted {
                    record: Some(11),
                    ..
                })
            ),
            "{what}: the entry's record is named"
        );
    }
    // Raw records store exactly their decoded length.
    let (d, cfg) = good(Codec::Raw);
    patch(&d.path().join("0.loc"), 8, &69u32.to_le_bytes());
    expect_corrupted(d.path(), &cfg, "0.loc", "raw phys != logic");
}

#[test]
fn dictionary_presence_must_match_the_codec() {
    let (d, cfg) = good(Codec::ZstdDict);
    fs::remove_file(d.path().join("dict.zr")).unwrap();
    expect_corrupted(d.path(), &cfg, "dict.zr", "dict missing");
    for codec in [Codec::Raw, Codec::Zstd] {
        let (d, cfg) = good(codec);
        fs::write(d.path().join("dict.zr"), dictionary()).unwrap();
        expect_corrupted(d.path(), &cfg, "dict.zr", "unexpected dict");
    }
}

#[test]
fn damaged_frames_fail_on_gather_not_with_a_panic() {
    let (d, cfg) = good(Codec::Zstd);
    let e = open(d.path(), &cfg).unwrap();
    let mut lens = [0u64; 1];
    let mut stored = [0u64; 1];
    e.record_lengths(&[0], &mut lens, Some(&mut stored))
        .unwrap();
    drop(e);
    // Scribble over record 0's frame.
    patch(&d.path().join("0.chunk"), 0, &[0xAB; 8]);
    let e = open(d.path(), &cfg).unwrap();
    let mut out = vec![0u8; 70];
    // The record is a field of the error, for layers that number records
    // differently (a ragged store's pairs).
    let err = e.gather_fixed(&[0], 70, &mut out).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupted { file, record: Some(0), .. } if file.ends_with("0.chunk")),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("0.chunk: record 0: zstd frame fails to decode"),
        "{err}"
    );
    // A frame that claims more than its entry's decoded length.
    drop(e);
    let (d, cfg) = good(Codec::Zstd);
    patch(&d.path().join("0.loc"), 8, &10u32.to_le_bytes());
    let e = open(d.path(), &cfg).unwrap();
    let mut out = vec![0u8; 10];
    assert!(matches!(
        e.gather_var(&[0], &mut out, &[0, 10]),
        Err(Error::Corrupted { .. })
    ));
}

#[test]
fn foreign_files_are_ignored_on_open() {
    let (d, cfg) = good(Codec::Raw);
    fs::write(d.path().join("README"), b"hi").unwrap();
    fs::write(d.path().join("7.chunk"), b"stale").unwrap();
    assert_eq!(open(d.path(), &cfg).unwrap().len(), 12);
}

/// Review finding: a `gather_fixed` record size that is not the records'
/// was reported as a corrupted `.loc`. It is the caller's size against the
/// entry's: `RecordLength`, naming both, for `gather_var` ranges too.
#[test]
fn a_gather_told_the_wrong_record_length_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::create(dir.path(), &options(Codec::Zstd)).unwrap();
    e.append_fixed(&[7u8; 8], 4).unwrap();
    let mut out = [0u8; 16];
    let err = e.gather_fixed(&[0, 1], 8, &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            Error::RecordLength {
                record: 0,
                stored: 4,
                asked: 8,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "record 0 holds 4 bytes, the gather asked for 8"
    );
    let err = e.gather_var(&[1, 0], &mut out, &[0, 4, 10]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::RecordLength {
                record: 0,
                stored: 4,
                asked: 6,
                ..
            }
        ),
        "{err:?}"
    );
    e.gather_fixed(&[1, 0], 4, &mut out[..8]).unwrap();
    assert_eq!(out[..8], [7u8; 8]);
}
