//! The sampler: modes, sharding, and the pure `(step) -> batch` function.

use crate::counter::{Key, bounded, mix64};
use crate::permutation::Permutation;
use crate::slot::Slot;
use crate::{Error, Result};
use std::mem::MaybeUninit;

/// How indices are drawn. The numbering matches the reference package's
/// `Sampler.Mode` (and its C ABI), so a mode crosses the Python boundary as a
/// `u8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Mode {
    /// A sliding window over `0..n` treated as a circular queue: step `s`
    /// covers `s*B .. s*B + B` modulo `n`; it wraps and never truncates.
    Sequential = 0,
    /// Uniform with replacement, unbiased (Lemire's multiply-shift with
    /// rejection).
    Iid = 1,
    /// Without replacement: each cycle walks a fresh keyed permutation of
    /// `0..n`; every batch holds exactly `batch_size` indices and the cycle's
    /// last `n % batch_size` positions are dropped. When `n < batch_size`,
    /// each step is its own cycle: one short batch of all `n` indices.
    /// The reference loader's default.
    #[default]
    Cyclic = 2,
}

impl TryFrom<u8> for Mode {
    type Error = Error;

    fn try_from(value: u8) -> Result<Mode> {
        match value {
            0 => Ok(Mode::Sequential),
            1 => Ok(Mode::Iid),
            2 => Ok(Mode::Cyclic),
            other => Err(Error::UnknownMode(other)),
        }
    }
}

impl From<Mode> for u8 {
    fn from(mode: Mode) -> u8 {
        mode as u8
    }
}

/// Largest `batch_size` a [`Sampler`] accepts: 2^32 indices (on 64-bit
/// targets; `isize::MAX / 8` on narrower ones, the most `u64`s one buffer can
/// hold there).
///
/// A batch is materialised as one buffer of `u64` indices, so 2^32 of them is
/// already 32 GiB, orders of magnitude past any training batch, while a
/// larger value is certainly a mistake (e.g. a sentinel or an unsigned
/// wrap-around): past `isize::MAX / 8` [`Sampler::batch`] could not even
/// allocate its result and would panic. Refusing it in [`Sampler::new`] makes
/// the error appear where the value is given.
pub const MAX_BATCH_SIZE: usize = if usize::BITS >= 64 {
    (1u64 << 32) as usize
} else {
    isize::MAX as usize / 8
};

/// Batches of indices into `0..n`, each a pure function of
/// `(mode, n, batch_size, seed, step)` and of the shard `(rank, world_size)`.
///
/// [`Sampler::batch_at`] computes any step's batch without state;
/// the [`Iterator`] implementation and [`Sampler::next_into`] are a cursor
/// over it, and [`Sampler::seek`] moves the cursor in O(1) in every mode.
///
/// With [`Sampler::sharded`], rank `r` of `w` gets lanes
/// `G*r/w .. G*(r+1)/w` of every global batch of `G` indices: the ranks
/// together draw exactly the single-process stream, whatever `w` is.
///
/// ```
/// use zsampler::{Mode, Sampler};
///
/// let global = Sampler::new(1_000, 8, Mode::Iid, 7)?;
/// let rank1 = Sampler::new(1_000, 8, Mode::Iid, 7)?.sharded(1, 2)?;
/// assert_eq!(rank1.batch(5), global.batch(5)[4..8]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Sampler {
    n: u64,
    batch_size: usize,
    mode: Mode,
    seed: u64,
    rank: usize,
    world: usize,
    /// Length of a global batch.
    global: usize,
    /// This rank's lanes of the global batch: `lo..hi`.
    lo: usize,
    hi: usize,
    /// Cyclic: full batches per cycle (0 when `n < batch_size`).
    per_cycle: u64,
    /// IID: stream key and Lemire threshold `2^64 mod n`.
    key: Key,
    threshold: u64,
    /// Cyclic: per-seed base for the per-cycle permutation keys.
    cycle_base: u64,
    step: u64,
}

