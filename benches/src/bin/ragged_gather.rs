//! Ragged gather throughput of zrecord's `RaggedCore::gather_into` (shapes
//! read and checked, payloads packed into a reused `RaggedBatch`), batch 256
//! of random indices, over 100,000 int32 sequences with lognormal lengths
//! clipped to 16..2048 (median about 253), raw and zstd, beside the ceiling
//! measured in the same run: the same gather from one packed payload array
//! plus offsets held in memory (memcpy per record into a reused buffer, on
//! every core like the store, and on one core for reference). A second
//! ceiling for zstd decodes the same records, compressed as level-3 frames
//! held in memory, on every core with one context per thread; a third, for
//! the zstd_dict store (dictionary trained on the payloads, balanced tier),
//! decodes level-19 frames made with that dictionary, one context per thread
//! with the dictionary loaded once.
//!
//! `paired` is the median, over 15 short alternating rounds, of this
//! gather's rate over the one-thread in-memory ceiling's: the steadier
//! figure on a shared machine.
//!
//! Run: `cargo run --release -p benches --bin ragged_gather [-- --quick]`.
//! `-- --profile raw|zstd|zstd_dict [batches]` builds only that store and runs a
//! fixed number of gathers, then the one-thread memory ceiling on the same
//! batches, printing wall and CPU time per batch (for perf / callgrind, and
//! for comparing builds by CPU time on a loaded machine). `--level N` writes
//! the compressed stores (and the frames of their ceilings) at zstd level N
//! instead of the format's 3 / 19 (a negative level leaves literals
//! uncompressed: faster to decode, and on these token-like records hardly
//! smaller than raw; see docs/benchmarks.md).
//! The stores (about 130 MiB each) live in `$TMPDIR` and are removed
//! afterwards; they are read from the page cache.

use rayon::prelude::*;
use std::hint::black_box;
use std::time::{Duration, Instant};
use zrecord::{
    Codec, CreateOptions, DictSource, DictTier, OpenOptions, RaggedBatch, RaggedStore, train_dict,
};
use zrecord_engine::{Engine, OpenMode};

const N: usize = 100_000;
const BATCH: usize = 256;

use benches::Rng;

/// Token-like sequences: lognormal lengths (median 253, sigma 0.8, clipped
/// to 16..2048), values skewed towards small ids below 32,000, so zstd
/// compresses them roughly as it would real token streams.
fn sequences() -> (Vec<i32>, Vec<usize>) {
    let mut r = Rng(2024);
    let mut values = Vec::new();
    let mut offsets = vec![0usize];
    for _ in 0..N {
        let len = (253f64.ln() + 0.8 * r.normal())
            .exp()
            .round()
            .clamp(16.0, 2048.0) as usize;
        for _ in 0..len {
            let u = r.unit();
            values.push((32_000.0 * u * u * u) as i32);
        }
        offsets.push(values.len());
    }
    (values, offsets)
}

/// Best of 3 rounds, records per second of `f(batch k)` run round-robin.
fn measure(batches: &[Vec<u64>], total: Duration, mut f: impl FnMut(&[u64])) -> f64 {
    for b in batches.iter().take(8) {
        f(b);
    }
    let mut best = 0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let mut recs = 0usize;
        let mut k = 0;
        while t.elapsed() < total / 3 {
            f(&batches[k % batches.len()]);
            recs += BATCH;
            k += 1;
        }
        best = best.max(recs as f64 / t.elapsed().as_secs_f64());
    }
    best
}

