//! A parallel `loadtxt`: delimited numeric text into an `Array2<f64>` or
//! `Array2<f32>`.
//!
//! A regular file is memory-mapped; a pipe, FIFO, `/dev/stdin` or procfs
//! file (whose size says nothing) is read whole into memory. After the
//! header rows, the text is cut at
//! newlines into chunks; a first parallel pass counts the data rows of each
//! chunk, prefix sums give each chunk its first output row, and a second
//! parallel pass parses each chunk straight into its rows of the one output
//! buffer. Nothing is allocated per row or per token; numbers are parsed by
//! `fast-float2` (correctly rounded, for `f32` directly to `f32`), plain
//! short decimals by exact fast paths that give the same bits (on x86-64
//! CPUs with AVX2, a vector row parser: `text/v3.rs`).
//!
//! Accepted text, as `numpy.loadtxt` accepts it (as UTF-8): fields separated
//! by any run of whitespace (the default) or by one ASCII delimiter byte
//! (then whitespace around a field is ignored, and an empty field is an
//! error); `#` comments (also after data); blank lines; LF or CRLF endings;
//! a leading `+`; `nan`, `inf`, `infinity` in any case and with a sign.
//! Whitespace is what Python's `str.isspace()` accepts: space, tab, VT, FF,
//! 0x1C-0x1F and the Unicode blanks (NBSP, U+2000-U+200A, U+3000, ...). A
//! blank line holds only whitespace and comments; with a delimiter, only a
//! comment (a line of blanks is then a row of one blank field, an error).
//!
//! Differences from NumPy: a file without data rows gives a `(0, 0)` array
//! (`(0, usecols.len())` with `usecols`), `max_rows: Some(0)` gives `(0,
//! columns)`, and a one-column file gives `(n, 1)` (never a 1-D array);
//! every data row must have the same number of fields, also with `usecols`;
//! `skip_rows` counts header *data* lines, after comment and blank lines
//! (fast_loadtxt's definition; NumPy's `skiprows` counts physical lines — the
//! two agree when the header comes first); a lone CR (an old Mac line
//! ending, which NumPy's text mode splits at) is an error naming its line,
//! in a comment too, never a silently joined line; a gzip / bzip2 / xz / zstd file is refused
//! by its magic bytes rather than decompressed. As in NumPy, the comment
//! byte cuts its line wherever it stands, even inside a number, and
//! `usecols` may count from the end (`-1`) and name a column twice. With
//! `f32`, each token is rounded once, straight to the nearest `f32`, where
//! `numpy.loadtxt(dtype=float32)` rounds to `f64` and then to `f32` (1 ulp
//! apart for about 1.5% of random tokens; NumPy's values are
//! `loadtxt::<f64>` cast with `as f32`). Errors name the file, the line
//! and the column, both counted from 1; with several bad lines, the first.
//!
//! ```
//! use zrecord::text::{loadtxt_bytes, LoadTxtOptions};
//! let text = b"# x y\n1.5 2\n-inf 4e-3  # note\n\n+5 NaN\r\n";
//! let a = loadtxt_bytes::<f64>(text, &LoadTxtOptions::default())?;
//! assert_eq!(a.shape(), &[3, 2]);
//! assert_eq!(a[[1, 1]], 4e-3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::File;
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ndarray::Array2;
use rayon::prelude::*;

use crate::dense::DenseCore;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::import::{Imported, batch_rows_for};
use zrecord_engine::CreateOptions;

#[cfg(target_arch = "x86_64")]
mod v3;

/// Options of [`loadtxt`]. `Default` gives NumPy's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadTxtOptions {
    /// Field separator (an ASCII byte); `None` splits on runs of whitespace
    /// (NumPy's: ASCII and Unicode blanks). Every occurrence separates two
    /// fields, as in NumPy, even a byte that can be part of a number (with
    /// `b'.'`, `1.5` is the two fields 1 and 5).
    pub delimiter: Option<u8>,
    /// Comment byte (ASCII, not whitespace): it and the rest of its line
    /// are ignored. Default `#`.
    pub comments: Option<u8>,
    /// Data lines to skip at the start (header rows), counted after comment
    /// and blank lines.
    pub skip_rows: usize,
    /// Columns to keep, in output order: indices into the file's fields,
    /// negative ones counting from the last field (`-1` is the last), as in
    /// NumPy. A column may be named more than once; each naming is an
    /// output column. An empty list keeps no column: the array is
    /// `(rows, 0)`, as NumPy's.
    pub usecols: Option<Vec<isize>>,
    /// Read at most this many data rows (after `skip_rows`).
    pub max_rows: Option<usize>,
    /// Worker threads; 0 uses the current rayon pool.
    pub threads: usize,
    /// Target bytes per parallel chunk; 0 picks one from the file size and
    /// thread count.
    pub chunk_bytes: usize,
}

impl Default for LoadTxtOptions {
    fn default() -> Self {
        LoadTxtOptions {
            delimiter: None,
            comments: Some(b'#'),
            skip_rows: 0,
            usecols: None,
            max_rows: None,
            threads: 0,
            chunk_bytes: 0,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// A float type [`loadtxt`] can produce: `f32` or `f64`.
pub trait TextFloat: Element + sealed::Sealed {
    /// Parses a number at the start of `s`; returns it and the bytes used.
    #[doc(hidden)]
    fn parse_prefix(s: &[u8]) -> Option<(Self, usize)>;
    /// `±m x 10^e10` when Clinger's fast path makes it exact: `m` and
    /// `10^|e10|` are exact in `Self`, so one IEEE multiply or divide gives
    /// the correctly rounded result; `None` otherwise.
    #[doc(hidden)]
    fn from_parts(m: u64, neg: bool, e10: i32) -> Option<Self>;
    /// `m / 10^frac` for `m < 10^14` and `frac <= 7`, when exact by
    /// Clinger's fast path (always for `f64`); `None` otherwise.
    #[doc(hidden)]
    fn from_short(m: u64, frac: usize) -> Option<Self>;
    /// `m / 10^frac` for `m < 10^15`, when exact by Clinger's fast path
    /// (for `f64` always when `frac <= 22`); `None` otherwise.
    #[doc(hidden)]
    fn from_digits(m: u64, frac: usize) -> Option<Self>;
    /// `-self` when `neg`.
    #[doc(hidden)]
    fn negate_if(self, neg: bool) -> Self;
}

const POW10_F64: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];
const POW10_F32: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];

impl TextFloat for f32 {
    fn parse_prefix(s: &[u8]) -> Option<(Self, usize)> {
        fast_float2::parse_partial(s).ok()
    }
    #[inline(always)]
    fn from_parts(m: u64, neg: bool, e10: i32) -> Option<Self> {
        if m > 1 << 24 {
            return None;
        }
        let x = m as i64 as f32;
        let v = match e10 {
            0..=10 => x * POW10_F32[e10 as usize],
            -10..=-1 => x / POW10_F32[-e10 as usize],
            _ => return None,
        };
        Some(if neg { -v } else { v })
    }
    #[inline(always)]
    fn from_short(m: u64, frac: usize) -> Option<Self> {
        if m > 1 << 24 {
            return None;
        }
        Some(m as i64 as f32 / POW10_F32[frac & 7])
    }
    #[inline(always)]
    fn from_digits(m: u64, frac: usize) -> Option<Self> {
        let p = *POW10_F32.get(frac)?;
        if m > 1 << 24 {
            return None;
        }
        Some(m as i64 as f32 / p)
    }
    #[inline(always)]
    fn negate_if(self, neg: bool) -> Self {
        f32::from_bits(self.to_bits() ^ ((neg as u32) << 31))
    }
}

impl TextFloat for f64 {
    fn parse_prefix(s: &[u8]) -> Option<(Self, usize)> {
        fast_float2::parse_partial(s).ok()
    }
    #[inline(always)]
    fn from_parts(m: u64, neg: bool, e10: i32) -> Option<Self> {
        if m > 1 << 53 {
            return None;
        }
        let x = m as i64 as f64;
        let v = match e10 {
            0..=22 => x * POW10_F64[e10 as usize],
            -22..=-1 => x / POW10_F64[-e10 as usize],
            _ => return None,
        };
        Some(if neg { -v } else { v })
    }
    #[inline(always)]
    fn from_short(m: u64, frac: usize) -> Option<Self> {
        // m < 10^14 < 2^53 and 10^7 are exact: one correctly rounded divide.
        Some(m as i64 as f64 / POW10_F64[frac & 7])
    }
    #[inline(always)]
    fn from_digits(m: u64, frac: usize) -> Option<Self> {
        // m < 10^15 < 2^53 and 10^22 are exact: one correctly rounded divide.
        Some(m as i64 as f64 / *POW10_F64.get(frac)?)
    }
    #[inline(always)]
    fn negate_if(self, neg: bool) -> Self {
        f64::from_bits(self.to_bits() ^ ((neg as u64) << 63))
    }
}

/// Eight bytes at `s[i..]`, little-endian; past the end of `s` the missing
/// bytes read as 0 (not a digit, so no digit run crosses the end).
#[inline(always)]
fn load8(s: &[u8], i: usize) -> u64 {
    match s.get(i..).and_then(|t| t.first_chunk::<8>()) {
        Some(b) => u64::from_le_bytes(*b),
        None => load8_tail(s, i),
    }
}

#[cold]
fn load8_tail(s: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    let t = s.get(i..).unwrap_or(&[]);
    b[..t.len()].copy_from_slice(t);
    u64::from_le_bytes(b)
}

/// The bytes of `x` as digit values (`byte ^ b'0'`) and the length of the
/// run of ASCII digits it starts with (0..=8). A byte is a digit when its
/// value is 0..=9: no high nibble, and adding 6 makes none (a carry out of a
/// byte only leaves one that is not a digit, so the first non-digit is
/// always found).
#[inline(always)]
fn digits8(x: u64) -> (u64, usize) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let t = x ^ (ONES * b'0' as u64);
    let bad = (t | t.wrapping_add(ONES * 6)) & (ONES * 0xF0);
    (t, (bad.trailing_zeros() / 8) as usize)
}

/// The value of the first `n` (1..=8) digit values of `t` (from
/// [`digits8`]): they are moved to the top bytes (zeros in front are
/// leading zeros) and combined pairwise by three multiplies (the SWAR
/// eight-digit conversion of simdjson / fast_float).
#[inline(always)]
fn value8(t: u64, n: usize) -> u64 {
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    const MUL1: u64 = 100 + (1_000_000 << 32);
    const MUL2: u64 = 1 + (10_000 << 32);
    let v = t << (64 - 8 * n);
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    let v1 = (v & MASK).wrapping_mul(MUL1);
    let v2 = ((v >> 16) & MASK).wrapping_mul(MUL2);
    (v1.wrapping_add(v2) >> 32) as u32 as u64
}

const POW10_U64: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// A run of digits at `s[i..]`, eight at a time: appends them to `m`
/// (wrapping past 19 digits; the caller rejects those) and returns the
/// index after the run and the run's length.
#[inline(always)]
fn digit_run(s: &[u8], mut i: usize, m: &mut u64) -> (usize, usize) {
    let start = i;
    loop {
        let (t, n) = digits8(load8(s, i));
        if n == 0 {
            break;
        }
        *m = m.wrapping_mul(POW10_U64[n]).wrapping_add(value8(t, n));
        i += n;
        if n < 8 {
            break;
        }
    }
    (i, i - start)
}

/// Parses the common plain number (`-12.3456`, `7`, `1.5e-3`: sign, digits,
/// optional fraction, optional exponent of at most three digits, at most 19
/// digits in all) when Clinger's fast path makes it exact; anything else
/// (more digits, far exponents, nan/inf, malformed) returns `None` for
/// fast-float2 to decide. The results are the same correctly rounded
/// values fast-float2 gives.
#[inline(always)]
fn parse_plain<T: TextFloat>(s: &[u8]) -> Option<(T, usize)> {
    let (neg, i) = match s.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    let mut m: u64 = 0;
    let (mut i, nint) = digit_run(s, i, &mut m);
    let mut nfrac = 0;
    if s.get(i) == Some(&b'.') {
        (i, nfrac) = digit_run(s, i + 1, &mut m);
    }
    let digits = nint + nfrac;
    if digits == 0 || digits > 19 {
        return None;
    }
    let mut e10 = -(nfrac as i32);
    if let Some(b'e' | b'E') = s.get(i) {
        let mut j = i + 1;
        let eneg = match s.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let (t, n) = digits8(load8(s, j));
        if n == 0 || n > 3 {
            return None;
        }
        let e = value8(t, n) as i32;
        e10 += if eneg { -e } else { e };
        i = j + n;
    }
    T::from_parts(m, neg, e10).map(|v| (v, i))
}

/// The value of the first `n` (0..=7) digit values of `t`, as [`value8`].
#[inline(always)]
fn value_lt8(t: u64, n: usize) -> u64 {
    // Two shifts, so that n == 0 shifts everything out (no shift by 64).
    let v = (t << 1) << (63 - 8 * n);
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    const MUL1: u64 = 100 + (1_000_000 << 32);
    const MUL2: u64 = 1 + (10_000 << 32);
    let v1 = (v & MASK).wrapping_mul(MUL1);
    let v2 = ((v >> 16) & MASK).wrapping_mul(MUL2);
    (v1.wrapping_add(v2) >> 32) as u32 as u64
}

