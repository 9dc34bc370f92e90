//! The synthetic task both training examples share, and their command line:
//! Gaussian blobs written to two zstd stores, the loader's options, the
//! `--steps N` argument and the loss check. Included by each example with
//! `#[path]`, so each stays one self-contained program to read.

use std::error::Error;
use std::process::ExitCode;

use loaderx::{LoaderOptions, Mode};
use ndarray::{Array1, Array2};
use zrecord::{Codec, CreateOptions, DenseStore};

pub const RECORDS: usize = 8192;
pub const DIM: usize = 16;
pub const CLASSES: usize = 4;
pub const HIDDEN: usize = 32;
pub const BATCH: usize = 64;
pub const LEARNING_RATE: f64 = 3e-3;
/// Standard deviation of each blob: the classes overlap a little, so the
/// loss falls over a few hundred steps to a floor above zero.
pub const NOISE: f32 = 1.5;
pub const DEFAULT_STEPS: u64 = 300;
/// Steps averaged at each end of the run for the loss check.
pub const WINDOW: usize = 10;

pub type BoxError = Box<dyn Error + Send + Sync>;

/// A cheap deterministic hash, so the example needs no RNG crate.
pub fn hash(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A standard normal sample for `key` (Box-Muller over two hashed uniforms).
pub fn gauss(key: u64) -> f32 {
    let uniform = |k: u64| ((hash(k) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let (u1, u2) = (
        uniform(key.wrapping_mul(2)),
        uniform(key.wrapping_mul(2) + 1),
    );
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// Writes the blobs: class `c` is centred on a random point, each record is
/// that point plus Gaussian noise of deviation `NOISE`.
pub fn write_dataset(
    dir: &std::path::Path,
) -> Result<(DenseStore<f32>, DenseStore<i64>), BoxError> {
    let labels = Array1::from_shape_fn(RECORDS, |i| (hash(i as u64) % CLASSES as u64) as i64);
    let centre = |c: usize, d: usize| gauss((1 << 40) + (c * DIM + d) as u64);
    let features = Array2::from_shape_fn((RECORDS, DIM), |(i, d)| {
        centre(labels[i] as usize, d) + NOISE * gauss((i * DIM + d) as u64)
    });
    let zstd = CreateOptions::new(Codec::Zstd);
    let x = DenseStore::<f32>::create(dir.join("x"), &[DIM as u64], &zstd)?;
    x.append(features.view())?;
    let y = DenseStore::<i64>::create(dir.join("y"), &[], &zstd)?;
    y.append(labels.view())?;
    x.sync()?;
    y.sync()?;
    Ok((x, y))
}

/// The loader's options for both examples: cyclic batches of `BATCH`, two
/// transform workers, and the shard a multi-process launcher sets, if any.
pub fn loader_options() -> Result<LoaderOptions, BoxError> {
    Ok(LoaderOptions {
        batch_size: BATCH,
        mode: Mode::Cyclic,
        workers: 2,
        prefetch: 4,
        ..LoaderOptions::default()
    }
    .shard_from_env()?)
}

fn parse_steps() -> Result<u64, String> {
    let mut steps = DEFAULT_STEPS;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--steps" => {
                let v = args.next().ok_or("--steps needs a value")?;
                steps = v
                    .parse()
                    .map_err(|_| format!("--steps {v:?} is not a number"))?;
            }
            other => return Err(format!("unknown argument {other:?} (usage: --steps N)")),
        }
    }
    if steps < 2 * WINDOW as u64 {
        return Err(format!("--steps must be at least {}", 2 * WINDOW));
    }
    Ok(steps)
}

fn mean(xs: &[f32]) -> f32 {
    xs.iter().sum::<f32>() / xs.len() as f32
}

/// Prints the run's summary line and says whether the mean loss of the last
/// `WINDOW` steps is below half that of the first `WINDOW`.
pub fn report(framework: &str, losses: &[f32], records: usize, secs: f64) -> bool {
    let first = mean(&losses[..WINDOW]);
    let last = mean(&losses[losses.len() - WINDOW..]);
    println!(
        "{framework}: {} steps of {records} records in {secs:.2} s ({:.0} steps/s); mean loss of the first {WINDOW} steps {first:.4}, of the last {WINDOW} {last:.4} ({:.2}x)",
        losses.len(),
        losses.len() as f64 / secs,
        last / first,
    );
    last < 0.5 * first
}

/// `e` and its causes, joined with ": " (loaderx's errors keep their
/// cause in `source()`, not in their message).
pub use loaderx::error_chain as chain;

/// The program: parse `--steps`, train with `run`, and exit 0 only if the
/// loss halved (2 on a bad argument, 1 on a failure), naming `program`.
pub fn main_with(program: &str, run: fn(u64) -> Result<bool, BoxError>) -> ExitCode {
    let steps = match parse_steps() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{program}: {e}");
            return ExitCode::from(2);
        }
    };
    match run(steps) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("{program}: the loss did not fall below half its starting value");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{program}: {}", chain(&*e));
            ExitCode::FAILURE
        }
    }
}
