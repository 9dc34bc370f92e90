//! Trains a small classifier with candle on batches from the loaderx
//! DataLoader.
//!
//! The task is synthetic but learnable: `RECORDS` points in `DIM`
//! dimensions, drawn from `CLASSES` Gaussian blobs, written to two zstd
//! stores (`x`: f32 features, `y`: i64 labels). The loader's transform is the
//! collate step: it turns each gathered batch into candle tensors on the
//! worker threads, so the training loop only runs the model. A two-layer MLP
//! is trained with AdamW, and the program exits non-zero unless the loss of
//! the last ten steps is below half that of the first ten.
//!
//! ```sh
//! cargo run --release -p candle-train -- --steps 300
//! ```
//!
//! Under a multi-process launcher (`RANK`/`WORLD_SIZE`, ...) each process
//! trains on its own disjoint slice of every global batch.

use std::process::ExitCode;
use std::time::Instant;

use candle_core::{D, DType, Device, Tensor};
use candle_nn::{AdamW, Linear, Module, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use loaderx::{Batch, DataLoader, Stream};

#[path = "../../common/task.rs"]
mod task;

use task::*;

/// The collate step, run by the loader's workers: a gathered batch becomes
/// `(features [B, DIM] f32, labels [B] u32)` on `device`.
fn to_tensors(batch: &Batch, device: &Device) -> Result<(Tensor, Tensor), BoxError> {
    let x = batch.dense::<f32>("x")?;
    let rows = x.shape()[0];
    let x = x.as_standard_layout();
    let xs = x
        .as_slice()
        .ok_or("a standard-layout array is contiguous")?;
    let x = Tensor::from_slice(xs, (rows, DIM), device)?;
    // candle's losses index with u32 (or i64) class ids; check the range here
    // so a bad label is an error of this batch, not a panic in the model.
    let labels = batch
        .dense::<i64>("y")?
        .iter()
        .map(|&l| {
            u32::try_from(l)
                .ok()
                .filter(|&l| (l as usize) < CLASSES)
                .ok_or_else(|| format!("label {l} out of range at step {}", batch.step()))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let y = Tensor::from_vec(labels, rows, device)?;
    Ok((x, y))
}

struct Mlp {
    hidden: Linear,
    out: Linear,
}

impl Mlp {
    fn new(vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Mlp {
            hidden: candle_nn::linear(DIM, HIDDEN, vb.pp("hidden"))?,
            out: candle_nn::linear(HIDDEN, CLASSES, vb.pp("out"))?,
        })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.out.forward(&self.hidden.forward(x)?.relu()?)
    }
}

/// Re-initialises every parameter from the hash, so that runs repeat
/// exactly: candle cannot seed its CPU generator. Weights are uniform in
/// `±1/sqrt(fan_in)` (candle's own default), biases zero.
fn seed_parameters(varmap: &VarMap, device: &Device) -> Result<(), BoxError> {
    let vars = varmap
        .data()
        .lock()
        .map_err(|_| "the VarMap lock is poisoned")?;
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort();
    for (k, name) in names.into_iter().enumerate() {
        let var = &vars[name];
        let dims = var.dims().to_vec();
        let values: Vec<f32> = match dims[..] {
            [_, fan_in] => {
                let bound = 1.0 / (fan_in as f32).sqrt();
                (0..dims.iter().product::<usize>())
                    .map(|i| {
                        let u = (hash(((k as u64) << 32) + i as u64) >> 40) as f32
                            / (1u64 << 24) as f32;
                        bound * (2.0 * u - 1.0)
                    })
                    .collect()
            }
            _ => vec![0.0; dims.iter().product()],
        };
        var.set(&Tensor::from_vec(values, dims, device)?)?;
    }
    Ok(())
}

fn run(steps: u64) -> Result<bool, BoxError> {
    let dir = tempfile::Builder::new()
        .prefix("zrecord-candle-train")
        .tempdir()?;
    let (x, y) = write_dataset(dir.path())?;

    let device = Device::Cpu;
    let opts = loader_options()?;
    let streams = [("x", Stream::from(x)), ("y", Stream::from(y))];
    let worker_device = device.clone();
    let loader = DataLoader::with_transform(streams, opts, move |batch: Batch| {
        to_tensors(&batch, &worker_device)
    })?;

    let varmap = VarMap::new();
    let model = Mlp::new(VarBuilder::from_varmap(&varmap, DType::F32, &device))?;
    seed_parameters(&varmap, &device)?;
    let params = ParamsAdamW {
        lr: LEARNING_RATE,
        ..ParamsAdamW::default()
    };
    let mut opt = AdamW::new(varmap.all_vars(), params)?;

    let t = Instant::now();
    let mut losses = Vec::with_capacity(steps as usize);
    let mut records = 0;
    for item in loader.take(steps as usize) {
        let item = item?;
        let (x, y) = item.value;
        // This process's share of the global batch (all of it unsharded).
        records = x.dims()[0];
        let logits = model.forward(&x)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &y)?;
        opt.backward_step(&loss)?;
        let loss = loss.to_scalar::<f32>()?;
        losses.push(loss);
        if item.step % (steps / 10).max(1) == 0 || item.step + 1 == steps {
            let accuracy = logits
                .argmax(D::Minus1)?
                .eq(&y)?
                .to_dtype(DType::F32)?
                .mean_all()?
                .to_scalar::<f32>()?;
            println!(
                "step {:4}  loss {loss:.4}  batch accuracy {accuracy:.3}",
                item.step
            );
        }
    }
    let secs = t.elapsed().as_secs_f64();
    Ok(report("candle", &losses, records, secs))
}

fn main() -> ExitCode {
    main_with("candle_train", run)
}
