//! The row parser for x86-64-v3 CPUs (AVX2, BMI2), picked at run time.
//!
//! Same contract as [`indexed_row`](super::indexed_row): a row of plain
//! fields, each ended by exactly one separator byte and the last by LF.
//! Separators and newlines come as bit masks of 64-byte windows (two AVX2
//! compares each), so each field is known by its start and end before it is
//! parsed; a field is then converted in 16-byte vector steps, without a
//! byte loop and without the digit-run search: its digits are validated by
//! one compare, moved right-aligned into 16 digit lanes past the `.` by one
//! shuffle, and combined by three multiply-adds. Anything else returns
//! `None` and the caller's slower parsers decide.

use std::arch::x86_64::{
    __m128i, __m256i, _mm_adds_epu8, _mm_cmpeq_epi8, _mm_cvtsi128_si64, _mm_madd_epi16,
    _mm_maddubs_epi16, _mm_movemask_epi8, _mm_packus_epi32, _mm_set1_epi8, _mm_setr_epi8,
    _mm_setr_epi16, _mm_shuffle_epi8, _mm_sub_epi8, _mm256_cmpeq_epi8, _mm256_extract_epi64,
    _mm256_movemask_epi8, _mm256_or_si256, _mm256_sad_epu8, _mm256_set1_epi8, _mm256_setzero_si256,
    _mm256_sub_epi8, _mm256_testz_si256,
};
use std::mem::MaybeUninit;

use super::TextFloat;

/// Shuffle masks that move a field body's digits (bytes `0..len`, at most
/// one `.` at `dot`, `dot == len` for none) to the right end of 16 lanes,
/// in order and without the `.`; lanes in front take a negative index,
/// which `pshufb` turns into 0 (leading zeros). Indexed `len * 17 + dot`.
const SHUFFLE: [[u8; 16]; 17 * 17] = {
    let mut t = [[0x80u8; 16]; 17 * 17];
    let mut len = 0;
    while len <= 16 {
        let mut dot = 0;
        while dot <= len {
            // Lanes at or after `split` hold fraction digits (bytes after
            // the dot, one lane per byte); lanes before it hold integer
            // digits, one byte further left (the dot skipped).
            let split = if dot < len { 16 - (len - dot - 1) } else { 0 };
            let mut k = 0;
            while k < 16 {
                let src = k as isize + len as isize - 16 - (k < split) as isize;
                if src >= 0 {
                    t[len * 17 + dot][k] = src as u8;
                }
                k += 1;
            }
            dot += 1;
        }
        len += 1;
    }
    t
};

/// Fraction digits of a body of `len` bytes with its dot at `dot` (`len`
/// for none), indexed as [`SHUFFLE`]; [`NOT_A_NUMBER`] where the body holds
/// no digit (`.`) or more than 15 (16 digits, no dot), or cannot be.
const FRAC: [u8; 17 * 17] = {
    let mut t = [NOT_A_NUMBER; 17 * 17];
    let mut len = 1;
    while len <= 16 {
        let mut dot = 0;
        while dot <= len {
            let digits = if dot < len { len - 1 } else { len };
            if digits >= 1 && digits <= 15 {
                t[len * 17 + dot] = if dot < len { (len - dot - 1) as u8 } else { 0 };
            }
            dot += 1;
        }
        len += 1;
    }
    t
};

/// A fraction length past every power-of-ten table: refused by
/// [`TextFloat::from_digits`].
const NOT_A_NUMBER: u8 = u8::MAX;

/// Separator and newline bit masks of a 64-byte window (bit `j` for `w[j]`).
#[target_feature(enable = "avx2")]
#[inline]
fn masks(w: &[u8; 64], sep: u8) -> (u64, u64) {
    let lo: __m256i = bytemuck::cast(*w.first_chunk::<32>().expect("64 bytes"));
    let hi: __m256i = bytemuck::cast(*w.last_chunk::<32>().expect("64 bytes"));
    let (s, n) = (_mm256_set1_epi8(sep as i8), _mm256_set1_epi8(b'\n' as i8));
    let s_lo = _mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, s)) as u32 as u64;
    let s_hi = _mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, s)) as u32 as u64;
    let n_lo = _mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, n)) as u32 as u64;
    let n_hi = _mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, n)) as u32 as u64;
    (s_lo | s_hi << 32, n_lo | n_hi << 32)
}