/// The common short number at `s[p..]` in one branch-light pass: an
/// optional sign, at most 7 integer digits, an optional `.` and at most 7
/// fraction digits (at least one digit in all), no exponent. Two 8-byte
/// loads find both digit runs; returns the value, the index after the
/// number and the byte there. `None` for anything else, and within 24 bytes
/// of the end of `s` (one bounds check covers both loads); [`parse_number`]
/// then decides. Correctly rounded: the mantissa (< 10^14) and the power of
/// ten are exact (Clinger).
#[inline(always)]
fn parse_short<T: TextFloat>(s: &[u8], p: usize) -> Option<(T, usize, u32)> {
    let w: &[u8; 24] = s.get(p..)?.first_chunk()?;
    let c = w[0];
    let neg = c == b'-';
    let i = (neg | (c == b'+')) as usize;
    let a = u64::from_le_bytes(*w[i..].first_chunk()?);
    let (ta, n1) = digits8(a);
    if n1 == 8 {
        return None;
    }
    // The byte after the integer digits: a '.' starts the fraction. Without
    // one, the second load starts at that byte and finds no digits.
    let dot = ((a >> (8 * n1)) as u8 == b'.') as usize;
    let j = i + n1 + dot;
    let b = u64::from_le_bytes(*w[j..].first_chunk()?);
    let (tb, n2) = digits8(b);
    if n2 == 8 {
        return None;
    }
    let end_byte = (b >> (8 * n2)) as u8;
    if n1 + n2 == 0 || end_byte | 0x20 == b'e' {
        return None;
    }
    let m = value_lt8(ta, n1) * POW10_U64[n2] + value_lt8(tb, n2);
    let v = T::from_short(m, n2)?;
    Some((v.negate_if(neg), p + j + n2, end_byte as u32))
}

/// Marks "no byte": the end of the text, in a field's end byte.
const END: u32 = 256;

/// A field at `text[p..]` that [`parse_short`] did not take: blanks
/// before it skipped, then [`parse_short`] again or [`parse_number`].
/// Returns the value, the index after it and the byte there ([`END`] at the
/// end of `text`).
#[inline(never)]
fn slow_field<T: TextFloat>(text: &[u8], mut p: usize) -> Option<(T, usize, u32)> {
    while let Some(b' ' | b'\t') = text.get(p) {
        p += 1;
    }
    if let Some(r) = parse_short::<T>(text, p) {
        return Some(r);
    }
    let (v, used) = parse_number::<T>(text.get(p..)?)?;
    if used == 0 {
        return None;
    }
    let end = p + used;
    Some((v, end, text.get(end).map_or(END, |&b| b as u32)))
}

/// Parses a number at the start of `s`: [`parse_plain`], else fast-float2.
#[inline(always)]
fn parse_number<T: TextFloat>(s: &[u8]) -> Option<(T, usize)> {
    match parse_plain(s) {
        Some(r) => Some(r),
        None => T::parse_prefix(s),
    }
}

/// Loads a text file of numbers into a 2-D array (rows x columns).
///
/// A regular file is memory-mapped; anything else that reads as a stream
/// (a pipe or FIFO, `/dev/stdin`, `/dev/fd/N`, a procfs file, which reports
/// a size of 0) is read whole into memory first.
///
/// # The file must not change during the load
/// A regular file is memory-mapped: it must not be truncated or written to
/// until this returns. Truncating it mid-load kills the process with
/// SIGBUS (the mapped pages past the new end can no longer be read, and no
/// error can be returned instead); writing to it may give wrong numbers.
pub fn loadtxt<T: TextFloat>(path: impl AsRef<Path>, opts: &LoadTxtOptions) -> Result<Array2<T>> {
    let path = path.as_ref();
    let text = map_file(path, true)?;
    load(path, &text, opts)
}

/// The bytes of a text file: mapped, or read into memory.
enum Text {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Text {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Text::Mapped(m) => m,
            Text::Read(v) => v,
        }
    }
}

/// The bytes of `path`: a regular file with a size is mapped read-only;
/// anything else (a pipe, FIFO or character device, whose size says
/// nothing, or a procfs file, whose size reads 0) is read to its end, so
/// only a truly empty file gives no bytes. `populate` pre-faults the whole
/// map (a whole-file read wants it; a windowed import does not).
fn map_file(path: &Path, populate: bool) -> Result<Text> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        let e = std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory");
        return Err(Error::io(path, e));
    }
    let len = meta.len();
    if !meta.is_file() || len == 0 {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| Error::io(path, e))?;
        refuse_compressed(path, &bytes)?;
        return Ok(Text::Read(bytes));
    }
    // SAFETY: memmap2 requires that the file not change while it is mapped,
    // which this process cannot enforce on a file others may write; the
    // public functions that map (`loadtxt`, `import_into`,
    // `import_to_store`) pass that requirement to their caller in their
    // docs. What breaking it does: truncating the file makes the pages past
    // its new end unbacked, and the next read of one raises SIGBUS, which
    // kills the process (no error can be returned). Writing into the file
    // changes bytes behind the `&[u8]` we hold, which Rust's rules count as
    // undefined behaviour; the parser treats every byte as untrusted and
    // bounds-checks its own indices, so in practice that gives wrong numbers
    // or a parse error, but nothing is promised. The map itself is
    // read-only and private to this call.
    let mut mo = memmap2::MmapOptions::new();
    if populate {
        mo.populate();
    }
    let map = unsafe { mo.map(&file) }.map_err(|e| Error::io(path, e))?;
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    refuse_compressed(path, &map)?;
    Ok(Text::Mapped(map))
}

fn refuse_compressed(path: &Path, bytes: &[u8]) -> Result<()> {
    match compressed(bytes) {
        Some(kind) => Err(Error::invalid(format!(
            "{} is {kind}-compressed: this parser reads plain text; decompress it first",
            path.display()
        ))),
        None => Ok(()),
    }
}

/// The compression format whose magic bytes open `bytes`, if any (NumPy's
/// `loadtxt` decompresses `.gz` / `.bz2` / `.xz` paths itself; this parser
/// would otherwise report the first compressed byte as a bad number).
fn compressed(bytes: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 4] = [
        (&[0x1f, 0x8b], "gzip"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0], "xz"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
        (b"BZh", "bzip2"),
    ];
    let &(_, kind) = MAGIC.iter().find(|(m, _)| bytes.starts_with(m))?;
    // "BZh" could open a text; a bzip2 stream goes on with a block size
    // digit and the block magic `1AY&SY`.
    let bzip2_block = bytes.get(3).is_some_and(u8::is_ascii_digit)
        && bytes.get(4..).is_some_and(|b| b.starts_with(b"1AY&SY"));
    (kind != "bzip2" || bzip2_block).then_some(kind)
}

/// [`loadtxt`] over bytes already in memory (errors name `<memory>`).
pub fn loadtxt_bytes<T: TextFloat>(bytes: &[u8], opts: &LoadTxtOptions) -> Result<Array2<T>> {
    load(Path::new("<memory>"), bytes, opts)
}

/// Parsing configuration shared by all chunks.
struct Cfg<'a> {
    delim: Option<u8>,
    comment: Option<u8>,
    ncols: usize,
    /// For each file column, its output position (usecols only).
    col_map: Option<&'a [Option<usize>]>,
    /// The bytes that end a delimited field's scan: the delimiter, the
    /// comment byte and CR (one table lookup per byte instead of three
    /// compares).
    field_end: [bool; 256],
}

impl<'a> Cfg<'a> {
    fn new(
        delim: Option<u8>,
        comment: Option<u8>,
        ncols: usize,
        col_map: Option<&'a [Option<usize>]>,
    ) -> Cfg<'a> {
        let mut field_end = [false; 256];
        for b in [delim, comment, Some(b'\r')].into_iter().flatten() {
            field_end[b as usize] = true;
        }
        Cfg {
            delim,
            comment,
            ncols,
            col_map,
            field_end,
        }
    }
}

/// Why a row failed: wrong field count, or a bad token (0-based field
/// index and byte range within the line).
enum RowErr {
    Columns(usize),
    Token(usize, usize, usize),
    /// A carriage return that does not end the line (in its data or in its
    /// comment).
    LoneCr,
}

/// Whether `b` is a one-byte whitespace character: the ASCII characters
/// Python's `str.isspace()` (NumPy's whitespace) accepts other than LF,
/// that is space, tab, VT, FF, CR and the separators 0x1C-0x1F. A CR here
/// is a lone one ([`line_at`] strips the CR of a CRLF), which the parsers
/// report rather than skip.
#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b'\t' | 0x0b..=0x0d | 0x1c..=0x20)
}

/// Length of the whitespace character at `s[p..]`, 0 for none: [`is_ws`],
/// or one of the UTF-8 encoded characters that `str.isspace()` accepts and
/// NumPy (which decodes the file as UTF-8) splits and strips fields at:
/// U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F
/// and U+3000.
#[inline]
fn ws_at(s: &[u8], p: usize) -> usize {
    match s.get(p) {
        Some(&b) if is_ws(b) => 1,
        Some(&b) if b >= 0xc2 => wide_ws_at(s, p),
        _ => 0,
    }
}

/// The multi-byte part of [`ws_at`].
#[inline(never)]
fn wide_ws_at(s: &[u8], p: usize) -> usize {
    match s.get(p..) {
        Some([0xc2, 0x85 | 0xa0, ..]) => 2,
        Some(
            [0xe1, 0x9a, 0x80, ..]
            | [0xe2, 0x80, 0x80..=0x8a | 0xa8 | 0xa9 | 0xaf, ..]
            | [0xe2, 0x81, 0x9f, ..]
            | [0xe3, 0x80, 0x80, ..],
        ) => 3,
        _ => 0,
    }
}

/// Length of the whitespace character ([`ws_at`]) that ends at `s[..e]`,
/// 0 for none.
#[inline]
fn ws_before(s: &[u8], e: usize) -> usize {
    match &s[..e] {
        [.., b] if is_ws(*b) => 1,
        [.., 0xc2, 0x85 | 0xa0] => 2,
        [.., 0xe1, 0x9a, 0x80]
        | [.., 0xe2, 0x80, 0x80..=0x8a | 0xa8 | 0xa9 | 0xaf]
        | [.., 0xe2, 0x81, 0x9f]
        | [.., 0xe3, 0x80, 0x80] => 3,
        _ => 0,
    }
}

/// Index of the first `needle` in `hay`. Blocks of 32 bytes are compared
/// into a bit mask, a loop shape the compiler turns into SIMD compares.
#[inline]
fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    let mut blocks = hay.chunks_exact(32);
    let mut base = 0;
    for blk in &mut blocks {
        let mut m: u32 = 0;
        for (j, &b) in blk.iter().enumerate() {
            m |= ((b == needle) as u32) << j;
        }
        if m != 0 {
            return Some(base + m.trailing_zeros() as usize);
        }
        base += 32;
    }
    blocks
        .remainder()
        .iter()
        .position(|&b| b == needle)
        .map(|p| p + base)
}

/// The line starting at `pos`: (content end excluding `\r\n`, next line start).
#[inline]
fn line_at(bytes: &[u8], pos: usize, end: usize) -> (usize, usize) {
    let (mut e, next) = match find_byte(&bytes[pos..end], b'\n') {
        Some(i) => (pos + i, pos + i + 1),
        None => (end, end),
    };
    if e > pos && bytes[e - 1] == b'\r' {
        e -= 1;
    }
    (e, next)
}

/// The error for a line (as [`line_at`] gives it) that holds a lone CR,
/// in its data or in its comment: NumPy reads the file in text mode, where
/// a lone CR ends a line, so reading on would silently join lines (or hide
/// the data after a CR in a comment). Header lines, and the comment and
/// blank lines among the data, come here; the data rows meet theirs in the
/// parsers.
fn lone_cr(path: &Path, bytes: &[u8], line_start: usize, line: &[u8]) -> Result<()> {
    // `line_at` strips the CR of a CRLF, so a CR here is a lone one.
    if find_byte(line, b'\r').is_some() {
        return Err(row_error(path, bytes, line_start, line, RowErr::LoneCr, 0));
    }
    Ok(())
}

/// Whether the comment `text[p..stop]` (`stop` a newline or the text's end)
/// holds a lone CR: any CR but one just before `stop` (the CR of a CRLF, or
/// one ending the text, which [`line_at`] strips too).
#[inline(never)]
fn cr_in_comment(text: &[u8], p: usize, stop: usize) -> bool {
    let body = &text[p..stop];
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    find_byte(body, b'\r').is_some()
}

/// True when the line (as [`line_at`] gives it, without its line end)
/// holds data, as NumPy decides: splitting on whitespace (no delimiter),
/// something other than whitespace before any comment; with a delimiter,
/// anything before the comment, whitespace too (NumPy reads such a line as
/// one field of blanks, an error for numbers, rather than skip it), but a
/// lone CR, which is reported as such.
#[inline]
fn is_data(line: &[u8], comment: Option<u8>, delim: Option<u8>) -> bool {
    if delim.is_some() {
        return line
            .iter()
            .take_while(|&&b| Some(b) != comment)
            .any(|&b| b != b'\r');
    }
    let mut p = 0;
    while p < line.len() {
        match ws_at(line, p) {
            0 => return Some(line[p]) != comment,
            n => p += n,
        }
    }
    false
}

/// Data rows in `text` (which starts at a line start): the lines
/// [`is_data`] takes. One branch-free pass counting the lines that hold a
/// byte before any comment that is not whitespace (no delimiter) or not a
/// CR (with one); without a delimiter, a text holding non-ASCII bytes (which
/// may be multi-byte whitespace) is counted line by line instead.
fn count_rows(text: &[u8], comment: Option<u8>, delim: Option<u8>) -> usize {
    // Each byte's kind from one table lookup: a newline, the comment byte,
    // a byte that makes no data (whitespace, or with a delimiter a CR).
    const NL: u8 = 1;
    const COMMENT: u8 = 2;
    const BLANK: u8 = 4;
    let split_ws = delim.is_none();
    let mut kind = [0u8; 256];
    for (b, k) in kind.iter_mut().enumerate() {
        let b = b as u8;
        let blank = if split_ws { is_ws(b) } else { b == b'\r' };
        *k = if blank { BLANK } else { 0 };
    }
    // The comment byte is never whitespace (`check_options`), and a newline
    // closes a comment before it could open one.
    if let Some(c) = comment {
        kind[c as usize] = COMMENT;
    }
    kind[b'\n' as usize] = NL;
    let (mut rows, mut has, mut in_comment, mut all) = (0usize, false, false, 0u8);
    for &b in text {
        let k = kind[b as usize];
        let nl = k & NL != 0;
        in_comment = (in_comment | (k & COMMENT != 0)) & !nl;
        has |= !((k & BLANK != 0) | nl | in_comment);
        all |= b;
        rows += (nl & has) as usize;
        has &= !nl;
    }
    if all >= 0x80 && split_ws {
        return count_rows_by_line(text, comment, delim);
    }
    rows + has as usize
}

