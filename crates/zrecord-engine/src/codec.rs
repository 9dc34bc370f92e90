//! Codecs: raw, zstd (level 3) and zstd with a dictionary (level 19).

use crate::deferred::Durability;
use crate::error::{Error, Result};
use std::sync::Mutex;
use zstd::bulk::Compressor;
use zstd::dict::{DecoderDictionary, EncoderDictionary};
use zstd::zstd_safe::{self, DCtx};

/// Decompression contexts kept for reuse, at most this many: enough for
/// every worker of a few concurrent gathers; extras are freed.
const MAX_POOLED_DCTX: usize = 64;

/// A store's one compression method, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Codec {
    /// Records stored as given.
    Raw = 0,
    /// Each record one zstd frame, level 3 by default.
    Zstd = 1,
    /// Each record one zstd frame against the store's dictionary, level 19 by default.
    ZstdDict = 2,
}

impl Codec {
    /// The codec byte of `meta.zr`, if known.
    pub fn from_u8(b: u8) -> Option<Codec> {
        match b {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::ZstdDict),
            _ => None,
        }
    }

    /// The codec byte of `meta.zr`.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The reference's name: `"raw"`, `"zstd"` or `"zstd_dict"`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Zstd => "zstd",
            Codec::ZstdDict => "zstd_dict",
        }
    }

    /// Parses a name as [`Codec::name`] writes it.
    pub fn from_name(name: &str) -> Option<Codec> {
        match name {
            "raw" => Some(Codec::Raw),
            "zstd" => Some(Codec::Zstd),
            "zstd_dict" => Some(Codec::ZstdDict),
            _ => None,
        }
    }

    /// The compression level the format prescribes (3, or 19 with a dictionary).
    pub fn default_level(self) -> i32 {
        match self {
            Codec::Raw => 0,
            Codec::Zstd => 3,
            Codec::ZstdDict => 19,
        }
    }
}

/// How [`Engine::create`](crate::Engine::create) sets up a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateOptions {
    /// The codec, fixed for the store's life.
    pub codec: Codec,
    /// Dictionary bytes; required for [`Codec::ZstdDict`], refused otherwise.
    pub dictionary: Option<Vec<u8>>,
    /// Compression level for appends through the created handle. `None` uses
    /// the format's levels (3 for zstd, 19 with a dictionary); a raw store
    /// takes none. The level is not stored: a reopened handle uses the
    /// format's levels unless given one (`Engine::set_level`).
    pub level: Option<i32>,
    /// When appends through the created handle become durable (not
    /// stored; see [`Durability`]).
    pub durability: Durability,
}

impl CreateOptions {
    /// Options for a store with `codec` and no dictionary.
    pub fn new(codec: Codec) -> Self {
        CreateOptions {
            codec,
            dictionary: None,
            level: None,
            durability: Durability::AtSync,
        }
    }

    /// Options for a dictionary store.
    pub fn with_dictionary(dictionary: Vec<u8>) -> Self {
        CreateOptions {
            codec: Codec::ZstdDict,
            dictionary: Some(dictionary),
            level: None,
            durability: Durability::AtSync,
        }
    }
}

/// Trains a zstd dictionary (ZDICT) of at most `max_size` bytes on samples
/// given as one concatenated buffer plus each sample's size.
///
/// # Errors
/// [`Error::InvalidArgument`] when `sizes` do not cover `samples` or
/// nothing is given; [`Error::DictionaryTraining`] when zstd cannot train
/// on the samples (fewer than 7 of them, or too little data or shared
/// content for `max_size`).
pub fn train_dictionary(samples: &[u8], sizes: &[usize], max_size: usize) -> Result<Vec<u8>> {
    let total = sizes
        .iter()
        .try_fold(0usize, |a, &s| a.checked_add(s))
        .ok_or_else(|| Error::InvalidArgument("sample sizes overflow".into()))?;
    if total != samples.len() {
        return Err(Error::InvalidArgument(format!(
            "sample sizes sum to {total} bytes but {} bytes were given",
            samples.len()
        )));
    }
    if sizes.is_empty() || max_size == 0 {
        return Err(Error::InvalidArgument(
            "dictionary training needs samples and a nonzero size".into(),
        ));
    }
    let refuse = |reason: String| Error::DictionaryTraining {
        samples: sizes.len(),
        bytes: total,
        dict_size: max_size,
        reason,
    };
    // zstd 1.5.7's trainer (fastCover) checks only the total size, then
    // trains on the first 3/4 of the samples: when those hold fewer than 8
    // bytes it divides by zero (SIGFPE) or reads out of bounds (a SIGSEGV,
    // zstd issue #4499), e.g. for 8 to 10 one-byte samples. Refuse those
    // here; whatever zstd itself refuses still reaches it.
    let trained = (sizes.len() as f64 * ZDICT_SPLIT_POINT) as usize;
    let trained_bytes: usize = sizes[..trained].iter().sum();
    if (ZDICT_MIN_TRAINED_SAMPLES..).contains(&trained)
        && total >= ZDICT_MIN_TRAINED_BYTES
        && trained_bytes < ZDICT_MIN_TRAINED_BYTES
    {
        return Err(refuse(format!(
            "the first {trained} samples, the part zstd trains on, hold {trained_bytes} bytes, \
             under its minimum of {ZDICT_MIN_TRAINED_BYTES}"
        )));
    }
    zstd::dict::from_continuous(samples, sizes, max_size)
        .map_err(|e| refuse(format!("zstd says: {e}")))
}

