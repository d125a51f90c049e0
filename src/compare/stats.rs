//! The statistics behind a verdict: means, coefficient of variation, Welch's t-test (with its own
//! Student-t distribution, via the regularized incomplete beta function), a two-sided permutation
//! test on the difference of means, and multiple-comparison adjustment (Holm, Benjamini-Hochberg).
//!
//! Verdicts use Welch's t-test on the logarithms of one value per repeat: benchmark figures are
//! ratios (a change is a percentage), log values are close to normal, and unlike the exact
//! permutation test its p-value is not floored at 2/C(n+m, n), so 5 vs 5 repeats can pass a
//! Holm-adjusted level of 0.01/30.

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

/// The smallest p-value the two-sided exact permutation test on groups of `a` and `b` values can
/// give. With equal sizes the most extreme split and its mirror (the groups swapped) are equally
/// extreme, so the floor is 2/C(a+b, a); with unequal sizes the mirror is another split with
/// another difference, and the floor is 1/C. With 3 + 3 values that is 0.1; with 3 + 4, 1/35.
pub fn min_p_value(a: usize, b: usize) -> f64 {
    let extreme = if a == b { 2.0 } else { 1.0 };
    match combinations(a + b, a) {
        Some(c) if c > 0.0 => (extreme / c).min(1.0),
        _ => 0.0,
    }
}

/// The result of Welch's unequal-variance t-test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Welch {
    /// Difference of means, candidate (b) minus baseline (a).
    pub diff: f64,
    /// Standard error of the difference.
    pub se: f64,
    /// Welch-Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value of "equal means".
    pub p: f64,
}

impl Welch {
    /// The two-sided `level` (e.g. 0.95) confidence interval of the difference.
    pub fn ci(&self, level: f64) -> (f64, f64) {
        let half = student_t_quantile(1.0 - (1.0 - level) / 2.0, self.df) * self.se;
        (self.diff - half, self.diff + half)
    }
}

/// Welch's t-test of `b` against `a`; `None` when a side has fewer than two values. Two sides
/// without any spread give p = 1 when their means agree and p = 0 when they differ.
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (ma, mb) = (mean(a)?, mean(b)?);
    let (va, vb) = (
        stddev(a)?.powi(2) / a.len() as f64,
        stddev(b)?.powi(2) / b.len() as f64,
    );
    let se = (va + vb).sqrt();
    let diff = mb - ma;
    if se == 0.0 {
        let p = if diff == 0.0 { 1.0 } else { 0.0 };
        let df = (a.len() + b.len() - 2) as f64;
        return Some(Welch { diff, se, df, p });
    }
    let df =
        (va + vb).powi(2) / (va.powi(2) / (a.len() - 1) as f64 + vb.powi(2) / (b.len() - 1) as f64);
    let p = student_t_two_sided_p(diff / se, df);
    Some(Welch { diff, se, df, p })
}

/// The ratio of `b` to `a` (geometric means) with its two-sided confidence interval, by Welch's
/// t-test on the logarithms (the method of `compare`'s verdicts: benchmark figures change by
/// factors, and their logarithms are close to normal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioCi {
    /// exp(mean ln b - mean ln a).
    pub ratio: f64,
    /// Lower bound of the interval.
    pub lo: f64,
    /// Upper bound of the interval.
    pub hi: f64,
    /// Welch-Satterthwaite degrees of freedom.
    pub df: f64,
}

/// `b / a` with its `level` CI (e.g. 0.95); `None` when a side has fewer than two values or a
/// value is not positive (no logarithm).
pub fn ratio_ci(a: &[f64], b: &[f64], level: f64) -> Option<RatioCi> {
    if !a.iter().chain(b).all(|x| x.is_finite() && *x > 0.0) {
        return None;
    }
    let ln = |xs: &[f64]| xs.iter().map(|x| x.ln()).collect::<Vec<f64>>();
    let w = welch(&ln(a), &ln(b))?;
    let (lo, hi) = w.ci(level);
    Some(RatioCi {
        ratio: w.diff.exp(),
        lo: lo.exp(),
        hi: hi.exp(),
        df: w.df,
    })
}

/// P(|T| >= |t|) for Student's t with `df` degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2).
pub fn student_t_two_sided_p(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return if t.is_nan() { f64::NAN } else { 0.0 };
    }
    regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5).clamp(0.0, 1.0)
}

