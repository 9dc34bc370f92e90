//! `loaderx._native`: the Rust core of the `loaderx` Python package, a
//! drop-in for loaderx 1.7.2.
//!
//! The Python modules (`loaderx.zrecord`, `loaderx.dataloader`,
//! `loaderx.zsampler`, `loaderx.utils`, `loaderx.io`) keep the reference's
//! signatures and validation; this module does the work, always with the GIL
//! released:
//!
//! - [`PyDenseCore`] / [`PyRaggedCore`]: the untyped stores of `zrecord`.
//!   A dense gather fills a pooled region NumPy then views, or a small array
//!   the caller allocated (no extra copy either way);
//!   a ragged gather returns one packed buffer with offsets and shapes.
//! - [`PySampler`]: `zsampler::Sampler` (subclassed in Python as
//!   `loaderx.zsampler.Sampler`).
//! - `train_dict`, `loadtxt`, `npy_header`, `npy_read`: dictionary training,
//!   the parallel text parser and the `.npy` reader.
//!
//! - `pool`: the recycled, page-aligned regions dense gathers of 256 KiB
//!   and more fill; the NumPy array's base object returns its region to the
//!   pool when the array dies.
//!
//! Errors become the `loaderx._errors` hierarchy (`ZrecordError` subclasses,
//! some also `IndexError` / `FileNotFoundError` / `PermissionError`) or plain
//! `ValueError` for argument mistakes. An exception's message is the Rust
//! error's whole chain (its message, then each `source()`'s, joined with
//! ": "), since the Rust errors do not repeat their cause in their message.
//!
//! The module is only usable from Python; its Rust items are not a public
//! Rust API.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod pool;

use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::{Mutex, RwLock};

use numpy::ndarray::ArrayView1;
use numpy::{
    PyArray1, PyArray2, PyArrayDescr, PyArrayDescrMethods, PyArrayMethods, PyReadonlyArray1,
    PyReadwriteArray1, PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use zrecord::{
    Codec, CreateOptions, DType, DenseCore, Durability, Field, Kind, OpenOptions, RaggedBatch,
    RaggedCore,
};

/// The largest record the format holds (2^31 bytes), as loaderx 1.7.2's
/// `MAX_RECORD_LEN`.
const MAX_RECORD_LEN: u64 = 1 << 31;

// ---------------------------------------------------------------------------
// errors

/// Exception messages are the Rust error's whole chain: the errors keep
/// their cause in `source()`, not in their message.
use zrecord_engine::error_chain as chain;

/// Builds `loaderx._errors.<kind>(None, message)`.
fn zerr(py: Python<'_>, kind: &str, message: String) -> PyErr {
    let made = py
        .import("loaderx._errors")
        .and_then(|m| m.getattr("_raise"))
        .and_then(|f| f.call1((kind, message.clone())));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        // The package is broken (a partial install, a shadowing module):
        // the store's error still reaches the user, as a RuntimeError (the
        // base of every ZrecordError), with why its class could not be made.
        Err(e) => {
            let err = pyo3::exceptions::PyRuntimeError::new_err(message);
            err.set_cause(py, Some(e));
            err
        }
    }
}

/// An I/O failure on `path` as Python's own OSErrors carry it: `errno`,
/// `strerror` and `filename` set, and a missing file a `StoreNotFound`
/// (a `FileNotFoundError`, as `open` or `np.load` raise), else a
/// `StoreIOError`.
fn io_err(py: Python<'_>, message: String, path: &std::path::Path, e: &std::io::Error) -> PyErr {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => "StoreNotFound",
        _ => "StoreIOError",
    };
    let err = zerr(py, kind, message);
    let exc = err.value(py);
    // The file, also for an error the OS did not number (a store file that
    // is a FIFO, say).
    let _ = exc.setattr("filename", path.as_os_str());
    if let Some(code) = e.raw_os_error() {
        let strerror = py
            .import("os")
            .and_then(|os| os.getattr("strerror"))
            .and_then(|f| f.call1((code,)));
        // OSError's own attributes: setting them cannot fail on an OSError
        // subclass, and a failure would only leave them None.
        let _ = exc.setattr("errno", code);
        if let Ok(s) = strerror {
            let _ = exc.setattr("strerror", s);
        }
    }
    err
}

fn engine_err(py: Python<'_>, e: &zrecord_engine::Error) -> PyErr {
    use zrecord_engine::Error as E;
    let msg = chain(e);
    match e {
        // A file of the store that the OS cannot find (listed, but a
        // dangling symlink, or gone since): the store is damaged, -8 as
        // loaderx 1.7.2 says and as a name missing from the listing is;
        // not "store not found" (-11) for a store that is there. The
        // message names the file and the OS reason.
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            zerr(py, "InvalidStore", msg)
        }
        // As the typed layer's: errno, strerror and filename set.
        E::Io { path, source, .. } => io_err(py, msg, path, source),
        // No OS error to carry: the write or sync that poisoned the handle
        // raised its own, with errno; this refuses the writes after it.
        E::Poisoned { .. } => zerr(py, "StoreIOError", msg),
        // One record's entry or frame (a frame that fails to decode is
        // loaderx 1.7.2's -7 too); anything else is the store's structure.
        E::Corrupted {
            record: Some(_), ..
        } => zerr(py, "CorruptRecord", msg),
        E::Corrupted { .. } => zerr(py, "InvalidStore", msg),
        // The binding always gathers with the lengths the store holds, so a
        // disagreement is a damaged entry.
        E::RecordLength { .. } => zerr(py, "CorruptRecord", msg),
        E::Alloc { .. } => zerr(py, "OutOfMemory", msg),
        E::NotAStore { .. } => zerr(py, "StoreNotFound", msg),
        // An empty meta.zr: loaderx 1.7.2 reports it as -8, as any
        // directory whose files do not make a store. (The typed layer finds
        // such a directory first, lacking store.zr: InvalidStore too.)
        E::CreateInterrupted { .. } => zerr(py, "InvalidStore", msg),
        // Forked children may hold the store: busy until they let go. A
        // forked child writing through its parent's handle: the handle is
        // another process's.
        E::StoreBusy { .. } | E::ForkedSinceOpen { .. } | E::ForeignProcess { .. } => {
            zerr(py, "StoreBusy", msg)
        }
        // A read-only open that would have to write (finish a compaction
        // move) to serve the store: the way out is a read-write open.
        E::RecoveryNeeded { .. } => zerr(py, "ReadOnlyStore", msg),
        E::ForeignFiles { .. } => zerr(py, "StoreExists", msg),
        E::IndexOutOfRange { .. } => zerr(py, "IndexOutOfRange", msg),
        E::ReadOnly { .. } => zerr(py, "ReadOnlyStore", msg),
        E::InvalidArgument(_) => PyValueError::new_err(msg),
        E::DictionaryTraining { .. } => zerr(py, "DictTrainingError", msg),
        // Variants added to the engine later (the enum is non_exhaustive).
        _ => zerr(py, "ZrecordError", msg),
    }
}

/// [`to_py`] for a failed open: damage found while opening, even in one
/// record's entry, is the store's (`InvalidStore`, code -8, as loaderx 1.7.2
/// reports it); `CorruptRecord` (-7) is for a record that fails on read.
fn open_err(py: Python<'_>, e: zrecord::Error) -> PyErr {
    match &e {
        zrecord::Error::Engine(zrecord_engine::Error::Corrupted { .. })
        | zrecord::Error::Corrupted { .. } => zerr(py, "InvalidStore", chain(&e)),
        _ => to_py(py, e),
    }
}

fn to_py(py: Python<'_>, e: zrecord::Error) -> PyErr {
    use zrecord::Error as E;
    let msg = chain(&e);
    match &e {
        E::Engine(inner) => engine_err(py, inner),
        E::Io { path, source } => io_err(py, msg, path, source),
        E::UnsupportedDType { .. } => zerr(py, "UnsupportedDType", msg),
        E::BadIdentity { .. } | E::BadStore { .. } => zerr(py, "InvalidStore", msg),
        E::IndexOutOfRange { .. } => zerr(py, "IndexOutOfRange", msg),
        E::NotAStore { .. } => zerr(py, "StoreNotFound", msg),
        E::KindMismatch { .. } => zerr(py, "KindMismatch", msg),
        E::Corrupted { .. } => zerr(py, "CorruptRecord", msg),
        E::DTypeMismatch { .. }
        | E::ShapeMismatch { .. }
        | E::CodecMismatch { .. }
        | E::EmptyRecord { .. }
        | E::RankTooHigh { .. }
        | E::RecordSize { .. }
        | E::InvalidArgument { .. }
        | E::Overflow { .. }
        | E::LengthMismatch { .. }
        | E::NpyHeader { .. }
        | E::NpyTruncated { .. }
        | E::FortranOrder { .. }
        | E::TextParse { .. }
        | E::TextLineEnding { .. }
        | E::TextColumns { .. } => PyValueError::new_err(msg),
        // Variants added to zrecord later (the enum is non_exhaustive).
        _ => zerr(py, "ZrecordError", msg),
    }
}

