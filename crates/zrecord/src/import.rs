//! What the store importers ([`npy::import_into`](crate::npy::import_into),
//! [`text::import_into`](crate::text::import_into)) report, and how they
//! size their batches.
//!
//! An import appends a file's rows to a [`DenseCore`](crate::DenseCore) in
//! batches of bounded size, so its memory does not depend on the file's
//! size: one batch buffer (and, for text, one window of parsed rows) at a
//! time.

/// Bytes per appended batch when the caller does not give `batch_rows`.
pub const DEFAULT_BATCH_BYTES: usize = 4 << 20;

/// What an import appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// Index of the first appended record (the store's length before).
    pub first: u64,
    /// Records appended.
    pub rows: u64,
    /// Append calls made (each at most `batch_rows` records).
    pub batches: u64,
}

/// Rows per batch: the caller's count (at least 1), else as many records as
/// fit [`DEFAULT_BATCH_BYTES`] (at least 1).
pub(crate) fn batch_rows_for(batch_rows: Option<usize>, record_bytes: usize) -> usize {
    match batch_rows {
        Some(n) => n.max(1),
        None => (DEFAULT_BATCH_BYTES / record_bytes.max(1)).max(1),
    }
}
