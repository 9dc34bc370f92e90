//! loaderx: an endless, step-ordered, multi-threaded prefetch data loader
//! over zrecord stores.
//!
//! A training loop asks for batches forever; loaderx gathers them from
//! compressed, randomly addressable record stores at memory-bandwidth speed
//! and keeps a few ready ahead of the model.
//!
//! - [`Stream`]: one dense or ragged store, of any dtype, under a name.
//! - [`DataLoader`]: samples a batch of indices per step ([`zsampler`]),
//!   gathers every stream at the same indices into recycled buffers, runs
//!   your transform on a pool of workers and hands the results out in step
//!   order. It never ends an epoch: it is an [`Iterator`] of [`Step`]s.
//! - [`Batch`]: a gathered batch, read through typed views by name
//!   ([`Batch::dense`], [`Batch::ragged`]).
//! - [`LoaderOptions`]: batch size, sampler mode and seed, resume step,
//!   shard `(rank, world_size)` (or [`LoaderOptions::shard_from_env`] for
//!   torchrun / SLURM / MPI launchers), prefetch depth, workers, ordering.
//!
//! Every batch is a pure function of (seed, step), so a loader built with
//! `start_step: k` continues exactly where a run stopped at step `k`, and N
//! sharded processes together draw exactly the single-process stream.
//!
//! ```
//! use loaderx::{DataLoader, LoaderOptions, Stream};
//! use ndarray::Array2;
//! use zrecord::{Codec, CreateOptions, DenseStore};
//!
//! let dir = tempfile::tempdir()?;
//! let images = DenseStore::<f32>::create(dir.path().join("x"), &[4], &CreateOptions::new(Codec::Zstd))?;
//! images.append(Array2::<f32>::ones((100, 4)).view())?;
//! let labels = DenseStore::<i64>::create(dir.path().join("y"), &[], &CreateOptions::new(Codec::Raw))?;
//! labels.append(ndarray::Array1::from_iter(0..100i64).view())?;
//!
//! let opts = LoaderOptions { batch_size: 32, ..LoaderOptions::default() };
//! let loader = DataLoader::new(
//!     [("x", Stream::from(images)), ("y", Stream::from(labels))],
//!     opts,
//! )?;
//! for item in loader.take(10) {
//!     let batch = item?.value;
//!     assert_eq!(batch.dense::<f32>("x")?.shape(), &[32, 4]);
//!     assert_eq!(batch.dense::<i64>("y")?.shape(), &[32]);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod batch;
mod error;
mod loader;
mod stream;

pub use batch::{Batch, DenseColumn};
pub use error::{Error, Result};
pub use loader::{
    CLOSE_WAIT, DataLoader, LoaderOptions, MAX_PREFETCH, MAX_START_STEP, MAX_WORKERS, Step,
};
pub use stream::Stream;
pub use zrecord::error_chain;
pub use zsampler::Mode;

/// The project's `README.md`, whose Rust example is compiled and run as a
/// doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// `docs/training.md`: its loaderx examples are compiled and run as
/// doctests (the candle and burn excerpts are checked against the training
/// examples by their own tests).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/training.md")]
pub struct TrainingDocDoctests;
