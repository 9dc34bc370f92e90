//! NumPy `.npy` files: a validated header reader, full / prefix / block
//! readers into `ndarray`, and a writer whose output is byte-identical to
//! `numpy.save` for the same array.
//!
//! The header is untrusted input. Its length is checked (at most 1 MiB)
//! before it is read, it is parsed by a small Python-literal parser (never
//! evaluated), it must hold exactly `descr`, `fortran_order` and `shape`, and
//! the element count and byte size are checked for overflow before anything
//! is allocated. Path readers compare the size the header claims with the
//! file's size before allocating; the generic reader ([`read_from`]) grows its
//! buffer only as bytes arrive. A short payload is always an error.
//!
//! Every numeric dtype (bool, i1–i8, u1–u8, f2, f4, f8, c8, c16, either byte
//! order) and packed structured dtypes are read; big-endian payloads are
//! converted to the host's order and Fortran-order arrays to C order.
//!
//! ```
//! use ndarray::{ArrayD, IxDyn};
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("a.npy");
//! let a = ArrayD::from_shape_fn(IxDyn(&[3, 4]), |i| (i[0] * 4 + i[1]) as f32);
//! zrecord::npy::write(&path, &a)?;
//! let header = zrecord::npy::read_header(&path)?;
//! assert_eq!(header.shape, vec![3, 4]);
//! let b: ArrayD<f32> = zrecord::npy::read(&path)?;
//! assert_eq!(a, b);
//! let first_two: ArrayD<f32> = zrecord::npy::read_prefix(&path, 2, Some(&[4]))?;
//! assert_eq!(first_two.shape(), &[2, 4]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn, ShapeBuilder};
use rayon::prelude::*;

use crate::dense::DenseCore;
use crate::dtype::{DType, Element, Lit};
use crate::error::{Error, NpyHeaderProblem, Result};
use crate::import::{Imported, batch_rows_for};
use zrecord_engine::CreateOptions;

/// The six magic bytes every `.npy` starts with.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// Largest header accepted, in bytes.
pub const MAX_HEADER_LEN: u64 = 1 << 20;
/// Deepest nesting accepted in the header literal.
const MAX_LITERAL_DEPTH: usize = 40;
/// Granularity of parallel payload reads and of buffer growth in [`read_from`].
const READ_CHUNK: usize = 32 << 20;

/// The page size the read path aligns its destinations to.
const PAGE: usize = 4096;
/// Block reads give each task at least this many payload bytes.
pub const MIN_BYTES_PER_TASK: u64 = 4 << 20;

/// A validated `.npy` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Format version, `(1, 0)`, `(2, 0)` or `(3, 0)`.
    pub version: (u8, u8),
    /// The dtype as stored (possibly big-endian).
    pub dtype: DType,
    /// Whether the payload is in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The array's shape (empty for a 0-d array).
    pub shape: Vec<usize>,
    /// Byte offset of the payload in the file.
    pub data_offset: u64,
    /// Number of elements (product of `shape`; 1 for a 0-d array).
    pub element_count: u64,
    /// Payload size in bytes (`element_count * itemsize`).
    pub payload_bytes: u64,
}

/// An array whose dtype is known only at run time: bytes in C order and in
/// the host's byte order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyArray {
    /// The element dtype (native byte order).
    pub dtype: DType,
    /// The shape.
    pub shape: Vec<usize>,
    /// `product(shape) * dtype.itemsize()` bytes, C order.
    pub data: Vec<u8>,
}

impl NpyArray {
    /// Converts to a typed array when `T`'s dtype equals this array's.
    pub fn into_typed<T: Element>(self) -> Result<ArrayD<T>> {
        let want = DType::of::<T>()?;
        if want != self.dtype {
            return Err(Error::DTypeMismatch {
                context: "npy array".into(),
                expected: want.to_string(),
                found: self.dtype.to_string(),
            });
        }
        let dims: Vec<u64> = self.shape.iter().map(|&d| d as u64).collect();
        let need = crate::store::nbytes(&dims, self.dtype.itemsize());
        if need != Some(self.data.len() as u64) {
            return Err(Error::invalid(format!(
                "npy array of shape {:?} and dtype {} needs {}, its data holds {}",
                self.shape,
                self.dtype,
                crate::store::show_nbytes(need),
                self.data.len()
            )));
        }
        let v: Vec<T> = bytemuck::pod_collect_to_vec(&self.data);
        ArrayD::from_shape_vec(IxDyn(&self.shape), v).map_err(|e| Error::invalid(e.to_string()))
    }
}

/// How many tasks a block read may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Parallelism {
    /// Decode every block on the calling thread.
    Sequential,
    /// At most this many tasks.
    Tasks(usize),
    /// The number of threads in the current rayon pool.
    #[default]
    Auto,
}

fn hdr_err(path: &Path, problem: NpyHeaderProblem) -> Error {
    Error::NpyHeader {
        path: path.to_path_buf(),
        problem,
    }
}

impl NpyHeader {
    /// Parses the preamble and header from the first bytes of a file
    /// (`bytes` must contain at least the whole header; extra bytes are
    /// ignored). Never panics.
    pub fn parse(bytes: &[u8]) -> Result<NpyHeader> {
        parse_header(Path::new("<memory>"), bytes, None)
    }

    /// [`parse`](Self::parse) of the bytes of the file at `path`, read into
    /// memory (errors name `path`).
    pub fn parse_named(path: impl AsRef<Path>, bytes: &[u8]) -> Result<NpyHeader> {
        parse_header(path.as_ref(), bytes, None)
    }

    /// Preamble length for this version (magic + version + length field).
    fn preamble_len(major: u8) -> usize {
        if major == 1 { 10 } else { 12 }
    }
}

/// Validates the preamble; returns (version, header length, preamble length).
fn parse_preamble(path: &Path, bytes: &[u8]) -> Result<((u8, u8), u64, usize)> {
    let have = bytes.len() as u64;
    if bytes.len() < 8 {
        if !MAGIC.starts_with(&bytes[..bytes.len().min(6)]) {
            return Err(hdr_err(path, NpyHeaderProblem::BadMagic));
        }
        return Err(hdr_err(
            path,
            NpyHeaderProblem::Truncated {
                needed: 10,
                found: have,
            },
        ));
    }
    if &bytes[..6] != MAGIC {
        return Err(hdr_err(path, NpyHeaderProblem::BadMagic));
    }
    let version = (bytes[6], bytes[7]);
    if !matches!(version, (1, 0) | (2, 0) | (3, 0)) {
        return Err(hdr_err(
            path,
            NpyHeaderProblem::UnsupportedVersion(version.0, version.1),
        ));
    }
    let pre = NpyHeader::preamble_len(version.0);
    if bytes.len() < pre {
        return Err(hdr_err(
            path,
            NpyHeaderProblem::Truncated {
                needed: pre as u64,
                found: have,
            },
        ));
    }
    let hlen = if version.0 == 1 {
        u16::from_le_bytes([bytes[8], bytes[9]]) as u64
    } else {
        u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as u64
    };
    if hlen > MAX_HEADER_LEN {
        return Err(hdr_err(path, NpyHeaderProblem::TooLong(hlen)));
    }
    Ok((version, hlen, pre))
}

