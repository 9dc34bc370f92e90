//! zrecord-engine: the physical record store under `zrecord`, byte-compatible
//! with the stores of `loaderx` 1.7.2.
//!
//! A store is a directory of records of bytes, addressed `0..len`. Records
//! are appended in batches, gathered in batches into caller memory (in
//! parallel, decompressed straight into the destination), deleted by
//! swapping the last record into the hole, and compacted in place. The
//! engine knows no dtype or shape; the typed layer above it does.
//!
//! # Overview
//!
//! - [`Engine`]: one open store. [`Engine::create`] / [`Engine::open`]
//!   ([`OpenMode::ReadWrite`] takes an exclusive lock, [`OpenMode::ReadOnly`] a
//!   shared one). Appends ([`Engine::append_fixed`], [`Engine::append_var`],
//!   [`Engine::append_paired`]) and gathers ([`Engine::gather_fixed`],
//!   [`Engine::gather_var`]) take `&self` and run concurrently; delete and
//!   compact take `&mut self`.
//! - [`Codec`] and [`CreateOptions`]: raw, zstd (level 3), zstd with a
//!   dictionary (level 19, [`train_dictionary`]).
//! - [`Durability`]: appends become durable at [`Engine::sync`] /
//!   [`Engine::close`] (the default, with a roll-back to the last sync after
//!   a power cut) or on return.
//! - [`typed_header`]: read/write of the typed layer's `store.zr`.
//! - [`Engine::verify`] and [`VerifyReport`]: a full consistency check.
//! - [`AlignedBuf`]: page-aligned destination buffers.
//! - [`Error`]: every failure, naming the file, index or argument.
//!
//! The byte format is documented in `docs/format.md`.
//!
//! # Example
//!
//! ```
//! use zrecord_engine::{Codec, CreateOptions, Engine, OpenMode};
//!
//! let dir = tempfile::tempdir()?;
//! let store = dir.path().join("store");
//! {
//!     let engine = Engine::create(&store, &CreateOptions::new(Codec::Zstd))?;
//!     // Three records of 4 bytes each.
//!     let first = engine.append_fixed(b"aaaabbbbcccc", 4)?;
//!     assert_eq!(first, 0);
//!     // Two records of different widths.
//!     engine.append_var(b"hello, world", &[0, 5, 12])?;
//!     // Durable against a power cut (dropping the handle also syncs, but
//!     // cannot report a failure).
//!     engine.close()?;
//! }
//! let engine = Engine::open(&store, OpenMode::ReadOnly)?;
//! assert_eq!(engine.len(), 5);
//! let mut out = [0u8; 8];
//! engine.gather_fixed(&[2, 0], 4, &mut out)?;
//! assert_eq!(&out, b"ccccaaaa");
//! let mut text = [0u8; 12];
//! engine.gather_var(&[4, 3], &mut text, &[0, 7, 12])?;
//! assert_eq!(&text, b", worldhello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

// Positional reads and writes, advisory locks that leave readers alone,
// non-blocking opens and fork detection are Unix calls; Windows locks are
// mandatory (a locked meta.zr could not be read by other handles) and would
// need another design, not a shim.
#[cfg(not(unix))]
compile_error!(
    "zrecord-engine supports Unix systems (Linux, macOS); Windows is not supported (see the README's Platforms)"
);

mod aligned;
mod append;
mod codec;
mod deferred;
mod engine;
mod error;
mod fork;
#[doc(hidden)]
pub mod format;
#[doc(hidden)]
pub mod fuzzing;
mod gather;
mod intent;
mod maintain;
#[doc(hidden)]
pub mod sim;
mod table;
pub mod typed_header;
mod verify;
#[doc(hidden)]
pub mod vfs;
mod writeback;

pub use aligned::{AlignedBuf, PAGE};
pub use codec::{Codec, CreateOptions, train_dictionary};
pub use deferred::Durability;
pub use engine::{Engine, OpenMode, Stats};
#[doc(hidden)]
pub use engine::{EngineConfig, ReadPath};
pub use error::{Error, Result, error_chain};
pub use fork::pool_usable;
pub use verify::VerifyReport;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn engine_is_send_and_sync() {
        assert_send_sync::<Engine>();
        assert_send_sync::<AlignedBuf>();
    }
}
