//! The crate's one error type.
//!
//! Every variant names what was wrong and where: the file, the dtype string,
//! the line and column. New kinds of failure are added as new variants (the
//! enum is `#[non_exhaustive]`), never by stuffing details into a string of
//! another variant.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `zrecord`.
///
/// An error's message does not repeat its cause: [`Error::Io`] names the
/// file, and the OS error is its [`source()`](std::error::Error::source),
/// not part of its `Display` (so is an engine I/O error's, through
/// [`Error::Engine`]). Walk `source()` (or print with `{:#}` through
/// `anyhow`, or any reporter that follows the chain) to show the cause:
///
/// ```
/// use std::error::Error as _;
/// let e = zrecord::npy::read_header("/no/such/file.npy").unwrap_err();
/// assert_eq!(e.to_string(), "/no/such/file.npy");
/// let mut message = e.to_string();
/// let mut cause = e.source();
/// while let Some(c) = cause {
///     message += &format!(": {c}");
///     cause = c.source();
/// }
/// assert!(message.starts_with("/no/such/file.npy: No such file"), "{message}");
/// ```
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation on `path` failed. The message names the file; the
    /// OS error is the [`source()`](std::error::Error::source) (downcast it
    /// to [`std::io::Error`] for its kind), not repeated in the message.
    #[error("{}", path.display())]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A dtype string or descr is not one that zrecord can store
    /// (object, string, datetime, unknown, malformed).
    #[error("unsupported dtype {dtype:?}: {reason}")]
    UnsupportedDType {
        /// The dtype as given (typestr, or a rendering of the descr).
        dtype: String,
        /// Why it was rejected.
        reason: String,
    },

    /// A persisted type identity (MessagePack) could not be decoded.
    #[error("invalid type identity: {detail}")]
    BadIdentity {
        /// What was wrong.
        detail: String,
    },

    /// The header of a `.npy` file is malformed.
    #[error("{}: bad .npy header: {problem}", path.display())]
    NpyHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong with the header.
        problem: NpyHeaderProblem,
    },

    /// A `.npy` payload ends before the bytes its header promises.
    #[error("{}: .npy payload truncated: header promises {expected} bytes, file holds {found}", path.display())]
    NpyTruncated {
        /// The file.
        path: PathBuf,
        /// Payload bytes the header (or the requested prefix) needs.
        expected: u64,
        /// Payload bytes actually present.
        found: u64,
    },

    /// An operation that needs C order was asked of a Fortran-order `.npy`.
    #[error("{}: {operation} needs a C-order array, but the file is Fortran-ordered (its rows are interleaved across the payload); rewrite it in C order first", path.display())]
    FortranOrder {
        /// The file.
        path: PathBuf,
        /// The operation refused (`"prefix read"`, `"block read"`).
        operation: &'static str,
    },

    /// Data holds one dtype where another was expected.
    #[error("{context}: holds dtype {found}, asked for {expected}")]
    DTypeMismatch {
        /// What holds the data (a file path, a store).
        context: String,
        /// The dtype asked for.
        expected: String,
        /// The dtype found.
        found: String,
    },

    /// Data has one shape where another was expected.
    #[error("{context}: holds shape {found:?}, asked for {expected}")]
    ShapeMismatch {
        /// What holds the data.
        context: String,
        /// The expectation, rendered (may contain `*` for free dimensions).
        expected: String,
        /// The shape found.
        found: Vec<u64>,
    },

    /// A text token is not a number. The token is shown with Python's
    /// escapes (`"\ufeff1"`), and a byte-order mark at the start of the
    /// file gets a hint: like NumPy's `loadtxt`, the parser does not skip it.
    #[error(
        "{}:{line}: column {column}: cannot parse {} as a number{}",
        path.display(),
        py_quoted(.token),
        bom_hint(*.line, *.column, .token)
    )]
    TextParse {
        /// The file.
        path: PathBuf,
        /// 1-based physical line number.
        line: u64,
        /// 1-based column (field) number in the file's row, as the line
        /// number is 1-based.
        column: usize,
        /// The offending token (lossily decoded if not UTF-8).
        token: String,
    },

    /// A text line holds a carriage return that does not end it (an old Mac
    /// line ending): only LF and CRLF end lines here, so reading on would
    /// join lines that NumPy keeps apart.
    #[error(
        "{}:{line}: a lone carriage return (CR) inside the line; only LF and CRLF line endings are supported (convert CR line endings to LF first, e.g. with `tr '\\r' '\\n'`)",
        path.display()
    )]
    TextLineEnding {
        /// The file.
        path: PathBuf,
        /// 1-based physical line number (counting LF only).
        line: u64,
    },

    /// A text row has a different number of columns than the first data row.
    #[error("{}:{line}: expected {expected} columns, found {found}", path.display())]
    TextColumns {
        /// The file.
        path: PathBuf,
        /// 1-based physical line number.
        line: u64,
        /// Columns of the first data row (or required by `usecols`).
        expected: usize,
        /// Columns in this row.
        found: usize,
    },

    /// A caller-supplied argument is invalid (zero threads, bad usecols...).
    #[error("invalid argument: {detail}")]
    InvalidArgument {
        /// What is wrong.
        detail: String,
    },

    /// Sizes overflow the address space or a format limit.
    #[error("{context}: size overflow: {detail}")]
    Overflow {
        /// Where.
        context: String,
        /// What overflowed.
        detail: String,
    },

    /// The byte engine below reported an error (it names the file, record
    /// or argument).
    #[error(transparent)]
    Engine(#[from] zrecord_engine::Error),

    /// A record index outside `0..len` (negative indices already wrapped).
    #[error(
        "{}record index {index} is out of range for {}",
        store_prefix(.path.as_deref()),
        records(*.len)
    )]
    IndexOutOfRange {
        /// The store directory; `None` only from [`resolve`](crate::resolve)
        /// called on its own (the stores name themselves).
        path: Option<PathBuf>,
        /// The index as the caller gave it.
        index: i128,
        /// The store's length.
        len: u64,
    },

    /// There is no store at `path` (neither `meta.zr` nor `store.zr`).
    #[error("{} is not a zrecord store", path.display())]
    NotAStore {
        /// The directory.
        path: PathBuf,
    },

    /// A store's typed header (`store.zr`) is missing, malformed or
    /// inconsistent with the engine files.
    #[error("{}: {detail}", file.display())]
    BadStore {
        /// The file at fault (usually `store.zr`).
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },

    /// A store is dense where ragged was asked, or the reverse.
    #[error("{}: is a {stored} store, asked for {asked}", path.display())]
    KindMismatch {
        /// The store directory.
        path: PathBuf,
        /// The stored kind (`"dense"` / `"ragged"`).
        stored: &'static str,
        /// The asked kind.
        asked: &'static str,
    },

    /// A store uses one codec where another was asked.
    #[error("{}: holds codec {stored}, asked for {asked}", path.display())]
    CodecMismatch {
        /// The store directory.
        path: PathBuf,
        /// The stored codec name.
        stored: &'static str,
        /// The asked codec name.
        asked: &'static str,
    },

    /// A ragged record with no elements (the format stores only non-empty
    /// records).
    #[error("record {position} of the batch is empty; records must hold at least one element")]
    EmptyRecord {
        /// Position of the record in the appended batch.
        position: usize,
    },

    /// A ragged record has more dimensions than the format allows
    /// ([`MAX_RANK`](crate::ragged::MAX_RANK), NumPy's limit of 64).
    #[error(
        "record {position} of the batch has rank {rank}; ragged records have at most {} dimensions (NumPy's limit)",
        crate::ragged::MAX_RANK
    )]
    RankTooHigh {
        /// Position of the record in the appended batch.
        position: usize,
        /// The record's rank (number of dimensions).
        rank: usize,
    },

    /// A ragged record's payload length disagrees with its shape.
    #[error(
        "record {position} of the batch: shape {shape:?} of {itemsize}-byte items needs {}, payload has {found} bytes",
        crate::store::show_nbytes(*.expected)
    )]
    RecordSize {
        /// Position of the record in the appended batch.
        position: usize,
        /// The record's shape.
        shape: Vec<u64>,
        /// Bytes per element.
        itemsize: usize,
        /// `product(shape) * itemsize`, if it does not overflow.
        expected: Option<u64>,
        /// Payload bytes given.
        found: usize,
    },

    /// A stored record breaks the typed contract (a ragged shape record that
    /// disagrees with its payload).
    #[error("{}: record {index} is corrupted: {detail}", path.display())]
    Corrupted {
        /// The store directory.
        path: PathBuf,
        /// The logical record index.
        index: u64,
        /// What is wrong.
        detail: String,
    },

    /// Streams that must have equal lengths do not.
    #[error("streams differ in length: {}", lengths.iter().map(|(n, l)| format!("{n}={l}")).collect::<Vec<_>>().join(", "))]
    LengthMismatch {
        /// Every stream's name and length, in the order given.
        lengths: Vec<(String, u64)>,
    },
}

