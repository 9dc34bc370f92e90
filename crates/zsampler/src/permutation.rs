//! A keyed bijection of `0..n`, computed on demand.
//!
//! A Feistel network permutes the `bits`-bit domain `0..2^bits`, where `bits`
//! is the bit length of `n - 1` (at least 2), so the domain is smaller than
//! `2n`. When `bits` is odd the halves differ by one bit and alternate sides
//! every round (the FFX construction of format-preserving encryption), which
//! is what keeps the domain below `2n` instead of the `4n` a balanced network
//! over the next even power of two can need. Values that land outside `0..n`
//! are fed through the network again ("cycle walking") until they land
//! inside; since the network is a permutation of the domain, this restricts
//! it to a permutation of `0..n`, with fewer than 2 passes on average.
//!
//! The round function is a keyed multiply–xorshift–multiply hash whose top
//! bits are kept; with [`ROUNDS`] rounds every output bit depends on every
//! input bit several times over.

use crate::counter::{GAMMA, mix64};

/// Feistel rounds. Even, so the half widths are back where they started.
pub(crate) const ROUNDS: usize = 6;

/// A keyed permutation of `0..n` that stores nothing the size of `n`.
///
/// Build it with [`Permutation::new`]; [`Permutation::get`] maps a position
/// to its value and [`Permutation::position`] inverts it. The sampler's cyclic
/// mode uses one per cycle, keyed by `(seed, cycle)`.
///
/// ```
/// use zsampler::Permutation;
///
/// let p = Permutation::new(10, 42)?;
/// let mut seen: Vec<u64> = (0..10).map(|i| p.get(i).unwrap()).collect();
/// assert_eq!(p.position(seen[3]), Some(3));
/// seen.sort();
/// assert_eq!(seen, (0..10).collect::<Vec<u64>>());
/// assert_eq!(p.get(10), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    n: u64,
    /// Width of the left half at round 0 (the larger half).
    left: u32,
    /// Width of the right half at round 0.
    right: u32,
    keys: [u64; ROUNDS],
}

#[inline(always)]
const fn mask(width: u32) -> u64 {
    // width <= 32 always (bits <= 64, split in halves).
    (1u64 << width) - 1
}

/// The round function: `width` pseudo-random bits of `(x, key)`.
#[inline(always)]
const fn round_fn(x: u64, key: u64, width: u32) -> u64 {
    let mut h = (x ^ key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    // 1 <= width <= 32: the top bits are the best mixed.
    h >> (64 - width)
}

impl Permutation {
    /// The permutation of `0..n` selected by `key`.
    ///
    /// # Errors
    /// [`Error::EmptyIndexSpace`](crate::Error::EmptyIndexSpace) if `n == 0`.
    pub fn new(n: u64, key: u64) -> crate::Result<Permutation> {
        if n == 0 {
            return Err(crate::Error::EmptyIndexSpace);
        }
        Ok(Permutation::new_nonzero(n, key))
    }

    pub(crate) fn new_nonzero(n: u64, key: u64) -> Permutation {
        debug_assert!(n > 0);
        let bits = (u64::BITS - (n - 1).leading_zeros()).max(2);
        let right = bits / 2;
        let left = bits - right;
        let base = mix64(key ^ 0x0805_9b1b_5c3c_2d7e);
        let mut keys = [0u64; ROUNDS];
        let mut i = 0;
        while i < ROUNDS {
            keys[i] = mix64(base.wrapping_add((i as u64 + 1).wrapping_mul(GAMMA)));
            i += 1;
        }
        Permutation {
            n,
            left,
            right,
            keys,
        }
    }

    /// The size of the permuted range, `n`.
    pub const fn len(&self) -> u64 {
        self.n
    }

    /// Always `false`: a permutation covers at least one index.
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// One pass of the Feistel network over the `bits`-bit domain.
    #[inline(always)]
    fn encrypt(&self, mut x: u64) -> u64 {
        let (mut wl, mut wr) = (self.left, self.right);
        for &k in &self.keys {
            let l = x >> wr;
            let r = x & mask(wr);
            x = (r << wl) | (l ^ round_fn(r, k, wl));
            (wl, wr) = (wr, wl);
        }
        x
    }

    /// The inverse of [`Self::encrypt`].
    fn decrypt(&self, mut x: u64) -> u64 {
        // After an even number of rounds the widths are (left, right) again;
        // undo rounds last to first. Round i took widths (wl, wr) to (wr, wl).
        for (i, &k) in self.keys.iter().enumerate().rev() {
            let (wl, wr) = if i % 2 == 0 {
                (self.left, self.right)
            } else {
                (self.right, self.left)
            };
            let r = x >> wl;
            let l = (x & mask(wl)) ^ round_fn(r, k, wl);
            x = (l << wr) | r;
        }
        x
    }

    /// The value at position `i`, for `i < n` (no bounds check).
    #[inline(always)]
    pub(crate) fn apply(&self, i: u64) -> u64 {
        let mut x = self.encrypt(i);
        // Cycle walking: terminates because the network's cycle through `i`
        // returns to `i < n`.
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }

    /// The value at position `i`, or `None` when `i >= n`.
    pub fn get(&self, i: u64) -> Option<u64> {
        (i < self.n).then(|| self.apply(i))
    }

    /// The position of `value` (the inverse of [`Self::get`]), or `None` when
    /// `value >= n`.
    pub fn position(&self, value: u64) -> Option<u64> {
        if value >= self.n {
            return None;
        }
        let mut x = self.decrypt(value);
        while x >= self.n {
            x = self.decrypt(x);
        }
        Some(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_is_below_twice_n() {
        for n in [
            1u64,
            2,
            3,
            4,
            5,
            8,
            9,
            1000,
            1 << 40,
            (1 << 40) + 7,
            u64::MAX,
        ] {
            let p = Permutation::new(n, 0).unwrap();
            let bits = p.left + p.right;
            assert!(bits <= 64 && p.left - p.right <= 1);
            if n > 4 {
                assert!(u128::from(n) * 2 > 1u128 << bits, "n={n} bits={bits}");
            }
            assert!(1u128 << bits >= u128::from(n));
        }
    }

    #[test]
    fn decrypt_inverts_encrypt_on_the_whole_domain() {
        for n in [3u64, 17, 100, 1 << 10] {
            let p = Permutation::new(n, 99).unwrap();
            let domain = 1u64 << (p.left + p.right);
            assert!((0..domain).all(|x| p.decrypt(p.encrypt(x)) == x));
        }
    }

    #[test]
    fn zero_n_is_an_error() {
        assert_eq!(Permutation::new(0, 1), Err(crate::Error::EmptyIndexSpace));
    }
}
