//! zrecord: typed, NumPy-compatible records over ndarray.
//!
//! This crate is the typed layer of the zrecord stack. It knows dtypes and
//! shapes; the byte engine below it knows neither.
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
pub mod index;
pub mod npy;
pub mod ragged;
pub mod text;

pub use dtype::{Bool, ByteOrder, Complex, DType, Element, Field, Identity, ScalarKind};
pub use error::{Error, NpyHeaderProblem, Result};
mod store;

pub use dense::{DenseCore, DenseStore};
pub use dict::{DictSource, DictTier, train_dict};
pub use index::{Indices, resolve};
pub use ragged::{RaggedBatch, RaggedCore, RaggedStore};
pub use store::{OpenOptions, check_equal_lengths, probe};
pub use zrecord_engine::typed_header::Kind;
pub use zrecord_engine::{AlignedBuf, Codec, CreateOptions, Stats};