/// The `q` quantile (0.5 <= q < 1) of Student's t: Newton's method on the CDF, kept inside a
/// bracket that every step narrows (a step leaving it is a bisection instead). Newton needs
/// about six CDF evaluations where plain bisection needed seventy, and `compare` takes two or
/// three quantiles per verdict row (interval, detectable drop).
pub fn student_t_quantile(q: f64, df: f64) -> f64 {
    let upper_tail = 2.0 * (1.0 - q);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while student_t_two_sided_p(hi, df) > upper_tail && hi < 1e12 {
        lo = hi;
        hi *= 2.0;
    }
    // ln of the density's constant: Γ((ν+1)/2) / (√(νπ) Γ(ν/2)).
    let ln_c =
        ln_gamma((df + 1.0) / 2.0) - ln_gamma(df / 2.0) - 0.5 * (df * std::f64::consts::PI).ln();
    let density = |t: f64| (ln_c - (df + 1.0) / 2.0 * (t * t / df).ln_1p()).exp();
    let mut t = (lo + hi) / 2.0;
    for _ in 0..200 {
        let p = student_t_two_sided_p(t, df);
        if p > upper_tail {
            lo = t;
        } else {
            hi = t;
        }
        // The two-sided tail falls at twice the density.
        let newton = t + (p - upper_tail) / (2.0 * density(t));
        let next = if newton.is_finite() && newton > lo && newton < hi {
            newton
        } else {
            (lo + hi) / 2.0
        };
        if (next - t).abs() <= 1e-13 * t.max(1.0) {
            return next;
        }
        t = next;
    }
    t
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms: about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection keeps the series in its accurate range.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = G[1..]
        .iter()
        .enumerate()
        .fold(G[0], |acc, (i, g)| acc + g / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// I_x(a, b), the regularized incomplete beta function, by its continued fraction (Lentz), on
/// the side of the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) where it converges fast.
pub fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_continued_fraction(x, a, b) / a
    } else {
        1.0 - ln_front.exp() * beta_continued_fraction(1.0 - x, b, a) / b
    }
}

fn beta_continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / guard(1.0 + aa * d);
        c = guard(1.0 + aa / c);
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / guard(1.0 + aa * d);
        c = guard(1.0 + aa / c);
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// Family-wise (Holm) or false-discovery (Benjamini-Hochberg) adjustment of a set of p-values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Correction {
    /// Holm-Bonferroni step-down: controls the chance of any false verdict in the family.
    #[default]
    Holm,
    /// Benjamini-Hochberg step-up: controls the expected share of false verdicts.
    Bh,
    /// No adjustment: each row alone at alpha.
    None,
}

impl Correction {
    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Correction::Holm => "holm",
            Correction::Bh => "bh",
            Correction::None => "none",
        }
    }

    /// Adjusted p-values, in the order of `p`.
    pub fn adjust(self, p: &[f64]) -> Vec<f64> {
        let m = p.len();
        let mut order: Vec<usize> = (0..m).collect();
        order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
        let mut out = vec![0.0; m];
        match self {
            Correction::None => out.copy_from_slice(p),
            Correction::Holm => {
                let mut running = 0.0f64;
                for (rank, &i) in order.iter().enumerate() {
                    running = running.max(((m - rank) as f64 * p[i]).min(1.0));
                    out[i] = running;
                }
            }
            Correction::Bh => {
                let mut running = 1.0f64;
                for (rank, &i) in order.iter().enumerate().rev() {
                    running = running.min((m as f64 * p[i] / (rank + 1) as f64).min(1.0));
                    out[i] = running;
                }
            }
        }
        out
    }
}

impl std::fmt::Display for Correction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Correction::Holm => "Holm-Bonferroni",
            Correction::Bh => "Benjamini-Hochberg",
            Correction::None => "none (each row alone)",
        })
    }
}

