//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in the engine. Each variant names the file,
/// index or argument it concerns.
///
/// An error's message does not repeat its cause: [`Error::Io`] says what
/// failed on which file ("read /data/s/0.loc"), and the OS error is its
/// [`source()`](std::error::Error::source), not part of its `Display`. Walk
/// `source()` (or print with `{:#}` through `anyhow`, or any reporter that
/// follows the chain) to show the cause as well:
///
/// ```
/// use std::error::Error as _;
/// use std::io;
/// let e = zrecord_engine::Error::Io {
///     path: "/data/s/0.loc".into(),
///     op: "read",
///     source: io::Error::from(io::ErrorKind::UnexpectedEof),
/// };
/// assert_eq!(e.to_string(), "read /data/s/0.loc");
/// let mut message = e.to_string();
/// let mut cause = e.source();
/// while let Some(c) = cause {
///     message += &format!(": {c}");
///     cause = c.source();
/// }
/// assert_eq!(message, "read /data/s/0.loc: unexpected end of file");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed. The message names the call and
    /// the file; the OS error is the [`source()`](std::error::Error::source)
    /// (downcast it to [`std::io::Error`] for its kind), not repeated in
    /// the message.
    #[error("{op} {path}")]
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// What was being done ("read", "write", "sync", ...).
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file of the store holds bytes that break the format.
    #[error("corrupted store file {file}: {}{detail}", record_prefix(*.record))]
    Corrupted {
        /// The offending file.
        file: PathBuf,
        /// The record whose entry or stored bytes are wrong, when the damage
        /// is one record's (the message then starts "record N: "). A layer
        /// that numbers records differently (a ragged store's pairs) reads
        /// it to name its own record.
        record: Option<u64>,
        /// Which field or record, and how it is wrong.
        detail: String,
    },
    /// The directory holds no store (no `meta.zr`).
    #[error("{path} is not a zrecord store (no meta.zr)")]
    NotAStore {
        /// The directory (or missing file) looked at.
        path: PathBuf,
    },
    /// `meta.zr` is empty and the directory holds none of a store's data:
    /// what a [`crate::Engine::create`] leaves when a crash cuts it short
    /// (one that fails otherwise removes what it made). Not a store; a
    /// create there clears the files and makes the store.
    #[error(
        "{path} holds no store: a create there did not finish (meta.zr is empty); create the store again (a create clears what the interrupted one left)"
    )]
    CreateInterrupted {
        /// The directory.
        path: PathBuf,
    },
    /// Another handle holds the store's lock.
    #[error("store {path} is busy: another handle holds its lock")]
    StoreBusy {
        /// The store directory.
        path: PathBuf,
    },
    /// `create` found files in the target directory.
    #[error("cannot create a store in {path}: it already holds {file}{}", leftover_hint(.file))]
    ForeignFiles {
        /// The directory.
        path: PathBuf,
        /// One file found there.
        file: String,
    },
    /// An index at or past the store's length.
    #[error("{path}: record index {index} is out of range for {}", records(*.len))]
    IndexOutOfRange {
        /// The store directory.
        path: PathBuf,
        /// The offending index.
        index: u64,
        /// The store's length when checked.
        len: u64,
    },
    /// A caller-supplied argument is inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A gather was told a record's length (`gather_fixed`'s record size, a
    /// `gather_var` destination range), and the record's entry says another.
    /// The caller's mistake, or, where a layer above keeps the lengths
    /// itself (a dense store's fixed record size), a damaged entry: that
    /// layer decides.
    #[error("record {record} holds {stored} bytes, the gather asked for {asked}")]
    RecordLength {
        /// The record.
        record: u64,
        /// Its length by its entry in the `.loc` file.
        stored: u64,
        /// That `.loc` segment file's name (`3.loc`), for a layer above that
        /// reports the entry as damaged.
        loc: String,
        /// The length the caller gave.
        asked: u64,
    },
    /// A write operation on a read-only handle.
    #[error("store {path} is open read-only")]
    ReadOnly {
        /// The store directory.
        path: PathBuf,
    },
    /// A read-only open found a compaction move that a crash interrupted;
    /// only a read-write open can finish it.
    #[error("store {path} needs recovery after a crash: open it read-write once")]
    RecoveryNeeded {
        /// The store directory.
        path: PathBuf,
    },
    /// A write through a handle inherited by a forked process: the two
    /// processes would share one lock and one in-memory state, and the
    /// deferred-append marker belongs to the process that opened the store.
    /// Opening the store afresh in the child fails with
    /// [`Error::StoreBusy`] while the opener holds it, so the advice is to
    /// close it there first.
    #[error(
        "store {path}: this handle was opened by process {opener}; a forked process cannot write through it, nor make the opener's deferred appends durable. To write from this process, close the store in process {opener} first, then open it here (while process {opener} holds it, opening it here fails as busy)"
    )]
    ForeignProcess {
        /// The store directory.
        path: PathBuf,
        /// The process that opened the handle.
        opener: u32,
    },
    /// Compaction after this process forked with the store open: a child
    /// may still gather through the inherited handle, whose record table and
    /// memory maps would then name bytes the compaction moved or truncated
    /// (another record's bytes, or a SIGBUS there).
    #[error(
        "store {path}: this process forked since it opened the store, and a forked child may still read through the inherited handle; compacting now would move records from under it. Close the store and open it again to compact (the open succeeds once no child holds the store)"
    )]
    ForkedSinceOpen {
        /// The store directory.
        path: PathBuf,
    },
    /// zstd could not train a dictionary on the samples given: too few of
    /// them, too small in all, or too little shared content for the size
    /// asked.
    #[error(
        "cannot train a {dict_size}-byte zstd dictionary on {samples} samples of {bytes} bytes in all ({reason}); give more or larger samples (zstd needs at least 7 samples, and trains best on about 100 times the dictionary size in all), ask for a smaller dictionary (a smaller tier), or use the plain zstd codec, which needs no dictionary"
    )]
    DictionaryTraining {
        /// Number of samples given.
        samples: usize,
        /// Their total size in bytes.
        bytes: usize,
        /// The largest dictionary asked for, in bytes.
        dict_size: usize,
        /// Why: zstd's own error ("zstd says: ..."), or what was refused
        /// before zstd saw it.
        reason: String,
    },
    /// A buffer could not be allocated: the allocator refused, or the size
    /// is past what one allocation may be (`isize::MAX`, rounded to a page).
    #[error(
        "cannot allocate a buffer of {bytes} bytes: out of memory, or larger than one allocation may be"
    )]
    Alloc {
        /// The size asked for.
        bytes: usize,
    },
    /// A previous write or sync failed; the in-memory state may no longer
    /// match the disk, so the handle refuses further writes. Reopen the store.
    #[error("store {path}: a previous I/O error poisoned this handle; reopen the store")]
    Poisoned {
        /// The store directory.
        path: PathBuf,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn corrupted(file: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        Error::Corrupted {
            file: file.into(),
            record: None,
            detail: detail.into(),
        }
    }

    /// Corruption of one record's entry or stored bytes in `file`.
    pub(crate) fn corrupted_record(
        file: impl Into<PathBuf>,
        record: u64,
        detail: impl Into<String>,
    ) -> Self {
        Error::Corrupted {
            file: file.into(),
            record: Some(record),
            detail: detail.into(),
        }
    }
}

