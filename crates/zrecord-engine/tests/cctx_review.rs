//! Review probes for pooled zstd compression contexts: the frames an
//! append writes are byte for byte those of a brand-new
//! `zstd::bulk::Compressor`, whichever path compressed them (inline or on
//! rayon's pool), after the handle's contexts compressed other sizes, from
//! many threads at once, from rayon pool threads, and after `set_level`.

mod common;
use common::*;
use rayon::prelude::*;
use std::path::Path;
use zrecord_engine::{Codec, CreateOptions, Engine, EngineConfig, ReadPath};

fn fresh(codec: Codec, level: i32, dict: &[u8], r: &[u8]) -> Vec<u8> {
    match codec {
        Codec::ZstdDict => {
            let d = zstd::dict::EncoderDictionary::copy(dict, level);
            zstd::bulk::Compressor::with_prepared_dictionary(&d)
                .unwrap()
                .compress(r)
                .unwrap()
        }
        _ => zstd::bulk::Compressor::new(level)
            .unwrap()
            .compress(r)
            .unwrap(),
    }
}

fn cfg() -> EngineConfig {
    EngineConfig {
        chunk_capacity: 1 << 30,
        read_path: ReadPath::Pread,
        ..EngineConfig::default()
    }
}

fn chunk0(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("0.chunk")).unwrap()
}

fn append_batch(e: &Engine, recs: &[Vec<u8>]) {
    let mut off = vec![0];
    for r in recs {
        off.push(off.last().unwrap() + r.len());
    }
    e.append_var(&recs.concat(), &off).unwrap();
}

/// Batches of one record, a few small ones (inline) and many or big ones
/// (the pool), interleaved so that each path's contexts have compressed
/// other sizes before: the chunk is exactly the brand-new frames, in order.
#[test]
fn appended_frames_are_those_of_a_brand_new_compressor_on_every_path() {
    for (codec, level) in [
        (Codec::Zstd, -5),
        (Codec::Zstd, 1),
        (Codec::Zstd, 3),
        (Codec::Zstd, 7),
        (Codec::Zstd, 12),
        (Codec::ZstdDict, 3),
        (Codec::ZstdDict, 9),
        (Codec::ZstdDict, 19),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = options(codec);
        opts.level = Some(level);
        let dict = opts.dictionary.clone().unwrap_or_default();
        let e = Engine::create_with(dir.path().join("s"), &opts, cfg()).unwrap();
        let mut want = Vec::new();
        let mut model = Vec::new();
        let shapes: [(usize, usize); 6] = [
            (1, 4096),
            (300, 700),
            (3, 100),
            (8, 90_000),
            (1, 1),
            (64, 4096),
        ];
        for (round, &(n, len)) in shapes.iter().cycle().take(12).enumerate() {
            let recs: Vec<Vec<u8>> = (0..n)
                .map(|i| record((round * 1000 + i) as u64, len + i % 7))
                .collect();
            for r in &recs {
                want.extend(fresh(codec, level, &dict, r));
            }
            append_batch(&e, &recs);
            model.extend(recs);
        }
        e.sync().unwrap();
        assert_matches(&e, &model);
        assert!(
            chunk0(&dir.path().join("s")) == want,
            "{codec:?} level {level}: frames differ from brand-new ones"
        );
    }
}

/// Eight threads append to one handle at once (and from rayon pool
/// threads): every record reads back, and the chunk holds exactly the
/// bytes of the brand-new frames (in the order the appends committed).
#[test]
fn concurrent_appends_from_threads_and_pool_threads_write_brand_new_frames() {
    for codec in [Codec::Zstd, Codec::ZstdDict] {
        let dir = tempfile::tempdir().unwrap();
        let opts: CreateOptions = options(codec);
        let dict = opts.dictionary.clone().unwrap_or_default();
        let level = opts.level.unwrap_or(codec.default_level());
        let e = Engine::create_with(dir.path().join("s"), &opts, cfg()).unwrap();
        let batch = |t: usize, k: usize| -> Vec<Vec<u8>> {
            let n = [1, 2, 5, 40][k % 4];
            (0..n)
                .map(|i| {
                    record(
                        (t * 100_000 + k * 100 + i) as u64,
                        100 + (t * 977 + k * 131 + i * 17) % 9000,
                    )
                })
                .collect()
        };
        std::thread::scope(|s| {
            for t in 0..8 {
                let e = &e;
                s.spawn(move || {
                    for k in 0..24 {
                        append_batch(e, &batch(t, k));
                    }
                });
            }
        });
        (8..24usize).into_par_iter().for_each(|t| {
            for k in 0..6 {
                append_batch(&e, &batch(t, k));
            }
        });
        e.sync().unwrap();
        let all: Vec<Vec<u8>> = (0..8)
            .flat_map(|t| (0..24).flat_map(move |k| batch(t, k)))
            .chain((8..24).flat_map(|t| (0..6).flat_map(move |k| batch(t, k))))
            .collect();
        assert_eq!(e.len(), all.len() as u64);
        // Every record in commit order; the chunk must be their brand-new
        // frames back to back.
        let idx: Vec<u64> = (0..e.len()).collect();
        let (mut offs, mut buf) = (Vec::new(), Vec::new());
        e.gather_packed(&idx, &mut offs, |o| {
            buf.resize(o[o.len() - 1], 0);
            Ok::<_, zrecord_engine::Error>(&mut buf[..])
        })
        .unwrap();
        let read: Vec<Vec<u8>> = offs.windows(2).map(|w| buf[w[0]..w[1]].to_vec()).collect();
        let want: Vec<u8> = read
            .iter()
            .flat_map(|r| fresh(codec, level, &dict, r))
            .collect();
        assert!(
            chunk0(&dir.path().join("s")) == want,
            "{codec:?}: frames differ"
        );
        let (mut got, mut all) = (read, all);
        got.sort();
        all.sort();
        assert!(got == all, "{codec:?}: the records read back");
    }
}

/// `set_level` after appends: later frames are the new level's.
#[test]
fn set_level_after_appends_writes_frames_of_the_new_level() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = Engine::create_with(dir.path().join("s"), &options(Codec::Zstd), cfg()).unwrap();
    let a: Vec<Vec<u8>> = (0..40).map(|i| record(i, 5000)).collect();
    append_batch(&e, &a);
    append_batch(&e, &a[..1]);
    e.set_level(19).unwrap();
    append_batch(&e, &a[..1]);
    append_batch(&e, &a[..30]);
    e.sync().unwrap();
    let mut want = Vec::new();
    for r in a.iter().chain(&a[..1]) {
        want.extend(fresh(Codec::Zstd, 3, &[], r));
    }
    for r in a[..1].iter().chain(&a[..30]) {
        want.extend(fresh(Codec::Zstd, 19, &[], r));
    }
    assert!(chunk0(&dir.path().join("s")) == want);
}