/// [`count_rows`] one line at a time, by [`is_data`].
#[inline(never)]
fn count_rows_by_line(text: &[u8], comment: Option<u8>, delim: Option<u8>) -> usize {
    let (mut p, mut rows) = (0, 0);
    while p < text.len() {
        let (e, next) = line_at(text, p, text.len());
        rows += is_data(&text[p..e], comment, delim) as usize;
        p = next;
    }
    rows
}

/// Lines in `text` (newlines, plus an unterminated last line) and whether
/// the comment byte occurs, in one pass of byte compares ([`count_bytes`]).
/// Without a comment byte in the text, every data row is a line, so the
/// line count bounds the data rows, and equals it unless a line is blank or
/// whitespace-only (which the parser then finds).
fn count_lines(text: &[u8], comment: Option<u8>) -> (usize, bool) {
    // Without a comment byte, `\n` stands in and its hits are ignored.
    let (lines, seen) = count_bytes(text, comment.unwrap_or(b'\n'));
    let tail = text.last().is_some_and(|&b| b != b'\n');
    (lines + tail as usize, comment.is_some() && seen)
}

/// Newlines in `text`, and whether byte `c` occurs: AVX2 where the CPU has
/// it, else [`count_bytes_scalar`].
fn count_bytes(text: &[u8], c: u8) -> (usize, bool) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above), the only feature
        // `v3::count_bytes` is compiled for.
        return unsafe { v3::count_bytes(text, c) };
    }
    count_bytes_scalar(text, c)
}

/// [`count_bytes`] as byte compares summed in u8 per block (a loop shape
/// the compiler vectorises at full byte width).
fn count_bytes_scalar(text: &[u8], c: u8) -> (usize, bool) {
    let (mut lines, mut seen) = (0usize, 0u8);
    for blk in text.chunks(BLOCK) {
        let (mut n, mut s) = (0u8, 0u8);
        for &b in blk {
            n = n.wrapping_add((b == b'\n') as u8);
            s |= (b == c) as u8;
        }
        lines += n as usize;
        seen |= s;
    }
    (lines, seen != 0)
}

/// Bytes per block of the u8 counters (below 256, so a block's sum fits).
const BLOCK: usize = 240;

/// Parses the data row starting at `p` in one pass (tokens, separators and
/// the line end together), returning the next line's start. Only the plain
/// case is handled: spaces or tabs around fields, then LF, CRLF, a comment or
/// the end. Anything else (a blank or comment line, other whitespace, a bad
/// or missing token, a wrong field count) returns `None`, and the caller
/// re-parses the line with [`parse_row`], which accepts exactly the same rows
/// and words the errors. `out` has `cfg.ncols` slots.
#[inline]
fn fast_row<T: TextFloat>(
    text: &[u8],
    mut p: usize,
    cfg: &Cfg,
    out: &mut [MaybeUninit<T>],
) -> Option<usize> {
    // The byte that usually ends a field: the delimiter, else one space.
    let sep = cfg.delim.unwrap_or(b' ') as u32;
    let last = out.len().checked_sub(1)?;
    for (k, slot) in out.iter_mut().enumerate() {
        let (v, end, end_byte) = match parse_short::<T>(text, p) {
            Some(r) => r,
            None => slow_field::<T>(text, p)?,
        };
        slot.write(v);
        p = end;
        if k < last {
            if end_byte == sep {
                p += 1;
                continue;
            }
        } else if end_byte == b'\n' as u32 {
            return Some(p + 1);
        }
        match after_field(text, p, cfg)? {
            After::Field(next) if k < last => p = next,
            After::RowEnd(next) if k == last => return Some(next),
            _ => return None,
        }
    }
    None
}

/// Bit `j` set where `w[j]` is `a`, and where it is `b`: SSE2 compares and
/// mask moves (x86-64 always has SSE2).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn mask_eq2(w: &[u8; 64], a: u8, b: u8) -> (u64, u64) {
    use std::arch::x86_64::{__m128i, _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8};
    let (mut ma, mut mb) = (0u64, 0u64);
    // SAFETY: these intrinsics need only SSE2, which this build targets
    // (`cfg(target_feature = "sse2")`, part of the x86-64 baseline); they
    // take values, no pointers.
    unsafe {
        let (va, vb) = (_mm_set1_epi8(a as i8), _mm_set1_epi8(b as i8));
        for (k, blk) in w.chunks_exact(16).enumerate() {
            let v: __m128i = bytemuck::cast(*<&[u8; 16]>::try_from(blk).unwrap());
            ma |= (_mm_movemask_epi8(_mm_cmpeq_epi8(v, va)) as u16 as u64) << (16 * k);
            mb |= (_mm_movemask_epi8(_mm_cmpeq_epi8(v, vb)) as u16 as u64) << (16 * k);
        }
    }
    (ma, mb)
}

/// Bit `j` set where `w[j]` is `a`, and where it is `b`.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn mask_eq2(w: &[u8; 64], a: u8, b: u8) -> (u64, u64) {
    let (mut ma, mut mb) = (0u64, 0u64);
    for (j, &x) in w.iter().enumerate() {
        ma |= ((x == a) as u64) << j;
        mb |= ((x == b) as u64) << j;
    }
    (ma, mb)
}

/// Parses a row of plain fields each ended by exactly one separator byte
/// (the delimiter, or one space) and the last by LF, from bitmasks of the
/// separators and newlines of 64-byte windows: each field's start comes
/// from the mask, not from parsing the one before, so the fields' parses
/// overlap in the CPU. Each field must be a [`parse_short`] number ending
/// right at its separator. Anything else returns `None` (the caller tries
/// [`fast_row`], then [`parse_row`]). `out` has `cfg.ncols` slots.
#[inline(always)]
fn indexed_row<T: TextFloat>(
    text: &[u8],
    p: usize,
    cfg: &Cfg,
    out: &mut [MaybeUninit<T>],
) -> Option<usize> {
    let sep = cfg.delim.unwrap_or(b' ');
    let last = out.len().checked_sub(1)?;
    let mut slots = out.iter_mut().enumerate();
    let mut start = p;
    let mut base = p;
    loop {
        let w: &[u8; 64] = text.get(base..)?.first_chunk()?;
        let (seps, nls) = mask_eq2(w, sep, b'\n');
        // Ends of fields at or after `start` in this window.
        let mut ends = (seps | nls) & (u64::MAX << (start - base));
        while ends != 0 {
            let bit = ends.trailing_zeros();
            ends &= ends - 1;
            let pos = base + bit as usize;
            let (v, end, _) = parse_short::<T>(text, start)?;
            let (k, slot) = slots.next()?;
            if end != pos {
                return None;
            }
            slot.write(v);
            if (nls >> bit) & 1 != 0 {
                return (k == last).then_some(pos + 1);
            }
            start = pos + 1;
        }
        if start == base {
            // No field ends within 64 bytes: not a short number.
            return None;
        }
        // The next window starts at the next field.
        base = start;
    }
}

/// What follows a field, past blanks.
enum After {
    /// Another field starts here.
    Field(usize),
    /// The row ended; the next line starts here.
    RowEnd(usize),
}

/// The general case of what follows the field ending at `p` (the usual
/// separators are handled inline by [`fast_row`]): blanks, then the line's
/// end (LF, CRLF, a comment, the text's end) or a separator; `None` for
/// anything else.
#[inline(never)]
fn after_field(text: &[u8], mut p: usize, cfg: &Cfg) -> Option<After> {
    let e = text.len();
    let token_end = p;
    while let Some(b' ' | b'\t') = text.get(p) {
        p += 1;
    }
    let Some(&b) = text.get(p) else {
        return Some(After::RowEnd(e));
    };
    match b {
        b'\n' => Some(After::RowEnd(p + 1)),
        b'\r' if text.get(p + 1) == Some(&b'\n') => Some(After::RowEnd(p + 2)),
        _ if Some(b) == cfg.comment => {
            let stop = find_byte(&text[p..], b'\n').map_or(e, |i| p + i);
            // A lone CR in the comment would hide the rows after it: leave
            // the line to `parse_row`, which reports it.
            if cr_in_comment(text, p, stop) {
                return None;
            }
            Some(After::RowEnd((stop + 1).min(e)))
        }
        _ => match cfg.delim {
            Some(d) if b == d => Some(After::Field(p + 1)),
            None if p > token_end => Some(After::Field(p)),
            _ => None,
        },
    }
}

/// Whether `b` can occur inside a number token (digits, sign, dot, and the
/// letters of exponents and `nan` / `inf` spellings): such a delimiter is
/// left to [`parse_row`], which splits a line at every delimiter first.
fn in_number(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-')
}

/// Counts the fields of a data line.
fn count_fields(line: &[u8], cfg: &Cfg) -> usize {
    let line = match cfg.comment.and_then(|c| find_byte(line, c)) {
        Some(i) => &line[..i],
        None => line,
    };
    match cfg.delim {
        Some(d) => line.iter().filter(|&&b| b == d).count() + 1,
        None => {
            let (mut n, mut p, mut in_tok) = (0, 0, false);
            while p < line.len() {
                match ws_at(line, p) {
                    0 => {
                        n += !in_tok as usize;
                        in_tok = true;
                        p += 1;
                    }
                    w => {
                        in_tok = false;
                        p += w;
                    }
                }
            }
            n
        }
    }
}

/// Parses one data line into `out` (`cfg.nout` values).
#[inline]
fn parse_row<T: TextFloat>(
    line: &[u8],
    cfg: &Cfg,
    out: &mut [MaybeUninit<T>],
) -> std::result::Result<(), RowErr> {
    // A comment byte that can be part of a number (`1`, `.`, `e`) still
    // starts a comment, as in NumPy: cut the line there first, since the
    // number parser would read through it.
    let line = match cfg.comment.filter(|&c| in_number(c)) {
        Some(c) => match find_byte(line, c) {
            Some(i) if find_byte(&line[i..], b'\r').is_some() => return Err(RowErr::LoneCr),
            Some(i) => &line[..i],
            None => line,
        },
        None => line,
    };
    let n = line.len();
    let is_end = |p: usize| p >= n || Some(line[p]) == cfg.comment;
    // A CR inside the line is a lone one: `line_at` strips the CR of a
    // CRLF. The scans below meet every such CR before the comment, as
    // whitespace or as the end of a field; `comment_ok` checks the comment.
    let comment_ok = |p: usize| {
        if p < n && find_byte(&line[p..], b'\r').is_some() {
            Err(RowErr::LoneCr)
        } else {
            Ok(())
        }
    };
    let mut p = 0;
    let mut col = 0;
    match cfg.delim {
        None => loop {
            loop {
                match ws_at(line, p) {
                    0 => break,
                    _ if line[p] == b'\r' => return Err(RowErr::LoneCr),
                    w => p += w,
                }
            }
            if is_end(p) {
                comment_ok(p)?;
                break;
            }
            if col >= cfg.ncols {
                return Err(RowErr::Columns(col + count_fields(&line[p..], cfg)));
            }
            let start = p;
            let target = match cfg.col_map {
                None => Some(col),
                Some(m) => m[col],
            };
            match target {
                Some(t) => match parse_number::<T>(&line[p..]) {
                    Some((v, used))
                        if used > 0 && (ws_at(line, p + used) > 0 || is_end(p + used)) =>
                    {
                        out[t].write(v);
                        p += used;
                    }
                    _ => {
                        while !is_end(p) && ws_at(line, p) == 0 {
                            p += 1;
                        }
                        return Err(RowErr::Token(col, start, p));
                    }
                },
                None => {
                    while !is_end(p) && ws_at(line, p) == 0 {
                        p += 1;
                    }
                }
            }
            col += 1;
        },
        Some(d) => loop {
            // Blanks around a field are stripped (NumPy's whitespace, as in
            // `ws_at`), except a whitespace delimiter. The delimiter is ASCII
            // (`check_options`), so never part of a multi-byte blank.
            loop {
                match ws_at(line, p) {
                    0 => break,
                    _ if line[p] == d => break,
                    _ if line[p] == b'\r' => return Err(RowErr::LoneCr),
                    w => p += w,
                }
            }
            if col >= cfg.ncols {
                return Err(RowErr::Columns(col + count_fields(&line[p..], cfg)));
            }
            let start = p;
            let target = match cfg.col_map {
                None => Some(col),
                Some(m) => m[col],
            };
            // Split first, then parse the whole field (as numpy does): a
            // delimiter that can be part of a number (`.`, `-`, `e`, a
            // digit) still separates fields.
            let mut q = p;
            while q < n && !cfg.field_end[line[q] as usize] {
                q += 1;
            }
            if q < n && line[q] == b'\r' {
                return Err(RowErr::LoneCr);
            }
            // The field `line[start..q]` holds no delimiter: strip its
            // trailing blanks.
            let mut e = q;
            loop {
                match ws_before(&line[start..], e - start) {
                    0 => break,
                    w => e -= w,
                }
            }
            if let Some(t) = target {
                match parse_number::<T>(&line[start..e]) {
                    Some((v, used)) if used > 0 && used == e - start => {
                        out[t].write(v);
                    }
                    _ => return Err(RowErr::Token(col, start, e)),
                }
            }
            p = q;
            col += 1;
            if is_end(p) {
                comment_ok(p)?;
                break;
            }
            p += 1; // the delimiter
        },
    }
    if col != cfg.ncols {
        return Err(RowErr::Columns(col));
    }
    Ok(())
}

fn line_number(bytes: &[u8], pos: usize) -> u64 {
    bytes[..pos].iter().filter(|&&b| b == b'\n').count() as u64 + 1
}

