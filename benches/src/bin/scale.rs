//! Scale probes: how append, open, gather, delete, compact and sync behave
//! as a store grows to the record counts of a real training set.
//!
//! Run: `cargo run --release -p benches --bin scale -- <probe> [args]`, with
//! the store under `$SCALE_DIR` (default `$TMPDIR/zrecord-scale`), removed
//! afterwards. Probes:
//! - `dense N WIDTH BATCH`: a raw dense store of N records of WIDTH bytes;
//! - `ragged N`: a zstd ragged store of N items of 1..64 f32;
//! - `sampler N`: zsampler and loaderx over an N-record length;
//! - `ro N WIDTH ROUNDS`: read-only open and gathers of a raw dense store
//!   of N records of WIDTH bytes, kept in `$SCALE_DIR` for the next run
//!   (for comparing builds on one store, alternating; remove it by hand).

use std::path::PathBuf;
use std::time::Instant;

use benches::Rng;
use zrecord_engine::{Codec, CreateOptions, Engine, OpenMode};

fn status(field: &str) -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
fn rss() -> f64 {
    status("RssAnon:")
}
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn dir() -> PathBuf {
    let d = std::env::var_os("SCALE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("zrecord-scale"));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Opens the store at `d` read-only, printing the time and the memory it took.
fn open_read_only(d: &std::path::Path) -> Engine {
    let before = rss();
    let t = Instant::now();
    let e = Engine::open(d, OpenMode::ReadOnly).unwrap();
    println!(
        "open read-only: {:.3} s, rss +{:.0} MiB (now {:.0}), file-backed {:.0} MiB",
        t.elapsed().as_secs_f64(),
        rss() - before,
        rss(),
        status("RssFile:")
    );
    e
}

fn arg(a: &[String], i: usize, default: u64) -> u64 {
    a.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn dense(a: &[String]) {
    let n = arg(a, 0, 10_000_000);
    let width = arg(a, 1, 32) as usize;
    let batch = arg(a, 2, 100_000);
    let d = dir();
    let e = Engine::create(&d, &CreateOptions::new(Codec::Raw)).unwrap();
    let mut r = Rng(1);
    let mut buf = vec![0u8; batch as usize * width];
    let t0 = Instant::now();
    let mut done = 0u64;
    let mut k = 0u64;
    let nb = n.div_ceil(batch);
    while done < n {
        let m = batch.min(n - done) as usize;
        for b in buf[..m * width].chunks_mut(8) {
            let x = r.next_u64().to_le_bytes();
            b.copy_from_slice(&x[..b.len()]);
        }
        let t = Instant::now();
        e.append_fixed(&buf[..m * width], width).unwrap();
        let dt = t.elapsed();
        if k == 0 || k == 1 || k + 1 == nb || (k + 1).is_multiple_of((nb / 5).max(1)) {
            println!(
                "append batch {k:>5} (len {:>10}): {:>8.2} ms",
                done,
                dt.as_secs_f64() * 1e3
            );
        }
        done += m as u64;
        k += 1;
    }
    let ta = t0.elapsed().as_secs_f64();
    println!(
        "append {n} x {width} B in batches of {batch}: {ta:.2} s, {:.2} M rec/s, rss {:.0} MiB",
        n as f64 / ta / 1e6,
        rss()
    );
    let t = Instant::now();
    e.sync().unwrap();
    println!("sync: {:.3} s", t.elapsed().as_secs_f64());
    drop(e);
    // Read-only: the handle a training process opens.
    let ro = open_read_only(&d);
    let idx: Vec<u64> = (0..256 * 4096).map(|_| r.next_u64() % n).collect();
    gather_batches(&ro, &idx, width, "read-only gather");
    drop(ro);
    let before = rss();
    let t = Instant::now();
    let mut e = Engine::open(&d, OpenMode::ReadWrite).unwrap();
    println!(
        "open: {:.3} s, rss +{:.0} MiB (now {:.0}), fds {}",
        t.elapsed().as_secs_f64(),
        rss() - before,
        rss(),
        fds()
    );
    // Gather: 4096 batches of 256 random indices.
    let idx: Vec<u64> = (0..256 * 4096).map(|_| r.next_u64() % n).collect();
    gather_batches(&e, &idx, width, "gather");
    let mut big = vec![0u8; idx.len() * width];
    let t = Instant::now();
    e.gather_fixed(&idx, width, &mut big).unwrap();
    println!(
        "gather 1 x {} random: {:.3} s",
        idx.len(),
        t.elapsed().as_secs_f64()
    );
    drop(big);
    // Delete 1 M scattered in one call.
    let m = (n / 50).min(1_000_000);
    let del: Vec<u64> = (0..m).map(|_| r.next_u64() % n).collect();
    let t = Instant::now();
    e.delete(&del).unwrap();
    println!(
        "delete {m} scattered in one call: {:.3} s, len {}, rss {:.0} MiB",
        t.elapsed().as_secs_f64(),
        e.len(),
        rss()
    );
    // Delete a range: the tail's entries fill it back to back.
    let t = Instant::now();
    e.delete(&(0..m).collect::<Vec<u64>>()).unwrap();
    println!(
        "delete the first {m} in one call: {:.3} s, len {}",
        t.elapsed().as_secs_f64(),
        e.len(),
    );
    let calls = 200u64;
    let t = Instant::now();
    for _ in 0..calls {
        let len = e.len();
        e.delete(&[r.next_u64() % len]).unwrap();
    }
    println!(
        "delete 1 index x {calls} calls: {:.3} ms/call",
        t.elapsed().as_secs_f64() * 1e3 / calls as f64
    );
    // Deferred deletes (the default durability) reach the disk here.
    let t = Instant::now();
    e.sync().unwrap();
    println!("sync after them: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    e.compact().unwrap();
    println!(
        "compact: {:.2} s, rss {:.0} MiB, peak {:.0} MiB",
        t.elapsed().as_secs_f64(),
        rss(),
        status("VmHWM:")
    );
    let t = Instant::now();
    let report = e.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    println!(
        "verify: {:.2} s ({} records)",
        t.elapsed().as_secs_f64(),
        report.records
    );
    drop(e);
    std::fs::remove_dir_all(&d).unwrap();
}

fn ragged(a: &[String]) {
    use zrecord::{OpenOptions, RaggedBatch, RaggedStore};
    let n = arg(a, 0, 4_000_000);
    let batch = arg(a, 1, 100_000);
    let d = dir();
    let s = RaggedStore::<f32>::create(&d, &zrecord::CreateOptions::new(Codec::Zstd)).unwrap();
    let mut r = Rng(2);
    let t0 = Instant::now();
    let mut done = 0u64;
    let nb = n.div_ceil(batch);
    let mut k = 0;
    while done < n {
        let m = batch.min(n - done) as usize;
        let recs: Vec<ndarray::Array1<f32>> = (0..m)
            .map(|_| {
                let l = 1 + (r.next_u64() % 64) as usize;
                ndarray::Array1::from_iter((0..l).map(|j| (j % 7) as f32))
            })
            .collect();
        let t = Instant::now();
        s.append(recs.iter().map(|x| x.view())).unwrap();
        if k == 0 || k + 1 == nb || (k + 1) % (nb / 4).max(1) == 0 {
            println!(
                "append batch {k:>4} (len {done:>9}): {:.1} ms",
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        done += m as u64;
        k += 1;
    }
    let ta = t0.elapsed().as_secs_f64();
    let t = Instant::now();
    s.sync().unwrap();
    println!(
        "append {n} items (1..64 f32, zstd): {ta:.2} s incl. making arrays; sync {:.3} s",
        t.elapsed().as_secs_f64()
    );
    drop(s);
    let before = rss();
    let t = Instant::now();
    let mut s = RaggedStore::<f32>::open_with(&d, &OpenOptions::default()).unwrap();
    println!(
        "open: {:.3} s, anon rss +{:.0} MiB, fds {}",
        t.elapsed().as_secs_f64(),
        rss() - before,
        fds()
    );
    let mut out = RaggedBatch::new();
    let idx: Vec<u64> = (0..256 * 2048).map(|_| r.next_u64() % n).collect();
    let t = Instant::now();
    for c in idx.chunks(256) {
        s.gather_into(c, &mut out).unwrap();
    }
    println!(
        "gather 2048 x 256 random: {:.1} us/batch",
        t.elapsed().as_secs_f64() / 2048.0 * 1e6
    );
    let m = (n / 50).min(1_000_000);
    let del: Vec<u64> = (0..m).map(|_| r.next_u64() % n).collect();
    let t = Instant::now();
    s.delete(del.as_slice()).unwrap();
    println!(
        "delete {m} scattered in one call: {:.3} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    for _ in 0..100 {
        let len = s.len();
        s.delete(&[r.next_u64() % len][..]).unwrap();
    }
    println!(
        "delete 1 x 100 calls: {:.3} ms/call",
        t.elapsed().as_secs_f64() * 10.0
    );
    let t = Instant::now();
    s.sync().unwrap();
    println!("sync after them: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    s.compact().unwrap();
    println!(
        "compact: {:.2} s, peak rss {:.0} MiB",
        t.elapsed().as_secs_f64(),
        status("VmHWM:")
    );
    drop(s);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Many chunk files: `chunks NCHUNKS`, records of 16 KiB, 4 per 64 KiB chunk.
fn chunks(a: &[String]) {
    use zrecord_engine::EngineConfig;
    let nchunks = arg(a, 0, 4000);
    let cfg = || EngineConfig {
        chunk_capacity: 64 << 10,
        ..EngineConfig::default()
    };
    let d = dir();
    let e = Engine::create_with(&d, &CreateOptions::new(Codec::Raw), cfg()).unwrap();
    let w = 16 << 10;
    let buf = vec![7u8; 256 * w];
    let t = Instant::now();
    for _ in 0..(nchunks * 4).div_ceil(256) {
        if let Err(err) = e.append_fixed(&buf, w) {
            println!("append failed at len {}, fds {}: {err}", e.len(), fds());
            break;
        }
    }
    println!(
        "append {} records: {:.2} s, fds {}",
        e.len(),
        t.elapsed().as_secs_f64(),
        fds()
    );
    e.sync().unwrap();
    let n = e.len();
    drop(e);
    let t = Instant::now();
    let mut e = match Engine::open_with(&d, OpenMode::ReadWrite, cfg()) {
        Ok(e) => e,
        Err(err) => {
            println!("open failed, fds {}: {err}", fds());
            std::fs::remove_dir_all(&d).unwrap();
            return;
        }
    };
    println!(
        "open {n} records: {:.3} s, fds {}, vm {:.0} GiB",
        t.elapsed().as_secs_f64(),
        fds(),
        status("VmSize:") / 1024.0
    );
    // One record and a sync, in a loop: what a sync costs in a store of
    // many files (each round's first sync on a fresh handle syncs all).
    let t = Instant::now();
    for _ in 0..20 {
        e.append_fixed(&buf[..w], w).unwrap();
        e.sync().unwrap();
    }
    println!(
        "append 1 record + sync x 20: {:.2} ms/round",
        t.elapsed().as_secs_f64() / 20.0 * 1e3
    );
    let n = e.len();
    let mut r = Rng(3);
    let mut out = vec![0u8; 256 * w];
    let t = Instant::now();
    for _ in 0..256 {
        let idx: Vec<u64> = (0..256).map(|_| r.next_u64() % n).collect();
        e.gather_fixed(&idx, w, &mut out).unwrap();
    }
    println!(
        "gather 256 x 256: {:.1} us/batch",
        t.elapsed().as_secs_f64() / 256.0 * 1e6
    );
    let del: Vec<u64> = (0..n / 2).map(|_| r.next_u64() % n).collect();
    e.delete(&del).unwrap();
    let t = Instant::now();
    e.compact().unwrap();
    println!(
        "compact after deleting ~40%: {:.2} s, len {}, fds {}",
        t.elapsed().as_secs_f64(),
        e.len(),
        fds()
    );
    drop(e);
    std::fs::remove_dir_all(&d).unwrap();
}

/// zsampler and loaderx over an N-record length (`sampler N`).
fn sampler(a: &[String]) {
    use loaderx::{DataLoader, LoaderOptions, Stream};
    use zsampler::{Mode, Sampler};
    let n = arg(a, 0, 50_000_000);
    for mode in [Mode::Iid, Mode::Cyclic] {
        let s = Sampler::new(n, 256, mode, 7).unwrap();
        let mut out = vec![0u64; 256];
        let before = rss();
        for step in [0u64, 1 << 20, 1 << 40, (1 << 62) + 12345] {
            let t = Instant::now();
            for k in 0..10_000 {
                s.batch_at(step + k, &mut out).unwrap();
            }
            println!(
                "sampler {mode:?} n={n} step {step}: {:.2} us/batch",
                t.elapsed().as_secs_f64() / 10_000.0 * 1e6
            );
        }
        println!("  anon rss +{:.1} MiB", rss() - before);
    }
    // A dense store of n 16-byte records for the loader.
    let d = dir();
    let e = Engine::create(&d, &CreateOptions::new(Codec::Raw)).unwrap();
    drop(e);
    std::fs::remove_dir_all(&d).unwrap();
    let s = zrecord::DenseStore::<u8>::create(&d, &[16], &zrecord::CreateOptions::new(Codec::Raw))
        .unwrap();
    let chunk = 5_000_000u64;
    let buf = vec![1u8; chunk as usize * 16];
    let t = Instant::now();
    let mut done = 0;
    while done < n {
        let m = chunk.min(n - done) as usize;
        s.core().append_bytes(&buf[..m * 16]).unwrap();
        done += m as u64;
    }
    s.sync().unwrap();
    println!("store of {n} x 16 B: {:.1} s", t.elapsed().as_secs_f64());
    drop(s);
    for (mode, start) in [
        (Mode::Cyclic, 0),
        (Mode::Iid, 0),
        (Mode::Cyclic, 1u64 << 50),
    ] {
        let before = rss();
        let t = Instant::now();
        let core = zrecord::DenseCore::open(&d, &zrecord::OpenOptions::read_only()).unwrap();
        let topen = t.elapsed().as_secs_f64();
        let opts = LoaderOptions {
            mode,
            start_step: start,
            ..LoaderOptions::default()
        };
        let mut l = DataLoader::new([("x", Stream::from(core))], opts).unwrap();
        let first = l.next().unwrap().unwrap();
        let tfirst = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..2000 {
            l.next().unwrap().unwrap();
        }
        println!(
            "loader {mode:?} start {start}: open {topen:.3} s, first batch (step {}) at {tfirst:.3} s, then {:.1} us/batch, anon rss +{:.0} MiB",
            first.step,
            t.elapsed().as_secs_f64() / 2000.0 * 1e6,
            rss() - before
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

fn ro(a: &[String]) {
    let n = arg(a, 0, 20_000_000);
    let width = arg(a, 1, 32) as usize;
    let rounds = arg(a, 2, 5);
    let d = std::env::var_os("SCALE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("zrecord-scale-ro"));
    if Engine::open(&d, OpenMode::ReadOnly).map(|e| e.len()).ok() != Some(n) {
        let _ = std::fs::remove_dir_all(&d);
        let e = Engine::create(&d, &CreateOptions::new(Codec::Raw)).unwrap();
        let mut r = Rng(1);
        let batch = 1_000_000u64;
        let mut buf = vec![0u8; batch as usize * width];
        let mut done = 0;
        while done < n {
            let m = batch.min(n - done) as usize;
            for b in buf[..m * width].chunks_mut(8) {
                let x = r.next_u64().to_le_bytes();
                b.copy_from_slice(&x[..b.len()]);
            }
            e.append_fixed(&buf[..m * width], width).unwrap();
            done += m as u64;
        }
        e.close().unwrap();
        println!("made {n} x {width} B in {}", d.display());
    }
    let e = open_read_only(&d);
    // Warm: every record once, so each round reads mapped, faulted pages.
    let all: Vec<u64> = (0..n).collect();
    let mut out = vec![0u8; 1 << 20 << 5];
    for c in all.chunks(1 << 20) {
        e.gather_fixed(c, width, &mut out[..c.len() * width])
            .unwrap();
    }
    drop(all);
    let mut r = Rng(7);
    let idx: Vec<u64> = (0..256 * 4096).map(|_| r.next_u64() % n).collect();
    for round in 0..rounds {
        let t = Instant::now();
        for c in idx.chunks(256) {
            e.gather_fixed(c, width, &mut out[..256 * width]).unwrap();
        }
        let tg = t.elapsed().as_secs_f64();
        let t = Instant::now();
        e.gather_fixed(&idx, width, &mut out[..idx.len() * width])
            .unwrap();
        println!(
            "round {round}: 4096 x 256 random {:.1} us/batch; 1 x {} random {:.1} ms",
            tg / 4096.0 * 1e6,
            idx.len(),
            t.elapsed().as_secs_f64() * 1e3
        );
    }
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    match a.first().map(String::as_str) {
        Some("dense") => dense(&a[1..]),
        Some("ragged") => ragged(&a[1..]),
        Some("chunks") => chunks(&a[1..]),
        Some("sampler") => sampler(&a[1..]),
        Some("ro") => ro(&a[1..]),
        _ => eprintln!("usage: scale dense|ragged|chunks|sampler|ro ..."),
    }
}

/// Gathers `idx` in batches of 256 fixed-width records and prints the time
/// per batch under `label`.
fn gather_batches(e: &Engine, idx: &[u64], width: usize, label: &str) {
    let mut out = vec![0u8; 256 * width];
    let batches = idx.len().div_ceil(256);
    let t = Instant::now();
    for c in idx.chunks(256) {
        e.gather_fixed(c, width, &mut out[..c.len() * width])
            .unwrap();
    }
    let tg = t.elapsed().as_secs_f64();
    println!(
        "{label} {batches} x 256 random: {tg:.3} s, {:.1} us/batch",
        tg / batches as f64 * 1e6
    );
}
