//! A gathered batch and the pool its buffers come from.

use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;
use ndarray::{ArrayViewD, IxDyn};
use zrecord::{AlignedBuf, DType, Element, RaggedBatch};

use crate::error::{Error, Result};
use crate::stream::Stream;

/// What every batch of one loader shares: the stream names and stores.
pub(crate) struct Layout {
    pub(crate) names: Vec<String>,
    pub(crate) streams: Vec<Stream>,
}

/// The loader's free batch buffers. A stack, not a queue: the producer takes
/// the buffer freed most recently, whose pages are the likeliest to still be
/// in cache (on a box with a large L3, cycling through every buffer in turn
/// costs ~20% of loader throughput). One token per free slot on `tokens`
/// lets the producer wait for a slot alongside its shutdown signal.
pub(crate) struct Pool {
    pub(crate) stack: Mutex<Vec<Slot>>,
    pub(crate) tokens: Sender<()>,
    /// Slots made since the loader started (its pool's first ones included).
    pub(crate) made: std::sync::atomic::AtomicUsize,
}

impl Pool {
    pub(crate) fn put(&self, slot: Slot) {
        self.stack
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(slot);
        // The token channel is unbounded; if the loader is gone the buffers
        // are simply freed with the pool.
        let _ = self.tokens.try_send(());
    }

    /// Takes the most recently freed slot. Call only after receiving a
    /// token, which guarantees one is there.
    pub(crate) fn take(&self) -> Option<Slot> {
        self.stack.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }
}

/// The buffers of one batch, recycled through the loader's pool so that a
/// steady-state loader allocates (and page-faults) nothing per batch.
pub(crate) struct Slot {
    pub(crate) indices: Vec<u64>,
    pub(crate) columns: Vec<Column>,
}

pub(crate) enum Column {
    /// `buf` holds `shape[0]` records back to back; page-aligned, so typed
    /// views of any element type are aligned too.
    Dense {
        buf: AlignedBuf,
        shape: Vec<usize>,
    },
    Ragged(RaggedBatch),
}

impl Slot {
    pub(crate) fn new() -> Slot {
        Slot {
            indices: Vec::new(),
            columns: Vec::new(),
        }
    }

    /// A slot with every column sized for batches of `n` records, so that a
    /// batch too large to allocate is found when the loader is built rather
    /// than in its producer. On error, the position of the stream that
    /// failed and why.
    pub(crate) fn sized(
        layout: &Layout,
        n: usize,
    ) -> std::result::Result<Slot, (usize, zrecord::Error)> {
        Ok(Slot {
            indices: Vec::new(),
            columns: Slot::columns(layout, n)?,
        })
    }

    fn columns(
        layout: &Layout,
        n: usize,
    ) -> std::result::Result<Vec<Column>, (usize, zrecord::Error)> {
        layout
            .streams
            .iter()
            .enumerate()
            .map(|(i, s)| match s {
                Stream::Dense(d) => {
                    let mut shape = Vec::with_capacity(1 + d.item_shape().len());
                    shape.push(n);
                    shape.extend(d.item_shape().iter().map(|&x| x as usize));
                    let buf = dense_buf(n, d.record_bytes()).map_err(|e| (i, e))?;
                    Ok(Column::Dense { buf, shape })
                }
                Stream::Ragged(_) => Ok(Column::Ragged(RaggedBatch::new())),
            })
            .collect()
    }

    /// Gathers every stream at `indices` into this slot's buffers, sizing
    /// them on first use. On error, names the stream that failed.
    pub(crate) fn fill(&mut self, layout: &Layout, indices: &[u64], step: u64) -> Result<()> {
        let failed = |i: usize, source| Error::Store {
            step,
            stream: layout.names[i].clone(),
            source,
        };
        self.indices.clear();
        // A slot made after the loader was built has no index buffer yet:
        // one the allocator refuses is an error, not an abort.
        if self.indices.try_reserve_exact(indices.len()).is_err() {
            return Err(Error::Config {
                option: "batch_size",
                detail: format!(
                    "step {step}: a batch of {} indices ({} bytes) cannot be allocated",
                    indices.len(),
                    indices.len() as u128 * 8
                ),
            });
        }
        self.indices.extend_from_slice(indices);
        if self.columns.is_empty() {
            self.columns = Slot::columns(layout, indices.len()).map_err(|(i, e)| failed(i, e))?;
        }
        for (i, (stream, column)) in layout.streams.iter().zip(&mut self.columns).enumerate() {
            let res = match (stream, column) {
                (Stream::Dense(d), Column::Dense { buf, shape }) => {
                    if shape[0] != indices.len() {
                        *buf =
                            dense_buf(indices.len(), d.record_bytes()).map_err(|e| failed(i, e))?;
                        shape[0] = indices.len();
                    }
                    d.gather_bytes_into(indices, buf)
                }
                (Stream::Ragged(r), Column::Ragged(out)) => r.gather_into(indices, out),
                _ => unreachable!("a slot's columns follow the loader's streams"),
            };
            res.map_err(|e| failed(i, e))?;
        }
        Ok(())
    }
}

/// A zeroed, page-aligned buffer for `n` dense records of `record_bytes`;
/// an error, not an abort, when the size overflows or cannot be allocated.
fn dense_buf(n: usize, record_bytes: usize) -> zrecord::Result<AlignedBuf> {
    let bytes = n
        .checked_mul(record_bytes)
        .ok_or_else(|| zrecord::Error::Overflow {
            context: "a batch buffer".into(),
            detail: format!("{n} records of {record_bytes} bytes overflow usize"),
        })?;
    Ok(AlignedBuf::try_zeroed(bytes)?)
}