/// Median over short alternating rounds of `ours` / `ceil` throughput.
/// Both sides see the same machine load (the dev VM is shared and noisy),
/// so the ratio is steadier than a ratio of separately measured rates.
fn paired_ratio(
    batches: &[Vec<u64>],
    rounds: usize,
    slice: Duration,
    ceil: &mut dyn FnMut(&[u64]),
    ours: &mut dyn FnMut(&[u64]),
) -> f64 {
    let mut k = 0usize;
    let mut rate = |f: &mut dyn FnMut(&[u64])| {
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed() < slice {
            f(&batches[k % batches.len()]);
            k += 1;
            n += 1;
        }
        n as f64 / t.elapsed().as_secs_f64()
    };
    let mut ratios: Vec<f64> = (0..rounds)
        .map(|_| {
            let c = rate(&mut *ceil);
            rate(&mut *ours) / c
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[rounds / 2]
}

/// The zstd_dict store's dictionary, for the dictionary-frames ceiling.
static DICT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

thread_local! {
    /// One zstd context per thread, kept across gathers.
    static DCTX: std::cell::RefCell<zstd::bulk::Decompressor<'static>> =
        std::cell::RefCell::new(zstd::bulk::Decompressor::new().unwrap());
    /// One per thread with [`DICT`] loaded (digested once, used by every
    /// frame), for the dictionary-frames ceiling.
    static DCTX_DICT: std::cell::RefCell<zstd::bulk::Decompressor<'static>> =
        std::cell::RefCell::new(
            zstd::bulk::Decompressor::with_dictionary(DICT.get().map_or(&[][..], |d| &d[..]))
                .unwrap(),
        );
}

/// Lays the records `idx` (sizes from `byte_offsets`) out back to back in
/// `out`, grown as needed: their offsets go to `offs`, and one slice of `out`
/// per record is returned, for filling in parallel.
fn lay_out<'o>(
    byte_offsets: &[usize],
    idx: &[u64],
    out: &'o mut Vec<u8>,
    offs: &mut Vec<usize>,
) -> Vec<&'o mut [u8]> {
    offs.clear();
    offs.push(0);
    for &i in idx {
        let i = i as usize;
        offs.push(offs.last().unwrap() + byte_offsets[i + 1] - byte_offsets[i]);
    }
    let total = *offs.last().unwrap();
    if out.len() < total {
        out.resize(total, 0);
    }
    let mut slices: Vec<&mut [u8]> = Vec::with_capacity(idx.len());
    let mut rest = &mut out[..total];
    for w in offs.windows(2) {
        let (h, tl) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
        slices.push(h);
        rest = tl;
    }
    slices
}

/// The zstd ceiling: the batch's records as frames held in memory, decoded
/// on every core (a few blocks per thread, one kept context per thread, with
/// [`DICT`] loaded when `dict`) into one buffer at per-record offsets.
fn gather_frames(
    dict: bool,
    frames: &[Vec<u8>],
    byte_offsets: &[usize],
    b: &[u64],
    out: &mut Vec<u8>,
    offs: &mut Vec<usize>,
) {
    let mut slices = lay_out(byte_offsets, b, out, offs);
    let block = b.len().div_ceil(rayon::current_num_threads() * 4).max(1);
    slices
        .par_chunks_mut(block)
        .zip(b.par_chunks(block))
        .for_each(|(ds, ix)| {
            let run = |dc: &mut zstd::bulk::Decompressor<'static>| {
                for (d, &i) in ds.iter_mut().zip(ix) {
                    dc.decompress_to_buffer(&frames[i as usize], &mut d[..])
                        .unwrap();
                }
            };
            if dict {
                DCTX_DICT.with_borrow_mut(run)
            } else {
                DCTX.with_borrow_mut(run)
            }
        });
}

/// User + system CPU seconds of this process so far (all threads), from
/// `/proc/self/stat` (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are
    // fields 14 and 15 of the whole line, in clock ticks (100 per second).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

/// The ceiling: packed payload + offsets in memory, gathered by memcpy into
/// one reused buffer with per-record offsets (what `RaggedBatch` holds).
struct Packed<'a> {
    bytes: &'a [u8],
    offsets: &'a [usize],
}