/// The share of the samples zstd's `ZDICT_trainFromBuffer` trains on (the
/// rest tests the dictionary): fastCover's default split point.
const ZDICT_SPLIT_POINT: f64 = 0.75;
/// Fewer trained samples than this, and zstd refuses the input itself.
const ZDICT_MIN_TRAINED_SAMPLES: usize = 5;
/// fastCover's d-mer size (8): the trained samples must hold at least one.
const ZDICT_MIN_TRAINED_BYTES: usize = 8;

/// Where a dictionary handed to [`CodecState::new`] came from, so a
/// dictionary zstd cannot load is blamed on the caller or on the store file.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DictOrigin<'a> {
    /// Given by the caller ([`CreateOptions::dictionary`], a new level).
    Argument,
    /// Read from the store's `dict.zr`.
    File(&'a std::path::Path),
}

impl DictOrigin<'_> {
    fn load_error(self, len: usize, e: std::io::Error) -> Error {
        match self {
            DictOrigin::Argument => Error::InvalidArgument(format!(
                "the zstd dictionary given for the zstd_dict store ({len} bytes) cannot be loaded: {e}; pass a dictionary from train_dict (or `zstd --train`)"
            )),
            DictOrigin::File(p) => Error::corrupted(
                p,
                format!("zstd cannot load the {len}-byte dictionary: {e}"),
            ),
        }
    }
}

/// The codec state a handle shares between all its threads: prepared
/// dictionaries are immutable and `Send + Sync`; compression contexts are
/// per worker; decompression contexts are pooled, taken by a gather job and
/// given back when it ends, so a gather does not allocate (and fault in) a
/// fresh ~100 KiB context per job.
pub(crate) struct CodecState {
    pub codec: Codec,
    pub level: i32,
    pub dictionary: Option<Vec<u8>>,
    cdict: Option<EncoderDictionary<'static>>,
    ddict: Option<DecoderDictionary<'static>>,
    /// Idle decompression contexts. They hold no dictionary reference: the
    /// prepared dictionary is passed per frame (`ZSTD_decompress_usingDDict`,
    /// the same call a context with a referenced dictionary makes).
    dctx_pool: Mutex<Vec<DCtx<'static>>>,
}

impl std::fmt::Debug for CodecState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodecState")
            .field("codec", &self.codec)
            .field("level", &self.level)
            .field("dictionary_len", &self.dictionary.as_ref().map(Vec::len))
            .finish()
    }
}

impl CodecState {
    pub fn new(
        codec: Codec,
        level: Option<i32>,
        dictionary: Option<Vec<u8>>,
        origin: DictOrigin<'_>,
    ) -> Result<Self> {
        if codec == Codec::Raw && level.is_some() {
            return Err(Error::InvalidArgument(
                "codec raw takes no compression level".into(),
            ));
        }
        let level = level.unwrap_or(codec.default_level());
        let range = zstd::compression_level_range();
        if codec != Codec::Raw && !range.contains(&level) {
            return Err(Error::InvalidArgument(format!(
                "compression level {level} is outside zstd's range {}..={}",
                range.start(),
                range.end()
            )));
        }
        let (cdict, ddict) = match (&dictionary, codec) {
            (Some(d), Codec::ZstdDict) => (
                Some(
                    EncoderDictionary::try_copy(d, level)
                        .map_err(|e| origin.load_error(d.len(), e))?,
                ),
                Some(DecoderDictionary::try_copy(d).map_err(|e| origin.load_error(d.len(), e))?),
            ),
            _ => (None, None),
        };
        Ok(CodecState {
            codec,
            level,
            dictionary,
            cdict,
            ddict,
            dctx_pool: Mutex::new(Vec::new()),
        })
    }