trait OrPy<T> {
    fn or_py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrPy<T> for zrecord::Result<T> {
    fn or_py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

fn closed(py: Python<'_>) -> PyErr {
    zerr(py, "StoreClosed", "store is closed".into())
}

// ---------------------------------------------------------------------------
// dtypes across the boundary

/// A dtype from what Python's `_dtype_identity` gives: `dtype.str` or
/// `dtype.descr` (a list of `(name, type, [shape])` tuples, nested for
/// structured fields, `('', '|V<n>')` for padding).
fn dtype_from_py(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    let py = obj.py();
    descr_from_py(obj).map_err(|e| match e {
        DescrError::Store(e) => to_py(py, e),
        DescrError::Py(e) => e,
    })
}

/// Why a descr was refused: the store layer's refusal keeps its type until
/// every enclosing field has put its name on it (`field "outer.inner"`).
enum DescrError {
    Store(zrecord::Error),
    Py(PyErr),
}

impl From<PyErr> for DescrError {
    fn from(e: PyErr) -> Self {
        DescrError::Py(e)
    }
}

fn descr_from_py(obj: &Bound<'_, PyAny>) -> Result<DType, DescrError> {
    if let Ok(s) = obj.cast::<PyString>() {
        return DType::parse(s.to_str()?).map_err(DescrError::Store);
    }
    let list = obj
        .cast::<PyList>()
        .map_err(|_| PyValueError::new_err("a dtype is a type string or a descr list"))?;
    let mut fields = Vec::with_capacity(list.len());
    for item in list.iter() {
        let t = item
            .cast::<PyTuple>()
            .map_err(|_| PyValueError::new_err("a descr entry is a tuple"))?;
        if !(2..=3).contains(&t.len()) {
            return Err(PyValueError::new_err(
                "a descr entry is (name, type) or (name, type, shape)",
            )
            .into());
        }
        let (title, name) = field_key(&t.get_item(0)?)?;
        let ty = t.get_item(1)?;
        let shape: Vec<usize> = if t.len() == 3 {
            t.get_item(2)?.extract()?
        } else {
            Vec::new()
        };
        let dtype =
            match ty.cast::<PyString>() {
                Ok(s) if name.is_empty() => {
                    let s = s.to_str()?;
                    match s.trim_start_matches(['|', '<', '>', '=']).strip_prefix('V') {
                        Some(n) => DType::Padding(n.parse().map_err(|_| {
                            PyValueError::new_err(format!("bad padding type {s:?}"))
                        })?),
                        None => DType::parse(s).map_err(DescrError::Store)?,
                    }
                }
                // A named field's type, or a nested structure: a refusal names
                // the field (and, from a nested one, the path to it).
                _ => descr_from_py(&ty).map_err(|e| match e {
                    DescrError::Store(e) => DescrError::Store(e.in_field(&name)),
                    py_err => py_err,
                })?,
            };
        fields.push(Field {
            name,
            title,
            dtype,
            shape,
        });
    }
    Ok(DType::Structured(fields))
}

/// A descr entry's key: `name`, or `(title, name)` for a titled field
/// (NumPy's `descr` form). Only string titles can be stored; the structural
/// rules (a title that repeats a name) are the store layer's, checked when
/// the dtype is stored.
fn field_key(key: &Bound<'_, PyAny>) -> PyResult<(Option<String>, String)> {
    let py = key.py();
    let unsupported = |what: String| zerr(py, "UnsupportedDType", what);
    if let Ok(name) = key.extract::<String>() {
        return Ok((None, name));
    }
    let pair = key
        .cast::<PyTuple>()
        .ok()
        .filter(|t| t.len() == 2)
        .ok_or_else(|| {
            unsupported(format!(
                "field key {} is neither a name nor a (title, name) pair",
                key.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
    let (title, name) = (pair.get_item(0)?, pair.get_item(1)?);
    let name: String = name.extract().map_err(|_| {
        unsupported(format!(
            "field name {} is not a string",
            name.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    let title: String = title.extract().map_err(|_| {
        unsupported(format!(
            "field {name:?}: title {} is not a string; only string titles are supported",
            title.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    Ok((Some(title), name))
}

/// The string Python turns back into a `np.dtype`: the type string, or the
/// descr literal of a structured dtype.
fn dtype_to_py(dtype: &DType) -> String {
    match dtype {
        DType::Structured(_) => dtype.to_string(),
        other => other.to_numpy_str(),
    }
}

fn codec_from(py: Python<'_>, name: &str) -> PyResult<Codec> {
    Codec::from_name(name).ok_or_else(|| {
        zerr(
            py,
            "ZrecordError",
            format!("unknown codec {name:?}, expected raw, zstd or zstd_dict"),
        )
    })
}

fn durability_from(name: &str) -> PyResult<Durability> {
    Durability::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown durability {name:?}, expected 'at_sync' or 'each_append'"
        ))
    })
}

fn create_options(
    py: Python<'_>,
    codec: &str,
    dict_bytes: Option<Vec<u8>>,
    level: Option<i32>,
    durability: &str,
) -> PyResult<CreateOptions> {
    let mut opts = CreateOptions::new(codec_from(py, codec)?);
    opts.dictionary = dict_bytes;
    opts.level = level;
    opts.durability = durability_from(durability)?;
    Ok(opts)
}

fn open_options(read_only: bool, level: Option<i32>, durability: &str) -> PyResult<OpenOptions> {
    Ok(OpenOptions {
        read_only,
        level,
        durability: durability_from(durability)?,
        ..Default::default()
    })
}

/// A `verify` report as a dict: `ok`, `records` (the store's length),
/// `decoded_bytes`, `bad` (a list of `(index, what)`), `problems`.
fn verify_dict<'py>(
    py: Python<'py>,
    r: zrecord::VerifyReport,
    records: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("ok", r.is_ok())?;
    d.set_item("records", records)?;
    d.set_item("decoded_bytes", r.decoded_bytes)?;
    d.set_item("bad", r.bad)?;
    d.set_item("problems", r.problems)?;
    Ok(d)
}

fn stats_dict<'py>(py: Python<'py>, s: zrecord::Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("records", s.records)?;
    d.set_item("live_bytes", s.live_bytes)?;
    d.set_item("chunk_bytes", s.chunk_bytes)?;
    d.set_item("reclaimable", s.chunk_bytes.saturating_sub(s.live_bytes))?;
    Ok(d)
}

/// Runs `f` on the open handle under a read lock. The uncontended path keeps
/// the GIL; a contended lock is waited for with the GIL released, so a holder
/// that runs without the GIL can always finish.
fn with_read<T: Send + Sync, R: Send>(
    py: Python<'_>,
    lock: &RwLock<Option<T>>,
    f: impl FnOnce(&T) -> R + Send,
) -> PyResult<R> {
    let out = match lock.try_read() {
        Ok(g) => g.as_ref().map(f),
        Err(_) => py.detach(|| {
            let g = lock.read().unwrap_or_else(|p| p.into_inner());
            g.as_ref().map(f)
        }),
    };
    out.ok_or_else(|| closed(py))
}

/// Runs a store operation that does I/O on the handle in `lock`, shared,
/// with the GIL released for the wait and the work.
fn read_detached<T: Send + Sync, R: Send>(
    py: Python<'_>,
    lock: &RwLock<Option<T>>,
    f: impl FnOnce(&T) -> zrecord::Result<R> + Send,
) -> PyResult<R> {
    py.detach(|| {
        let g = lock.read().unwrap_or_else(|p| p.into_inner());
        g.as_ref().map(f)
    })
    .ok_or_else(|| closed(py))?
    .or_py(py)
}

/// [`read_detached`] for an operation that changes the store (it waits for
/// every gather on this handle to finish).
fn write_detached<T: Send + Sync, R: Send>(
    py: Python<'_>,
    lock: &RwLock<Option<T>>,
    f: impl FnOnce(&mut T) -> zrecord::Result<R> + Send,
) -> PyResult<R> {
    py.detach(|| {
        let mut g = lock.write().unwrap_or_else(|p| p.into_inner());
        g.as_mut().map(f)
    })
    .ok_or_else(|| closed(py))?
    .or_py(py)
}

/// Closes the handle in `lock` with `close` (GIL released: it syncs
/// deferred appends, closes files and releases the store lock). A closed
/// handle closes again as a no-op.
fn close_handle<T: Send + Sync>(
    py: Python<'_>,
    lock: &RwLock<Option<T>>,
    close: impl FnOnce(T) -> zrecord::Result<()> + Send,
) -> PyResult<()> {
    py.detach(|| {
        let taken = lock.write().unwrap_or_else(|p| p.into_inner()).take();
        taken.map_or(Ok(()), close)
    })
    .or_py(py)
}

/// The indices in `idxs`, copied out of the array before the GIL is
/// released: another Python thread may rewrite an array in place while a
/// detached call works (and, on a free-threaded build, even while it is
/// attached), so the store's range check and its reads must see one copy,
/// not two reads of memory that may change in between. (A ragged gather
/// checked an index, then doubled a rewritten `2**63 + j`: an overflow
/// panic in debug builds, record `j` in release ones.) 8 bytes per index,
/// nothing next to the records they fetch.
fn owned_indices(idxs: &PyReadonlyArray1<'_, u64>) -> PyResult<Vec<u64>> {
    Ok(idxs.as_slice()?.to_vec())
}

// ---------------------------------------------------------------------------
// dense

/// Why a pooled gather did not fill its region.
enum PooledFail {
    Closed,
    TooLarge,
    Alloc(std::io::Error),
    Store(zrecord::Error),
}

/// A dense store handle (`zrecord::DenseCore`); `close` drops it.
#[pyclass(frozen, name = "DenseCore", module = "loaderx._native")]
pub struct PyDenseCore {
    core: RwLock<Option<DenseCore>>,
}

impl PyDenseCore {
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&DenseCore) -> R + Send) -> PyResult<R> {
        with_read(py, &self.core, f)
    }

    /// The records at `idxs` as a new C-order array of `dtype`, shaped
    /// `(len, *item_shape)` when `batched`, else `item_shape` (one record),
    /// filled with the GIL released.
    fn read_new<'py>(
        &self,
        py: Python<'py>,
        idxs: &[u64],
        batched: bool,
        dtype: Bound<'py, PyArrayDescr>,
    ) -> PyResult<Bound<'py, numpy::PyUntypedArray>> {
        plain_bytes_dtype(&dtype)?;
        let (item, record) = self.with(py, |c| {
            let item: Vec<usize> = c.item_shape().iter().map(|&d| d as usize).collect();
            (item, c.record_bytes())
        })?;
        let itemsize = dtype.itemsize();
        let per_item = item.iter().try_fold(itemsize, |acc, &d| acc.checked_mul(d));
        if per_item != Some(record) {
            return Err(PyValueError::new_err(format!(
                "a record of {record} bytes is not {item:?} items of {itemsize} bytes"
            )));
        }
        let bytes = record.checked_mul(idxs.len()).ok_or_else(|| {
            pyo3::exceptions::PyMemoryError::new_err(format!(
                "{} records of {record} bytes",
                idxs.len()
            ))
        })?;
        let shape: Vec<usize> = if batched {
            std::iter::once(idxs.len()).chain(item).collect()
        } else {
            item
        };
        // SAFETY: its bytes are zeroed below, before any reference to them
        // is made; on error it is dropped unseen.
        let out = unsafe { new_array(py, dtype, &shape) }?;
        if bytes == 0 {
            return Ok(out);
        }
        // SAFETY: `out` was just made here, C-contiguous, holding exactly
        // `bytes` bytes (its dtype's itemsize times its dims, checked
        // against the record size above) at its data pointer, and no other
        // reference to it exists yet, so this is the only view of them.
        // They are uninitialised (`new_array`), and a slice must cover
        // initialised bytes, so they are zeroed through the raw pointer
        // first (cheap: `zrecord.py` sends only outputs below
        // `POOL_MIN_BYTES` here; larger ones fill pooled regions).
        let dst = unsafe {
            let data = (*numpy::npyffi::_PyArray_GET_ITEM_DATA(out.as_array_ptr()))
                .data
                .cast::<u8>();
            std::ptr::write_bytes(data, 0, bytes);
            std::slice::from_raw_parts_mut(data, bytes)
        };
        read_detached(py, &self.core, |c| c.gather_bytes_into(idxs, dst))?;
        Ok(out)
    }
}

#[pymethods]
impl PyDenseCore {
    /// Creates a store: `create(path, dtype, item_shape, codec, dict_bytes, level)`.
    #[staticmethod]
    #[pyo3(signature = (path, dtype, item_shape, codec, dict_bytes=None, level=None, durability="at_sync"))]
    #[allow(clippy::too_many_arguments)]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        dtype: &Bound<'_, PyAny>,
        item_shape: Vec<u64>,
        codec: &str,
        dict_bytes: Option<Vec<u8>>,
        level: Option<i32>,
        durability: &str,
    ) -> PyResult<Self> {
        let dtype = dtype_from_py(dtype)?;
        let opts = create_options(py, codec, dict_bytes, level, durability)?;
        let core = py
            .detach(|| DenseCore::create(&path, &dtype, &item_shape, &opts))
            .or_py(py)?;
        Ok(PyDenseCore {
            core: RwLock::new(Some(core)),
        })
    }

    /// Opens an existing store.
    #[staticmethod]
    #[pyo3(signature = (path, read_only=false, level=None, durability="at_sync"))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        read_only: bool,
        level: Option<i32>,
        durability: &str,
    ) -> PyResult<Self> {
        let opts = open_options(read_only, level, durability)?;
        let core = py
            .detach(|| DenseCore::open(&path, &opts))
            .map_err(|e| open_err(py, e))?;
        Ok(PyDenseCore {
            core: RwLock::new(Some(core)),
        })
    }

    fn len(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |c| c.len())
    }

    #[getter]
    fn dtype(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |c| dtype_to_py(c.dtype()))
    }

