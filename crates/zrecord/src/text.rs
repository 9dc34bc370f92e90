//! A parallel `loadtxt`: delimited numeric text into an `Array2<f64>` or
//! `Array2<f32>`.
//!
//! The file is memory-mapped. After the header rows, the text is cut at
//! newlines into chunks; a first parallel pass counts the data rows of each
//! chunk, prefix sums give each chunk its first output row, and a second
//! parallel pass parses each chunk straight into its rows of the one output
//! buffer. Nothing is allocated per row or per token; numbers are parsed by
//! `fast-float2` (correctly rounded, for `f32` directly to `f32`).
//!
//! Accepted text, as `numpy.loadtxt` accepts it: fields separated by any run
//! of spaces/tabs (the default) or by one delimiter byte (then spaces around
//! a field are ignored, and an empty field is an error); `#` comments (also
//! after data); blank lines; LF or CRLF endings; a leading `+`; `nan`,
//! `inf`, `infinity` in any case and with a sign.
//!
//! Differences from NumPy: an empty file (or one without data rows) gives a
//! `(0, 0)` array and a one-column file gives `(n, 1)` (never a 1-D array);
//! every data row must have the same number of fields, also with `usecols`;
//! `skip_rows` counts header *data* lines, after comment and blank lines
//! (fast_loadtxt's definition; NumPy's `skiprows` counts physical lines — the
//! two agree when the header comes first).
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
use std::path::Path;

use ndarray::Array2;
use rayon::prelude::*;

use crate::dense::DenseCore;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::import::{Imported, batch_rows_for};
use zrecord_engine::CreateOptions;

/// Options of [`loadtxt`]. `Default` gives NumPy's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadTxtOptions {
    /// Field separator; `None` splits on runs of spaces and tabs.
    pub delimiter: Option<u8>,
    /// Comment byte: it and the rest of its line are ignored. Default `#`.
    pub comments: Option<u8>,
    /// Data lines to skip at the start (header rows), counted after comment
    /// and blank lines.
    pub skip_rows: usize,
    /// Columns to keep, in output order (indices into the file's fields).
    pub usecols: Option<Vec<usize>>,
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
    /// `±m / 10^frac` when it is exact by Clinger's fast path (the mantissa
    /// and the power of ten are exact in `Self`, so one IEEE division gives
    /// the correctly rounded result); `None` otherwise.
    #[doc(hidden)]
    fn from_decimal(m: u64, neg: bool, frac: usize) -> Option<Self>;
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
    #[inline]
    fn from_decimal(m: u64, neg: bool, frac: usize) -> Option<Self> {
        if m > 1 << 24 || frac >= POW10_F32.len() {
            return None;
        }
        let v = m as f32 / POW10_F32[frac];
        Some(if neg { -v } else { v })
    }
}

impl TextFloat for f64 {
    fn parse_prefix(s: &[u8]) -> Option<(Self, usize)> {
        fast_float2::parse_partial(s).ok()
    }
    #[inline]
    fn from_decimal(m: u64, neg: bool, frac: usize) -> Option<Self> {
        if m > 1 << 53 || frac >= POW10_F64.len() {
            return None;
        }
        let v = m as f64 / POW10_F64[frac];
        Some(if neg { -v } else { v })
    }
}

/// Parses the common plain decimal (`-12.3456`) in one pass; anything else
/// (exponents, more than 19 digits, nan/inf, inexact cases) returns `None`
/// and goes to fast-float2.
#[inline]
fn parse_number<T: TextFloat>(s: &[u8]) -> Option<(T, usize)> {
    #[inline]
    fn fast<T: TextFloat>(s: &[u8]) -> Option<(T, usize)> {
        let mut i = 0;
        let neg = match s.first() {
            Some(b'-') => {
                i = 1;
                true
            }
            Some(b'+') => {
                i = 1;
                false
            }
            _ => false,
        };
        let mut m: u64 = 0;
        let mut digits = 0;
        while let Some(&b) = s.get(i) {
            let d = b.wrapping_sub(b'0');
            if d >= 10 {
                break;
            }
            m = m.wrapping_mul(10).wrapping_add(d as u64);
            digits += 1;
            i += 1;
        }
        let mut frac = 0;
        if s.get(i) == Some(&b'.') {
            i += 1;
            while let Some(&b) = s.get(i) {
                let d = b.wrapping_sub(b'0');
                if d >= 10 {
                    break;
                }
                m = m.wrapping_mul(10).wrapping_add(d as u64);
                frac += 1;
                i += 1;
            }
        }
        digits += frac;
        if digits == 0 || digits > 19 || matches!(s.get(i), Some(b'e' | b'E')) {
            return None;
        }
        T::from_decimal(m, neg, frac).map(|v| (v, i))
    }
    fast(s).or_else(|| T::parse_prefix(s))
}

