//! Recycled output buffers for dense gathers ("own your destination
//! buffers").
//!
//! A gather of 256 x 256 KiB records fills 64 MiB. Into a fresh allocation
//! (what `np.empty` gives: glibc maps anything over 32 MiB anew each call)
//! every page faults and is zeroed by the kernel first, which on this class
//! of machine costs more than the copy itself. The dense gather therefore
//! fills a [`Region`] taken from a small process-wide pool and hands NumPy an
//! array whose base object is a [`GatherBuffer`] owning that region; when the
//! array (and every view of it) dies, the region goes back to the pool, so a
//! steady loop `x = ds[idx]; ...; del x` touches no new page.
//!
//! Regions are anonymous mappings (page-aligned, zero-filled on first
//! touch); from 2 MiB up they start on a 2 MiB boundary and are advised
//! `MADV_HUGEPAGE`, so a fresh one faults in 2 MiB steps. The pool keeps at
//! most [`idle_limit`] bytes of idle regions (oldest dropped first), matched
//! by exact length.

use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;

/// Outputs at least this large are gathered into pooled regions; smaller
/// ones into plain `np.empty` arrays (malloc recycles those well).
pub const POOL_MIN_BYTES: usize = 256 << 10;

/// Default bound on idle pooled bytes (`LOADERX_BUFFER_POOL_MB` overrides).
const DEFAULT_IDLE_MB: usize = 256;

/// Huge-page size and the alignment of large regions.
const HUGE: usize = 2 << 20;

/// The idle-byte bound: `LOADERX_BUFFER_POOL_MB` (MiB, 0 disables
/// recycling) or 256 MiB.
pub fn idle_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("LOADERX_BUFFER_POOL_MB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_IDLE_MB)
            .saturating_mul(1 << 20)
    })
}

/// An anonymous private mapping of at least `len` bytes; `ptr` is page
/// aligned (2 MiB aligned from 2 MiB up).
pub struct Region {
    base: NonNull<u8>,
    map_len: usize,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Region uniquely owns its mapping (like Vec<u8> its heap block).
unsafe impl Send for Region {}
// SAFETY: shared access only reads the pointer and length.
unsafe impl Sync for Region {}

impl Region {
    /// Maps a zero-filled region of `len` bytes.
    fn map(len: usize) -> std::io::Result<Region> {
        let pad = if len >= HUGE { HUGE } else { 0 };
        let too_big = || std::io::Error::from(std::io::ErrorKind::OutOfMemory);
        let map_len = len.max(1).checked_add(pad).ok_or_else(too_big)?;
        // SAFETY: a fresh anonymous private mapping; no existing memory is
        // affected, and the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(too_big)?;
        let skip = (HUGE - (base.as_ptr() as usize) % HUGE) % HUGE;
        let skip = if pad == 0 { 0 } else { skip };
        // SAFETY: `skip < pad` (or both are 0, below 2 MiB), so
        // `base + skip .. base + skip + len` lies inside the
        // `map_len = max(len, 1) + pad` bytes just mapped.
        let ptr = unsafe { base.add(skip) };
        // Advice only: failure (THP disabled) leaves ordinary pages. Linux
        // only: other kernels have no transparent huge pages to ask for.
        #[cfg(target_os = "linux")]
        if pad != 0 {
            // SAFETY: the range lies inside our own mapping.
            unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        }
        Ok(Region {
            base,
            map_len,
            ptr,
            len,
        })
    }

