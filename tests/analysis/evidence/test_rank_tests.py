"""The rank tests give scipy.stats' numbers exactly (not approximately) without importing it."""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
from scipy import stats

from pdprobe.analysis.evidence.rank_tests import (
    average_ranks,
    kendall_p_exact,
    kendall_tau,
    mann_whitney_p,
    spearman_rho,
    theil_sen,
)

SIZES = (2, 3, 4, 5, 7, 8, 9, 12, 20, 33, 34, 40, 75, 240)


def same(a: float, b: float) -> bool:
    """Bit-identical, NaN equal to NaN."""
    return (np.isnan(a) and np.isnan(b)) or a == b


def samples(seed: int) -> Iterator[np.ndarray]:
    """Continuous values, heavy ties (a few distinct levels), integers, and a few extremes."""
    rng = np.random.default_rng(seed)
    for n in SIZES:
        yield rng.normal(size=n)
        yield rng.integers(0, 3, size=n).astype(np.float64)
        yield rng.integers(0, max(2, n // 2), size=n).astype(np.float64)
        yield np.round(rng.lognormal(size=n), 1)


def test_average_ranks_and_ties_match_scipy() -> None:
    from scipy.stats._stats_py import _rankdata

    for x in samples(1):
        ranks, ties = average_ranks(x)
        want_ranks, want_ties = _rankdata(x, "average", return_ties=True)
        assert np.array_equal(ranks, want_ranks)
        assert np.array_equal(ties, want_ties)


def test_kendall_tau_matches_scipy_with_and_without_ties() -> None:
    rng = np.random.default_rng(2)
    checked = 0
    for y in samples(3):
        n = y.size
        for x in (np.arange(n, dtype=np.float64) * 15.0 + 1.7e9,  # a time axis
                  rng.integers(0, 4, size=n).astype(np.float64),  # ties in x too
                  y + rng.normal(scale=0.5, size=n)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # constant inputs: scipy warns, both NaN
                want = stats.kendalltau(x, y)
            tau, p = kendall_tau(x, y)
            assert same(tau, float(want.statistic)), (n, x, y)
            assert same(p, float(want.pvalue)), (n, x, y)
            checked += 1
    assert checked == len(SIZES) * 4 * 3


def test_kendall_exact_p_edge_cases_match_scipy() -> None:
    from scipy.stats._mstats_basic import _kendall_p_exact

    for n in (1, 2, 3, 5, 10, 33, 171, 180):
        tot = n * (n - 1) // 2
        for c in sorted({0, 1, tot // 4, tot // 2, tot - 1, tot}):
            if c < 0 or c > tot:
                continue
            assert kendall_p_exact(n, c) == float(_kendall_p_exact(n, c)), (n, c)


def test_kendall_tau_monotone_and_nearly_monotone_series() -> None:
    # One discordant pair above 33 points still takes the exact branch in scipy.
    for n in (34, 50, 120):
        t = np.arange(n, dtype=np.float64)
        for v in (t.copy(), -t, np.r_[t[:10], t[11], t[10], t[12:]]):
            want = stats.kendalltau(t, v)
            tau, p = kendall_tau(t, v)
            assert tau == float(want.statistic) and p == float(want.pvalue)


def test_theil_sen_matches_scipy() -> None:
    rng = np.random.default_rng(4)
    for y in samples(5):
        n = y.size
        for x in (np.arange(n, dtype=np.float64) * 15.0 + 1.7e9,
                  rng.integers(0, 5, size=n).astype(np.float64)):
            if np.ptp(x) == 0:
                continue
            want = stats.theilslopes(y, x)
            slope, intercept = theil_sen(y, x)
            assert same(slope, float(want.slope)) and same(intercept, float(want.intercept))


def test_mann_whitney_matches_scipy_exact_and_asymptotic() -> None:
    rng = np.random.default_rng(6)
    sizes = (1, 2, 3, 5, 8, 9, 12, 30, 200)
    checked = 0
    for n1 in sizes:
        for n2 in sizes:
            for a, b in ((rng.normal(size=n1), rng.normal(loc=0.7, size=n2)),  # no ties
                         (rng.integers(0, 3, size=n1).astype(np.float64),  # ties
                          rng.integers(0, 4, size=n2).astype(np.float64)),
                         (np.full(n1, 2.0), np.full(n2, 2.0))):  # all tied
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    want = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
                    got = mann_whitney_p(a, b)
                assert same(got, want), (a, b)
                checked += 1
    assert checked == len(sizes) ** 2 * 3


def test_spearman_matches_scipy() -> None:
    rng = np.random.default_rng(7)
    for x in samples(8):
        y = x * rng.normal(size=x.size) + rng.integers(0, 3, size=x.size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = stats.spearmanr(x, y)
        rho, p = spearman_rho(x, y)
        assert same(rho, float(want.statistic)) and same(p, float(want.pvalue)), (x, y)


def test_importing_the_evidence_statistics_does_not_import_scipy_stats() -> None:
    code = ("import sys, numpy as np\n"
            "from pdprobe.analysis.evidence import stats\n"
            "t = np.arange(40.0); v = np.sin(t / 5) + t / 10\n"
            "stats.trend(t, v); stats.change_point(t, v); stats.spearman(t, v)\n"
            "print('scipy.stats' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_whole_numbers_are_ranked_by_counting_with_the_sorts_arrays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Token lengths are ranked by counting: the very ranks, tie layout and p-value of the sort
    (and of scipy)."""
    from scipy.stats._stats_py import _rankdata

    from pdprobe.analysis.evidence import rank_tests

    rng = np.random.default_rng(8)
    a = np.rint(rng.lognormal(6, 1.0, 30_000)).clip(0, 60_000)
    b = np.rint(rng.lognormal(6.05, 1.0, 20_000)).clip(0, 60_000)
    x = np.concatenate([a, b])
    assert rank_tests._counted_ranks(x) is not None
    counted, p_counted = average_ranks(x), mann_whitney_p(a, b)
    monkeypatch.setattr(rank_tests, "COUNTING_SLOTS_PER_VALUE", 0)  # every value sorted
    assert rank_tests._counted_ranks(x) is None
    ranks, ties = average_ranks(x)
    assert np.array_equal(counted[0], ranks) and np.array_equal(counted[1], ties)
    want_ranks, want_ties = _rankdata(x, "average", return_ties=True)
    assert np.array_equal(ranks, want_ranks) and np.array_equal(ties, want_ties)
    assert p_counted == mann_whitney_p(a, b)
    assert p_counted == float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert rank_tests._counted_ranks(np.array([0.5, 2.0])) is None  # not whole numbers