    #[getter]
    fn item_shape(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        self.with(py, |c| c.item_shape().to_vec())
    }

    #[getter]
    fn record_bytes(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |c| c.record_bytes())
    }

    #[getter]
    fn codec(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with(py, |c| c.codec().name())
    }

    #[getter]
    fn read_only(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |c| c.is_read_only())
    }

    fn has_dict(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |c| c.has_dict())
    }

    /// Appends whole records given as C-order bytes; returns the first index.
    fn append(&self, py: Python<'_>, src: PyReadonlyArray1<'_, u8>) -> PyResult<u64> {
        let data = src.as_slice()?;
        read_detached(py, &self.core, |c| c.append_bytes(data))
    }

    /// Record `i` as a new array of `dtype` shaped `item_shape` (GIL
    /// released for the read): the one-record read behind `ds[i]`, with no
    /// index array to build or check and no reshape.
    fn get<'py>(
        &self,
        py: Python<'py>,
        i: u64,
        dtype: Bound<'py, PyArrayDescr>,
    ) -> PyResult<Bound<'py, numpy::PyUntypedArray>> {
        self.read_new(py, &[i], false, dtype)
    }

    /// The records at `idxs` as a new `(B, *item_shape)` array of `dtype`
    /// (GIL released for the read): a small batch with no `empty`, reshape
    /// or view made in Python.
    fn gather_new<'py>(
        &self,
        py: Python<'py>,
        idxs: PyReadonlyArray1<'py, u64>,
        dtype: Bound<'py, PyArrayDescr>,
    ) -> PyResult<Bound<'py, numpy::PyUntypedArray>> {
        self.read_new(py, &owned_indices(&idxs)?, true, dtype)
    }

    /// Gathers the records at `idxs` into `out`, a caller's flat `uint8`
    /// view of exactly `len(idxs) * record_bytes` bytes (GIL released):
    /// `DenseStore.gather_into`, for outputs the caller owns (pinned
    /// memory, a preallocated batch).
    fn gather_into(
        &self,
        py: Python<'_>,
        idxs: PyReadonlyArray1<'_, u64>,
        mut out: PyReadwriteArray1<'_, u8>,
    ) -> PyResult<()> {
        let idxs = owned_indices(&idxs)?;
        let dst = out.as_slice_mut()?;
        read_detached(py, &self.core, |c| c.gather_bytes_into(&idxs, dst))
    }

    /// Gathers the records at `idxs` into a pooled region (GIL released)
    /// and returns it as a flat `uint8` array whose base object returns the
    /// region to the pool when the array dies.
    fn gather<'py>(
        &self,
        py: Python<'py>,
        idxs: PyReadonlyArray1<'py, u64>,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let idxs = &owned_indices(&idxs)?[..];
        let lock = &self.core;
        let filled = py.detach(|| {
            let g = lock.read().unwrap_or_else(|p| p.into_inner());
            let c = g.as_ref().ok_or(PooledFail::Closed)?;
            let len = idxs
                .len()
                .checked_mul(c.record_bytes())
                .ok_or(PooledFail::TooLarge)?;
            let mut region = pool::take(len).map_err(PooledFail::Alloc)?;
            match c.gather_bytes_into(idxs, region.as_mut_slice()) {
                Ok(()) => Ok(region),
                Err(e) => {
                    pool::give(region);
                    Err(PooledFail::Store(e))
                }
            }
        });
        let region = match filled {
            Ok(r) => r,
            Err(PooledFail::Closed) => return Err(closed(py)),
            Err(PooledFail::TooLarge) => {
                return Err(PyValueError::new_err("gather output size overflows"));
            }
            Err(PooledFail::Alloc(e)) => {
                return Err(pyo3::exceptions::PyMemoryError::new_err(e.to_string()));
            }
            Err(PooledFail::Store(e)) => return Err(to_py(py, e)),
        };
        let (ptr, len) = (region.as_ptr(), region.len());
        let owner = Bound::new(py, pool::GatherBuffer::new(region))?;
        // SAFETY: `ptr` is valid for `len` bytes, all written by the gather
        // above (or zero-filled); the region lives inside `owner`, is never
        // reallocated, and is only handed out again after `owner` drops.
        let view = unsafe { ArrayView1::from_shape_ptr(len, ptr) };
        // SAFETY: `owner` becomes the array's base object, so the memory
        // `view` covers outlives the array (see above).
        Ok(unsafe { PyArray1::borrow_from_array(&view, owner.into_any()) })
    }

    fn delete(&self, py: Python<'_>, idxs: PyReadonlyArray1<'_, u64>) -> PyResult<()> {
        let idxs = owned_indices(&idxs)?;
        write_detached(py, &self.core, |c| c.delete(&idxs))
    }

    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        write_detached(py, &self.core, |c| c.compact())
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        read_detached(py, &self.core, |c| c.sync())
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(py, |c| c.stats())?;
        stats_dict(py, s)
    }

    /// Checks the whole store with the GIL released (`verify_dict`).
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (r, n) = read_detached(py, &self.core, |c| c.verify().map(|r| (r, c.len())))?;
        verify_dict(py, r, n)
    }

    /// Syncs deferred appends and drops the handle (releasing the store's
    /// lock), raising if the sync failed. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        close_handle(py, &self.core, |c| c.close())
    }

    /// `"at_sync"` or `"each_append"`.
    #[getter]
    fn durability(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with(py, |c| c.durability().name())
    }
}

