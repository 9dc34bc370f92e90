//! Codecs: raw, zstd (level 3) and zstd with a dictionary (level 19).

use crate::deferred::Durability;
use crate::error::{Error, Result};
use std::sync::Mutex;
use zstd::dict::{DecoderDictionary, EncoderDictionary};
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx};

/// Decompression contexts kept for reuse, at most this many: enough for
/// every worker of a few concurrent gathers; extras are freed.
const MAX_POOLED_DCTX: usize = 64;

/// Compression contexts kept for reuse, at most this many.
const MAX_POOLED_CCTX: usize = 64;

/// Compression contexts kept for reuse, at most this many bytes of them
/// (`ZSTD_sizeof_CCtx`). A context
/// keeps the tables of its largest frame: a few hundred KiB at level 3, up
/// to hundreds of MiB for a huge record at level 19 or more. Those big
/// ones are freed, not kept: compressing their frames dwarfs making one.
const MAX_POOLED_CCTX_BYTES: usize = 32 << 20;

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
/// dictionaries are immutable and `Send + Sync`; zstd contexts are pooled,
/// taken by a gather or append job and given back when it ends, so a job
/// does not allocate (and fault in) a fresh context. Making one cost about
/// 14 us at level 3, where a 4 KiB record compresses in 4 us.
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
    /// Idle compression contexts, with their total size. A context without
    /// a dictionary has the store's level set; one of a dictionary store
    /// has nothing set (the dictionary's level applies) and holds no
    /// reference to the dictionary while idle (see [`PooledCompressor`]).
    cctx_pool: Mutex<(Vec<CCtx<'static>>, usize)>,
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
            cctx_pool: Mutex::new((Vec::new(), 0)),
        })
    }

    /// A compressor for one worker: it takes a context from the pool (or
    /// makes one) at its first record and gives it back when dropped.
    pub fn compressor(&self) -> PooledCompressor<'_> {
        PooledCompressor {
            state: self,
            ctx: None,
        }
    }

    fn take_cctx(&self) -> Result<CCtx<'static>> {
        let pooled = {
            let mut pool = self.cctx_pool.lock().unwrap_or_else(|e| e.into_inner());
            let ctx = pool.0.pop();
            if let Some(c) = &ctx {
                pool.1 -= c.sizeof();
            }
            ctx
        };
        if let Some(c) = pooled {
            return Ok(c);
        }
        let mut ctx = CCtx::try_create().ok_or_else(|| {
            Error::InvalidArgument("cannot create a zstd compression context".into())
        })?;
        if self.cdict.is_none() {
            ctx.set_parameter(CParameter::CompressionLevel(self.level))
                .map_err(|e| {
                    Error::InvalidArgument(format!(
                        "zstd refused compression level {}: {}",
                        self.level,
                        zstd_safe::get_error_name(e)
                    ))
                })?;
        }
        Ok(ctx)
    }

    fn put_cctx(&self, ctx: CCtx<'static>) {
        let size = ctx.sizeof();
        let mut pool = self.cctx_pool.lock().unwrap_or_else(|e| e.into_inner());
        if pool.0.len() < MAX_POOLED_CCTX && pool.1 + size <= MAX_POOLED_CCTX_BYTES {
            pool.0.push(ctx);
            pool.1 += size;
        }
    }

    /// Idle compression contexts and their total size.
    #[cfg(test)]
    pub fn cctx_pool_stats(&self) -> (usize, usize) {
        let pool = self.cctx_pool.lock().unwrap_or_else(|e| e.into_inner());
        (pool.0.len(), pool.1)
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

/// Compresses records into zstd frames with one pooled context, the
/// frames byte for byte those of `zstd::bulk::Compressor` (`ZSTD_compress2`
/// with the level set, or with the prepared dictionary referenced).
pub(crate) struct PooledCompressor<'s> {
    state: &'s CodecState,
    ctx: Option<CCtx<'static>>,
}