/// What is wrong with a `.npy` header (see [`Error::NpyHeader`]).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NpyHeaderProblem {
    /// The file does not start with `\x93NUMPY`.
    #[error("bad magic (not a .npy file)")]
    BadMagic,
    /// A format version other than 1.0, 2.0, 3.0.
    #[error("unsupported format version {0}.{1}")]
    UnsupportedVersion(u8, u8),
    /// The file ends inside the preamble or the header.
    #[error("file ends inside the header ({needed} bytes needed, {found} present)")]
    Truncated {
        /// Bytes the preamble + header need.
        needed: u64,
        /// Bytes present.
        found: u64,
    },
    /// The declared header length exceeds the 1 MiB limit.
    #[error("header length {0} exceeds the 1 MiB limit")]
    TooLong(u64),
    /// The header is not ASCII (v1/v2) or UTF-8 (v3).
    #[error("header is not valid {0}")]
    Encoding(&'static str),
    /// The header does not end with a newline, or the dict is not a valid literal.
    #[error("malformed header literal: {0}")]
    Syntax(String),
    /// A required key is missing.
    #[error("missing key {0:?}")]
    MissingKey(&'static str),
    /// A key other than descr / fortran_order / shape, or a key given twice.
    #[error("unexpected key {0:?}")]
    UnexpectedKey(String),
    /// A key has a value of the wrong type or an invalid value.
    #[error("bad value for {key:?}: {detail}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The shape's element count or byte size overflows.
    #[error("shape {0:?} overflows the addressable size")]
    ShapeOverflow(Vec<u64>),
}

/// `s` in double quotes with Python's escapes for what would not show:
/// `\t`, `\n`, `\r`, `\xNN`, `\uNNNN`, `\UNNNNNNNN` (where Rust's `{:?}`
/// writes `\u{feff}`), and `\"` and `\\`.
fn py_quoted(s: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if invisible(c) => {
                let n = u32::from(c);
                let _ = match n {
                    0..=0xff => write!(out, "\\x{n:02x}"),
                    0x100..=0xffff => write!(out, "\\u{n:04x}"),
                    _ => write!(out, "\\U{n:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Characters Python's `repr` escapes because they print as nothing or as
/// a blank: controls, separators other than the space, and the common
/// format characters (soft hyphen, zero-width and direction marks, the
/// byte-order mark, tag characters).
fn invisible(c: char) -> bool {
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(
            c,
            '\u{ad}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{feff}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// `"{path}: "`, or nothing without a path.
fn store_prefix(path: Option<&std::path::Path>) -> String {
    path.map(|p| format!("{}: ", p.display()))
        .unwrap_or_default()
}

/// `n` records, "1 record" for one.
pub(crate) fn records(n: u64) -> String {
    if n == 1 {
        "1 record".to_owned()
    } else {
        format!("{n} records")
    }
}

/// The hint for a token that starts with a byte-order mark.
fn bom_hint(line: u64, column: usize, token: &str) -> &'static str {
    if !token.starts_with('\u{feff}') {
        ""
    } else if line == 1 && column == 1 {
        " (the file starts with a UTF-8 byte-order mark; remove it first: like NumPy's loadtxt, this reader does not skip it)"
    } else {
        " (it starts with a UTF-8 byte-order mark, U+FEFF)"
    }
}

pub(crate) use zrecord_engine::error_chain as chain;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn unsupported(dtype: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::UnsupportedDType {
            dtype: dtype.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(detail: impl Into<String>) -> Self {
        Error::InvalidArgument {
            detail: detail.into(),
        }
    }

    /// Names the structured field an [`Error::UnsupportedDType`] was found
    /// in (`field "a": ...`; called again by an enclosing field, the path
    /// grows: `field "outer.a": ...`). Other errors pass unchanged.
    ///
    /// For callers that build a structured dtype field by field (a binding
    /// parsing each field's type string with [`DType::parse`](crate::DType::parse)).
    ///
    /// ```
    /// use zrecord::DType;
    /// let e = DType::parse("|S3").unwrap_err().in_field("name");
    /// assert!(e.to_string().contains(r#"field "name": string dtypes"#));
    /// ```
    pub fn in_field(self, name: &str) -> Error {
        match self {
            Error::UnsupportedDType { dtype, reason } => {
                let reason = match reason.strip_prefix("field \"") {
                    Some(inner) => format!("field \"{name}.{inner}"),
                    None => format!("field \"{name}\": {reason}"),
                };
                Error::UnsupportedDType { dtype, reason }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// Regression: `Io` wrote its OS error into its message and also
    /// returned it from `source()`, so anything that prints the chain
    /// (anyhow's `{:#}`, eyre, the Python binding) printed it twice:
    /// "/x/a.npy: No such file or directory (os error 2): No such file or
    /// directory (os error 2)". Through `Engine` (transparent) likewise.
    #[test]
    fn an_io_error_leaves_its_os_error_to_source_and_the_chain_shows_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("a.npy");
        let e = crate::npy::read_header(&missing).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        let os_msg = std::io::Error::from_raw_os_error(2).to_string();
        assert_eq!(e.to_string(), missing.display().to_string());
        let source = e
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the OS error is the source");
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        let c = chain(&e);
        assert_eq!(c, format!("{}: {os_msg}", missing.display()));
        assert_eq!(c.matches(&os_msg).count(), 1, "{c}");

        let engine = Error::from(zrecord_engine::Error::Io {
            path: missing.clone(),
            op: "read",
            source: std::io::Error::from_raw_os_error(2),
        });
        let c = chain(&engine);
        assert_eq!(c, format!("read {}: {os_msg}", missing.display()));
        assert_eq!(c.matches(&os_msg).count(), 1, "{c}");
    }

    #[test]
    fn tokens_are_quoted_with_python_escapes() {
        assert_eq!(py_quoted("x4"), r#""x4""#);
        assert_eq!(py_quoted("\u{feff}1"), r#""\ufeff1""#);
        assert_eq!(py_quoted("a\tb\u{0}\u{a0}"), r#""a\tb\x00\xa0""#);
        assert_eq!(py_quoted("\u{1d400}é\"\\"), "\"\u{1d400}é\\\"\\\\\"");
        assert_eq!(py_quoted("\u{e0001}"), r#""\U000e0001""#);
    }

    /// Regression (audit f11): the expected size printed as Rust's
    /// `Some(16)` / `None`.
    #[test]
    fn record_size_prints_a_number_or_says_it_overflows() {
        let e = |expected| Error::RecordSize {
            position: 2,
            shape: vec![4],
            itemsize: 4,
            expected,
            found: 12,
        };
        assert_eq!(
            e(Some(16)).to_string(),
            "record 2 of the batch: shape [4] of 4-byte items needs 16 bytes, payload has 12 bytes"
        );
        let m = e(None).to_string();
        assert!(
            m.contains("needs a byte count that overflows 64 bits,"),
            "{m}"
        );
        assert!(!m.contains("None") && !m.contains("Some("), "{m}");
    }
}
