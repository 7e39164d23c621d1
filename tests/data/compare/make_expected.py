#!/usr/bin/env python3
"""The expected numbers hard-coded in tests/test_compare.cpp, computed independently of nibble.

Run:  pip install scipy numpy && python3 tests/data/compare/make_expected.py
(produced with scipy 1.17.1, numpy 2.x, Python 3.11). It prints C++ initialisers to paste.

- Mann-Whitney U: scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic",
  use_continuity=True), the call google/benchmark's tools/compare.py makes (its method "auto" is
  this for n >= 8 or with ties).
- Normal quantile: scipy.stats.norm.ppf.
- Bootstrap: (a) an exact re-implementation of nibble's resampling (splitmix64, rejection draw,
  x's draws then y's, numpy median and linear percentile), which must agree to rounding; and
  (b) scipy.stats.bootstrap(method="percentile") of the same statistic with its own RNG, which
  must agree within Monte Carlo error.
"""
import json
import os

import numpy as np
from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
REPORTS = os.path.join(HERE, "..", "reports")
M64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def below(self, n):
        limit = M64 - (M64 % n)
        while True:
            r = self.next()
            if r < limit:
                return r % n


def nibble_bootstrap(x, y, alpha, resamples, seed):
    rng = SplitMix64(seed)
    ratios = []
    for _ in range(resamples):
        rx = [x[rng.below(len(x))] for _ in range(len(x))]
        ry = [y[rng.below(len(y))] for _ in range(len(y))]
        ratios.append(np.median(ry) / np.median(rx))
    ratios = np.sort(np.array(ratios))
    return (np.median(y) / np.median(x), np.percentile(ratios, 100 * alpha / 2), np.percentile(ratios, 100 * (1 - alpha / 2)))


def cxx(v):
    return repr(float(v))


SETS = {
    "hand_2v2": ([1.0, 2.0], [3.0, 4.0]),
    "no_ties_5v5": ([1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0]),
    "ties_8v9": ([1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0], [2.0, 3.0, 4.0, 4.0, 5.0, 6.0, 6.0, 7.0, 8.0]),
    "overlap_12v10": (
        [101.2, 99.8, 100.5, 102.3, 98.7, 100.1, 101.9, 99.4, 100.0, 103.1, 98.2, 100.7],
        [100.9, 102.5, 101.7, 103.8, 100.2, 102.2, 104.0, 101.1, 100.6, 102.9],
    ),
    "all_equal": ([5.0, 5.0, 5.0], [5.0, 5.0]),
}


def main():
    print("// Mann-Whitney U: {name, x, y, U1 (of x), p two-sided}")
    for name, (x, y) in SETS.items():
        r = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic", use_continuity=True)
        p = r.pvalue if np.isfinite(r.pvalue) else float("nan")
        print(f'  {{"{name}", U1={cxx(r.statistic)}, p={cxx(p)}}}')

    rep = {}
    for who in ("unfused", "reference"):
        with open(os.path.join(REPORTS, f"h200-{who}-full.json")) as f:
            rep[who] = json.load(f)
    for fig in ("gpu_span_us", "host_wall_us"):
        x = rep["reference"]["timing"][fig]["samples"]
        y = rep["unfused"]["timing"][fig]["samples"]
        r = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic", use_continuity=True)
        print(f"// reports {fig}: x = reference, y = unfused: U1={cxx(r.statistic)} p={cxx(r.pvalue)}")
        # Same figure, first 40 vs last 40 calls of the unfused run (overlapping distributions).
        u = rep["unfused"]["timing"][fig]["samples"]
        r = stats.mannwhitneyu(u[:40], u[-40:], alternative="two-sided", method="asymptotic", use_continuity=True)
        print(f"// unfused {fig}[:40] vs [-40:]: U1={cxx(r.statistic)} p={cxx(r.pvalue)}")

    print("// normal quantiles")
    for p in (1e-10, 0.001, 0.02, 0.025, 0.3, 0.5, 0.8, 0.975, 0.99, 0.999999):
        print(f"  {{{p!r}, {cxx(stats.norm.ppf(p))}}}")

    print("// sample-size factor ((z_.975 + z_.8) se / d)^2 for ratio 1.02, interval [0.98, 1.06], threshold 1.05")
    za, zb = stats.norm.ppf(0.975), stats.norm.ppf(0.8)
    se = (np.log(1.06) - np.log(0.98)) / (2 * za)
    d = abs(np.log(1.02) - np.log(1.05))
    print("  factor:", cxx(((za + zb) * se / d) ** 2))

    print("// bootstrap, nibble's resampling re-implemented: ratio, lo, hi")
    x, y = SETS["overlap_12v10"]
    print("  overlap_12v10 alpha 0.05 2000 seed 42:", *map(cxx, nibble_bootstrap(x, y, 0.05, 2000, 42)))
    u = rep["unfused"]["timing"]["gpu_span_us"]["samples"]
    ref = rep["reference"]["timing"]["gpu_span_us"]["samples"]
    seed = 0x6E6962626C65
    print("  gpu_span reference->unfused alpha 0.05 2000 default seed:", *map(cxx, nibble_bootstrap(ref, u, 0.05, 2000, seed)))

    print("// bootstrap, scipy.stats.bootstrap percentile (own RNG; agree within Monte Carlo error)")
    for label, (a, b) in (("overlap_12v10", (x, y)), ("gpu_span reference->unfused", (ref, u))):
        res = stats.bootstrap(
            (np.array(a), np.array(b)),
            lambda p, q, axis=-1: np.median(q, axis=axis) / np.median(p, axis=axis),
            vectorized=True,
            paired=False,
            n_resamples=20000,
            confidence_level=0.95,
            method="percentile",
            random_state=np.random.default_rng(1),
        )
        print(f"  {label}: lo={cxx(res.confidence_interval.low)} hi={cxx(res.confidence_interval.high)}")


if __name__ == "__main__":
    main()