impl PooledCompressor<'_> {
    /// One record as one frame.
    pub fn compress(&mut self, src: &[u8]) -> Result<Vec<u8>> {
        let ctx = match self.ctx.take() {
            Some(c) => c,
            None => self.state.take_cctx()?,
        };
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(src.len()));
        let failed = |e: usize| {
            Error::InvalidArgument(format!(
                "zstd compression failed: {}",
                zstd_safe::get_error_name(e)
            ))
        };
        match &self.state.cdict {
            None => {
                let mut ctx = ctx;
                // A context whose frame failed is dropped, not reused.
                ctx.compress2(&mut out, src).map_err(failed)?;
                self.ctx = Some(ctx);
            }
            Some(d) => {
                // Narrowed to the dictionary's borrow (a covariant
                // lifetime) for as long as it references the dictionary.
                let mut ctx: CCtx<'_> = ctx;
                ctx.ref_cdict(d.as_cdict()).map_err(failed)?;
                ctx.compress2(&mut out, src).map_err(failed)?;
                ctx.disable_dictionary().map_err(failed)?;
                // SAFETY: the lifetime of a `CCtx` only tracks the
                // dictionary it references, and `disable_dictionary`
                // succeeded (`ZSTD_CCtx_loadDictionary(NULL, 0)`, which
                // clears every dictionary reference), so this context
                // refers to nothing borrowed and may outlive `d`. (libzstd
                // 1.5.7 leaves a stale `dictMatchState` pointer, which the
                // next frame's reset clears before any read, and freeing a
                // context never follows it.) The types differ in that
                // lifetime alone.
                self.ctx = Some(unsafe { std::mem::transmute::<CCtx<'_>, CCtx<'static>>(ctx) });
            }
        }
        Ok(out)
    }
}

impl Drop for PooledCompressor<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.ctx.take() {
            self.state.put_cctx(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Smooth bytes with noise: compressible, as image tiles are.
    pub(super) fn tile(seed: u64, len: usize, noise: u64) -> Vec<u8> {
        let mut s = seed;
        (0..len)
            .map(|i| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (((i as f64 / 37.0).sin() * 60.0 + 128.0) as u8)
                    .wrapping_add(((s >> 33) % noise) as u8)
            })
            .collect()
    }

    /// Pooled contexts write the frames a fresh `zstd::bulk::Compressor`
    /// writes, byte for byte, with and without a dictionary, reused over
    /// records of every size (a reused context must not carry anything of
    /// its previous frame, nor lose the dictionary or the level).
    #[test]
    fn pooled_compressors_write_the_frames_a_fresh_context_writes() {
        let samples: Vec<Vec<u8>> = (0..300).map(|k| tile(k, 1024, 24)).collect();
        let sizes: Vec<usize> = samples.iter().map(Vec::len).collect();
        let dict = train_dictionary(&samples.concat(), &sizes, 8192).unwrap();
        let lens = [1usize, 100, 4096, 70_000, 300_000];
        for (codec, level) in [
            (Codec::Zstd, 1),
            (Codec::Zstd, 3),
            (Codec::Zstd, 19),
            (Codec::ZstdDict, 3),
            (Codec::ZstdDict, 19),
        ] {
            let d = (codec == Codec::ZstdDict).then(|| dict.clone());
            let state = CodecState::new(codec, Some(level), d, DictOrigin::Argument).unwrap();
            let prepared = EncoderDictionary::copy(&dict, level);
            let mut fresh = match codec {
                Codec::ZstdDict => zstd::bulk::Compressor::with_prepared_dictionary(&prepared),
                _ => zstd::bulk::Compressor::new(level),
            }
            .unwrap();
            for round in 0..3u64 {
                // Two compressors at once: two contexts, then both reused.
                let (mut a, mut b) = (state.compressor(), state.compressor());
                for (k, &len) in lens.iter().enumerate() {
                    if level == 19 && len > 70_000 {
                        continue; // seconds each; the small ones show it
                    }
                    let r = tile(round * 10 + k as u64, len, [1, 24, 255][k % 3]);
                    let want = fresh.compress(&r).unwrap();
                    let c = if k % 2 == 0 { &mut a } else { &mut b };
                    assert_eq!(
                        c.compress(&r).unwrap(),
                        want,
                        "{codec:?} level {level}, {len} bytes, round {round}"
                    );
                }
                drop((a, b));
                assert_eq!(
                    state.cctx_pool_stats().0,
                    2,
                    "{codec:?} level {level}: both contexts kept"
                );
            }
        }
    }

    /// The pool keeps at most `MAX_POOLED_CCTX_BYTES` of contexts: big
    /// ones (level 9 after a 1 MiB record: about 10 MiB each) are freed
    /// once the bound is reached.
    #[test]
    fn the_compression_context_pool_is_bounded_in_bytes() {
        let state = CodecState::new(Codec::Zstd, Some(9), None, DictOrigin::Argument).unwrap();
        let r = tile(1, 1 << 20, 24);
        let mut cs: Vec<_> = (0..5).map(|_| state.compressor()).collect();
        for c in &mut cs {
            c.compress(&r).unwrap();
        }
        drop(cs);
        let (n, bytes) = state.cctx_pool_stats();
        assert!(
            bytes <= MAX_POOLED_CCTX_BYTES,
            "{n} contexts, {bytes} bytes kept"
        );
        assert!((1..5).contains(&n), "{n} contexts, {bytes} bytes kept");
        // Small contexts are all kept.
        let small = CodecState::new(Codec::Zstd, Some(3), None, DictOrigin::Argument).unwrap();
        let mut cs: Vec<_> = (0..5).map(|_| small.compressor()).collect();
        for c in &mut cs {
            c.compress(&r[..4096]).unwrap();
        }
        drop(cs);
        assert_eq!(small.cctx_pool_stats().0, 5);
    }

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

#[cfg(test)]
mod cctx_review {
    use super::*;

