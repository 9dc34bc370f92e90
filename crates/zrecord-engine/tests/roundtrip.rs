//! Guards against records that do not come back bit-exact: every codec,
//! every append form, both read paths, across chunk rollover and loc-segment
//! boundaries (tiny internal capacities), and after reopening.

mod common;
use common::*;
use zrecord_engine::{
    AlignedBuf, Codec, CreateOptions, Engine, EngineConfig, Error, OpenMode, ReadPath,
};

fn forms(codec: Codec, read_path: ReadPath, cfg: EngineConfig) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let e = Engine::create_with(&path, &options(codec), cfg.clone()).unwrap();
    let mut model: Vec<Vec<u8>> = Vec::new();
    // Fixed-width.
    let fixed: Vec<Vec<u8>> = (0..10).map(|t| record(t, 40)).collect();
    assert_eq!(e.append_fixed(&fixed.concat(), 40).unwrap(), 0);
    model.extend(fixed.clone());
    // Zero records: a no-op returning the length.
    assert_eq!(e.append_fixed(&[], 40).unwrap(), 10);
    // Variable-width.
    let var: Vec<Vec<u8>> = (10..26)
        .map(|t| record(t, 1 + (t as usize * 7) % 90))
        .collect();
    let mut offsets = vec![0];
    for r in &var {
        offsets.push(offsets.last().unwrap() + r.len());
    }
    assert_eq!(e.append_var(&var.concat(), &offsets).unwrap(), 10);
    model.extend(var);
    // Paired.
    let pay: Vec<Vec<u8>> = (30..36).map(|t| record(t, 20 + t as usize)).collect();
    let meta: Vec<Vec<u8>> = (40..46)
        .map(|t| record(t, 8 * (1 + t as usize % 3)))
        .collect();
    let off = |v: &[Vec<u8>]| {
        let mut o = vec![0];
        for r in v {
            o.push(o.last().unwrap() + r.len());
        }
        o
    };
    assert_eq!(
        e.append_paired(&pay.concat(), &off(&pay), &meta.concat(), &off(&meta))
            .unwrap(),
        26
    );
    model.extend(
        pay.iter()
            .zip(&meta)
            .flat_map(|(a, b)| [a.clone(), b.clone()]),
    );
    assert_matches(&e, &model);
    // Fixed gather.
    let mut out = vec![0u8; 40 * 3];
    e.gather_fixed(&[9, 0, 9], 40, &mut out).unwrap();
    assert_eq!(
        out,
        [fixed[9].clone(), fixed[0].clone(), fixed[9].clone()].concat()
    );
    // Unaligned and aligned destinations.
    let mut big = AlignedBuf::zeroed(40 * 10 + 16);
    let idx: Vec<u64> = (0..10).collect();
    e.gather_fixed(&idx, 40, &mut big[16..]).unwrap();
    assert_eq!(&big[16..], &fixed.concat()[..]);
    e.sync().unwrap();
    drop(e);
    let cfg2 = EngineConfig { read_path, ..cfg };
    let e = Engine::open_with(&path, OpenMode::ReadOnly, cfg2).unwrap();
    assert_eq!(e.codec(), codec);
    assert_eq!(e.dictionary().is_some(), codec == Codec::ZstdDict);
    assert_matches(&e, &model);
}

#[test]
fn every_codec_and_form_round_trips_with_default_capacities() {
    for codec in CODECS {
        for rp in [ReadPath::Mmap, ReadPath::Pread] {
            forms(codec, rp, EngineConfig::default());
        }
    }
}

#[test]
fn every_codec_and_form_round_trips_across_chunks_and_segments() {
    for codec in CODECS {
        for rp in [ReadPath::Mmap, ReadPath::Pread] {
            forms(codec, rp, tiny(ReadPath::Mmap));
            forms(codec, ReadPath::Mmap, tiny(rp));
        }
    }
}