// ---------------------------------------------------------------------------
// ragged

/// NumPy's limit on dimensions (`NPY_MAXDIMS` in NumPy 2).
const MAX_DIMS: usize = 64;

/// Checks record `k` of `batch` (store index `index` of the store at
/// `path`) against `itemsize`: its shape must fit NumPy and cover exactly
/// its payload bytes. The error is the store's `CorruptRecord`, naming the
/// store, the index and what disagrees.
fn check_ragged_record(
    py: Python<'_>,
    batch: &RaggedBatch,
    k: usize,
    itemsize: usize,
    index: u64,
    path: &std::path::Path,
) -> PyResult<(usize, usize)> {
    let shape = batch.shape(k);
    let (a, b) = (batch.offsets()[k], batch.offsets()[k + 1]);
    let problem = if a > b || b > batch.data().len() {
        Some(format!("its payload range {a}..{b} lies outside the batch"))
    } else if shape.len() > MAX_DIMS {
        Some(format!(
            "stored rank {} exceeds NumPy's {MAX_DIMS} dimensions",
            shape.len()
        ))
    } else if let Some(d) = shape.iter().find(|&&d| d > isize::MAX as u64) {
        Some(format!("stored dimension {d} exceeds what NumPy can index"))
    } else if itemsize == 0 {
        Some("the dtype has zero-byte items".to_string())
    } else {
        let need = shape
            .iter()
            .try_fold(itemsize as u64, |acc, &d| acc.checked_mul(d));
        match need {
            Some(need) if need == (b - a) as u64 && isize::try_from(need).is_ok() => None,
            Some(need) => Some(format!(
                "shape {shape:?} of {itemsize}-byte items needs {need} bytes, the payload has {}",
                b - a
            )),
            None => Some(format!(
                "shape {shape:?} of {itemsize}-byte items overflows 64 bits (the payload has {} bytes)",
                b - a
            )),
        }
    };
    match problem {
        None => Ok((a, b)),
        Some(p) => Err(zerr(
            py,
            "CorruptRecord",
            format!("{}: record {index} is corrupted: {p}", path.display()),
        )),
    }
}

/// Hands `batch`'s buffer to NumPy without copying it: a
/// [`pool::RaggedBuffer`] that owns the words (and returns them to the
/// pool once no array views them), and a pointer to the batch's first
/// payload byte inside them.
fn payload_owner(
    py: Python<'_>,
    batch: RaggedBatch,
) -> PyResult<(Bound<'_, pool::RaggedBuffer>, *mut u8)> {
    let (words, range) = batch.into_data();
    // A small batch in a big recycled buffer moves to a buffer of its size.
    let (words, range) = pool::fit_words(words, range);
    let nbytes = std::mem::size_of_val(&words[..]);
    if range.start > range.end || range.end > nbytes {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
            "ragged batch payloads {range:?} lie outside its {nbytes}-byte buffer"
        )));
    }
    let (owner, words) = pool::RaggedBuffer::new(words);
    let owner = Bound::new(py, owner)?;
    // SAFETY: `range.start <= nbytes` (checked above), so the offset stays
    // within (or one past the end of) the owner's buffer of `nbytes` bytes.
    let base = unsafe { words.cast::<u8>().add(range.start) };
    Ok((owner, base))
}

/// A writeable C-order `dtype` array of shape `dims` over the bytes at
/// `data`, with `owner` as its base object (which keeps them alive).
///
/// # Safety
///
/// `data` must point into `owner`'s buffer with at least product(`dims`) *
/// `dtype.itemsize()` bytes of it from there on.
unsafe fn owned_view<'py>(
    py: Python<'py>,
    dtype: &Bound<'py, PyArrayDescr>,
    dims: &mut [numpy::npyffi::npy_intp],
    data: *mut u8,
    owner: &Bound<'py, pool::RaggedBuffer>,
) -> PyResult<Bound<'py, PyAny>> {
    use numpy::npyffi::{self, PY_ARRAY_API};
    // SAFETY: `get_type_object` and the calls below go through
    // `PY_ARRAY_API`, which imports NumPy's C API on first use (the GIL is
    // held: `py`); the first reads its ndarray type object. NewFromDescr steals the descr
    // reference we hand it (`into_dtype_ptr` of a clone) and returns NULL
    // with an error set on failure; the bytes it views are the caller's
    // promise.
    let arr = unsafe {
        let subtype = npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type);
        let p = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            subtype,
            dtype.clone().into_dtype_ptr(),
            dims.len() as std::os::raw::c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data.cast(),
            npyffi::NPY_ARRAY_WRITEABLE,
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, p)?
    };
    // SAFETY: `arr` is a fresh ndarray without a base; SetBaseObject steals
    // the reference made by `clone().into_ptr()` (also on failure), which
    // keeps `owner`, and so the viewed bytes, alive as long as the view.
    let rc = unsafe {
        PY_ARRAY_API.PyArray_SetBaseObject(
            py,
            arr.as_ptr().cast(),
            owner.clone().into_any().into_ptr(),
        )
    };
    if rc != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(arr)
}

/// The records of `batch` as a list of `dtype` arrays, each a view (with
/// its stored shape, C order, writeable) into the batch's own buffer,
/// handed to NumPy without a copy ([`payload_owner`]: every view's base).
fn ragged_views<'py>(
    py: Python<'py>,
    batch: RaggedBatch,
    dtype: &Bound<'py, PyArrayDescr>,
    idxs: &[u64],
    path: &std::path::Path,
) -> PyResult<Bound<'py, PyList>> {
    plain_bytes_dtype(dtype)?;
    let itemsize = dtype.itemsize();
    let n = batch.len();
    let mut starts = Vec::with_capacity(n);
    for (k, &index) in idxs.iter().enumerate().take(n) {
        starts.push(check_ragged_record(py, &batch, k, itemsize, index, path)?.0);
    }
    let (dims, dim_offsets) = (batch.dims().to_vec(), batch.dim_offsets().to_vec());
    let (owner, base) = payload_owner(py, batch)?;
    let mut out = Vec::with_capacity(n);
    let mut nd = [0 as numpy::npyffi::npy_intp; MAX_DIMS];
    for (k, &a) in starts.iter().enumerate() {
        let shape = &dims[dim_offsets[k]..dim_offsets[k + 1]];
        for (slot, &d) in nd.iter_mut().zip(shape) {
            *slot = d as numpy::npyffi::npy_intp;
        }
        // SAFETY: record k's payload is the batch's `data()[a..b]`, which
        // is `base + a .. base + b` in the owner's buffer (`base` is where
        // `data()` starts; `a <= b <= data().len()`), and it holds exactly
        // product(shape) * itemsize bytes: both checked by
        // `check_ragged_record`, which also bounds the rank by `MAX_DIMS`.
        out.push(unsafe { owned_view(py, dtype, &mut nd[..shape.len()], base.add(a), &owner) }?);
    }
    PyList::new(py, out)
}

/// A ragged store handle (`zrecord::RaggedCore`); `close` drops it.
#[pyclass(frozen, name = "RaggedCore", module = "loaderx._native")]
pub struct PyRaggedCore {
    core: RwLock<Option<RaggedCore>>,
}

impl PyRaggedCore {
    /// The records at `idxs`, gathered with the GIL released, and the
    /// store's path (for messages).
    fn gather_batch(&self, py: Python<'_>, idxs: &[u64]) -> PyResult<(RaggedBatch, PathBuf)> {
        read_detached(py, &self.core, |c| {
            let mut batch = RaggedBatch::with_buffer(pool::take_words());
            c.gather_into(idxs, &mut batch)
                .map(|()| (batch, c.path().to_path_buf()))
        })
    }

    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&RaggedCore) -> R + Send,
    ) -> PyResult<R> {
        with_read(py, &self.core, f)
    }
}

