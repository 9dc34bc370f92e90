//! Ragged stores: records of one dtype, each with its own shape of any rank
//! (scalars included).
//!
//! Logical record `i` is the physical pair `2i` (payload, elements in C
//! order) and `2i + 1` (shape: u64 LE rank, then the dims). One append
//! commits all pairs at once. On read, a shape that disagrees with its
//! payload length is corruption, reported with the record's index.
//!
//! [`RaggedCore`] moves bytes with the dtype known at run time;
//! [`RaggedStore<T>`] reads and writes `ndarray` arrays. A gather lands in a
//! [`RaggedBatch`]: all payloads packed in one 8-aligned buffer, reusable
//! from batch to batch.

use std::marker::PhantomData;
use std::path::Path;

use ndarray::{ArrayD, ArrayView, ArrayViewD, Dimension, IxDyn};
use zrecord_engine::typed_header::Kind;
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, Stats, VerifyReport};

use crate::dtype::{DType, Element, check_storable, encode_identity_ragged};
use crate::error::{Error, Result};
use crate::index::{Indices, resolve_in};
use crate::store::{self, OpenOptions};

/// Largest record the format holds (2^31 bytes).
const MAX_RECORD_BYTES: usize = 1 << 31;

/// Where a [`RaggedBatch`]'s payloads start: a multiple of this many bytes
/// in memory, so a record views as any element aligned to at most 64 bytes
/// (a `#[repr(align(16))]` or `align(32)` SIMD type included). Every payload
/// then starts aligned too: payload lengths are multiples of the item size,
/// which is a multiple of the element's alignment.
const PAYLOAD_ALIGN: usize = 64;

/// The bytes to skip at `base` so that `base + pad + head` is a multiple of
/// [`PAYLOAD_ALIGN`]; `base` and `head` are multiples of 8, so `pad` is too.
fn payload_pad(base: usize, head: usize) -> usize {
    (PAYLOAD_ALIGN - (base.wrapping_add(head)) % PAYLOAD_ALIGN) % PAYLOAD_ALIGN
}

/// Most dimensions a ragged record may have: NumPy's limit (`NPY_MAXDIMS`
/// is 64), so every record can be handed to NumPy. Appends refuse more, and
/// [`RaggedCore::verify`] reports a shape record longer than a rank plus 64
/// dims as corrupt.
pub const MAX_RANK: usize = 64;

/// An untyped ragged store: records of one run-time dtype, each with its own
/// shape, in and out as bytes.
///
/// `Send + Sync`: gathers and appends take `&self`; delete and compact take
/// `&mut self`.
#[derive(Debug)]
pub struct RaggedCore {
    engine: Engine,
    dtype: DType,
}

/// Payloads and shape records of one append, packed for the engine.
struct Packed {
    itemsize: usize,
    payload: Vec<u8>,
    payload_offsets: Vec<usize>,
    meta: Vec<u8>,
    meta_offsets: Vec<usize>,
}

impl Packed {
    fn new(itemsize: usize) -> Packed {
        Packed {
            itemsize,
            payload: Vec::new(),
            payload_offsets: vec![0],
            meta: Vec::new(),
            meta_offsets: vec![0],
        }
    }

    fn len(&self) -> usize {
        self.payload_offsets.len() - 1
    }

    /// Validates one record's shape against its byte length, then records
    /// its shape; the payload bytes were already pushed by the caller.
    fn finish(&mut self, shape: &[u64], start: usize) -> Result<()> {
        let position = self.len();
        if shape.len() > MAX_RANK {
            self.payload.truncate(start);
            return Err(Error::RankTooHigh {
                position,
                rank: shape.len(),
            });
        }
        let found = self.payload.len() - start;
        let expected = store::nbytes(shape, self.itemsize);
        if expected != Some(found as u64) {
            self.payload.truncate(start);
            return Err(Error::RecordSize {
                position,
                shape: shape.to_vec(),
                itemsize: self.itemsize,
                expected,
                found,
            });
        }
        if found == 0 {
            self.payload.truncate(start);
            return Err(Error::EmptyRecord { position });
        }
        if found > MAX_RECORD_BYTES {
            self.payload.truncate(start);
            return Err(Error::invalid(format!(
                "record {position} of the batch is {found} bytes, over the 2^31-byte record limit"
            )));
        }
        self.payload_offsets.push(self.payload.len());
        self.meta
            .extend_from_slice(&(shape.len() as u64).to_le_bytes());
        for d in shape {
            self.meta.extend_from_slice(&d.to_le_bytes());
        }
        self.meta_offsets.push(self.meta.len());
        Ok(())
    }

