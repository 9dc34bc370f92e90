//! Statistics shared by the integration tests.

/// Upper-tail critical value of the chi-square distribution with `df`
/// degrees of freedom at p = 0.001, by the Wilson–Hilferty cube
/// approximation (within 1% of the exact value for df >= 2, and
/// conservative — slightly too large — at df = 1 and 2).
pub fn chi2_critical_p001(df: usize) -> f64 {
    // z such that P(Z > z) = 0.001 for a standard normal.
    const Z: f64 = 3.090_232_306_167_813;
    let k = df as f64;
    let c = 2.0 / (9.0 * k);
    k * (1.0 - c + Z * c.sqrt()).powi(3)
}

/// Pearson's chi-square statistic of `counts` against a uniform expectation.
pub fn chi2_uniform(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| {
            let d = c as f64 - expected;
            d * d / expected
        })
        .sum()
}

#[test]
fn critical_values_match_tables() {
    // Exact table values: df 10 -> 29.588, df 100 -> 149.449, df 1000 -> 1143.917.
    for (df, exact) in [(10, 29.588), (100, 149.449), (1000, 1143.917)] {
        let approx = chi2_critical_p001(df);
        assert!(
            (approx - exact).abs() / exact < 0.01,
            "df {df}: {approx} vs {exact}"
        );
    }
}
