//! Dictionary training for `zstd_dict` stores.
//!
//! A dictionary is trained once, as an explicit step, on a sample of the
//! data, then passed to [`CreateOptions::dictionary`] when creating a
//! [`Codec::ZstdDict`](zrecord_engine::Codec::ZstdDict) store; one
//! dictionary can serve many stores. Three tiers fix both the dictionary
//! size and the training sample's byte budget (loaderx's `DICT_TIERS`):
//!
//! | tier | dictionary | sample budget |
//! |---|---|---|
//! | [`DictTier::Fast`] | 32 KiB | 4 MiB |
//! | [`DictTier::Balanced`] (default) | 128 KiB | 16 MiB |
//! | [`DictTier::Max`] | 1 MiB | 64 MiB |
//!
//! Arrays and stores are sampled with a stride across the whole source
//! (evenly spaced records, as loaderx does with `linspace`), so the sample
//! sees the data's beginning, middle and end. For a ragged store the sample
//! is sized from the records' payload lengths in the record table, so it
//! holds at most the budget however the lengths are distributed (unless a
//! single record is larger: one record is always taken). An iterator of
//! records has no known length; like loaderx, its records are taken from the
//! start until the budget is reached. Sampled records longer than 128 KiB
//! are handed to zstd cut into 128 KiB blocks (as `zstd --train -B` does), so
//! a budget that holds only a few long records still trains.
//!
//! [`CreateOptions::dictionary`]: zrecord_engine::CreateOptions::dictionary

use crate::dense::{DenseCore, DenseStore};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ragged::{RaggedBatch, RaggedCore, RaggedStore};

/// A named dictionary size and training budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DictTier {
    /// 32 KiB dictionary, 4 MiB of samples: fastest gather and training.
    Fast,
    /// 128 KiB dictionary, 16 MiB of samples: most of the ratio.
    #[default]
    Balanced,
    /// 1 MiB dictionary, 64 MiB of samples: best ratio, slowest gather.
    Max,
}

impl DictTier {
    /// Largest dictionary the tier trains, in bytes.
    pub fn dict_size(self) -> usize {
        match self {
            DictTier::Fast => 32 << 10,
            DictTier::Balanced => 128 << 10,
            DictTier::Max => 1 << 20,
        }
    }

    /// Training sample budget, in bytes.
    pub fn sample_budget(self) -> usize {
        match self {
            DictTier::Fast => 4 << 20,
            DictTier::Balanced => 16 << 20,
            DictTier::Max => 64 << 20,
        }
    }

    /// loaderx's name: `"fast"`, `"balanced"`, `"max"`.
    pub fn name(self) -> &'static str {
        match self {
            DictTier::Fast => "fast",
            DictTier::Balanced => "balanced",
            DictTier::Max => "max",
        }
    }

    /// Parses a name as [`name`](Self::name) writes it.
    pub fn from_name(name: &str) -> Result<DictTier> {
        match name {
            "fast" => Ok(DictTier::Fast),
            "balanced" => Ok(DictTier::Balanced),
            "max" => Ok(DictTier::Max),
            other => Err(Error::invalid(format!(
                "unknown dict tier {other:?}, expected one of [\"balanced\", \"fast\", \"max\"]"
            ))),
        }
    }
}

/// What to train a dictionary on.
pub enum DictSource<'a> {
    /// Records in order (taken from the start up to the sample budget).
    Records(Box<dyn Iterator<Item = &'a [u8]> + 'a>),
    /// A stacked array's bytes: records of `record_bytes` each.
    Array {
        /// The array's bytes, C order.
        data: &'a [u8],
        /// Bytes per record (row).
        record_bytes: usize,
    },
    /// A dense store.
    Dense(&'a DenseCore),
    /// A ragged store (payloads only; shapes are not trained on).
    Ragged(&'a RaggedCore),
}

impl<'a> DictSource<'a> {
    /// Records from any iterator of byte slices.
    pub fn records(it: impl IntoIterator<Item = &'a [u8]> + 'a) -> Self {
        DictSource::Records(Box::new(it.into_iter()))
    }
}

impl<'a> From<&'a DenseCore> for DictSource<'a> {
    fn from(c: &'a DenseCore) -> Self {
        DictSource::Dense(c)
    }
}

