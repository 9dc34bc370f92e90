//! Dense stores: every record is one array of a fixed dtype and item shape.
//!
//! [`DenseCore`] knows its dtype at run time and moves bytes (what the
//! Python binding uses, and the only way to store structured or big-endian
//! dtypes); [`DenseStore<T>`] is the typed handle over it for Rust users,
//! reading and writing `ndarray` arrays.
//!
//! Bytes are stored exactly as given: a big-endian dtype (`>f4`) stores
//! big-endian bytes, the same bytes NumPy holds for such an array, and the
//! identity records the byte order, so a reader sees the same dtype.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::path::Path;

use ndarray::{ArrayD, ArrayView, ArrayViewMut, Dimension, IxDyn};
use zrecord_engine::typed_header::Kind;
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, Stats, VerifyReport};

use crate::dtype::{DType, Element, check_storable, encode_identity_dense};
use crate::error::{Error, Result};
use crate::index::{Indices, resolve_in};
use crate::store::{self, OpenOptions};

/// Largest record the format holds (2^31 bytes).
const MAX_RECORD_BYTES: u64 = 1 << 31;

/// An untyped dense store: dtype and item shape known at run time, records
/// in and out as bytes (C order, the dtype's own byte layout).
///
/// `Send + Sync`: gathers and appends take `&self` and run from many
/// threads at once; delete and compact take `&mut self`.
#[derive(Debug)]
pub struct DenseCore {
    engine: Engine,
    dtype: DType,
    item_shape: Vec<u64>,
    record_bytes: usize,
}

fn record_bytes_of(path: &Path, dtype: &DType, item_shape: &[u64]) -> Result<usize> {
    let n = store::nbytes(item_shape, dtype.itemsize()).ok_or_else(|| Error::Overflow {
        context: store::context(path),
        detail: format!("item shape {item_shape:?} of {dtype} overflows"),
    })?;
    if n == 0 || n > MAX_RECORD_BYTES {
        return Err(Error::invalid(format!(
            "dense record width {n} bytes (item shape {item_shape:?} of {dtype}) is outside 1..=2^31"
        )));
    }
    Ok(n as usize)
}

impl DenseCore {
    /// Creates a dense store of `dtype` records shaped `item_shape` in the
    /// directory `path` (created if missing; it must hold no files).
    ///
    /// A [`Codec::ZstdDict`] store needs `opts.dictionary` (see
    /// [`train_dict`](crate::train_dict)); any other codec refuses one.
    ///
    /// `dtype` is checked as [`open`](Self::open) will check it (a
    /// hand-built dtype with duplicate field names, an unnamed non-padding
    /// field, a `f3` scalar... is [`Error::UnsupportedDType`] naming the
    /// field), and one-byte scalars are stored as `|` whatever order they
    /// carry, so [`dtype`](Self::dtype) here and after a reopen are equal.
    pub fn create(
        path: impl AsRef<Path>,
        dtype: &DType,
        item_shape: &[u64],
        opts: &CreateOptions,
    ) -> Result<DenseCore> {
        let path = path.as_ref();
        let dtype = check_storable(dtype)?;
        let record_bytes = record_bytes_of(path, &dtype, item_shape)?;
        store::check_create_options(opts)?;
        let identity = encode_identity_dense(&dtype, item_shape);
        let engine = store::create_store(path, Kind::Dense, record_bytes as u64, identity, opts)?;
        Ok(DenseCore {
            engine,
            dtype,
            item_shape: item_shape.to_vec(),
            record_bytes,
        })
    }