#[pymethods]
impl PyRaggedCore {
    /// Creates a store: `create(path, dtype, codec, dict_bytes, level)`.
    #[staticmethod]
    #[pyo3(signature = (path, dtype, codec, dict_bytes=None, level=None, durability="at_sync"))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        dtype: &Bound<'_, PyAny>,
        codec: &str,
        dict_bytes: Option<Vec<u8>>,
        level: Option<i32>,
        durability: &str,
    ) -> PyResult<Self> {
        let dtype = dtype_from_py(dtype)?;
        let opts = create_options(py, codec, dict_bytes, level, durability)?;
        let core = py
            .detach(|| RaggedCore::create(&path, &dtype, &opts))
            .or_py(py)?;
        Ok(PyRaggedCore {
            core: RwLock::new(Some(core)),
        })
    }

    /// Opens an existing store.
    #[staticmethod]
    #[pyo3(signature = (path, read_only=false, level=None, durability="at_sync"))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        read_only: bool,
        level: Option<i32>,
        durability: &str,
    ) -> PyResult<Self> {
        let opts = open_options(read_only, level, durability)?;
        let core = py
            .detach(|| RaggedCore::open(&path, &opts))
            .map_err(|e| open_err(py, e))?;
        Ok(PyRaggedCore {
            core: RwLock::new(Some(core)),
        })
    }

    fn len(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |c| c.len())
    }

    #[getter]
    fn dtype(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |c| dtype_to_py(c.dtype()))
    }

    #[getter]
    fn codec(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with(py, |c| c.codec().name())
    }

    #[getter]
    fn read_only(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |c| c.is_read_only())
    }

    fn has_dict(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |c| c.has_dict())
    }

    /// Appends records: `src` holds every payload packed, `offsets` the
    /// `n + 1` byte boundaries, `shapes` one tuple per record. One commit.
    fn append(
        &self,
        py: Python<'_>,
        src: PyReadonlyArray1<'_, u8>,
        offsets: PyReadonlyArray1<'_, u64>,
        shapes: Vec<Vec<u64>>,
    ) -> PyResult<u64> {
        let data = src.as_slice()?;
        let offsets = offsets.as_slice()?;
        if offsets.len() != shapes.len() + 1 {
            return Err(PyValueError::new_err(
                "offsets must hold len(shapes) + 1 entries",
            ));
        }
        let mut ranges = Vec::with_capacity(shapes.len());
        for w in offsets.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            if a > b || b > data.len() {
                return Err(PyValueError::new_err("offsets do not fit the payload"));
            }
            ranges.push((a, b));
        }
        read_detached(py, &self.core, |c| {
            c.append_records(
                shapes
                    .iter()
                    .zip(&ranges)
                    .map(|(s, &(a, b))| (s.as_slice(), &data[a..b])),
            )
        })
    }

    /// Gathers the records at `idxs` (GIL released for the gather) and
    /// returns them as a list of `dtype` arrays with their stored shapes:
    /// views into the gathered batch's buffer, which a `RaggedBuffer` owns
    /// (their common base; no copy), made here rather than by slicing in
    /// Python (a third of the per-record cost).
    fn gather<'py>(
        &self,
        py: Python<'py>,
        idxs: PyReadonlyArray1<'py, u64>,
        dtype: Bound<'py, PyArrayDescr>,
    ) -> PyResult<Bound<'py, PyList>> {
        let idxs = owned_indices(&idxs)?;
        let (batch, path) = self.gather_batch(py, &idxs)?;
        ragged_views(py, batch, &dtype, &idxs, &path)
    }

    /// Gathers the records at `idxs` (GIL released) packed:
    /// `(values, offsets, shapes)`, every record's elements concatenated in
    /// one 1-D `dtype` array (a view of the gathered batch's buffer, which
    /// a `RaggedBuffer` owns: no copy), `len + 1` int64 element offsets,
    /// and each record's shape as a tuple.
    #[allow(clippy::type_complexity)]
    fn gather_packed<'py>(
        &self,
        py: Python<'py>,
        idxs: PyReadonlyArray1<'py, u64>,
        dtype: Bound<'py, PyArrayDescr>,
    ) -> PyResult<(
        Bound<'py, numpy::PyUntypedArray>,
        Bound<'py, PyArray1<i64>>,
        Bound<'py, PyList>,
    )> {
        plain_bytes_dtype(&dtype)?;
        let itemsize = dtype.itemsize();
        let idxs = &owned_indices(&idxs)?[..];
        let (batch, path) = self.gather_batch(py, idxs)?;
        let n = batch.len();
        if n != idxs.len() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "gathered {n} records for {} indices",
                idxs.len()
            )));
        }
        // SAFETY: on `Ok` every element is written: the first before the
        // loop, and the loop zips the other `n` with the `n` indices
        // (`idxs.len() == n`, checked above), leaving it only by an error.
        let (shapes, offsets) = unsafe {
            filled_array1::<i64, _>(py, n + 1, |o| {
                let mut shapes = Vec::with_capacity(n);
                let Some((first, rest)) = o.split_first_mut() else {
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "no room for the offsets",
                    ));
                };
                first.write(0);
                for (slot, (k, &index)) in rest.iter_mut().zip(idxs.iter().enumerate()) {
                    let (_, b) = check_ragged_record(py, &batch, k, itemsize, index, &path)?;
                    let shape = batch.shape(k);
                    slot.write(i64::try_from(b / itemsize).map_err(|_| {
                        pyo3::exceptions::PyMemoryError::new_err("packed batch too large")
                    })?);
                    shapes.push(PyTuple::new(py, shape)?);
                }
                Ok(shapes)
            })
        }?;
        let len = if n == 0 { 0 } else { batch.offsets()[n] };
        let (owner, base) = payload_owner(py, batch)?;
        let mut nd = [len.checked_div(itemsize).unwrap_or(0) as numpy::npyffi::npy_intp];
        // SAFETY: the records are the batch's `data()[..len]`, from `base`
        // on in the owner's buffer (record k spans `offsets[k]..offsets[k +
        // 1]` from 0, each end `b <= data().len()`, checked above), and
        // `len` is `len / itemsize` items of `itemsize` bytes: every
        // record's length is a multiple of `itemsize` (checked above).
        let values = unsafe { owned_view(py, &dtype, &mut nd, base, &owner) }?
            .cast_into::<numpy::PyUntypedArray>()?;
        Ok((values, offsets, PyList::new(py, shapes)?))
    }

    fn delete(&self, py: Python<'_>, idxs: PyReadonlyArray1<'_, u64>) -> PyResult<()> {
        let idxs = owned_indices(&idxs)?;
        write_detached(py, &self.core, |c| c.delete(&idxs))
    }

    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        write_detached(py, &self.core, |c| c.compact())
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        read_detached(py, &self.core, |c| c.sync())
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(py, |c| c.stats())?;
        stats_dict(py, s)
    }

    /// Checks the whole store with the GIL released (`verify_dict`).
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (r, n) = read_detached(py, &self.core, |c| c.verify().map(|r| (r, c.len())))?;
        verify_dict(py, r, n)
    }

    /// Syncs deferred appends and drops the handle (releasing the store's
    /// lock), raising if the sync failed. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        close_handle(py, &self.core, |c| c.close())
    }

    /// `"at_sync"` or `"each_append"`.
    #[getter]
    fn durability(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with(py, |c| c.durability().name())
    }
}

/// `"dense"`, `"ragged"` or `None` (no store at `path`). `create`: the
/// caller creates a store when there is none, so what a killed create left
/// is `None` too (the create clears it), not an error.
#[pyfunction]
#[pyo3(signature = (path, create=false))]
fn probe(py: Python<'_>, path: PathBuf, create: bool) -> PyResult<Option<&'static str>> {
    let kind = py
        .detach(|| {
            if create {
                zrecord::probe_to_create(&path)
            } else {
                zrecord::probe(&path)
            }
        })
        .or_py(py)?;
    Ok(kind.map(|k| match k {
        Kind::Dense => "dense",
        Kind::Ragged => "ragged",
    }))
}

/// Trains a zstd dictionary of at most `target` bytes on `samples`, cut
/// into records by `sizes`. Both are copied before the GIL is released
/// (the training takes seconds; the copy of a tier's sample budget,
/// at most 64 MiB, milliseconds): `loaderx.utils.train_dict` passes a
/// fresh sample, but a caller's array rewritten mid-training would hand
/// zstd's trainer bytes that change under it.
#[pyfunction]
fn train_dict<'py>(
    py: Python<'py>,
    samples: PyReadonlyArray1<'py, u8>,
    sizes: PyReadonlyArray1<'py, u64>,
    target: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let data = samples.as_slice()?.to_vec();
    let sizes: Vec<usize> = sizes.as_slice()?.iter().map(|&s| s as usize).collect();
    if sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s)) != Some(data.len()) {
        return Err(PyValueError::new_err(
            "sample sizes must exactly cover the sample buffer",
        ));
    }
    if target == 0 {
        return Err(PyValueError::new_err("dictionary target must be positive"));
    }
    let dict = py
        .detach(|| zrecord_engine::train_dictionary(&data, &sizes, target))
        .map_err(|e| zerr(py, "DictTrainingError", chain(&e)))?;
    Ok(PyBytes::new(py, &dict))
}