impl<'a> From<&'a RaggedCore> for DictSource<'a> {
    fn from(c: &'a RaggedCore) -> Self {
        DictSource::Ragged(c)
    }
}

impl<'a, T: Element> From<&'a DenseStore<T>> for DictSource<'a> {
    fn from(s: &'a DenseStore<T>) -> Self {
        DictSource::Dense(s.core())
    }
}

impl<'a, T: Element> From<&'a RaggedStore<T>> for DictSource<'a> {
    fn from(s: &'a RaggedStore<T>) -> Self {
        DictSource::Ragged(s.core())
    }
}

/// How many records to sample: the tier's byte budget in records of
/// `item_bytes`, at least one, at most `total` (loaderx's `_sample_count`).
fn sample_count(total: u64, item_bytes: u64, tier: DictTier) -> u64 {
    let per = item_bytes.max(1);
    (tier.sample_budget() as u64 / per).max(1).min(total).max(1)
}

/// `np.unique(np.linspace(0, n - 1, k).astype(int64))`: `k` evenly spaced
/// positions across `0..n`, first and last included.
fn strided(n: u64, k: u64) -> Vec<u64> {
    if n == 0 || k == 0 {
        return Vec::new();
    }
    if k == 1 {
        return vec![0];
    }
    let step = (n - 1) as f64 / (k - 1) as f64;
    let mut out: Vec<u64> = (0..k)
        .map(|i| {
            if i == k - 1 {
                n - 1
            } else {
                (i as f64 * step) as u64
            }
        })
        .collect();
    out.dedup();
    out
}

/// Longest sample handed to zstd's trainer; longer records are cut into
/// blocks of this size, as `zstd --train -B131072` cuts files (128 KiB is
/// also the size `zstd --train` truncates whole-file samples to).
const SAMPLE_BLOCK: usize = 128 << 10;

/// Cuts every sample longer than [`SAMPLE_BLOCK`] into consecutive blocks
/// (the bytes stay where they are; only the boundaries change). A budget
/// that holds only a few long records would otherwise give zstd fewer
/// samples than its trainer accepts (it needs about eight), and training
/// would fail ("Src size is incorrect").
fn cut_long_samples(sizes: Vec<usize>) -> Vec<usize> {
    if sizes.iter().all(|&s| s <= SAMPLE_BLOCK) {
        return sizes;
    }
    let mut out = Vec::with_capacity(sizes.len());
    for s in sizes {
        let mut rest = s;
        while rest > SAMPLE_BLOCK {
            out.push(SAMPLE_BLOCK);
            rest -= SAMPLE_BLOCK;
        }
        out.push(rest);
    }
    out
}

/// Payload lengths of a ragged store's records at `positions`, from the
/// record table (no I/O, no decoding).
fn payload_lengths(core: &RaggedCore, positions: &[u64], lens: &mut Vec<u64>) -> Result<()> {
    let phys: Vec<u64> = positions.iter().map(|&i| 2 * i).collect();
    lens.clear();
    lens.resize(phys.len(), 0);
    core.engine().record_lengths(&phys, lens, None)?;
    Ok(())
}

/// The records of a non-empty ragged store to train on: evenly strided
/// across the store, and no more payload bytes than the tier's budget
/// whatever the length distribution (unless one record alone exceeds it:
/// at least one record is always taken, as for dense stores).
///
/// Payload lengths are known from the record table, so the sample is sized
/// before anything is read: first from the exact mean payload length (one
/// pass over the table, a few table entries at a time), then, if the chosen
/// records still hold more than the budget (longer than average ones were
/// hit), the stride is widened until they fit. loaderx estimated the mean
/// from the first 32 records only, so a store with short records first read
/// far past the budget.
fn ragged_sample(core: &RaggedCore, tier: DictTier) -> Result<Vec<u64>> {
    const TABLE_BATCH: u64 = 1 << 16;
    let n = core.len();
    let budget = tier.sample_budget() as u64;
    let mut lens = Vec::new();
    let mut total: u64 = 0;
    let mut positions = Vec::new();
    for start in (0..n).step_by(TABLE_BATCH as usize) {
        positions.clear();
        positions.extend(start..n.min(start + TABLE_BATCH));
        payload_lengths(core, &positions, &mut lens)?;
        total = total.saturating_add(lens.iter().sum());
    }
    let mean = total.div_ceil(n.max(1)).max(1);
    let mut k = sample_count(n, mean, tier);
    loop {
        let idx = strided(n, k);
        payload_lengths(core, &idx, &mut lens)?;
        let taken: u64 = lens.iter().sum();
        if taken <= budget || idx.len() <= 1 {
            return Ok(idx);
        }
        // Scale the count down by how far over the budget it is, and by at
        // least 1/16 so the loop ends after a few dozen rounds whatever the
        // lengths (k only shrinks; at k = 1 the single record is taken).
        let k_fit = (u128::from(k) * u128::from(budget) / u128::from(taken)) as u64;
        k = k_fit.min(k - (k / 16).max(1)).max(1);
    }
}

