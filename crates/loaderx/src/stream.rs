//! Named streams: the stores a loader gathers from.

use std::sync::Arc;

use zrecord::{DType, DenseCore, DenseStore, Element, RaggedCore, RaggedStore};

/// One store a [`crate::DataLoader`] gathers from, dense or ragged, of any
/// dtype. Cheap to clone (the store is shared behind an `Arc`), so one store
/// can feed several loaders. `Debug` shows the store's path, dtype, item
/// shape (dense) and length.
#[derive(Clone)]
pub enum Stream {
    /// Fixed-shape records: a batch is one `(B, *item_shape)` array.
    Dense(Arc<DenseCore>),
    /// Variable-shape records: a batch is one array per record.
    Ragged(Arc<RaggedCore>),
}

impl Stream {
    /// Records in the stream.
    pub fn len(&self) -> u64 {
        match self {
            Stream::Dense(s) => s.len(),
            Stream::Ragged(s) => s.len(),
        }
    }

    /// True when the stream holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type of the stream.
    pub fn dtype(&self) -> &DType {
        match self {
            Stream::Dense(s) => s.dtype(),
            Stream::Ragged(s) => s.dtype(),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Stream::Dense(s) => format!(
                "a dense stream of {} with item shape {:?}",
                s.dtype().to_numpy_str(),
                s.item_shape()
            ),
            Stream::Ragged(s) => format!("a ragged stream of {}", s.dtype().to_numpy_str()),
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stream::Dense(s) => f
                .debug_struct("Dense")
                .field("path", &s.path())
                .field("dtype", &s.dtype().to_string())
                .field("item_shape", &s.item_shape())
                .field("len", &s.len())
                .finish(),
            Stream::Ragged(s) => f
                .debug_struct("Ragged")
                .field("path", &s.path())
                .field("dtype", &s.dtype().to_string())
                .field("len", &s.len())
                .finish(),
        }
    }
}

impl From<DenseCore> for Stream {
    fn from(s: DenseCore) -> Stream {
        Stream::Dense(Arc::new(s))
    }
}

impl From<Arc<DenseCore>> for Stream {
    fn from(s: Arc<DenseCore>) -> Stream {
        Stream::Dense(s)
    }
}

impl From<RaggedCore> for Stream {
    fn from(s: RaggedCore) -> Stream {
        Stream::Ragged(Arc::new(s))
    }
}

impl From<Arc<RaggedCore>> for Stream {
    fn from(s: Arc<RaggedCore>) -> Stream {
        Stream::Ragged(s)
    }
}

impl<T: Element> From<DenseStore<T>> for Stream {
    fn from(s: DenseStore<T>) -> Stream {
        Stream::Dense(Arc::new(s.into_core()))
    }
}

impl<T: Element> From<RaggedStore<T>> for Stream {
    fn from(s: RaggedStore<T>) -> Stream {
        Stream::Ragged(Arc::new(s.into_core()))
    }
}
