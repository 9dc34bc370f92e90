//! What both store kinds share: open options, probing a directory, the
//! creation and opening sequences, and the equal-length check.
//!
//! Creation writes the engine files first (and the dictionary), makes them
//! durable, and writes the typed header `store.zr` last, so a directory with
//! `meta.zr` but no `store.zr` is recognisably a failed creation. Opening
//! reads `store.zr` before touching the engine, so a bad header is reported
//! against that file.

use std::path::{Path, PathBuf};

use zrecord_engine::typed_header::{self, Kind, TypedHeader};
use zrecord_engine::vfs::{OpenFlags, RealVfs, Vfs};
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, OpenMode};

use crate::dtype::{DType, Identity, decode_identity};
use crate::error::{Error, Result};

const META_FILE: &str = "meta.zr";
const STORE_FILE: &str = "store.zr";

/// How to open an existing store, and what it is expected to hold.
///
/// The default opens read-write with no expectations. Every expectation
/// that is set is checked at open; a mismatch is an error naming what is
/// stored and what was asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Open with a shared lock: many read-only handles (threads or
    /// processes) may hold a store at once; writes are refused, and a
    /// read-write handle is refused while any is open.
    pub read_only: bool,
    /// The dtype the store must hold (one-byte scalars compare whatever
    /// byte order they carry, as create stores them all as `|`).
    pub dtype: Option<DType>,
    /// The item shape a dense store must hold (ignored by ragged stores,
    /// which have none).
    pub item_shape: Option<Vec<u64>>,
    /// The codec the store must use.
    pub codec: Option<Codec>,
    /// The zstd level for appends through this handle (the level is not
    /// stored; without one, appends use the format's: 3, or 19 with a
    /// dictionary). Refused for raw stores and read-only handles.
    pub level: Option<i32>,
    /// When appends through this handle become durable (not stored; no
    /// effect on a read-only handle). See [`Durability`].
    pub durability: Durability,
}

impl OpenOptions {
    /// Read-only, no expectations.
    pub fn read_only() -> Self {
        OpenOptions {
            read_only: true,
            ..Default::default()
        }
    }

    /// Expect `dtype`.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = Some(dtype);
        self
    }

    /// Expect `item_shape` (dense stores).
    pub fn item_shape(mut self, item_shape: &[u64]) -> Self {
        self.item_shape = Some(item_shape.to_vec());
        self
    }

    /// Expect `codec`.
    pub fn codec(mut self, codec: Codec) -> Self {
        self.codec = Some(codec);
        self
    }

    /// Append at zstd `level` through this handle.
    pub fn level(mut self, level: i32) -> Self {
        self.level = Some(level);
        self
    }

    /// Make appends through this handle durable as `durability` says.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }
}

/// What lives at `path`: `None` when there is no store (neither `meta.zr`
/// nor `store.zr`), else its kind, read from `store.zr`.
///
/// A directory with `meta.zr` but no `store.zr` is a failed creation and an
/// error ([`Error::BadStore`]), as is an unreadable or malformed `store.zr`.
pub fn probe(path: impl AsRef<Path>) -> Result<Option<Kind>> {
    Ok(probe_header_with(path.as_ref(), false)?.map(|h| h.kind))
}

/// [`probe`] for a caller about to create a store when there is none (a
/// create-or-open): a directory holding only what a killed create left
/// (`meta.zr` that nobody holds, no `store.zr`; see
/// [`Engine::is_create_leftover`]) is `None` here, not
/// [`Error::BadStore`], since a create there clears it and makes the store.
/// The create checks again under the lock, and refuses anything else.
pub fn probe_to_create(path: impl AsRef<Path>) -> Result<Option<Kind>> {
    Ok(probe_header_with(path.as_ref(), true)?.map(|h| h.kind))
}

fn exists(p: &Path) -> Result<bool> {
    p.try_exists().map_err(|e| Error::io(p, e))
}

/// [`probe`], keeping the whole header.
///
/// A create makes `meta.zr` (locked from the start) before `store.zr`, and
/// holds the lock until its handle is dropped, so the checks run in the
/// other order: a `store.zr` seen first has its `meta.zr` when that is
/// checked, and a `meta.zr` without `store.zr` is looked at again after its
/// lock was tried. Checked naively, a create that finished in between looked
/// like a store without `meta.zr`, or one that did not finish.
pub(crate) fn probe_header(path: &Path) -> Result<Option<TypedHeader>> {
    probe_header_with(path, false)
}

