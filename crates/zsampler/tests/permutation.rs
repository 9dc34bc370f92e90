//! Guards the keyed bijection behind cyclic mode: a Feistel/cycle-walking bug
//! would silently repeat some records and never show others, for some `n`
//! only (odd bit widths, n just above a power of two, n near 2^64).

mod common;

use std::collections::HashSet;
use zsampler::{CounterRng, Permutation};

#[test]
fn is_a_bijection_for_every_n_up_to_2000() {
    for n in 1..=2000u64 {
        for key in [0u64, 0xdead_beef] {
            let p = Permutation::new(n, key).unwrap();
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let v = p.get(i).unwrap();
                assert!(v < n, "n={n} key={key}: {i} -> {v} out of range");
                assert!(!seen[v as usize], "n={n} key={key}: {v} hit twice");
                seen[v as usize] = true;
                assert_eq!(p.position(v), Some(i), "n={n} key={key}: inverse");
            }
            assert_eq!(p.get(n), None);
            assert_eq!(p.position(n), None);
        }
    }
}

#[test]
fn is_injective_and_invertible_on_samples_of_huge_n() {
    for n in [(1u64 << 40) + 7, (1u64 << 63) - 1, 1u64 << 63, u64::MAX] {
        let p = Permutation::new(n, 12345).unwrap();
        let mut rng = CounterRng::new(n);
        let mut inputs = HashSet::new();
        let mut outputs = HashSet::new();
        for _ in 0..20_000 {
            let i = rng.next_below(n).unwrap();
            let v = p.get(i).unwrap();
            assert!(v < n);
            assert_eq!(p.position(v), Some(i), "n={n}: inverse of {i}");
            if inputs.insert(i) {
                assert!(outputs.insert(v), "n={n}: collision at {v}");
            }
        }
        // The ends of the range too.
        for i in [0, 1, n - 2, n - 1] {
            assert_eq!(p.position(p.get(i).unwrap()), Some(i));
        }
    }
}

#[test]
fn position_of_an_index_is_uniform_over_keys() {
    // Where index 0 lands, over many keys, must be uniform: a weak round
    // function shows up here as a skew.
    for n in [10u64, 37, 64] {
        let mut counts = vec![0u64; n as usize];
        for key in 0..40_000u64 {
            let p = Permutation::new(n, key).unwrap();
            counts[p.position(0).unwrap() as usize] += 1;
        }
        let chi2 = common::chi2_uniform(&counts);
        let crit = common::chi2_critical_p001(n as usize - 1);
        assert!(chi2 < crit, "n={n}: chi2 {chi2} >= {crit}");
    }
}

#[test]
fn different_keys_give_different_permutations() {
    for n in [2u64, 3, 5, 100, 1 << 20] {
        let len = n.min(64);
        let perms: HashSet<Vec<u64>> = (0..16u64)
            .map(|key| {
                let p = Permutation::new(n, key).unwrap();
                (0..len).map(|i| p.get(i).unwrap()).collect()
            })
            .collect();
        // With n = 2 there are only 2 permutations; otherwise expect many.
        let expect = if n == 2 { 2 } else { 4 };
        assert!(
            perms.len() >= expect,
            "n={n}: only {} distinct",
            perms.len()
        );
    }
}
