//! Per-batch cost of zsampler in each mode beside `rand`'s `SmallRng` with
//! `random_range` filling the same buffer, in the same run.
//!
//! Run: `cargo run --release -p benches --bin sampler`
//!
//! Prints ns per batch and per index; `peer/ours` > 1 means zsampler is
//! faster than SmallRng + random_range (a stateful generator that cannot seek).
//! `uninit ns/b` is the same batch through `batch_at_uninit` into a
//! `MaybeUninit` buffer (what the Python binding fills a fresh array with).

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::hint::black_box;
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};
use zsampler::{Mode, Sampler};

/// Index-space size: not a power of two, so rejection and cycle walking
/// are exercised (the Feistel domain is 2^20, n/domain = 0.95).
const N: u64 = 1_000_003;
const BATCHES: [usize; 3] = [256, 1024, 8192];
/// Wall time spent per measurement round; best of `ROUNDS`.
const ROUND: Duration = Duration::from_millis(200);
const ROUNDS: usize = 5;

/// Best-of-ROUNDS mean nanoseconds per call of `f(step)`.
fn time_per_batch(mut f: impl FnMut(u64)) -> f64 {
    let mut best = f64::INFINITY;
    let mut step = 0u64;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut calls = 0u64;
        while start.elapsed() < ROUND {
            for _ in 0..16 {
                f(step);
                step += 1;
            }
            calls += 16;
        }
        best = best.min(start.elapsed().as_nanos() as f64 / calls as f64);
    }
    best
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("zsampler vs rand 0.10 SmallRng::random_range, n = {N}");
    println!(
        "{:>6}  {:<10} {:>12} {:>10} {:>12} {:>10} {:>12}",
        "batch", "mode", "ours ns/b", "ns/index", "peer ns/b", "peer/ours", "uninit ns/b"
    );
    for &batch in &BATCHES {
        let mut buf = vec![0u64; batch];
        let mut raw = vec![MaybeUninit::<u64>::uninit(); batch];
        let mut rng = SmallRng::seed_from_u64(42);
        let peer = time_per_batch(|_| {
            for o in buf.iter_mut() {
                *o = rng.random_range(0..N);
            }
            black_box(&buf);
        });
        for (name, mode) in [
            ("sequential", Mode::Sequential),
            ("iid", Mode::Iid),
            ("cyclic", Mode::Cyclic),
        ] {
            let sampler = Sampler::new(N, batch, mode, 42)?;
            let ours = time_per_batch(|step| {
                // The pure function: the cursor is only `step`.
                let _ = sampler.batch_at(black_box(step), &mut buf);
                black_box(&buf);
            });
            let uninit = time_per_batch(|step| {
                let _ = sampler.batch_at_uninit(black_box(step), &mut raw);
                black_box(&raw);
            });
            println!(
                "{batch:>6}  {name:<10} {ours:>12.0} {:>10.2} {peer:>12.0} {:>10.2} {uninit:>12.0}",
                ours / batch as f64,
                peer / ours
            );
        }
    }
    Ok(())
}
