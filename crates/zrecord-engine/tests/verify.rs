//! Guards against `verify` missing damage or stopping at the first problem:
//! frames of several records are garbled and two entries are made to share
//! bytes; the report must name every one of those records and no other.

use std::path::Path;
use std::sync::Arc;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, EngineConfig, OpenMode, ReadPath};

fn cfg(v: &SimVfs) -> EngineConfig {
    EngineConfig {
        vfs: Arc::new(v.clone()),
        chunk_capacity: 1 << 16,
        loc_segment_entries: 64,
        flush_bytes: 64,
        read_path: ReadPath::Pread,
    }
}

#[test]
fn verify_reports_every_bad_record() {
    let v = SimVfs::new();
    let dir = Path::new("/s");
    let e = Engine::create_with(dir, &CreateOptions::new(Codec::Zstd), cfg(&v)).unwrap();
    let data: Vec<u8> = (0..400u32).map(|i| (i % 17) as u8).collect();
    let offsets: Vec<usize> = (0..=10).map(|k| k * 40).collect();
    e.append_var(&data, &offsets).unwrap();
    e.sync().unwrap();
    assert!(e.verify().unwrap().is_ok());
    drop(e);
    let loc = |locs: &[u8], i: usize| -> (usize, usize) {
        let b = &locs[i * 16..];
        let off = u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize;
        let phys = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
        (off, phys)
    };
    let mut locs = v.read_file(&dir.join("0.loc")).unwrap();
    let mut chunk = v.read_file(&dir.join("0.chunk")).unwrap();
    for i in [2usize, 7, 9] {
        let (off, phys) = loc(&locs, i);
        for b in &mut chunk[off + 4..off + phys] {
            *b ^= 0x5A;
        }
    }
    // Record 4 now points at record 5's bytes.
    let five: Vec<u8> = locs[5 * 16..6 * 16].to_vec();
    locs[4 * 16..5 * 16].copy_from_slice(&five);
    v.write_file(&dir.join("0.chunk"), &chunk);
    v.write_file(&dir.join("0.loc"), &locs);
    let e = Engine::open_with(dir, OpenMode::ReadOnly, cfg(&v)).unwrap();
    let rep = e.verify().unwrap();
    let mut bad: Vec<u64> = rep.bad.iter().map(|b| b.0).collect();
    bad.dedup();
    assert_eq!(bad, vec![2, 4, 5, 7, 9], "{rep:?}");
    assert_eq!(rep.records, 10);
}

/// Regression: a read-only handle applies a pending delete intent in memory
/// only (the loc files still hold the entries from before the delete), and
/// `verify` compared memory with the loc files, so it reported the swapped
/// records of a sound store as bad. The same holds for a deferred delete
/// its killed process left unfinished (finished from `durable.zr`'s log).
#[test]
fn verify_on_a_read_only_handle_with_a_pending_delete_is_clean() {
    for (durability, pending) in [
        (Durability::EachAppend, "intent.zr"),
        (Durability::AtSync, "durable.zr"),
    ] {
        let v = SimVfs::new();
        let dir = Path::new("/s");
        let opts = CreateOptions {
            durability,
            ..CreateOptions::new(Codec::Raw)
        };
        let mut e = Engine::create_with(dir, &opts, cfg(&v)).unwrap();
        let data: Vec<u8> = (0..60u8).collect();
        e.append_fixed(&data, 6).unwrap();
        e.sync().unwrap();
        v.record(true);
        e.delete(&[1, 4]).unwrap();
        v.record(false);
        // And after its last write (a deferred delete's is its log record).
        let mut snaps = v.take_snapshots();
        snaps.push(v.snapshot());
        drop(e);
        let (mut checked, mut unfinished) = (0, 0);
        for s in snaps {
            // A killed deleter: the intent or log record is written, the
            // entries may not be.
            let image = s.kill_image();
            let Ok(ro) = Engine::open_with(dir, OpenMode::ReadOnly, cfg(&image)) else {
                continue;
            };
            if image.read_file(&dir.join(pending)).is_some() && ro.len() == 8 {
                let rep = ro.verify().unwrap();
                assert!(rep.is_ok(), "{durability:?}: {rep:?}");
                checked += 1;
                let on_disk = image.read_file(&dir.join("meta.zr")).unwrap();
                unfinished += usize::from(on_disk[14..22] == 10u64.to_le_bytes());
            }
        }
        assert!(
            checked > 0 && unfinished > 0,
            "{durability:?}: no crash point with a pending delete ({checked}, {unfinished})"
        );
    }
}

/// Regression: `verify` wrote a record's failed gather into its report as
/// the error's `to_string()`, and an `Io` error's message names only the
/// call and file since its OS error became its `source()`: a record whose
/// read failed was reported as "does not decode: read /s/0.chunk", without
/// why. The report line now carries the whole chain.
#[test]
fn a_record_whose_read_fails_is_reported_with_the_os_error() {
    let v = SimVfs::new();
    let dir = Path::new("/s");
    let e = Engine::create_with(dir, &CreateOptions::new(Codec::Raw), cfg(&v)).unwrap();
    e.append_var(&[7u8; 40], &[0, 40]).unwrap();
    e.sync().unwrap();
    assert!(e.verify().unwrap().is_ok());
    // Fail each I/O call of `verify` in turn, and the ones after it (a
    // fault that stays: verify reads a failed batch again record by
    // record); one of them is the gather's read of record 0.
    let mut seen = false;
    for k in 0..64 {
        v.fail_span(Some(k), 8);
        let rep = e.verify();
        v.fail_at(None);
        let Ok(rep) = rep else { continue };
        for (i, detail) in &rep.bad {
            if detail.starts_with("does not decode") {
                assert_eq!(*i, 0);
                assert!(
                    detail.contains("0.chunk") && detail.contains("injected failure"),
                    "{detail}"
                );
                seen = true;
            }
        }
    }
    assert!(seen, "no injected failure reached the gather");
}

/// `verify` compares the loc files with the entries in memory a block at a
/// time: an entry rewritten under a read-write handle (its table is a
/// copy) is named, in any segment, and only it.
#[test]
fn verify_names_a_loc_entry_that_differs_from_memory_in_any_segment() {
    let v = SimVfs::new();
    let dir = Path::new("/s");
    let e = Engine::create_with(dir, &CreateOptions::new(Codec::Raw), cfg(&v)).unwrap();
    let n = 150usize; // three segments of 64
    let data: Vec<u8> = (0..n * 8).map(|i| (i / 8) as u8).collect();
    let offsets: Vec<usize> = (0..=n).map(|k| k * 8).collect();
    e.append_var(&data, &offsets).unwrap();
    e.sync().unwrap();
    assert!(e.verify().unwrap().is_ok());
    for (seg, slot) in [(0usize, 0usize), (1, 63), (2, 21)] {
        let p = dir.join(format!("{seg}.loc"));
        let orig = v.read_file(&p).unwrap();
        let mut locs = orig.clone();
        // The entry's decoded length, one more.
        locs[slot * 16 + 8] ^= 1;
        v.write_file(&p, &locs);
        let rep = e.verify().unwrap();
        let bad: Vec<u64> = rep.bad.iter().map(|b| b.0).collect();
        assert_eq!(bad, vec![(seg * 64 + slot) as u64], "{rep:?}");
        assert!(rep.bad[0].1.contains(&format!("{seg}.loc")), "{rep:?}");
        v.write_file(&p, &orig);
    }
    assert!(e.verify().unwrap().is_ok());
}