/// Parses a whole header from `bytes` (file start). `file_len`, when known,
/// is checked against the header's own length.
fn parse_header(path: &Path, bytes: &[u8], file_len: Option<u64>) -> Result<NpyHeader> {
    let (version, hlen, pre) = parse_preamble(path, bytes)?;
    let needed = pre as u64 + hlen;
    let have = file_len
        .unwrap_or(bytes.len() as u64)
        .min(bytes.len() as u64);
    if have < needed {
        return Err(hdr_err(
            path,
            NpyHeaderProblem::Truncated {
                needed,
                found: file_len.unwrap_or(bytes.len() as u64),
            },
        ));
    }
    let raw = &bytes[pre..needed as usize];
    let text: String = if version.0 == 3 {
        std::str::from_utf8(raw)
            .map_err(|_| hdr_err(path, NpyHeaderProblem::Encoding("UTF-8")))?
            .to_string()
    } else {
        // Latin-1, as NumPy decodes v1/v2 headers.
        raw.iter().map(|&b| b as char).collect()
    };
    let (lit, list_shape) = LitParser::new(&text)
        .parse_header_literal()
        .map_err(|e| hdr_err(path, NpyHeaderProblem::Syntax(e)))?;
    let Lit::Map(entries) = lit else {
        return Err(hdr_err(
            path,
            NpyHeaderProblem::Syntax("the header is not a dict".into()),
        ));
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (k, v) in entries {
        let slot = match &k {
            Lit::Str(s) if s == "descr" => &mut descr,
            Lit::Str(s) if s == "fortran_order" => &mut fortran,
            Lit::Str(s) if s == "shape" => &mut shape,
            other => {
                return Err(hdr_err(
                    path,
                    NpyHeaderProblem::UnexpectedKey(other.render()),
                ));
            }
        };
        if slot.is_some() {
            return Err(hdr_err(path, NpyHeaderProblem::UnexpectedKey(k.render())));
        }
        *slot = Some(v);
    }
    let descr = descr.ok_or_else(|| hdr_err(path, NpyHeaderProblem::MissingKey("descr")))?;
    let fortran =
        fortran.ok_or_else(|| hdr_err(path, NpyHeaderProblem::MissingKey("fortran_order")))?;
    let shape = shape.ok_or_else(|| hdr_err(path, NpyHeaderProblem::MissingKey("shape")))?;
    let dtype = match &descr {
        // Name the file in a refusal too (an object or string dtype).
        Lit::Str(_) | Lit::Seq(_) => DType::from_lit(&descr).map_err(|e| match e {
            Error::UnsupportedDType { dtype, reason } => Error::UnsupportedDType {
                dtype,
                reason: format!("{reason} (in {})", path.display()),
            },
            other => other,
        })?,
        other => {
            return Err(hdr_err(
                path,
                NpyHeaderProblem::BadValue {
                    key: "descr",
                    detail: format!("{} is not a type string or descr list", other.render()),
                },
            ));
        }
    };
    let fortran_order = match fortran {
        Lit::Bool(b) => b,
        other => {
            return Err(hdr_err(
                path,
                NpyHeaderProblem::BadValue {
                    key: "fortran_order",
                    detail: format!("{} is not True or False", other.render()),
                },
            ));
        }
    };
    let dims = match &shape {
        // NumPy refuses a list ("shape is not valid"): a header that
        // passes here must load there too.
        Lit::Seq(_) if list_shape => {
            return Err(hdr_err(
                path,
                NpyHeaderProblem::BadValue {
                    key: "shape",
                    detail: format!("{} is a list, not a tuple", shape.render()),
                },
            ));
        }
        Lit::Seq(ds) => ds,
        other => {
            return Err(hdr_err(
                path,
                NpyHeaderProblem::BadValue {
                    key: "shape",
                    detail: format!("{} is not a tuple", other.render()),
                },
            ));
        }
    };
    if dims.len() > 64 {
        return Err(hdr_err(
            path,
            NpyHeaderProblem::BadValue {
                key: "shape",
                detail: format!("rank {} exceeds 64", dims.len()),
            },
        ));
    }
    let mut raw_dims = Vec::with_capacity(dims.len());
    for d in dims {
        match d {
            Lit::Int(d) if *d >= 0 && *d <= u64::MAX as i128 => raw_dims.push(*d as u64),
            other => {
                return Err(hdr_err(
                    path,
                    NpyHeaderProblem::BadValue {
                        key: "shape",
                        detail: format!(
                            "dimension {} is not a non-negative integer",
                            other.render()
                        ),
                    },
                ));
            }
        }
    }
    let overflow = || hdr_err(path, NpyHeaderProblem::ShapeOverflow(raw_dims.clone()));
    let element_count = raw_dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or_else(overflow)?;
    let payload_bytes = element_count
        .checked_mul(dtype.itemsize() as u64)
        .filter(|&b| b <= isize::MAX as u64)
        .ok_or_else(overflow)?;
    // NumPy's own rule, which a zero dimension does not waive: the nonzero
    // dimensions times the item size must fit in `isize`. A shape such as
    // (0, 2**62, 4) has no elements, yet NumPy cannot build it ("array is
    // too big"), and neither can `ndarray`.
    raw_dims
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(dtype.itemsize().max(1) as u64, |a, &d| a.checked_mul(d))
        .filter(|&b| b <= isize::MAX as u64)
        .ok_or_else(overflow)?;
    let shape: Vec<usize> = raw_dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| overflow())?;
    Ok(NpyHeader {
        version,
        dtype,
        fortran_order,
        shape,
        data_offset: needed,
        element_count,
        payload_bytes,
    })
}

/// A recursive-descent parser for the Python literals NumPy writes in a
/// header: dicts, lists, tuples, strings, ints (with Python 2's `L`),
/// `True`/`False`/`None`. Depth is bounded; it never evaluates anything.
struct LitParser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
    depth: usize,
    /// Whether a `shape` key of the outermost dict had a list (`[...]`,
    /// also in grouping parentheses) for its value: [`Lit`] keeps lists and
    /// tuples alike, but NumPy takes only a tuple as the shape.
    list_shape: bool,
    /// Whether the value parsed last was a list.
    last_list: bool,
}

type PResult<T> = std::result::Result<T, String>;

