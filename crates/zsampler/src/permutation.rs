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
//! Both halves are at most 32 bits wide, so the round function is a keyed
//! 32-bit multiply–xorshift–multiply hash whose top bits are kept; with
//! [`ROUNDS`] rounds every output bit depends on every input bit several
//! times over. Batches are computed [`LANES`] positions side by side.

use crate::counter::{GAMMA, mix64};
use crate::slot::Slot;

/// Feistel rounds. Even, so the half widths are back where they started.
pub(crate) const ROUNDS: usize = 6;

/// Positions computed side by side in [`Permutation::fill`]: independent
/// lanes give the CPU instruction-level parallelism and let the compiler
/// vectorize the 32-bit round function.
const LANES: usize = 16;

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
    /// Width of the left half at round 0 (the larger half), 1..=32.
    left: u32,
    /// Width of the right half at round 0, 1..=32.
    right: u32,
    keys: [u32; ROUNDS],
}

#[inline(always)]
const fn mask(width: u32) -> u64 {
    // width <= 32 always (bits <= 64, split in halves).
    (1u64 << width) - 1
}

/// The round function: `width` (1..=32) pseudo-random bits of `(x, key)`,
/// a keyed 32-bit multiply–xorshift hash whose top bits are kept (the
/// top bits of a product depend on every bit of the input).
#[inline(always)]
const fn round_fn(x: u32, key: u32, width: u32) -> u32 {
    let mut h = (x ^ key).wrapping_mul(0x9e37_79b1);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca77);
    h >> (32 - width)
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
        let mut keys = [0u32; ROUNDS];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = (mix64(base.wrapping_add((i as u64 + 1).wrapping_mul(GAMMA))) >> 32) as u32;
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
    fn encrypt(&self, x: u64) -> u64 {
        let (mut wl, mut wr) = (self.left, self.right);
        let mut l = (x >> wr) as u32;
        let mut r = (x & mask(wr)) as u32;
        for &k in &self.keys {
            // (L, R) with widths (wl, wr) -> (R, L ^ F(R)) with widths (wr, wl).
            (l, r) = (r, l ^ round_fn(r, k, wl));
            (wl, wr) = (wr, wl);
        }
        (u64::from(l) << wr) | u64::from(r)
    }

    /// The inverse of [`Self::encrypt`].
    fn decrypt(&self, x: u64) -> u64 {
        // After an even number of rounds the widths are (left, right) again;
        // undo rounds last to first. Round i took widths (wl, wr) to (wr, wl).
        let mut l = (x >> self.right) as u32;
        let mut r = (x & mask(self.right)) as u32;
        for (i, &k) in self.keys.iter().enumerate().rev() {
            let wl = if i % 2 == 0 { self.left } else { self.right };
            // Output (R, L ^ F(R)): recover R, then L.
            (l, r) = (r ^ round_fn(l, k, wl), l);
        }
        (u64::from(l) << self.right) | u64::from(r)
    }

    /// The value at position `i`, for `i < n` (no bounds check).
    #[inline(always)]
    pub(crate) fn apply(&self, i: u64) -> u64 {
        self.walk(self.encrypt(i))
    }

    /// Cycle walking: terminates because the network's cycle through the
    /// starting position returns to a value below `n`.
    #[inline(always)]
    fn walk(&self, mut x: u64) -> u64 {
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }

    /// `out[j] = apply(first + j)`, computed [`LANES`] positions at a time.
    /// Requires `first + out.len() <= n`. Writes every element of `out` and
    /// never reads one, so `out` may be uninitialised memory.
    pub(crate) fn fill<S: Slot>(&self, first: u64, out: &mut [S]) {
        let mut chunks = out.chunks_exact_mut(LANES);
        let mut pos = first;
        for chunk in &mut chunks {
            let mut l = [0u32; LANES];
            let mut r = [0u32; LANES];
            let (wl, wr) = (self.left, self.right);
            for j in 0..LANES {
                let x = pos + j as u64;
                l[j] = (x >> wr) as u32;
                r[j] = (x & mask(wr)) as u32;
            }
            // Two rounds at a time, in place: (L, R) -> (R, L ^ F0(R)) ->
            // (L ^ F0(R), R ^ F1(L ^ F0(R))), so the halves keep their widths.
            for pair in self.keys.chunks_exact(2) {
                for j in 0..LANES {
                    l[j] ^= round_fn(r[j], pair[0], wl);
                }
                for j in 0..LANES {
                    r[j] ^= round_fn(l[j], pair[1], wr);
                }
            }
            // The lanes that land outside `0..n` (under half) are walked
            // in `v`, then all are stored: `out` is only ever written.
            let mut v = [0u64; LANES];
            for j in 0..LANES {
                v[j] = (u64::from(l[j]) << wr) | u64::from(r[j]);
            }
            for x in &mut v {
                if *x >= self.n {
                    *x = self.walk(self.encrypt(*x));
                }
            }
            for (o, &x) in chunk.iter_mut().zip(&v) {
                o.set(x);
            }
            pos += LANES as u64;
        }
        for (o, i) in chunks.into_remainder().iter_mut().zip(pos..) {
            o.set(self.apply(i));
        }
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
