//! The one error type of this crate.

/// Everything that can go wrong when building a [`Sampler`](crate::Sampler),
/// a [`Permutation`](crate::Permutation) or filling a caller's buffer.
///
/// Every variant names the offending value, so a message is actionable
/// without a debugger. Nothing in this crate panics on a caller's input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The index space is empty (`n == 0`): there is nothing to draw from.
    #[error("the index space is empty (n = 0): there is nothing to sample")]
    EmptyIndexSpace,
    /// `batch_size == 0`.
    #[error("batch_size is 0: a batch must hold at least one index")]
    ZeroBatch,
    /// `batch_size` exceeds [`MAX_BATCH_SIZE`](crate::MAX_BATCH_SIZE): no
    /// buffer of that many indices can be a real batch (or, past
    /// `isize::MAX / 8`, be allocated at all).
    #[error("batch_size {batch_size} exceeds the maximum of {max} indices per batch")]
    BatchTooLarge {
        /// The batch size asked for.
        batch_size: usize,
        /// [`MAX_BATCH_SIZE`](crate::MAX_BATCH_SIZE).
        max: usize,
    },
    /// `world_size == 0`.
    #[error("world_size is 0: there must be at least one rank")]
    ZeroWorld,
    /// `rank >= world_size`.
    #[error("rank {rank} is out of range for world_size {world} (ranks are 0..{world})")]
    RankOutOfRange {
        /// The rank asked for.
        rank: usize,
        /// The world size it was checked against.
        world: usize,
    },
    /// More ranks than indices in a global batch: some rank would get an
    /// empty slice of every batch, which stalls collective training steps.
    #[error(
        "world_size {world} exceeds the global batch of {global} indices{}: \
         every rank needs at least one index per step",
        cut_batch(*.global, *.batch_size)
    )]
    WorldExceedsBatch {
        /// The world size asked for.
        world: usize,
        /// The global batch length (batch_size, or n in cyclic mode when n < batch_size).
        global: usize,
        /// The batch size asked for (more than `global` when a cyclic
        /// sampler's `n` cut every batch to `n`).
        batch_size: usize,
    },
    /// The caller's buffer cannot hold one batch.
    #[error("output buffer holds {got} indices but a batch needs {needed}")]
    BufferTooSmall {
        /// Indices the batch needs (this rank's batch length).
        needed: usize,
        /// Length of the buffer given.
        got: usize,
    },
    /// A mode number that is not 0 (sequential), 1 (IID) or 2 (cyclic).
    #[error("unknown sampler mode {0}: expected 0 (sequential), 1 (iid) or 2 (cyclic)")]
    UnknownMode(u8),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// For [`Error::WorldExceedsBatch`]: where a global batch shorter than the
/// batch size asked for comes from.
fn cut_batch(global: usize, batch_size: usize) -> String {
    if global < batch_size {
        format!(" (batch_size {batch_size}, cut to n = {global}: a cyclic batch repeats no index)")
    } else {
        String::new()
    }
}