impl<'a> LitParser<'a> {
    fn new(text: &'a str) -> Self {
        LitParser {
            s: text.as_bytes(),
            text,
            pos: 0,
            depth: 0,
            list_shape: false,
            last_list: false,
        }
    }

    #[cfg(test)]
    fn parse_all(self) -> PResult<Lit> {
        self.parse_header_literal().map(|(v, _)| v)
    }

    /// The literal, and whether its outermost dict gave `shape` a list.
    fn parse_header_literal(mut self) -> PResult<(Lit, bool)> {
        let v = self.value()?;
        self.ws();
        if self.pos != self.s.len() {
            return Err(format!("unexpected text at byte {}", self.pos));
        }
        Ok((v, self.list_shape))
    }

    fn ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> PResult<()> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at byte {}", c as char, self.pos))
        }
    }

    fn value(&mut self) -> PResult<Lit> {
        self.depth += 1;
        if self.depth > MAX_LITERAL_DEPTH {
            return Err("nested too deeply".into());
        }
        let first = self.peek();
        let v = match first {
            None => Err("unexpected end of header".into()),
            Some(b'{') => self.dict(),
            Some(b'[') => self.seq(b']').map(Lit::Seq),
            // Sets `last_list` itself (grouping parentheses keep the
            // inner value's).
            Some(b'(') => self.tuple(),
            Some(b'\'') | Some(b'"') => self.string().map(Lit::Str),
            Some(b'-') | Some(b'+') | Some(b'0'..=b'9') => self.int(),
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self.pos < self.s.len() && self.s[self.pos].is_ascii_alphanumeric() {
                    self.pos += 1;
                }
                match &self.text[start..self.pos] {
                    "True" => Ok(Lit::Bool(true)),
                    "False" => Ok(Lit::Bool(false)),
                    "None" => Ok(Lit::None),
                    w => Err(format!("unexpected name {w:?} at byte {start}")),
                }
            }
            Some(_) => Err(format!("unexpected character at byte {}", self.pos)),
        };
        if first != Some(b'(') {
            self.last_list = first == Some(b'[');
        }
        self.depth -= 1;
        v
    }

    fn dict(&mut self) -> PResult<Lit> {
        self.expect(b'{')?;
        let mut out = Vec::new();
        loop {
            if self.peek() == Some(b'}') {
                self.pos += 1;
                return Ok(Lit::Map(out));
            }
            let k = self.value()?;
            self.expect(b':')?;
            let v = self.value()?;
            if self.depth == 1 && matches!(&k, Lit::Str(s) if s == "shape") {
                self.list_shape |= self.last_list;
            }
            out.push((k, v));
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(format!("expected ',' or '}}' at byte {}", self.pos)),
            }
        }
    }

    /// `(...)`: a tuple, except that one value in parentheses with no
    /// comma is just that value, as in Python (so a shape written `(6)` is
    /// the integer 6, which NumPy refuses as a shape, and so do we).
    fn tuple(&mut self) -> PResult<Lit> {
        let open = self.pos;
        let mut items = self.seq(b')')?;
        // `seq` consumed `(`, the items and `)`: was there a comma after the
        // one item?
        let inner = self.text[open..self.pos - 1].trim_end();
        if items.len() == 1 && !inner.ends_with(',') {
            return Ok(items.pop().unwrap_or(Lit::None));
        }
        self.last_list = false;
        Ok(Lit::Seq(items))
    }

    fn seq(&mut self, close: u8) -> PResult<Vec<Lit>> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok(out);
            }
            out.push(self.value()?);
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {}
                _ => {
                    return Err(format!(
                        "expected ',' or {:?} at byte {}",
                        close as char, self.pos
                    ));
                }
            }
        }
    }

    fn string(&mut self) -> PResult<String> {
        let q = self.s[self.pos];
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let mut chars = rest.chars();
            let Some(c) = chars.next() else {
                return Err("unterminated string".into());
            };
            self.pos += c.len_utf8();
            if c as u32 == q as u32 {
                return Ok(out);
            }
            // A CR ends a line for Python's tokenizer too.
            if c == '\n' || c == '\r' {
                return Err("newline inside a string".into());
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(e) = self.text[self.pos..].chars().next() else {
                return Err("unterminated escape".into());
            };
            self.pos += e.len_utf8();
            match e {
                '\\' => out.push('\\'),
                '\'' => out.push('\''),
                '"' => out.push('"'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                '0' => out.push('\0'),
                'x' | 'u' | 'U' => {
                    let n = match e {
                        'x' => 2,
                        'u' => 4,
                        _ => 8,
                    };
                    let hex = self
                        .text
                        .get(self.pos..self.pos + n)
                        .ok_or("truncated escape")?;
                    let v = u32::from_str_radix(hex, 16).map_err(|_| "bad escape")?;
                    out.push(char::from_u32(v).ok_or("bad escape")?);
                    self.pos += n;
                }
                _ => return Err(format!("unsupported escape \\{e}")),
            }
        }
    }

    fn int(&mut self) -> PResult<Lit> {
        let start = self.pos;
        if matches!(self.s[self.pos], b'-' | b'+') {
            self.pos += 1;
        }
        let ds = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        if self.pos == ds || self.pos - ds > 30 {
            return Err(format!("bad integer at byte {start}"));
        }
        // Python 3 (NumPy's `literal_eval`) has no leading zeros but in 0
        // itself (`00` is 0; `03` is a syntax error).
        let digits = &self.s[ds..self.pos];
        if digits[0] == b'0' && digits.iter().any(|&d| d != b'0') {
            return Err(format!("integer with a leading zero at byte {start}"));
        }
        let v: i128 = self.text[start..self.pos]
            .parse()
            .map_err(|_| format!("bad integer at byte {start}"))?;
        // Python 2 wrote long integers with an `L` suffix (NumPy strips
        // only the capital one).
        if self.s.get(self.pos) == Some(&b'L') {
            self.pos += 1;
        }
        if self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || self.s[self.pos] == b'.')
        {
            return Err(format!("bad number at byte {start}"));
        }
        Ok(Lit::Int(v))
    }
}

/// An opened `.npy`: a regular file and its size (read by offset, its size
/// checked against the header), or a stream (a pipe, FIFO or device, whose
/// size says nothing), which only the whole-array readers take.
enum Source {
    File(File, u64),
    Stream(File),
}

fn open_any(path: &Path) -> Result<Source> {
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        let e = std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory");
        return Err(Error::io(path, e));
    }
    Ok(if meta.is_file() {
        Source::File(f, meta.len())
    } else {
        Source::Stream(f)
    })
}