/// Trains a zstd dictionary of at most `tier.dict_size()` bytes on a sample
/// of `source` sized by the tier's budget.
///
/// Fails when the source is empty, or when zstd cannot train on what it got
/// (too few or too small samples).
///
/// ```
/// use zrecord::{Codec, CreateOptions, DictSource, DictTier, RaggedStore, train_dict};
/// let texts: Vec<String> = (0..2000).map(|i| format!("{{\"id\": {i}, \"kind\": \"event\", \"ok\": {}}}", i % 3 == 0)).collect();
/// let dict = train_dict(DictSource::records(texts.iter().map(|t| t.as_bytes())), DictTier::Fast)?;
/// assert!(dict.len() <= DictTier::Fast.dict_size());
/// let dir = tempfile::tempdir()?;
/// let store = RaggedStore::<u8>::create(dir.path().join("t"), &CreateOptions::with_dictionary(dict))?;
/// store.append_bytes(texts.iter().map(|t| t.as_bytes()))?;
/// assert!(store.has_dict());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn train_dict(source: DictSource<'_>, tier: DictTier) -> Result<Vec<u8>> {
    let (samples, sizes) = pack_samples(source, tier)?;
    let sizes = cut_long_samples(sizes);
    Ok(zrecord_engine::train_dictionary(
        &samples,
        &sizes,
        tier.dict_size(),
    )?)
}

