//! Guards cyclic mode's contract: within a cycle every index appears exactly
//! once except the dropped remainder, no batch repeats an index, every batch
//! is full, the remainder (and the whole order) changes from cycle to cycle,
//! and a store smaller than one batch yields one short permuted batch.

use std::collections::HashSet;
use zsampler::{Mode, Sampler};

fn check_cycles(n: u64, batch: usize, cycles: u64) {
    let s = Sampler::new(n, batch, Mode::Cyclic, 42).unwrap();
    let per_cycle = n / batch as u64;
    assert_eq!(s.batches_per_cycle(), Some(per_cycle));
    let mut dropped_sets = HashSet::new();
    for c in 0..cycles {
        let mut seen = vec![false; n as usize];
        for b in 0..per_cycle {
            let batch_idx = s.batch(c * per_cycle + b);
            assert_eq!(batch_idx.len(), batch, "every batch is full");
            for &i in &batch_idx {
                assert!(i < n);
                assert!(!seen[i as usize], "n={n} B={batch} cycle {c}: {i} twice");
                seen[i as usize] = true;
            }
        }
        let dropped: Vec<u64> = (0..n).filter(|&i| !seen[i as usize]).collect();
        assert_eq!(dropped.len() as u64, n % batch as u64);
        // The dropped ones are exactly the cycle permutation's tail.
        let perm = s.permutation(c);
        let mut tail: Vec<u64> = (per_cycle * batch as u64..n)
            .map(|p| perm.get(p).unwrap())
            .collect();
        tail.sort_unstable();
        assert_eq!(dropped, tail);
        dropped_sets.insert(dropped);
    }
    if !n.is_multiple_of(batch as u64) && n > batch as u64 + 1 {
        assert!(dropped_sets.len() > 1, "the remainder never changes");
    }
}

#[test]
fn each_cycle_visits_every_index_once_minus_the_remainder() {
    check_cycles(1000, 7, 5);
    check_cycles(1000, 8, 3);
    check_cycles(1024, 256, 4);
    check_cycles(4099, 64, 3);
    check_cycles(17, 16, 20);
    check_cycles(5, 5, 3);
}

#[test]
fn successive_cycles_walk_different_orders() {
    let s = Sampler::new(10_000, 100, Mode::Cyclic, 7).unwrap();
    let per_cycle = 100;
    let cycle = |c: u64| -> Vec<u64> {
        (0..per_cycle)
            .flat_map(|b| s.batch(c * per_cycle + b))
            .collect()
    };
    let orders: Vec<Vec<u64>> = (0..4).map(cycle).collect();
    for a in 0..orders.len() {
        for b in a + 1..orders.len() {
            let same = orders[a]
                .iter()
                .zip(&orders[b])
                .filter(|(x, y)| x == y)
                .count();
            // Independent random orders agree in ~1 place on average.
            assert!(same < 20, "cycles {a} and {b} agree in {same} places");
        }
    }
}

#[test]
fn a_store_smaller_than_a_batch_yields_a_fresh_short_permutation_each_step() {
    for n in [1u64, 2, 3, 50, 255] {
        let s = Sampler::new(n, 256, Mode::Cyclic, 3).unwrap();
        assert_eq!(s.batch_len(), n as usize);
        assert_eq!(s.global_batch_len(), n as usize);
        let mut orders = HashSet::new();
        for step in 0..20 {
            let mut b = s.batch(step);
            orders.insert(b.clone());
            b.sort_unstable();
            assert_eq!(b, (0..n).collect::<Vec<_>>(), "n={n} step {step}");
        }
        if n >= 3 {
            assert!(orders.len() > 1, "n={n}: the same order every step");
        }
    }
}

#[test]
fn no_index_repeats_inside_a_batch_for_huge_n() {
    for n in [(1u64 << 40) + 7, (1u64 << 63) - 1, 1u64 << 63] {
        let s = Sampler::new(n, 8192, Mode::Cyclic, 9).unwrap();
        for step in [0u64, 1, 1 << 20, n / 8192 - 1, n / 8192, u64::MAX] {
            let b = s.batch(step);
            let distinct: HashSet<u64> = b.iter().copied().collect();
            assert_eq!(distinct.len(), 8192, "n={n} step={step}");
            assert!(b.iter().all(|&i| i < n));
        }
    }
}
