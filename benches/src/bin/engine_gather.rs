//! Random-index gather throughput of zrecord-engine, batch 256, beside its
//! ceilings measured in the same run:
//! - raw: a memcpy-gather of the same records from one in-memory array;
//! - zstd: decoding the same frames from memory on every core.
//!
//! Run: `cargo run --release -p benches --bin engine_gather [-- --quick]`.
//! Stores (about 1 GiB at most, one at a time) live in `$TMPDIR` and are
//! removed afterwards; they are read from the page cache.

use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use zrecord_engine::{AlignedBuf, Codec, CreateOptions, Engine, EngineConfig, OpenMode, ReadPath};

const BATCH: usize = 256;

use benches::Rng;

/// Bytes that zstd level 3 compresses about 3x, image-like: most 64-byte
/// blocks repeat a recent block with one byte changed, the rest are a noisy
/// random walk.
fn fill(buf: &mut [u8], seed: u64) {
    let mut r = Rng(seed);
    let mut v = 0u8;
    let blocks = buf.len() / 64;
    for b in 0..blocks {
        let x = r.next_u64();
        if b >= 64 && x % 8 < 5 {
            let from = b - 1 - (x >> 8) as usize % 63;
            buf.copy_within(from * 64..from * 64 + 64, b * 64);
            buf[b * 64 + (x >> 20) as usize % 64] ^= (x >> 32) as u8;
        } else {
            for k in 0..64 {
                let step = (r.next_u64() >> 56) as u8;
                v = v.wrapping_add(if step < 160 { 0 } else { step & 7 });
                buf[b * 64 + k] = v;
            }
        }
    }
    for byte in &mut buf[blocks * 64..] {
        *byte = r.next_u64() as u8;
    }
}

/// Records, as one contiguous array plus offsets.
struct Data {
    bytes: Vec<u8>,
    offsets: Vec<usize>,
}

impl Data {
    fn fixed(n: usize, width: usize) -> Data {
        let mut bytes = vec![0u8; n * width];
        bytes
            .par_chunks_mut(1 << 20)
            .enumerate()
            .for_each(|(i, c)| fill(c, i as u64));
        Data {
            bytes,
            offsets: (0..=n).map(|i| i * width).collect(),
        }
    }
    fn variable(total: usize, max: usize) -> Data {
        let mut r = Rng(99);
        let mut offsets = vec![0usize];
        while *offsets.last().unwrap() < total {
            let l = 1 + (r.next_u64() as usize % max);
            offsets.push(offsets.last().unwrap() + l);
        }
        let mut bytes = vec![0u8; *offsets.last().unwrap()];
        bytes
            .par_chunks_mut(1 << 20)
            .enumerate()
            .for_each(|(i, c)| fill(c, i as u64 + 7));
        Data { bytes, offsets }
    }
    fn n(&self) -> usize {
        self.offsets.len() - 1
    }
    fn rec(&self, i: usize) -> &[u8] {
        &self.bytes[self.offsets[i]..self.offsets[i + 1]]
    }
}

/// A destination buffer: a plain Vec (malloc puts large blocks 16 bytes past
/// a page boundary, where NumPy's land too) or a page-aligned one.
enum Dst {
    Vec(Vec<u8>),
    Aligned(AlignedBuf),
}
impl Dst {
    fn slice(&mut self) -> &mut [u8] {
        match self {
            Dst::Vec(v) => v,
            Dst::Aligned(a) => a,
        }
    }
}

/// Batches of random indices, with their destination offsets.
struct Batches {
    idx: Vec<Vec<u64>>,
    off: Vec<Vec<usize>>,
    max_bytes: usize,
}

fn batches(data: &Data, count: usize) -> Batches {
    let mut r = Rng(1234);
    let mut idx = Vec::new();
    let mut off = Vec::new();
    let mut max_bytes = 0;
    for _ in 0..count {
        let b: Vec<u64> = (0..BATCH).map(|_| r.next_u64() % data.n() as u64).collect();
        let mut o = vec![0usize];
        for &i in &b {
            o.push(o.last().unwrap() + data.rec(i as usize).len());
        }
        max_bytes = max_bytes.max(*o.last().unwrap());
        idx.push(b);
        off.push(o);
    }
    Batches {
        idx,
        off,
        max_bytes,
    }
}

