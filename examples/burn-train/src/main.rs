//! Trains a small classifier with burn on batches from the loaderx
//! DataLoader.
//!
//! The task is synthetic but learnable: `RECORDS` points in `DIM`
//! dimensions, drawn from `CLASSES` Gaussian blobs, written to two zstd
//! stores (`x`: f32 features, `y`: i64 labels). The loader plays the part of
//! burn's own `DataLoader` + `Batcher`: its transform turns each gathered
//! batch into burn tensors on the worker threads, and a hand-written burn
//! training loop (forward, `backward`, `GradientsParams`, Adam `step`)
//! consumes them. The loader is endless, so the loop counts steps, not
//! epochs. The program exits non-zero unless the loss of the last ten steps
//! is below half that of the first ten.
//!
//! It runs on burn's pure-Rust CPU backend (`flex`; burn 0.22 deprecates the
//! old `ndarray` backend in its favour), with autodiff.
//!
//! ```sh
//! cargo run --release -p burn-train -- --steps 300
//! ```
//!
//! Under a multi-process launcher (`RANK`/`WORLD_SIZE`, ...) each process
//! trains on its own disjoint slice of every global batch.

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams};
use burn::prelude::*;
use loaderx::{Batch, DataLoader, LoaderOptions, Mode, Stream};
use ndarray::{Array1, Array2};
use zrecord::{Codec, CreateOptions, DenseStore};

const RECORDS: usize = 8192;
const DIM: usize = 16;
const CLASSES: usize = 4;
const HIDDEN: usize = 32;
const BATCH: usize = 64;
const LEARNING_RATE: f64 = 3e-3;
/// Standard deviation of each blob: the classes overlap a little, so the
/// loss falls over a few hundred steps to a floor above zero.
const NOISE: f32 = 1.5;
const DEFAULT_STEPS: u64 = 300;
/// Steps averaged at each end of the run for the loss check.
const WINDOW: usize = 10;

type BoxError = Box<dyn Error + Send + Sync>;

/// A cheap deterministic hash, so the example needs no RNG crate.
fn hash(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A standard normal sample for `key` (Box-Muller over two hashed uniforms).
fn gauss(key: u64) -> f32 {
    let uniform = |k: u64| ((hash(k) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let (u1, u2) = (
        uniform(key.wrapping_mul(2)),
        uniform(key.wrapping_mul(2) + 1),
    );
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// Writes the blobs: class `c` is centred on a random point, each record is
/// that point plus Gaussian noise of deviation `NOISE`.
fn write_dataset(dir: &std::path::Path) -> Result<(DenseStore<f32>, DenseStore<i64>), BoxError> {
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

/// A batch as the model takes it: burn's `Batcher` output, made by the
/// loader's transform.
struct TrainBatch {
    features: Tensor<2>,
    targets: Tensor<1, Int>,
}

/// The collate step, run by the loader's workers: a gathered batch becomes
/// `features [B, DIM]` and `targets [B]` on `device`.
fn to_tensors(batch: &Batch, device: &Device) -> Result<TrainBatch, BoxError> {
    let x = batch.dense::<f32>("x")?;
    let rows = x.shape()[0];
    let x = x.as_standard_layout();
    let xs = x
        .as_slice()
        .ok_or("a standard-layout array is contiguous")?;
    let features = Tensor::from_data(TensorData::new(xs.to_vec(), [rows, DIM]), device);
    // Check the class range here so a bad label is an error of this batch,
    // not a panic inside the loss.
    let labels = batch.dense::<i64>("y")?;
    if let Some(bad) = labels.iter().find(|&&l| !(0..CLASSES as i64).contains(&l)) {
        return Err(format!("label {bad} out of range at step {}", batch.step()).into());
    }
    let labels: Vec<i64> = labels.iter().copied().collect();
    let targets = Tensor::from_data(TensorData::new(labels, [rows]), device);
    Ok(TrainBatch { features, targets })
}

#[derive(Module, Debug)]
struct Mlp {
    hidden: Linear,
    activation: Relu,
    out: Linear,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        Mlp {
            hidden: LinearConfig::new(DIM, HIDDEN).init(device),
            activation: Relu::new(),
            out: LinearConfig::new(HIDDEN, CLASSES).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.out
            .forward(self.activation.forward(self.hidden.forward(x)))
    }
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

fn run(steps: u64) -> Result<bool, BoxError> {
    let dir = tempfile::Builder::new()
        .prefix("zrecord-burn-train")
        .tempdir()?;
    let (x, y) = write_dataset(dir.path())?;

    let device = Device::flex().autodiff();
    device.seed(7);
    let opts = LoaderOptions {
        batch_size: BATCH,
        mode: Mode::Cyclic,
        workers: 2,
        prefetch: 4,
        ..LoaderOptions::default()
    }
    .shard_from_env()?;
    let streams = [("x", Stream::from(x)), ("y", Stream::from(y))];
    let worker_device = device.clone();
    let loader = DataLoader::with_transform(streams, opts, move |batch: Batch| {
        to_tensors(&batch, &worker_device)
    })?;

    let mut model = Mlp::new(&device);
    let mut optimizer = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);

    let t = Instant::now();
    let mut losses = Vec::with_capacity(steps as usize);
    let mut records = 0;
    for item in loader.take(steps as usize) {
        let item = item?;
        let TrainBatch { features, targets } = item.value;
        // This process's share of the global batch (all of it unsharded).
        records = features.dims()[0];
        let logits = model.forward(features);
        let loss = loss_fn.forward(logits.clone(), targets.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(LEARNING_RATE, model, grads);
        let loss = loss.into_scalar::<f32>();
        losses.push(loss);
        if item.step % (steps / 10).max(1) == 0 || item.step + 1 == steps {
            let accuracy = logits
                .detach()
                .argmax(1)
                .squeeze_dim::<1>(1)
                .equal(targets)
                .float()
                .mean()
                .into_scalar::<f32>();
            println!(
                "step {:4}  loss {loss:.4}  batch accuracy {accuracy:.3}",
                item.step
            );
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let first = mean(&losses[..WINDOW]);
    let last = mean(&losses[losses.len() - WINDOW..]);
    println!(
        "burn: {} steps of {records} records in {secs:.2} s ({:.0} steps/s); mean loss of the first {WINDOW} steps {first:.4}, of the last {WINDOW} {last:.4} ({:.2}x)",
        losses.len(),
        losses.len() as f64 / secs,
        last / first,
    );
    Ok(last < 0.5 * first)
}

fn main() -> ExitCode {
    let steps = match parse_steps() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("burn_train: {e}");
            return ExitCode::from(2);
        }
    };
    match run(steps) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("burn_train: the loss did not fall below half its starting value");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("burn_train: {e}");
            ExitCode::FAILURE
        }
    }
}