// ---------------------------------------------------------------------------
// sampler

/// `zsampler::Sampler` behind a mutex (the cursor moves on `next`).
///
/// Made in two steps, like a Python class: `__new__` takes any arguments
/// and makes an empty handle, and `_init` (called by the Python class's
/// `__init__`) sets it up, so a Python subclass may have an `__init__` of its
/// own signature that calls `super().__init__(length, batch_size, mode)`.
#[pyclass(frozen, subclass, name = "Sampler", module = "loaderx._native")]
pub struct PySampler {
    inner: Mutex<Option<zsampler::Sampler>>,
}

/// Batches at least this long are drawn with the GIL released; shorter
/// ones take about as long as releasing it would.
const DETACH_INDICES: usize = 4096;

fn sampler_err(e: zsampler::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Refuses a dtype whose arrays cannot simply be filled with stored bytes:
/// one holding Python objects (bytes there would be taken for object
/// pointers) or one with a subarray (NumPy would append its dims, a larger
/// array than one record). Stores never hold either; the check stands
/// between the unsafe fills below and a `dtype` attribute changed from
/// Python.
fn plain_bytes_dtype(dtype: &Bound<'_, PyArrayDescr>) -> PyResult<()> {
    if dtype.has_object() {
        return Err(PyValueError::new_err(format!(
            "cannot read records as {dtype}: it holds Python objects"
        )));
    }
    if dtype.has_subarray() {
        return Err(PyValueError::new_err(format!(
            "cannot read records as {dtype}: a dtype with a subarray"
        )));
    }
    Ok(())
}

/// A new, uninitialised C-order array of `descr` shaped `dims`. A failed
/// allocation is Python's `MemoryError` (rust-numpy's own constructors
/// panic instead).
///
/// # Safety
/// The elements are uninitialised, as from rust-numpy's `PyArray::new`:
/// until every byte has been written, through a raw pointer or a slice of
/// `MaybeUninit` (see [`filled_array1`]), no other reference to them may be
/// made (`readwrite`, `as_slice`, `slice::from_raw_parts` of the element
/// type: rust-numpy calls that undefined behaviour) and the array must not
/// reach Python; on error it is simply dropped.
unsafe fn new_array<'py>(
    py: Python<'py>,
    descr: Bound<'py, PyArrayDescr>,
    dims: &[usize],
) -> PyResult<Bound<'py, numpy::PyUntypedArray>> {
    use numpy::npyffi::{self, PY_ARRAY_API};
    let too_big = || {
        pyo3::exceptions::PyMemoryError::new_err(format!("cannot allocate an array of {dims:?}"))
    };
    let mut d = dims
        .iter()
        .map(|&x| npyffi::npy_intp::try_from(x).map_err(|_| too_big()))
        .collect::<PyResult<Vec<_>>>()?;
    let nd = std::os::raw::c_int::try_from(d.len()).map_err(|_| too_big())?;
    // SAFETY: the type object is read from NumPy's C API table (loaded on
    // first use). NewFromDescr steals the descr reference made by
    // `into_dtype_ptr`, allocates the C-ordered elements itself (data
    // pointer NULL) and returns NULL with a Python error set on failure,
    // which `from_owned_ptr_or_err` turns into that error.
    let any = unsafe {
        let subtype = npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type);
        let p = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            subtype,
            descr.into_dtype_ptr(),
            nd,
            d.as_mut_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, p)?
    };
    Ok(any.cast_into::<numpy::PyUntypedArray>()?)
}

/// A new zero-filled 1-D `uint8` array of `len` bytes; a failed allocation
/// is Python's `MemoryError` (rust-numpy's `zeros` panics instead).
fn zeros_u8(py: Python<'_>, len: usize) -> PyResult<Bound<'_, PyArray1<u8>>> {
    new_array1::<u8>(py, len)
}

/// A new zero-filled 1-D array of `len` elements of `T` (NumPy's zeros:
/// calloc, so fresh pages cost nothing more), safe to borrow with
/// `readwrite` at once; a failed allocation is Python's `MemoryError`.
fn new_array1<T: numpy::Element>(py: Python<'_>, len: usize) -> PyResult<Bound<'_, PyArray1<T>>> {
    use numpy::npyffi::{self, PY_ARRAY_API};
    let mut dims = [npyffi::npy_intp::try_from(len).map_err(|_| {
        pyo3::exceptions::PyMemoryError::new_err(format!("cannot allocate {len} elements"))
    })?];
    // SAFETY: PyArray_Zeros steals the descr reference made by
    // `into_dtype_ptr`, reads one dim, allocates zeroed C-ordered memory and
    // returns NULL with a Python error set on failure, which
    // `from_owned_ptr_or_err` turns into that error.
    let any = unsafe {
        let p = PY_ARRAY_API.PyArray_Zeros(
            py,
            1,
            dims.as_mut_ptr(),
            T::get_dtype(py).into_dtype_ptr(),
            0,
        );
        Bound::from_owned_ptr_or_err(py, p)?
    };
    Ok(any.cast_into::<PyArray1<T>>()?)
}

/// A new 1-D array of `len` elements of `T` that `fill` writes through a
/// `MaybeUninit` slice over its memory, which is never zeroed first (for a
/// sampler batch of 8192 indices the memset was ~1.4 us of a ~14 us call);
/// returned with `fill`'s result. On error, from the allocation (Python's
/// `MemoryError`) or from `fill`, the array is dropped unseen.
///
/// # Safety
/// When `fill` returns `Ok`, it must have written every element of the
/// slice it was given: the array then reaches safe code and Python as
/// initialised.
unsafe fn filled_array1<'py, T: numpy::Element + Copy, R>(
    py: Python<'py>,
    len: usize,
    fill: impl FnOnce(&mut [MaybeUninit<T>]) -> PyResult<R>,
) -> PyResult<(R, Bound<'py, PyArray1<T>>)> {
    // SAFETY: no reference to its elements is made but the `MaybeUninit`
    // slice below, and the array is returned only after `fill` has written
    // every element (this function's contract); on error it is dropped
    // unseen.
    let out = unsafe { new_array(py, T::get_dtype(py), &[len]) }?.cast_into::<PyArray1<T>>()?;
    let data = out.data().cast::<MaybeUninit<T>>();
    let slice: &mut [MaybeUninit<T>] = if len == 0 {
        // NumPy's pointer for no elements need not be valid for a slice.
        &mut []
    } else if !data.is_aligned() {
        // NumPy's default allocator returns malloc-aligned memory; only a
        // custom `PyDataMem` handler could do otherwise.
        return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
            "NumPy allocated an array of {len} {} misaligned",
            std::any::type_name::<T>()
        )));
    } else {
        // SAFETY: `out` was just made here, 1-D and C-contiguous, holding
        // exactly `len` elements of `T` (its dtype is `T`'s) at its aligned,
        // non-null data pointer, which stays valid while `out` lives (past
        // `fill`, which cannot keep the slice). No other reference to them
        // exists: the array has not reached Python or any other code yet.
        // They are uninitialised, which a slice of `MaybeUninit<T>` may
        // cover; `T: Copy` keeps object dtypes (whose elements NumPy must
        // initialise) out.
        unsafe { std::slice::from_raw_parts_mut(data, len) }
    };
    let r = fill(slice)?;
    Ok((r, out))
}

impl PySampler {
    /// Runs `f` on the sampler; a handle whose `__init__` never ran is a
    /// clear error.
    fn with<R>(&self, f: impl FnOnce(&mut zsampler::Sampler) -> R) -> PyResult<R> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_mut() {
            Some(s) => Ok(f(s)),
            None => Err(pyo3::exceptions::PyRuntimeError::new_err(
                "Sampler is not initialised: a subclass's __init__ must call super().__init__(length, batch_size, mode, ...)",
            )),
        }
    }

    /// The batch at `step` (without moving the cursor), or at the cursor
    /// (advancing it); with the step it belongs to, read under the same lock.
    fn draw<'py>(
        &self,
        py: Python<'py>,
        step: Option<u64>,
    ) -> PyResult<(u64, Bound<'py, PyArray1<u64>>)> {
        let len = self.with(|s| s.batch_len())?;
        let fill = |buf: &mut [MaybeUninit<u64>]| {
            let mut run = || {
                self.with(|s| {
                    // A concurrent `__init__` may have changed the length:
                    // then the buffer is not exactly filled, and is dropped.
                    if s.batch_len() != buf.len() {
                        return Ok(None);
                    }
                    match step {
                        Some(step) => s.batch_at_uninit(step, buf).map(|_| Some(step)),
                        None => {
                            let at = s.step();
                            s.next_into_uninit(buf).map(|_| Some(at))
                        }
                    }
                })
            };
            if len >= DETACH_INDICES {
                py.detach(run)
            } else {
                run()
            }?
            .map_err(sampler_err)?
            .ok_or_else(|| {
                pyo3::exceptions::PyRuntimeError::new_err(
                    "Sampler was re-initialised during the draw",
                )
            })
        };
        // SAFETY: `fill` returns `Ok` only after `batch_at_uninit` /
        // `next_into_uninit` returned `Ok(len)` for a buffer of exactly
        // `len` elements, and zsampler documents (and its tests check
        // against the `&mut [u64]` fill, in every mode) that every element
        // of `buf[..len]` is written then.
        let (at, out) = unsafe { filled_array1::<u64, _>(py, len, fill) }?;
        Ok((at, out))
    }
}