/// Opens a regular file for offset reads; a stream is a clear error (a
/// bare read at an offset would fail with "Illegal seek").
fn open(path: &Path) -> Result<(File, u64)> {
    match open_any(path)? {
        Source::File(f, len) => Ok((f, len)),
        Source::Stream(_) => Err(Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "not a regular file (a pipe, FIFO or device): this reader reads the \
                 .npy by offset and needs a regular file; read the whole array \
                 (npy::read, npy::read_untyped) or copy the stream to a file first",
            ),
        )),
    }
}

/// Reads and validates only the header of `path`.
pub fn read_header(path: impl AsRef<Path>) -> Result<NpyHeader> {
    let path = path.as_ref();
    let (f, len) = open(path)?;
    header_from_file(path, &f, len)
}

fn header_from_file(path: &Path, f: &File, len: u64) -> Result<NpyHeader> {
    let mut pre = [0u8; 12];
    let n = read_at_most(path, f, &mut pre, 0)?;
    let (_, hlen, pre_len) = parse_preamble(path, &pre[..n])?;
    let total = pre_len as u64 + hlen;
    if len < total {
        return Err(hdr_err(
            path,
            NpyHeaderProblem::Truncated {
                needed: total,
                found: len,
            },
        ));
    }
    let mut buf = vec![0u8; total as usize];
    let n = read_at_most(path, f, &mut buf, 0)?;
    parse_header(path, &buf[..n], Some(len))
}

/// Fills as much of `buf` as the file holds from `off`; returns the count.
fn read_at_most(path: &Path, f: &File, buf: &mut [u8], off: u64) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match pread(f, &mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(done)
}

#[cfg(unix)]
fn pread(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(f, buf, off)
}

#[cfg(windows)]
fn pread(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(f, buf, off)
}

/// Reads exactly `buf.len()` payload bytes at `off`, in parallel chunks.
/// `expected` is the payload size reported on truncation.
fn read_payload(path: &Path, f: &File, buf: &mut [u8], off: u64, expected: u64) -> Result<()> {
    let go = |at: usize, chunk: &mut [u8]| -> Result<()> {
        let n = read_at_most(path, f, chunk, off + at as u64)?;
        if n < chunk.len() {
            return Err(Error::NpyTruncated {
                path: path.to_path_buf(),
                expected,
                found: at as u64 + n as u64,
            });
        }
        Ok(())
    };
    if buf.len() <= READ_CHUNK {
        return go(0, buf);
    }
    crate::text::advise_huge_pages_bytes(buf);
    // The kernel copies from the page cache much faster into page-aligned
    // destinations (a fresh large allocation starts 16 bytes past a page):
    // read the bytes before the first page boundary alone, then whole
    // chunks that each start on one.
    let head = buf.as_ptr().align_offset(PAGE).min(buf.len());
    let (first, rest) = buf.split_at_mut(head);
    go(0, first)?;
    rest.par_chunks_mut(READ_CHUNK)
        .enumerate()
        .try_for_each(|(i, c)| go(head + i * READ_CHUNK, c))
}

fn check_payload_present(path: &Path, h: &NpyHeader, bytes: u64, file_len: u64) -> Result<()> {
    let found = file_len.saturating_sub(h.data_offset);
    if found < bytes {
        return Err(Error::NpyTruncated {
            path: path.to_path_buf(),
            expected: bytes,
            found,
        });
    }
    Ok(())
}

fn check_dtype<T: Element>(path: &Path, h: &NpyHeader) -> Result<()> {
    check_native::<T>(path, &h.dtype)
}

fn check_native<T: Element>(path: &Path, dtype: &DType) -> Result<()> {
    let want = DType::of::<T>()?;
    if dtype.to_native() != want {
        return Err(Error::DTypeMismatch {
            context: path.display().to_string(),
            expected: want.to_string(),
            found: dtype.to_string(),
        });
    }
    Ok(())
}

fn swap_parallel(dtype: &DType, bytes: &mut [u8]) {
    if dtype.is_native() {
        return;
    }
    let item = dtype.itemsize().max(1);
    let step = (READ_CHUNK / item).max(1) * item;
    bytes
        .par_chunks_mut(step)
        .for_each(|c| dtype.swap_to_native(c));
}

/// Reads a whole `.npy` file as a typed array: big-endian payloads are
/// converted, Fortran order becomes C order. The stored dtype (in either
/// byte order) must be `T`'s.
///
/// A stream (a pipe, FIFO, `/dev/stdin`) is read to its end as by
/// [`read_from`], errors naming `path`.
pub fn read<T: Element>(path: impl AsRef<Path>) -> Result<ArrayD<T>> {
    let path = path.as_ref();
    let (f, len) = match open_any(path)? {
        Source::File(f, len) => (f, len),
        Source::Stream(f) => {
            let a = read_stream(path, f)?;
            check_native::<T>(path, &a.dtype)?;
            return a.into_typed();
        }
    };
    let h = header_from_file(path, &f, len)?;
    check_dtype::<T>(path, &h)?;
    check_payload_present(path, &h, h.payload_bytes, len)?;
    // The file holds every claimed byte, so this allocation is justified.
    let mut v: Vec<T> = bytemuck::zeroed_vec(h.element_count as usize);
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
    read_payload(path, &f, bytes, h.data_offset, h.payload_bytes)?;
    swap_parallel(&h.dtype, bytes);
    finish_typed(path, &h.shape, h.fortran_order, v)
}

fn finish_typed<T: Element>(
    path: &Path,
    shape: &[usize],
    fortran: bool,
    v: Vec<T>,
) -> Result<ArrayD<T>> {
    let bad = |e: ndarray::ShapeError| Error::invalid(format!("{}: {e}", path.display()));
    if fortran && shape.len() > 1 {
        let a = ArrayD::from_shape_vec(IxDyn(shape).f(), v).map_err(bad)?;
        Ok(a.as_standard_layout().into_owned())
    } else {
        ArrayD::from_shape_vec(IxDyn(shape), v).map_err(bad)
    }
}

/// Reads a whole `.npy` file whatever its dtype, into C-order, native-order
/// bytes. A stream (a pipe, FIFO, `/dev/stdin`) is read to its end as by
/// [`read_from`], errors naming `path`.
pub fn read_untyped(path: impl AsRef<Path>) -> Result<NpyArray> {
    let path = path.as_ref();
    let (f, len) = match open_any(path)? {
        Source::File(f, len) => (f, len),
        Source::Stream(f) => return read_stream(path, f),
    };
    let h = header_from_file(path, &f, len)?;
    check_payload_present(path, &h, h.payload_bytes, len)?;
    let mut data = vec![0u8; h.payload_bytes as usize];
    read_payload(path, &f, &mut data, h.data_offset, h.payload_bytes)?;
    finish_untyped(h, data)
}