/// Loads a text file of numbers into a 2-D array (rows x columns).
pub fn loadtxt<T: TextFloat>(path: impl AsRef<Path>, opts: &LoadTxtOptions) -> Result<Array2<T>> {
    let path = path.as_ref();
    match map_file(path, true)? {
        Some(map) => load(path, &map, opts),
        None => load(path, &[], opts),
    }
}

/// Maps `path` read-only; `None` for an empty file (which cannot be mapped).
/// `populate` pre-faults the whole map (a whole-file read wants it; a
/// windowed import does not).
fn map_file(path: &Path, populate: bool) -> Result<Option<memmap2::Mmap>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len == 0 {
        return Ok(None);
    }
    // SAFETY: the map is read-only and private to this call. Its contents
    // could change if another process modified the file meanwhile; the parser
    // treats the bytes as untrusted and never relies on them being stable
    // between reads (a change yields wrong numbers or an error, not UB in our
    // code), which is the usual contract of read-only file maps.
    let mut mo = memmap2::MmapOptions::new();
    if populate {
        mo.populate();
    }
    let map = unsafe { mo.map(&file) }.map_err(|e| Error::io(path, e))?;
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(Some(map))
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
}

/// Why a row failed: wrong field count, or a bad token (field index and
/// byte range within the line).
enum RowErr {
    Columns(usize),
    Token(usize, usize, usize),
}

#[inline]
fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\r' || b == 0x0b || b == 0x0c
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

/// True when the line holds data (something before any comment).
#[inline]
fn is_data(line: &[u8], comment: Option<u8>) -> bool {
    for &b in line {
        if is_ws(b) {
            continue;
        }
        return Some(b) != comment;
    }
    false
}

/// Data rows in `text` (which starts at a line start): lines holding a
/// byte that is neither whitespace nor in a comment. One branch-free pass.
fn count_rows(text: &[u8], comment: Option<u8>) -> usize {
    // Without a comment byte, `\n` stands in: it never opens a comment
    // because a newline also closes one.
    let c = comment.unwrap_or(b'\n');
    let (mut rows, mut has, mut in_comment) = (0usize, false, false);
    for &b in text {
        let nl = b == b'\n';
        in_comment = (in_comment | (b == c)) & !nl;
        has |= !(is_ws(b) | nl | in_comment);
        rows += (nl & has) as usize;
        has &= !nl;
    }
    rows + has as usize
}

/// [`count_rows`] for the common text: when no comment byte occurs and no
/// line is blank or whitespace-only (no newline directly after whitespace,
/// a newline, or the start), every line is a data row, so the count is the
/// newlines' (plus a last unterminated data line). Those checks are plain
/// byte counts the compiler vectorises; any doubt falls back to the exact
/// [`count_rows`].
fn count_rows_fast(text: &[u8], comment: Option<u8>) -> usize {
    let n = text.len();
    let exact = || count_rows(text, comment);
    if n < 3
        || text[0] == b'\n'
        || (text[1] == b'\n' && is_ws(text[0]))
        || comment.is_some_and(|c| count_eq(text, c) > 0)
    {
        return exact();
    }
    // Bitwise, not short-circuit, and summed in u8 per block, so the loop
    // vectorises into full-width byte compares.
    let ws = |x: u8| (x == b' ') | (x == b'\t') | (x == 0x0b) | (x == 0x0c);
    let mut doubtful = 0usize;
    let (xs, ys, zs) = (&text[..n - 2], &text[1..n - 1], &text[2..]);
    for ((xa, xb), xc) in xs.chunks(BLOCK).zip(ys.chunks(BLOCK)).zip(zs.chunks(BLOCK)) {
        doubtful += xa
            .iter()
            .zip(xb)
            .zip(xc)
            .map(|((&a, &b), &c)| {
                ((c == b'\n')
                    & ((b == b'\n')
                        | ws(b)
                        | ((b == b'\r') & ((a == b'\n') | (a == b'\r') | ws(a)))))
                    as u8
            })
            .fold(0u8, u8::wrapping_add) as usize;
    }
    if doubtful > 0 {
        return exact();
    }
    let newlines = count_eq(text, b'\n');
    let tail = text
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(text, |i| &text[i + 1..]);
    newlines + (!tail.is_empty() && is_data(tail, comment)) as usize
}

/// Bytes per block of the u8 counters (below 256, so a block's sum fits).
const BLOCK: usize = 240;

