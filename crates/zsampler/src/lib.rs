//! Batches of indices as a pure function of `(seed, step)`.
//!
//! `zsampler` decides which records a training step reads. Every batch is a
//! function of `(mode, n, batch_size, seed, step)` alone, so resuming a run is
//! a seek to a step — O(1) in every mode, with no epoch and no replay — and
//! nothing the size of the dataset is ever held in memory.
//!
//! # Overview
//! - [`Sampler`] — the public face: [`Sampler::batch_at`] fills a caller's
//!   `&mut [u64]` with any step's batch, without allocating
//!   ([`Sampler::batch_at_uninit`]: the same into uninitialised memory);
//!   [`Sampler::next_into`] and the [`Iterator`] implementation are an
//!   endless cursor over steps; [`Sampler::seek`] moves it.
//!   [`Sampler::sharded`] gives rank `r` of `w` processes a contiguous slice
//!   of every global batch, so all ranks together draw exactly the
//!   single-process stream whatever the world size.
//! - [`Mode`] — `Sequential` (a circular sliding window), `Iid` (uniform with
//!   replacement, unbiased), `Cyclic` (without replacement: a fresh keyed
//!   permutation each cycle).
//! - [`Permutation`] — the keyed bijection of `0..n` behind cyclic mode: a
//!   Feistel network with cycle walking, O(1) memory, invertible.
//! - [`CounterRng`] — the counter-based generator behind IID mode: word `d`
//!   is a pure function of `(seed, d)`; implements rand_core's `TryRng`,
//!   `Rng` and `SeedableRng`.
//! - [`Error`] — every invalid argument (`n = 0`, `batch_size = 0` or past
//!   [`MAX_BATCH_SIZE`], `rank >= world_size`, a short buffer) is an error,
//!   never a panic.
//!
//! # Example
//! ```
//! use zsampler::{Mode, Sampler};
//!
//! let mut sampler = Sampler::new(1_000_000, 256, Mode::Cyclic, 42)?;
//! let mut batch = vec![0u64; sampler.batch_len()];
//! sampler.next_into(&mut batch)?; // step 0
//! sampler.next_into(&mut batch)?; // step 1
//!
//! // Any step, without state: resuming is a seek.
//! assert_eq!(sampler.batch(1), batch);
//! sampler.seek(1);
//! assert_eq!(sampler.next(), Some(batch.clone()));
//!
//! // Rank 1 of 4 processes takes lanes 64..128 of every global batch.
//! let shard = Sampler::new(1_000_000, 256, Mode::Cyclic, 42)?.sharded(1, 4)?;
//! assert_eq!(shard.batch(1), batch[64..128]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod counter;
mod error;
mod permutation;
mod sampler;
mod slot;

pub use counter::CounterRng;
pub use error::{Error, Result};
pub use permutation::Permutation;
pub use sampler::{MAX_BATCH_SIZE, Mode, Sampler};

/// `docs/sampler.md`, whose Rust example is compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/sampler.md")]
pub struct SamplerDocDoctests;