    fn push(&mut self, shape: &[u64], bytes: &[u8]) -> Result<()> {
        let start = self.payload.len();
        self.payload.extend_from_slice(bytes);
        self.finish(shape, start)
    }

    fn commit(&self, engine: &Engine) -> Result<u64> {
        if self.len() == 0 {
            return Err(Error::invalid(format!(
                "append to {} needs at least one record",
                engine.path().display()
            )));
        }
        let first = engine.append_paired(
            &self.payload,
            &self.payload_offsets,
            &self.meta,
            &self.meta_offsets,
        )?;
        Ok(first / 2)
    }
}

/// Names the logical record in an engine error about one physical record:
/// the engine numbers a ragged store's payloads and shape records apart
/// (record `i` is the pair `2i`, `2i + 1`), so its "record 6" is the payload
/// of the caller's record 3. The physical number stays as detail.
pub(crate) fn logical_record_error(e: Error) -> Error {
    match e {
        Error::Engine(zrecord_engine::Error::Corrupted {
            file,
            record: Some(phys),
            detail,
        }) => {
            let part = if phys % 2 == 0 {
                "payload"
            } else {
                "shape record"
            };
            Error::Engine(zrecord_engine::Error::Corrupted {
                file,
                record: Some(phys / 2),
                detail: format!("{part} (physical record {phys}): {detail}"),
            })
        }
        other => other,
    }
}

impl RaggedCore {
    /// Creates a ragged store of `dtype` records in the directory `path`
    /// (created if missing; it must hold no files).
    ///
    /// `dtype` is checked and normalised as in
    /// [`DenseCore::create`](crate::DenseCore::create), so the store reopens
    /// with a dtype equal to [`dtype`](Self::dtype).
    pub fn create(
        path: impl AsRef<Path>,
        dtype: &DType,
        opts: &CreateOptions,
    ) -> Result<RaggedCore> {
        let path = path.as_ref();
        let dtype = check_storable(dtype)?;
        if dtype.itemsize() == 0 {
            return Err(Error::unsupported(
                dtype.to_string(),
                "zero-size dtypes cannot be stored",
            ));
        }
        store::check_create_options(opts)?;
        let engine =
            store::create_store(path, Kind::Ragged, 0, encode_identity_ragged(&dtype), opts)?;
        Ok(RaggedCore { engine, dtype })
    }

