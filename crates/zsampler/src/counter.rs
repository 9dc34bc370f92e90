//! The counter-based generator: random words as a pure function of
//! `(seed, counter)`.
//!
//! Word `d` of the stream keyed by `seed` is wyrand's output function
//! applied to the counter: with `s = (d * WY0 + k_add) ^ k_xor`, the word is
//! the xor of the two halves of the 128-bit product `s * (s ^ WY1)`. With
//! `k_xor = 0` this is exactly wyrand started at `k_add` (which passes
//! BigCrush and PractRand), one widening multiply per word; the extra xor keeps
//! streams of different seeds from being mere shifts of one another. The keys
//! come from the seed through SplitMix64's finalizer `mix64`.
//!
//! Because a word depends on nothing but `(seed, d)`, jumping to any counter
//! is free, and the sampler draws the IID index at global lane `j` of step `s`
//! from word `s * global_batch + j` — seeking is arithmetic.

use rand_core::{Infallible, SeedableRng, TryRng};

/// wyrand's Weyl increment and mixing constant.
const WY0: u64 = 0xa076_1d64_78bd_642f;
const WY1: u64 = 0xe703_7ed1_a0b4_28db;

/// Weyl increment: 2^64 / golden ratio, odd.
pub(crate) const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function (Stafford variant 13): a bijection on `u64`
/// with full avalanche.
#[inline(always)]
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Per-seed key material (domain tags keep the three keys unrelated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    add: u64,
    xor: u64,
    retry: u64,
}

impl Key {
    pub(crate) const fn new(seed: u64) -> Key {
        Key {
            add: mix64(seed ^ 0x243f_6a88_85a3_08d3),
            xor: mix64(seed ^ 0x1319_8a2e_0370_7344),
            retry: mix64(seed ^ 0xa409_3822_299f_31d0),
        }
    }

    /// Word `d` of the main stream.
    #[inline(always)]
    pub(crate) const fn word(&self, d: u64) -> u64 {
        let s = d.wrapping_mul(WY0).wrapping_add(self.add) ^ self.xor;
        let t = (s as u128) * ((s ^ WY1) as u128);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// The `attempt`-th replacement for word `d` (used only when an unbiased
    /// reduction rejects a word: probability below `n / 2^64` per draw).
    #[inline(never)]
    pub(crate) const fn retry_word(&self, d: u64, attempt: u64) -> u64 {
        mix64(mix64(d ^ self.retry).wrapping_add(attempt.wrapping_mul(GAMMA)))
    }
}

/// Unbiased uniform draw in `0..n` for the draw number `d` (Lemire's
/// multiply-shift with rejection; rejected words are replaced by further
/// counter-derived words, so the draw stays a pure function of `(key, d)`).
///
/// `threshold` must be `2^64 mod n` (`n.wrapping_neg() % n`), `n >= 1`.
#[inline(always)]
pub(crate) fn bounded(key: &Key, d: u64, n: u64, threshold: u64) -> u64 {
    let m = u128::from(key.word(d)) * u128::from(n);
    if (m as u64) >= threshold {
        return (m >> 64) as u64;
    }
    bounded_slow(key, d, n, threshold)
}

#[cold]
#[inline(never)]
fn bounded_slow(key: &Key, d: u64, n: u64, threshold: u64) -> u64 {
    let mut attempt = 0u64;
    loop {
        attempt = attempt.wrapping_add(1);
        let m = u128::from(key.retry_word(d, attempt)) * u128::from(n);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

/// A seekable random stream: word `d` is a pure function of `(seed, d)`.
///
/// Implements rand_core 0.10's [`TryRng`] (with [`Infallible`] errors, hence
/// also [`rand_core::Rng`]) and [`SeedableRng`], so it plugs into anything
/// that takes a generator, while [`CounterRng::word_at`] and
/// [`CounterRng::set_counter`] give random access to the stream.
///
/// ```
/// use rand_core::Rng;
/// use zsampler::CounterRng;
///
/// let mut rng = CounterRng::new(42);
/// let a = rng.next_u64();
/// let b = rng.next_u64();
/// assert_eq!(rng.counter(), 2);
/// // Random access: the same words, without replaying the stream.
/// assert_eq!(CounterRng::new(42).word_at(1), b);
/// rng.set_counter(0);
/// assert_eq!(rng.next_u64(), a);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRng {
    key: Key,
    seed: u64,
    counter: u64,
}

impl CounterRng {
    /// The stream keyed by `seed`, positioned at counter 0.
    pub const fn new(seed: u64) -> CounterRng {
        CounterRng::at(seed, 0)
    }

    /// The stream keyed by `seed`, positioned at `counter`.
    pub const fn at(seed: u64, counter: u64) -> CounterRng {
        CounterRng {
            key: Key::new(seed),
            seed,
            counter,
        }
    }

    /// The seed this stream is keyed by.
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// The counter of the next word [`TryRng::try_next_u64`] returns.
    pub const fn counter(&self) -> u64 {
        self.counter
    }

    /// Moves the stream to `counter` (O(1)).
    pub const fn set_counter(&mut self, counter: u64) {
        self.counter = counter;
    }

    /// Word `counter` of this stream, without moving it.
    pub const fn word_at(&self, counter: u64) -> u64 {
        self.key.word(counter)
    }

    /// An unbiased uniform draw in `0..n` (Lemire's method with rejection)
    /// consuming exactly one counter, or `None` when `n == 0`.
    ///
    /// This is the draw the sampler's IID mode makes for each index.
    pub fn next_below(&mut self, n: u64) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let d = self.counter;
        self.counter = d.wrapping_add(1);
        Some(bounded(&self.key, d, n, n.wrapping_neg() % n))
    }
}

impl TryRng for CounterRng {
    type Error = Infallible;