/// `e` and its causes, each message once, joined with ": " (as anyhow's
/// `{:#}` prints them). The errors of this workspace keep their cause in
/// `source()` and out of their message, so this is the way to show one
/// whole where only a string fits (a report line, a log, an exception).
/// Re-exported as `zrecord::error_chain` and `loaderx::error_chain`.
///
/// ```
/// let e = zrecord_engine::Engine::open("/no/such/store", zrecord_engine::OpenMode::ReadOnly)
///     .unwrap_err();
/// let shown = zrecord_engine::error_chain(&e);
/// assert!(shown.starts_with(&e.to_string()));
/// ```
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// `n` and `noun`, plural unless `n` is 1: "1 record", "0 records".
pub(crate) fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `n` records, as [`count`] writes it.
pub(crate) fn records(n: u64) -> String {
    count(n, "record")
}

/// For [`Error::ForeignFiles`]: what a file a killed create leaves is. A
/// creator makes `meta.zr` as `meta.zr.creating.<pid>.<n>` first; killed
/// before it linked it as `meta.zr`, it leaves that empty file in a
/// directory that is otherwise as it found it (a create in progress has
/// one for a moment too). A create clears such files itself when nothing
/// else is in the directory, so it is named only beside other files.
fn leftover_hint(file: &str) -> &'static str {
    if file.starts_with("meta.zr.creating.") {
        " (left by a create that was killed: remove it if no create is running)"
    } else {
        ""
    }
}

