//! DataLoader throughput and peak RSS against the ceiling of a plain loop of
//! store gathers into one reused buffer, in the same run.
//!
//! 256 KiB records, batch 256 (64 MiB per batch), 4 transform workers,
//! raw and zstd stores. The transform touches one byte per page of the batch
//! (so it really reads what it got) and drops it.
//!
//! ```sh
//! cargo run --release -p benches --bin loader            # 2048 records (512 MiB per store)
//! cargo run --release -p benches --bin loader -- --quick # 512 records
//! ```

use std::time::{Duration, Instant};

use loaderx::{Batch, DataLoader, LoaderOptions, Mode, Stream};
use zrecord::{Codec, CreateOptions, DenseCore, DenseStore, OpenOptions};
use zsampler::Sampler;

const RECORD: usize = 256 << 10;
const BATCH: usize = 256;

/// Peak resident set size of this process (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Resets VmHWM to the current RSS (Linux: write "5" to clear_refs).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Mildly compressible image-like records (~1.5x with zstd).
fn make_store(dir: &std::path::Path, codec: Codec, n: usize) -> DenseCore {
    let path = dir.join(codec.name());
    let store =
        DenseStore::<u8>::create(&path, &[RECORD as u64], &CreateOptions::new(codec)).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let per = 64;
    for start in (0..n).step_by(per) {
        let m = per.min(n - start);
        let mut buf = ndarray::Array2::<u8>::zeros((m, RECORD));
        for (r, mut row) in buf.outer_iter_mut().enumerate() {
            for (j, b) in row.iter_mut().enumerate() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = (((start + r) * 3 + j / 512) as u8).wrapping_add((state & 0x1f) as u8);
            }
        }
        store.append(buf.view()).unwrap();
    }
    store.sync().unwrap();
    drop(store);
    DenseCore::open(&path, &OpenOptions::read_only()).unwrap()
}

fn touch(bytes: &[u8]) -> u64 {
    bytes.iter().step_by(4096).map(|&b| u64::from(b)).sum()
}

fn ceiling(core: &DenseCore, n: u64, dur: Duration) -> (f64, f64) {
    let sampler = Sampler::new(n, BATCH, Mode::Cyclic, 42).unwrap();
    let mut idx = vec![0u64; BATCH];
    let mut buf = zrecord::AlignedBuf::zeroed(BATCH * RECORD);
    reset_peak_rss();
    let t = Instant::now();
    let mut steps = 0u64;
    let mut sink = 0u64;
    while t.elapsed() < dur {
        sampler.batch_at(steps, &mut idx).unwrap();
        core.gather_bytes_into(&idx, &mut buf).unwrap();
        sink = sink.wrapping_add(touch(&buf));
        steps += 1;
    }
    std::hint::black_box(sink);
    (steps as f64 / t.elapsed().as_secs_f64(), peak_rss_mib())
}

fn loader(path: &std::path::Path, dur: Duration) -> (f64, f64) {
    let stream = Stream::from(DenseCore::open(path, &OpenOptions::read_only()).unwrap());
    let opts = LoaderOptions {
        batch_size: BATCH,
        mode: Mode::Cyclic,
        workers: 4,
        prefetch: 4,
        ..LoaderOptions::default()
    };
    reset_peak_rss();
    let loader = DataLoader::with_transform([("x", stream)], opts, |b: Batch| {
        Ok::<_, loaderx::Error>(touch(b.dense_bytes("x")?.bytes))
    })
    .unwrap();
    // Warm-up: fill the pool once (first use of each buffer page-faults).
    let mut it = loader;
    for _ in 0..12 {
        it.next().unwrap().unwrap();
    }
    let t = Instant::now();
    let mut steps = 0u64;
    let mut sink = 0u64;
    while t.elapsed() < dur {
        sink = sink.wrapping_add(it.next().unwrap().unwrap().value);
        steps += 1;
    }
    std::hint::black_box(sink);
    let rate = steps as f64 / t.elapsed().as_secs_f64();
    let peak = peak_rss_mib();
    drop(it);
    (rate, peak)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n = if quick { 512 } else { 2048 };
    let rounds = if quick { 3 } else { 7 };
    let dur = Duration::from_millis(if quick { 1000 } else { 2000 });
    let dir = tempfile::Builder::new()
        .prefix("loader-bench")
        .tempdir()
        .unwrap();
    println!(
        "DataLoader vs plain gather loop: {n} records of 256 KiB, batch {BATCH} (64 MiB), 4 workers, prefetch 4; {} threads; {rounds} alternating rounds of {} ms each",
        rayon::current_num_threads(),
        dur.as_millis()
    );
    println!(
        "| codec | ceiling batches/s (best) | loader batches/s (best) | best/best | median per-round ratio (min..max) | ceiling peak RSS MiB | loader peak RSS MiB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for codec in [Codec::Raw, Codec::Zstd] {
        let core = make_store(dir.path(), codec, n);
        // Warm the page cache.
        let _ = ceiling(&core, n as u64, Duration::from_millis(500));
        let path = dir.path().join(codec.name());
        let (mut best_c, mut best_l, mut c_rss, mut l_rss) = (0f64, 0f64, 0f64, 0f64);
        let mut ratios = Vec::new();
        for r in 0..rounds {
            // Alternate which side runs first, so drifting load hits both.
            let (c, cr, l, lr) = if r % 2 == 0 {
                let (c, cr) = ceiling(&core, n as u64, dur);
                let (l, lr) = loader(&path, dur);
                (c, cr, l, lr)
            } else {
                let (l, lr) = loader(&path, dur);
                let (c, cr) = ceiling(&core, n as u64, dur);
                (c, cr, l, lr)
            };
            ratios.push(l / c);
            best_c = best_c.max(c);
            best_l = best_l.max(l);
            c_rss = c_rss.max(cr);
            l_rss = l_rss.max(lr);
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "| {} | {best_c:.1} | {best_l:.1} | {:.2} | {:.2} ({:.2}..{:.2}) | {c_rss:.0} | {l_rss:.0} |",
            codec.name(),
            best_l / best_c,
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1],
        );
    }
}
