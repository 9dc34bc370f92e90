//! Helpers shared by the integration tests: deterministic data, tiny
//! capacities, and an in-memory model of a store.
#![allow(dead_code)]

use std::path::Path;
use zrecord_engine::{Codec, CreateOptions, Engine, EngineConfig, OpenMode, ReadPath};

/// A small deterministic generator (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A compressible record: a repeating pattern seeded by `tag`.
pub fn record(tag: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(tag);
    let alphabet: Vec<u8> = (0..4).map(|_| r.next() as u8).collect();
    (0..len)
        .map(|i| alphabet[(i / 3 + r.next().is_multiple_of(7) as usize) % 4] ^ (tag as u8))
        .collect()
}

/// Tiny capacities: chunk rollover and loc segments after a few records.
pub fn tiny(read_path: ReadPath) -> EngineConfig {
    EngineConfig {
        chunk_capacity: 300,
        loc_segment_entries: 4,
        flush_bytes: 64,
        read_path,
        ..EngineConfig::default()
    }
}

/// Tiny capacities on a simulated disk, positional reads (the crash, fault
/// and hostile-bytes tests).
pub fn sim(vfs: &zrecord_engine::sim::SimVfs) -> EngineConfig {
    EngineConfig {
        vfs: std::sync::Arc::new(vfs.clone()),
        chunk_capacity: 160,
        loc_segment_entries: 4,
        flush_bytes: 24,
        read_path: ReadPath::Pread,
    }
}

/// A dictionary trained on records like the ones [`record`] makes.
pub fn dictionary() -> Vec<u8> {
    let mut samples = Vec::new();
    let mut sizes = Vec::new();
    for t in 0..300 {
        let r = record(t, 64 + (t as usize % 50));
        sizes.push(r.len());
        samples.extend_from_slice(&r);
    }
    zrecord_engine::train_dictionary(&samples, &sizes, 2048).expect("train")
}

pub fn options(codec: Codec) -> CreateOptions {
    match codec {
        Codec::ZstdDict => CreateOptions::with_dictionary(dictionary()),
        c => CreateOptions::new(c),
    }
}

pub const CODECS: [Codec; 3] = [Codec::Raw, Codec::Zstd, Codec::ZstdDict];

/// Reads every record of `e` with gather_var and compares with `model`.
pub fn assert_matches(e: &Engine, model: &[Vec<u8>]) {
    assert_eq!(e.len(), model.len() as u64, "length");
    // In a debug build `stats` also checks its running count of live bytes
    // against the table.
    assert_eq!(e.stats().records, model.len() as u64, "stats");
    let idx: Vec<u64> = (0..model.len() as u64).rev().collect();
    let mut lens = vec![0u64; idx.len()];
    e.record_lengths(&idx, &mut lens, None).unwrap();
    let mut offsets = vec![0usize];
    for l in &lens {
        offsets.push(offsets.last().unwrap() + *l as usize);
    }
    let mut dst = vec![0u8; *offsets.last().unwrap()];
    e.gather_var(&idx, &mut dst, &offsets).unwrap();
    for (k, &i) in idx.iter().enumerate() {
        assert_eq!(
            &dst[offsets[k]..offsets[k + 1]],
            &model[i as usize][..],
            "record {i}"
        );
    }
}

pub fn reopen(dir: &Path, cfg: &EngineConfig) -> Engine {
    Engine::open_with(dir, OpenMode::ReadWrite, cfg.clone()).expect("reopen")
}

/// Sum of the sizes of files with `ext` in `dir`.
pub fn bytes_of(dir: &Path, ext: &str) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().extension().is_some_and(|x| x == ext))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

pub fn count_files(dir: &Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == ext)
        })
        .count()
}
pub mod workload;

/// Options for a store whose appends and deletes defer to `sync`.
pub fn at_sync(codec: Codec) -> CreateOptions {
    CreateOptions {
        durability: zrecord_engine::Durability::AtSync,
        ..CreateOptions::new(codec)
    }
}

/// Whether `durable.zr`'s bytes (`None`: no file) hold a marker or a
/// pending appends record: a handle keeps the file between syncs with its
/// first sector zeroed, and removes it at close.
pub fn live_marker(bytes: Option<Vec<u8>>) -> bool {
    bytes.is_some_and(|b| b.iter().take(8).any(|&x| x != 0))
}

/// Whether the simulated disk's page cache holds a live `durable.zr` in
/// `dir` (see [`live_marker`]).
pub fn has_marker(v: &zrecord_engine::sim::SimVfs, dir: &Path) -> bool {
    live_marker(v.read_file(&dir.join("durable.zr")))
}

/// Record `k` of the deferred-durability tests: `30 + k` bytes of `k`.
pub fn tagged(k: u8) -> Vec<u8> {
    vec![k; 30 + k as usize]
}

/// [`sim`] with 8 KiB chunks: a handful of small records stay in chunk 0.
pub fn sim_8k_chunks(v: &zrecord_engine::sim::SimVfs) -> EngineConfig {
    EngineConfig {
        chunk_capacity: 8192,
        ..sim(v)
    }
}