/// The number in `w[start..end]` (`start <= end < 64`): an optional sign,
/// then at most 16 bytes of digits with at most one `.` (at least one
/// digit, at most 15), when Clinger's fast path makes it exact
/// ([`TextFloat::from_digits`], given [`FRAC`]); `None` for anything else. The value is the
/// correctly rounded one, as fast-float2 gives.
#[target_feature(enable = "avx2,bmi1,bmi2")]
#[inline]
pub(super) fn field<T: TextFloat>(w: &[u8; 80], start: usize, end: usize) -> Option<T> {
    let start = start & 63;
    let c = w[start];
    let neg = c == b'-';
    let body = start + (neg | (c == b'+')) as usize;
    let len = end.wrapping_sub(body);
    if len.wrapping_sub(1) >= 16 {
        return None;
    }
    let raw: __m128i = bytemuck::cast(*w[body..].first_chunk::<16>()?);
    let v = _mm_sub_epi8(raw, _mm_set1_epi8(b'0' as i8));
    // The first dot's index, `len` without one in the body.
    let dots = _mm_movemask_epi8(_mm_cmpeq_epi8(raw, _mm_set1_epi8(b'.' as i8))) as u32;
    let dot = (dots | (1 << len)).trailing_zeros() as usize;
    let at = len * 17 + dot;
    let frac = *FRAC.get(at)?;
    let shuffle: __m128i = bytemuck::cast(*SHUFFLE.get(at)?);
    // The body's bytes but that dot, as digit values (byte - '0'), right
    // aligned after leading zeros. Only digits leave every lane at 0..=9:
    // any other byte (a second dot too) leaves a lane above 9.
    let d = _mm_shuffle_epi8(v, shuffle);
    // Adding 118 with saturation sets a lane's top bit exactly when it
    // was above 9.
    if _mm_movemask_epi8(_mm_adds_epu8(d, _mm_set1_epi8(118))) != 0 {
        return None;
    }
    // 16 digits -> 8 pairs -> 4 quads -> 2 octets (most significant first).
    let d = _mm_maddubs_epi16(
        d,
        _mm_setr_epi8(10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1),
    );
    let d = _mm_madd_epi16(d, _mm_setr_epi16(100, 1, 100, 1, 100, 1, 100, 1));
    let d = _mm_packus_epi32(d, d);
    let d = _mm_madd_epi16(d, _mm_setr_epi16(10000, 1, 10000, 1, 10000, 1, 10000, 1));
    let x = _mm_cvtsi128_si64(d) as u64;
    let m = (x & 0xFFFF_FFFF) * 100_000_000 + (x >> 32);
    T::from_digits(m, frac as usize).map(|v| v.negate_if(neg))
}

/// [`indexed_row`](super::indexed_row) with AVX2 window masks and
/// [`field`]: the row starting at `p` into `out` (one slot per field),
/// returning the next line's start; `None` for anything but plain fields
/// each ended by one `sep` and the last by LF.
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
#[inline]
pub(super) fn indexed_row<T: TextFloat>(
    text: &[u8],
    p: usize,
    sep: u8,
    out: &mut [MaybeUninit<T>],
) -> Option<usize> {
    let mut slots = out.iter_mut();
    let mut start = p;
    loop {
        // Each window starts at the next field's start; its fields end in
        // the first 64 bytes, the rest covers their 16-byte loads.
        let w: &[u8; 80] = text.get(start..)?.first_chunk()?;
        let base = start;
        let (seps, nls) = masks(w.first_chunk().expect("80 bytes"), sep);
        let mut ends = seps | nls;
        if ends == 0 {
            // No field ends within 64 bytes: not a short number.
            return None;
        }
        while ends != 0 {
            let bit = ends.trailing_zeros();
            ends &= ends - 1;
            slots
                .next()?
                .write(field::<T>(w, start - base, bit as usize)?);
            let pos = base + bit as usize;
            if (nls >> bit) & 1 != 0 {
                return slots.next().is_none().then_some(pos + 1);
            }
            start = pos + 1;
        }
    }
}

/// [`count_bytes`](super::count_bytes) with AVX2: 32 bytes per step, the
/// newline hits summed in byte lanes for up to 255 steps, then widened.
#[target_feature(enable = "avx2")]
pub(super) fn count_bytes(text: &[u8], c: u8) -> (usize, bool) {
    let (nl, cv) = (_mm256_set1_epi8(b'\n' as i8), _mm256_set1_epi8(c as i8));
    let zero = _mm256_setzero_si256();
    let mut lines = 0usize;
    let mut seen = zero;
    let mut blocks = text.chunks_exact(32 * 255);
    let mut count = |block: &[u8]| {
        let mut acc = zero;
        for b in block.chunks_exact(32) {
            let v: __m256i = bytemuck::cast(*b.first_chunk::<32>().expect("32 bytes"));
            // A hit is -1 in its lane: subtracting counts it.
            acc = _mm256_sub_epi8(acc, _mm256_cmpeq_epi8(v, nl));
            seen = _mm256_or_si256(seen, _mm256_cmpeq_epi8(v, cv));
        }
        let s = _mm256_sad_epu8(acc, zero);
        lines += (_mm256_extract_epi64::<0>(s)
            + _mm256_extract_epi64::<1>(s)
            + _mm256_extract_epi64::<2>(s)
            + _mm256_extract_epi64::<3>(s)) as usize;
    };
    for block in &mut blocks {
        count(block);
    }
    let rest = blocks.remainder();
    count(rest);
    let tail = &rest[rest.len() / 32 * 32..];
    let (n, s) = super::count_bytes_scalar(tail, c);
    (lines + n, s || _mm256_testz_si256(seen, seen) == 0)
}
