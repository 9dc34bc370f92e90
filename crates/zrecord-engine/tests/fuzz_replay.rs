//! Replays every committed input of the store fuzz targets
//! (`fuzz/seeds/store_open`, `fuzz/seeds/store_ops`, crash reproducers
//! included) through the same functions the targets call, plus a few hundred
//! generated ones, so a fixed crash stays fixed without nightly or
//! cargo-fuzz. `ZRECORD_WRITE_FUZZ_SEEDS=1` rewrites the generated seeds.

use std::path::{Path, PathBuf};
use zrecord_engine::sim::{SimRng, SimVfs};
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, fuzzing};

fn seed_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target)
}

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let dir = seed_dir(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    out.sort();
    out
}

/// A valid store, encoded as a `store_open` input; `killed`: its writer
/// died with deferred appends after the last sync, leaving `durable.zr`
/// (their pending appends record).
fn valid_image(codec: Codec, killed: bool) -> Vec<u8> {
    let v = SimVfs::new();
    let dir = Path::new("/s");
    let cfg = fuzzing::cfg(&v);
    let mut e = Engine::create_with(dir, &CreateOptions::new(codec), cfg).unwrap();
    let recs: Vec<u8> = (0..120u32).map(|i| (i * 7 % 13) as u8).collect();
    let offsets: Vec<usize> = (0..=12).map(|k| k * 10).collect();
    e.append_var(&recs, &offsets).unwrap();
    e.delete(&[3, 5]).unwrap();
    e.sync().unwrap();
    if killed {
        e.append_var(&recs[..30], &[0, 7, 30]).unwrap();
        std::mem::forget(e); // no destructor: the marker stays
        assert!(v.read_file(&dir.join("durable.zr")).is_some());
    } else {
        drop(e);
    }
    fuzzing::encode_image(&v, dir)
}

/// A store whose compaction stopped (an I/O call failed) with a durable
/// `intent.zr` of kind 3 (a run of moved records), encoded as a
/// `store_open` input: an open must replay it.
fn pending_moves_image() -> Vec<u8> {
    for k in 0.. {
        let v = SimVfs::new();
        let dir = Path::new("/s");
        let cfg = fuzzing::cfg(&v);
        let mut e = Engine::create_with(dir, &CreateOptions::new(Codec::Zstd), cfg).unwrap();
        // 16 records: the two loc segments an input can hold.
        let recs: Vec<u8> = (0..160u32).map(|i| (i * 7 % 13) as u8).collect();
        let offsets: Vec<usize> = (0..=16).map(|k| k * 10).collect();
        e.append_var(&recs, &offsets).unwrap();
        e.delete(&[1]).unwrap();
        e.sync().unwrap();
        v.fail_span(Some(k), u64::MAX / 2);
        let done = e.compact().is_ok();
        v.fail_span(None, 0);
        std::mem::forget(e); // a failed compaction poisoned it; no drop-time sync
        let intent = v.read_file(&dir.join("intent.zr"));
        if intent.as_ref().is_some_and(|b| b.len() > 5 && b[5] == 3) {
            return fuzzing::encode_image(&v, dir);
        }
        assert!(!done, "no I/O call of the compaction left a pending move");
    }
    unreachable!("the loop returns or fails")
}

/// A deferring writer killed after two deferred deletes and an append (a
/// `durable.zr` with a delete log), encoded as a `store_open` input.
fn deferred_deletes_image() -> Vec<u8> {
    let v = SimVfs::new();
    let dir = Path::new("/s");
    let opts = CreateOptions {
        durability: Durability::AtSync,
        ..CreateOptions::new(Codec::Zstd)
    };
    let mut e = Engine::create_with(dir, &opts, fuzzing::cfg(&v)).unwrap();
    let recs: Vec<u8> = (0..150u32).map(|i| (i * 5 % 11) as u8).collect();
    let offsets: Vec<usize> = (0..=15).map(|k| k * 10).collect();
    e.append_var(&recs, &offsets).unwrap();
    e.sync().unwrap();
    e.delete(&[1]).unwrap();
    e.delete(&[3, 9]).unwrap();
    e.append_var(&[7; 12], &[0, 12]).unwrap();
    let img = v.snapshot().kill_image();
    std::mem::forget(e);
    let marker = img.read_file(&dir.join("durable.zr")).unwrap();
    assert!(marker.len() > 100, "the marker holds a delete log");
    fuzzing::encode_image(&img, dir)
}