impl Sampler {
    /// A single-process sampler over `0..n`, positioned at step 0.
    ///
    /// # Errors
    /// [`Error::EmptyIndexSpace`] if `n == 0`, [`Error::ZeroBatch`] if
    /// `batch_size == 0`, [`Error::BatchTooLarge`] if `batch_size` exceeds
    /// [`MAX_BATCH_SIZE`].
    pub fn new(n: u64, batch_size: usize, mode: Mode, seed: u64) -> Result<Sampler> {
        if n == 0 {
            return Err(Error::EmptyIndexSpace);
        }
        if batch_size == 0 {
            return Err(Error::ZeroBatch);
        }
        if batch_size > MAX_BATCH_SIZE {
            return Err(Error::BatchTooLarge {
                batch_size,
                max: MAX_BATCH_SIZE,
            });
        }
        let (global, per_cycle) = match mode {
            Mode::Cyclic if (n as u128) < batch_size as u128 => (n as usize, 0),
            Mode::Cyclic => (batch_size, n / batch_size as u64),
            Mode::Sequential | Mode::Iid => (batch_size, 0),
        };
        Ok(Sampler {
            n,
            batch_size,
            mode,
            seed,
            rank: 0,
            world: 1,
            global,
            lo: 0,
            hi: global,
            per_cycle,
            key: Key::new(seed),
            threshold: n.wrapping_neg() % n,
            cycle_base: mix64(seed ^ 0x3c6e_f372_fe94_f82b),
            step: 0,
        })
    }

    /// This sampler restricted to rank `rank` of `world_size` processes: the
    /// contiguous lanes `G*rank/world .. G*(rank+1)/world` of every global
    /// batch of `G` indices. The step is kept.
    ///
    /// # Errors
    /// [`Error::ZeroWorld`], [`Error::RankOutOfRange`] if `rank >= world_size`,
    /// [`Error::WorldExceedsBatch`] if some rank would get no index.
    pub fn sharded(self, rank: usize, world_size: usize) -> Result<Sampler> {
        if world_size == 0 {
            return Err(Error::ZeroWorld);
        }
        if rank >= world_size {
            return Err(Error::RankOutOfRange {
                rank,
                world: world_size,
            });
        }
        if world_size > self.global {
            return Err(Error::WorldExceedsBatch {
                world: world_size,
                global: self.global,
                batch_size: self.batch_size,
            });
        }
        // No new length is set here: a rank's lanes are a slice of the
        // global batch, which `new` bounded by MAX_BATCH_SIZE.
        let split = |r: usize| (self.global as u128 * r as u128 / world_size as u128) as usize;
        Ok(Sampler {
            rank,
            world: world_size,
            lo: split(rank),
            hi: split(rank + 1),
            ..self
        })
    }

    /// Size of the index space.
    pub const fn n(&self) -> u64 {
        self.n
    }

    /// The batch size asked for.
    pub const fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The mode.
    pub const fn mode(&self) -> Mode {
        self.mode
    }

    /// The seed.
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// This process's rank (0 unless [`Self::sharded`]).
    pub const fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes sharing the stream (1 unless [`Self::sharded`]).
    pub const fn world_size(&self) -> usize {
        self.world
    }

    /// Indices in one global batch: `batch_size`, except `n` in cyclic mode
    /// when `n < batch_size`.
    pub const fn global_batch_len(&self) -> usize {
        self.global
    }

    /// Indices in this rank's share of every batch (the whole global batch
    /// when not sharded). Constant across steps.
    pub const fn batch_len(&self) -> usize {
        self.hi - self.lo
    }

    /// This rank's lanes of the global batch.
    pub const fn shard_range(&self) -> std::ops::Range<usize> {
        self.lo..self.hi
    }

    /// The step the cursor will produce next.
    pub const fn step(&self) -> u64 {
        self.step
    }

    /// Moves the cursor to `step` (O(1) in every mode).
    pub const fn seek(&mut self, step: u64) {
        self.step = step;
    }

    /// Writes this rank's share of batch `step` into `out[..batch_len()]` and
    /// returns `batch_len()`. Pure: no state is read but the configuration,
    /// nothing is allocated. Elements of `out` past `batch_len()` are left as
    /// they were.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] if `out.len() < batch_len()`; nothing is
    /// written then.
    pub fn batch_at(&self, step: u64, out: &mut [u64]) -> Result<usize> {
        self.fill_at(step, out)
    }

