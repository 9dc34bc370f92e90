//! A page-aligned byte buffer.
//!
//! Reading from the page cache into a destination that starts a few bytes
//! past a page boundary is several times slower than into a page-aligned
//! one on common kernels; buffers the engine owns, and buffers callers let
//! it allocate, are therefore page-aligned.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::error::{Error, Result};

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
    /// Allocates `len` zero bytes, page-aligned. Like `Vec`, aborts the
    /// process if the allocator fails, and panics if `len` is past what one
    /// allocation may be; [`AlignedBuf::try_zeroed`] reports both instead.
    pub fn zeroed(len: usize) -> AlignedBuf {
        match Self::try_zeroed(len) {
            Ok(b) => b,
            Err(_) => match Self::layout(len) {
                Some(layout) => std::alloc::handle_alloc_error(layout),
                None => panic!("a buffer of {len} bytes overflows the address space"),
            },
        }
    }

    /// Allocates `len` zero bytes, page-aligned, or returns
    /// [`Error::Alloc`] when the allocator refuses or `len` rounded up to a
    /// page is past `isize::MAX`. Does not panic or abort itself: for sizes
    /// that come from a caller or a file. What the allocator grants is a
    /// different matter under Linux's memory overcommit: a size beyond
    /// memory and swap is refused, but one the kernel grants and cannot
    /// back ends in the OOM killer once its pages are touched (the
    /// allocator may zero them here).
    ///
    /// ```
    /// use zrecord_engine::AlignedBuf;
    /// assert!(AlignedBuf::try_zeroed(usize::MAX).is_err());
    /// assert_eq!(AlignedBuf::try_zeroed(100)?.len(), 100);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_zeroed(len: usize) -> Result<AlignedBuf> {
        if len == 0 {
            // A non-null, page-aligned pointer that is never dereferenced.
            let ptr = NonNull::new(std::ptr::without_provenance_mut(PAGE)).expect("nonzero");
            return Ok(AlignedBuf { ptr, len: 0 });
        }
        let layout = Self::layout(len).ok_or(Error::Alloc { bytes: len })?;
        // SAFETY: `alloc_zeroed` needs a layout of nonzero size, which
        // `len > 0` gives; `Layout` itself checked the size and alignment.
        // A null return is a refusal, handled below, never dereferenced.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(Error::Alloc { bytes: len })?;
        Ok(AlignedBuf { ptr, len })
    }

    /// The layout of a `len`-byte buffer; `None` past `isize::MAX` once
    /// rounded up to a page. Every `AlignedBuf` of nonzero length was
    /// allocated with `layout(len)`, so it is `Some` for them.
    fn layout(len: usize) -> Option<Layout> {
        Layout::from_size_align(len, PAGE).ok()
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
            let layout = Self::layout(self.len).expect("allocated with this layout");
            // SAFETY: `ptr` was allocated in `try_zeroed` with exactly this
            // layout (same `len`, same alignment) and is freed only here.
            unsafe { dealloc(self.ptr.as_ptr(), layout) }
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

    /// Regression: the only constructor aborted the process (or panicked)
    /// when a buffer could not be had, so a caller sizing one from user
    /// input (a loader's batch) could not report it.
    #[test]
    fn try_zeroed_reports_sizes_it_cannot_allocate() {
        // Past isize::MAX: no Layout.
        for len in [usize::MAX, isize::MAX as usize] {
            assert!(
                matches!(AlignedBuf::try_zeroed(len), Err(Error::Alloc { bytes }) if bytes == len),
                "{len}"
            );
        }
        // A Layout, but more than any address space holds: the allocator
        // refuses.
        let huge = 1usize << 62;
        let e = AlignedBuf::try_zeroed(huge).unwrap_err();
        assert!(e.to_string().contains(&huge.to_string()), "{e}");
        let b = AlignedBuf::try_zeroed(10_000).unwrap();
        assert_eq!((b.len(), b.as_ptr() as usize % PAGE), (10_000, 0));
    }
}