    /// Opens the dense store at `path`, checking `opts`' expectations.
    pub fn open(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<DenseCore> {
        let path = path.as_ref();
        let opened = store::open_store(path, Kind::Dense, opts)?;
        let item_shape = opened
            .identity
            .item_shape
            .expect("open_store checked that a dense identity has an item_shape");
        let dtype = opened.identity.dtype;
        let computed = store::nbytes(&item_shape, dtype.itemsize());
        if computed != Some(opened.header.record_bytes) {
            return Err(Error::BadStore {
                file: store::store_file(path),
                detail: format!(
                    "record_bytes is {}, but item shape {item_shape:?} of {dtype} needs {}",
                    opened.header.record_bytes,
                    store::show_nbytes(computed)
                ),
            });
        }
        if let Some(want) = &opts.item_shape
            && *want != item_shape
        {
            return Err(Error::ShapeMismatch {
                context: store::context(path),
                expected: format!("{want:?}"),
                found: item_shape,
            });
        }
        Ok(DenseCore {
            engine: opened.engine,
            dtype,
            item_shape,
            record_bytes: opened.header.record_bytes as usize,
        })
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        self.engine.path()
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.engine.len()
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records' dtype.
    pub fn dtype(&self) -> &DType {
        &self.dtype
    }

    /// The shape of one record.
    pub fn item_shape(&self) -> &[u64] {
        &self.item_shape
    }

    /// Bytes per record: `product(item_shape) * itemsize`.
    pub fn record_bytes(&self) -> usize {
        self.record_bytes
    }

    /// The store's codec.
    pub fn codec(&self) -> Codec {
        self.engine.codec()
    }

    /// Whether the store has a zstd dictionary.
    pub fn has_dict(&self) -> bool {
        self.engine.dictionary().is_some()
    }

    /// Whether this handle was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.engine.is_read_only()
    }

    /// Appends whole records given as bytes (C order, the store's dtype
    /// layout). Returns the index of the first new record.
    pub fn append_bytes(&self, data: &[u8]) -> Result<u64> {
        if data.is_empty() {
            return Err(Error::invalid(format!(
                "append to {} needs at least one record",
                self.path().display()
            )));
        }
        if !data.len().is_multiple_of(self.record_bytes) {
            return Err(Error::invalid(format!(
                "append to {}: {} bytes are not a whole number of {}-byte records",
                self.path().display(),
                data.len(),
                self.record_bytes
            )));
        }
        Ok(self.engine.append_fixed(data, self.record_bytes)?)
    }

    /// Appends an array given as its dtype, shape and bytes (what a binding
    /// holds): the dtype must equal the store's and the shape must be
    /// `(batch, *item_shape)`; each mismatch is an error naming both.
    pub fn append_array_bytes(&self, dtype: &DType, shape: &[u64], data: &[u8]) -> Result<u64> {
        if dtype.normalized() != self.dtype {
            return Err(Error::DTypeMismatch {
                context: format!("the batch appended to {}", self.path().display()),
                expected: self.dtype.to_string(),
                found: dtype.to_string(),
            });
        }
        self.check_batch_shape(shape)?;
        let need = store::nbytes(shape, self.dtype.itemsize());
        if need != Some(data.len() as u64) {
            return Err(Error::invalid(format!(
                "append to {}: shape {shape:?} of {} needs {}, {} given",
                self.path().display(),
                self.dtype,
                store::show_nbytes(need),
                data.len()
            )));
        }
        self.append_bytes(data)
    }

    fn check_batch_shape(&self, shape: &[u64]) -> Result<()> {
        if shape.len() != self.item_shape.len() + 1 || shape[1..] != self.item_shape[..] {
            return Err(Error::ShapeMismatch {
                context: format!("the batch appended to {}", self.path().display()),
                expected: format!("(batch, *{:?})", self.item_shape),
                found: shape.to_vec(),
            });
        }
        Ok(())
    }

    /// Reads the records at `indices` into `dst` (`indices.len() *
    /// record_bytes()` bytes), record k at `dst[k * record_bytes..]`.
    /// Allocates nothing beyond the engine's per-call bookkeeping.
    pub fn gather_bytes_into(&self, indices: &[u64], dst: &mut [u8]) -> Result<()> {
        let need = indices.len().checked_mul(self.record_bytes);
        if need != Some(dst.len()) {
            return Err(Error::invalid(format!(
                "destination holds {} bytes, {} records of {} bytes need {}",
                dst.len(),
                indices.len(),
                self.record_bytes,
                store::show_nbytes(need.map(|n| n as u64))
            )));
        }
        self.check_range(indices)?;
        self.engine
            .gather_fixed(indices, self.record_bytes, dst)
            .map_err(|e| match e {
                // Every record of a dense store has the store's size: an
                // entry that says otherwise is damage, not a caller's error.
                zrecord_engine::Error::RecordLength {
                    record,
                    stored,
                    loc,
                    ..
                } => Error::Corrupted {
                    path: self.path().to_path_buf(),
                    index: record,
                    detail: format!(
                        "its entry in {loc} says {stored} bytes, the store's records are {}",
                        self.record_bytes
                    ),
                },
                e => e.into(),
            })
    }

    fn check_range(&self, indices: &[u64]) -> Result<()> {
        let len = self.len();
        match indices.iter().find(|&&i| i >= len) {
            Some(&i) => Err(Error::IndexOutOfRange {
                path: Some(self.path().to_path_buf()),
                index: i128::from(i),
                len,
            }),
            None => Ok(()),
        }
    }

    /// Checks the whole store: everything [`Engine::verify`] checks (every
    /// entry inside the frontier, no shared bytes, every frame decodes to
    /// its recorded length) and that every record decodes to exactly
    /// `record_bytes`. Reports every bad index; `Err` only when the check
    /// itself cannot run.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut rep = self.engine.verify()?;
        let n = self.len();
        const BATCH: u64 = 1 << 16;
        for start in (0..n).step_by(BATCH as usize) {
            let idx: Vec<u64> = (start..n.min(start + BATCH)).collect();
            let mut lens = vec![0u64; idx.len()];
            self.engine.record_lengths(&idx, &mut lens, None)?;
            for (&i, &l) in idx.iter().zip(&lens) {
                if l != self.record_bytes as u64 {
                    rep.bad.push((
                        i,
                        format!(
                            "decodes to {l} bytes, the store's records are {}",
                            self.record_bytes
                        ),
                    ));
                }
            }
        }
        rep.bad.sort_by_key(|(i, _)| *i);
        Ok(rep)
    }