/// Occurrences of `needle` in `text`, counted in u8 per block so the loop
/// vectorises at full byte width.
fn count_eq(text: &[u8], needle: u8) -> usize {
    text.chunks(BLOCK)
        .map(|blk| {
            blk.iter()
                .map(|&b| (b == needle) as u8)
                .fold(0u8, u8::wrapping_add) as usize
        })
        .sum()
}

/// Parses the data row starting at `p` in one pass (tokens, separators and
/// the line end together), returning the next line's start. Only the plain
/// case is handled: spaces or tabs around fields, then LF, CRLF, a comment or
/// the end. Anything else (a blank or comment line, other whitespace, a bad
/// or missing token, a wrong field count) returns `None`, and the caller
/// re-parses the line with [`parse_row`], which accepts exactly the same rows
/// and words the errors. `out` has `cfg.ncols` slots.
#[inline]
fn fast_row<T: TextFloat>(text: &[u8], mut p: usize, cfg: &Cfg, out: &mut [T]) -> Option<usize> {
    let e = text.len();
    let blank = |b: u8| b == b' ' || b == b'\t';
    let mut col = 0;
    loop {
        while p < e && blank(text[p]) {
            p += 1;
        }
        let (v, used) = parse_number::<T>(&text[p..])?;
        if used == 0 {
            return None;
        }
        *out.get_mut(col)? = v;
        col += 1;
        p += used;
        let token_end = p;
        while p < e && blank(text[p]) {
            p += 1;
        }
        let Some(&b) = text.get(p) else {
            break;
        };
        match b {
            b'\n' => {
                p += 1;
                break;
            }
            b'\r' if text.get(p + 1) == Some(&b'\n') => {
                p += 2;
                break;
            }
            _ if Some(b) == cfg.comment => {
                p = find_byte(&text[p..], b'\n').map_or(e, |i| p + i + 1);
                break;
            }
            _ => match cfg.delim {
                Some(d) if b == d => p += 1,
                None if p > token_end => {}
                _ => return None,
            },
        }
    }
    (col == out.len()).then_some(p)
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
            let mut n = 0;
            let mut in_tok = false;
            for &b in line {
                let ws = is_ws(b);
                if !ws && !in_tok {
                    n += 1;
                }
                in_tok = !ws;
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
    out: &mut [T],
) -> std::result::Result<(), RowErr> {
    let n = line.len();
    let is_end = |p: usize| p >= n || Some(line[p]) == cfg.comment;
    let mut p = 0;
    let mut col = 0;
    match cfg.delim {
        None => loop {
            while p < n && is_ws(line[p]) {
                p += 1;
            }
            if is_end(p) {
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
                        if used > 0
                            && (p + used >= n || is_ws(line[p + used]) || is_end(p + used)) =>
                    {
                        out[t] = v;
                        p += used;
                    }
                    _ => {
                        while p < n && !is_ws(line[p]) && Some(line[p]) != cfg.comment {
                            p += 1;
                        }
                        return Err(RowErr::Token(col, start, p));
                    }
                },
                None => {
                    while p < n && !is_ws(line[p]) && Some(line[p]) != cfg.comment {
                        p += 1;
                    }
                }
            }
            col += 1;
        },
        Some(d) => loop {
            let ws = |b: u8| b != d && is_ws(b);
            while p < n && ws(line[p]) {
                p += 1;
            }
            if col >= cfg.ncols {
                return Err(RowErr::Columns(col + count_fields(&line[p..], cfg)));
            }
            let start = p;
            let target = match cfg.col_map {
                None => Some(col),
                Some(m) => m[col],
            };
            let field_end = |p: &mut usize| {
                while *p < n && line[*p] != d && Some(line[*p]) != cfg.comment {
                    *p += 1;
                }
            };
            match target {
                Some(t) => {
                    let parsed = if is_end(p) || line[p] == d {
                        None
                    } else {
                        parse_number::<T>(&line[p..])
                    };
                    let ok = match parsed {
                        Some((v, used)) if used > 0 => {
                            let mut q = p + used;
                            while q < n && ws(line[q]) {
                                q += 1;
                            }
                            if is_end(q) || line[q] == d {
                                out[t] = v;
                                p = q;
                                true
                            } else {
                                false
                            }
                        }
                        _ => false,
                    };
                    if !ok {
                        field_end(&mut p);
                        let mut e = p;
                        while e > start && ws(line[e - 1]) {
                            e -= 1;
                        }
                        return Err(RowErr::Token(col, start, e));
                    }
                }
                None => field_end(&mut p),
            }
            col += 1;
            if is_end(p) {
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
        RowErr::Token(column, s, e) => Error::TextParse {
            path: path.to_path_buf(),
            line: line_no,
            column,
            token: String::from_utf8_lossy(&line[s..e.min(s + 100)]).into_owned(),
        },
    }
}

fn check_options(opts: &LoadTxtOptions) -> Result<()> {
    if let Some(d) = opts.delimiter
        && (d == b'\n' || Some(d) == opts.comments)
    {
        return Err(Error::invalid(format!(
            "delimiter {:?} cannot be a newline or the comment byte",
            d as char
        )));
    }
    Ok(())
}

/// Runs `f` in a pool of `opts.threads` threads (the current pool when 0 or
/// when it already has that many).
fn in_pool<R: Send>(opts: &LoadTxtOptions, f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    if opts.threads == 0 || opts.threads == rayon::current_num_threads() {
        return f();
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| Error::invalid(format!("cannot start {} threads: {e}", opts.threads)))?;
    pool.install(f)
}

fn load<T: TextFloat>(path: &Path, bytes: &[u8], opts: &LoadTxtOptions) -> Result<Array2<T>> {
    check_options(opts)?;
    in_pool(opts, || load_in_pool(path, bytes, opts))
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
    /// For each file column, its output position (usecols only).
    col_map: Option<Vec<Option<usize>>>,
    /// Output columns.
    nout: usize,
}

impl Layout {
    fn cfg(&self, opts: &LoadTxtOptions) -> Cfg<'_> {
        Cfg {
            delim: opts.delimiter,
            comment: opts.comments,
            ncols: self.ncols,
            col_map: self.col_map.as_deref(),
        }
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
        if is_data(&bytes[pos..e], comment) {
            if skipped == opts.skip_rows {
                break pos;
            }
            skipped += 1;
        }
        pos = next;
    };
    let (fe, _) = line_at(bytes, first, end);
    let probe = Cfg {
        delim: opts.delimiter,
        comment,
        ncols: 0,
        col_map: None,
    };
    let ncols = count_fields(&bytes[first..fe], &probe);
    let col_map: Option<Vec<Option<usize>>> = match &opts.usecols {
        None => None,
        Some(cols) => {
            let mut m = vec![None; ncols];
            for (i, &c) in cols.iter().enumerate() {
                if c >= ncols {
                    return Err(Error::invalid(format!(
                        "usecols index {c} is out of range: {} has {ncols} columns (line {})",
                        path.display(),
                        line_number(bytes, first)
                    )));
                }
                if m[c].is_some() {
                    return Err(Error::invalid(format!("usecols repeats column {c}")));
                }
                m[c] = Some(i);
            }
            Some(m)
        }
    };
    let nout = opts.usecols.as_ref().map_or(ncols, |c| c.len());
    Ok(Some(Layout {
        first,
        ncols,
        col_map,
        nout,
    }))
}

fn load_in_pool<T: TextFloat>(
    path: &Path,
    bytes: &[u8],
    opts: &LoadTxtOptions,
) -> Result<Array2<T>> {
    let Some(lay) = layout(path, bytes, opts)? else {
        return Ok(empty(0));
    };
    let nout = lay.nout;
    if opts.max_rows == Some(0) || nout == 0 {
        return Ok(empty(nout));
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
    Array2::from_shape_vec((rows, nout), out).map_err(|e| Error::invalid(e.to_string()))
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
    let ncols = cfg.ncols;
    // Cut [first, end) into chunks at line starts.
    let threads = rayon::current_num_threads().max(1);
    let target = if chunk_bytes > 0 {
        chunk_bytes
    } else {
        ((end - first) / (threads * 8)).clamp(1 << 16, 8 << 20)
    };
    let mut bounds = vec![first];
    let mut at = first;
    while at < end {
        let mut cut = (at + target).min(end);
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

    // Pass 1: data rows per chunk.
    let counts: Vec<usize> = chunks
        .par_iter()
        .map(|&(s, e)| count_rows_fast(&bytes[s..e], comment))
        .collect();
    let total: usize = counts.iter().sum();
    let rows = total.min(max_rows);
    let len = rows.checked_mul(nout).ok_or_else(|| Error::Overflow {
        context: path.display().to_string(),
        detail: format!("{rows} rows x {nout} columns"),
    })?;
    // At most one value per two input bytes: justified by the input size.
    out.clear();
    out.resize(len, T::zeroed());

    // Hand each chunk its rows of the output.
    let mut work = Vec::with_capacity(chunks.len());
    let mut rest: &mut [T] = out;
    let mut left = rows;
    for (&(s, e), &c) in chunks.iter().zip(&counts) {
        if left == 0 {
            break;
        }
        let take = c.min(left);
        let (mine, tail) = rest.split_at_mut(take * nout);
        rest = tail;
        left -= take;
        work.push((s, e, take, mine));
    }

    // Pass 2: parse in place.
    work.into_par_iter().try_for_each(|(s, e, take, mine)| {
        let mut p = s;
        let mut r = 0;
        // The fast path skips spaces and tabs around fields, so it cannot
        // serve a whitespace delimiter (where each one separates a field).
        let fast =
            cfg.col_map.is_none() && !matches!(cfg.delim, Some(b' ' | b'\t' | b'\r' | 0x0b | 0x0c));
        while r < take && p < e {
            let row = &mut mine[r * nout..(r + 1) * nout];
            if fast && let Some(next) = fast_row(&bytes[..e], p, cfg, row) {
                p = next;
                r += 1;
                continue;
            }
            // Anything unusual (blank or comment line, usecols, odd
            // whitespace, a bad token): the line-at-a-time parser decides,
            // and words the error.
            let (le, next) = line_at(bytes, p, e);
            let line = &bytes[p..le];
            if is_data(line, comment) {
                parse_row(line, cfg, row)
                    .map_err(|err| row_error(path, bytes, p, line, err, ncols))?;
                r += 1;
            }
            p = next;
        }
        Ok::<(), Error>(())
    })?;
    Ok(rows)
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
    let map = map_file(path, false)?;
    let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
    if *store.dtype() == f64::dtype() {
        in_pool(opts, || {
            import_typed::<f64>(path, bytes, store, opts, batch_rows)
        })
    } else if *store.dtype() == f32::dtype() {
        in_pool(opts, || {
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
pub fn import_to_store<T: TextFloat>(
    txt_path: impl AsRef<Path>,
    store_path: impl AsRef<Path>,
    create: &CreateOptions,
    opts: &LoadTxtOptions,
    batch_rows: Option<usize>,
) -> Result<DenseCore> {
    let path = txt_path.as_ref();
    check_options(opts)?;
    let nout = {
        let map = map_file(path, false)?;
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        match layout(path, bytes, opts)? {
            Some(l) if l.nout > 0 => l.nout,
            _ => {
                return Err(Error::invalid(format!(
                    "{} holds no data columns to fix the store's item shape",
                    path.display()
                )));
            }
        }
    };
    let store = DenseCore::create(store_path, &T::dtype(), &[nout as u64], create)?;
    import_into(path, &store, opts, batch_rows)?;
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
    let Some(lay) = layout(path, bytes, opts)? else {
        return Ok(done);
    };
    if store.item_shape() != [lay.nout as u64] {
        return Err(Error::ShapeMismatch {
            context: format!(
                "text import of {} (item shape = [output columns]) into {}",
                path.display(),
                store.path().display()
            ),
            expected: format!("{:?}", store.item_shape()),
            found: vec![lay.nout as u64],
        });
    }
    let cfg = lay.cfg(opts);
    let nout = lay.nout;
    let step = batch_rows_for(batch_rows, nout * std::mem::size_of::<T>());
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
        for batch in out[..rows * nout].chunks(step.saturating_mul(nout)) {
            store.append_bytes(bytemuck::cast_slice(batch))?;
            done.rows += (batch.len() / nout) as u64;
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

    fn load64(s: &str, o: &LoadTxtOptions) -> Result<Array2<f64>> {
        loadtxt_bytes(s.as_bytes(), o)
    }

    #[test]
    fn fast_row_count_equals_exact_count() {
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
        ];
        for t in texts {
            for c in [Some(b'#'), None] {
                assert_eq!(count_rows_fast(t, c), count_rows(t, c), "{t:?}");
                let lines = t.split(|&b| b == b'\n').filter(|l| is_data(l, c)).count();
                assert_eq!(count_rows(t, c), lines, "{t:?}");
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

    #[test]
    fn find_byte_matches_position() {
        let hay: Vec<u8> = (0..100u8).collect();
        for n in [0u8, 7, 8, 63, 99, 200] {
            assert_eq!(find_byte(&hay, n), hay.iter().position(|&b| b == n));
        }
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
                assert_eq!((line, column, token.as_str()), (4, 1, "x4"));
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
                column: 1,
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
        assert_eq!(load64("", &o).unwrap().shape(), &[0, 0]);
        assert_eq!(
            load64("# only\n\n", &Default::default()).unwrap().shape(),
            &[0, 0]
        );
    }
}