#[test]
fn chunk_rollover_follows_the_placement_rule() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        chunk_capacity: 100,
        loc_segment_entries: 3,
        ..EngineConfig::default()
    };
    let e = Engine::create_with(dir.path(), &CreateOptions::new(Codec::Raw), cfg.clone()).unwrap();
    // 50 + 49 = 99 < 100 stays; the next 1 byte would reach 100: new chunk.
    let data = [
        vec![1u8; 50],
        vec![2u8; 49],
        vec![3u8; 1],
        vec![4u8; 99],
        vec![5u8; 1],
    ];
    let mut offsets = vec![0];
    for r in &data {
        offsets.push(offsets.last().unwrap() + r.len());
    }
    e.append_var(&data.concat(), &offsets).unwrap();
    drop(e);
    let sz = |n: &str| std::fs::metadata(dir.path().join(n)).unwrap().len();
    assert_eq!(sz("0.chunk"), 99);
    assert_eq!(sz("1.chunk"), 1); // 1 + 99 would reach 100
    assert_eq!(sz("2.chunk"), 99);
    assert_eq!(sz("3.chunk"), 1);
    assert_eq!(sz("0.loc"), 48);
    assert_eq!(sz("1.loc"), 32);
    let meta = std::fs::read(dir.path().join("meta.zr")).unwrap();
    assert_eq!(u32::from_le_bytes(meta[6..10].try_into().unwrap()), 3);
    assert_eq!(u32::from_le_bytes(meta[10..14].try_into().unwrap()), 1);
    let e = common::reopen(dir.path(), &cfg);
    let model: Vec<Vec<u8>> = data.to_vec();
    assert_matches(&e, &model);
}

#[test]
fn a_new_store_holds_the_reference_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::create(dir.path(), &CreateOptions::new(Codec::Raw)).unwrap();
    drop(e);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["0.chunk", "meta.zr"]);
    let meta = std::fs::read(dir.path().join("meta.zr")).unwrap();
    let mut expected = vec![0u8; 32];
    expected[..5].copy_from_slice(b"ZREC\x04");
    assert_eq!(meta, expected);
}