/// Runs each contender round-robin over the batches, interleaved in
/// `ROUNDS` rounds so machine noise hits all of them alike; returns each
/// one's best GiB/s of destination bytes.
fn race(b: &Batches, total: Duration, fs: &mut [&mut dyn FnMut(usize)]) -> Vec<f64> {
    const ROUNDS: u32 = 4;
    for f in fs.iter_mut() {
        for k in 0..b.idx.len().min(8) {
            f(k); // warm up (maps pages, creates contexts)
        }
    }
    let slot = total / (ROUNDS * fs.len() as u32);
    let mut best = vec![0f64; fs.len()];
    for _ in 0..ROUNDS {
        for (f, best) in fs.iter_mut().zip(best.iter_mut()) {
            let t = Instant::now();
            let mut bytes = 0usize;
            let mut k = 0;
            while t.elapsed() < slot {
                f(k % b.idx.len());
                bytes += *b.off[k % b.idx.len()].last().unwrap();
                k += 1;
            }
            *best = best.max(bytes as f64 / t.elapsed().as_secs_f64() / (1u64 << 30) as f64);
        }
    }
    best
}

/// Contiguous blocks per worker, like the engine.
fn block(n: usize) -> usize {
    n.div_ceil(rayon::current_num_threads() * 4).max(1)
}

fn memcpy_ceiling<'a>(data: &'a Data, b: &'a Batches, dst: &'a mut [u8]) -> impl FnMut(usize) + 'a {
    move |k| {
        let off = &b.off[k];
        let idx = &b.idx[k];
        let mut slices: Vec<&mut [u8]> = Vec::with_capacity(BATCH);
        let mut rest = &mut dst[..*off.last().unwrap()];
        for w in off.windows(2) {
            let (h, t) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
            slices.push(h);
            rest = t;
        }
        let bl = block(BATCH);
        slices
            .par_chunks_mut(bl)
            .zip(idx.par_chunks(bl))
            .for_each(|(ds, ix)| {
                for (d, &i) in ds.iter_mut().zip(ix) {
                    d.copy_from_slice(data.rec(i as usize));
                }
            });
    }
}

fn zstd_ceiling<'a>(
    frames: &'a [Vec<u8>],
    b: &'a Batches,
    dst: &'a mut [u8],
) -> impl FnMut(usize) + 'a {
    move |k| {
        let off = &b.off[k];
        let idx = &b.idx[k];
        let mut slices: Vec<&mut [u8]> = Vec::with_capacity(BATCH);
        let mut rest = &mut dst[..*off.last().unwrap()];
        for w in off.windows(2) {
            let (h, t) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
            slices.push(h);
            rest = t;
        }
        let bl = block(BATCH);
        slices
            .par_chunks_mut(bl)
            .zip(idx.par_chunks(bl))
            .for_each_init(
                || zstd::bulk::Decompressor::new().unwrap(),
                |dc, (ds, ix)| {
                    for (d, &i) in ds.iter_mut().zip(ix) {
                        let n = dc
                            .decompress_to_buffer(&frames[i as usize], &mut d[..])
                            .unwrap();
                        assert_eq!(n, d.len());
                    }
                },
            );
    }
}

fn engine_gather<'a>(
    e: &'a Engine,
    b: &'a Batches,
    fixed: Option<usize>,
    dst: &'a mut [u8],
) -> impl FnMut(usize) + 'a {
    move |k| {
        let off = &b.off[k];
        match fixed {
            Some(w) => e.gather_fixed(&b.idx[k], w, &mut dst[..BATCH * w]).unwrap(),
            None => e.gather_var(&b.idx[k], dst, off).unwrap(),
        }
    }
}