#[pymethods]
impl PySampler {
    /// An empty handle; `_init` sets it up (see the type's docs).
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        PySampler {
            inner: Mutex::new(None),
        }
    }

    /// Sets the handle up (again, if called twice: as re-running a Python
    /// `__init__` does).
    #[pyo3(signature = (length, batch_size, mode, seed=42, *, rank=0, world=1))]
    fn _init(
        &self,
        length: u64,
        batch_size: usize,
        mode: u8,
        seed: u64,
        rank: usize,
        world: usize,
    ) -> PyResult<()> {
        let mode = zsampler::Mode::try_from(mode).map_err(sampler_err)?;
        let mut s = zsampler::Sampler::new(length, batch_size, mode, seed).map_err(sampler_err)?;
        if world != 1 || rank != 0 {
            s = s.sharded(rank, world).map_err(sampler_err)?;
        }
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
        Ok(())
    }

    /// The batch at the cursor (a new `uint64` array); advances the cursor.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(self.draw(py, None)?.1)
    }

    /// `(step, batch)` at the cursor, advancing it: the DataLoader's draw,
    /// which must know the step of each batch even if the cursor is moved
    /// (`loader.sampler.seek`) from another thread.
    fn _draw<'py>(&self, py: Python<'py>) -> PyResult<(u64, Bound<'py, PyArray1<u64>>)> {
        self.draw(py, None)
    }

    /// The batch of any `step`, without moving the cursor.
    fn batch_at<'py>(&self, py: Python<'py>, step: u64) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(self.draw(py, Some(step))?.1)
    }

    /// Moves the cursor to `step` (O(1)): resuming is a seek.
    fn seek(&self, step: u64) -> PyResult<()> {
        self.with(|s| s.seek(step))
    }

    /// The step the next `next()` returns.
    #[getter]
    fn step(&self) -> PyResult<u64> {
        self.with(|s| s.step())
    }

    /// Indices per batch for this rank.
    #[getter]
    fn batch_len(&self) -> PyResult<usize> {
        self.with(|s| s.batch_len())
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(self.draw(py, None)?.1)
    }
}

// ---------------------------------------------------------------------------
// index arrays

/// The record positions named by a 1-D, C-contiguous, aligned `int64` or
/// `uint64` index array over `n` records (negative ones counting from the
/// end), as a new `uint64` array; an index out of range is
/// `IndexOutOfRange` naming the store, the lowest such negative index or
/// else the highest index, and `n`. Each index is read once, in the pass
/// that copies it: the copy is what was checked, and what the store then
/// reads, even if another thread rewrites the caller's array meanwhile
/// (the array was handed on as it was: a `uint64` one rewritten between
/// this check and the gather reached the store unchecked). Branch-free
/// passes over slices, where NumPy's `min`, `max`, `where` and a cast cost
/// a few microseconds each on the short lists a map-style `Dataset`
/// gathers; the Python caller sends only short arrays (on baseline x86-64
/// these 64-bit compares do not vectorise, and NumPy's run-time-picked ones
/// win on long arrays). Any other layout is a `TypeError` (the caller makes
/// one first).
#[pyfunction]
fn positions<'py>(
    py: Python<'py>,
    idxs: &Bound<'py, PyAny>,
    n: u64,
    path: &str,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let out_of_range = |i: i128| {
        zerr(
            py,
            "IndexOutOfRange",
            format!("{path}: index {i} is out of range for {n} records"),
        )
    };
    enum Src<'py> {
        Unsigned(PyReadonlyArray1<'py, u64>),
        Signed(PyReadonlyArray1<'py, i64>),
    }
    let src = match idxs.cast::<numpy::PyArray1<u64>>() {
        Ok(a) => Src::Unsigned(a.readonly()),
        Err(_) => Src::Signed(idxs.cast::<numpy::PyArray1<i64>>()?.readonly()),
    };
    // One of the two is empty.
    let (unsigned, signed): (&[u64], &[i64]) = match &src {
        Src::Unsigned(r) => (r.as_slice()?, &[]),
        Src::Signed(r) => (&[], r.as_slice()?),
    };
    let len = unsigned.len() + signed.len();
    // Past i64::MAX records, every i64 is in range (from the end or not).
    let m = i64::try_from(n).ok();
    // SAFETY: on `Ok` every element is written: `out` has `len` of them,
    // one of the two source slices holds `len` and the other none, and the
    // loop over the non-empty one zips over all of them.
    let (bad, out) = unsafe {
        filled_array1::<u64, _>(py, len, |out| {
            // The checks are branch-free folds (an OR of compares) over the
            // values as they are copied; the offending one is looked for in
            // the copy, only on error.
            let mut bad = false;
            if !unsigned.is_empty() {
                for (o, &i) in out.iter_mut().zip(unsigned) {
                    o.write(i);
                    bad |= i >= n;
                }
            } else if let Some(m) = m {
                // The bits as they are: a negative index is mapped after
                // the check, in the copy.
                for (o, &i) in out.iter_mut().zip(signed) {
                    o.write(i as u64);
                    bad |= (i >= m) | (i < -m);
                }
            } else {
                for (o, &i) in out.iter_mut().zip(signed) {
                    o.write(i as u64);
                }
            }
            Ok(bad)
        })
    }?;
    let mut rw = out.readwrite();
    let copy = rw.as_slice_mut()?;
    if let Src::Signed(_) = src {
        // The copy holds the caller's i64s, bit for bit.
        let as_i64 = |v: &u64| *v as i64;
        if bad {
            let m = m.unwrap_or(i64::MAX);
            let lo = copy.iter().map(as_i64).min().unwrap_or(0);
            let bad = if lo < -m {
                lo
            } else {
                copy.iter().map(as_i64).max().unwrap_or(0)
            };
            return Err(out_of_range(i128::from(bad)));
        }
        // In range (checked above): a negative `i` is at least `-n`, so
        // `n + i` (wrapping in u64) is a position in `0..n`; the sign mask
        // adds `n` only to those, without a branch.
        for v in copy.iter_mut() {
            *v = v.wrapping_add(n & ((as_i64(v) >> 63) as u64));
        }
    } else if bad {
        let hi = copy.iter().copied().max().unwrap_or(0);
        return Err(out_of_range(i128::from(hi)));
    }
    drop(rw);
    Ok(out)
}

/// [`positions`] for a Python `list` of exact `int`s that fit an `i64`
/// (what `ds[[3, 1, 2]]` and PyTorch's batched `__getitems__` pass); `None`
/// for any other list (bools, NumPy scalars, floats, huge ints), which the
/// caller then resolves through NumPy as before.
#[pyfunction]
fn list_positions<'py>(
    py: Python<'py>,
    list: &Bound<'py, PyList>,
    n: u64,
    path: &str,
) -> PyResult<Option<Bound<'py, PyArray1<u64>>>> {
    let mut v = Vec::with_capacity(list.len());
    for item in list.iter() {
        if !item.is_exact_instance_of::<pyo3::types::PyInt>() {
            return Ok(None);
        }
        match item.extract::<i64>() {
            Ok(i) => v.push(i),
            Err(_) => return Ok(None),
        }
    }
    // SAFETY: the loop writes every element: `a` has `v.len()` of them and
    // the zip runs over all of `v`.
    let ((), a) = unsafe {
        filled_array1::<i64, _>(py, v.len(), |a| {
            for (o, &i) in a.iter_mut().zip(&v) {
                o.write(i);
            }
            Ok(())
        })
    }?;
    positions(py, a.as_any(), n, path).map(Some)
}

// ---------------------------------------------------------------------------
// io

/// Parallel `loadtxt` into a 2-D float array (`float64`, or `float32`).
#[pyfunction]
#[pyo3(signature = (path, comments, delimiter, skip_rows, usecols, max_rows, threads, chunk_bytes, single))]
#[allow(clippy::too_many_arguments)]
fn loadtxt<'py>(
    py: Python<'py>,
    path: PathBuf,
    comments: Option<u8>,
    delimiter: Option<u8>,
    skip_rows: usize,
    usecols: Option<Vec<isize>>,
    max_rows: Option<usize>,
    threads: usize,
    chunk_bytes: usize,
    single: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = zrecord::text::LoadTxtOptions {
        delimiter,
        comments,
        skip_rows,
        usecols,
        max_rows,
        threads,
        chunk_bytes,
    };
    if single {
        let a = py
            .detach(|| zrecord::text::loadtxt::<f32>(&path, &opts))
            .or_py(py)?;
        Ok(PyArray2::from_owned_array(py, a).into_any())
    } else {
        let a = py
            .detach(|| zrecord::text::loadtxt::<f64>(&path, &opts))
            .or_py(py)?;
        Ok(PyArray2::from_owned_array(py, a).into_any())
    }
}

