//! The element type the draw loops write through: `u64` or `MaybeUninit<u64>`.
//!
//! Every mode's loop is written once, generic over [`Slot`], and serves both
//! [`Sampler::batch_at`](crate::Sampler::batch_at) (a caller's initialised
//! `&mut [u64]`) and
//! [`Sampler::batch_at_uninit`](crate::Sampler::batch_at_uninit) (memory the
//! caller has not initialised, e.g. a fresh NumPy array, which would
//! otherwise have to be zeroed first). Each instantiation is a plain store.

use std::mem::MaybeUninit;

/// A place a drawn index is written to. The loops only ever write a slot,
/// never read it, so an uninitialised one is never read.
pub(crate) trait Slot {
    /// Stores `v`.
    fn set(&mut self, v: u64);
}

impl Slot for u64 {
    #[inline(always)]
    fn set(&mut self, v: u64) {
        *self = v;
    }
}

impl Slot for MaybeUninit<u64> {
    #[inline(always)]
    fn set(&mut self, v: u64) {
        self.write(v);
    }
}
