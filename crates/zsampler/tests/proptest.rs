//! Property tests over random (n, batch_size, seed, step, world): indices in
//! range, batch lengths as documented, no repeats in a cyclic batch, the
//! cursor equal to the pure function, and shards concatenating to the global
//! batch. Catches edge cases the hand-picked tests miss (n near 2^64, n just
//! below or above batch_size, steps near u64::MAX).

use proptest::prelude::*;
use std::collections::HashSet;
use zsampler::{Mode, Sampler};

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Sequential), Just(Mode::Iid), Just(Mode::Cyclic)]
}

fn n() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..300, 1u64..=u64::MAX, (1u64 << 62)..=(1u64 << 63)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn batches_are_well_formed(
        n in n(), batch in 1usize..300, mode in mode(), seed: u64, step: u64,
    ) {
        let s = Sampler::new(n, batch, mode, seed).unwrap();
        let b = s.batch(step);
        let expect_len = if mode == Mode::Cyclic { (n as u128).min(batch as u128) as usize } else { batch };
        prop_assert_eq!(b.len(), expect_len);
        prop_assert!(b.iter().all(|&i| i < n));
        if mode == Mode::Cyclic {
            let distinct: HashSet<u64> = b.iter().copied().collect();
            prop_assert_eq!(distinct.len(), b.len());
        }
        // Deterministic, and the cursor agrees after a seek.
        let mut cur = s.clone();
        cur.seek(step);
        prop_assert_eq!(cur.next().unwrap(), b.clone());
        prop_assert_eq!(cur.next().unwrap(), s.batch(step.wrapping_add(1)));
    }

    #[test]
    fn shards_concatenate_to_the_global_batch(
        n in n(), batch in 1usize..300, mode in mode(), seed: u64, step: u64, world in 1usize..=16,
    ) {
        let s = Sampler::new(n, batch, mode, seed).unwrap();
        let whole = s.batch(step);
        if world > whole.len() {
            prop_assert!(s.sharded(0, world).is_err());
        } else {
            let mut joined = Vec::with_capacity(whole.len());
            for r in 0..world {
                joined.extend(s.clone().sharded(r, world).unwrap().batch(step));
            }
            prop_assert_eq!(joined, whole);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Cyclic mode over any small `n` and batch (n = 1, n < B, n not a
    /// multiple of B), at any cycle up to the last one steps can number,
    /// sharded or not: the cycle's batches together hold each index at most
    /// once, and exactly `n - n % B` of them (all `n` when n < B, per step).
    #[test]
    fn a_cyclic_cycle_is_a_permutation_minus_its_remainder(
        n in 1u64..200, batch in 1usize..300, seed: u64, cycle_hint: u64, world in 1usize..=5,
    ) {
        let s = Sampler::new(n, batch, Mode::Cyclic, seed).unwrap();
        let per_cycle = s.batches_per_cycle().unwrap();
        let cycle = cycle_hint % (u64::MAX / per_cycle);
        let world = world.min(s.global_batch_len());
        let mut seen = HashSet::new();
        for b in 0..per_cycle {
            let step = cycle * per_cycle + b;
            let mut joined = Vec::new();
            for r in 0..world {
                joined.extend(s.clone().sharded(r, world).unwrap().batch(step));
            }
            prop_assert_eq!(&joined, &s.batch(step));
            for i in joined {
                prop_assert!(i < n);
                prop_assert!(seen.insert(i), "index {} twice in cycle {}", i, cycle);
            }
        }
        let expect = if (n as u128) < batch as u128 { n } else { n - n % batch as u64 };
        prop_assert_eq!(seen.len() as u64, expect);
    }
}