/// One untyped dense column of a batch: what the Python binding hands to
/// NumPy.
#[derive(Debug, Clone, Copy)]
pub struct DenseColumn<'a> {
    /// Element type.
    pub dtype: &'a DType,
    /// `(batch, *item_shape)`.
    pub shape: &'a [usize],
    /// The records, C order, back to back.
    pub bytes: &'a [u8],
}

/// A gathered batch: every stream at the same indices.
///
/// Its buffers belong to the loader's pool and go back there when the batch
/// is dropped, so hold a batch only as long as you need it (a transform that
/// turns it into tensors drops it right away).
pub struct Batch {
    pub(crate) step: u64,
    pub(crate) slot: Option<Slot>,
    pub(crate) layout: Arc<Layout>,
    pub(crate) pool: Arc<Pool>,
}

impl Batch {
    fn slot(&self) -> &Slot {
        self.slot.as_ref().expect("a live batch owns its slot")
    }

    /// The step this batch was drawn at.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The record indices every stream was gathered at.
    pub fn indices(&self) -> &[u64] {
        &self.slot().indices
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.slot().indices.len()
    }

    /// True when the batch holds no record (never, for a built loader).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stream names, in the order the loader was built with.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.layout.names.iter().map(String::as_str)
    }

    fn column(&self, name: &str) -> Result<(usize, &Column)> {
        match self.layout.names.iter().position(|n| n == name) {
            Some(i) => Ok((i, &self.slot().columns[i])),
            None => Err(Error::NoSuchStream {
                name: name.to_owned(),
                available: self.layout.names.clone(),
            }),
        }
    }

    fn wrong(&self, i: usize, asked: String) -> Error {
        Error::WrongType {
            name: self.layout.names[i].clone(),
            stored: self.layout.streams[i].describe(),
            asked,
        }
    }

    /// The dense stream `name` as an untyped column.
    pub fn dense_bytes(&self, name: &str) -> Result<DenseColumn<'_>> {
        let (i, col) = self.column(name)?;
        match col {
            Column::Dense { buf, shape } => Ok(DenseColumn {
                dtype: self.layout.streams[i].dtype(),
                shape,
                bytes: buf,
            }),
            Column::Ragged(_) => Err(self.wrong(i, "a dense stream".into())),
        }
    }

    /// The dense stream `name` as a `(B, *item_shape)` array view of `T`.
    ///
    /// # Errors
    /// [`Error::NoSuchStream`], or [`Error::WrongType`] if the stream is
    /// ragged or its dtype is not `T`'s.
    pub fn dense<T: Element>(&self, name: &str) -> Result<ArrayViewD<'_, T>> {
        let (i, col) = self.column(name)?;
        let want = DType::of::<T>().map_err(|e| self.wrong(i, e.to_string()))?;
        let asked = || format!("a dense stream of {}", want.to_numpy_str());
        let Column::Dense { buf, shape } = col else {
            return Err(self.wrong(i, asked()));
        };
        if self.layout.streams[i].dtype() != &want {
            return Err(self.wrong(i, asked()));
        }
        let data: &[T] = bytemuck::try_cast_slice(buf).map_err(|_| self.wrong(i, asked()))?;
        ArrayViewD::from_shape(IxDyn(shape), data).map_err(|_| self.wrong(i, asked()))
    }

    /// The ragged stream `name` as a gathered [`RaggedBatch`] (untyped).
    pub fn ragged_batch(&self, name: &str) -> Result<&RaggedBatch> {
        let (i, col) = self.column(name)?;
        match col {
            Column::Ragged(r) => Ok(r),
            Column::Dense { .. } => Err(self.wrong(i, "a ragged stream".into())),
        }
    }

    /// The ragged stream `name` as one array view of `T` per record, each
    /// with the shape it was written with.
    ///
    /// # Errors
    /// [`Error::NoSuchStream`], or [`Error::WrongType`] if the stream is
    /// dense or its dtype is not `T`'s.
    pub fn ragged<T: Element>(&self, name: &str) -> Result<Vec<ArrayViewD<'_, T>>> {
        let (i, col) = self.column(name)?;
        let want = DType::of::<T>().map_err(|e| self.wrong(i, e.to_string()))?;
        let asked = || format!("a ragged stream of {}", want.to_numpy_str());
        let Column::Ragged(r) = col else {
            return Err(self.wrong(i, asked()));
        };
        if self.layout.streams[i].dtype() != &want {
            return Err(self.wrong(i, asked()));
        }
        (0..r.len())
            .map(|k| {
                let data: &[T] =
                    bytemuck::try_cast_slice(r.bytes(k)).map_err(|_| self.wrong(i, asked()))?;
                let shape: Vec<usize> = r.shape(k).iter().map(|&d| d as usize).collect();
                ArrayViewD::from_shape(IxDyn(&shape), data).map_err(|_| self.wrong(i, asked()))
            })
            .collect()
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool.put(slot);
        }
    }
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("step", &self.step)
            .field("len", &self.len())
            .field("streams", &self.layout.names)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: batch buffers came from `AlignedBuf::zeroed`, which
    /// aborts (or panics) on a size it cannot allocate, and their size was
    /// an unchecked product.
    #[test]
    fn a_dense_buffer_that_cannot_be_had_is_an_error() {
        match dense_buf(usize::MAX, 2) {
            Err(zrecord::Error::Overflow { detail, .. }) => {
                assert!(detail.contains(&usize::MAX.to_string()), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        match dense_buf(1 << 32, 1 << 26) {
            Err(e @ zrecord::Error::Engine(_)) => {
                assert!(e.to_string().contains("cannot allocate"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(dense_buf(3, 5).unwrap().len(), 15);
    }
}