fn row_error(
    path: &Path,
    bytes: &[u8],
    line_start: usize,
    line: &[u8],
    e: RowErr,
    ncols: usize,
) -> Error {
    let line_no = line_number(bytes, line_start);
    match e {
        RowErr::Columns(found) => Error::TextColumns {
            path: path.to_path_buf(),
            line: line_no,
            expected: ncols,
            found,
        },
        RowErr::Token(field, s, e) => Error::TextParse {
            path: path.to_path_buf(),
            line: line_no,
            column: field + 1,
            token: String::from_utf8_lossy(&line[s..e.min(s + 100)]).into_owned(),
        },
        RowErr::LoneCr => Error::TextLineEnding {
            path: path.to_path_buf(),
            line: line_no,
        },
    }
}

fn check_options(opts: &LoadTxtOptions) -> Result<()> {
    // A byte of a UTF-8 multi-byte character is no character of its own
    // (NumPy's comment and delimiter are characters), and a multi-byte
    // blank must never hold the delimiter or the comment byte.
    for (what, b) in [("comment", opts.comments), ("delimiter", opts.delimiter)] {
        if let Some(b) = b.filter(|b| !b.is_ascii()) {
            return Err(Error::invalid(format!(
                "{what} byte 0x{b:02x} is not ASCII"
            )));
        }
    }
    if let Some(c) = opts.comments
        && (c == b'\n' || is_ws(c))
    {
        return Err(Error::invalid(format!(
            "comment {:?} cannot be a newline or whitespace",
            c as char
        )));
    }
    if let Some(d) = opts.delimiter
        && (d == b'\n' || d == b'\r' || Some(d) == opts.comments)
    {
        return Err(Error::invalid(format!(
            "delimiter {:?} cannot be a line ending or the comment byte",
            d as char
        )));
    }
    Ok(())
}

/// The pool built for the last thread count asked for that differed from the
/// current pool's, kept so that repeated calls with the same `threads` do not
/// start (about 135 us) and tear down a pool each time. At most one is kept.
static POOL: Mutex<Option<(usize, Arc<rayon::ThreadPool>)>> = Mutex::new(None);

/// A pool of `threads` threads: the kept one when its size matches, else a
/// new one, which replaces it (callers still inside the old one keep it alive
/// through their `Arc`).
fn pool_of(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    let mut kept = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((n, pool)) = &*kept
        && *n == threads
    {
        return Ok(Arc::clone(pool));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map(Arc::new)
        .map_err(|e| Error::invalid(format!("cannot start {threads} threads: {e}")))?;
    *kept = Some((threads, Arc::clone(&pool)));
    Ok(pool)
}

/// The threads a parse uses for `opts.threads` (0: the current pool): at
/// most four per core, since more would only start (and keep) idle threads;
/// the result does not depend on the count. Not clamped to the file's
/// chunks: the one kept pool is keyed by its size, so a size that followed
/// each file would rebuild the pool whenever files alternate.
fn threads_for(opts: &LoadTxtOptions) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    opts.threads.min(cores.saturating_mul(4))
}

/// The smallest chunk [`parse_span`] cuts when it picks the size itself.
const MIN_CHUNK: usize = 1 << 16;

/// Runs `f` in a pool of `threads` threads (the current pool when 0 or
/// when it already has that many). In a process forked after the pools
/// started (their threads stayed in the parent), in a pool built for the
/// call.
fn in_pool<R: Send>(threads: usize, f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    if !zrecord_engine::pool_usable() {
        let n = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| Error::invalid(format!("cannot start {n} parser threads: {e}")))?;
        return pool.install(f);
    }
    if threads == 0 || threads == rayon::current_num_threads() {
        return f();
    }
    pool_of(threads)?.install(f)
}

fn load<T: TextFloat>(path: &Path, bytes: &[u8], opts: &LoadTxtOptions) -> Result<Array2<T>> {
    check_options(opts)?;
    in_pool(threads_for(opts), || load_in_pool(path, bytes, opts))
}

fn empty<T: TextFloat>(cols: usize) -> Array2<T> {
    Array2::from_shape_vec((0, cols), Vec::new())
        .expect("an empty array has every shape with a zero")
}

/// Where the data starts and how its rows map to output columns.
struct Layout {
    /// Byte offset of the first data line after `skip_rows`.
    first: usize,
    /// Fields per data line (fixed by the first data line).
    ncols: usize,
    /// For each file column, its position among the parsed columns
    /// (usecols only).
    col_map: Option<Vec<Option<usize>>>,
    /// Parsed columns (each file column at most once).
    nout: usize,
    /// Output column `j` copies parsed column `expand[j]` (only when
    /// `usecols` names a column twice).
    expand: Option<Vec<usize>>,
}

impl Layout {
    /// Output columns.
    fn width(&self) -> usize {
        self.expand.as_ref().map_or(self.nout, Vec::len)
    }

    /// `rows` parsed rows (`nout` values each) as output rows: the same
    /// vector unless `usecols` repeats a column.
    fn widen<T: Copy>(&self, parsed: Vec<T>) -> Vec<T> {
        match &self.expand {
            None => parsed,
            Some(ex) => parsed
                .chunks_exact(self.nout)
                .flat_map(|row| ex.iter().map(move |&k| row[k]))
                .collect(),
        }
    }

    fn cfg(&self, opts: &LoadTxtOptions) -> Cfg<'_> {
        Cfg::new(
            opts.delimiter,
            opts.comments,
            self.ncols,
            self.col_map.as_deref(),
        )
    }
}

/// Skips the header rows and reads the first data line; `None` when the
/// text holds no data rows.
fn layout(path: &Path, bytes: &[u8], opts: &LoadTxtOptions) -> Result<Option<Layout>> {
    let end = bytes.len();
    let comment = opts.comments;
    let mut pos = 0;
    let mut skipped = 0;
    let first = loop {
        if pos >= end {
            return Ok(None);
        }
        let (e, next) = line_at(bytes, pos, end);
        lone_cr(path, bytes, pos, &bytes[pos..e])?;
        if is_data(&bytes[pos..e], comment, opts.delimiter) {
            if skipped == opts.skip_rows {
                break pos;
            }
            skipped += 1;
        }
        pos = next;
    };
    let (fe, _) = line_at(bytes, first, end);
    let probe = Cfg::new(opts.delimiter, comment, 0, None);
    let ncols = count_fields(&bytes[first..fe], &probe);
    let (col_map, nout, expand) = match &opts.usecols {
        None => (None, ncols, None),
        Some(cols) => {
            // File column -> parsed position, in first-named order; output
            // column j -> parsed position `slots[j]`.
            let mut m = vec![None; ncols];
            let mut parsed = 0;
            let mut slots = Vec::with_capacity(cols.len());
            for &c in cols {
                let k = if c < 0 {
                    c.checked_add_unsigned(ncols)
                } else {
                    Some(c)
                }
                .and_then(|k| usize::try_from(k).ok())
                .filter(|&k| k < ncols)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "usecols index {c} is out of range: {} has {ncols} columns (line {})",
                        path.display(),
                        line_number(bytes, first)
                    ))
                })?;
                let slot = *m[k].get_or_insert_with(|| {
                    parsed += 1;
                    parsed - 1
                });
                slots.push(slot);
            }
            let expand = (parsed < slots.len()).then_some(slots);
            (Some(m), parsed, expand)
        }
    };
    Ok(Some(Layout {
        first,
        ncols,
        col_map,
        nout,
        expand,
    }))
}

fn load_in_pool<T: TextFloat>(
    path: &Path,
    bytes: &[u8],
    opts: &LoadTxtOptions,
) -> Result<Array2<T>> {
    let Some(lay) = layout(path, bytes, opts)? else {
        // No data row fixes the column count; `usecols` still fixes the
        // output's (NumPy's shape too).
        return Ok(empty(opts.usecols.as_ref().map_or(0, Vec::len)));
    };
    let nout = lay.nout;
    if opts.max_rows == Some(0) {
        return Ok(empty(lay.width()));
    }
    let cfg = lay.cfg(opts);
    let mut out = Vec::new();
    let max_rows = opts.max_rows.unwrap_or(usize::MAX);
    let rows = parse_span(
        path,
        bytes,
        (lay.first, bytes.len()),
        &cfg,
        nout,
        max_rows,
        opts.chunk_bytes,
        &mut out,
    )?;
    Array2::from_shape_vec((rows, lay.width()), lay.widen(out))
        .map_err(|e| Error::invalid(e.to_string()))
}

/// One chunk of the parallel parse.
struct Chunk<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    /// Byte range, from a line start to a line end or the text's end.
    span: (usize, usize),
    /// Data rows to parse (at most; fewer if the chunk has fewer).
    take: usize,
    /// Values per row.
    nout: usize,
    cfg: &'a Cfg<'a>,
    /// Whether [`fast_row`] may serve the rows.
    fast: bool,
    /// Whether the lines after the chunk's last data row are read too (no
    /// row limit stops before them): they are comment or blank lines, but
    /// a lone CR in one would hide a row.
    tail: bool,
}

/// Parses up to `c.take` data rows of the chunk into `out` (`take` rows of
/// `nout` slots); returns the rows parsed.
/// `V3`: the CPU has AVX2 and BMI2 (set only by [`parse_chunk_v3`]), so
/// the indexed rows go to [`v3::indexed_row`].
#[inline(always)]
fn parse_chunk<T: TextFloat, const V3: bool>(
    c: &Chunk,
    out: &mut [MaybeUninit<T>],
) -> Result<usize> {
    let (bytes, cfg) = (c.bytes, c.cfg);
    let (s, e) = c.span;
    let nout = c.nout;
    let mut p = s;
    let mut r = 0;
    // The indexed row parser serves rows of single separators; after a miss
    // (aligned columns, CRLF, comments, exponents) the next 32 rows go
    // straight to `fast_row`, so texts it never serves waste little.
    let mut backoff = if c.fast { 0u32 } else { u32::MAX };
    // The AVX2 rows split at every separator before parsing, where the
    // other parsers read a number first: they differ when the delimiter
    // can be part of a number, which the AVX2 rows leave to the others.
    #[cfg(target_arch = "x86_64")]
    let v3 = V3 && !cfg.delim.is_some_and(in_number);
    while r < c.take && p < e {
        let row = &mut out[r * nout..(r + 1) * nout];
        if backoff == 0 {
            #[cfg(target_arch = "x86_64")]
            let indexed = if v3 {
                // The whole text, not just the chunk, backs its 80-byte
                // windows: the row still ends at its newline, at or
                // before `e`, so only the text's last row falls back.
                // SAFETY: `v3` implies `V3`, set only by `parse_chunk_v3`,
                // whose callers check that the CPU has AVX2 and BMI2 (the
                // features `v3::indexed_row` is compiled for).
                unsafe { v3::indexed_row(bytes, p, cfg.delim.unwrap_or(b' '), row) }
            } else {
                indexed_row(&bytes[..e], p, cfg, row)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let indexed = indexed_row(&bytes[..e], p, cfg, row);
            if let Some(next) = indexed {
                p = next;
                r += 1;
                continue;
            }
            backoff = 32;
        } else if c.fast {
            backoff -= 1;
        }
        if c.fast
            && let Some(next) = fast_row(&bytes[..e], p, cfg, row)
        {
            p = next;
            r += 1;
            continue;
        }
        // Anything unusual (blank or comment line, usecols, odd whitespace,
        // a bad token): the line-at-a-time parser decides, and words the
        // error.
        let (le, next) = line_at(bytes, p, e);
        let line = &bytes[p..le];
        if is_data(line, cfg.comment, cfg.delim) {
            parse_row(line, cfg, row)
                .map_err(|err| row_error(c.path, bytes, p, line, err, cfg.ncols))?;
            r += 1;
        } else {
            // A comment or blank line: a lone CR in it would hide a row.
            lone_cr(c.path, bytes, p, line)?;
        }
        p = next;
    }
    if c.tail && p < e && find_byte(&bytes[p..e], b'\r').is_some() {
        while p < e {
            let (le, next) = line_at(bytes, p, e);
            lone_cr(c.path, bytes, p, &bytes[p..le])?;
            p = next;
        }
    }
    Ok(r)
}

/// [`parse_chunk`] compiled for x86-64-v3 CPUs (AVX2, BMI2: variable
/// shifts without the `cl` register, fewer moves in the hot loop).
///
/// # Safety
/// The CPU must support AVX2 and BMI2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
unsafe fn parse_chunk_v3<T: TextFloat>(c: &Chunk, out: &mut [MaybeUninit<T>]) -> Result<usize> {
    parse_chunk::<T, true>(c, out)
}

/// [`parse_chunk`], built for x86-64-v3 where the CPU has it.
fn parse_chunk_any<T: TextFloat>(c: &Chunk, out: &mut [MaybeUninit<T>]) -> Result<usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("bmi2") && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has the features `parse_chunk_v3` is compiled for
        // (checked just above).
        return unsafe { parse_chunk_v3(c, out) };
    }
    parse_chunk::<T, false>(c, out)
}

/// Asks Linux to back the big output buffer with transparent huge pages
/// (where the system allows them on request): one fault per 2 MiB instead
/// of one per 4 KiB, the same zeroing. Small buffers and other systems: no-op.
fn advise_huge_pages<T>(buf: &mut [MaybeUninit<T>]) {
    advise_huge_pages_bytes(buf);
}