fn finish_untyped(h: NpyHeader, mut data: Vec<u8>) -> Result<NpyArray> {
    swap_parallel(&h.dtype, &mut data);
    let item = h.dtype.itemsize();
    if h.fortran_order && h.shape.len() > 1 && item > 0 {
        // View the bytes as a Fortran-order array of items, each item a run
        // of `item` bytes (the last, fastest axis), and copy into C order.
        let n = h.shape.len();
        let mut fshape: Vec<usize> = h.shape.iter().rev().copied().collect();
        fshape.push(item);
        let a = ArrayD::from_shape_vec(IxDyn(&fshape), data)
            .map_err(|e| Error::invalid(e.to_string()))?;
        let mut perm: Vec<usize> = (0..n).rev().collect();
        perm.push(n);
        data = a
            .permuted_axes(IxDyn(&perm))
            .as_standard_layout()
            .into_owned()
            .into_raw_vec_and_offset()
            .0;
    }
    Ok(NpyArray {
        dtype: h.dtype.to_native(),
        shape: h.shape,
        data,
    })
}

/// Reads a whole `.npy` from any reader (a pipe, an in-memory slice). The
/// buffer grows in bounded chunks as bytes arrive, so a header that lies
/// about the size fails with [`Error::NpyTruncated`] before a large
/// allocation. Never panics on any input.
pub fn read_from<R: Read>(r: R) -> Result<NpyArray> {
    read_stream(Path::new("<reader>"), r)
}

/// [`read_from`], errors naming `path`.
fn read_stream<R: Read>(path: &Path, mut r: R) -> Result<NpyArray> {
    let io = |e| Error::io(path, e);
    let mut pre = Vec::with_capacity(12);
    (&mut r).take(10).read_to_end(&mut pre).map_err(io)?;
    if pre.len() >= 8 && pre[6] != 1 {
        (&mut r).take(2).read_to_end(&mut pre).map_err(io)?;
    }
    let (_, hlen, pre_len) = parse_preamble(path, &pre)?;
    let mut buf = pre;
    (&mut r).take(hlen).read_to_end(&mut buf).map_err(io)?;
    let h = parse_header(path, &buf, None)?;
    debug_assert!(buf.len() == pre_len + hlen as usize);
    let mut data = Vec::new();
    let want = h.payload_bytes;
    while (data.len() as u64) < want {
        let step = (want - data.len() as u64).min(READ_CHUNK as u64);
        let got = (&mut r).take(step).read_to_end(&mut data).map_err(io)?;
        if got == 0 {
            return Err(Error::NpyTruncated {
                path: path.to_path_buf(),
                expected: want,
                found: data.len() as u64,
            });
        }
    }
    finish_untyped(h, data)
}

/// Reads the first `rows` rows of a C-order array without reading the rest.
///
/// `trailing`, when given, must equal the file's dimensions after the first
/// (so the rank is checked too). Only the requested rows must be present.
/// Fortran-order files are rejected: their rows are interleaved across the
/// whole payload.
pub fn read_prefix<T: Element>(
    path: impl AsRef<Path>,
    rows: usize,
    trailing: Option<&[usize]>,
) -> Result<ArrayD<T>> {
    let path = path.as_ref();
    let (f, len) = open(path)?;
    let h = header_from_file(path, &f, len)?;
    check_dtype::<T>(path, &h)?;
    let expected = || {
        let mut s = format!("({rows}");
        match trailing {
            Some(t) => t.iter().for_each(|d| s.push_str(&format!(", {d}"))),
            None => s.push_str(", ..."),
        }
        s.push(')');
        s
    };
    let mismatch = || Error::ShapeMismatch {
        context: path.display().to_string(),
        expected: expected(),
        found: h.shape.iter().map(|&d| d as u64).collect(),
    };
    let Some((&lead, rest)) = h.shape.split_first() else {
        return Err(mismatch());
    };
    if trailing.is_some_and(|t| t != rest) || rows > lead {
        return Err(mismatch());
    }
    if h.fortran_order && h.shape.len() > 1 {
        return Err(Error::FortranOrder {
            path: path.to_path_buf(),
            operation: "prefix read",
        });
    }
    // With rows > 0 the file has rows, and lead * per_row was checked at
    // parse; with no rows the trailing dims may overflow, but count is 0.
    let per_row = rest.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
    let count = match (rows, per_row) {
        (0, _) => 0,
        (_, Some(p)) => p * rows as u64, // ≤ element_count, checked at parse
        (_, None) => return Err(mismatch()),
    };
    let bytes = count * h.dtype.itemsize() as u64;
    check_payload_present(path, &h, bytes, len)?;
    let mut v: Vec<T> = bytemuck::zeroed_vec(count as usize);
    let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
    read_payload(path, &f, buf, h.data_offset, bytes)?;
    swap_parallel(&h.dtype, buf);
    let mut shape = h.shape.clone();
    shape[0] = rows;
    finish_typed(path, &shape, h.fortran_order, v)
}

/// Task count for a block read: the request, the leading dimension and a
/// minimum of [`MIN_BYTES_PER_TASK`] per task all bound it; at least 1.
pub fn block_tasks(p: Parallelism, blocks: usize, payload_bytes: u64) -> usize {
    if !zrecord_engine::pool_usable() {
        return 1; // a forked child: the pool's threads are in the parent
    }
    let req = match p {
        Parallelism::Sequential => 1,
        Parallelism::Tasks(n) => n,
        Parallelism::Auto => rayon::current_num_threads(),
    };
    let by_work = (payload_bytes / MIN_BYTES_PER_TASK).min(usize::MAX as u64) as usize;
    req.min(blocks).min(by_work).max(1)
}

