//! The loader's error type.

use std::fmt;

/// Everything that can go wrong building or running a [`crate::DataLoader`].
///
/// An error's message does not repeat its cause: [`Error::Store`] says which
/// step and stream failed, [`Error::Transform`] which step, [`Error::Thread`]
/// that a thread did not start, and the store's, transform's or OS error is
/// the [`source()`](std::error::Error::source), not part of the `Display`.
/// Walk `source()` (or print with `{:#}` through `anyhow`, or any reporter
/// that follows the chain) to show the cause as well:
///
/// ```
/// use std::error::Error as _;
/// let e = loaderx::Error::Transform { step: 3, source: "label 12 out of range".into() };
/// assert_eq!(e.to_string(), "transform failed at step 3");
/// let mut message = e.to_string();
/// let mut cause = e.source();
/// while let Some(c) = cause {
///     message += &format!(": {c}");
///     cause = c.source();
/// }
/// assert_eq!(message, "transform failed at step 3: label 12 out of range");
/// ```
///
/// The variants that wrap another crate's error whole ([`Error::Sampler`],
/// [`Error::Open`]) show that error's message and chain as their own.
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

    /// The streams hold no records: there is nothing to sample.
    #[error("the streams hold no records, got {}: there is nothing to sample", Lengths(.lengths))]
    EmptyStreams {
        /// Every stream's name and length (all 0), in the order given.
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

    /// Gathering batch `step` from stream `stream` failed. The message names
    /// the step and stream; the store's error (which names the file, record
    /// or OS error in its own chain) is the
    /// [`source()`](std::error::Error::source) and the `source` field, not
    /// repeated in the message.
    #[error("gathering step {step} from stream {stream:?}")]
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
    /// transform's own error, unchanged (downcast it to get it back). The
    /// message names the step only: the transform's error is the
    /// [`source()`](std::error::Error::source), not repeated in the message,
    /// so print the chain (or `source`) to show it.
    #[error("transform failed at step {step}")]
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

    /// A loader thread could not be started. The OS error is the
    /// [`source()`](std::error::Error::source), not repeated in the message.
    #[error("starting a loader thread")]
    Thread(#[source] std::io::Error),
}

pub(crate) use zrecord::error_chain as chain;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[derive(Debug, PartialEq)]
    struct Boom;

    impl fmt::Display for Boom {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("boom in the transform")
        }
    }

    impl std::error::Error for Boom {}

    /// Regression: `Store`, `Transform` and `Thread` wrote their cause into
    /// their message and also returned it from `source()`, so anything that
    /// prints the chain (anyhow's `{:#}`, eyre) printed the cause twice:
    /// "gathering step 4 from stream \"x\": /d/a.npy: No such file or
    /// directory (os error 2): /d/a.npy: No such file or directory (os error
    /// 2): No such file or directory (os error 2)".
    #[test]
    fn wrapped_errors_leave_their_cause_to_source_and_the_chain_shows_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("a.npy");
        let store_err = zrecord::npy::read_header(&missing).unwrap_err();
        let path = missing.display().to_string();
        let os_msg = std::io::Error::from_raw_os_error(2).to_string();
        let e = Error::Store {
            step: 4,
            stream: "x".into(),
            source: store_err,
        };
        assert_eq!(e.to_string(), r#"gathering step 4 from stream "x""#);
        let mut cause = e.source();
        let mut io = None;
        while let Some(c) = cause {
            io = io.or(c.downcast_ref::<std::io::Error>());
            cause = c.source();
        }
        assert_eq!(io.map(|io| io.kind()), Some(std::io::ErrorKind::NotFound));
        let c = chain(&e);
        assert_eq!(
            c,
            format!(r#"gathering step 4 from stream "x": {path}: {os_msg}"#)
        );
        assert_eq!(c.matches(&os_msg).count(), 1, "{c}");
        assert_eq!(c.matches(&path).count(), 1, "{c}");

        let e = Error::Transform {
            step: 7,
            source: Box::new(Boom),
        };
        assert_eq!(e.to_string(), "transform failed at step 7");
        assert_eq!(e.source().unwrap().downcast_ref::<Boom>(), Some(&Boom));
        assert_eq!(
            chain(&e),
            "transform failed at step 7: boom in the transform"
        );

        let e = Error::Thread(std::io::Error::from_raw_os_error(11));
        let os_msg = std::io::Error::from_raw_os_error(11).to_string();
        assert_eq!(e.to_string(), "starting a loader thread");
        assert_eq!(chain(&e), format!("starting a loader thread: {os_msg}"));
    }
}