    /// Deletes the records at `indices` (duplicates tolerated). The last
    /// records move into the holes, so live records stay `0..len` but
    /// survivors may change index. Bytes are reclaimed by [`compact`](Self::compact).
    pub fn delete(&mut self, indices: &[u64]) -> Result<()> {
        self.check_range(indices)?;
        Ok(self.engine.delete(indices)?)
    }

    /// Reclaims the bytes of deleted records, in place.
    pub fn compact(&mut self) -> Result<()> {
        Ok(self.engine.compact()?)
    }

    /// Makes every appended record durable.
    pub fn sync(&self) -> Result<()> {
        Ok(self.engine.sync()?)
    }

    /// Makes every appended record durable and releases the store,
    /// reporting what dropping the handle cannot (dropping syncs too, best
    /// effort).
    pub fn close(self) -> Result<()> {
        Ok(self.engine.close()?)
    }

    /// When appends through this handle become durable (see
    /// [`Durability`]).
    pub fn durability(&self) -> Durability {
        self.engine.durability()
    }

    /// Storage usage.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// The zstd level appends through this handle compress at (0 for a raw
    /// store): the one given at creation or open, else the format's (3, or
    /// 19 with a dictionary). Not stored with the store.
    pub fn level(&self) -> i32 {
        self.engine.level()
    }
}

