//! Guards the rule that a bad argument to the engine gets an error naming
//! the field at fault: the engine's config check once printed the whole
//! config's `Debug` ("engine config out of range: EngineConfig { vfs: ...
//! }"), leaving the reader to find the bad field.

use zrecord_engine::{Codec, CreateOptions, Engine, EngineConfig, Error};

/// Regression: an out-of-range field was reported as the whole config.
#[test]
fn an_out_of_range_engine_config_names_the_field_and_its_value() {
    let cases: [(&str, fn(&mut EngineConfig)); 3] = [
        ("chunk_capacity is 1", |c| c.chunk_capacity = 1),
        ("loc_segment_entries is 0", |c| c.loc_segment_entries = 0),
        ("flush_bytes is 0", |c| c.flush_bytes = 0),
    ];
    for (want, spoil) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = EngineConfig::default();
        spoil(&mut cfg);
        let e = Engine::create_with(dir.path(), &CreateOptions::new(Codec::Raw), cfg)
            .err()
            .expect("the config is refused");
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        let m = e.to_string();
        assert!(m.contains(want), "{m}");
        assert!(!m.contains("vfs"), "{m}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{m}");
    }
}
