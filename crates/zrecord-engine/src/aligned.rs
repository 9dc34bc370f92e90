//! A page-aligned byte buffer.
//!
//! Reading from the page cache into a destination that starts a few bytes
//! past a page boundary is several times slower than into a page-aligned
//! one on common kernels; buffers the engine owns, and buffers callers let
//! it allocate, are therefore page-aligned.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of [`AlignedBuf`]: one 4 KiB page.
pub const PAGE: usize = 4096;

/// A zero-initialised, fixed-length byte buffer whose first byte sits on a
/// page boundary. Dereferences to `[u8]`.
///
/// ```
/// let mut b = zrecord_engine::AlignedBuf::zeroed(10_000);
/// assert_eq!(b.as_ptr() as usize % zrecord_engine::PAGE, 0);
/// b[9_999] = 1;
/// assert_eq!(b.len(), 10_000);
/// ```
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf uniquely owns its allocation, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`, like Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zero bytes, page-aligned. Panics only if the
    /// allocator fails (like `Vec`).
    pub fn zeroed(len: usize) -> AlignedBuf {
        if len == 0 {
            // A non-null, page-aligned pointer that is never dereferenced.
            let ptr = NonNull::new(std::ptr::without_provenance_mut(PAGE)).expect("nonzero");
            return AlignedBuf { ptr, len: 0 };
        }
        let layout = Self::layout(len);
        // SAFETY: `layout` has a nonzero size.
        let p = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(p) else {
            std::alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, PAGE).expect("buffer length overflows the address space")
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised bytes (or dangling and
        // aligned with `len == 0`) for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [0, 1, 4095, 4096, 100_000] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % PAGE, 0);
            assert!(b.iter().all(|&x| x == 0));
        }
    }
}