    /// [`Self::batch_at`] into memory that need not be initialised (e.g. a
    /// freshly allocated array, which would otherwise be zeroed only to be
    /// overwritten): the same values, by the same code.
    ///
    /// On `Ok(len)`, every element of `out[..len]` has been written, so the
    /// caller may treat `out[..len]` as initialised (`assume_init`): code that
    /// does so under `unsafe` may rely on this. Elements past `len` are left
    /// as they were; on error nothing is written. (No initialised
    /// `&mut [u64]` is returned: turning the written slice into one needs
    /// `unsafe`, which this crate forbids; stable Rust has no safe idiom for
    /// it yet.)
    ///
    /// ```
    /// use std::mem::MaybeUninit;
    /// use zsampler::{Mode, Sampler};
    ///
    /// let s = Sampler::new(1_000, 8, Mode::Iid, 7)?;
    /// let mut buf = vec![MaybeUninit::<u64>::uninit(); s.batch_len()];
    /// let len = s.batch_at_uninit(3, &mut buf)?;
    /// // SAFETY: `batch_at_uninit` wrote every element of `buf[..len]`.
    /// let batch: Vec<u64> = buf[..len].iter().map(|x| unsafe { x.assume_init() }).collect();
    /// assert_eq!(batch, s.batch(3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] if `out.len() < batch_len()`; nothing is
    /// written then.
    pub fn batch_at_uninit(&self, step: u64, out: &mut [MaybeUninit<u64>]) -> Result<usize> {
        self.fill_at(step, out)
    }

    /// The one body of [`Self::batch_at`] and [`Self::batch_at_uninit`]:
    /// writes every element of `out[..batch_len()]` on success, none on
    /// error.
    fn fill_at<S: Slot>(&self, step: u64, out: &mut [S]) -> Result<usize> {
        let len = self.batch_len();
        let got = out.len();
        let Some(out) = out.get_mut(..len) else {
            return Err(Error::BufferTooSmall { needed: len, got });
        };
        match self.mode {
            Mode::Sequential => self.fill_sequential(step, out),
            Mode::Iid => self.fill_iid(step, out),
            Mode::Cyclic => self.fill_cyclic(step, out),
        }
        Ok(len)
    }

    /// This rank's share of batch `step`, allocated.
    pub fn batch(&self, step: u64) -> Vec<u64> {
        let mut out = vec![0; self.batch_len()];
        // Cannot fail: the buffer has exactly batch_len() elements.
        let _ = self.batch_at(step, &mut out);
        out
    }

    /// Writes the batch at the cursor into `out` (see [`Self::batch_at`]) and
    /// advances the cursor by one step.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`]; the cursor does not move then.
    pub fn next_into(&mut self, out: &mut [u64]) -> Result<usize> {
        let len = self.batch_at(self.step, out)?;
        self.step = self.step.wrapping_add(1);
        Ok(len)
    }

    /// [`Self::next_into`] into memory that need not be initialised: on
    /// `Ok(len)` every element of `out[..len]` has been written, as
    /// [`Self::batch_at_uninit`] guarantees.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`]; the cursor does not move and nothing is
    /// written then.
    pub fn next_into_uninit(&mut self, out: &mut [MaybeUninit<u64>]) -> Result<usize> {
        let len = self.batch_at_uninit(self.step, out)?;
        self.step = self.step.wrapping_add(1);
        Ok(len)
    }

    /// Global draw number of this rank's first lane at `step` (wrapping: the
    /// IID stream has period 2^64 draws).
    #[inline]
    fn first_draw(&self, step: u64) -> u64 {
        step.wrapping_mul(self.global as u64)
            .wrapping_add(self.lo as u64)
    }

    fn fill_sequential<S: Slot>(&self, step: u64, out: &mut [S]) {
        let n = u128::from(self.n);
        let start = (u128::from(step) * self.global as u128 + self.lo as u128) % n;
        let mut idx = start as u64;
        let mut rest = out;
        while !rest.is_empty() {
            // One run up to the end of the index space, then wrap to 0.
            let run = (self.n - idx).min(rest.len() as u64) as usize;
            let (head, tail) = rest.split_at_mut(run);
            for (o, v) in head.iter_mut().zip(idx..) {
                o.set(v);
            }
            rest = tail;
            idx = 0;
        }
    }

