//! The loader's error type.

use std::fmt;

/// Everything that can go wrong building or running a [`crate::DataLoader`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The loader was given no stream.
    #[error("a DataLoader needs at least one stream")]
    NoStreams,

    /// Two streams share a name.
    #[error("stream name {name:?} is used twice")]
    DuplicateStream {
        /// The repeated name.
        name: String,
    },

    /// The streams do not hold the same number of records.
    #[error("all streams must hold the same number of records, got {}", Lengths(.lengths))]
    UnequalLengths {
        /// Every stream's name and length, in the order given.
        lengths: Vec<(String, u64)>,
    },

    /// An option is out of range (names the option).
    #[error("invalid loader option {option}: {detail}")]
    Config {
        /// The option.
        option: &'static str,
        /// What is wrong with it.
        detail: String,
    },

    /// The sampler rejected its configuration.
    #[error(transparent)]
    Sampler(#[from] zsampler::Error),

    /// Gathering batch `step` from stream `stream` failed.
    #[error("gathering step {step} from stream {stream:?}: {source}")]
    Store {
        /// The step whose batch failed.
        step: u64,
        /// The stream that failed.
        stream: String,
        /// The store's own error.
        #[source]
        source: zrecord::Error,
    },

    /// Opening or inspecting a store failed while building the loader.
    #[error(transparent)]
    Open(#[from] zrecord::Error),

    /// The transform returned an error for batch `step`; `source` is the
    /// transform's own error, unchanged (downcast it to get it back).
    #[error("transform failed at step {step}: {source}")]
    Transform {
        /// The step whose batch failed.
        step: u64,
        /// The error the transform returned.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The transform panicked at batch `step`.
    #[error("transform panicked at step {step}: {message}")]
    TransformPanicked {
        /// The step whose batch failed.
        step: u64,
        /// The panic payload, when it was a string.
        message: String,
    },

    /// A batch has no stream of that name.
    #[error("batch has no stream named {name:?} (streams: {available:?})")]
    NoSuchStream {
        /// The name asked for.
        name: String,
        /// The names the batch has.
        available: Vec<String>,
    },

    /// A stream was read as the wrong kind or element type.
    #[error("stream {name:?} holds {stored}, asked for {asked}")]
    WrongType {
        /// The stream.
        name: String,
        /// What the stream holds (kind and dtype).
        stored: String,
        /// What was asked for.
        asked: String,
    },

    /// The pipeline's threads ended without reporting an error (a panic
    /// outside the transform, e.g. in a gather); the loader stops.
    #[error(
        "the loader's threads ended unexpectedly before step {step} (a panic outside the transform)"
    )]
    PipelineDied {
        /// The step the consumer was waiting for.
        step: u64,
    },

    /// A loader thread could not be started.
    #[error("starting a loader thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The loader's `Result`.
pub type Result<T> = std::result::Result<T, Error>;

struct Lengths<'a>(&'a [(String, u64)]);

impl fmt::Display for Lengths<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (name, len)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name:?}: {len}")?;
        }
        f.write_str("}")
    }
}