/// A typed dense store of `T` records shaped `item_shape`, read and written
/// as `ndarray` arrays. The dtype is checked once, at open.
///
/// ```
/// use ndarray::{Array3, array};
/// use zrecord::{Codec, CreateOptions, DenseStore};
/// let dir = tempfile::tempdir()?;
/// let store = DenseStore::<f32>::create(dir.path().join("x"), &[2, 2], &CreateOptions::new(Codec::Zstd))?;
/// store.append(Array3::<f32>::from_elem((3, 2, 2), 1.5).view())?;
/// let batch = store.gather(&[2i64, 0])?;
/// assert_eq!(batch.shape(), &[2, 2, 2]);
/// assert_eq!(store.get(-1)?, array![[1.5f32, 1.5], [1.5, 1.5]].into_dyn());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DenseStore<T: Element> {
    core: DenseCore,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> DenseStore<T> {
    /// Creates a store of `T` records shaped `item_shape` at `path`.
    pub fn create(
        path: impl AsRef<Path>,
        item_shape: &[u64],
        opts: &CreateOptions,
    ) -> Result<Self> {
        Ok(DenseStore {
            core: DenseCore::create(path, &DType::of::<T>()?, item_shape, opts)?,
            _t: PhantomData,
        })
    }

    /// Opens a store read-write; it must hold `T`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// Opens a store with options; it must hold `T` (whatever `opts.dtype`
    /// says, which is checked too when set).
    pub fn open_with(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<Self> {
        Self::from_core(DenseCore::open(path, opts)?)
    }

    /// Wraps an untyped core whose dtype is `T`'s.
    pub fn from_core(core: DenseCore) -> Result<Self> {
        let want = DType::of::<T>()?;
        if *core.dtype() != want {
            return Err(Error::DTypeMismatch {
                context: store::context(core.path()),
                expected: want.to_string(),
                found: core.dtype().to_string(),
            });
        }
        Ok(DenseStore {
            core,
            _t: PhantomData,
        })
    }

    /// Appends a `(batch, *item_shape)` array (any layout; non-contiguous
    /// views are copied once). A 0-d array is one record of a scalar store.
    /// Returns the index of the first new record.
    pub fn append<D: Dimension>(&self, batch: ArrayView<'_, T, D>) -> Result<u64> {
        let mut shape: Vec<u64> = batch.shape().iter().map(|&d| d as u64).collect();
        if shape.is_empty() && self.core.item_shape.is_empty() {
            shape.push(1);
        }
        self.core.check_batch_shape(&shape)?;
        let data: Cow<'_, [T]> = match batch.as_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(batch.iter().copied().collect()),
        };
        self.core.append_bytes(bytemuck::cast_slice(&data))
    }

    fn batch_shape(&self, n: usize) -> Vec<usize> {
        let mut s = Vec::with_capacity(self.core.item_shape.len() + 1);
        s.push(n);
        s.extend(self.core.item_shape.iter().map(|&d| d as usize));
        s
    }

    /// Gathers records into a new `(batch, *item_shape)` array in standard
    /// layout.
    pub fn gather<'i>(&self, idx: impl Into<Indices<'i>>) -> Result<ArrayD<T>> {
        let positions = resolve_in(&idx.into(), self.len(), self.core.path())?;
        let elems = self.core.record_bytes / std::mem::size_of::<T>();
        let total = positions
            .len()
            .checked_mul(elems)
            .ok_or_else(|| Error::Overflow {
                context: store::context(self.core.path()),
                detail: format!("{} records of {elems} elements", positions.len()),
            })?;
        let mut data: Vec<T> = bytemuck::zeroed_vec(total);
        self.core
            .gather_bytes_into(&positions, bytemuck::cast_slice_mut(&mut data))?;
        Ok(
            ArrayD::from_shape_vec(IxDyn(&self.batch_shape(positions.len())), data)
                .expect("the buffer holds exactly batch * item_shape elements"),
        )
    }

    /// Gathers records into `out`, which must have shape
    /// `(indices.len(), *item_shape)` and standard layout. Allocates nothing.
    pub fn gather_into<D: Dimension>(
        &self,
        indices: &[u64],
        mut out: ArrayViewMut<'_, T, D>,
    ) -> Result<()> {
        let want = self.batch_shape(indices.len());
        if out.shape() != want.as_slice() {
            // The shape found is the caller's output view's, not the
            // store's: say so, or "holds shape" reads as the store's.
            return Err(Error::ShapeMismatch {
                context: format!(
                    "the output view of gather_into from {}",
                    self.core.path().display()
                ),
                expected: format!(
                    "{want:?} ({} of item shape {:?})",
                    crate::error::records(indices.len() as u64),
                    self.core.item_shape
                ),
                found: out.shape().iter().map(|&d| d as u64).collect(),
            });
        }
        let slice = out
            .as_slice_mut()
            .ok_or_else(|| Error::invalid("gather_into needs an output in standard (C) layout"))?;
        self.core
            .gather_bytes_into(indices, bytemuck::cast_slice_mut(slice))
    }

    /// One record, shaped `item_shape`; negative counts from the end.
    pub fn get(&self, i: i64) -> Result<ArrayD<T>> {
        let batch = self.gather(Indices::One(i))?;
        let shape: Vec<usize> = batch.shape()[1..].to_vec();
        Ok(batch
            .into_shape_with_order(IxDyn(&shape))
            .expect("one record reshapes to item_shape"))
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.core.len()
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.core.is_empty()
    }

    /// Deletes records (any index form; see [`DenseCore::delete`]).
    pub fn delete<'i>(&mut self, idx: impl Into<Indices<'i>>) -> Result<()> {
        let positions = resolve_in(&idx.into(), self.len(), self.core.path())?;
        self.core.delete(&positions)
    }

    /// Reclaims the bytes of deleted records.
    pub fn compact(&mut self) -> Result<()> {
        self.core.compact()
    }

    /// Makes every appended record durable.
    pub fn sync(&self) -> Result<()> {
        self.core.sync()
    }

    /// Makes every appended record durable and releases the store (see
    /// [`DenseCore::close`]).
    pub fn close(self) -> Result<()> {
        self.core.close()
    }

    /// When appends through this handle become durable.
    pub fn durability(&self) -> Durability {
        self.core.durability()
    }

    /// Storage usage.
    pub fn stats(&self) -> Stats {
        self.core.stats()
    }

    /// Whether the store has a zstd dictionary.
    pub fn has_dict(&self) -> bool {
        self.core.has_dict()
    }

    /// The store's codec.
    pub fn codec(&self) -> Codec {
        self.core.codec()
    }

    /// The records' dtype (`T`'s).
    pub fn dtype(&self) -> &DType {
        self.core.dtype()
    }

    /// The shape of one record.
    pub fn item_shape(&self) -> &[u64] {
        self.core.item_shape()
    }

    /// The untyped core.
    pub fn core(&self) -> &DenseCore {
        &self.core
    }

    /// Unwraps the untyped core.
    pub fn into_core(self) -> DenseCore {
        self.core
    }
}
