"""Binary searches over rows whose integer key never decreases (sorted times binned, say):
the first row of each key found at a few rows per key instead of binning every row."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def key_starts(key_at: Callable[[np.ndarray], np.ndarray], n_keys: int, n: int) -> np.ndarray:
    """For rows whose integer key never decreases (a floor division of sorted times, say),
    the first row whose key is at least ``k`` for each ``k`` in ``0..n_keys - 1`` (``n`` where
    none is): ``np.searchsorted(keys, range(n_keys))`` with ``key_at(positions)`` evaluated at
    about ``n_keys * log2(n)`` rows instead of every row's key (one binary search per key, all
    keys at once)."""
    lo = np.zeros(n_keys, dtype=np.int64)
    hi = np.full(n_keys, n, dtype=np.int64)
    targets = np.arange(n_keys)
    while n > 0:
        open_ = lo < hi
        if not open_.any():
            break
        mid = np.minimum((lo + hi) // 2, n - 1)
        reached = key_at(mid) >= targets
        hi = np.where(open_ & reached, mid, hi)
        lo = np.where(open_ & ~reached, mid + 1, lo)
    return lo


def runs_key_starts(key_at: Callable[[np.ndarray, np.ndarray], np.ndarray],
                    targets: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``key_starts`` for many runs at once: per target ``i``, the first position ``p`` in
    ``0..n[i] - 1`` whose key ``key_at(i, p)`` (non-decreasing in ``p``) is at least
    ``targets[i]``, else ``n[i]`` (one halving step for every open target per round, so many
    short runs cost the rounds of the longest, not a Python loop over runs)."""
    lo = np.zeros(len(targets), dtype=np.int64)
    hi = np.asarray(n, dtype=np.int64).copy()
    open_ = np.flatnonzero(lo < hi)
    while len(open_):
        mid = (lo[open_] + hi[open_]) // 2
        reached = key_at(open_, mid) >= targets[open_]
        hi[open_[reached]] = mid[reached]
        lo[open_[~reached]] = mid[~reached] + 1
        open_ = open_[lo[open_] < hi[open_]]
    return lo