impl std::str::FromStr for Correction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "holm" => Ok(Correction::Holm),
            "bh" | "fdr" => Ok(Correction::Bh),
            "none" => Ok(Correction::None),
            other => Err(format!(
                "unknown correction '{other}' (valid: holm, bh, none)"
            )),
        }
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
    fn unequal_sizes_floor_is_one_over_c() {
        // C(7, 3) = 35: the one most extreme split, its mirror is not a split of 3 vs 4.
        assert!((min_p_value(3, 4) - 1.0 / 35.0).abs() < 1e-12);
        assert!(min_p_value(3, 4) < 0.05);
        let p =
            permutation_p_value(&[1.0, 2.0, 3.0], &[10.0, 11.0, 12.0, 13.0], 10_000, 1).unwrap();
        assert!((p - 1.0 / 35.0).abs() < 1e-12, "{p}");
        assert!(p < 0.05);
    }

    #[test]
    fn student_t_matches_closed_forms_and_tables() {
        // df = 1 is Cauchy: p = 1 - 2/pi atan(t); df = 2: p = 1 - t / sqrt(2 + t^2).
        let cauchy = 1.0 - 2.0 / std::f64::consts::PI * 3.0f64.atan();
        assert!((student_t_two_sided_p(3.0, 1.0) - cauchy).abs() < 1e-12);
        assert!((student_t_two_sided_p(1.0, 1.0) - 0.5).abs() < 1e-12);
        let df2 = 1.0 - 2.0 / 6.0f64.sqrt();
        assert!((student_t_two_sided_p(2.0, 2.0) - df2).abs() < 1e-12);
        // scipy: 2 * stats.t.sf(2.0, 10) = 0.07338803477074..; stats.t.ppf(0.975, 10) =
        // 2.2281388519649385; stats.t.ppf(0.995, 5) = 4.032142983557536;
        // stats.t.ppf(0.975, 3) = 3.182446305284263.
        assert!((student_t_two_sided_p(2.0, 10.0) - 0.073_388_034_770_74).abs() < 1e-10);
        assert!((student_t_two_sided_p(2.228_138_851_964_938_5, 10.0) - 0.05).abs() < 1e-10);
        assert!((student_t_two_sided_p(4.032_142_983_557_536, 5.0) - 0.01).abs() < 1e-10);
        assert!((student_t_quantile(0.975, 3.0) - 3.182_446_305_284_263).abs() < 1e-8);
        assert!((student_t_quantile(0.975, 10.0) - 2.228_138_851_964_938_5).abs() < 1e-8);
        // Large df tends to the normal: 1.959963984540054 gives 0.05.
        assert!((student_t_two_sided_p(1.959_963_984_540_054, 1e7) - 0.05).abs() < 1e-6);
        assert_eq!(student_t_two_sided_p(0.0, 4.0), 1.0);
    }

    #[test]
    fn student_t_quantile_matches_closed_forms_over_a_grid() {
        // df = 1 (Cauchy): tan(pi (q - 1/2)); df = 2: (2q - 1) sqrt(2 / (1 - (2q - 1)^2)).
        for q in [0.5, 0.6, 0.8, 0.9, 0.975, 0.995, 0.999_5, 0.999_999] {
            let cauchy = (std::f64::consts::PI * (q - 0.5)).tan();
            let got = student_t_quantile(q, 1.0);
            assert!(
                (got - cauchy).abs() <= 1e-9 * cauchy.max(1.0),
                "q {q}: {got} vs {cauchy}"
            );
            let a = 2.0 * q - 1.0;
            let df2 = a * (2.0 / (1.0 - a * a)).sqrt();
            let got = student_t_quantile(q, 2.0);
            assert!(
                (got - df2).abs() <= 1e-9 * df2.max(1.0),
                "q {q}: {got} vs {df2}"
            );
        }
        // Every quantile gives back its tail, at fractional df too (Welch's).
        for df in [1.3, 2.7, 4.0, 7.9, 30.0, 1e4] {
            for q in [0.8, 0.975, 0.999_75] {
                let t = student_t_quantile(q, df);
                let p = student_t_two_sided_p(t, df);
                assert!(
                    (p - 2.0 * (1.0 - q)).abs() < 1e-10,
                    "df {df} q {q}: t {t}, p {p}"
                );
            }
        }
    }

    #[test]
    fn welch_by_hand() {
        // a: mean 2, var 1; b: mean 5, var 1; se = sqrt(1/3 + 1/3), t = 3 / 0.8165 = 3.674,
        // df = 4: 2 * stats.t.sf(3.6742346, 4) = 0.021311641128756..
        let w = welch(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap();
        assert!((w.df - 4.0).abs() < 1e-12, "{w:?}");
        assert!((w.diff - 3.0).abs() < 1e-12);
        assert!((w.p - 0.021_311_641_128_756).abs() < 1e-6, "{w:?}");
        let (lo, hi) = w.ci(0.95);
        // t(0.975, 4) = 2.7764451051977987
        assert!(
            (lo - (3.0 - 2.776_445_105_197_799 * w.se)).abs() < 1e-6,
            "{lo}"
        );
        assert!(hi > 3.0 && lo > 0.0);
        assert!(welch(&[1.0], &[1.0, 2.0]).is_none());
    }

    #[test]
    fn ratio_ci_is_welch_on_logs() {
        // ln values 0, ln 2 twice around: b is exactly twice a, value by value.
        let a = [1.0, 2.0, 4.0];
        let b = [2.0, 4.0, 8.0];
        let r = ratio_ci(&a, &b, 0.95).unwrap();
        assert!((r.ratio - 2.0).abs() < 1e-12, "{r:?}");
        let w = welch(&a.map(f64::ln), &b.map(f64::ln)).unwrap();
        let (lo, hi) = w.ci(0.95);
        assert!((r.lo - lo.exp()).abs() < 1e-12 && (r.hi - hi.exp()).abs() < 1e-12);
        assert!(r.lo < 2.0 && r.hi > 2.0 && (r.lo * r.hi - 4.0).abs() < 1e-9);
        assert!(ratio_ci(&[0.0, 1.0], &[1.0, 2.0], 0.95).is_none());
        assert!(ratio_ci(&[1.0], &[1.0, 2.0], 0.95).is_none());
    }

    #[test]
    fn holm_and_bh_adjust() {
        let p = [0.01, 0.04, 0.03, 0.005];
        // Holm: sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 with running max.
        let h = Correction::Holm.adjust(&p);
        assert_eq!(h, vec![0.03, 0.06, 0.06, 0.02]);
        // BH: sorted 0.005*4/1=0.02, 0.01*4/2=0.02, 0.03*4/3=0.04, 0.04*4/4=0.04, running min.
        let b = Correction::Bh.adjust(&p);
        for (x, y) in b.iter().zip([0.02, 0.04, 0.04, 0.02]) {
            assert!((x - y).abs() < 1e-12, "{b:?}");
        }
        assert_eq!(Correction::None.adjust(&p), p.to_vec());
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