    /// A fresh compression context for one worker.
    pub fn compressor(&self) -> std::io::Result<Compressor<'_>> {
        match &self.cdict {
            Some(d) => Compressor::with_prepared_dictionary(d),
            None => Compressor::new(self.level),
        }
    }

    /// A decompression context from the pool, or a new one.
    pub fn take_dctx(&self) -> Result<DCtx<'static>> {
        let pooled = self
            .dctx_pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        match pooled {
            Some(d) => Ok(d),
            None => DCtx::try_create().ok_or_else(|| {
                Error::InvalidArgument("cannot create a zstd decompression context".into())
            }),
        }
    }

    /// Gives a context back to the pool (only one whose last frame decoded
    /// cleanly: a failed one is dropped rather than reused).
    pub fn put_dctx(&self, dctx: DCtx<'static>) {
        let mut pool = self.dctx_pool.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < MAX_POOLED_DCTX {
            pool.push(dctx);
        }
    }

    /// Contexts idle in the pool.
    #[cfg(test)]
    pub fn dctx_pool_len(&self) -> usize {
        self.dctx_pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Decodes one whole frame `src` into `dst` with the store's dictionary
    /// if it has one; returns the decoded length. Never writes past `dst`.
    pub fn decompress(
        &self,
        dctx: &mut DCtx<'static>,
        src: &[u8],
        dst: &mut [u8],
    ) -> std::result::Result<usize, &'static str> {
        let r = match &self.ddict {
            Some(d) => dctx.decompress_using_ddict(dst, src, d.as_ddict()),
            None => dctx.decompress(dst, src),
        };
        r.map_err(zstd_safe::get_error_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_bytes_and_names_round_trip() {
        for c in [Codec::Raw, Codec::Zstd, Codec::ZstdDict] {
            assert_eq!(Codec::from_u8(c.as_u8()), Some(c));
            assert_eq!(Codec::from_name(c.name()), Some(c));
        }
        assert_eq!(Codec::from_u8(3), None);
    }

    /// Regression (audit f03): too little data gave "invalid argument:
    /// dictionary training failed: Src size is incorrect", zstd's jargon
    /// with nothing on what was given or what to do.
    #[test]
    fn training_on_too_little_data_says_what_was_given_and_what_to_do() {
        let samples = [7u8; 80];
        let e = train_dictionary(&samples, &[16; 5], 32 << 10).unwrap_err();
        assert!(
            matches!(
                e,
                Error::DictionaryTraining {
                    samples: 5,
                    bytes: 80,
                    dict_size: 32768,
                    ..
                }
            ),
            "{e:?}"
        );
        let m = e.to_string();
        for part in [
            "32768-byte zstd dictionary",
            "5 samples of 80 bytes",
            "more or larger samples",
            "smaller dictionary",
            "plain zstd codec",
        ] {
            assert!(m.contains(part), "{part:?} missing from: {m}");
        }
        assert!(!m.starts_with("invalid argument"), "{m}");
    }

    /// Regression (audit f13): bytes zstd cannot load as a dictionary gave
    /// "invalid argument: dictionary cannot be loaded", naming neither the
    /// dictionary nor its size.
    #[test]
    fn an_unloadable_dictionary_argument_is_named() {
        // zstd's dictionary magic followed by garbage: a "formatted"
        // dictionary whose tables do not parse.
        let mut d = 0xEC30_A437u32.to_le_bytes().to_vec();
        d.extend_from_slice(&[0xFF; 60]);
        let e = CodecState::new(Codec::ZstdDict, None, Some(d), DictOrigin::Argument).unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(
            m.contains("zstd dictionary given for the zstd_dict store (64 bytes) cannot be loaded"),
            "{m}"
        );
    }

    #[test]
    fn training_checks_sizes() {
        assert!(train_dictionary(b"abc", &[2], 1024).is_err());
        let mut samples = Vec::new();
        let mut sizes = Vec::new();
        for i in 0..400u32 {
            let s = format!("record {i} with a shared prefix and body {}", i % 7);
            sizes.push(s.len());
            samples.extend_from_slice(s.as_bytes());
        }
        let d = train_dictionary(&samples, &sizes, 4096).unwrap();
        assert!(!d.is_empty() && d.len() <= 4096);
    }
}