/// Asks the kernel to back the whole 2 MiB pages inside `buf` with huge
/// pages (a large fresh output then takes ~500x fewer page faults). Advice
/// only: contents and rights are unchanged.
pub(crate) fn advise_huge_pages_bytes<B>(buf: &mut [B]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let bytes = std::mem::size_of_val(buf);
        if bytes < 4 * HUGE {
            return;
        }
        let start = buf.as_mut_ptr() as usize;
        let first = start.next_multiple_of(HUGE);
        let last = (start + bytes) / HUGE * HUGE;
        if last > first {
            // SAFETY: advice only (no change to contents or mapping rights)
            // over whole pages inside this live, exclusively borrowed
            // allocation; failure is harmless and ignored.
            unsafe {
                libc::madvise(
                    first as *mut libc::c_void,
                    last - first,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// Parses the data rows of `bytes[span.0..span.1]` (a span starting at a
/// line start and ending at a line end or the text's end), at most
/// `max_rows` of them, into `out` (replaced; `rows * nout` values).
/// Returns the row count. Line numbers in errors count from `bytes[0]`.
#[allow(clippy::too_many_arguments)]
fn parse_span<T: TextFloat>(
    path: &Path,
    bytes: &[u8],
    span: (usize, usize),
    cfg: &Cfg,
    nout: usize,
    max_rows: usize,
    chunk_bytes: usize,
    out: &mut Vec<T>,
) -> Result<usize> {
    let (first, end) = span;
    let comment = cfg.comment;
    // Cut [first, end) into chunks at line starts.
    let threads = rayon::current_num_threads().max(1);
    let target = if chunk_bytes > 0 {
        chunk_bytes
    } else {
        // Small enough that the last chunks even out the threads' shares.
        ((end - first) / (threads * 32)).clamp(MIN_CHUNK, 1 << 20)
    };
    let mut bounds = vec![first];
    let mut at = first;
    while at < end {
        let mut cut = at.saturating_add(target).min(end);
        if cut < end {
            cut = match find_byte(&bytes[cut..end], b'\n') {
                Some(i) => cut + i + 1,
                None => end,
            };
        }
        bounds.push(cut);
        at = cut;
    }
    let chunks: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();

    // Pass 1: data rows per chunk, and whether that count is exact. Chunks
    // without the comment byte get their line count, an upper bound (exact
    // unless a line is blank), from one cheap pass.
    let mut counts: Vec<(usize, bool)> = chunks
        .par_iter()
        .map(|&(s, e)| {
            let text = &bytes[s..e];
            match count_lines(text, comment) {
                (lines, false) => (lines, false),
                (_, true) => (count_rows(text, comment, cfg.delim), true),
            }
        })
        .collect();
    // The fast path skips spaces and tabs around fields, so it cannot serve
    // a whitespace delimiter (where each one separates a field).
    // Nor a delimiter that can be part of a number: the fast rows read a
    // number before looking for a separator, where a field must end at
    // every delimiter.
    // Nor a comment byte that can be part of a number: the fast rows would
    // read through it.
    let fast = cfg.col_map.is_none()
        && !cfg.delim.is_some_and(is_ws)
        && !cfg.delim.is_some_and(in_number)
        && !cfg.comment.is_some_and(in_number);
    loop {
        let total: usize = counts.iter().map(|c| c.0).sum();
        let rows = total.min(max_rows);
        let len = rows.checked_mul(nout).ok_or_else(|| Error::Overflow {
            context: path.display().to_string(),
            detail: format!("{rows} rows x {nout} columns"),
        })?;
        // At most one value per two input bytes: justified by the input
        // size. Left uninitialised: each row is written once by the parse
        // (no zero-filling pass, and the pages are first touched by the
        // parallel workers).
        out.clear();
        out.reserve(len);
        advise_huge_pages(out.spare_capacity_mut());
        let mut rest = &mut out.spare_capacity_mut()[..len];

        // Hand each chunk its rows of the output. Without a binding row
        // limit every line is read, also the chunks after the last row
        // (comment and blank lines, checked for lone CRs).
        let read_all = max_rows > total;
        let mut work = Vec::with_capacity(chunks.len());
        let mut left = rows;
        for (&(s, e), &(c, _)) in chunks.iter().zip(&counts) {
            if left == 0 && !read_all {
                break;
            }
            let take = c.min(left);
            let (mine, after) = rest.split_at_mut(take * nout);
            rest = after;
            left -= take;
            work.push((s, e, take, mine, read_all || left > 0));
        }
        let takes: Vec<usize> = work.iter().map(|w| w.2).collect();

        // Pass 2: parse in place; each chunk reports the rows it parsed.
        // The error reported is the first bad line's, whatever the thread
        // count: chunks after the lowest failing one known so far are
        // skipped, and the lowest failing chunk always runs to its error
        // (only a failure before it could skip it).
        let failed = AtomicUsize::new(usize::MAX);
        let results: Vec<Result<usize>> = work
            .into_par_iter()
            .enumerate()
            .map(|(i, (s, e, take, mine, tail))| {
                if i > failed.load(Ordering::Relaxed) {
                    return Ok(0);
                }
                let chunk = Chunk {
                    path,
                    bytes,
                    span: (s, e),
                    take,
                    nout,
                    cfg,
                    fast,
                    tail,
                };
                let r = parse_chunk_any(&chunk, mine);
                if r.is_err() {
                    failed.fetch_min(i, Ordering::Relaxed);
                }
                r
            })
            .collect();
        // In chunk order: the first error is the lowest failing chunk's,
        // and every skipped chunk comes after it.
        let got: Vec<usize> = results.into_iter().collect::<Result<_>>()?;
        if got == takes {
            // SAFETY: `len` values fit the capacity reserved above, and each
            // chunk parsed all `take` of its rows, every row writing all
            // `nout` of its slots (`fast_row` and `parse_row` succeed only
            // then), so all of `out[..len]` is initialised.
            unsafe { out.set_len(len) };
            return Ok(rows);
        }
        // Some chunk held blank lines, so its upper bound was too high.
        if rows < total && counts.iter().any(|c| !c.1) {
            // `max_rows` cut the rows by the bounds, so the wrong rows may
            // have been parsed: count exactly and parse again.
            for (c, &(s, e)) in counts.iter_mut().zip(&chunks) {
                if !c.1 {
                    *c = (count_rows(&bytes[s..e], comment, cfg.delim), true);
                }
            }
            continue;
        }
        // Every chunk parsed all its data rows: close the gaps.
        let spare = &mut out.spare_capacity_mut()[..len];
        let (mut src, mut dst) = (0, 0);
        for (&t, &g) in takes.iter().zip(&got) {
            spare.copy_within(src..src + g * nout, dst);
            src += t * nout;
            dst += g * nout;
        }
        // SAFETY: `dst <= len` is within the reserved capacity, and
        // `out[..dst]` now holds the `got` rows each chunk wrote in full
        // (moved down over the unwritten slots of the chunks before).
        unsafe { out.set_len(dst) };
        return Ok(got.iter().sum());
    }
}

/// Appends the rows of the text file at `path` to `store`, a dense store of
/// `f64` or `f32` records shaped `[columns]` (the output columns:
/// `usecols.len()` when set), in batches of at most `batch_rows` records
/// (default: [`DEFAULT_BATCH_BYTES`](crate::import::DEFAULT_BATCH_BYTES)
/// worth). The mapped file is parsed one window of lines at a time (a few
/// MiB, or `threads x chunk_bytes x 2` when `opts.chunk_bytes` is set) by the
/// same parallel parser as [`loadtxt`], so memory is one window of values
/// whatever the file's size. Rows before an error stay appended.
///
/// # The file must not change during the load
/// A regular file is memory-mapped: it must not be truncated or written to
/// until this returns. Truncating it mid-load kills the process with
/// SIGBUS (the mapped pages past the new end can no longer be read, and no
/// error can be returned instead); writing to it may give wrong numbers.
///
/// ```
/// use zrecord::{Codec, CreateOptions, DenseCore, Element};
/// use zrecord::text::{import_into, LoadTxtOptions};
/// let dir = tempfile::tempdir()?;
/// let txt = dir.path().join("a.txt");
/// std::fs::write(&txt, "1 2\n3 4\n5 6\n")?;
/// let store = DenseCore::create(dir.path().join("s"), &f64::dtype(), &[2], &CreateOptions::new(Codec::Raw))?;
/// let done = import_into(&txt, &store, &LoadTxtOptions::default(), Some(2))?;
/// assert_eq!((done.rows, done.batches), (3, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn import_into(
    path: impl AsRef<Path>,
    store: &DenseCore,
    opts: &LoadTxtOptions,
    batch_rows: Option<usize>,
) -> Result<Imported> {
    let path = path.as_ref();
    check_options(opts)?;
    let text = map_file(path, false)?;
    import_text(path, &text, store, opts, batch_rows)
}

/// [`import_into`] over the file's bytes.
fn import_text(
    path: &Path,
    bytes: &[u8],
    store: &DenseCore,
    opts: &LoadTxtOptions,
    batch_rows: Option<usize>,
) -> Result<Imported> {
    let threads = threads_for(opts);
    if *store.dtype() == f64::dtype() {
        in_pool(threads, || {
            import_typed::<f64>(path, bytes, store, opts, batch_rows)
        })
    } else if *store.dtype() == f32::dtype() {
        in_pool(threads, || {
            import_typed::<f32>(path, bytes, store, opts, batch_rows)
        })
    } else {
        Err(Error::DTypeMismatch {
            context: format!(
                "text import of {} into {}",
                path.display(),
                store.path().display()
            ),
            expected: format!("{} or {}", f64::dtype(), f32::dtype()),
            found: store.dtype().to_string(),
        })
    }
}

/// Creates a dense store of `T` records shaped `[columns]` at `store_path`
/// (the column count of the text's first data row, or `usecols.len()`) and
/// imports the text's rows into it with [`import_into`]. A text without
/// data rows is an error (it fixes no column count).
///
/// The text file must not be truncated or written to until this returns:
/// see [`import_into`].
pub fn import_to_store<T: TextFloat>(
    txt_path: impl AsRef<Path>,
    store_path: impl AsRef<Path>,
    create: &CreateOptions,
    opts: &LoadTxtOptions,
    batch_rows: Option<usize>,
) -> Result<DenseCore> {
    let path = txt_path.as_ref();
    check_options(opts)?;
    // Read once: a pipe gives its bytes only once.
    let text = map_file(path, false)?;
    let nout = match layout(path, &text, opts)? {
        Some(l) if l.nout > 0 => l.width(),
        _ => {
            return Err(Error::invalid(format!(
                "{} holds no data columns to fix the store's item shape",
                path.display()
            )));
        }
    };
    let store = DenseCore::create(store_path, &DType::of::<T>()?, &[nout as u64], create)?;
    import_text(path, &text, &store, opts, batch_rows)?;
    Ok(store)
}

fn import_typed<T: TextFloat>(
    path: &Path,
    bytes: &[u8],
    store: &DenseCore,
    opts: &LoadTxtOptions,
    batch_rows: Option<usize>,
) -> Result<Imported> {
    let mut done = Imported {
        first: store.len(),
        rows: 0,
        batches: 0,
    };
    if opts.usecols.as_ref().is_some_and(Vec::is_empty) {
        // loadtxt gives such rows as an (n, 0) array; a store item needs a
        // value.
        return Err(Error::invalid(
            "usecols is empty: select at least one column to import".to_string(),
        ));
    }
    let Some(lay) = layout(path, bytes, opts)? else {
        return Ok(done);
    };
    if store.item_shape() != [lay.width() as u64] {
        return Err(Error::ShapeMismatch {
            context: format!(
                "text import of {} (item shape = [output columns]) into {}",
                path.display(),
                store.path().display()
            ),
            expected: format!("{:?}", store.item_shape()),
            found: vec![lay.width() as u64],
        });
    }
    let cfg = lay.cfg(opts);
    let nout = lay.nout;
    let step = batch_rows_for(batch_rows, lay.width() * std::mem::size_of::<T>());
    let threads = rayon::current_num_threads().max(1);
    let window = if opts.chunk_bytes > 0 {
        opts.chunk_bytes.saturating_mul(threads).saturating_mul(2)
    } else {
        threads * (4 << 20)
    };
    let mut left = opts.max_rows.unwrap_or(usize::MAX);
    let mut out: Vec<T> = Vec::new();
    let end = bytes.len();
    let mut at = lay.first;
    while at < end && left > 0 {
        let mut cut = at.saturating_add(window).min(end);
        if cut < end {
            cut = match find_byte(&bytes[cut..end], b'\n') {
                Some(i) => cut + i + 1,
                None => end,
            };
        }
        let rows = parse_span(
            path,
            bytes,
            (at, cut),
            &cfg,
            nout,
            left,
            opts.chunk_bytes,
            &mut out,
        )?;
        let wide;
        let values: &[T] = match lay.expand {
            None => &out[..rows * nout],
            Some(_) => {
                wide = lay.widen(std::mem::take(&mut out));
                &wide
            }
        };
        let width = lay.width();
        for batch in values.chunks(step.saturating_mul(width)) {
            store.append_bytes(bytemuck::cast_slice(batch))?;
            done.rows += (batch.len() / width) as u64;
            done.batches += 1;
        }
        left -= rows;
        at = cut;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn load64(s: &str, o: &LoadTxtOptions) -> Result<Array2<f64>> {
        loadtxt_bytes(s.as_bytes(), o)
    }

    #[test]
    fn a_thread_count_reuses_its_pool_and_runs_there() {
        // A count no test pool has, so the kept pool is this test's.
        let n = rayon::current_num_threads() + 3;
        let opts = LoadTxtOptions {
            threads: n,
            ..Default::default()
        };
        let a = pool_of(n).unwrap();
        let b = pool_of(n).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "same count, same pool");
        let seen = in_pool(n, || Ok(rayon::current_num_threads())).unwrap();
        assert_eq!(seen, n);
        // Another count replaces the kept pool; the old one stays usable by
        // whoever holds it.
        let c = pool_of(n + 1).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(a.install(rayon::current_num_threads), n);
        let arr: Array2<f64> = loadtxt_bytes(b"1 2\n3 4\n", &opts).unwrap();
        assert_eq!(arr, ndarray::array![[1.0, 2.0], [3.0, 4.0]]);
    }

    #[test]
    fn line_count_bounds_the_exact_count() {
        let texts: &[&[u8]] = &[
            b"1 2\n3 4\n",
            b"1 2\n3 4",
            b"1 2\r\n3 4\r\n",
            b"1 2\n\n3 4\n",
            b"\n1 2\n",
            b" \n1 2\n",
            b"\r\n1\n",
            b"1\n \t\r\n2\n",
            b"1\n\x0b\n2\n",
            b"1 \n2\n   ",
            b"1\n2\n# c\n",
            b"1 # c\n# 2\n3",
            b"ab",
            b"",
            b"1\n\x1c\x1f\n2\n",
            b"1\n\xc2\xa0\r\n\xe3\x80\x80 # c\n2\n",
            b"\xe2\x80\x89\n\xe2\x82\xac\n\xc2",
        ];
        for t in texts {
            for (c, d) in [Some(b'#'), None]
                .into_iter()
                .flat_map(|c| [(c, None), (c, Some(b','))])
            {
                let exact = count_rows(t, c, d);
                let lines = t
                    .split(|&b| b == b'\n')
                    .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                    .filter(|l| is_data(l, c, d))
                    .count();
                assert_eq!(exact, lines, "{t:?} {d:?}");
                let (bound, seen) = count_lines(t, c);
                assert_eq!(seen, c.is_some_and(|c| t.contains(&c)), "{t:?}");
                let physical = t.split(|&b| b == b'\n').count() - t.ends_with(b"\n") as usize;
                assert_eq!(bound, if t.is_empty() { 0 } else { physical }, "{t:?}");
                assert!(bound >= exact, "{t:?}");
            }
        }
        // Long enough for several u8 blocks.
        let long = b"12.5 3\n".repeat(1000);
        assert_eq!(count_lines(&long, Some(b'#')), (1000, false));
    }

    #[test]
    fn blank_lines_across_chunks_with_and_without_max_rows() {
        // Line-count bounds overshoot where lines are blank: the chunks'
        // rows must still land in order, with or without a row limit.
        for delimiter in [None, Some(b',')] {
            let sep = if delimiter.is_some() { "," } else { " " };
            let mut text = String::new();
            let mut clean = String::new();
            for i in 0..200 {
                let row = format!("{i}.5{sep}{}\n", i * 3);
                text.push_str(&row);
                clean.push_str(&row);
                if i % 7 == 3 {
                    // With a delimiter a line of blanks is a row (of one
                    // empty field), as in NumPy, so not a blank line.
                    let blanks = match delimiter {
                        Some(_) => ["\n", "\n", "\r\n", "\r\n"],
                        None => ["\n", "  \t\n", "\r\n", "\u{3000}\u{a0}\n"],
                    };
                    text.push_str(blanks[i % 4]);
                }
            }
            for max_rows in [
                None,
                Some(0),
                Some(1),
                Some(37),
                Some(150),
                Some(200),
                Some(500),
            ] {
                for chunk_bytes in [1, 50, 333, 0] {
                    let o = LoadTxtOptions {
                        delimiter,
                        max_rows,
                        chunk_bytes,
                        ..Default::default()
                    };
                    let want = load64(&clean, &o).unwrap();
                    let got = load64(&text, &o).unwrap();
                    assert_eq!(got, want, "{delimiter:?} {max_rows:?} {chunk_bytes}");
                    let n = max_rows.unwrap_or(200).min(200);
                    assert_eq!(got.nrows(), n);
                }
            }
        }
    }

    /// Tokens made of the bytes numbers are made of, in every arrangement
    /// up to 12 bytes, plus short decimals of every digit split.
    fn number_like() -> impl Strategy<Value = String> {
        let alpha = prop::sample::select(vec![
            '0', '1', '5', '9', '9', '3', '.', 'e', 'E', '+', '-', '7', '2',
        ]);
        prop_oneof![
            prop::collection::vec(alpha, 0..12).prop_map(|v| v.into_iter().collect()),
            (
                any::<u64>(),
                0usize..22,
                any::<bool>(),
                prop::option::of(-30i32..30)
            )
                .prop_map(|(m, cut, neg, e)| {
                    let len = 1 + (m % 16) as usize;
                    let digits = format!("{:019}", m / 16)[19 - len.min(19)..].to_string();
                    let cut = cut.min(digits.len());
                    let mut t = String::new();
                    if neg {
                        t.push('-');
                    }
                    t.push_str(&digits[..cut]);
                    t.push('.');
                    t.push_str(&digits[cut..]);
                    if let Some(e) = e {
                        t.push_str(&format!("e{e}"));
                    }
                    t
                }),
        ]
    }

    fn same_as_fast_float<T: TextFloat + fast_float2::FastFloat>(
        tok: &str,
        tail: &str,
        pad: usize,
    ) {
        let want = fast_float2::parse_partial::<T, _>(tok).ok();
        let padded = format!("{tok}{tail}{}", " ".repeat(pad));
        let got = parse_number::<T>(padded.as_bytes());
        let plain = parse_plain::<T>(padded.as_bytes());
        let short = parse_short::<T>(padded.as_bytes(), 0).map(|(v, e, _)| (v, e));
        for (what, r) in [("number", got), ("plain", plain), ("short", short)] {
            if let Some((v, n)) = r {
                let (w, wn) = want.unwrap_or_else(|| panic!("{what} took {tok:?}"));
                assert_eq!(n, wn, "{what} length of {tok:?}");
                assert!(
                    bytemuck::bytes_of(&v) == bytemuck::bytes_of(&w),
                    "{what} {tok:?}: {v:?} vs {w:?}"
                );
            } else if what == "number" {
                assert!(want.is_none(), "{tok:?} refused");
            }
        }
    }

    /// The AVX2 field parser on `tok` (delimited at its end): when it takes
    /// the token, the value is fast-float2's for the whole token, bit for
    /// bit; and it takes every plain decimal it is meant for.
    #[cfg(target_arch = "x86_64")]
    fn v3_field_same_as_fast_float<T: TextFloat + fast_float2::FastFloat>(tok: &str, tail: &str) {
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi2"))
        {
            return;
        }
        for lead in [0, 7, 63 - tok.len().min(63)] {
            let padded = format!("{}{tok}{tail}{}", "7".repeat(lead), " ".repeat(80));
            let w: &[u8; 80] = padded.as_bytes().first_chunk().unwrap();
            if lead + tok.len() >= 64 {
                continue;
            }
            // SAFETY: the CPU has AVX2 and BMI2 (checked above).
            let got = unsafe { v3::field::<T>(w, lead, lead + tok.len()) };
            let want = fast_float2::parse_partial::<T, _>(tok)
                .ok()
                .filter(|&(_, n)| n == tok.len());
            match got {
                Some(v) => {
                    let (w, _) = want.unwrap_or_else(|| panic!("v3 took {tok:?}"));
                    assert!(
                        bytemuck::bytes_of(&v) == bytemuck::bytes_of(&w),
                        "v3 {tok:?}: {v:?} vs {w:?}"
                    );
                }
                None => {
                    let body = tok.strip_prefix(['-', '+']).unwrap_or(tok);
                    let digits = body.bytes().filter(u8::is_ascii_digit).count();
                    let plain = body.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                        && body.bytes().filter(|&b| b == b'.').count() <= 1;
                    let frac = body.find('.').map_or(0, |d| body.len() - d - 1);
                    let exact = std::mem::size_of::<T>() == 8
                        || (frac <= 10
                            && body
                                .replace('.', "")
                                .parse::<u64>()
                                .is_ok_and(|m| m <= 1 << 24));
                    assert!(
                        !(plain && (1..=15).contains(&digits) && body.len() <= 16 && exact),
                        "v3 refused {tok:?}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn v3_field_equals_fast_float(tok in number_like(), tail in prop::sample::select(vec![",", " ", "\n", "x"])) {
            #[cfg(target_arch = "x86_64")]
            {
                v3_field_same_as_fast_float::<f64>(&tok, tail);
                v3_field_same_as_fast_float::<f32>(&tok, tail);
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (tok, tail);
        }

        #[test]
        fn vector_and_scalar_counts_agree(
            text in prop::collection::vec(prop::sample::select(b"\n#1 ,.".to_vec()), 0..20_000),
            c in prop::sample::select(b"#\n,".to_vec()),
        ) {
            let want = count_bytes_scalar(&text, c);
            let newlines = text.iter().filter(|&&b| b == b'\n').count();
            prop_assert_eq!(want, (newlines, text.contains(&c)));
            prop_assert_eq!(count_bytes(&text, c), want);
        }
    }

    proptest::proptest! {
        #[test]
        fn fast_paths_equal_fast_float(tok in number_like(), tail in prop::sample::select(vec![
            "", ",", " ", "\n", "x", ",1.5,2.25,3.125,4,5,6,7,8,9,10,11,12", " 7.5 8.25\n9 10 11 12 13 14",
        ])) {
            for pad in [0, 24] {
                same_as_fast_float::<f64>(&tok, tail, pad);
                same_as_fast_float::<f32>(&tok, tail, pad);
            }
        }
    }

    #[test]
    fn fast_and_line_parsers_agree() {
        // usecols listing every column in order forces the line parser.
        let texts = [
            "1 2 3\n 4\t5 6 # c\n\n7 8 9\r\n",
            "1,2,3\n4 , 5,6#c\n7,8,9",
            "1 2 3\n4 5\n",
            "1,2,3\n4,,6\n",
            "1 2 3\n4 5 6 7\n",
            "1 2 3\n4 5x 6\n",
            "1 2 3\n4\x0b5 6\n",
            "1,2,3\n4,5,6,\n",
        ];
        for t in texts {
            let delimiter = t.contains(',').then_some(b',');
            let fast = LoadTxtOptions {
                delimiter,
                ..Default::default()
            };
            let slow = LoadTxtOptions {
                usecols: Some(vec![0, 1, 2]),
                ..fast.clone()
            };
            let (a, b) = (load64(t, &fast), load64(t, &slow));
            match (a, b) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{t:?}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{t:?}"),
                (a, b) => panic!("{t:?}: {a:?} vs {b:?}"),
            }
        }
    }

    /// The chunk parser over all of `text` with delimiter `d`, built for
    /// `V3` or not: the rows' values, or the error's words.
    #[cfg(target_arch = "x86_64")]
    fn chunk_parse<const V3: bool>(text: &str, d: u8) -> std::result::Result<Vec<f64>, String> {
        let opts = LoadTxtOptions {
            delimiter: Some(d),
            ..Default::default()
        };
        let bytes = text.as_bytes();
        let path = Path::new("<memory>");
        let lay = layout(path, bytes, &opts).unwrap().unwrap();
        let cfg = lay.cfg(&opts);
        let take = count_rows(&bytes[lay.first..], cfg.comment, cfg.delim);
        let mut out = vec![MaybeUninit::<f64>::uninit(); take * lay.nout];
        let chunk = Chunk {
            path,
            bytes,
            span: (lay.first, bytes.len()),
            take,
            nout: lay.nout,
            cfg: &cfg,
            fast: true,
            tail: true,
        };
        let rows = if V3 {
            // SAFETY: only called when the CPU has AVX2 and BMI2.
            unsafe { parse_chunk_v3(&chunk, &mut out) }
        } else {
            parse_chunk::<f64, false>(&chunk, &mut out)
        }
        .map_err(|e| e.to_string())?;
        assert_eq!(rows, take);
        // SAFETY: every row parsed wrote all its slots.
        Ok(out.iter().map(|v| unsafe { v.assume_init() }).collect())
    }

    #[test]
    fn any_chunk_size_gives_the_same_array() {
        // chunk_bytes is the caller's: huge values must not overflow the
        // chunk arithmetic, and no size may change the result.
        // (Data starting past offset 0, behind a comment line, is what
        // made `start + usize::MAX` overflow.)
        let text = format!("# header\n{}", "1.5,2\n3,4.25\n# c\n\n5,6\n".repeat(30));
        let at = |chunk_bytes| {
            let o = LoadTxtOptions {
                delimiter: Some(b','),
                chunk_bytes,
                ..Default::default()
            };
            loadtxt_bytes::<f64>(text.as_bytes(), &o).unwrap()
        };
        let want = at(0);
        assert_eq!(want.dim(), (90, 2));
        for c in [1, 7, 64, 1 << 20, usize::MAX / 2, usize::MAX] {
            assert_eq!(at(c), want, "chunk_bytes {c}");
        }
    }

    #[test]
    fn delimiters_inside_numbers_split_fields_like_numpy() {
        // Expected values are what numpy.loadtxt 2.x returns for the same
        // text and delimiter (checked by hand against the reference venv).
        let ok: [(u8, &str, [f64; 4]); 5] = [
            (b'+', "1+2\n3+4\n", [1.0, 2.0, 3.0, 4.0]),
            (b'-', "1-2\n3-4\n", [1.0, 2.0, 3.0, 4.0]),
            (b'e', "1e5\n2e6\n", [1.0, 5.0, 2.0, 6.0]),
            (b'.', "1.5\n3.4\n", [1.0, 5.0, 3.0, 4.0]),
            (b'7', "170\n2 7 3\n", [1.0, 0.0, 2.0, 3.0]),
        ];
        for (d, text, want) in ok {
            let o = LoadTxtOptions {
                delimiter: Some(d),
                ..Default::default()
            };
            let a = loadtxt_bytes::<f64>(text.repeat(40).as_bytes(), &o).unwrap();
            assert_eq!(a.dim(), (80, 2), "{text:?}");
            assert_eq!(a.as_slice().unwrap()[..4], want, "{text:?}");
        }
        // An empty field between two delimiters, and `nan` cut by its own
        // letters, are errors (numpy rejects both).
        for (d, text) in [
            (b'+', "1+2\n3++4\n"),
            (b'a', "nan\n1a2\n"),
            (b'-', "-1-2\n"),
        ] {
            let o = LoadTxtOptions {
                delimiter: Some(d),
                ..Default::default()
            };
            assert!(
                loadtxt_bytes::<f64>(text.as_bytes(), &o).is_err(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn delimiters_that_numbers_contain_parse_as_before() {
        // A delimiter byte that can be part of a number: the AVX2 rows
        // (which split at separators first) must leave these to the other
        // parsers (which read a number first), whatever those decide.
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi2")
        {
            let texts = [
                (b'.', "1.5.2\n3.25.4\n"),
                (b'.', "1.2\n3.4\n"),
                (b'-', "1-2-3\n4-5-6\n"),
                (b'-', "1--2\n3--4\n"),
                (b'+', "1+2\n3++4\n"),
                (b'1', "213\n415\n"),
                (b'5', "152\n354\n"),
                (b',', "1.5,2\n3,4\n"),
            ];
            for (d, t) in texts {
                let text = t.repeat(50);
                assert_eq!(
                    chunk_parse::<true>(&text, d),
                    chunk_parse::<false>(&text, d),
                    "{t:?}"
                );
            }
        }
    }

    /// Rows of short numbers, mostly plain, sometimes with what only the
    /// slower parsers take (or reject): both separators, spaces, tabs, CRLF,
    /// comments, exponents, long tokens, missing or extra fields.
    fn rows_text() -> impl Strategy<Value = (String, bool)> {
        let field = prop_oneof![
            8 => (any::<i32>(), 0u32..8).prop_map(|(v, d)| format!("{:.*}", d as usize, v as f64 / 1e3)),
            1 => Just("1.5e3".to_string()),
            1 => Just("123456789.123456789".to_string()),
            1 => Just("nan".to_string()),
            1 => Just("".to_string()),
            1 => Just("5x".to_string()),
            1 => Just("-7 8".to_string()),
        ];
        // For CSV each space becomes a comma: ",", ",," and ",,," too.
        let sep = prop_oneof![8 => Just(" "), 1 => Just("  "), 1 => Just("\t"), 1 => Just(" , ")];
        let end =
            prop_oneof![8 => Just("\n"), 1 => Just("\r\n"), 1 => Just(" # c\n"), 1 => Just(" \n")];
        let row = (prop::collection::vec((field, sep), 3), end);
        (prop::collection::vec(row, 1..40), any::<bool>()).prop_map(|(rows, csv)| {
            // A plain first row fixes three columns for both parsers.
            let mut t = if csv { "1,2,3\n" } else { "1 2 3\n" }.to_string();
            for (fields, end) in rows {
                for (i, (f, sep)) in fields.iter().enumerate() {
                    if i > 0 {
                        let sep = if csv {
                            sep.replace(' ', ",")
                        } else {
                            sep.to_string()
                        };
                        t.push_str(&sep);
                    }
                    t.push_str(f);
                }
                t.push_str(end);
            }
            (t, csv)
        })
    }

    proptest::proptest! {
        #[test]
        fn indexed_fast_and_line_parsers_agree((text, csv) in rows_text()) {
            let fast = LoadTxtOptions {
                delimiter: csv.then_some(b','),
                ..Default::default()
            };
            let slow = LoadTxtOptions {
                usecols: Some(vec![0, 1, 2]),
                ..fast.clone()
            };
            match (load64(&text, &fast), load64(&text, &slow)) {
                (Ok(a), Ok(b)) => prop_assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()) && a.shape() == b.shape(),
                    "{text:?}"
                ),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "{text:?}: {a:?} vs {b:?}"),
            }
        }
    }

    #[test]
    fn find_byte_matches_position() {
        let hay: Vec<u8> = (0..100u8).collect();
        for n in [0u8, 7, 8, 63, 99, 200] {
            assert_eq!(find_byte(&hay, n), hay.iter().position(|&b| b == n));
        }
    }

    /// Regression (audit f12): a file starting with a UTF-8 byte-order mark
    /// failed with `cannot parse "\u{feff}1"` (Rust's escape) and no hint.
    /// The BOM is still refused, as NumPy's loadtxt refuses it.
    #[test]
    fn a_leading_byte_order_mark_is_refused_with_a_hint() {
        let csv = LoadTxtOptions {
            delimiter: Some(b','),
            ..LoadTxtOptions::default()
        };
        let e = load64("\u{feff}1,2\n3,4\n", &csv).unwrap_err();
        match &e {
            Error::TextParse {
                line: 1,
                column: 1,
                token,
                ..
            } => assert_eq!(token, "\u{feff}1"),
            other => panic!("{other:?}"),
        }
        let m = e.to_string();
        assert!(
            m.contains(r#"column 1: cannot parse "\ufeff1" as a number (the file starts with a UTF-8 byte-order mark;"#),
            "{m}"
        );
        // An ordinary bad token gets no hint.
        let m = load64("1,2\n3,x\n", &csv).unwrap_err().to_string();
        assert!(m.ends_with(r#"cannot parse "x" as a number"#), "{m}");
    }

    #[test]
    fn errors_name_line_column_and_token() {
        let o = LoadTxtOptions::default();
        match load64("1 2\n# c\n\n3 x4\n", &o) {
            Err(Error::TextParse {
                line,
                column,
                token,
                ..
            }) => {
                // Line and column both count from 1: "x4" is the 2nd field.
                assert_eq!((line, column, token.as_str()), (4, 2, "x4"));
            }
            other => panic!("{other:?}"),
        }
        match load64("1 2\n3 4 5\n", &o) {
            Err(Error::TextColumns {
                line,
                expected,
                found,
                ..
            }) => {
                assert_eq!((line, expected, found), (2, 2, 3));
            }
            other => panic!("{other:?}"),
        }
        match load64("1 2\n3\n", &o) {
            Err(Error::TextColumns { found: 1, .. }) => {}
            other => panic!("{other:?}"),
        }
        let csv = LoadTxtOptions {
            delimiter: Some(b','),
            ..o.clone()
        };
        match load64("1,2\n3, \n", &csv) {
            Err(Error::TextParse {
                line: 2,
                column: 2,
                token,
                ..
            }) => assert_eq!(token, ""),
            other => panic!("{other:?}"),
        }
        match load64("1,2\n3,1.5e\n", &csv) {
            Err(Error::TextParse { token, .. }) => assert_eq!(token, "1.5e"),
            other => panic!("{other:?}"),
        }
        assert!(loadtxt_bytes::<f64>(b"1 \xff\xfe\n", &o).is_err());
        let msg = load64("1 2 3\n4 x 6\n", &o).unwrap_err().to_string();
        assert!(msg.contains("<memory>:2: column 2:"), "{msg}");
        let first = load64("x 2\n", &o).unwrap_err().to_string();
        assert!(first.contains("<memory>:1: column 1:"), "{first}");
    }

    #[test]
    fn spellings_and_options() {
        let a = load64(
            "nan NaN inf -inf Infinity +inf +1.5 -0 .5 1.\n",
            &LoadTxtOptions::default(),
        )
        .unwrap();
        assert_eq!(a.shape(), &[1, 10]);
        assert!(a[[0, 0]].is_nan() && a[[0, 1]].is_nan());
        assert_eq!(a[[0, 2]], f64::INFINITY);
        assert_eq!(a[[0, 3]], f64::NEG_INFINITY);
        assert_eq!(a[[0, 4]], f64::INFINITY);
        assert_eq!(a[[0, 6]], 1.5);
        let o = LoadTxtOptions {
            usecols: Some(vec![2, 0]),
            max_rows: Some(2),
            skip_rows: 1,
            ..Default::default()
        };
        let a = load64("a b c\n1 2 3\n4 5 6\n7 8 9\n", &o).unwrap();
        assert_eq!(a, ndarray::array![[3.0, 1.0], [6.0, 4.0]]);
        // Without data rows: as many columns as `usecols` names (NumPy's
        // shape with `ndmin=2`), else none.
        assert_eq!(load64("", &o).unwrap().shape(), &[0, 2]);
        assert_eq!(load64("# only\n", &o).unwrap().shape(), &[0, 2]);
        assert_eq!(
            load64("# only\n\n", &Default::default()).unwrap().shape(),
            &[0, 0]
        );
    }

    /// Loads `text` with `o`, whole and in 1-byte chunks on 2 threads; both
    /// must agree (array or error message).
    fn load_both(text: &str, o: &LoadTxtOptions) -> Result<Array2<f64>> {
        let whole = load64(text, o);
        let chunked = load64(
            text,
            &LoadTxtOptions {
                chunk_bytes: 1,
                threads: 2,
                ..o.clone()
            },
        );
        match (&whole, &chunked) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{text:?}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text:?}"),
            _ => panic!("{text:?}: {whole:?} vs {chunked:?}"),
        }
        whole
    }

    #[test]
    fn a_comment_byte_that_numbers_contain_still_starts_a_comment() {
        // NumPy cuts every line at its comment byte first, even inside a
        // number; these once read straight through it.
        let c = |b: u8| LoadTxtOptions {
            comments: Some(b),
            ..Default::default()
        };
        let csv = |b: u8| LoadTxtOptions {
            delimiter: Some(b','),
            ..c(b)
        };
        assert_eq!(
            load_both("21\n31\n", &c(b'1')).unwrap(),
            ndarray::array![[2.0], [3.0]]
        );
        assert_eq!(
            load_both("1.5\n2.25\n", &c(b'.')).unwrap(),
            ndarray::array![[1.0], [2.0]]
        );
        assert_eq!(
            load_both("21 3\n", &c(b'1')).unwrap(),
            ndarray::array![[2.0]]
        );
        assert_eq!(
            load_both("1,2e5\n3,4e\n", &csv(b'e')).unwrap(),
            ndarray::array![[1.0, 2.0], [3.0, 4.0]]
        );
        match load_both("1e-5\n", &c(b'-')) {
            Err(Error::TextParse { token, .. }) => assert_eq!(token, "1e"),
            other => panic!("{other:?}"),
        }
    }

    /// `text` must fail as a lone CR on line `at` (both parsers).
    fn lone_cr_at(text: &str, o: &LoadTxtOptions, at: u64) {
        match load_both(text, o) {
            Err(Error::TextLineEnding { line, .. }) => assert_eq!(line, at, "{text:?}"),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn a_lone_carriage_return_is_an_error_not_a_joined_line() {
        let o = LoadTxtOptions::default();
        let csv = LoadTxtOptions {
            delimiter: Some(b','),
            ..o.clone()
        };
        lone_cr_at("1 2\r3 4\r", &o, 1);
        lone_cr_at("1,2\r3,4\r", &csv, 1);
        lone_cr_at("1 2\r 3\n4 5 6\n", &o, 1);
        lone_cr_at("0,0\n1,2\r3,4\r", &csv, 2);
        lone_cr_at("1 2\n3 4\n5 6\r7 8\n", &o, 3);
        lone_cr_at("1,2\n\r3,4\n", &csv, 2);
        // A header row that hides a data row behind a lone CR.
        lone_cr_at(
            "h1 h2\r1 2\n3 4\n",
            &LoadTxtOptions {
                skip_rows: 1,
                ..o.clone()
            },
            1,
        );
        // In a column that usecols skips, too.
        let skip = |o: &LoadTxtOptions| LoadTxtOptions {
            usecols: Some(vec![0, 2]),
            ..o.clone()
        };
        lone_cr_at("0,0,0\n1,x\ry,3\n", &skip(&csv), 2);
        lone_cr_at("0 0 0\n1 x\ry 3\n", &skip(&o), 2);
        let cr = LoadTxtOptions {
            delimiter: Some(b'\r'),
            ..o.clone()
        };
        let msg = load64("1\r2\n", &cr).unwrap_err().to_string();
        assert!(msg.contains("cannot be a line ending"), "{msg}");
        // CRLF and a CR ending the text are fine, also after a comment.
        let two = ndarray::array![[1.0, 2.0], [3.0, 4.0]];
        assert_eq!(load_both("1 2\r\n3 4\r\n", &o).unwrap(), two);
        assert_eq!(load_both("1 2\r\n3 4\r", &o).unwrap(), two);
        assert_eq!(load_both("1 2 # a\r\n3 4 # b\r", &o).unwrap(), two);
        assert_eq!(load_both("# h\r\n1 2\n# c\r\n3 4\n# t\r", &o).unwrap(), two);
        let msg = load64("1 2\r3 4\n", &o).unwrap_err().to_string();
        assert!(
            msg.contains("<memory>:1") && msg.contains("lone carriage return"),
            "{msg}"
        );
    }

    /// Regression: a lone CR inside a comment went unchecked, so the rows
    /// after it (which NumPy reads as lines of their own) vanished:
    /// `# x y\r1 2\r3 4\r` gave an empty array, `1 2 # note\r3 4\n5 6\n`
    /// two rows.
    #[test]
    fn a_lone_carriage_return_in_a_comment_is_an_error_too() {
        let o = LoadTxtOptions::default();
        let csv = LoadTxtOptions {
            delimiter: Some(b','),
            ..o.clone()
        };
        let usecols = |o: &LoadTxtOptions| LoadTxtOptions {
            usecols: Some(vec![1, 0]),
            ..o.clone()
        };
        let digit = LoadTxtOptions {
            comments: Some(b'7'),
            ..o.clone()
        };
        for o in [&o, &usecols(&o)] {
            // In a header comment line, before any data.
            lone_cr_at("# x y\r1 2\r3 4\r", o, 1);
            // In a comment after data: the fast rows' path.
            lone_cr_at("1 2 # note\r3 4\n5 6\n", o, 1);
            lone_cr_at("0 0\n1 2 # note\r3 4\n5 6\n", o, 2);
            // In a comment line among the data, and in the last lines
            // (after the chunk's last data row).
            lone_cr_at("1 2\n# c\r3 4\n5 6\n", o, 2);
            lone_cr_at("1 2\n3 4\n# c\r5 6\n", o, 3);
            lone_cr_at("1 2\n3 4\n# c\r5 6", o, 3);
            lone_cr_at("1 2\n3 4\n\r\r\n", o, 3);
            // A skipped header row with a comment.
            lone_cr_at(
                "h h # c\r1 2\n3 4\n",
                &LoadTxtOptions {
                    skip_rows: 1,
                    ..o.clone()
                },
                1,
            );
        }
        for o in [&csv, &usecols(&csv)] {
            lone_cr_at("1,2 # note\r3,4\n5,6\n", o, 1);
            lone_cr_at("1,2\n3,4#\r5,6\n", o, 2);
            lone_cr_at("# h\r1,2\n", o, 1);
        }
        // A comment byte numbers contain (the line is cut there first).
        lone_cr_at("1 2\n3 475\r6\n", &digit, 2);
        // A long file, so the rows meet the vector parsers and many chunks.
        let mut text = "1.5 2.25\n".repeat(3000);
        text.push_str("3 4 # c\r5 6\n");
        text.push_str(&"1.5 2.25\n".repeat(3000));
        lone_cr_at(&text, &o, 3001);
        // With a row limit that stops before it, the CR is never read.
        let two = LoadTxtOptions {
            max_rows: Some(2),
            ..o.clone()
        };
        assert_eq!(load_both("1 2\n3 4\n# c\r5 6\n", &two).unwrap().nrows(), 2);
    }

    /// Regression: with several bad lines, the error named whichever chunk
    /// failed first in time (with 2 threads often a later line).
    #[test]
    fn the_error_names_the_first_bad_line_whatever_the_threads() {
        let mut lines = vec!["1 2 3\n"; 20_000];
        lines[9_000] = "1 x 3\n";
        for j in (10_000..20_000).step_by(500) {
            lines[j] = "1 2\n";
        }
        let text = lines.concat();
        for threads in [1, 2, 3, 8] {
            for chunk_bytes in [0, 1, 64, 4096] {
                let o = LoadTxtOptions {
                    threads,
                    chunk_bytes,
                    ..Default::default()
                };
                for _ in 0..3 {
                    match load64(&text, &o) {
                        Err(Error::TextParse { line, column, .. }) => {
                            assert_eq!((line, column), (9_001, 2), "{threads} {chunk_bytes}")
                        }
                        other => panic!("{threads} {chunk_bytes}: {other:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn threads_are_clamped_to_the_cores_whatever_the_file() {
        let many = |threads, chunk_bytes| LoadTxtOptions {
            threads,
            chunk_bytes,
            ..Default::default()
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // A 2-line file: not a 3000-thread pool.
        assert_eq!(threads_for(&many(3000, 0)), 4 * cores);
        // The same count for any file, so alternating small and large
        // files keeps the one cached pool.
        assert_eq!(threads_for(&many(2, 0)), 2.min(4 * cores));
        assert_eq!(threads_for(&many(0, 0)), 0);
        let o = many(3000, 0);
        let seen = in_pool(threads_for(&o), || Ok(rayon::current_num_threads())).unwrap();
        assert_eq!(seen, 4 * cores);
        assert_eq!(
            loadtxt_bytes::<f64>(b"1 2\n3 4\n", &o).unwrap(),
            ndarray::array![[1.0, 2.0], [3.0, 4.0]]
        );
    }

    #[test]
    fn empty_usecols_gives_a_column_less_row_per_data_row() {
        let o = LoadTxtOptions {
            usecols: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(load_both("1 2\n# c\n3 4\n", &o).unwrap().shape(), &[2, 0]);
        assert_eq!(load_both("# c\n", &o).unwrap().shape(), &[0, 0]);
        let limited = LoadTxtOptions {
            max_rows: Some(1),
            ..o.clone()
        };
        assert_eq!(load_both("1 2\n3 4\n", &limited).unwrap().shape(), &[1, 0]);
        // Rows must still agree on their field count.
        assert!(matches!(
            load_both("1 2\n3 4 5\n", &o),
            Err(Error::TextColumns { .. })
        ));
    }

    #[cfg(unix)]
    #[test]
    fn pipes_and_fifos_are_read_whole_not_taken_for_empty() {
        use std::io::Write;
        use std::os::fd::{AsRawFd, FromRawFd};
        let o = LoadTxtOptions::default();
        let want = ndarray::array![[1.0, 2.0], [3.0, 4.0]];
        // An anonymous pipe through /dev/fd, as bash's `<(zcat x.gz)`.
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: pipe(2) just opened both; each is owned once, here.
        let (r, mut w) = unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        w.write_all(b"1 2\n3 4\n").unwrap();
        drop(w);
        let p = format!("/dev/fd/{}", r.as_raw_fd());
        assert_eq!(loadtxt::<f64>(&p, &o).unwrap(), want);
        drop(r);
        // A named FIFO, written by another thread.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, "5 6\n7 8\n").unwrap())
        };
        let got = loadtxt::<f64>(&fifo, &o).unwrap();
        writer.join().unwrap();
        assert_eq!(got, ndarray::array![[5.0, 6.0], [7.0, 8.0]]);
        // A procfs file reports size 0 but holds a number.
        #[cfg(target_os = "linux")]
        {
            let pid_max = Path::new("/proc/sys/kernel/pid_max");
            if pid_max.exists() {
                let a = loadtxt::<f64>(pid_max, &o).unwrap();
                assert_eq!(a.shape(), &[1, 1]);
                assert!(a[[0, 0]] > 0.0);
            }
        }
        // A truly empty regular file is still the empty result.
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, "").unwrap();
        assert_eq!(loadtxt::<f64>(&empty, &o).unwrap().shape(), &[0, 0]);
    }

    #[test]
    fn usecols_count_from_the_end_and_may_repeat() {
        let with = |cols: Vec<isize>| LoadTxtOptions {
            usecols: Some(cols),
            ..Default::default()
        };
        let text = "1 2 3\n4 5 6\n";
        assert_eq!(
            load_both(text, &with(vec![-1, 0, 0])).unwrap(),
            ndarray::array![[3.0, 1.0, 1.0], [6.0, 4.0, 4.0]]
        );
        assert_eq!(
            load_both(text, &with(vec![1, -2, 2])).unwrap(),
            ndarray::array![[2.0, 2.0, 3.0], [5.0, 5.0, 6.0]]
        );
        let none = LoadTxtOptions {
            max_rows: Some(0),
            ..with(vec![0, 0])
        };
        assert_eq!(load_both(text, &none).unwrap().shape(), &[0, 2]);
        for bad in [-4, 3, isize::MIN] {
            let msg = load64(text, &with(vec![bad])).unwrap_err().to_string();
            assert!(
                msg.contains(&format!("usecols index {bad} is out of range")),
                "{msg}"
            );
        }
    }

    #[test]
    fn a_repeated_column_imports_into_a_store_of_every_output_column() {
        let dir = tempfile::tempdir().unwrap();
        let txt = dir.path().join("a.csv");
        std::fs::write(&txt, "1,2,3\n4,5,6\n7,8,9\n").unwrap();
        let o = LoadTxtOptions {
            delimiter: Some(b','),
            usecols: Some(vec![2, -1, 0]),
            ..Default::default()
        };
        let store = import_to_store::<f64>(
            &txt,
            dir.path().join("s"),
            &CreateOptions::new(crate::Codec::Raw),
            &o,
            Some(2),
        )
        .unwrap();
        assert_eq!(store.item_shape(), &[3]);
        let mut got = [0f64; 9];
        store
            .gather_bytes_into(&[0, 1, 2], bytemuck::cast_slice_mut(&mut got))
            .unwrap();
        assert_eq!(got, [3.0, 3.0, 1.0, 6.0, 6.0, 4.0, 9.0, 9.0, 7.0]);
    }

    #[test]
    fn compressed_files_and_directories_get_their_own_errors() {
        let dir = tempfile::tempdir().unwrap();
        let o = LoadTxtOptions::default();
        for (name, bytes, kind) in [
            ("a.gz", &b"\x1f\x8b\x08\x00rest"[..], "gzip"),
            ("a.bz2", b"BZh91AY&SYrest", "bzip2"),
            ("a.xz", b"\xfd7zXZ\x00rest", "xz"),
            ("a.zst", b"\x28\xb5\x2f\xfdrest", "zstd"),
        ] {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            let msg = loadtxt::<f64>(&p, &o).unwrap_err().to_string();
            assert!(msg.contains(&format!("{kind}-compressed")), "{msg}");
        }
        // "BZh" alone opens a text like any other.
        let p = dir.path().join("bzh.txt");
        std::fs::write(&p, "BZh 1\n").unwrap();
        assert!(matches!(
            loadtxt::<f64>(&p, &o),
            Err(Error::TextParse { .. })
        ));
        match loadtxt::<f64>(dir.path(), &o) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn with_a_delimiter_a_line_of_blanks_is_a_row_as_in_numpy() {
        // NumPy reads it as one blank field: an error for numbers (a column
        // count error beside wider rows), never a skipped line, so a missing
        // value cannot silently shift the rows after it.
        let csv = |d: u8| LoadTxtOptions {
            delimiter: Some(d),
            ..Default::default()
        };
        for (text, line) in [
            ("1,2\n   \n3,4\n", 2),
            ("1,2\n\t\r\n3,4\n", 2),
            ("1,2\n  # note\n3,4\n", 2),
            ("1,2\n3,4\n \x0b", 3),
            ("1,2\n\u{a0}\n3,4\n", 2),
        ] {
            // The empty first field is the error (NumPy's names the column
            // count; the line is the same).
            match load_both(text, &csv(b',')) {
                Err(Error::TextParse {
                    line: l,
                    column: 1,
                    token,
                    ..
                }) => assert_eq!((l, token.as_str()), (line, ""), "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        // A whitespace delimiter: each blank separates (empty) fields.
        assert!(load_both("1\t2\n \t \n3\t4\n", &csv(b'\t')).is_err());
        // The first data line, and one among the header lines, count too.
        assert!(load_both("  \n1,2\n", &csv(b',')).is_err());
        let header = |skip_rows| LoadTxtOptions {
            skip_rows,
            ..csv(b',')
        };
        assert!(load_both("x,y\n \n1,2\n", &header(1)).is_err());
        assert_eq!(
            load_both("x,y\n \n1,2\n", &header(2)).unwrap().shape(),
            &[1, 2]
        );
        // Empty lines, CRLF-empty lines and comment lines are still skipped,
        // with and without a row limit.
        let text = "1,2\n\n3,4\r\n\r\n# c\n5,6\n";
        assert_eq!(load_both(text, &csv(b',')).unwrap().nrows(), 3);
        let two = LoadTxtOptions {
            max_rows: Some(2),
            ..csv(b',')
        };
        assert_eq!(
            load_both(text, &two).unwrap(),
            ndarray::array![[1.0, 2.0], [3.0, 4.0]]
        );
        // Without a delimiter a line of blanks is blank, as in NumPy.
        assert_eq!(
            load_both("1 2\n \t \n3 4\n  # c\n", &Default::default())
                .unwrap()
                .nrows(),
            2
        );
    }

    #[test]
    fn unicode_whitespace_splits_and_strips_fields_as_in_numpy() {
        // NumPy decodes the file (UTF-8) and splits on `str.isspace()`
        // characters: the ASCII separators 0x1C-0x1F, NEL, NBSP, U+1680,
        // U+2000-U+200A, U+2028/9, U+202F, U+205F, U+3000.
        let blanks = [
            "\u{1c}", "\u{1d}", "\u{1e}", "\u{1f}", "\u{85}", "\u{a0}", "\u{1680}", "\u{2000}",
            "\u{2005}", "\u{200a}", "\u{2028}", "\u{2029}", "\u{202f}", "\u{205f}", "\u{3000}",
        ];
        let want = ndarray::array![[1.0, 2.0], [3.0, 4.0]];
        let csv = LoadTxtOptions {
            delimiter: Some(b','),
            ..Default::default()
        };
        for u in blanks {
            let ws = format!("{u}1{u}2{u}\n{u}\n3 {u} 4\n{u}# c\n");
            assert_eq!(load_both(&ws, &Default::default()).unwrap(), want, "{u:?}");
            let delimited = format!("{u}1{u},{u}2\n3{u}, 4 {u}\n");
            assert_eq!(load_both(&delimited, &csv).unwrap(), want, "{u:?}");
            // Inside a number it is no separator: an error naming the token.
            match load_both(&format!("1{u}2,3\n"), &csv) {
                Err(Error::TextParse { token, .. }) => assert_eq!(token, format!("1{u}2")),
                other => panic!("{u:?}: {other:?}"),
            }
        }
        // One column, as a delimited file: a line of them is an empty field.
        assert!(matches!(
            load_both("1\n\u{3000}\n2\n", &csv),
            Err(Error::TextParse { line: 2, .. })
        ));
        // Whitespace-only lines of them are blank lines: the row count (and a
        // row limit) skips them, in one-pass counts and line-by-line ones.
        let text: String = (0..400)
            .map(|i| format!("{i} {}\n\u{3000}\u{a0}\n# c {i}\n", i * 2))
            .collect();
        for max_rows in [None, Some(0), Some(7), Some(399), Some(400), Some(9999)] {
            for chunk_bytes in [1, 100, 0] {
                let o = LoadTxtOptions {
                    max_rows,
                    chunk_bytes,
                    ..Default::default()
                };
                let a = load_both(&text, &o).unwrap();
                assert_eq!(a.nrows(), max_rows.unwrap_or(400).min(400));
                for r in 0..a.nrows() {
                    assert_eq!(a.row(r).to_vec(), [r as f64, 2.0 * r as f64]);
                }
            }
        }
        // Characters that are not whitespace stay part of their token.
        for (text, token) in [
            ("1\u{200b}2 3\n", "1\u{200b}2"),
            ("1\u{feff} 3\n", "1\u{feff}"),
            ("\u{20ac}\n", "\u{20ac}"),
            ("1\x7f 3\n", "1\x7f"),
        ] {
            match load_both(text, &Default::default()) {
                Err(Error::TextParse { token: t, .. }) => assert_eq!(t, token),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        // A lone byte of such a character, or a cut one, is no whitespace.
        assert!(loadtxt_bytes::<f64>(b"1\xa0 2\n", &Default::default()).is_err());
        assert!(loadtxt_bytes::<f64>(b"1 2\xc2\n", &Default::default()).is_err());
        assert!(loadtxt_bytes::<f64>(b"1\xe3\x80 2\n", &Default::default()).is_err());
    }

    #[test]
    fn non_ascii_comment_or_delimiter_bytes_are_refused() {
        for o in [
            LoadTxtOptions {
                comments: Some(0xa0),
                ..Default::default()
            },
            LoadTxtOptions {
                delimiter: Some(0xc2),
                ..Default::default()
            },
        ] {
            let msg = load64("1 2\n", &o).unwrap_err().to_string();
            assert!(msg.contains("is not ASCII"), "{msg}");
        }
    }

    #[test]
    fn whitespace_or_newline_comment_bytes_are_refused() {
        for c in [b' ', b'\t', b'\r', b'\n'] {
            let o = LoadTxtOptions {
                comments: Some(c),
                ..Default::default()
            };
            let msg = load64("1 2\n", &o).unwrap_err().to_string();
            assert!(msg.contains("cannot be a newline or whitespace"), "{msg}");
        }
    }
}