/// A store whose compaction failed at a loc segment's fsync, which leaves
/// `writeback.zr` naming the segment, encoded as a `store_open` input: a
/// read-write open on the same (simulated) boot rewrites the segment.
fn lost_writeback_image() -> Vec<u8> {
    for k in 0..400 {
        let v = SimVfs::new();
        let dir = Path::new("/s");
        let mut e =
            Engine::create_with(dir, &CreateOptions::new(Codec::Zstd), fuzzing::cfg(&v)).unwrap();
        let recs: Vec<u8> = (0..160u32).map(|i| (i * 3 % 17) as u8).collect();
        let offsets: Vec<usize> = (0..=16).map(|k| k * 10).collect();
        e.append_var(&recs, &offsets).unwrap();
        e.delete(&[0, 2, 4, 6]).unwrap();
        e.sync().unwrap();
        v.fail_at(Some(k));
        let r = e.compact();
        v.fail_at(None);
        std::mem::forget(e); // poisoned: no drop-time sync
        if matches!(&r, Err(zrecord_engine::Error::Io { path, op: "sync", .. })
            if path.extension().is_some_and(|x| x == "loc"))
        {
            assert!(v.read_file(&dir.join("writeback.zr")).is_some());
            return fuzzing::encode_image(&v, dir);
        }
    }
    panic!("no compaction call was a loc segment's fsync")
}

fn maybe_write(target: &str, name: &str, data: &[u8]) {
    if std::env::var("ZRECORD_WRITE_FUZZ_SEEDS").is_ok() {
        std::fs::create_dir_all(seed_dir(target)).unwrap();
        std::fs::write(seed_dir(target).join(name), data).unwrap();
    }
}

#[test]
fn store_open_corpus_replays_without_panic() {
    for (codec, killed, name) in [
        (Codec::Raw, false, "valid_raw.bin"),
        (Codec::Zstd, false, "valid_zstd.bin"),
        (Codec::Zstd, true, "valid_zstd_marker.bin"),
    ] {
        let img = valid_image(codec, killed);
        maybe_write("store_open", name, &img);
        assert!(
            fuzzing::store_open(&img),
            "{codec:?}: the valid image must open"
        );
    }
    let img = pending_moves_image();
    maybe_write("store_open", "pending_moves.bin", &img);
    assert!(
        fuzzing::store_open(&img),
        "the image with a pending move intent must open"
    );
    let img = deferred_deletes_image();
    maybe_write("store_open", "deferred_deletes.bin", &img);
    assert!(
        fuzzing::store_open(&img),
        "the image with a delete log must open"
    );
    let img = lost_writeback_image();
    maybe_write("store_open", "lost_writeback.bin", &img);
    assert!(
        fuzzing::store_open(&img),
        "the image with a lost loc write-back must open"
    );
    let all = inputs("store_open");
    assert!(all.len() >= 5);
    for data in &all {
        let _ = fuzzing::store_open(data);
        // And every single-byte flip of the seeds' first 200 bytes.
        for i in 0..data.len().min(200) {
            let mut d = data.clone();
            d[i] ^= 0xA5;
            let _ = fuzzing::store_open(&d);
        }
    }
}

#[test]
fn store_ops_corpus_and_random_scripts_hold_the_crash_promise() {
    let mut rng = SimRng(77);
    let mut generated = Vec::new();
    for k in 0..300 {
        let n = 4 + rng.below(60) as usize;
        let d: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        if k < 4 {
            maybe_write("store_ops", &format!("script{k}.bin"), &d);
        }
        generated.push(d);
    }
    let all = inputs("store_ops");
    assert!(!all.is_empty());
    for data in all.iter().chain(&generated) {
        fuzzing::store_ops(data);
    }
}
