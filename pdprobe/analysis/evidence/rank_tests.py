"""Rank tests and robust lines as ``scipy.stats`` computes them, without importing it.

``import scipy.stats`` costs ~0.8 CPU-s (it loads scipy.optimize, scipy.sparse, scipy.spatial,
... and builds its distributions' docstrings); ``scipy.special`` ~0.3 CPU-s. The live path
calls Kendall's tau and Theil–Sen (rule trends) and Mann–Whitney U (change points) a handful
of times on series of a few hundred bins, so the same arithmetic is done here on numpy and
``scipy.special``: the algorithms of scipy 1.17 (``kendalltau``
method 'auto', variant 'b'; ``theilslopes`` method 'separate'; ``mannwhitneyu`` two-sided,
continuity-corrected, method 'auto' with its exact null distribution; ``spearmanr``),
operation for operation, so the numbers are identical, not just close.
``tests/analysis/evidence/test_rank_tests.py`` compares them with ``scipy.stats`` on random
inputs with ties and small samples.

Inputs are 1-d float64 arrays without NaN (the callers drop non-finite values first).
"""

from __future__ import annotations

import math
import warnings
from typing import Final

import numpy as np

# Kendall's tau: scipy's 'auto' method uses the exact null distribution without ties for up to
# this many points (or when at most one pair is discordant or concordant).
KENDALL_EXACT_MAX_N: Final = 33
# Mann–Whitney U: scipy's 'auto' method is asymptotic once both samples exceed this size.
MWU_EXACT_MAX_N: Final = 8
# Rows of the pairwise comparison matrix built at a time (bounds the temporary to ~8 MB of
# booleans for series of any length; trend series are a few hundred bins).
PAIR_CHUNK_ROWS: Final = 2048
# Ranks of non-negative whole numbers (token lengths: the length-mix test ranks 400,000 of
# them) are counted, not sorted (~10x faster), when the count per value takes at most this many
# slots per value ranked: a few lengths up to 10**6 must not allocate millions of counts.
COUNTING_SLOTS_PER_VALUE: Final = 4


def average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-based average ranks and tie counts, as ``scipy.stats._stats_py._rankdata``.

    The tie counts sit at each distinct value's first position in sorted order (zeros
    elsewhere), the layout scipy sums over.
    """
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    counted = _counted_ranks(x)
    if counted is not None:
        return counted
    order = np.argsort(x, kind="stable")
    ordinal = np.arange(1, n + 1, dtype=np.float64)
    y = x[order]
    first = np.concatenate([np.ones(1, dtype=bool), y[:-1] != y[1:]])
    indices = np.arange(n)[first]
    counts = np.diff(indices, append=np.asarray([n], dtype=indices.dtype))
    ranks = ordinal[first] + (counts.astype(np.float64) - 1) / 2
    ranks = np.repeat(ranks, counts)
    out = np.empty(n, dtype=np.float64)
    out[order] = ranks
    ties = np.zeros(n, dtype=np.float64)
    ties[first] = counts.astype(np.float64)
    return out, ties


def _counted_ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``average_ranks`` of non-negative whole numbers below ``COUNTING_SLOTS_PER_VALUE``
    times their count, from one count per value: each value's first position in sorted order
    is the count of smaller values, so the ranks (the same arithmetic on the same whole
    numbers) and the tie layout are the very arrays the sort gives. None for other values."""
    if not x.size or not x.min() >= 0 or x.max() >= COUNTING_SLOTS_PER_VALUE * x.size or \
            not np.array_equal(x, np.rint(x)):
        return None
    ints = x.astype(np.int64)
    counts = np.bincount(ints)
    first = np.cumsum(counts) - counts  # values strictly smaller: the first sorted position
    present = counts > 0
    ranks = (first + 1).astype(np.float64) + (counts.astype(np.float64) - 1) / 2
    ties = np.zeros(x.size, dtype=np.float64)
    ties[first[present]] = counts[present].astype(np.float64)
    return ranks[ints], ties


def _discordant_pairs(x: np.ndarray, y: np.ndarray) -> int:
    """Pairs with ``x_i < x_j`` and ``y_i > y_j`` (scipy's ``_kendall_dis``), exact."""
    total = 0
    for lo in range(0, x.size, PAIR_CHUNK_ROWS):
        xs, ys = x[lo:lo + PAIR_CHUNK_ROWS, None], y[lo:lo + PAIR_CHUNK_ROWS, None]
        total += int(np.count_nonzero((xs < x[None, :]) & (ys > y[None, :])))
    return total