/// "record N: " before the detail of a record's corruption.
fn record_prefix(record: Option<u64>) -> String {
    match record {
        Some(r) => format!("record {r}: "),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// Regression: `Io` wrote its OS error into its message and also
    /// returned it from `source()`, so anything that prints the chain
    /// (anyhow's `{:#}`, eyre, the Python binding) printed it twice: "read
    /// /x/0.loc: No such file or directory (os error 2): No such file or
    /// directory (os error 2)".
    #[test]
    fn a_killed_creates_leftover_is_named_as_such() {
        let e = Error::ForeignFiles {
            path: "/d/s".into(),
            file: "meta.zr.creating.4242.0".into(),
        };
        assert_eq!(
            e.to_string(),
            "cannot create a store in /d/s: it already holds meta.zr.creating.4242.0 \
             (left by a create that was killed: remove it if no create is running)"
        );
        let e = Error::ForeignFiles {
            path: "/d/s".into(),
            file: "notes.txt".into(),
        };
        assert_eq!(
            e.to_string(),
            "cannot create a store in /d/s: it already holds notes.txt"
        );
    }

    #[test]
    fn an_io_error_leaves_its_os_error_to_source_and_the_chain_shows_it_once() {
        let os = std::io::Error::from_raw_os_error(2);
        let os_msg = os.to_string();
        let e = Error::io("/x/0.loc", "read", os);
        assert_eq!(e.to_string(), "read /x/0.loc");
        assert!(!e.to_string().contains(&os_msg), "{e}");
        let source = e
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the OS error is the source");
        assert_eq!(source.raw_os_error(), Some(2));
        let c = error_chain(&e);
        assert_eq!(c, format!("read /x/0.loc: {os_msg}"));
        assert_eq!(c.matches(&os_msg).count(), 1, "{c}");
    }

    /// Regression (audit f14): the advice was "open the store in this
    /// process", which fails as busy while the opener holds the lock.
    #[test]
    fn foreign_process_advice_is_to_close_in_the_opener_first() {
        let e = Error::ForeignProcess {
            path: PathBuf::from("/data/s"),
            opener: 4242,
        };
        let m = e.to_string();
        assert!(m.contains("forked"), "{m}");
        assert!(
            m.contains("close the store in process 4242 first, then open it here"),
            "{m}"
        );
        assert!(!m.contains("(open the store in this process)"), "{m}");
    }

    #[test]
    fn a_record_corruption_names_the_record_before_the_detail() {
        let e = Error::corrupted_record("/s/0.chunk", 6, "bad frame");
        assert_eq!(
            e.to_string(),
            "corrupted store file /s/0.chunk: record 6: bad frame"
        );
        let e = Error::corrupted("/s/meta.zr", "bad magic");
        assert_eq!(e.to_string(), "corrupted store file /s/meta.zr: bad magic");
    }
}
