//! Dictionaries: guards against tiers that do not produce dictionaries of
//! their promised size class, a `zstd_dict` store that is no smaller than a
//! plain zstd one on the small similar records dictionaries exist for,
//! training that ignores part of its source kinds, and codec/dictionary
//! pairings that loaderx refuses being accepted.

use ndarray::Array3;
use zrecord::{
    Codec, CreateOptions, DType, DenseCore, DenseStore, DictSource, DictTier, Error, RaggedStore,
    train_dict,
};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// JSON-ish log lines from a large vocabulary: many distinct, repeated
/// segments, so a dictionary can fill whatever size it is given.
fn log_lines(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut r = Rng(seed | 1);
    let words: Vec<String> = (0..20_000)
        .map(|i| {
            let len = 4 + r.below(9) as usize;
            (0..len)
                .map(|j| (b'a' + ((i * 7 + j * 13 + r.below(26) as usize) % 26) as u8) as char)
                .collect()
        })
        .collect();
    (0..n)
        .map(|i| {
            let mut s = format!("{{\"seq\": {i}, \"level\": \"info\", \"msg\": \"");
            for _ in 0..(8 + r.below(24)) {
                // Zipf-like: small word ids far more common.
                let w = (r.below(20_000) * r.below(20_000) / 20_000) as usize;
                s.push_str(&words[w]);
                s.push(' ');
            }
            s.push_str("\"}");
            s.into_bytes()
        })
        .collect()
}

#[test]
fn tiers_give_dictionaries_of_their_size_class() {
    let lines = log_lines(60_000, 7);
    let total: usize = lines.iter().map(Vec::len).sum();
    assert!(total > 8 << 20, "corpus of {total} bytes");
    let mut last_max = 0;
    for tier in [DictTier::Fast, DictTier::Balanced, DictTier::Max] {
        let d = train_dict(DictSource::records(lines.iter().map(|l| &l[..])), tier).unwrap();
        assert!(
            d.len() <= tier.dict_size() && d.len() > last_max,
            "{}: {} bytes, expected in ({last_max}, {}]",
            tier.name(),
            d.len(),
            tier.dict_size()
        );
        eprintln!("{}: {} bytes", tier.name(), d.len());
        last_max = tier.dict_size();
    }
}

/// 32x32 smooth tiles: a random linear gradient plus a little noise.
fn tiles(n: usize) -> Array3<u8> {
    let mut r = Rng(0x5EED);
    let mut a = Array3::<u8>::zeros((n, 32, 32));
    for mut t in a.outer_iter_mut() {
        let base = r.below(128) as i64;
        let dx = r.below(5) as i64 - 2;
        let dy = r.below(5) as i64 - 2;
        for ((y, x), v) in t.indexed_iter_mut() {
            let noise = if r.below(8) == 0 { 1 } else { 0 };
            *v = (base + 64 + dx * x as i64 + dy * y as i64 + noise).clamp(0, 255) as u8;
        }
    }
    a
}

#[test]
fn a_dictionary_store_of_smooth_tiles_is_clearly_smaller_than_plain_zstd() {
    let dir = tempfile::tempdir().unwrap();
    let a = tiles(3000);
    let plain = DenseStore::<u8>::create(
        dir.path().join("z"),
        &[32, 32],
        &CreateOptions::new(Codec::Zstd),
    )
    .unwrap();
    plain.append(a.view()).unwrap();
    let dict = train_dict(
        DictSource::Array {
            data: a.as_slice().unwrap(),
            record_bytes: 1024,
        },
        DictTier::Balanced,
    )
    .unwrap();
    let with = DenseStore::<u8>::create(
        dir.path().join("d"),
        &[32, 32],
        &CreateOptions::with_dictionary(dict),
    )
    .unwrap();
    with.append(a.view()).unwrap();
    assert!(with.has_dict() && !plain.has_dict());
    let (p, d) = (plain.stats().live_bytes, with.stats().live_bytes);
    let ratio = p as f64 / d as f64;
    eprintln!("tiles: zstd {p} bytes, zstd_dict {d} bytes, ratio {ratio:.2}");
    assert!(
        ratio >= 1.3,
        "zstd {p} bytes, zstd_dict {d} bytes: ratio {ratio:.2}"
    );
    assert_eq!(with.gather(..).unwrap().into_dyn(), a.into_dyn());
}

#[test]
fn stores_train_on_a_strided_sample_of_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let lines = log_lines(3000, 11);
    let r =
        RaggedStore::<u8>::create(dir.path().join("r"), &CreateOptions::new(Codec::Zstd)).unwrap();
    r.append_bytes(lines.iter().map(|l| &l[..])).unwrap();
    let d = train_dict((&r).into(), DictTier::Fast).unwrap();
    assert!(!d.is_empty() && d.len() <= DictTier::Fast.dict_size());

    let a = tiles(500);
    let s = DenseStore::<u8>::create(
        dir.path().join("s"),
        &[32, 32],
        &CreateOptions::new(Codec::Raw),
    )
    .unwrap();
    s.append(a.view()).unwrap();
    let from_store = train_dict((&s).into(), DictTier::Fast).unwrap();
    let from_array = train_dict(
        DictSource::Array {
            data: a.as_slice().unwrap(),
            record_bytes: 1024,
        },
        DictTier::Fast,
    )
    .unwrap();
    // The same records sampled the same way train the same dictionary.
    assert_eq!(from_store, from_array);
}

#[test]
fn training_needs_data() {
    let dir = tempfile::tempdir().unwrap();
    let empty = DenseCore::create(
        dir.path().join("e"),
        &DType::parse("<f4").unwrap(),
        &[4],
        &CreateOptions::new(Codec::Raw),
    )
    .unwrap();
    assert!(matches!(
        train_dict((&empty).into(), DictTier::Fast),
        Err(Error::InvalidArgument { .. })
    ));
    let none: [&[u8]; 0] = [];
    assert!(train_dict(DictSource::records(none), DictTier::Fast).is_err());
    assert!(
        train_dict(
            DictSource::Array {
                data: &[1, 2, 3],
                record_bytes: 2
            },
            DictTier::Fast
        )
        .is_err()
    );
}

#[test]
fn dictionary_and_codec_must_agree() {
    let dir = tempfile::tempdir().unwrap();
    let e = RaggedStore::<u8>::create(dir.path().join("a"), &CreateOptions::new(Codec::ZstdDict))
        .unwrap_err();
    assert!(e.to_string().contains("dictionary"), "{e}");
    for codec in [Codec::Raw, Codec::Zstd] {
        let mut o = CreateOptions::new(codec);
        o.dictionary = Some(vec![0; 100]);
        let e = RaggedStore::<u8>::create(dir.path().join(codec.name()), &o).unwrap_err();
        assert!(e.to_string().contains("zstd_dict"), "{e}");
    }
}