def _rank_tie_stats(ranks: np.ndarray) -> tuple[int, int, int]:
    cnt = np.bincount(ranks).astype("int64", copy=False)
    cnt = cnt[cnt > 1]
    return (int((cnt * (cnt - 1) // 2).sum()),
            int((cnt * (cnt - 1.) * (cnt - 2)).sum()),
            int((cnt * (cnt - 1.) * (2 * cnt + 5)).sum()))


def kendall_p_exact(n: int, c: int) -> float:
    """Two-sided exact p-value of Kendall's tau with ``c`` concordant pairs (no ties).

    Kendall, "Rank Correlation Methods" (4th ed., 1970), as scipy's
    ``_mstats_basic._kendall_p_exact``.
    """
    c = int(min(c, (n * (n - 1)) // 2 - c))
    if n <= 0:
        raise ValueError(f"n ({n}) must be positive")
    if c < 0 or 4 * c > n * (n - 1):
        raise ValueError(f"c ({c}) must satisfy 0 <= 4c <= n(n-1) = {n * (n - 1)}.")
    if n <= 2:
        prob = 1.0
    elif c == 0:
        prob = 2.0 / math.factorial(n) if n < 171 else 0.0
    elif c == 1:
        prob = 2.0 / math.factorial(n - 1) if n < 172 else 0.0
    elif 4 * c == n * (n - 1):
        prob = 1.0
    elif n < 171:
        new = np.zeros(c + 1)
        new[0:2] = 1.0
        for j in range(3, n + 1):
            new = np.cumsum(new)
            if j <= c:
                new[j:] -= new[:c + 1 - j]
        prob = 2.0 * np.sum(new) / math.factorial(n)
    else:
        new = np.zeros(c + 1)
        new[0:2] = 1.0
        for j in range(3, n + 1):
            new = np.cumsum(new) / j
            if j <= c:
                new[j:] -= new[:c + 1 - j]
        prob = np.sum(new)
    return float(np.clip(prob, 0, 1))


def kendall_tau(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Kendall's tau-b and its two-sided p-value (``scipy.stats.kendalltau(x, y)``)."""
    from scipy.special import ndtr

    x = np.asarray(x).ravel()
    y = np.asarray(y).ravel()
    if x.size != y.size:
        raise ValueError("Array shapes are incompatible for broadcasting.")
    size = x.size
    if size <= 1:
        return float("nan"), float("nan")
    perm = np.argsort(y)  # sort on y and convert y to dense ranks
    x, y = x[perm], y[perm]
    y = np.r_[True, y[1:] != y[:-1]].cumsum(dtype=np.intp)
    perm = np.argsort(x, kind="mergesort")  # stable sort on x and convert x to dense ranks
    x, y = x[perm], y[perm]
    x = np.r_[True, x[1:] != x[:-1]].cumsum(dtype=np.intp)
    dis = _discordant_pairs(x, y)
    obs = np.r_[True, (x[1:] != x[:-1]) | (y[1:] != y[:-1]), True]
    cnt = np.diff(np.nonzero(obs)[0]).astype("int64", copy=False)
    ntie = int((cnt * (cnt - 1) // 2).sum())  # joint ties
    xtie, x0, x1 = _rank_tie_stats(x)
    ytie, y0, y1 = _rank_tie_stats(y)
    tot = (size * (size - 1)) // 2
    if xtie == tot or ytie == tot:
        return float("nan"), float("nan")
    con_minus_dis = tot - xtie - ytie + ntie - 2 * dis
    tau = np.minimum(1., max(-1., con_minus_dis / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)))
    if xtie == 0 and ytie == 0 and (size <= KENDALL_EXACT_MAX_N or min(dis, tot - dis) <= 1):
        pvalue = kendall_p_exact(size, tot - dis)
    else:
        m = size * (size - 1.)
        var = ((m * (2 * size + 5) - x1 - y1) / 18
               + (2 * xtie * ytie) / m + x0 * y0 / (9 * m * (size - 2)))
        z = con_minus_dis / np.sqrt(var)
        pvalue = float(2 * ndtr(-np.abs(z)))
    return float(tau), pvalue


def theil_sen(y: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """Theil–Sen slope and intercept (``scipy.stats.theilslopes(y, x)[:2]``, 'separate')."""
    y = np.array(y, dtype=float, copy=True).ravel()
    x = np.array(x, dtype=float, copy=True).ravel()
    if len(x) != len(y):
        raise ValueError("Array shapes are incompatible for broadcasting.")
    if len(x) < 2:
        return float("nan"), float("nan")
    deltax = x[:, np.newaxis] - x
    deltay = y[:, np.newaxis] - y
    slopes = deltay[deltax > 0] / deltax[deltax > 0]
    if not slopes.size:
        warnings.warn("All `x` coordinates are identical.", RuntimeWarning, stacklevel=2)
    slopes.sort()
    medslope = np.median(slopes)
    medinter = np.median(y) - medslope * np.median(x)
    return float(medslope), float(medinter)


def _mwu_sigma(n1: int, n2: int, a: int) -> np.ndarray:
    s_array = np.zeros(a + 1, dtype=int)
    for d in np.arange(1, n1 + 1):
        s_array[np.arange(d, a + 1, d)] += d
    for d in np.arange(n2 + 1, n2 + n1 + 1):
        s_array[np.arange(d, a + 1, d)] -= d
    return s_array[1:]


def _mwu_frequencies(n1: int, n2: int, maxu: int) -> np.ndarray:
    """P(U = u) for u in 0..maxu under the null, n1 <= n2 (Löffler 1983, as scipy's ``_MWU``)."""
    from scipy.special import binom

    total = binom(n1 + n2, n1)
    s_array = _mwu_sigma(n1, n2, maxu)
    configurations = np.zeros(maxu + 1, dtype=np.uint64)
    is_uint = True
    uint_max = np.iinfo(np.uint64).max
    configurations[0] = 1
    for u in np.arange(1, maxu + 1):
        coeffs = s_array[u - 1::-1]
        new_val = np.dot(configurations[:u], coeffs) / u
        if new_val > uint_max and is_uint:
            configurations = configurations.astype(float)
            is_uint = False
        configurations[u] = new_val
    out: np.ndarray = configurations / total
    return out


def _mwu_exact_sf(u: float, n1: int, n2: int) -> float:
    n1, n2 = min(n1, n2), max(n1, n2)
    k = np.asarray(u, np.int64)
    kc = np.asarray(n1 * n2 - k)
    below = k < kc
    if np.any(below):
        kc[below] = k[below]
        pmfs = _mwu_frequencies(n1, n2, int(np.max(kc)))
        cdfs = np.asarray(np.cumsum(pmfs)[kc])
        cdfs[below] = 1. - cdfs[below] + pmfs[kc[below]]
    else:
        pmfs = _mwu_frequencies(n1, n2, int(np.max(kc)))
        cdfs = np.asarray(np.cumsum(pmfs)[kc])
    return float(cdfs[()])


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of ``scipy.stats.mannwhitneyu(x, y)`` (continuity, method 'auto')."""
    from scipy.special import ndtr

    x = np.atleast_1d(np.asarray(x, dtype=np.float64))
    y = np.atleast_1d(np.asarray(y, dtype=np.float64))
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("`x` and `y` must not contain NaNs.")
    if x.size == 0 or y.size == 0:
        raise ValueError("`x` and `y` must be of nonzero size.")
    n1, n2 = x.shape[-1], y.shape[-1]
    ranks, t = average_ranks(np.concatenate([x, y]))
    r1 = np.sum(ranks[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2
    u2 = n1 * n2 - u1
    u = np.maximum(u1, u2)
    exact = (n1 <= MWU_EXACT_MAX_N or n2 <= MWU_EXACT_MAX_N) and not np.any(t > 1)
    if exact:
        p = np.asarray(_mwu_exact_sf(float(u), n1, n2), dtype=np.float64)
    else:
        mu = n1 * n2 / 2
        n = n1 + n2
        tie_term = np.sum(t ** 3 - t, axis=-1)
        s = np.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
        numerator = u - mu - 0.5
        with np.errstate(divide="ignore", invalid="ignore"):
            z = numerator / s
        p = ndtr(-z)
    p = p * 2
    return float(np.clip(p, 0., 1.))


def spearman_rho(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Spearman's rho and its two-sided p-value (``scipy.stats.spearmanr(a, b)``).

    NaN, NaN for fewer than two points or a constant input (scipy warns there; not here).
    """
    from scipy.special import stdtr

    pair = np.column_stack((np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))
    n_obs = pair.shape[0]
    if n_obs <= 1 or (pair[:, 0][0] == pair[:, 0]).all() or (pair[:, 1][0] == pair[:, 1]).all():
        return float("nan"), float("nan")
    if np.isnan(pair).any():
        return float("nan"), float("nan")
    ranked = np.column_stack((average_ranks(pair[:, 0])[0], average_ranks(pair[:, 1])[0]))
    rs = np.corrcoef(ranked, rowvar=False)
    dof = n_obs - 2
    with np.errstate(divide="ignore"):
        t = rs * np.sqrt((dof / ((rs + 1.0) * (1.0 - rs))).clip(0))
    prob = 2 * stdtr(dof, -np.abs(t))
    return float(rs[1, 0]), float(prob[1, 0])