    fn fill_iid<S: Slot>(&self, step: u64, out: &mut [S]) {
        let base = self.first_draw(step);
        let (key, n, thr) = (&self.key, self.n, self.threshold);
        for (o, j) in out.iter_mut().zip(0u64..) {
            o.set(bounded(key, base.wrapping_add(j), n, thr));
        }
    }

    fn fill_cyclic<S: Slot>(&self, step: u64, out: &mut [S]) {
        let (cycle, first) = match step.checked_div(self.per_cycle) {
            // n < batch_size (per_cycle == 0): every step is a whole cycle.
            None => (step, self.lo as u64),
            Some(cycle) => {
                let pos = (step - cycle * self.per_cycle) * self.batch_size as u64;
                (cycle, pos + self.lo as u64)
            }
        };
        self.permutation(cycle).fill(first, out);
    }

    /// The permutation cyclic mode walks in `cycle`: `batch_at(step)` in
    /// cyclic mode is positions `(step % per_cycle) * batch_size ..` of
    /// `permutation(step / per_cycle)` (per_cycle = `n / batch_size`; or
    /// positions `0..n` of `permutation(step)` when `n < batch_size`).
    pub fn permutation(&self, cycle: u64) -> Permutation {
        Permutation::new_nonzero(
            self.n,
            mix64(
                self.cycle_base
                    .wrapping_add(cycle.wrapping_mul(crate::counter::GAMMA)),
            ),
        )
    }

    /// Cyclic mode: batches per cycle (`n / batch_size`, or 1 when
    /// `n < batch_size`). Other modes: `None`.
    pub const fn batches_per_cycle(&self) -> Option<u64> {
        match self.mode {
            Mode::Cyclic if self.per_cycle == 0 => Some(1),
            Mode::Cyclic => Some(self.per_cycle),
            Mode::Sequential | Mode::Iid => None,
        }
    }
}

/// An endless cursor: every call returns the batch at [`Sampler::step`] and
/// advances it. Never returns `None`.
impl Iterator for Sampler {
    type Item = Vec<u64>;

    fn next(&mut self) -> Option<Vec<u64>> {
        let out = self.batch(self.step);
        self.step = self.step.wrapping_add(1);
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_numbering_matches_the_reference() {
        assert_eq!(Mode::try_from(0), Ok(Mode::Sequential));
        assert_eq!(Mode::try_from(1), Ok(Mode::Iid));
        assert_eq!(Mode::try_from(2), Ok(Mode::Cyclic));
        assert_eq!(Mode::try_from(3), Err(Error::UnknownMode(3)));
        assert_eq!(u8::from(Mode::Cyclic), 2);
        assert_eq!(Mode::default(), Mode::Cyclic);
    }

    #[test]
    fn sequential_wraps_like_the_reference() {
        // Reference loaderx 1.7.2, Sampler(10, 4, SEQUENTIAL): 0..4, 4..8, 8 9 0 1.
        let s = Sampler::new(10, 4, Mode::Sequential, 42).unwrap();
        assert_eq!(s.batch(2), [8, 9, 0, 1]);
        // n < batch: the window still has batch_size entries, repeating.
        let s = Sampler::new(3, 4, Mode::Sequential, 42).unwrap();
        assert_eq!(s.batch(1), [1, 2, 0, 1]);
    }

    #[test]
    fn buffer_too_small_leaves_cursor() {
        let mut s = Sampler::new(10, 4, Mode::Iid, 1).unwrap();
        let mut buf = [0u64; 3];
        assert_eq!(
            s.next_into(&mut buf),
            Err(Error::BufferTooSmall { needed: 4, got: 3 })
        );
        assert_eq!(s.step(), 0);
    }

    #[test]
    fn sequential_handles_the_largest_n() {
        let s = Sampler::new(u64::MAX, 3, Mode::Sequential, 0).unwrap();
        let step = u64::MAX / 3 - 1 + (1 << 62);
        let start = ((u128::from(step) * 3) % u128::from(u64::MAX)) as u64;
        let expect: Vec<u64> = (0..3).map(|j| (start + j) % u64::MAX).collect();
        assert_eq!(s.batch(step), expect);
    }
}