    use super::tests::tile as noisy;

    /// One frame from a brand-new `zstd::bulk::Compressor` (nothing reused).
    fn fresh_frame(level: i32, dict: Option<&EncoderDictionary<'_>>, r: &[u8]) -> Vec<u8> {
        match dict {
            Some(d) => zstd::bulk::Compressor::with_prepared_dictionary(d),
            None => zstd::bulk::Compressor::new(level),
        }
        .unwrap()
        .compress(r)
        .unwrap()
    }

    fn dict() -> Vec<u8> {
        let samples: Vec<Vec<u8>> = (0..300).map(|k| noisy(k, 1024, 24)).collect();
        let sizes: Vec<usize> = samples.iter().map(Vec::len).collect();
        train_dictionary(&samples.concat(), &sizes, 8192).unwrap()
    }

    /// Every level (negative ones, 0, and the row match finder's 5..=12,
    /// which salts its hash per context reset), sizes mixed in an order
    /// where a reused context has compressed bigger and smaller frames
    /// before, each frame compared with one from a brand-new compressor.
    #[test]
    fn reused_contexts_match_a_brand_new_compressor_at_every_level() {
        let d = dict();
        let lens = [
            70_000usize,
            0,
            1,
            40_000,
            100,
            4096,
            300_000,
            17_000,
            65_536,
            3,
        ];
        let mut levels: Vec<i32> = vec![-131072, -50, -7, -1, 0];
        levels.extend(1..=22);
        for codec in [Codec::Zstd, Codec::ZstdDict] {
            for &level in &levels {
                let dd = (codec == Codec::ZstdDict).then(|| d.clone());
                let state = match CodecState::new(codec, Some(level), dd, DictOrigin::Argument) {
                    Ok(s) => s,
                    Err(e) => panic!("{codec:?} level {level}: {e}"),
                };
                let prepared = EncoderDictionary::copy(&d, level);
                let pd = (codec == Codec::ZstdDict).then_some(&prepared);
                for round in 0..3u64 {
                    let mut c = state.compressor();
                    for (k, &len) in lens.iter().enumerate() {
                        if level >= 16 && len > 40_000 {
                            continue; // slow; the small ones show it
                        }
                        let r = noisy(round * 100 + k as u64, len, [2, 24, 255][k % 3]);
                        assert_eq!(
                            c.compress(&r).unwrap(),
                            fresh_frame(level, pd, &r),
                            "{codec:?} level {level}, {len} bytes, round {round}, record {k}"
                        );
                    }
                }
                let (n, bytes) = state.cctx_pool_stats();
                assert!(n <= 1, "{n} {bytes}");
            }
        }
    }

    /// The pool's running byte count is the sum of its contexts' sizes
    /// (`sizeof` at give-back equals `sizeof` at take: no drift, no
    /// underflow), it keeps at most 64 contexts and 32 MiB, after 16
    /// threads mixed small records with 1 MiB ones at levels whose contexts
    /// reach tens of MiB, and dictionary contexts likewise.
    #[test]
    fn pool_accounting_matches_its_contexts_and_stays_bounded() {
        let d = dict();
        for (codec, level) in [
            (Codec::Zstd, 9),
            (Codec::Zstd, 19),
            (Codec::Zstd, -3),
            (Codec::ZstdDict, 12),
        ] {
            let dd = (codec == Codec::ZstdDict).then(|| d.clone());
            let state = CodecState::new(codec, Some(level), dd, DictOrigin::Argument).unwrap();
            let big = noisy(7, 1 << 20, 24);
            std::thread::scope(|s| {
                for t in 0..16u64 {
                    let (state, big) = (&state, &big);
                    s.spawn(move || {
                        for k in 0..12u64 {
                            let mut c = state.compressor();
                            let n = if (t + k) % 5 == 0 {
                                1 << 20
                            } else {
                                100 + 37 * k as usize
                            };
                            let len = if level == 19 { n.min(1 << 18) } else { n };
                            c.compress(&big[..len]).unwrap();
                            c.compress(&big[..100]).unwrap();
                        }
                    });
                }
            });
            // Many compressors at once: at most 64 contexts kept.
            let mut cs: Vec<_> = (0..80).map(|_| state.compressor()).collect();
            for c in &mut cs {
                c.compress(&big[..1000]).unwrap();
            }
            drop(cs);
            let pool = state.cctx_pool.lock().unwrap();
            let sum: usize = pool.0.iter().map(CCtx::sizeof).sum();
            assert_eq!(pool.1, sum, "{codec:?} level {level}: running count");
            assert!(
                pool.1 <= MAX_POOLED_CCTX_BYTES,
                "{codec:?} level {level}: {}",
                pool.1
            );
            assert!(pool.0.len() <= MAX_POOLED_CCTX, "{codec:?} level {level}");
            assert!(
                !pool.0.is_empty(),
                "{codec:?} level {level}: small ones kept"
            );
            drop(pool);
            // And taking every context back leaves exactly zero.
            let mut cs: Vec<_> = (0..80).map(|_| state.compressor()).collect();
            for c in &mut cs {
                c.compress(&big[..10]).unwrap();
            }
            assert_eq!(state.cctx_pool_stats(), (0, 0), "{codec:?} level {level}");
        }
    }

