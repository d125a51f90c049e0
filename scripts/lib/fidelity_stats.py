"""What every mode of scripts/bench-fidelity prints about a list of per-pair ratios: the median,
its 95% bootstrap confidence interval, and the verdict against the 2% goal (issue 12: a vmbench
cell measures within 2% of a hand run; issue 28 item 1: the CI of the ratio within [0.98, 1.02]).
"""
import math
import random
import statistics as st

GOAL = 0.02


def ci(xs, n=10000, seed=12):
    """95% bootstrap CI of the median of xs (percentile method, fixed seed: reruns agree)."""
    rng = random.Random(seed)
    meds = sorted(st.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def verdict(lo, hi, goal=GOAL):
    """Within: the whole CI inside 1 +- goal; outside: the whole CI beyond it; else inconclusive."""
    if 1 - goal <= lo and hi <= 1 + goal:
        return "within 2%"
    if hi < 1 - goal or lo > 1 + goal:
        return "outside 2%"
    return "inconclusive (CI wider than +-2%)"


def summary(label, ratios):
    """One line per ratio: median [CI] sd n verdict; for an inconclusive one, a second line with
    the pairs a +-2% CI would need at this spread."""
    lo, hi = ci(ratios)
    med = st.median(ratios)
    sd = st.stdev(ratios) if len(ratios) > 1 else float("nan")
    v = verdict(lo, hi)
    out = f"{label:<18} median {med:.4f} [95% CI {lo:.4f}, {hi:.4f}]  sd {sd:.4f}  n={len(ratios)}  {v}"
    if v.startswith("inconclusive") and sd == sd:
        # Normal approximation (the median's CI is about 1.25 times the mean's, so a lower bound).
        need = math.ceil((1.96 * sd / GOAL) ** 2)
        out += f"\n{'':<18} at this sd, a +-2% CI needs at least ~{need} pairs"
    return out


if __name__ == "__main__":
    # Self-check: python3 scripts/lib/fidelity_stats.py
    assert verdict(0.985, 1.01) == "within 2%"
    assert verdict(0.90, 0.97) == "outside 2%" and verdict(1.03, 1.2) == "outside 2%"
    assert verdict(0.95, 1.01).startswith("inconclusive")
    lo, hi = ci([1.0] * 9)
    assert lo == hi == 1.0
    lo, hi = ci([0.9, 1.0, 1.1, 0.95, 1.05])
    assert 0.9 <= lo <= 1.0 <= hi <= 1.1
    print("fidelity_stats: ok")