    /// The usable length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The usable bytes, for writing.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is valid for `len` bytes of our mapping (zero-filled
        // or written before), uniquely borrowed through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The first usable byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

struct Idle {
    regions: Vec<Region>,
    bytes: usize,
}

static IDLE: Mutex<Idle> = Mutex::new(Idle {
    regions: Vec::new(),
    bytes: 0,
});

/// A region of exactly `len` bytes: an idle one of that length (most
/// recently returned first) or a new mapping. Its bytes are unspecified.
pub fn take(len: usize) -> std::io::Result<Region> {
    {
        let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = idle.regions.iter().rposition(|r| r.len == len) {
            idle.bytes -= len;
            return Ok(idle.regions.remove(k));
        }
    }
    Region::map(len)
}

/// Returns `region` to the pool, dropping the oldest idle regions beyond
/// [`idle_limit`].
pub fn give(region: Region) {
    let limit = idle_limit();
    if region.len > limit {
        return;
    }
    let evicted: Vec<Region> = {
        let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
        idle.bytes += region.len;
        idle.regions.push(region);
        let mut n = 0;
        let mut bytes = idle.bytes;
        while bytes > limit {
            bytes -= idle.regions[n].len;
            n += 1;
        }
        idle.bytes = bytes;
        idle.regions.drain(..n).collect()
    };
    drop(evicted); // unmapped outside the lock
}

/// Idle pooled regions and bytes (for tests).
pub fn idle_stats() -> (usize, usize) {
    let idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    (idle.regions.len(), idle.bytes)
}

/// The base object of a NumPy array filled by a dense gather: owns the
/// region the array views and returns it to the pool when the array (and
/// every view of it) is gone.
#[pyclass(frozen, name = "GatherBuffer", module = "loaderx._native")]
pub struct GatherBuffer {
    region: Option<Region>,
}

impl GatherBuffer {
    /// Wraps a filled region.
    pub fn new(region: Region) -> Self {
        GatherBuffer {
            region: Some(region),
        }
    }
}

#[pymethods]
impl GatherBuffer {
    /// Bytes owned.
    fn __len__(&self) -> usize {
        self.region.as_ref().map_or(0, Region::len)
    }
}

impl Drop for GatherBuffer {
    fn drop(&mut self) {
        if let Some(r) = self.region.take() {
            give(r);
        }
    }
}

/// Idle bytes of ragged batch buffers kept at most (less if
/// [`idle_limit`] is lower; 0 disables recycling).
const WORDS_IDLE_MAX: usize = 64 << 20;

/// Idle ragged batch buffers at most.
const WORDS_IDLE_COUNT: usize = 16;

struct IdleWords {
    bufs: Vec<Vec<u64>>,
    bytes: usize,
}

static IDLE_WORDS: Mutex<IdleWords> = Mutex::new(IdleWords {
    bufs: Vec::new(),
    bytes: 0,
});

/// A buffer for a ragged gather: the one returned last (warm in the
/// caches), or an empty one. Its contents are unspecified (initialized:
/// an earlier batch's words); the gather overwrites what it uses and grows
/// it when it is short, so a steady loop neither allocates nor zeroes.
pub fn take_words() -> Vec<u64> {
    let mut idle = IDLE_WORDS.lock().unwrap_or_else(|p| p.into_inner());
    match idle.bufs.pop() {
        Some(v) => {
            idle.bytes -= held_bytes(&v);
            v
        }
        None => Vec::new(),
    }
}

/// Bytes of heap `words` holds (its capacity, which a gather that grew it
/// may have left above its length).
fn held_bytes(words: &Vec<u64>) -> usize {
    words.capacity() * std::mem::size_of::<u64>()
}

/// Keeps `words` for [`take_words`], dropping the oldest idle buffers
/// beyond [`WORDS_IDLE_COUNT`] or the byte bound.
fn give_words(words: Vec<u64>) {
    let limit = idle_limit().min(WORDS_IDLE_MAX);
    let len = held_bytes(&words);
    if words.is_empty() || len > limit {
        return;
    }
    let evicted: Vec<Vec<u64>> = {
        let mut idle = IDLE_WORDS.lock().unwrap_or_else(|p| p.into_inner());
        idle.bytes += len;
        idle.bufs.push(words);
        let mut n = 0;
        let mut bytes = idle.bytes;
        while bytes > limit || idle.bufs.len() - n > WORDS_IDLE_COUNT {
            bytes -= held_bytes(&idle.bufs[n]);
            n += 1;
        }
        idle.bytes = bytes;
        idle.bufs.drain(..n).collect()
    };
    drop(evicted); // freed outside the lock
}

/// Alignment of a batch's payloads in memory (zrecord's `PAYLOAD_ALIGN`).
const PAYLOAD_ALIGN: usize = 64;

/// `words` (the bytes at `range` in it: a gathered batch's payloads), or,
/// when `words` holds more than four times the heap those need (a big
/// recycled buffer filled by a small batch), a right-sized copy of them,
/// starting [`PAYLOAD_ALIGN`]-aligned, with the big buffer given back for
/// [`take_words`]. So an array viewing a small batch never keeps a big
/// buffer alive, and the copy is of at most a quarter of a buffer. A
/// `range` outside `words`, or not starting on a word, comes back as is.
pub fn fit_words(
    words: Vec<u64>,
    range: std::ops::Range<usize>,
) -> (Vec<u64>, std::ops::Range<usize>) {
    let need = range.len() + PAYLOAD_ALIGN;
    let (first, end) = (range.start / 8, range.end.div_ceil(8));
    if held_bytes(&words) <= 4 * need.next_multiple_of(8) + 4096
        || !range.start.is_multiple_of(8)
        || range.start > range.end
        || end > words.len()
    {
        return (words, range);
    }
    let mut fit = vec![0u64; need.div_ceil(8)];
    // Payloads start 64-aligned in memory: skip the words before the first
    // 64-aligned one (the allocation is at least 8-aligned).
    let skip = (PAYLOAD_ALIGN - fit.as_ptr() as usize % PAYLOAD_ALIGN) % PAYLOAD_ALIGN / 8;
    fit[skip..skip + (end - first)].copy_from_slice(&words[first..end]);
    give_words(words);
    (fit, skip * 8..skip * 8 + range.len())
}

/// `(idle buffers, idle bytes)` of the ragged buffer pool (for tests).
pub fn idle_words_stats() -> (usize, usize) {
    let idle = IDLE_WORDS.lock().unwrap_or_else(|p| p.into_inner());
    (idle.bufs.len(), idle.bytes)
}

/// The base object of the arrays a ragged gather returns (the list's
/// record views, the packed values): owns the batch's buffer, whose heap
/// block the arrays view, and returns it for [`take_words`] when every
/// array viewing it is gone. Holds the `Vec`'s raw parts rather than the
/// `Vec`, so no reference to the words exists while NumPy writes to them.
#[pyclass(frozen, name = "RaggedBuffer", module = "loaderx._native")]
pub struct RaggedBuffer {
    ptr: NonNull<u64>,
    len: usize,
    cap: usize,
}

// SAFETY: a RaggedBuffer uniquely owns its heap block (like the Vec<u64>
// it was made from); shared access only reads the pointer and lengths.
unsafe impl Send for RaggedBuffer {}
// SAFETY: as above.
unsafe impl Sync for RaggedBuffer {}

impl RaggedBuffer {
    /// Takes ownership of `words`; also returns a pointer to its first
    /// word, valid (for reads and writes) as long as the buffer lives.
    pub fn new(mut words: Vec<u64>) -> (Self, *mut u64) {
        let ptr = NonNull::new(words.as_mut_ptr()).unwrap_or(NonNull::dangling());
        let (len, cap) = (words.len(), words.capacity());
        std::mem::forget(words);
        (RaggedBuffer { ptr, len, cap }, ptr.as_ptr())
    }
}

#[pymethods]
impl RaggedBuffer {
    /// Bytes owned.
    fn __len__(&self) -> usize {
        self.len * 8
    }
}

impl Drop for RaggedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr`, `len` and `cap` are the raw parts of the Vec that
        // `new` forgot, and are rebuilt exactly once, here; no array views
        // the words any more (each held a reference to this object).
        let words = unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, self.cap) };
        give_words(words);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ragged_buffers_return_to_the_pool_when_dropped() {
        let words = vec![7u64; 1000];
        let p0 = words.as_ptr();
        let (buf, p) = RaggedBuffer::new(words);
        assert_eq!(p.cast_const(), p0);
        drop(buf);
        let again = take_words();
        assert_eq!(
            again.as_ptr(),
            p0,
            "the buffer returned last comes back first"
        );
        assert_eq!(again.len(), 1000);
        assert!(again.iter().all(|&w| w == 7));
        // An empty buffer is not kept.
        drop(RaggedBuffer::new(Vec::new()).0);
        assert!(take_words().is_empty());

        // (In the same test: both use the process-wide pool.) Small
        // payloads in a big buffer move to a buffer of their size.
        let mut big = vec![0u64; 100_000];
        for (k, w) in big.iter_mut().enumerate() {
            *w = k as u64;
        }
        // Words 16..19 then 4 bytes of word 19: the payloads.
        let (fit, at) = fit_words(big, 128..156);
        assert!(fit.len() * 8 <= 28 + 64 + 8, "{}", fit.len());
        assert_eq!((fit.as_ptr() as usize + at.start) % 64, 0);
        assert_eq!(at.len(), 28);
        assert_eq!(&fit[at.start / 8..at.start / 8 + 3], &[16, 17, 18]);
        // A buffer that fits comes back as is.
        let near = vec![5u64; 64];
        let p = near.as_ptr();
        let (same, r) = fit_words(near, 64..400);
        assert_eq!((same.as_ptr(), r), (p, 64..400));
        // The big buffer went back to the pool.
        assert_eq!(take_words().len(), 100_000);
    }

    #[test]
    fn regions_are_aligned_zeroed_and_recycled_by_length() {
        for len in [1, 4096, 300_000, 3 << 20] {
            let mut r = take(len).unwrap();
            assert_eq!(r.len(), len);
            let align = if len >= HUGE { HUGE } else { 4096 };
            assert_eq!(r.as_ptr() as usize % align, 0);
            assert!(r.as_mut_slice().iter().all(|&b| b == 0));
            r.as_mut_slice()[len - 1] = 7;
            let p = r.as_ptr();
            give(r);
            let mut again = take(len).unwrap();
            assert_eq!(
                again.as_ptr(),
                p,
                "the idle region of that length is reused"
            );
            assert_eq!(again.as_mut_slice()[len - 1], 7);
        }
    }
}
