//! The statistics behind a verdict: means, coefficient of variation, and a two-sided permutation
//! test on the difference of means. Permutation tests assume nothing about the distribution,
//! which suits benchmark figures (skewed, few repeats, occasional outliers).

use rand::seq::SliceRandom;
use rand::SeedableRng;

/// Arithmetic mean; `None` for an empty set.
pub fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Sample standard deviation (n - 1); `None` below two values.
pub fn stddev(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
    Some(var.sqrt())
}

/// Coefficient of variation in percent; `None` below two values or for a zero mean.
pub fn cv_pct(xs: &[f64]) -> Option<f64> {
    let m = mean(xs)?;
    (m != 0.0).then_some(stddev(xs)? / m.abs() * 100.0)
}

/// The smallest p-value a permutation test on groups of `a` and `b` values can give: the two
/// most extreme splits out of C(a+b, a). With 3 + 3 values that is 0.1, so such a test can never
/// reach alpha = 0.05, whatever the data.
pub fn min_p_value(a: usize, b: usize) -> f64 {
    match combinations(a + b, a) {
        Some(c) if c > 0.0 => (2.0 / c).min(1.0),
        _ => 0.0,
    }
}

/// C(n, k) as a float; `None` when it overflows.
fn combinations(n: usize, k: usize) -> Option<f64> {
    let k = k.min(n.saturating_sub(k));
    let mut c = 1.0f64;
    for i in 0..k {
        c = c * (n - i) as f64 / (i + 1) as f64;
    }
    c.is_finite().then_some(c)
}

/// Two-sided permutation test of "both sets come from one distribution", on the absolute
/// difference of means. When every split can be enumerated within `permutations`, the exact
/// p-value is computed; otherwise `permutations` random relabellings from a `seed`ed RNG, with the
/// usual (count + 1) / (permutations + 1) so p is never 0. `None` when either set is empty.
pub fn permutation_p_value(a: &[f64], b: &[f64], permutations: usize, seed: u64) -> Option<f64> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let observed = (mean(a)? - mean(b)?).abs();
    // Floating-point sums of the same values in another order differ in the last bits.
    let tol = observed.abs() * 1e-9 + f64::EPSILON;
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    match combinations(pooled.len(), a.len()) {
        Some(c) if c <= permutations.max(1) as f64 => Some(exact(&pooled, a.len(), observed - tol)),
        _ => Some(sampled(
            pooled,
            a.len(),
            observed - tol,
            permutations.max(1),
            seed,
        )),
    }
}

fn split_diff(pooled: &[f64], in_a: &[bool]) -> f64 {
    let (mut sa, mut na, mut sb, mut nb) = (0.0, 0usize, 0.0, 0usize);
    for (x, &is_a) in pooled.iter().zip(in_a) {
        if is_a {
            sa += x;
            na += 1;
        } else {
            sb += x;
            nb += 1;
        }
    }
    (sa / na as f64 - sb / nb as f64).abs()
}

/// Every way of choosing `k` of the pooled values as group A.
fn exact(pooled: &[f64], k: usize, threshold: f64) -> f64 {
    let n = pooled.len();
    let mut idx: Vec<usize> = (0..k).collect();
    let (mut total, mut extreme) = (0u64, 0u64);
    loop {
        let mut in_a = vec![false; n];
        idx.iter().for_each(|&i| in_a[i] = true);
        total += 1;
        if split_diff(pooled, &in_a) >= threshold {
            extreme += 1;
        }
        if !next_combination(&mut idx, n) {
            break;
        }
    }
    extreme as f64 / total as f64
}

/// Advances `idx` (sorted indices into 0..n) to the next k-combination; false after the last.
fn next_combination(idx: &mut [usize], n: usize) -> bool {
    let k = idx.len();
    for i in (0..k).rev() {
        if idx[i] < n - k + i {
            idx[i] += 1;
            for j in i + 1..k {
                idx[j] = idx[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

fn sampled(mut pooled: Vec<f64>, k: usize, threshold: f64, permutations: usize, seed: u64) -> f64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n = pooled.len();
    let mut extreme = 0usize;
    for _ in 0..permutations {
        pooled.shuffle(&mut rng);
        let ma = pooled[..k].iter().sum::<f64>() / k as f64;
        let mb = pooled[k..].iter().sum::<f64>() / (n - k) as f64;
        if (ma - mb).abs() >= threshold {
            extreme += 1;
        }
    }
    (extreme + 1) as f64 / (permutations + 1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_test_of_fully_separated_groups_hits_the_floor() {
        let p = permutation_p_value(&[1.0, 2.0, 3.0], &[10.0, 11.0, 12.0], 10_000, 1).unwrap();
        assert!((p - min_p_value(3, 3)).abs() < 1e-12, "{p}");
        assert!((min_p_value(3, 3) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn identical_groups_give_p_one() {
        let p = permutation_p_value(&[5.0; 40], &[5.0; 40], 2_000, 1).unwrap();
        assert_eq!(p, 1.0);
    }

    #[test]
    fn cv_of_known_set() {
        // mean 10, sample sd 2 -> 20 %
        let cv = cv_pct(&[8.0, 10.0, 12.0]).unwrap();
        assert!((cv - 20.0).abs() < 1e-9, "{cv}");
    }

    #[test]
    fn combinations_enumerate_all() {
        let mut idx = vec![0, 1];
        let mut n = 1;
        while next_combination(&mut idx, 5) {
            n += 1;
        }
        assert_eq!(n, 10);
    }
}
