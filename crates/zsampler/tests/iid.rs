//! Guards IID mode's uniformity: a biased reduction (plain modulo, a wrong
//! Lemire threshold) or a weak counter hash would over-draw some indices.
//! Chi-square tests over 10^6 draws with fixed seeds, at p = 0.001.

mod common;

use zsampler::{Mode, Sampler};

/// Counts `draws` IID indices of a sampler over `n`, bucketed into `buckets`
/// equal ranges (`buckets == n` counts every index).
fn counts(n: u64, seed: u64, buckets: u64, draws: u64) -> Vec<u64> {
    let batch = 1000;
    let s = Sampler::new(n, batch, Mode::Iid, seed).unwrap();
    let mut counts = vec![0u64; buckets as usize];
    let mut buf = vec![0u64; batch];
    for step in 0..draws / batch as u64 {
        s.batch_at(step, &mut buf).unwrap();
        for &i in &buf {
            assert!(i < n);
            let b = (u128::from(i) * u128::from(buckets) / u128::from(n)) as usize;
            counts[b] += 1;
        }
    }
    counts
}

#[test]
fn iid_draws_are_uniform_over_small_and_non_power_of_two_n() {
    for (n, seed) in [(3u64, 1u64), (10, 2), (1000, 3), (65_536, 4), (100_003, 5)] {
        let c = counts(n, seed, n, 1_000_000);
        let chi2 = common::chi2_uniform(&c);
        let crit = common::chi2_critical_p001(n as usize - 1);
        assert!(chi2 < crit, "n={n}: chi2 {chi2} >= {crit}");
    }
}

#[test]
fn iid_draws_are_uniform_over_huge_n() {
    // Bucketed: 2^64 / n rejects ~1/4 of the words for the last n, so the
    // rejection path must stay unbiased too.
    for (n, seed) in [
        ((1u64 << 40) + 7, 6u64),
        ((1u64 << 63) - 1, 7),
        (3u64 << 62, 8),
    ] {
        let c = counts(n, seed, 100, 1_000_000);
        let chi2 = common::chi2_uniform(&c);
        let crit = common::chi2_critical_p001(99);
        assert!(chi2 < crit, "n={n}: chi2 {chi2} >= {crit}");
    }
}

#[test]
fn consecutive_iid_draws_are_independent() {
    // Pairs of neighbouring draws over n = 10: 100 cells, uniform if
    // successive counters are uncorrelated.
    let n = 10u64;
    let s = Sampler::new(n, 1000, Mode::Iid, 77).unwrap();
    let mut cells = vec![0u64; 100];
    for step in 0..1000 {
        let b = s.batch(step);
        for pair in b.chunks_exact(2) {
            cells[(pair[0] * n + pair[1]) as usize] += 1;
        }
    }
    let chi2 = common::chi2_uniform(&cells);
    assert!(chi2 < common::chi2_critical_p001(99), "chi2 {chi2}");
}