/// Reads a C-order array as one array per index of the leading axis (each
/// of the trailing shape), decoded by up to [`block_tasks`] tasks. The result
/// does not depend on the task count. Fortran-order and 0-d arrays are
/// rejected before the payload is read.
///
/// A zero-width array (a trailing dimension is 0, e.g. shape `(n, 0)`) is
/// refused with [`Error::ShapeMismatch`] when `n > 0`: its rows hold no
/// bytes, so the `n` empty arrays a block read returns would be work and
/// memory that a few-byte file declares but nothing in it backs (a 128-byte
/// header can claim `n` = 10^12). [`read`] loads such a file as the one empty
/// array NumPy gives. An array with no rows (`(0, ...)`) gives no blocks.
pub fn read_blocks<T: Element>(
    path: impl AsRef<Path>,
    parallelism: Parallelism,
) -> Result<Vec<ArrayD<T>>> {
    let path = path.as_ref();
    let (f, len) = open(path)?;
    let h = header_from_file(path, &f, len)?;
    check_dtype::<T>(path, &h)?;
    let Some((&lead, rest)) = h.shape.split_first() else {
        return Err(Error::ShapeMismatch {
            context: path.display().to_string(),
            expected: "at least one dimension".into(),
            found: vec![],
        });
    };
    if h.fortran_order && h.shape.len() > 1 {
        return Err(Error::FortranOrder {
            path: path.to_path_buf(),
            operation: "block read",
        });
    }
    check_payload_present(path, &h, h.payload_bytes, len)?;
    if lead == 0 {
        // No rows. (The trailing dims' product is unchecked here: the
        // header's element count is 0 whatever they are.)
        return Ok(Vec::new());
    }
    // Checked at parse: lead * per_block elements of the dtype fit in u64,
    // and lead > 0, so neither product overflows.
    let per_block: usize = rest.iter().product();
    if per_block == 0 {
        return Err(Error::ShapeMismatch {
            context: path.display().to_string(),
            expected: "rows of at least one element for a block read (a zero-width array \
                       has no row payload; read it whole with npy::read)"
                .into(),
            found: h.shape.iter().map(|&d| d as u64).collect(),
        });
    }
    let block_bytes = (per_block * h.dtype.itemsize()) as u64;
    let tasks = block_tasks(parallelism, lead, h.payload_bytes);
    let per_task = lead.div_ceil(tasks);
    let read_range = |r: std::ops::Range<usize>| -> Result<Vec<ArrayD<T>>> {
        r.map(|i| {
            let mut v: Vec<T> = bytemuck::zeroed_vec(per_block);
            let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
            let off = h.data_offset + i as u64 * block_bytes;
            let n = read_at_most(path, &f, buf, off)?;
            if n < buf.len() {
                return Err(Error::NpyTruncated {
                    path: path.to_path_buf(),
                    expected: h.payload_bytes,
                    found: i as u64 * block_bytes + n as u64,
                });
            }
            h.dtype.swap_to_native(buf);
            ArrayD::from_shape_vec(IxDyn(rest), v).map_err(|e| Error::invalid(e.to_string()))
        })
        .collect()
    };
    if tasks == 1 {
        return read_range(0..lead);
    }
    let parts: Vec<Result<Vec<ArrayD<T>>>> = (0..tasks)
        .into_par_iter()
        .map(|t| read_range(t * per_task..((t + 1) * per_task).min(lead)))
        .collect();
    let mut out = Vec::with_capacity(lead);
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

/// Largest Fortran-order payload [`import_into`] accepts: such a file is
/// read whole and transposed before its rows can be appended.
pub const MAX_FORTRAN_IMPORT_BYTES: u64 = 256 << 20;

/// Appends the rows of the `.npy` at `path` (one record per index of the
/// leading axis) to `store`, in batches of at most `batch_rows` records
/// (default: [`DEFAULT_BATCH_BYTES`](crate::import::DEFAULT_BATCH_BYTES)
/// worth). A C-order payload is read batch by batch straight from the file,
/// so memory is one batch whatever the file's size.
///
/// The store's item shape must equal the file's trailing dimensions, and its
/// dtype must be the file's dtype as stored or, for a big-endian file, its
/// native-order twin (each batch is then byte-swapped); a mismatch is an
/// error naming both. The whole payload must be present before anything is
/// appended, so a truncated file appends nothing. A Fortran-order file is
/// read whole (its rows are interleaved across the payload), and refused
/// with [`Error::FortranOrder`] above [`MAX_FORTRAN_IMPORT_BYTES`].
/// A 0-d array has no rows and is refused.
///
/// ```
/// use ndarray::{ArrayD, IxDyn};
/// use zrecord::{Codec, CreateOptions, DenseCore, Element};
/// let dir = tempfile::tempdir()?;
/// let npy = dir.path().join("a.npy");
/// zrecord::npy::write(&npy, &ArrayD::from_shape_fn(IxDyn(&[10, 3]), |i| (i[0] * 3 + i[1]) as i32))?;
/// let store = DenseCore::create(dir.path().join("s"), &i32::dtype(), &[3], &CreateOptions::new(Codec::Raw))?;
/// let done = zrecord::npy::import_into(&npy, &store, Some(4))?;
/// assert_eq!((done.rows, done.batches), (10, 3));
/// assert_eq!(store.len(), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn import_into(
    path: impl AsRef<Path>,
    store: &DenseCore,
    batch_rows: Option<usize>,
) -> Result<Imported> {
    let path = path.as_ref();
    let (f, len) = open(path)?;
    let h = header_from_file(path, &f, len)?;
    let context = || {
        format!(
            "import of {} into {}",
            path.display(),
            store.path().display()
        )
    };
    let swap = if *store.dtype() == h.dtype {
        false
    } else if *store.dtype() == h.dtype.to_native() {
        true
    } else {
        return Err(Error::DTypeMismatch {
            context: context(),
            expected: store.dtype().to_string(),
            found: h.dtype.to_string(),
        });
    };
    let Some((&lead, rest)) = h.shape.split_first() else {
        return Err(Error::ShapeMismatch {
            context: context(),
            expected: format!("(rows, *{:?})", store.item_shape()),
            found: vec![],
        });
    };
    if rest.len() != store.item_shape().len()
        || rest
            .iter()
            .zip(store.item_shape())
            .any(|(&a, &b)| a as u64 != b)
    {
        return Err(Error::ShapeMismatch {
            context: context(),
            expected: format!("(rows, *{:?})", store.item_shape()),
            found: h.shape.iter().map(|&d| d as u64).collect(),
        });
    }
    check_payload_present(path, &h, h.payload_bytes, len)?;
    let record = store.record_bytes();
    let step = batch_rows_for(batch_rows, record);
    let mut done = Imported {
        first: store.len(),
        rows: 0,
        batches: 0,
    };
    if lead == 0 {
        return Ok(done);
    }
    if h.fortran_order && h.shape.len() > 1 {
        if h.payload_bytes > MAX_FORTRAN_IMPORT_BYTES {
            return Err(Error::FortranOrder {
                path: path.to_path_buf(),
                operation: "a store import of more than 256 MiB",
            });
        }
        let mut data = vec![0u8; h.payload_bytes as usize];
        read_payload(path, &f, &mut data, h.data_offset, h.payload_bytes)?;
        let a = finish_untyped(h, data)?;
        let data = if swap {
            a.data
        } else {
            // finish_untyped converted to native order; the store keeps the
            // file's order, so convert back (the swap is an involution).
            let mut d = a.data;
            store.dtype().swap_to_native(&mut d);
            d
        };
        for batch in data.chunks(step.saturating_mul(record)) {
            store.append_bytes(batch)?;
            done.rows += (batch.len() / record) as u64;
            done.batches += 1;
        }
        return Ok(done);
    }
    let mut buf = vec![0u8; step.min(lead) * record];
    let mut row = 0usize;
    while row < lead {
        let n = step.min(lead - row);
        let chunk = &mut buf[..n * record];
        let off = h.data_offset + row as u64 * record as u64;
        let got = read_at_most(path, &f, chunk, off)?;
        if got < chunk.len() {
            // The file shrank after the size check.
            return Err(Error::NpyTruncated {
                path: path.to_path_buf(),
                expected: h.payload_bytes,
                found: row as u64 * record as u64 + got as u64,
            });
        }
        if swap {
            h.dtype.swap_to_native(chunk);
        }
        store.append_bytes(chunk)?;
        row += n;
        done.rows += n as u64;
        done.batches += 1;
    }
    Ok(done)
}