#[test]
fn a_raw_append_writes_the_reference_bytes() {
    // Bytes captured from loaderx 1.7.2: RaggedStore(int32, raw) with
    // records arange(3) and the scalar 5.
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::create(dir.path(), &CreateOptions::new(Codec::Raw)).unwrap();
    let payload = [0u8, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0];
    let meta = [
        1u8, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    e.append_paired(&payload, &[0, 12, 16], &meta, &[0, 16, 24])
        .unwrap();
    drop(e);
    let loc = std::fs::read(dir.path().join("0.loc")).unwrap();
    let mut want = Vec::new();
    for (off, len) in [(0u32, 12u32), (12, 16), (28, 4), (32, 8)] {
        want.extend_from_slice(&off.to_le_bytes());
        want.extend_from_slice(&len.to_le_bytes());
        want.extend_from_slice(&len.to_le_bytes());
        want.extend_from_slice(&0u32.to_le_bytes());
    }
    assert_eq!(loc, want);
    let m = std::fs::read(dir.path().join("meta.zr")).unwrap();
    assert_eq!(
        &m[..16],
        b"ZREC\x04\x00\x00\x00\x00\x00\x28\x00\x00\x00\x04\x00"
    );
}

#[test]
fn large_records_round_trip_through_vectored_writes() {
    for codec in CODECS {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::create(dir.path(), &options(codec)).unwrap();
        let recs: Vec<Vec<u8>> = (0..6).map(|t| record(t, 300_000 + t as usize)).collect();
        let mut offsets = vec![0];
        for r in &recs {
            offsets.push(offsets.last().unwrap() + r.len());
        }
        e.append_var(&recs.concat(), &offsets).unwrap();
        assert_matches(&e, &recs);
    }
}

#[test]
fn bad_arguments_are_rejected_before_any_io() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::create(dir.path(), &CreateOptions::new(Codec::Zstd)).unwrap();
    e.append_fixed(&[7u8; 12], 4).unwrap();
    assert!(matches!(
        e.append_fixed(&[0u8; 5], 4),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        e.append_fixed(&[0u8; 5], 0),
        Err(Error::InvalidArgument(_))
    ));
    let err = e.append_var(b"abc", &[0, 1, 1, 3]).unwrap_err();
    assert!(err.to_string().contains("record 1"), "{err}");
    assert!(matches!(
        e.append_var(b"abc", &[0, 2]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        e.append_var(b"abc", &[0, 2, 1, 3]),
        Err(Error::InvalidArgument(_))
    ));
    let mut out = [0u8; 8];
    match e.gather_fixed(&[0, 3], 4, &mut out) {
        Err(Error::IndexOutOfRange {
            index: 3, len: 3, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        e.gather_fixed(&[0], 4, &mut out),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        e.gather_fixed(&[0, 1], 2, &mut out[..4]),
        Err(Error::RecordLength { .. })
    ));
    assert!(matches!(
        e.gather_var(&[0], &mut out, &[0, 5]),
        Err(Error::RecordLength { .. })
    ));
    let mut lens = [0u64; 1];
    assert!(matches!(
        e.record_lengths(&[9], &mut lens, None),
        Err(Error::IndexOutOfRange { .. })
    ));
    assert_eq!(e.len(), 3);
    // Creation arguments.
    let d2 = tempfile::tempdir().unwrap();
    assert!(Engine::create(d2.path(), &CreateOptions::new(Codec::ZstdDict)).is_err());
    let mut o = CreateOptions::new(Codec::Zstd);
    o.dictionary = Some(vec![1, 2, 3]);
    assert!(Engine::create(d2.path(), &o).is_err());
    // A directory holding a file is refused, naming it.
    std::fs::write(d2.path().join("notes.txt"), b"x").unwrap();
    match Engine::create(d2.path(), &CreateOptions::new(Codec::Raw)) {
        Err(Error::ForeignFiles { file, .. }) => assert_eq!(file, "notes.txt"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn record_lengths_report_stored_and_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::create(dir.path(), &CreateOptions::new(Codec::Zstd)).unwrap();
    e.append_var(&[0u8; 1000], &[0, 900, 1000]).unwrap();
    let mut d = [0u64; 2];
    let mut s = [0u64; 2];
    e.record_lengths(&[1, 0], &mut d, Some(&mut s)).unwrap();
    assert_eq!(d, [100, 900]);
    assert!(s[1] < 900 && s[0] > 0, "zeros compress: {s:?}");
    let st = e.stats();
    assert_eq!(st.records, 2);
    assert_eq!(st.live_bytes, s[0] + s[1]);
    assert_eq!(st.chunk_bytes, st.live_bytes);
    assert_eq!(st.reclaimable, 0);
}

#[test]
fn the_level_belongs_to_the_handle_and_can_be_set_after_reopen() {
    // Text-like bytes (words from a small vocabulary), where a high level
    // clearly beats a low one.
    let mut r = Rng(5);
    let words: Vec<Vec<u8>> = (0..300)
        .map(|_| {
            (0..2 + r.next() % 8)
                .map(|_| b'a' + (r.next() % 26) as u8)
                .collect()
        })
        .collect();
    let mut text = Vec::new();
    while text.len() < 64 << 10 {
        text.extend_from_slice(&words[(r.next() % 300) as usize]);
        text.push(b' ');
    }
    let n = text.len();
    for codec in [Codec::Zstd, Codec::ZstdDict] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let stored = |e: &Engine, i: u64| {
            let (mut d, mut s) = ([0u64], [0u64]);
            e.record_lengths(&[i], &mut d, Some(&mut s)).unwrap();
            assert_eq!(d[0], n as u64);
            s[0]
        };
        let mut o = options(codec);
        o.level = Some(1);
        let e = Engine::create(&path, &o).unwrap();
        assert_eq!(e.level(), 1);
        e.append_fixed(&text, n).unwrap();
        let fast = stored(&e, 0);
        drop(e);
        // Reopened: the format's level until told otherwise.
        let mut e = Engine::open(&path, OpenMode::ReadWrite).unwrap();
        assert_eq!(e.level(), codec.default_level());
        e.set_level(19).unwrap();
        assert_eq!(e.level(), 19);
        e.append_fixed(&text, n).unwrap();
        let small = stored(&e, 1);
        assert!(
            small < fast,
            "{codec:?}: level 19 {small} vs level 1 {fast}"
        );
        // The same level gives the same frame again.
        e.set_level(1).unwrap();
        e.append_fixed(&text, n).unwrap();
        assert_eq!(stored(&e, 2), fast, "{codec:?}");
        // A bad level is refused and changes nothing.
        assert!(matches!(e.set_level(1000), Err(Error::InvalidArgument(_))));
        assert_eq!(e.level(), 1);
        assert_matches(&e, &[text.clone(), text.clone(), text.clone()]);
        drop(e);
        let mut ro = Engine::open(&path, OpenMode::ReadOnly).unwrap();
        assert!(matches!(ro.set_level(3), Err(Error::ReadOnly { .. })));
        assert_matches(&ro, &[text.clone(), text.clone(), text.clone()]);
    }
    // A raw store takes no level, at creation or later.
    let dir = tempfile::tempdir().unwrap();
    let mut o = CreateOptions::new(Codec::Raw);
    o.level = Some(3);
    assert!(matches!(
        Engine::create(dir.path().join("a"), &o),
        Err(Error::InvalidArgument(m)) if m.contains("raw")
    ));
    let mut e = Engine::create(dir.path().join("b"), &CreateOptions::new(Codec::Raw)).unwrap();
    assert_eq!(e.level(), 0);
    assert!(matches!(e.set_level(3), Err(Error::InvalidArgument(_))));
}