/// The validated header of a `.npy` file as a dict.
#[pyfunction]
fn npy_header<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let h = py.detach(|| zrecord::npy::read_header(&path)).or_py(py)?;
    header_dict(py, &h)
}

/// The validated header at the start of `data`, the bytes of the `.npy` at
/// `path` read into memory (a pipe or FIFO); errors name `path`.
#[pyfunction]
fn npy_header_of_bytes<'py>(
    py: Python<'py>,
    path: PathBuf,
    data: &[u8],
) -> PyResult<Bound<'py, PyDict>> {
    let h = zrecord::npy::NpyHeader::parse_named(&path, data).or_py(py)?;
    header_dict(py, &h)
}

fn header_dict<'py>(py: Python<'py>, h: &zrecord::npy::NpyHeader) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", h.version)?;
    d.set_item("descr", dtype_to_py(&h.dtype))?;
    d.set_item("fortran_order", h.fortran_order)?;
    d.set_item("shape", PyTuple::new(py, &h.shape)?)?;
    d.set_item("data_offset", h.data_offset)?;
    d.set_item("payload_bytes", h.payload_bytes)?;
    Ok(d)
}

/// Reads `nbytes` payload bytes at `offset` of `path` into a new uint8
/// array (GIL released). The caller checked them against the header.
#[pyfunction]
fn read_bytes_at<'py>(
    py: Python<'py>,
    path: PathBuf,
    offset: u64,
    nbytes: usize,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    use std::os::unix::fs::FileExt;
    let len = std::fs::metadata(&path)
        .map_err(|e| io_err(py, format!("{}: {e}", path.display()), &path, &e))?
        .len();
    if offset
        .checked_add(nbytes as u64)
        .is_none_or(|end| end > len)
    {
        return Err(PyValueError::new_err(format!(
            "{}: the payload is truncated: the header promises {nbytes} bytes after offset \
             {offset}, the file holds {} there ({len} bytes in all)",
            path.display(),
            len.saturating_sub(offset)
        )));
    }
    // Fallible: a payload larger than memory is a MemoryError naming the
    // file, not a panic. Zero-filled (calloc: fresh pages cost nothing
    // more), so the slice the read fills is initialised memory.
    let out = zeros_u8(py, nbytes).map_err(|_| {
        pyo3::exceptions::PyMemoryError::new_err(format!(
            "{}: cannot allocate {:.1} GiB for the payload; read it in parts \
             (load_npy_prefix) or map it (np.load(mmap_mode='r'))",
            path.display(),
            nbytes as f64 / (1u64 << 30) as f64
        ))
    })?;
    {
        let mut rw = out.readwrite();
        let buf = rw.as_slice_mut()?;
        py.detach(|| -> std::io::Result<()> {
            let f = std::fs::File::open(&path)?;
            f.read_exact_at(buf, offset)
        })
        .map_err(|e| io_err(py, format!("{}: {e}", path.display()), &path, &e))?;
    }
    Ok(out)
}

/// `(idle regions, idle bytes)` of the gather buffer pool.
#[pyfunction]
fn buffer_pool_stats() -> (usize, usize) {
    pool::idle_stats()
}

/// `(idle buffers, idle bytes)` of the ragged gather buffer pool.
#[pyfunction]
fn ragged_pool_stats() -> (usize, usize) {
    pool::idle_words_stats()
}

// ---------------------------------------------------------------------------

/// The native module. Free-threaded builds run it without the GIL: every
/// class is `frozen` and guards its state with a lock.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_RECORD_LEN", MAX_RECORD_LEN)?;
    m.add_class::<PyDenseCore>()?;
    m.add_class::<PyRaggedCore>()?;
    m.add_class::<PySampler>()?;
    m.add_class::<pool::GatherBuffer>()?;
    m.add_class::<pool::RaggedBuffer>()?;
    m.add("POOL_MIN_BYTES", pool::POOL_MIN_BYTES)?;
    m.add_function(wrap_pyfunction!(buffer_pool_stats, m)?)?;
    m.add_function(wrap_pyfunction!(ragged_pool_stats, m)?)?;
    m.add_function(wrap_pyfunction!(probe, m)?)?;
    m.add_function(wrap_pyfunction!(train_dict, m)?)?;
    m.add_function(wrap_pyfunction!(loadtxt, m)?)?;
    m.add_function(wrap_pyfunction!(positions, m)?)?;
    m.add_function(wrap_pyfunction!(list_positions, m)?)?;
    m.add_function(wrap_pyfunction!(npy_header, m)?)?;
    m.add_function(wrap_pyfunction!(npy_header_of_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(read_bytes_at, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exception `engine_err` makes of `e`: its class name, `code`,
    /// `errno` and `filename` (`None` where unset or not an OSError).
    fn raised(e: zrecord_engine::Error) -> (String, i64, Option<i32>, Option<String>) {
        let _one = PY.lock().unwrap_or_else(|e| e.into_inner());
        Python::initialize();
        Python::attach(|py| {
            // `loaderx._errors` from the source tree: it imports nothing,
            // and the package's `__init__` needs no native module.
            let python_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/python");
            py.import("sys")
                .and_then(|sys| sys.getattr("path"))
                .and_then(|path| path.call_method1("insert", (0, python_dir)))
                .expect("sys.path");
            let err = engine_err(py, &e);
            let exc = err.value(py);
            // `errno` and `filename` exist on OSErrors only.
            let errno = exc.getattr("errno").ok();
            let filename = exc.getattr("filename").ok();
            (
                exc.get_type().name().expect("name").to_string(),
                exc.getattr("code").and_then(|c| c.extract()).expect("code"),
                errno.and_then(|v| v.extract().expect("errno")),
                filename.and_then(|v| v.extract().expect("filename")),
            )
        })
    }

    /// One test at a time edits the interpreter's import state.
    static PY: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Regression: when `loaderx._errors` could not be imported (a broken
    /// install), the exception raised was the import error alone and the
    /// store's own message was lost.
    #[test]
    fn a_broken_package_still_raises_the_store_error() {
        let _one = PY.lock().unwrap_or_else(|e| e.into_inner());
        Python::initialize();
        Python::attach(|py| {
            let modules = py.import("sys").and_then(|s| s.getattr("modules")).unwrap();
            let saved = modules.get_item("loaderx._errors").ok();
            // A `None` entry makes the import fail with ImportError.
            modules.set_item("loaderx._errors", py.None()).unwrap();
            let err = zerr(py, "CorruptRecord", "record 7: bad frame".into());
            match saved {
                Some(m) => modules.set_item("loaderx._errors", m).unwrap(),
                None => modules.del_item("loaderx._errors").unwrap(),
            }
            assert!(err.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py));
            assert_eq!(err.value(py).to_string(), "record 7: bad frame");
            let cause = err.cause(py).expect("the import error as its cause");
            assert!(cause.is_instance_of::<pyo3::exceptions::PyImportError>(py));
        });
    }

    fn io(errno: i32) -> zrecord_engine::Error {
        zrecord_engine::Error::Io {
            path: "/s/0.chunk".into(),
            op: "read",
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    /// Regression: an engine I/O error was a StoreIOError without errno,
    /// strerror or filename (the typed layer's had them), and a missing
    /// file was not a FileNotFoundError.
    #[test]
    fn an_engine_io_error_carries_its_errno_and_file() {
        let (class, code, errno, filename) = raised(io(libc::EISDIR));
        assert_eq!(class, "StoreIOError");
        assert_eq!(code, -2);
        assert_eq!(errno, Some(libc::EISDIR));
        assert_eq!(filename.as_deref(), Some("/s/0.chunk"));
    }

    /// Regression: a file of the store the OS could not find was
    /// StoreNotFound (-11, a FileNotFoundError) for a store that is there;
    /// loaderx 1.7.2 says -8, as for a file missing from the listing.
    #[test]
    fn an_engine_file_the_os_cannot_find_is_an_invalid_store() {
        let (class, code, errno, _) = raised(io(libc::ENOENT));
        assert_eq!((class.as_str(), code), ("InvalidStore", -8));
        assert_eq!(errno, None, "not an OSError");
    }

    /// Regression: these fell to the catch-all, a plain ZrecordError whose
    /// code (-2) says "file I/O failed".
    #[test]
    fn the_engine_states_without_an_arm_of_their_own_get_their_class() {
        use zrecord_engine::Error as E;
        let dir = std::path::PathBuf::from("/s");
        for (e, class, code) in [
            (
                E::CreateInterrupted { path: dir.clone() },
                "InvalidStore",
                -8,
            ),
            (
                E::RecoveryNeeded { path: dir.clone() },
                "ReadOnlyStore",
                -15,
            ),
            (
                E::ForeignProcess {
                    path: dir.clone(),
                    opener: 1,
                },
                "StoreBusy",
                -14,
            ),
            (E::Poisoned { path: dir.clone() }, "StoreIOError", -2),
        ] {
            let (got, got_code, errno, _) = raised(e);
            assert_eq!((got.as_str(), got_code), (class, code));
            assert_eq!(errno, None, "{class}: no OS error to carry");
        }
    }
}
