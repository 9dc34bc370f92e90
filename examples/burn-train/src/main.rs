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

use std::process::ExitCode;
use std::time::Instant;

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams};
use burn::prelude::*;
use loaderx::{Batch, DataLoader, Stream};

#[path = "../../common/task.rs"]
mod task;

use task::*;

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

fn run(steps: u64) -> Result<bool, BoxError> {
    let dir = tempfile::Builder::new()
        .prefix("zrecord-burn-train")
        .tempdir()?;
    let (x, y) = write_dataset(dir.path())?;

    let device = Device::flex().autodiff();
    device.seed(7);
    let opts = loader_options()?;
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
    Ok(report("burn", &losses, records, secs))
}

fn main() -> ExitCode {
    main_with("burn_train", run)
}