fn pack_samples(source: DictSource<'_>, tier: DictTier) -> Result<(Vec<u8>, Vec<usize>)> {
    match source {
        DictSource::Array { data, record_bytes } => {
            if record_bytes == 0 {
                return Err(Error::invalid(
                    "train_dict on an array needs record_bytes of at least 1, got 0",
                ));
            }
            if !data.len().is_multiple_of(record_bytes) {
                return Err(Error::invalid(format!(
                    "{} bytes are not a whole number of {record_bytes}-byte records",
                    data.len()
                )));
            }
            let n = (data.len() / record_bytes) as u64;
            if n == 0 {
                return Err(Error::invalid(
                    "cannot train a zstd dictionary on an empty array",
                ));
            }
            let idx = strided(n, sample_count(n, record_bytes as u64, tier));
            let mut samples = Vec::with_capacity(idx.len() * record_bytes);
            for &i in &idx {
                let at = i as usize * record_bytes;
                samples.extend_from_slice(&data[at..at + record_bytes]);
            }
            Ok((samples, vec![record_bytes; idx.len()]))
        }
        DictSource::Dense(core) => {
            let n = core.len();
            if n == 0 {
                return Err(Error::invalid(format!(
                    "cannot train a zstd dictionary on the empty store {}",
                    core.path().display()
                )));
            }
            let rb = core.record_bytes();
            let idx = strided(n, sample_count(n, rb as u64, tier));
            let mut samples = vec![0u8; idx.len() * rb];
            core.gather_bytes_into(&idx, &mut samples)?;
            Ok((samples, vec![rb; idx.len()]))
        }
        DictSource::Ragged(core) => {
            let n = core.len();
            if n == 0 {
                return Err(Error::invalid(format!(
                    "cannot train a zstd dictionary on the empty store {}",
                    core.path().display()
                )));
            }
            let idx = ragged_sample(core, tier)?;
            let mut batch = RaggedBatch::new();
            core.gather_into(&idx, &mut batch)?;
            let sizes = batch.offsets().windows(2).map(|w| w[1] - w[0]).collect();
            Ok((batch.data().to_vec(), sizes))
        }
        DictSource::Records(it) => {
            let budget = tier.sample_budget();
            let mut samples = Vec::new();
            let mut sizes = Vec::new();
            for r in it {
                // The record that crosses the budget gives only its head, so a
                // huge last record cannot make the sample buffer overshoot.
                let take = r.len().min(budget - samples.len());
                samples.extend_from_slice(&r[..take]);
                sizes.push(take);
                if samples.len() >= budget {
                    break;
                }
            }
            if sizes.is_empty() {
                return Err(Error::invalid("train_dict needs at least one record"));
            }
            Ok((samples, sizes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_matches_numpy_linspace() {
        // np.unique(np.linspace(0, 9, 4).astype(np.int64)) == [0, 3, 6, 9]
        assert_eq!(strided(10, 4), vec![0, 3, 6, 9]);
        // np.linspace(0, 6, 4) == [0, 2, 4, 6]
        assert_eq!(strided(7, 4), vec![0, 2, 4, 6]);
        // np.linspace(0, 4, 3) == [0, 2, 4]; k > n collapses duplicates
        assert_eq!(strided(5, 3), vec![0, 2, 4]);
        assert_eq!(strided(3, 10), vec![0, 1, 2]);
        assert_eq!(strided(1, 1), vec![0]);
        assert_eq!(strided(5, 1), vec![0]);
    }

    #[test]
    fn sample_counts_follow_the_budget() {
        assert_eq!(sample_count(1_000_000, 1024, DictTier::Fast), 4096);
        assert_eq!(sample_count(100, 1024, DictTier::Fast), 100);
        assert_eq!(sample_count(100, 1 << 30, DictTier::Max), 1);
        assert_eq!(sample_count(10, 0, DictTier::Balanced), 10);
    }

    /// Regression: the sample size came from the mean length of the first
    /// 32 records, so short records followed by long ones read the whole
    /// store (here 12 MiB, and 899 MiB in the audit's case) for a 4 MiB tier.
    #[test]
    fn ragged_sample_stays_within_the_budget_when_long_records_come_last() {
        use crate::{Codec, CreateOptions};
        let dir = tempfile::tempdir().unwrap();
        let s = RaggedStore::<u8>::create(dir.path().join("r"), &CreateOptions::new(Codec::Raw))
            .unwrap();
        let small: Vec<Vec<u8>> = (0..32).map(|i| vec![i as u8; 8]).collect();
        s.append_bytes(small.iter().map(|v| v.as_slice())).unwrap();
        let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        for _ in 0..12 {
            s.append_bytes([big.as_slice()]).unwrap();
        }
        let tier = DictTier::Fast;
        let (samples, sizes) = pack_samples(s.core().into(), tier).unwrap();
        assert!(
            samples.len() <= tier.sample_budget(),
            "sampled {} bytes for a {}-byte budget",
            samples.len(),
            tier.sample_budget()
        );
        assert_eq!(sizes.iter().sum::<usize>(), samples.len());
        // Still strided across the whole store: first and last records in,
        // small and long records both represented.
        let idx = ragged_sample(s.core(), tier).unwrap();
        assert_eq!(idx.first(), Some(&0));
        assert_eq!(idx.last(), Some(&(s.len() - 1)));
        assert!(
            sizes.contains(&8) && sizes.contains(&(1 << 20)),
            "{sizes:?}"
        );
        // The dictionary trains on that sample.
        assert!(!train_dict(s.core().into(), tier).unwrap().is_empty());
    }

    #[test]
    fn ragged_sample_thins_a_stride_that_hits_long_records() {
        use crate::{Codec, CreateOptions};
        let dir = tempfile::tempdir().unwrap();
        let s = RaggedStore::<u8>::create(dir.path().join("r"), &CreateOptions::new(Codec::Raw))
            .unwrap();
        // Long records exactly where the stride sized from the exact mean
        // lands (every other record of 200), one byte elsewhere: the mean
        // says 100 records fit 4 MiB, but those 100 hold 8 MiB.
        let tier = DictTier::Fast;
        let (n, long_len) = (200u64, 83_884usize);
        let hit = strided(n, 100);
        let long = vec![7u8; long_len];
        let records: Vec<&[u8]> = (0..n)
            .map(|i| {
                if hit.contains(&i) {
                    long.as_slice()
                } else {
                    &[1u8][..]
                }
            })
            .collect();
        s.append_bytes(records).unwrap();
        let total = hit.len() as u64 * long_len as u64 + (n - hit.len() as u64);
        assert_eq!(strided(n, sample_count(n, total.div_ceil(n), tier)), hit);
        let idx = ragged_sample(s.core(), tier).unwrap();
        let mut lens = Vec::new();
        payload_lengths(s.core(), &idx, &mut lens).unwrap();
        assert!(lens.iter().sum::<u64>() <= tier.sample_budget() as u64);
        assert!(idx.len() > 1 && idx[0] == 0 && *idx.last().unwrap() == n - 1);
        // One record larger than the budget: it alone is the sample.
        let s2 = RaggedStore::<u8>::create(dir.path().join("one"), &CreateOptions::new(Codec::Raw))
            .unwrap();
        let huge = vec![3u8; tier.sample_budget() + 1];
        s2.append_bytes([huge.as_slice(), huge.as_slice()]).unwrap();
        assert_eq!(ragged_sample(s2.core(), tier).unwrap(), vec![0]);
    }

    /// A budget that holds only a few long records (4 of 1 MiB for the fast
    /// tier) still trains: the records are cut into 128 KiB samples.
    #[test]
    fn a_few_long_records_are_cut_into_enough_samples_to_train() {
        use crate::{Codec, CreateOptions};
        assert_eq!(
            cut_long_samples(vec![3, SAMPLE_BLOCK, 2 * SAMPLE_BLOCK + 5]),
            vec![3, SAMPLE_BLOCK, SAMPLE_BLOCK, SAMPLE_BLOCK, 5]
        );
        let dir = tempfile::tempdir().unwrap();
        let s = RaggedStore::<u8>::create(dir.path().join("r"), &CreateOptions::new(Codec::Raw))
            .unwrap();
        let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        for _ in 0..8 {
            s.append_bytes([big.as_slice()]).unwrap();
        }
        let tier = DictTier::Fast;
        let (samples, sizes) = pack_samples(s.core().into(), tier).unwrap();
        assert!(samples.len() <= tier.sample_budget() && sizes.len() < 8);
        let dict = train_dict(s.core().into(), tier).unwrap();
        assert!(!dict.is_empty() && dict.len() <= tier.dict_size());
    }

    #[test]
    fn records_source_stops_at_the_budget_inside_a_record() {
        let budget = DictTier::Fast.sample_budget();
        let big = vec![7u8; budget + 12345];
        let small = [1u8, 2, 3];
        let recs: Vec<&[u8]> = vec![&small, &big, &small];
        let (samples, sizes) = pack_samples(DictSource::records(recs), DictTier::Fast).unwrap();
        assert_eq!(samples.len(), budget);
        assert_eq!(sizes, vec![3, budget - 3]);
    }

    /// Regression (audit f03): too little data to train on surfaced as
    /// "invalid argument: dictionary training failed: Src size is
    /// incorrect"; it is now the engine's training error, with the sizes.
    #[test]
    fn too_few_records_fail_with_the_training_error() {
        let recs: Vec<&[u8]> = vec![b"abc", b"def", b"ghi"];
        match train_dict(DictSource::records(recs), DictTier::Fast) {
            Err(
                e @ Error::Engine(zrecord_engine::Error::DictionaryTraining {
                    samples: 3,
                    bytes: 9,
                    dict_size: 32768,
                    ..
                }),
            ) => {
                let m = e.to_string();
                assert!(m.contains("on 3 samples of 9 bytes"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tier_names_round_trip() {
        for t in [DictTier::Fast, DictTier::Balanced, DictTier::Max] {
            assert_eq!(DictTier::from_name(t.name()).unwrap(), t);
        }
        assert!(DictTier::from_name("huge").is_err());
        assert_eq!(DictTier::default(), DictTier::Balanced);
    }
}