/// [`probe_header`]; `creating`: a killed create's leftovers are `None`.
fn probe_header_with(path: &Path, creating: bool) -> Result<Option<TypedHeader>> {
    let meta = path.join(META_FILE);
    let store = path.join(STORE_FILE);
    let store_here = exists(&store)?;
    match (exists(&meta)?, store_here) {
        (false, false) => Ok(None),
        (true, false) => {
            // Another handle may be creating it right now (it holds the lock
            // until `store.zr` is in place): that is a busy store, not a
            // broken one.
            // Through the engine's open, which refuses a FIFO (a plain
            // open of one would block until a writer came).
            let locked = RealVfs
                .open(&meta, OpenFlags::Read)
                .map(|f| matches!(f.try_lock(false), Ok(false)))
                .unwrap_or(false);
            if locked {
                return Err(Error::Engine(zrecord_engine::Error::StoreBusy {
                    path: path.to_path_buf(),
                }));
            }
            // Or it has finished since (and let go), or failed and removed
            // what it made.
            match (exists(&meta)?, exists(&store)?) {
                (_, true) => Ok(Some(typed_header::read(path)?)),
                (false, false) => Ok(None),
                (true, false) => {
                    let leftover = Engine::is_create_leftover(path)?;
                    if creating && leftover {
                        return Ok(None);
                    }
                    Err(Error::BadStore {
                        file: store,
                        detail: if leftover {
                            "missing, but meta.zr exists: the store's creation did not \
                             finish; create the store again (a create clears what the \
                             interrupted one left)"
                        } else {
                            "missing, but meta.zr exists: the store's creation did not \
                             finish; remove the directory's files and create the store again"
                        }
                        .into(),
                    })
                }
            }
        }
        (false, true) => Err(Error::BadStore {
            file: meta,
            detail: "missing, but store.zr exists".into(),
        }),
        (true, true) => Ok(Some(typed_header::read(path)?)),
    }
}

pub(crate) fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Dense => "dense",
        Kind::Ragged => "ragged",
    }
}

/// Checks the codec / dictionary pairing the way loaderx does, before any
/// file is touched.
pub(crate) fn check_create_options(opts: &CreateOptions) -> Result<()> {
    match (opts.codec, &opts.dictionary) {
        (Codec::ZstdDict, None) => Err(Error::invalid(
            "creating a zstd_dict store requires a dictionary (see train_dict)",
        )),
        (Codec::ZstdDict, Some(d)) if d.is_empty() => Err(Error::invalid(
            "the dictionary for a zstd_dict store is empty",
        )),
        (c, Some(_)) if c != Codec::ZstdDict => Err(Error::invalid(format!(
            "a dictionary requires codec zstd_dict, not {}",
            c.name()
        ))),
        _ => Ok(()),
    }
}

/// Engine files, then durability, then `store.zr`.
pub(crate) fn create_store(
    path: &Path,
    kind: Kind,
    record_bytes: u64,
    identity: Vec<u8>,
    opts: &CreateOptions,
) -> Result<Engine> {
    check_create_options(opts)?;
    let engine = Engine::create(path, opts)?;
    let header = TypedHeader {
        kind,
        record_bytes,
        identity,
    };
    let finished = engine
        .sync()
        .and_then(|()| typed_header::write(path, &header));
    match finished {
        Ok(()) => Ok(engine),
        Err(e) => {
            // Leave the directory as the create found it (as the engine
            // does when its own part fails): a store without `store.zr`
            // would be refused by every later create and reported
            // unfinished by every open. Best effort: the error that stopped
            // the create is the one to report.
            let _ = engine.discard_created();
            Err(e.into())
        }
    }
}

/// An opened store before the kind-specific checks.
pub(crate) struct Opened {
    pub engine: Engine,
    pub header: TypedHeader,
    pub identity: Identity,
}