    /// A huge record at level 22 (a context of hundreds of MiB) is
    /// compressed, and its context is freed, not pooled.
    #[test]
    fn a_level_22_context_for_a_big_record_is_not_kept() {
        let state = CodecState::new(Codec::Zstd, Some(22), None, DictOrigin::Argument).unwrap();
        let r = noisy(3, 3 << 20, 4);
        let mut c = state.compressor();
        let f = c.compress(&r).unwrap();
        assert_eq!(zstd::bulk::decompress(&f, r.len()).unwrap(), r);
        drop(c);
        let (n, bytes) = state.cctx_pool_stats();
        assert!(
            bytes <= MAX_POOLED_CCTX_BYTES,
            "{n} contexts, {bytes} bytes"
        );
    }

    /// A pooled context's indexes keep growing over its frames; past
    /// zstd's 3500 MB mark a frame is overflow-corrected mid-way (a fresh
    /// context never is). The frame must still be the brand-new one's.
    #[test]
    fn a_frame_crossing_the_index_overflow_mark_matches_a_brand_new_one() {
        let mut s = 0x1234_5678_9abc_def1u64;
        let big: Vec<u8> = (0..512usize << 20)
            .map(|i| {
                if i % 64 == 0 {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                }
                (s >> ((i % 8) * 8)) as u8 & 0x0f
            })
            .collect();
        for level in [1, 3] {
            let state =
                CodecState::new(Codec::Zstd, Some(level), None, DictOrigin::Argument).unwrap();
            let mut c = state.compressor();
            for _ in 0..6 {
                c.compress(&big).unwrap();
            }
            let got = c.compress(&big).unwrap();
            assert!(
                got == fresh_frame(level, None, &big),
                "level {level}: the frame crossing the mark differs"
            );
        }
    }

    /// A panic that unwinds past a compressor (after its frame) gives a
    /// usable context back, and a pool whose lock a panicking thread
    /// poisoned keeps working and counting right: later frames are still
    /// a brand-new compressor's.
    #[test]
    fn unwinding_and_a_poisoned_pool_lock_leave_the_pool_usable() {
        let d = dict();
        let state = CodecState::new(
            Codec::ZstdDict,
            Some(5),
            Some(d.clone()),
            DictOrigin::Argument,
        )
        .unwrap();
        let prepared = EncoderDictionary::copy(&d, 5);
        let r = noisy(11, 30_000, 24);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut c = state.compressor();
            c.compress(&r).unwrap();
            panic!("after a frame");
        }));
        assert!(caught.is_err());
        assert_eq!(state.cctx_pool_stats().0, 1, "the context came back");
        let poisoner = std::thread::scope(|s| {
            s.spawn(|| {
                let _g = state.cctx_pool.lock().unwrap();
                panic!("holding the pool lock");
            })
            .join()
        });
        assert!(poisoner.is_err() && state.cctx_pool.is_poisoned());
        for len in [30_000, 5, 4096] {
            let mut c = state.compressor();
            assert_eq!(
                c.compress(&r[..len]).unwrap(),
                fresh_frame(5, Some(&prepared), &r[..len])
            );
        }
        let pool = state.cctx_pool.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(pool.1, pool.0.iter().map(CCtx::sizeof).sum::<usize>());
        assert_eq!(pool.0.len(), 1);
    }
}