/// Creates a dense store at `store_path` with the `.npy`'s dtype (as
/// stored, big-endian included) and trailing dimensions as item shape, and
/// imports the file's rows into it with [`import_into`]. A 1-D file gives a
/// store of scalars.
pub fn import_to_store(
    npy_path: impl AsRef<Path>,
    store_path: impl AsRef<Path>,
    opts: &CreateOptions,
    batch_rows: Option<usize>,
) -> Result<DenseCore> {
    let npy_path = npy_path.as_ref();
    let h = read_header(npy_path)?;
    if h.shape.is_empty() {
        return Err(Error::ShapeMismatch {
            context: format!("import of {}", npy_path.display()),
            expected: "at least one dimension (one record per row)".into(),
            found: vec![],
        });
    }
    let item: Vec<u64> = h.shape[1..].iter().map(|&d| d as u64).collect();
    let store = DenseCore::create(store_path, &h.dtype, &item, opts)?;
    import_into(npy_path, &store, batch_rows)?;
    Ok(store)
}

/// The header bytes (preamble, dict, padding, newline) NumPy writes for this
/// dtype and shape, choosing version 1, 2 or 3 as NumPy does.
pub fn header_bytes(dtype: &DType, shape: &[usize], fortran_order: bool) -> Result<Vec<u8>> {
    let mut dict = format!(
        "{{'descr': {}, 'fortran_order': {}, 'shape': {}, }}",
        dtype.python_literal(),
        if fortran_order { "True" } else { "False" },
        match shape {
            [d] => format!("({d},)"),
            _ => format!(
                "({})",
                shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    );
    if !shape.is_empty() {
        let growth = if fortran_order {
            shape[shape.len() - 1]
        } else {
            shape[0]
        };
        let digits = growth.to_string().len();
        dict.extend(std::iter::repeat_n(' ', 21usize.saturating_sub(digits)));
    }
    let latin1 = dict.chars().all(|c| (c as u32) < 256);
    let body: Vec<u8> = if latin1 {
        dict.chars().map(|c| c as u8).collect()
    } else {
        dict.clone().into_bytes()
    };
    let hlen = body.len() + 1;
    let pad = |pre: usize| 64 - (pre + hlen) % 64;
    let (major, pre) = if latin1 && hlen + pad(10) <= u16::MAX as usize {
        (1u8, 10)
    } else if latin1 {
        (2, 12)
    } else {
        (3, 12)
    };
    let padlen = pad(pre);
    let total_hlen = hlen + padlen;
    if total_hlen as u64 > MAX_HEADER_LEN {
        return Err(Error::invalid(format!(
            "a .npy header of {total_hlen} bytes exceeds the 1 MiB limit"
        )));
    }
    let mut out = Vec::with_capacity(pre + total_hlen);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&(total_hlen as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(total_hlen as u32).to_le_bytes());
    }
    out.extend_from_slice(&body);
    out.extend(std::iter::repeat_n(b' ', padlen));
    out.push(b'\n');
    Ok(out)
}

fn create(path: &Path) -> Result<std::io::BufWriter<File>> {
    let f = File::create(path).map_err(|e| Error::io(path, e))?;
    Ok(std::io::BufWriter::with_capacity(1 << 20, f))
}

/// Writes `a` as a C-order `.npy` (version 1, or 2/3 when the header needs
/// it); the bytes equal what `numpy.save` writes for the same array.
pub fn write<T: Element, S: Data<Elem = T>, D: Dimension>(
    path: impl AsRef<Path>,
    a: &ArrayBase<S, D>,
) -> Result<()> {
    let path = path.as_ref();
    let header = header_bytes(&DType::of::<T>()?, a.shape(), false)?;
    let mut w = create(path)?;
    let io = |e| Error::io(path, e);
    w.write_all(&header).map_err(io)?;
    match a.as_slice() {
        Some(s) => w.write_all(bytemuck::cast_slice(s)).map_err(io)?,
        None => {
            for x in a.iter() {
                w.write_all(bytemuck::bytes_of(x)).map_err(io)?;
            }
        }
    }
    let f = w
        .into_inner()
        .map_err(|e| Error::io(path, e.into_error()))?;
    zrecord_engine::vfs::sync_file(&f, false).map_err(io)
}

/// Writes an untyped array (any dtype the reader accepts, bytes in C order
/// and in `a.dtype`'s byte order).
pub fn write_untyped(path: impl AsRef<Path>, a: &NpyArray) -> Result<()> {
    let path = path.as_ref();
    let count = a
        .shape
        .iter()
        .try_fold(1usize, |x, &d| x.checked_mul(d))
        .and_then(|n| n.checked_mul(a.dtype.itemsize()));
    if count != Some(a.data.len()) {
        return Err(Error::ShapeMismatch {
            context: format!("{} (write)", path.display()),
            expected: format!("{} bytes", a.data.len()),
            found: a.shape.iter().map(|&d| d as u64).collect(),
        });
    }
    let header = header_bytes(&a.dtype, &a.shape, false)?;
    let mut w = create(path)?;
    let io = |e| Error::io(path, e);
    w.write_all(&header).map_err(io)?;
    w.write_all(&a.data).map_err(io)?;
    let f = w
        .into_inner()
        .map_err(|e| Error::io(path, e.into_error()))?;
    zrecord_engine::vfs::sync_file(&f, false).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_parser_handles_numpy_headers() {
        let h = "{'descr': [('x', '<f4'), ('y', '>i2', (2,))], 'fortran_order': True, 'shape': (3L, 4), }   \n";
        let lit = LitParser::new(h).parse_all().unwrap();
        let Lit::Map(m) = lit else { panic!() };
        assert_eq!(m.len(), 3);
        assert_eq!(m[2].1, Lit::Seq(vec![Lit::Int(3), Lit::Int(4)]));
    }

    /// A titled field's key in a header's descr is the tuple (title, name),
    /// as `np.save` writes it; the header parser shares the identity's
    /// descr rules, and writing the header back keeps the title.
    #[test]
    fn headers_with_titled_fields_parse_and_write_back() {
        let text = "{'descr': [(('Position', 'x'), '>f4'), ('y', '|u1', (2,))], 'fortran_order': False, 'shape': (3,), }";
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        let mut header = text.to_string();
        while !(10 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        let h = NpyHeader::parse(&bytes).unwrap();
        assert_eq!(
            h.dtype.descr(),
            "[(('Position', 'x'), '>f4'), ('y', '|u1', (2,))]"
        );
        assert_eq!(h.dtype.itemsize(), 6);
        let written = header_bytes(&h.dtype, &h.shape, false).unwrap();
        assert_eq!(NpyHeader::parse(&written).unwrap().dtype, h.dtype);
        // A title repeating the other field's name is refused, not misread.
        let clash = text.replace("('y'", "('Position'");
        let mut bad = b"\x93NUMPY\x01\x00".to_vec();
        bad.extend((clash.len() as u16 + 1).to_le_bytes());
        bad.extend(clash.as_bytes());
        bad.push(b'\n');
        let e = NpyHeader::parse(&bad).unwrap_err().to_string();
        assert!(
            e.contains(r#"field name "Position" is already the title"#),
            "{e}"
        );
    }

    #[test]
    fn parentheses_around_one_value_without_a_comma_are_grouping() {
        let one = |s: &str| LitParser::new(s).parse_all().unwrap();
        assert_eq!(one("(6)"), Lit::Int(6));
        assert_eq!(one("( 6 )"), Lit::Int(6));
        assert_eq!(one("(6,)"), Lit::Seq(vec![Lit::Int(6)]));
        assert_eq!(one("(6 , )"), Lit::Seq(vec![Lit::Int(6)]));
        assert_eq!(one("((6,))"), Lit::Seq(vec![Lit::Int(6)]));
        assert_eq!(one("('a,')"), Lit::Str("a,".into()));
        assert_eq!(one("()"), Lit::Seq(vec![]));
        assert_eq!(
            one("((1, 2),)"),
            Lit::Seq(vec![Lit::Seq(vec![Lit::Int(1), Lit::Int(2)])])
        );
    }

    #[test]
    fn literal_parser_rejects_garbage_without_panicking() {
        for s in [
            "{",
            "{'a': }",
            "{'a' 1}",
            "((((",
            "'abc",
            "{'a': 1.5}",
            "{'a': __import__}",
            "{'a': 1}x",
            "'\\x4'",
            "\"\\u12\"",
            "(03,)",
            "-01",
            "007L",
            "3l",
            "'a\rb'",
        ] {
            assert!(LitParser::new(s).parse_all().is_err(), "{s}");
        }
        // Zero itself may repeat its digit, as in Python.
        assert_eq!(LitParser::new("00").parse_all(), Ok(Lit::Int(0)));
        assert_eq!(LitParser::new("-0").parse_all(), Ok(Lit::Int(0)));
        let deep = "[".repeat(1000);
        assert!(LitParser::new(&deep).parse_all().is_err());
    }

    #[test]
    fn block_tasks_are_bounded() {
        assert_eq!(block_tasks(Parallelism::Tasks(8), 3, 1 << 40), 3);
        assert_eq!(block_tasks(Parallelism::Tasks(8), 100, 1 << 10), 1);
        assert_eq!(block_tasks(Parallelism::Sequential, 100, 1 << 40), 1);
        assert_eq!(block_tasks(Parallelism::Tasks(4), 100, 1 << 40), 4);
        assert_eq!(block_tasks(Parallelism::Tasks(0), 100, 1 << 40), 1);
    }

    #[test]
    fn large_reads_split_at_destination_pages_and_keep_every_byte() {
        // Above READ_CHUNK the payload is read as an unaligned head, then
        // chunks starting on destination page boundaries: every element
        // must land where it belongs, typed and untyped; a file cut short
        // is still an error.
        let n = READ_CHUNK / 4 * 2 + 12_345;
        let a = ndarray::Array1::from_iter((0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.npy");
        write(&path, &a).unwrap();
        let back = read::<u32>(&path).unwrap();
        assert_eq!(back.as_slice().unwrap(), a.as_slice().unwrap());
        let raw = read_untyped(&path).unwrap();
        assert_eq!(raw.data.len(), n * 4);
        assert!(
            raw.data
                .chunks_exact(4)
                .zip(a.iter())
                .all(|(c, &v)| c == v.to_le_bytes())
        );
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(f.metadata().unwrap().len() - 1).unwrap();
        assert!(matches!(
            read::<u32>(&path),
            Err(Error::NpyTruncated { .. })
        ));
    }

    /// A pipe holding `bytes` (its write end closed), as `/dev/fd/N`.
    #[cfg(unix)]
    fn pipe_of(bytes: &[u8]) -> (File, String) {
        use std::os::fd::{AsRawFd, FromRawFd};
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: pipe(2) just opened both; each is owned once, here.
        let (r, mut w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        w.write_all(bytes).unwrap();
        drop(w);
        let name = format!("/dev/fd/{}", r.as_raw_fd());
        (r, name)
    }

    /// Regression: a `.npy` on a pipe failed with a bare "Illegal seek (os
    /// error 29)". The whole-array readers read the stream; the offset
    /// readers say the file must be a regular one, naming it.
    #[cfg(unix)]
    #[test]
    fn a_pipe_is_read_whole_or_refused_clearly() {
        let a = ArrayD::from_shape_fn(IxDyn(&[3, 2]), |i| (i[0] * 2 + i[1]) as f64);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        write(&path, &a).unwrap();
        let bytes = std::fs::read(&path).unwrap();

        let (_r, name) = pipe_of(&bytes);
        assert_eq!(read::<f64>(&name).unwrap(), a);
        let (_r, name) = pipe_of(&bytes);
        let raw = read_untyped(&name).unwrap();
        assert_eq!((raw.shape.as_slice(), raw.data.len()), (&[3, 2][..], 48));
        let (_r, name) = pipe_of(&bytes);
        let msg = read::<f32>(&name).unwrap_err().to_string();
        assert!(msg.contains(&name), "{msg}");
        let (_r, name) = pipe_of(&bytes[..bytes.len() - 8]);
        assert!(matches!(
            read::<f64>(&name),
            Err(Error::NpyTruncated { .. })
        ));
        let (_r, name) = pipe_of(&bytes);
        // An `Io` error's message names the file; why is its source.
        for msg in [
            crate::error::chain(&read_header(&name).unwrap_err()),
            crate::error::chain(&read_prefix::<f64>(&name, 1, None).unwrap_err()),
        ] {
            assert!(
                msg.contains(&name) && msg.contains("not a regular file"),
                "{msg}"
            );
        }
        match read_header(dir.path()) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory)
            }
            other => panic!("{other:?}"),
        }
        let h = NpyHeader::parse_named("x.npy", &bytes).unwrap();
        assert_eq!(h.shape, vec![3, 2]);
        let msg = NpyHeader::parse_named("x.npy", &bytes[..20])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("x.npy"), "{msg}");
    }
}