/// `store.zr`, identity, engine (shared lock when read-only), then the
/// dtype and codec expectations.
pub(crate) fn open_store(path: &Path, kind: Kind, opts: &OpenOptions) -> Result<Opened> {
    let header = probe_header(path)?.ok_or_else(|| Error::NotAStore {
        path: path.to_path_buf(),
    })?;
    if header.kind != kind {
        return Err(Error::KindMismatch {
            path: path.to_path_buf(),
            stored: kind_name(header.kind),
            asked: kind_name(kind),
        });
    }
    let store_file = path.join(STORE_FILE);
    let identity = decode_identity(&header.identity).map_err(|e| Error::BadStore {
        file: store_file.clone(),
        detail: e.to_string(),
    })?;
    match (kind, &identity.item_shape) {
        (Kind::Dense, None) => {
            return Err(Error::BadStore {
                file: store_file,
                detail: "dense identity has no item_shape".into(),
            });
        }
        (Kind::Ragged, Some(_)) => {
            return Err(Error::BadStore {
                file: store_file,
                detail: "ragged identity has an item_shape".into(),
            });
        }
        _ => {}
    }
    let mode = if opts.read_only {
        OpenMode::ReadOnly
    } else {
        OpenMode::ReadWrite
    };
    if let (true, Some(level)) = (opts.read_only, opts.level) {
        return Err(Error::InvalidArgument {
            detail: format!(
                "level {level} for {}: the level is that of later appends, and a \
                 read-only handle makes none",
                path.display()
            ),
        });
    }
    // A ragged store's engine numbers payloads and shape records apart;
    // its open errors name the caller's record.
    let mut engine = Engine::open(path, mode).map_err(|e| match kind {
        Kind::Ragged => crate::ragged::logical_record_error(e.into()),
        _ => e.into(),
    })?;
    // Normalised as create stores it: an expected `<i1` means the `|i1` a
    // create with `<i1` wrote.
    if let Some(want) = &opts.dtype
        && want.normalized() != identity.dtype
    {
        return Err(Error::DTypeMismatch {
            context: path.display().to_string(),
            expected: want.to_string(),
            found: identity.dtype.to_string(),
        });
    }
    if let Some(want) = opts.codec
        && want != engine.codec()
    {
        return Err(Error::CodecMismatch {
            path: path.to_path_buf(),
            stored: engine.codec().name(),
            asked: want.name(),
        });
    }
    if let Some(level) = opts.level {
        engine.set_level(level)?;
    }
    engine.set_durability(opts.durability)?;
    Ok(Opened {
        engine,
        header,
        identity,
    })
}

pub(crate) fn store_file(path: &Path) -> PathBuf {
    path.join(STORE_FILE)
}

/// Checks that named streams (stores) have one common length and returns
/// it. When they differ the error lists every stream's length, in the order
/// given; an empty set of streams is an error.
///
/// ```
/// use zrecord::{Error, check_equal_lengths};
/// assert_eq!(check_equal_lengths([("x", 4), ("y", 4)])?, 4);
/// let err = check_equal_lengths([("x", 4), ("y", 3), ("z", 4)]).unwrap_err();
/// assert_eq!(err.to_string(), "streams differ in length: x=4, y=3, z=4");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_equal_lengths<'a>(streams: impl IntoIterator<Item = (&'a str, u64)>) -> Result<u64> {
    let lengths: Vec<(String, u64)> = streams
        .into_iter()
        .map(|(n, l)| (n.to_string(), l))
        .collect();
    let Some(&(_, first)) = lengths.first() else {
        return Err(Error::invalid("no streams to compare"));
    };
    if lengths.iter().all(|(_, l)| *l == first) {
        Ok(first)
    } else {
        Err(Error::LengthMismatch { lengths })
    }
}

pub(crate) fn context(path: &Path) -> String {
    path.display().to_string()
}

/// `product(dims) * itemsize`, or `None` on overflow.
pub(crate) fn nbytes(dims: &[u64], itemsize: usize) -> Option<u64> {
    dims.iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))?
        .checked_mul(itemsize as u64)
}

/// A byte count from [`nbytes`] as a message says it: "16 bytes", or that
/// it overflows (never Rust's `Some(16)` / `None`).
pub(crate) fn show_nbytes(n: Option<u64>) -> String {
    match n {
        Some(n) => format!("{n} bytes"),
        None => "a byte count that overflows 64 bits".into(),
    }
}
