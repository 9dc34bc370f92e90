//! Guards the read-only handle's mapped location table: a read-only open
//! must not copy the table (16 B per record in every process that opens the
//! store), must read exactly what a copied table reads (across loc segments,
//! over a pending delete intent, after a durable-marker rollback), and must
//! not trust an entry that another process rewrote under the mapping.

mod common;
use common::Rng;
use common::workload::read_all;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{
    Codec, CreateOptions, Durability, Engine, EngineConfig, Error, OpenMode, ReadPath,
};

/// Counts the bytes the current thread holds and its peak, so a test can
/// see what one call allocates (tests run on threads of their own).
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = HELD.try_with(|h| {
        let now = h.get() + delta;
        h.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// bookkeeping touches only const-initialized thread-locals without
// destructors, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size() as isize);
        // SAFETY: the caller's layout, as GlobalAlloc requires.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(-(l.size() as isize));
        // SAFETY: `p` came from `alloc` above with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new as isize - l.size() as isize);
        // SAFETY: as `dealloc` and `alloc`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// (bytes still held after `f`, peak above the start during `f`).
fn allocations<T>(f: impl FnOnce() -> T) -> (T, isize, isize) {
    let start = HELD.with(|h| h.get());
    PEAK.with(|p| p.set(start));
    let r = f();
    (
        r,
        HELD.with(|h| h.get()) - start,
        PEAK.with(|p| p.get()) - start,
    )
}

/// Regression: every read-only open copied the whole location table into
/// memory (and read it through a 4 MiB buffer), 16 B per record in every
/// process, where the reference format's reader leaves it in the page
/// cache. A read-write handle still copies it (it edits it), which shows
/// the counter sees such a table.
#[test]
fn a_read_only_open_allocates_no_table() {
    const N: usize = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let e = Engine::create(&path, &CreateOptions::new(Codec::Raw)).unwrap();
    let data: Vec<u8> = (0..N * 4).map(|i| i as u8).collect();
    e.append_fixed(&data, 4).unwrap();
    drop(e);
    let table = (N * 16) as isize;
    let (rw, held, _) = allocations(|| Engine::open(&path, OpenMode::ReadWrite).unwrap());
    assert!(held >= table, "a read-write open holds {held} B");
    drop(rw);
    let (ro, held, peak) = allocations(|| Engine::open(&path, OpenMode::ReadOnly).unwrap());
    assert!(
        held < table / 16 && peak < table / 16,
        "a read-only open of {N} records holds {held} B (peak {peak} B); its table is {table} B"
    );
    let mut out = [0u8; 8];
    ro.gather_fixed(&[7, (N - 1) as u64], 4, &mut out).unwrap();
    assert_eq!(out, [28, 29, 30, 31, 252, 253, 254, 255]);
}

fn tiny(seg: u64, read_path: ReadPath) -> EngineConfig {
    EngineConfig {
        chunk_capacity: 300,
        loc_segment_entries: seg,
        flush_bytes: 64,
        read_path,
        ..EngineConfig::default()
    }
}

/// Gathers (fixed, var, packed), lengths, stats and verify through a
/// mapped table agree with the read-write handle's copy, over many loc
/// segments of a power-of-two size (shift and mask) and of another
/// (division), on both chunk read paths, for every codec.
#[test]
fn gathers_through_a_mapped_table_cross_loc_segments() {
    for codec in common::CODECS {
        for seg in [4u64, 5] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s");
            let cfg = tiny(seg, ReadPath::Mmap);
            let e = Engine::create_with(&path, &common::options(codec), cfg.clone()).unwrap();
            let model: Vec<Vec<u8>> = (0..53u64)
                .map(|t| common::record(t, 1 + (t as usize * 13) % 70))
                .collect();
            for r in &model {
                e.append_var(r, &[0, r.len()]).unwrap();
            }
            let stats = e.stats();
            drop(e);
            for rp in [ReadPath::Mmap, ReadPath::Pread] {
                let what = format!("{codec:?}, {seg} entries per segment, {rp:?}");
                let ro = Engine::open_with(&path, OpenMode::ReadOnly, tiny(seg, rp)).unwrap();
                // One mapping per segment, no entry: a copy would be 53 x 16 B.
                assert!(
                    ro.table_heap_bytes() < 53 * 8,
                    "{what}: the table was copied"
                );
                common::assert_matches(&ro, &model);
                assert_eq!(ro.stats(), stats, "{what}");
                assert!(ro.verify().unwrap().is_ok(), "{what}");
                let mut rng = Rng(seg);
                let idx: Vec<u64> = (0..200).map(|_| rng.below(53)).collect();
                let (mut offs, mut buf) = (Vec::new(), Vec::new());
                ro.gather_packed(&idx, &mut offs, |o| {
                    buf.resize(o[o.len() - 1], 0);
                    Ok::<_, Error>(&mut buf[..])
                })
                .unwrap();
                for (k, &i) in idx.iter().enumerate() {
                    assert_eq!(buf[offs[k]..offs[k + 1]], model[i as usize], "{what}: {i}");
                }
                let r = ro.gather_packed(&[53], &mut offs, |_| Ok::<_, Error>(&mut buf[..]));
                assert!(
                    matches!(
                        r,
                        Err(Error::IndexOutOfRange {
                            index: 53,
                            len: 53,
                            ..
                        })
                    ),
                    "{what}: {r:?}"
                );
            }
        }
    }
}

/// A read-only handle over every crash point of a delete (a pending delete
/// intent is applied in memory, over the mapping) and of deferred appends
/// cut by a power loss (the marker rolls the length back) reads, verifies
/// and refuses exactly as one whose file system cannot map, which copies
/// the table as every open did before.
#[test]
fn a_mapped_table_reads_as_a_copied_one_over_pending_intents_and_rollbacks() {
    let dir = Path::new("/s");
    let v = SimVfs::new();
    let opts = CreateOptions {
        durability: Durability::AtSync,
        ..CreateOptions::new(Codec::Zstd)
    };
    let mut e = Engine::create_with(dir, &opts, common::sim(&v)).unwrap();
    let recs: Vec<Vec<u8>> = (0..11u64).map(|t| common::record(t, 20)).collect();
    for r in &recs[..7] {
        e.append_var(r, &[0, r.len()]).unwrap();
    }
    e.sync().unwrap();
    v.record(true);
    // Deferred appends (a marker), a deferred delete across segments (its
    // log), then a durable one (an intent).
    for r in &recs[7..] {
        e.append_var(r, &[0, r.len()]).unwrap();
    }
    e.delete(&[0, 3, 5]).unwrap();
    e.set_durability(Durability::EachAppend).unwrap();
    e.delete(&[1, 6]).unwrap();
    v.record(false);
    drop(e);
    let (mut intents, mut rollbacks, mut mapped, mut logged) = (0, 0, 0, 0);
    for s in v.take_snapshots() {
        for image in [s.kill_image(), s.crash_image(1), s.crash_image(2)] {
            let open = || Engine::open_with(dir, OpenMode::ReadOnly, common::sim(&image));
            let look = |e: &Engine| {
                let r = e.verify().unwrap();
                (read_all(e).unwrap(), e.stats(), r.is_ok(), r.bad)
            };
            let got = open().map(|e| {
                mapped += usize::from(e.table_heap_bytes() < 16 * e.len() as usize);
                look(&e)
            });
            image.set_maps(false);
            let want = open().map(|e| {
                assert!(e.table_heap_bytes() >= 16 * e.len() as usize);
                look(&e)
            });
            image.set_maps(true);
            match (&got, &want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w),
                (Err(g), Err(w)) => assert_eq!(g.to_string(), w.to_string()),
                _ => panic!("mapped {got:?}, copied {want:?}"),
            }
            if got.is_ok() && image.read_file(&dir.join("intent.zr")).is_some() {
                intents += 1;
            }
            let rolled =
                common::has_marker(&image, dir) && got.as_ref().is_ok_and(|g| g.0.len() == 7);
            rollbacks += usize::from(rolled);
            let deferred_delete =
                common::has_marker(&image, dir) && got.as_ref().is_ok_and(|g| g.0.len() == 8);
            logged += usize::from(deferred_delete);
        }
    }
    assert!(
        mapped > 0 && intents > 0 && rollbacks > 0 && logged > 0,
        "{mapped} {intents} {rollbacks} {logged}"
    );
}