impl Packed<'_> {
    fn gather_serial(&self, idx: &[u64], out: &mut Vec<u8>, offs: &mut Vec<usize>) {
        out.clear();
        offs.clear();
        offs.push(0);
        for &i in idx {
            let i = i as usize;
            out.extend_from_slice(&self.bytes[self.offsets[i]..self.offsets[i + 1]]);
            offs.push(out.len());
        }
    }

    fn gather_parallel(&self, idx: &[u64], out: &mut Vec<u8>, offs: &mut Vec<usize>) {
        let mut slices = lay_out(self.offsets, idx, out, offs);
        let block = idx.len().div_ceil(rayon::current_num_threads() * 4).max(1);
        slices
            .par_chunks_mut(block)
            .zip(idx.par_chunks(block))
            .for_each(|(ds, ix)| {
                for (d, &i) in ds.iter_mut().zip(ix) {
                    let i = i as usize;
                    d.copy_from_slice(&self.bytes[self.offsets[i]..self.offsets[i + 1]]);
                }
            });
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|a| a == "--quick");
    let profile = std::env::args().any(|a| a == "--profile");
    let t = Duration::from_millis(match (profile, quick) {
        (true, _) => 3,
        (false, true) => 600,
        (false, false) => 3000,
    });
    let (values, offsets) = sequences();
    let mut lens: Vec<usize> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
    lens.sort_unstable();
    let byte_vec: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bytes: &[u8] = &byte_vec;
    let byte_offsets: Vec<usize> = offsets.iter().map(|o| o * 4).collect();
    println!(
        "ragged gather: {N} int32 sequences, lengths median {} mean {:.0} (16..2048), {:.0} MiB; batch {BATCH}, random indices, {} threads{}",
        lens[N / 2],
        values.len() as f64 / N as f64,
        bytes.len() as f64 / (1 << 20) as f64,
        rayon::current_num_threads(),
        if quick { " (--quick)" } else { "" }
    );

    let mut r = Rng(77);
    let batches: Vec<Vec<u64>> = (0..512)
        .map(|_| (0..BATCH).map(|_| r.next_u64() % N as u64).collect())
        .collect();

    let packed = Packed {
        bytes,
        offsets: &byte_offsets,
    };
    let (mut out, mut offs) = (Vec::new(), Vec::new());
    let ceil_serial = measure(&batches, t, |b| {
        packed.gather_serial(b, &mut out, &mut offs);
        black_box(&out);
    });
    let ceil_par = measure(&batches, t, |b| {
        packed.gather_parallel(b, &mut out, &mut offs);
        black_box(&out);
    });
    let ceiling = ceil_serial.max(ceil_par);
    println!(
        "{:<34} {:>12.0} records/s",
        "ceiling, in memory, 1 thread", ceil_serial
    );
    println!(
        "{:<34} {:>12.0} records/s",
        "ceiling, in memory, all threads", ceil_par
    );

    let root = tempfile::tempdir()?;
    let mut stores = Vec::new();
    // In `--profile` mode only the profiled store is built.
    let args: Vec<String> = std::env::args().collect();
    let profiled = args
        .iter()
        .position(|a| a == "--profile")
        .map(|p| args.get(p + 1).map_or("raw", String::as_str));
    // `--level N`: the zstd level of the compressed stores (and of the
    // zstd-frames ceiling), instead of the format's 3 / 19.
    let level: Option<i32> = args
        .iter()
        .position(|a| a == "--level")
        .and_then(|p| args.get(p + 1))
        .map(|l| l.parse())
        .transpose()?;
    let codecs: &[Codec] = match profiled {
        Some("zstd") => &[Codec::Zstd],
        Some("zstd_dict") => &[Codec::ZstdDict],
        Some(_) => &[Codec::Raw],
        None => &[Codec::Raw, Codec::Zstd, Codec::ZstdDict],
    };
    // The zstd_dict store's dictionary (balanced tier: 128 KiB, trained on a
    // strided 16 MiB sample of the payloads).
    let dict = codecs
        .contains(&Codec::ZstdDict)
        .then(|| {
            train_dict(
                DictSource::records(byte_offsets.windows(2).map(|w| &bytes[w[0]..w[1]])),
                DictTier::Balanced,
            )
        })
        .transpose()?;
    for &codec in codecs {
        let path = root.path().join(codec.name());
        let mut opts = match (&dict, codec) {
            (Some(d), Codec::ZstdDict) => CreateOptions::with_dictionary(d.clone()),
            _ => CreateOptions::new(codec),
        };
        if codec != Codec::Raw {
            opts.level = level;
        }
        let store = RaggedStore::<i32>::create(&path, &opts)?;
        // Appends of 10,000 records.
        for start in (0..N).step_by(10_000) {
            let end = (start + 10_000).min(N);
            let recs: Vec<(Vec<u64>, &[u8])> = (start..end)
                .map(|i| {
                    (
                        vec![(offsets[i + 1] - offsets[i]) as u64],
                        &bytes[byte_offsets[i]..byte_offsets[i + 1]],
                    )
                })
                .collect();
            store
                .core()
                .append_records(recs.iter().map(|(s, b)| (&s[..], *b)))?;
        }
        // Reopened read-only, so the payload-only diagnostic below can open
        // the same files through a read-only engine of its own.
        drop(store);
        stores.push(RaggedStore::<i32>::open_with(
            &path,
            &OpenOptions::read_only(),
        )?);
    }
    // `--profile raw|zstd|zstd_dict [batches]`: only gather_into on that store, a
    // fixed number of batches (for perf / callgrind), then exit.
    if let Some(which) = profiled {
        let p = args.iter().position(|a| a == "--profile").unwrap_or(0);
        let count: usize = args.get(p + 2).and_then(|s| s.parse().ok()).unwrap_or(2000);
        let store = &stores[0];
        let mut batch = RaggedBatch::new();
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        for k in 0..count {
            store.gather_into(&batches[k % batches.len()], &mut batch)?;
            black_box(batch.data());
        }
        let s = t0.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        println!(
            "profile {which}: {count} batches, {:.0} records/s, {:.1} us wall and {:.1} us CPU (all threads) per batch",
            (count * BATCH) as f64 / s,
            s * 1e6 / count as f64,
            cpu * 1e6 / count as f64
        );
        // The one-thread memory ceiling on the same batches, same count.
        let (mut out, mut offs) = (Vec::new(), Vec::new());
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        for k in 0..count {
            packed.gather_serial(&batches[k % batches.len()], &mut out, &mut offs);
            black_box(&out);
        }
        let s = t0.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        println!(
            "profile ceiling (memory, 1 thread): {:.1} us wall and {:.1} us CPU per batch",
            s * 1e6 / count as f64,
            cpu * 1e6 / count as f64
        );
        return Ok(());
    }
    // Second ceiling for zstd: the same records as level-3 frames in
    // memory, decoded on every core with one context per thread.
    let frames: Vec<Vec<u8>> = (0..N)
        .into_par_iter()
        .map(|i| {
            zstd::bulk::compress(
                &bytes[byte_offsets[i]..byte_offsets[i + 1]],
                level.unwrap_or(3),
            )
            .unwrap()
        })
        .collect();
    let zstd_ceiling = measure(&batches, t, |b| {
        gather_frames(false, &frames, &byte_offsets, b, &mut out, &mut offs);
        black_box(&out);
    });
    println!(
        "{:<34} {:>12.0} records/s",
        "zstd frames in memory, all threads", zstd_ceiling
    );
    // Third ceiling for zstd_dict: level-19 frames against the store's
    // dictionary, in memory, decoded on every core.
    let dict_frames: Vec<Vec<u8>> = match &dict {
        Some(d) => {
            DICT.get_or_init(|| d.clone());
            (0..N)
                .into_par_iter()
                .map_init(
                    || zstd::bulk::Compressor::with_dictionary(level.unwrap_or(19), d).unwrap(),
                    |c, i| {
                        c.compress(&bytes[byte_offsets[i]..byte_offsets[i + 1]])
                            .unwrap()
                    },
                )
                .collect()
        }
        None => Vec::new(),
    };
    if !dict_frames.is_empty() {
        let dict_ceiling = measure(&batches, t, |b| {
            gather_frames(true, &dict_frames, &byte_offsets, b, &mut out, &mut offs);
            black_box(&out);
        });
        println!(
            "{:<34} {:>12.0} records/s",
            "zstd_dict frames in memory, all", dict_ceiling
        );
    }
    println!(
        "{:<34} {:>12} {:>10} {:>10} {:>10} {:>9}",
        "zrecord RaggedCore::gather_into",
        "records/s",
        "/ceiling",
        "/zstd ceil",
        "store MiB",
        "paired"
    );
    for store in &stores {
        let mib = store.stats().chunk_bytes as f64 / (1 << 20) as f64;
        // Read the whole store once so the page cache and mappings are warm.
        let mut batch = RaggedBatch::new();
        let all: Vec<u64> = (0..N as u64).collect();
        for c in all.chunks(10_000) {
            store.gather_into(c, &mut batch)?;
        }
        // Spot-check correctness before timing.
        store.gather_into(&batches[0], &mut batch)?;
        for (k, &i) in batches[0].iter().enumerate() {
            assert_eq!(
                batch.bytes(k),
                &bytes[byte_offsets[i as usize]..byte_offsets[i as usize + 1]]
            );
        }
        let ours = measure(&batches, t, |b| {
            store.gather_into(b, &mut batch).unwrap();
            black_box(batch.data());
        });
        // Diagnostic: the engine alone gathering the payload records at
        // precomputed offsets (no shape records, no length lookup).
        let goffs: Vec<Vec<usize>> = batches
            .iter()
            .map(|b| {
                let mut o = vec![0usize];
                for &i in b {
                    let i = i as usize;
                    o.push(o.last().unwrap() + byte_offsets[i + 1] - byte_offsets[i]);
                }
                o
            })
            .collect();
        let phys: Vec<Vec<u64>> = batches
            .iter()
            .map(|b| b.iter().map(|&i| 2 * i).collect())
            .collect();
        let engine = Engine::open(store.core().path(), OpenMode::ReadOnly)?;
        let mut raw_out = vec![0u8; goffs.iter().map(|o| *o.last().unwrap()).max().unwrap()];
        let mut k = 0usize;
        let payload_only = measure(&batches, t, |_| {
            let j = k % batches.len();
            k += 1;
            engine
                .gather_var(&phys[j], &mut raw_out, &goffs[j])
                .unwrap();
            black_box(&raw_out);
        });
        let paired = paired_ratio(
            &batches,
            15,
            t / 15,
            &mut |b| {
                packed.gather_serial(b, &mut out, &mut offs);
                black_box(&out);
            },
            &mut |b| {
                store.gather_into(b, &mut batch).unwrap();
                black_box(batch.data());
            },
        );
        // For zstd, also paired against the zstd-frames ceiling (for
        // zstd_dict, the dictionary frames).
        let with_dict = store.codec() == Codec::ZstdDict;
        let ceiling_frames = if with_dict { &dict_frames } else { &frames };
        let paired_zstd = (store.codec() != Codec::Raw).then(|| {
            paired_ratio(
                &batches,
                15,
                t / 15,
                &mut |b| {
                    gather_frames(
                        with_dict,
                        ceiling_frames,
                        &byte_offsets,
                        b,
                        &mut out,
                        &mut offs,
                    );
                    black_box(&out);
                },
                &mut |b| {
                    store.gather_into(b, &mut batch).unwrap();
                    black_box(batch.data());
                },
            )
        });
        println!(
            "{:<34} {:>12.0} {:>9.2}x {:>9.2}x {:>10.0} {:>8.2}x{}",
            format!("  {}", store.codec().name()),
            ours,
            ours / ceiling,
            ours / zstd_ceiling,
            mib,
            paired,
            paired_zstd.map_or(String::new(), |p| format!(
                "  (paired vs {} frames: {p:.2}x)",
                if with_dict { "zstd_dict" } else { "zstd" }
            ))
        );
        println!(
            "{:<34} {:>12.0} {:>9.2}x",
            "    engine payloads only",
            payload_only,
            payload_only / ceiling
        );
    }
    Ok(())
}