fn build(dir: &Path, codec: Codec, data: &Data) -> Engine {
    let _ = std::fs::remove_dir_all(dir);
    let e = Engine::create(dir, &CreateOptions::new(codec)).unwrap();
    // Appends of about 64 MiB.
    let mut start = 0;
    while start < data.n() {
        let mut end = start;
        while end < data.n() && data.offsets[end] - data.offsets[start] < 64 << 20 {
            end += 1;
        }
        let base = data.offsets[start];
        let offs: Vec<usize> = data.offsets[start..=end].iter().map(|o| o - base).collect();
        e.append_var(&data.bytes[base..data.offsets[end]], &offs)
            .unwrap();
        start = end;
    }
    e
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let scale = if quick { 8 } else { 1 };
    let t = Duration::from_millis(if quick { 1200 } else { 2800 });
    let root: PathBuf = std::env::temp_dir().join(format!("engine_gather_{}", std::process::id()));
    println!(
        "engine gather, batch {BATCH}, random indices, {} threads{}",
        rayon::current_num_threads(),
        if quick { " (--quick)" } else { "" }
    );
    println!(
        "{:<22} {:<5} {:>9} {:>13} {:>11} {:>11} {:>13} {:>7} {:>7}",
        "records",
        "codec",
        "store MiB",
        "ceiling GiB/s",
        "mmap GiB/s",
        "pread GiB/s",
        "pread-al GiB/s",
        "mmap/c",
        "pread/c"
    );
    let cases: Vec<(&str, Data, Option<usize>)> = vec![
        (
            "fixed 256 KiB",
            Data::fixed(2048 / scale, 256 << 10),
            Some(256 << 10),
        ),
        (
            "fixed 4 KiB",
            Data::fixed(65536 / scale, 4 << 10),
            Some(4 << 10),
        ),
        (
            "variable 1 B..64 KiB",
            Data::variable((256 << 20) / scale, 64 << 10),
            None,
        ),
    ];
    for (name, data, fixed) in &cases {
        let b = batches(data, 64);
        let mut dsts = [
            Dst::Vec(vec![0u8; b.max_bytes]),
            Dst::Vec(vec![0u8; b.max_bytes]),
            Dst::Vec(vec![0u8; b.max_bytes]),
            Dst::Aligned(AlignedBuf::zeroed(b.max_bytes)),
        ];
        for codec in [Codec::Raw, Codec::Zstd] {
            let dir = root.join("store");
            let e = build(&dir, codec, data);
            let store_mib = e.stats().chunk_bytes as f64 / (1 << 20) as f64;
            drop(e);
            let frames: Vec<Vec<u8>> = match codec {
                Codec::Raw => Vec::new(),
                _ => (0..data.n())
                    .into_par_iter()
                    .map(|i| zstd::bulk::compress(data.rec(i), 3).unwrap())
                    .collect(),
            };
            let open = |rp| {
                let cfg = EngineConfig {
                    read_path: rp,
                    ..EngineConfig::default()
                };
                Engine::open_with(&dir, OpenMode::ReadOnly, cfg).unwrap()
            };
            let em = open(ReadPath::Mmap);
            let ep = open(ReadPath::Pread);
            let [d0, d1, d2, d3] = &mut dsts;
            let mut ceiling: Box<dyn FnMut(usize)> = match codec {
                Codec::Raw => Box::new(memcpy_ceiling(data, &b, d0.slice())),
                _ => Box::new(zstd_ceiling(&frames, &b, d0.slice())),
            };
            let mut mm = engine_gather(&em, &b, *fixed, d1.slice());
            let mut pr = engine_gather(&ep, &b, *fixed, d2.slice());
            let mut pa = engine_gather(&ep, &b, *fixed, d3.slice());
            let r = race(&b, t, &mut [&mut *ceiling, &mut mm, &mut pr, &mut pa]);
            drop((ceiling, mm, pr, pa));
            let (ceiling, mmap, pread, pread_al) = (r[0], r[1], r[2], r[3]);
            // Bit-exactness of one batch on each path, so the figures mean something.
            let last = b.idx.len() - 1;
            for e in [&em, &ep] {
                let dst = d1.slice();
                match fixed {
                    Some(w) => e
                        .gather_fixed(&b.idx[last], *w, &mut dst[..BATCH * w])
                        .unwrap(),
                    None => e.gather_var(&b.idx[last], dst, &b.off[last]).unwrap(),
                }
                for (k, &i) in b.idx[last].iter().enumerate() {
                    let r = data.rec(i as usize);
                    let at = fixed.map_or(b.off[last][k], |w| k * w);
                    assert!(&dst[at..at + r.len()] == r, "record {i} differs");
                }
            }
            drop((em, ep));
            println!(
                "{:<22} {:<5} {:>9.0} {:>13.2} {:>11.2} {:>11.2} {:>13.2} {:>7.2} {:>7.2}",
                name,
                codec.name(),
                store_mib,
                ceiling,
                mmap,
                pread,
                pread_al,
                mmap / ceiling,
                pread / ceiling
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    // Opening cost: the whole location table is read and validated.
    let n_open: usize = if quick { 1_000_000 } else { 10_000_000 };
    let dir = root.join("open");
    let e = Engine::create(&dir, &CreateOptions::new(Codec::Raw)).unwrap();
    let bytes: Vec<u8> = (0..n_open * 4).map(|i| i as u8).collect();
    for part in bytes.chunks(4_000_000) {
        e.append_fixed(part, 4).unwrap();
    }
    drop(e);
    let t0 = Instant::now();
    let e = Engine::open(&dir, OpenMode::ReadOnly).unwrap();
    let open_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(e.len(), n_open as u64);
    drop(e);
    println!("open of a store of {n_open} records (table in the page cache): {open_ms:.0} ms");
    let _ = std::fs::remove_dir_all(&root);
    println!(
        "ceiling: raw = memcpy-gather from one in-memory array; zstd = decoding the same frames from memory on all cores."
    );
    println!(
        "mmap/pread: engine read paths, destination a plain Vec (16 bytes past a page); pread-al: page-aligned destination."
    );
}
