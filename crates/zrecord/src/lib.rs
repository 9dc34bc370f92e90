//! zrecord: typed, NumPy-compatible records over ndarray.
//!
//! This crate is the typed layer of the zrecord stack. It knows dtypes and
//! shapes; the byte engine below it knows neither.
//!
//! A store is a directory of NumPy-typed records, byte-compatible with the
//! stores of loaderx 1.7.2 in both directions, read back as `ndarray` arrays:
//!
//! - [`DenseStore<T>`] / [`DenseCore`]: one dtype and item shape for every
//!   record; a gather is one `(batch, *item_shape)` array, or fills a
//!   caller's buffer without allocating.
//! - [`RaggedStore<T>`] / [`RaggedCore`]: one dtype, each record with its
//!   own shape (scalars to any rank); a gather is a `Vec<ArrayD<T>>`, or
//!   fills a reusable [`RaggedBatch`].
//! - The `*Core` types know their dtype at run time and move bytes (any
//!   dtype, structured and big-endian included; what the Python binding
//!   uses). The typed handles wrap a core and check `T` once, at open.
//! - [`Indices`] and [`resolve`]: one index, negative from the end, a slice
//!   with a step, a list, a boolean mask.
//! - [`train_dict`] with a [`DictTier`]: the dictionary of a
//!   [`Codec::ZstdDict`] store.
//! - [`OpenOptions`] (read-only handles share a store; expected dtype,
//!   shape and codec), [`probe`] ([`probe_to_create`] for a create-or-open),
//!   [`check_equal_lengths`].
//! - [`Durability`]: an append is visible at once and survives its process
//!   being killed; by default it becomes durable against a power cut at
//!   `sync()` or `close()` (a power cut before that rolls the store back to
//!   the last sync), or, with [`Durability::EachAppend`], on return.
//!
//! ```
//! use ndarray::{Array2, array};
//! use zrecord::{Codec, CreateOptions, DenseStore, Indices, OpenOptions, RaggedStore};
//!
//! let dir = tempfile::tempdir()?;
//! // Rows of three f32.
//! let rows = DenseStore::<f32>::create(dir.path().join("rows"), &[3], &CreateOptions::new(Codec::Zstd))?;
//! rows.append(Array2::from_shape_fn((4, 3), |(i, j)| (i * 3 + j) as f32).view())?;
//! let batch = rows.gather(Indices::List(&[-1, 0]))?;
//! assert_eq!(batch.shape(), &[2, 3]);
//! assert_eq!(batch[[0, 2]], 11.0);
//!
//! // Token sequences of any length.
//! let seqs = RaggedStore::<i32>::create(dir.path().join("seqs"), &CreateOptions::new(Codec::Raw))?;
//! seqs.append([array![1, 2, 3].view(), array![4].view()])?;
//! seqs.close()?; // durable; dropping also syncs but cannot report a failure
//! let seqs = RaggedStore::<i32>::open_with(dir.path().join("seqs"), &OpenOptions::read_only())?;
//! assert_eq!(seqs.len(), 2);
//! assert_eq!(seqs.get(-1)?, array![4].into_dyn());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - [`dtype`]: [`DType`] (NumPy dtype strings and structured `descr` lists),
//!   the persisted type identity (MessagePack, byte-identical to loaderx
//!   1.7.2), and the [`Element`] trait mapping Rust types to dtypes.
//! - [`Error`]: the crate's single error type.
//!
//! ```
//! use zrecord::{DType, Element};
//! let dt = DType::parse("<f4")?;
//! assert_eq!(dt, f32::dtype());
//! assert_eq!(dt.itemsize(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod dense;
pub mod dict;
pub mod dtype;
pub mod error;
pub mod import;
pub mod index;
pub mod npy;
pub mod ragged;
pub mod text;

pub use dtype::{Bool, ByteOrder, Complex, DType, Element, Field, Identity, ScalarKind};
pub use error::{Error, NpyHeaderProblem, Result};
pub use import::Imported;
pub use zrecord_engine::error_chain;
mod store;

pub use dense::{DenseCore, DenseStore};
pub use dict::{DictSource, DictTier, train_dict};
pub use index::{Indices, resolve};
pub use ragged::{RaggedBatch, RaggedCore, RaggedStore};
pub use store::{OpenOptions, check_equal_lengths, probe, probe_to_create};
pub use zrecord_engine::typed_header::Kind;
pub use zrecord_engine::{AlignedBuf, Codec, CreateOptions, Durability, Stats, VerifyReport};

/// The user guide (`docs/guide.md`), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide.md")]
pub struct GuideDoctests;
