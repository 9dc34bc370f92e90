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
//! sees the data's beginning, middle and end. An iterator of records has no
//! known length; like loaderx, its records are taken from the start until
//! the budget is reached.
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
    Ok(zrecord_engine::train_dictionary(
        &samples,
        &sizes,
        tier.dict_size(),
    )?)
}

fn pack_samples(source: DictSource<'_>, tier: DictTier) -> Result<(Vec<u8>, Vec<usize>)> {
    match source {
        DictSource::Array { data, record_bytes } => {
            if record_bytes == 0 || !data.len().is_multiple_of(record_bytes) {
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
                return Err(Error::invalid(
                    "cannot train a zstd dictionary on an empty store",
                ));
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
                return Err(Error::invalid(
                    "cannot train a zstd dictionary on an empty store",
                ));
            }
            // Mean payload size of the first (up to) 32 records, from the
            // record table (no decoding), as loaderx estimates it.
            let head: Vec<u64> = (0..n.min(32)).map(|i| 2 * i).collect();
            let mut lens = vec![0u64; head.len()];
            core.engine().record_lengths(&head, &mut lens, None)?;
            let mean = lens.iter().sum::<u64>() / lens.len() as u64;
            let idx = strided(n, sample_count(n, mean.max(1), tier));
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
                samples.extend_from_slice(r);
                sizes.push(r.len());
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

    #[test]
    fn tier_names_round_trip() {
        for t in [DictTier::Fast, DictTier::Balanced, DictTier::Max] {
            assert_eq!(DictTier::from_name(t.name()).unwrap(), t);
        }
        assert!(DictTier::from_name("huge").is_err());
        assert_eq!(DictTier::default(), DictTier::Balanced);
    }
}