    #[inline]
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        // The high half of a word: SplitMix64's best bits.
        self.try_next_u64().map(|w| (w >> 32) as u32)
    }

    #[inline]
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let w = self.key.word(self.counter);
        self.counter = self.counter.wrapping_add(1);
        Ok(w)
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        rand_core::utils::fill_bytes_via_next_word(dst, || self.try_next_u64())
    }
}

impl SeedableRng for CounterRng {
    /// Little-endian seed (bytes 0..8) and starting counter (bytes 8..16).
    type Seed = [u8; 16];

    fn from_seed(seed: [u8; 16]) -> CounterRng {
        let [s @ .., _, _, _, _, _, _, _, _] = seed;
        let [_, _, _, _, _, _, _, _, c @ ..] = seed;
        CounterRng::at(u64::from_le_bytes(s), u64::from_le_bytes(c))
    }

    fn seed_from_u64(state: u64) -> CounterRng {
        CounterRng::new(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::Rng;

    #[test]
    fn mix64_matches_splitmix64_reference_output() {
        // SplitMix64 seeded with 0: its first output is the well-known
        // 0xe220a8397b1dcdaf (Vigna's splitmix64.c).
        assert_eq!(mix64(GAMMA), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn words_have_balanced_bits_and_bytes() {
        // 2^18 words: every bit position set about half the time (6 sigma
        // band), and the top byte uniform (chi-square, df 255, p = 0.001:
        // critical value 330.5).
        let rng = CounterRng::new(2024);
        let words = 1u64 << 18;
        let mut ones = [0u64; 64];
        let mut top = [0u64; 256];
        for d in 0..words {
            let w = rng.word_at(d);
            for (b, c) in ones.iter_mut().enumerate() {
                *c += (w >> b) & 1;
            }
            top[(w >> 56) as usize] += 1;
        }
        let sigma = (words as f64 / 4.0).sqrt();
        for (b, &c) in ones.iter().enumerate() {
            let dev = (c as f64 - words as f64 / 2.0).abs();
            assert!(dev < 6.0 * sigma, "bit {b}: {c} ones of {words}");
        }
        let e = words as f64 / 256.0;
        let chi2: f64 = top.iter().map(|&c| (c as f64 - e).powi(2) / e).sum();
        assert!(chi2 < 330.5, "top byte chi2 {chi2}");
    }

    #[test]
    fn stream_equals_random_access() {
        let mut rng = CounterRng::at(7, u64::MAX - 2);
        let words: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        let direct: Vec<u64> = (0..5u64)
            .map(|i| CounterRng::new(7).word_at((u64::MAX - 2).wrapping_add(i)))
            .collect();
        assert_eq!(words, direct);
    }

    #[test]
    fn seeds_give_different_streams() {
        let a = CounterRng::new(1);
        let b = CounterRng::new(2);
        assert!((0..64).all(|d| a.word_at(d) != b.word_at(d)));
    }

    #[test]
    fn from_seed_reads_seed_and_counter_little_endian() {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&9u64.to_le_bytes());
        bytes[8..].copy_from_slice(&5u64.to_le_bytes());
        let rng = CounterRng::from_seed(bytes);
        assert_eq!((rng.seed(), rng.counter()), (9, 5));
    }

    #[test]
    fn fill_bytes_uses_words_in_order() {
        let mut rng = CounterRng::new(3);
        let mut buf = [0u8; 12];
        rng.fill_bytes(&mut buf);
        let w0 = CounterRng::new(3).word_at(0).to_le_bytes();
        let w1 = CounterRng::new(3).word_at(1).to_le_bytes();
        assert_eq!(&buf[..8], &w0);
        assert_eq!(&buf[8..], &w1[..4]);
        assert_eq!(rng.counter(), 2);
    }

    #[test]
    fn bounded_rejects_into_range_for_huge_n() {
        // n just above 2^63: about half of all words are rejected, so the
        // retry path is exercised constantly; every draw must stay in range.
        let n = (1u64 << 63) + 12345;
        let key = Key::new(11);
        let thr = n.wrapping_neg() % n;
        assert!((0..10_000).all(|d| bounded(&key, d, n, thr) < n));
        let mut rng = CounterRng::new(11);
        assert_eq!(rng.next_below(0), None);
        assert_eq!(rng.next_below(1), Some(0));
    }
}