/// A deferring raw store at `dir` on a new simulated disk (`cfg` makes its
/// config) of `tagged(0..6)`, synced, then `tagged(6..9)` appended (pending:
/// their header in `durable.zr`) and the writer killed: the kill image, and
/// `0.chunk` as the sync left it.
pub fn killed_with_appends_pending(
    dir: &Path,
    cfg: impl Fn(&zrecord_engine::sim::SimVfs) -> EngineConfig,
) -> (zrecord_engine::sim::SimVfs, Vec<u8>) {
    let v = zrecord_engine::sim::SimVfs::new();
    let e = Engine::create_with(dir, &at_sync(Codec::Raw), cfg(&v)).unwrap();
    let append = |ks: std::ops::Range<u8>| {
        for k in ks {
            e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
        }
    };
    append(0..6);
    e.sync().unwrap();
    let chunk = v.read_file(&dir.join("0.chunk")).unwrap();
    append(6..9);
    let killed = v.snapshot().kill_image();
    std::mem::forget(e);
    (killed, chunk)
}

/// A deferring raw store at `dir` on `v` (8 KiB chunks) of `tagged(0..6)`,
/// synced; `delete(1)` then `delete(0)`, written in place first if
/// `flushed` (a `verify` flushes them); the writer killed; then loaderx
/// 1.7.2 appends `tagged(9)` by hand, at slot 4 (`flushed`) or 6 (the
/// deletes still pending in `durable.zr`, which it ignores). The image.
pub fn killed_deleting_then_a_foreign_append(
    v: &zrecord_engine::sim::SimVfs,
    dir: &Path,
    flushed: bool,
) -> zrecord_engine::sim::SimVfs {
    let mut e = Engine::create_with(dir, &at_sync(Codec::Raw), sim_8k_chunks(v)).unwrap();
    for k in 0..6 {
        e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
    }
    e.sync().unwrap();
    e.delete(&[1]).unwrap();
    e.delete(&[0]).unwrap();
    if flushed {
        assert!(e.verify().unwrap().is_ok(), "written in place, done");
    }
    let killed = v.snapshot().kill_image();
    std::mem::forget(e);
    let meta = killed.read_file(&dir.join("meta.zr")).unwrap();
    let len = u64::from_le_bytes(meta[14..22].try_into().unwrap());
    assert_eq!(len, if flushed { 4 } else { 6 });
    append_by_hand(&killed, dir, 4, &tagged(9));
    killed
}

/// Appends raw record `rec` to the store in `dir` on `v` the way loaderx
/// 1.7.2 does (which ignores `durable.zr`), by hand: its bytes at the
/// frontier of chunk 0 (which must be the tail chunk), its entry (offset,
/// stored and logical length, chunk) at slot `length` of the `seg`-entry
/// segments, then `meta.zr` with the new frontier and length.
pub fn append_by_hand(v: &zrecord_engine::sim::SimVfs, dir: &Path, seg: u64, rec: &[u8]) {
    let mut meta = v.read_file(&dir.join("meta.zr")).unwrap();
    assert_eq!(u32::from_le_bytes(meta[6..10].try_into().unwrap()), 0);
    let tail = u32::from_le_bytes(meta[10..14].try_into().unwrap());
    let len = u64::from_le_bytes(meta[14..22].try_into().unwrap());
    let mut chunk = v.read_file(&dir.join("0.chunk")).unwrap();
    chunk.truncate(tail as usize);
    chunk.extend_from_slice(rec);
    v.write_file(&dir.join("0.chunk"), &chunk);
    let n = rec.len() as u32;
    let name = dir.join(format!("{}.loc", len / seg));
    let mut loc = v.read_file(&name).unwrap_or_default();
    let at = (len % seg) as usize * 16;
    loc.resize(loc.len().max(at + 16), 0);
    for (k, x) in [tail, n, n, 0].iter().enumerate() {
        loc[at + 4 * k..at + 4 * k + 4].copy_from_slice(&x.to_le_bytes());
    }
    v.write_file(&name, &loc);
    meta[10..14].copy_from_slice(&(tail + n).to_le_bytes());
    meta[14..22].copy_from_slice(&(len + 1).to_le_bytes());
    v.write_file(&dir.join("meta.zr"), &meta);
}

/// Fails each of the first `calls` I/O calls of a read-write open of the
/// store in `dir` (on a fork of `image` each time); where the open failed,
/// opens it again on that fork, healthy, and hands the call's number and
/// that handle to `check`. Returns how many opens failed.
pub fn reopen_after_each_failed_open(
    image: &zrecord_engine::sim::SimVfs,
    dir: &str,
    cfg: impl Fn(&zrecord_engine::sim::SimVfs) -> EngineConfig,
    calls: u64,
    mut check: impl FnMut(u64, Engine),
) -> usize {
    let mut failed = 0;
    for n in 0..calls {
        let img = image.fork();
        img.fail_at(Some(n));
        let r = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&img));
        img.fail_at(None);
        if r.is_ok() {
            continue;
        }
        failed += 1;
        let r = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&img))
            .unwrap_or_else(|err| panic!("call {n}: reopen failed: {err}"));
        check(n, r);
    }
    failed
}

/// Runs `child` in a forked child process and returns its exit code (a
/// panic in it is 9); fails if the child died of a signal (`alarm` it to
/// turn a hang into one).
#[cfg(unix)]
pub fn exit_code_of_fork(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `child` and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(9);
        // SAFETY: ends the child without running the parent's exit code.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status),
        "the child did not exit (signal {}: hung?)",
        libc::WTERMSIG(status)
    );
    libc::WEXITSTATUS(status)
}