    /// Opens the ragged store at `path`, checking `opts`' dtype and codec
    /// expectations (`opts.item_shape` is ignored: ragged stores have none).
    pub fn open(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<RaggedCore> {
        let path = path.as_ref();
        let opened = store::open_store(path, Kind::Ragged, opts)?;
        if opened.engine.len() % 2 != 0 {
            return Err(Error::BadStore {
                file: path.join("meta.zr"),
                detail: format!(
                    "a ragged store holds record pairs, but the length is {}",
                    opened.engine.len()
                ),
            });
        }
        Ok(RaggedCore {
            engine: opened.engine,
            dtype: opened.identity.dtype,
        })
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        self.engine.path()
    }

    /// Number of (logical) records.
    pub fn len(&self) -> u64 {
        self.engine.len() / 2
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records' dtype.
    pub fn dtype(&self) -> &DType {
        &self.dtype
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

    /// Appends records given as (shape, payload bytes) in one commit.
    /// Each payload must hold exactly `product(shape) * itemsize` bytes and
    /// at least one element, and each shape at most [`MAX_RANK`] dims; the
    /// first offending record fails the whole append, named by its
    /// position. Returns the first new index.
    pub fn append_records<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a [u64], &'a [u8])>,
    ) -> Result<u64> {
        let mut packed = Packed::new(self.dtype.itemsize());
        for (shape, bytes) in records {
            packed.push(shape, bytes)?;
        }
        packed.commit(&self.engine)
    }

    /// Appends raw byte records (pre-encoded images, text) to a `|u1`
    /// store; record k has shape `[len_k]`.
    pub fn append_bytes<'a>(&self, records: impl IntoIterator<Item = &'a [u8]>) -> Result<u64> {
        if self.dtype != u8::dtype() {
            return Err(Error::DTypeMismatch {
                context: format!("byte records appended to {}", self.path().display()),
                expected: self.dtype.to_string(),
                found: u8::dtype().to_string(),
            });
        }
        let mut packed = Packed::new(1);
        for r in records {
            packed.push(&[r.len() as u64], r)?;
        }
        packed.commit(&self.engine)
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

    /// Gathers the records at `indices` into `out`, replacing its contents
    /// and reusing its capacity. On error `out` is left empty, as
    /// [`RaggedBatch::new`] makes it (capacity kept): never half-filled.
    pub fn gather_into(&self, indices: &[u64], out: &mut RaggedBatch) -> Result<()> {
        let res = self.fill_batch(indices, out);
        if res.is_err() {
            out.reset();
        }
        res
    }

    /// [`Self::gather_into`], which may leave `out` half-filled on error
    /// (offsets pushed for records whose payloads were never placed).
    fn fill_batch(&self, indices: &[u64], out: &mut RaggedBatch) -> Result<()> {
        self.check_range(indices)?;
        let n = indices.len();
        out.clear(&self.dtype);
        let corrupted = |k: usize, detail: String| Error::Corrupted {
            path: self.path().to_path_buf(),
            index: indices[k],
            detail,
        };
        // Shape records first, then payloads: shape records are multiples
        // of 8 bytes (checked from the table before any I/O), so every
        // shape record and the payload section start 8-aligned.
        let RaggedBatch {
            buf,
            payload_start,
            data_len,
            offsets,
            dims,
            dim_offsets,
            phys,
            goffs,
            ..
        } = out;
        phys.clear();
        phys.extend(indices.iter().map(|&i| 2 * i + 1));
        phys.extend(indices.iter().map(|&i| 2 * i));
        // Bytes skipped at the buffer's start so the payloads start
        // PAYLOAD_ALIGN-aligned in memory (a multiple of 8).
        let mut pad = 0usize;
        let packed = self.engine.gather_packed(phys, goffs, |goffs| {
            for (k, w) in goffs[..=n].windows(2).enumerate() {
                let l = w[1] - w[0];
                if l < 8 || l % 8 != 0 {
                    return Err(corrupted(
                        k,
                        format!("shape record of {l} bytes is not a u64 rank plus dims"),
                    ));
                }
            }
            let at = goffs[2 * n];
            let words = (at + PAYLOAD_ALIGN).div_ceil(8);
            if buf.len() < words {
                buf.resize(words, 0);
            }
            let bytes = bytemuck::cast_slice_mut::<u64, u8>(buf);
            pad = payload_pad(bytes.as_ptr() as usize, goffs[n]);
            Ok(&mut bytes[pad..pad + at])
        });
        packed.map_err(logical_record_error)?;
        let itemsize = self.dtype.itemsize() as u64;
        let start = goffs[n];
        for k in 0..n {
            // Aligned: every shape record starts and ends on a multiple of 8
            // (and so does `pad`).
            let rec = &buf[(pad + goffs[k]) / 8..(pad + goffs[k + 1]) / 8];
            let rank = u64::from_le(rec[0]);
            let have = rec.len() - 1;
            if rank != have as u64 {
                return Err(corrupted(
                    k,
                    format!("shape record claims rank {rank} but holds {have} dims"),
                ));
            }
            let dims_at = dims.len();
            dims.extend(rec[1..].iter().map(|&d| u64::from_le(d)));
            let shape = &dims[dims_at..];
            let payload = (goffs[n + k + 1] - goffs[n + k]) as u64;
            let expected = match shape {
                [d] => d.checked_mul(itemsize),
                _ => store::nbytes(shape, itemsize as usize),
            };
            if expected != Some(payload) {
                return Err(corrupted(
                    k,
                    format!(
                        "shape {shape:?} of {itemsize}-byte items needs {}, payload decodes to {payload}",
                        store::show_nbytes(expected)
                    ),
                ));
            }
            dim_offsets.push(dims.len());
            offsets.push(goffs[n + k + 1] - start);
        }
        *payload_start = pad + start;
        *data_len = goffs[2 * n] - start;
        Ok(())
    }

    /// Checks the whole store: everything [`Engine::verify`] checks (every
    /// entry inside the frontier, no shared bytes, every frame decodes to
    /// its recorded length) and, for every record, that its shape record is
    /// a u64 rank plus that many dims (at most [`MAX_RANK`], the limit
    /// appends enforce) and that the shape agrees with the
    /// payload's length. Reports every bad record by its logical index;
    /// `Err` only when the check itself cannot run.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut rep = self.engine.verify()?;
        for (i, msg) in rep.bad.iter_mut() {
            let part = if *i % 2 == 0 {
                "payload"
            } else {
                "shape record"
            };
            *msg = format!("{part}: {msg}");
            *i /= 2;
        }
        let n = self.len();
        let itemsize = self.dtype.itemsize();
        const BATCH: u64 = 4096;
        let mut shape_buf: Vec<u8> = Vec::new();
        for start in (0..n).step_by(BATCH as usize) {
            let logical: Vec<u64> = (start..n.min(start + BATCH)).collect();
            let phys: Vec<u64> = logical.iter().flat_map(|&i| [2 * i + 1, 2 * i]).collect();
            let mut lens = vec![0u64; phys.len()];
            self.engine.record_lengths(&phys, &mut lens, None)?;
            // Records whose shape record has a plausible length, with the
            // payload length and where their shape lands in `shape_buf`.
            let mut checked: Vec<(u64, u64)> = Vec::with_capacity(logical.len());
            let mut offsets = vec![0usize];
            for (k, &i) in logical.iter().enumerate() {
                let (shape_len, payload_len) = (lens[2 * k], lens[2 * k + 1]);
                if shape_len < 8 || shape_len % 8 != 0 || shape_len > 8 * (MAX_RANK as u64 + 1) {
                    rep.bad.push((
                        i,
                        format!(
                            "shape record of {shape_len} bytes is not a u64 rank plus at most {MAX_RANK} dims"
                        ),
                    ));
                    continue;
                }
                checked.push((i, payload_len));
                offsets.push(offsets[offsets.len() - 1] + shape_len as usize);
            }
            // The batch's shape records in one gather; if one fails, each
            // is read alone, to name the unreadable ones.
            shape_buf.resize(offsets[offsets.len() - 1], 0);
            let shape_idx: Vec<u64> = checked.iter().map(|&(i, _)| 2 * i + 1).collect();
            let whole = self
                .engine
                .gather_var(&shape_idx, &mut shape_buf, &offsets)
                .is_ok();
            for (k, &(i, payload_len)) in checked.iter().enumerate() {
                let shape = &mut shape_buf[offsets[k]..offsets[k + 1]];
                if !whole
                    && let Err(e) = self
                        .engine
                        .gather_var(&[2 * i + 1], shape, &[0, shape.len()])
                {
                    let e = logical_record_error(e.into());
                    let e = crate::error::chain(&e);
                    rep.bad.push((i, format!("shape record unreadable: {e}")));
                    continue;
                }
                let word = |j: usize| {
                    u64::from_le_bytes(shape[8 * j..8 * j + 8].try_into().expect("8 bytes"))
                };
                let have = shape.len() / 8 - 1;
                if word(0) != have as u64 {
                    rep.bad.push((
                        i,
                        format!("shape record claims rank {} but holds {have} dims", word(0)),
                    ));
                    continue;
                }
                let dims: Vec<u64> = (1..=have).map(word).collect();
                let expected = store::nbytes(&dims, itemsize);
                if expected != Some(payload_len) {
                    rep.bad.push((
                        i,
                        format!(
                            "shape {dims:?} of {itemsize}-byte items needs {}, payload decodes to {payload_len}",
                            store::show_nbytes(expected)
                        ),
                    ));
                }
            }
        }
        rep.bad.sort_by_key(|(i, _)| *i);
        Ok(rep)
    }

    /// Deletes the records at `indices` (duplicates tolerated); both
    /// physical records of each pair move together. Survivors may change
    /// index.
    pub fn delete(&mut self, indices: &[u64]) -> Result<()> {
        self.check_range(indices)?;
        Ok(self.engine.delete_groups(indices, 2)?)
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

    /// Storage usage; `records` counts logical records, the byte figures
    /// include the shape records.
    pub fn stats(&self) -> Stats {
        let mut s = self.engine.stats();
        s.records /= 2;
        s
    }

    /// The zstd level appends through this handle compress at (0 for a raw
    /// store); see [`DenseCore::level`](crate::DenseCore::level).
    pub fn level(&self) -> i32 {
        self.engine.level()
    }

    /// The byte engine underneath (it counts physical records: payload and
    /// shape pairs). Not public: a write through it that is not a pair makes
    /// the store unreadable.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// A gathered ragged batch: every payload packed in one buffer, starting
/// 64-aligned, with per-record byte offsets and shapes. Reuse one across
/// gathers to avoid allocating. [`Default`] is [`RaggedBatch::new`].
#[derive(Debug)]
pub struct RaggedBatch {
    /// Padding, shape records, then payloads from `payload_start`, which is
    /// [`PAYLOAD_ALIGN`]-aligned in memory.
    buf: Vec<u64>,
    payload_start: usize,
    data_len: usize,
    offsets: Vec<usize>,
    dims: Vec<u64>,
    dim_offsets: Vec<usize>,
    dtype: Option<DType>,
    phys: Vec<u64>,
    goffs: Vec<usize>,
}

impl RaggedBatch {
    /// An empty batch: no records, no dtype, `offsets() == [0]`.
    pub fn new() -> RaggedBatch {
        RaggedBatch {
            buf: Vec::new(),
            payload_start: 0,
            data_len: 0,
            offsets: vec![0],
            dims: Vec::new(),
            dim_offsets: vec![0],
            dtype: None,
            phys: Vec::new(),
            goffs: Vec::new(),
        }
    }

    /// An empty batch that gathers into `words` (a buffer that
    /// [`into_data`](Self::into_data) gave up, say): a gather overwrites the
    /// words it uses and grows the buffer only when a batch does not fit,
    /// so recycling buffers saves both the allocation and its zeroing.
    pub fn with_buffer(words: Vec<u64>) -> RaggedBatch {
        RaggedBatch {
            buf: words,
            ..RaggedBatch::new()
        }
    }

    /// Back to what [`RaggedBatch::new`] makes, keeping the capacity.
    fn reset(&mut self) {
        self.payload_start = 0;
        self.data_len = 0;
        self.offsets.clear();
        self.offsets.push(0);
        self.dims.clear();
        self.dim_offsets.clear();
        self.dim_offsets.push(0);
        self.dtype = None;
    }

    /// Empty, ready for records of `dtype` (kept, not cloned, when it is
    /// already the batch's).
    fn clear(&mut self, dtype: &DType) {
        let same = self.dtype.take().filter(|d| d == dtype);
        self.reset();
        self.dtype = Some(same.unwrap_or_else(|| dtype.clone()));
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Whether the batch holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dtype of the store it was gathered from (`None` before the first
    /// gather).
    pub fn dtype(&self) -> Option<&DType> {
        self.dtype.as_ref()
    }

    /// Shape of record `k`. Panics if `k >= len()`, like slice indexing.
    pub fn shape(&self, k: usize) -> &[u64] {
        &self.dims[self.dim_offsets[k]..self.dim_offsets[k + 1]]
    }

    /// Payload bytes of record `k`. Panics if `k >= len()`.
    pub fn bytes(&self, k: usize) -> &[u8] {
        &self.data()[self.offsets[k]..self.offsets[k + 1]]
    }

    /// All payloads, packed in order; starts 64-aligned in memory, so
    /// [`view`](Self::view) works for any element aligned to at most 64
    /// bytes.
    pub fn data(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.buf)[self.payload_start..self.payload_start + self.data_len]
    }

    /// Byte offsets of the records in [`data`](Self::data) (`len() + 1`).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Every record's dims, concatenated.
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// Where each record's dims start in [`dims`](Self::dims) (`len() + 1`).
    pub fn dim_offsets(&self) -> &[usize] {
        &self.dim_offsets
    }

    /// Gives up the buffer the payloads live in, without copying them: its
    /// words and the byte range of [`data`](Self::data) within them (which
    /// starts 64-aligned in memory; moving the `Vec` does not move its
    /// heap buffer). For handing a batch's payloads to an owner that
    /// outlives the batch, such as a NumPy array, where a copy would cost
    /// as much as gathering raw records.
    ///
    /// ```
    /// # use zrecord::{Codec, CreateOptions, RaggedBatch, RaggedStore};
    /// # let dir = tempfile::tempdir()?;
    /// let store = RaggedStore::<i32>::create(dir.path().join("s"), &CreateOptions::new(Codec::Zstd))?;
    /// let rec = ndarray::arr1(&[1, 2, 3]);
    /// store.append([rec.view()])?;
    /// let mut batch = RaggedBatch::new();
    /// store.core().gather_into(&[0], &mut batch)?;
    /// let (words, range) = batch.into_data();
    /// let bytes: &[u8] = bytemuck::cast_slice(&words);
    /// assert_eq!(&bytes[range], bytemuck::cast_slice::<i32, u8>(&[1, 2, 3]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_data(self) -> (Vec<u64>, std::ops::Range<usize>) {
        let range = self.payload_start..self.payload_start + self.data_len;
        (self.buf, range)
    }

    /// Record `k` as a typed view, without copying. Errors if `T` is not the
    /// batch's dtype or `k >= len()`.
    pub fn view<T: Element>(&self, k: usize) -> Result<ArrayViewD<'_, T>> {
        if k >= self.len() {
            return Err(Error::invalid(format!(
                "record {k} is out of range for a ragged batch of {}",
                crate::error::records(self.len() as u64)
            )));
        }
        let dt = DType::of::<T>()?;
        if self.dtype.as_ref() != Some(&dt) {
            return Err(Error::DTypeMismatch {
                context: "ragged batch".into(),
                expected: dt.to_string(),
                found: self
                    .dtype
                    .as_ref()
                    .map_or_else(|| "nothing".into(), DType::to_string),
            });
        }
        let elems: &[T] = bytemuck::try_cast_slice(self.bytes(k))
            .map_err(|e| Error::invalid(format!("record {k} cannot be viewed: {e}")))?;
        let shape: Vec<usize> = self.shape(k).iter().map(|&d| d as usize).collect();
        ArrayViewD::from_shape(IxDyn(&shape), elems)
            .map_err(|e| Error::invalid(format!("record {k} cannot be viewed: {e}")))
    }
}

/// A copy whose payloads start 64-aligned in its own buffer, as a gathered
/// batch's do (a plain copy of the buffer would move them off the boundary).
impl Clone for RaggedBatch {
    fn clone(&self) -> Self {
        let data = self.data();
        let mut buf = vec![0u64; (data.len() + PAYLOAD_ALIGN).div_ceil(8)];
        let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut buf);
        let pad = payload_pad(bytes.as_ptr() as usize, 0);
        bytes[pad..pad + data.len()].copy_from_slice(data);
        RaggedBatch {
            buf,
            payload_start: pad,
            data_len: self.data_len,
            offsets: self.offsets.clone(),
            dims: self.dims.clone(),
            dim_offsets: self.dim_offsets.clone(),
            dtype: self.dtype.clone(),
            phys: Vec::new(),
            goffs: Vec::new(),
        }
    }
}

/// The same as [`RaggedBatch::new`]: `offsets()` and `dim_offsets()` hold
/// their `len() + 1` entries from the start.
impl Default for RaggedBatch {
    fn default() -> Self {
        RaggedBatch::new()
    }
}

/// A typed ragged store of `T` records, each with its own shape, read and
/// written as `ndarray` arrays. The dtype is checked once, at open.
///
/// ```
/// use ndarray::{arr0, array};
/// use zrecord::{Codec, CreateOptions, RaggedStore};
/// let dir = tempfile::tempdir()?;
/// let store = RaggedStore::<i32>::create(dir.path().join("r"), &CreateOptions::new(Codec::Zstd))?;
/// let a = array![[1, 2, 3], [4, 5, 6]].into_dyn();
/// let b = arr0(7).into_dyn();
/// store.append([a.view(), b.view()])?;
/// let got = store.gather(..)?;
/// assert_eq!(got, vec![a, b]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RaggedStore<T: Element> {
    core: RaggedCore,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> RaggedStore<T> {
    /// Creates a ragged store of `T` records at `path`.
    pub fn create(path: impl AsRef<Path>, opts: &CreateOptions) -> Result<Self> {
        Ok(RaggedStore {
            core: RaggedCore::create(path, &DType::of::<T>()?, opts)?,
            _t: PhantomData,
        })
    }

    /// Opens a store read-write; it must hold `T`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// Opens a store with options; it must hold `T`.
    pub fn open_with(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<Self> {
        Self::from_core(RaggedCore::open(path, opts)?)
    }

    /// Wraps an untyped core whose dtype is `T`'s.
    pub fn from_core(core: RaggedCore) -> Result<Self> {
        let want = DType::of::<T>()?;
        if *core.dtype() != want {
            return Err(Error::DTypeMismatch {
                context: store::context(core.path()),
                expected: want.to_string(),
                found: core.dtype().to_string(),
            });
        }
        Ok(RaggedStore {
            core,
            _t: PhantomData,
        })
    }

    /// Appends records (any rank up to [`MAX_RANK`], any layout; 0-d arrays
    /// are scalars) in one commit. Returns the index of the first new record.
    pub fn append<'a, D, I>(&self, records: I) -> Result<u64>
    where
        D: Dimension,
        I: IntoIterator<Item = ArrayView<'a, T, D>>,
    {
        let mut packed = Packed::new(std::mem::size_of::<T>());
        let mut shape = Vec::new();
        for r in records {
            shape.clear();
            shape.extend(r.shape().iter().map(|&d| d as u64));
            let start = packed.payload.len();
            match r.as_slice() {
                Some(s) => packed.payload.extend_from_slice(bytemuck::cast_slice(s)),
                None => {
                    for x in r.iter() {
                        packed.payload.extend_from_slice(bytemuck::bytes_of(x));
                    }
                }
            }
            packed.finish(&shape, start)?;
        }
        packed.commit(&self.core.engine)
    }

    /// Gathers records as arrays of their own shapes.
    pub fn gather<'i>(&self, idx: impl Into<Indices<'i>>) -> Result<Vec<ArrayD<T>>> {
        let positions = resolve_in(&idx.into(), self.len(), self.core.path())?;
        let mut batch = RaggedBatch::new();
        self.core.gather_into(&positions, &mut batch)?;
        // Copied out as T (alignment-free), not viewed: an element aligned
        // past the batch's 64 bytes still gathers.
        (0..batch.len())
            .map(|k| {
                let shape: Vec<usize> = batch.shape(k).iter().map(|&d| d as usize).collect();
                let elems: Vec<T> = bytemuck::pod_collect_to_vec(batch.bytes(k));
                ArrayD::from_shape_vec(IxDyn(&shape), elems).map_err(|e| {
                    Error::invalid(format!("record {} cannot be shaped: {e}", positions[k]))
                })
            })
            .collect()
    }

    /// Gathers into a reusable batch (see [`RaggedCore::gather_into`]).
    pub fn gather_into(&self, indices: &[u64], out: &mut RaggedBatch) -> Result<()> {
        self.core.gather_into(indices, out)
    }

    /// One record; negative counts from the end.
    pub fn get(&self, i: i64) -> Result<ArrayD<T>> {
        Ok(self
            .gather(Indices::One(i))?
            .pop()
            .expect("one index gathers one record"))
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.core.len()
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.core.is_empty()
    }

    /// Deletes records (any index form; see [`RaggedCore::delete`]).
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
    /// [`RaggedCore::close`]).
    pub fn close(self) -> Result<()> {
        self.core.close()
    }

    /// When appends through this handle become durable.
    pub fn durability(&self) -> Durability {
        self.core.durability()
    }

    /// Storage usage (logical records).
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

    /// The untyped core.
    pub fn core(&self) -> &RaggedCore {
        &self.core
    }

    /// Unwraps the untyped core.
    pub fn into_core(self) -> RaggedCore {
        self.core
    }
}

impl RaggedStore<u8> {
    /// Appends raw byte records (pre-encoded images, text), each of shape
    /// `[len]`, in one commit.
    pub fn append_bytes<'a>(&self, records: impl IntoIterator<Item = &'a [u8]>) -> Result<u64> {
        self.core.append_bytes(records)
    }
}
