//! Guards the rule that a bad argument to the engine gets an error naming
//! what is wrong, never a crash: the engine's config check once printed the
//! whole config's `Debug` ("engine config out of range: EngineConfig { vfs:
//! ... }"), and dictionary training on a few one-byte samples killed the
//! process inside zstd.

use zrecord_engine::{Codec, CreateOptions, Engine, EngineConfig, Error, train_dictionary};

/// Regression: an out-of-range field was reported as the whole config.
#[test]
fn an_out_of_range_engine_config_names_the_field_and_its_value() {
    type Spoil = fn(&mut EngineConfig);
    let cases: [(&str, Spoil); 3] = [
        ("chunk_capacity is 1", |c| c.chunk_capacity = 1),
        ("loc_segment_entries is 0", |c| c.loc_segment_entries = 0),
        ("flush_bytes is 0", |c| c.flush_bytes = 0),
    ];
    for (want, spoil) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = EngineConfig::default();
        spoil(&mut cfg);
        let Err(e) = Engine::create_with(dir.path(), &CreateOptions::new(Codec::Raw), cfg) else {
            panic!("the config is refused");
        };
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        let m = e.to_string();
        assert!(m.contains(want), "{m}");
        assert!(!m.contains("vfs"), "{m}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{m}");
    }
}

/// Regression: zstd 1.5.7 trains on the first 3/4 of the samples after
/// checking only their total size; under 8 bytes there it divided by zero
/// (10 one-byte samples: SIGFPE) or read out of bounds (8 or 9: SIGSEGV),
/// killing the process (the Python interpreter with it).
#[test]
fn training_on_samples_too_small_for_zstd_errs_instead_of_crashing() {
    let cases: [&[usize]; 5] = [
        &[1; 8],
        &[1; 9],
        &[1; 10],
        &[1, 1, 1, 1, 1, 1, 100, 100],
        &[0, 0, 0, 0, 0, 0, 0, 8, 8, 8],
    ];
    for sizes in cases {
        let total: usize = sizes.iter().sum();
        let samples: Vec<u8> = (0..total).map(|i| (i * 7 % 13) as u8).collect();
        for max_size in [256, 32 << 10] {
            let e = train_dictionary(&samples, sizes, max_size).unwrap_err();
            assert!(
                matches!(e, Error::DictionaryTraining { samples, bytes, .. }
                    if samples == sizes.len() && bytes == total),
                "{sizes:?}: {e:?}"
            );
            let m = e.to_string();
            assert!(m.contains("the part zstd trains on"), "{sizes:?}: {m}");
        }
    }
    // What zstd refuses itself still says so.
    let m = train_dictionary(&[7; 4], &[1; 4], 256)
        .unwrap_err()
        .to_string();
    assert!(m.contains("zstd says: "), "{m}");
}

/// Regression: a group past the end was reported as "record index 5 is out
/// of range for a store of 1 records" for a store of 3 records in groups of
/// 3: a group number called a record index, the group count called the
/// store's length.
#[test]
fn a_group_past_the_end_is_named_as_a_group_with_the_store_length() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = Engine::create(dir.path(), &CreateOptions::new(Codec::Raw)).unwrap();
    e.append_fixed(&[7u8; 12], 4).unwrap();
    let m = e.delete_groups(&[5], 3).unwrap_err().to_string();
    assert!(m.contains("group 5"), "{m}");
    assert!(m.contains("3 records make 1 group of 3"), "{m}");
    let m = e.delete(&[5]).unwrap_err().to_string();
    assert_eq!(
        m,
        format!(
            "{}: record index 5 is out of range for 3 records",
            dir.path().display()
        )
    );
    assert_eq!(e.len(), 3);
}

/// Regression: an index past the end named neither the store ("record
/// index 1 is out of range for a store of 1 records": which store, of the
/// several a loader reads?) nor counted one record as one.
#[test]
fn an_index_past_the_end_names_the_store_and_counts_one_record_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = Engine::create(dir.path(), &CreateOptions::new(Codec::Raw)).unwrap();
    e.append_fixed(&[7u8; 4], 4).unwrap();
    let want = format!(
        "{}: record index 1 is out of range for 1 record",
        dir.path().display()
    );
    let mut dst = [0u8; 4];
    let err = e.gather_fixed(&[1], 4, &mut dst).unwrap_err();
    assert!(
        matches!(&err, Error::IndexOutOfRange { path, index: 1, len: 1 } if path == dir.path()),
        "{err:?}"
    );
    assert_eq!(err.to_string(), want);
    assert_eq!(e.delete(&[1]).unwrap_err().to_string(), want);
    e.append_fixed(&[7u8; 4], 4).unwrap();
    let m = e.delete_groups(&[1], 2).unwrap_err().to_string();
    assert!(m.contains("the store's 2 records make 1 group of 2"), "{m}");
}

/// Regression: "compression level 1000 is outside zstd's range" did not
/// say what the range is.
#[test]
fn a_level_outside_zstds_range_names_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = Engine::create(dir.path(), &CreateOptions::new(Codec::Zstd)).unwrap();
    let range = zstd_range();
    for level in [1000, i32::MIN] {
        let m = e.set_level(level).unwrap_err().to_string();
        assert!(m.contains(&format!("{level}")), "{m}");
        assert!(m.contains(&range), "{m}");
    }
    let opts = CreateOptions {
        level: Some(99),
        ..CreateOptions::new(Codec::Zstd)
    };
    let Err(e) = Engine::create(dir.path().join("s"), &opts) else {
        panic!("level 99 is refused");
    };
    let m = e.to_string();
    assert!(m.contains("99") && m.contains(&range), "{m}");
}

/// zstd's level range as the message spells it.
fn zstd_range() -> String {
    let r = zstd::compression_level_range();
    format!("{}..={}", r.start(), r.end())
}

/// Regression: a layer above that finds a record's entry damaged (a dense
/// store's record of the wrong length) said "its entry in the .loc file",
/// not which of the store's segment files holds it: `RecordLength` names it.
#[test]
fn a_record_length_mismatch_names_the_loc_segment_of_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        loc_segment_entries: 2,
        ..EngineConfig::default()
    };
    let e = Engine::create_with(dir.path(), &CreateOptions::new(Codec::Raw), cfg).unwrap();
    e.append_fixed(&[7u8; 20], 4).unwrap();
    let mut out = [0u8; 8];
    for (record, want) in [(0, "0.loc"), (1, "0.loc"), (3, "1.loc"), (4, "2.loc")] {
        match e.gather_fixed(&[record], 8, &mut out) {
            Err(Error::RecordLength { record: r, loc, .. }) if r == record => {
                assert_eq!(loc, want, "record {record}")
            }
            other => panic!("record {record}: {other:?}"),
        }
        match e.gather_var(&[record], &mut out, &[0, 6]) {
            Err(Error::RecordLength { loc, .. }) => assert_eq!(loc, want, "record {record}"),
            other => panic!("record {record}: {other:?}"),
        }
    }
}