/// Overwrites entry `i` of `0.loc` in place, as a process ignoring the
/// store's lock would.
fn rewrite_entry(path: &Path, i: u64, offset: u32, phys: u32, logic: u32, chunk: u32) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("0.loc"))
        .unwrap();
    let mut b = [0u8; 16];
    for (k, x) in [offset, phys, logic, chunk].into_iter().enumerate() {
        b[k * 4..k * 4 + 4].copy_from_slice(&x.to_le_bytes());
    }
    f.write_all_at(&b, i * 16).unwrap();
}

/// An entry rewritten under a read-only handle's mapping after the open
/// validated it (a process that ignores the lock) so that a read would
/// leave its chunk is a `Corrupted` error naming the loc file and record
/// when a gather or a length lookup reads it, never a panic or a read
/// outside the chunk: a chunk that does not exist, bytes past the
/// committed end (or past 4 GiB), a raw record whose stored and decoded
/// lengths differ.
#[test]
fn an_entry_rewritten_under_the_mapping_is_an_error_not_a_panic() {
    for rp in [ReadPath::Mmap, ReadPath::Pread] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let e = Engine::create(&path, &CreateOptions::new(Codec::Raw)).unwrap();
        e.append_fixed(&[9u8; 80], 8).unwrap();
        drop(e);
        let cfg = EngineConfig {
            read_path: rp,
            ..EngineConfig::default()
        };
        let ro = Engine::open_with(&path, OpenMode::ReadOnly, cfg).unwrap();
        rewrite_entry(&path, 1, 0, 8, 8, 3);
        rewrite_entry(&path, 2, 76, 8, 8, 0);
        rewrite_entry(&path, 3, u32::MAX - 4, 8, 8, 0);
        rewrite_entry(&path, 4, 0, 4, 8, 0);
        for i in 1..=4u64 {
            let mut out = [0u8; 16];
            let r = ro.gather_fixed(&[0, i], 8, &mut out);
            assert!(
                matches!(&r, Err(Error::Corrupted { file, record: Some(j), .. })
                    if *j == i && file.ends_with("0.loc")),
                "{rp:?} record {i}: {r:?}"
            );
            let mut lens = [0u64; 1];
            let r = ro.record_lengths(&[i], &mut lens, None);
            assert!(matches!(r, Err(Error::Corrupted { .. })), "{r:?}");
        }
        // An empty record: read as such, not past anything.
        rewrite_entry(&path, 5, 0, 0, 0, 0);
        let mut out = [0u8; 8];
        let r = ro.gather_fixed(&[5], 8, &mut out);
        assert!(matches!(r, Err(Error::RecordLength { .. })), "{r:?}");
        // A rewrite that is still sound is read as it now stands.
        rewrite_entry(&path, 6, 0, 8, 8, 0);
        let mut out = [0u8; 16];
        ro.gather_fixed(&[6, 9], 8, &mut out).unwrap();
        assert_eq!(out, [9u8; 16]);
    }
}

/// A compressed record's decoded length rewritten past the format's 2^31
/// limit under the mapping is refused before anything is sized by it (the
/// variable-length gather allocates what `record_lengths` reports).
#[test]
fn a_decoded_length_rewritten_past_the_limit_is_an_error() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let e = Engine::create(&path, &CreateOptions::new(Codec::Zstd)).unwrap();
    e.append_fixed(&[7u8; 64], 16).unwrap();
    drop(e);
    let ro = Engine::open(&path, OpenMode::ReadOnly).unwrap();
    let mut lens = [0u64; 1];
    ro.record_lengths(&[2], &mut lens, None).unwrap();
    assert_eq!(lens, [16]);
    let loc = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join("0.loc"))
        .unwrap();
    let mut b = [0u8; 16];
    loc.read_exact_at(&mut b, 2 * 16).unwrap();
    b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    loc.write_all_at(&b, 2 * 16).unwrap();
    let r = ro.record_lengths(&[2], &mut lens, None);
    assert!(
        matches!(
            &r,
            Err(Error::Corrupted {
                record: Some(2),
                ..
            })
        ),
        "{r:?}"
    );
}
