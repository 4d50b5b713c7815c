"""Arrival timing: the load windows' counts found by searching boundaries equal the pass."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.capacity import arrivals


def _arrivals(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        return np.sort(rng.uniform(0.0, 5_000.0, n)) + 1.7e9
    if kind == "bucketed":  # Mooncake-like 3 s buckets: many arrivals share a boundary
        return np.sort(np.round(rng.uniform(0.0, 3_000.0, n) / 3.0) * 3.0) + 1.7e9
    if kind == "on_edges":  # every arrival on a multiple of the window width
        return np.sort(rng.integers(0, 400, n).astype(np.float64) * 2.5)
    return np.cumsum(rng.exponential(0.01, n)) + 1.7e9  # "poisson"


@pytest.mark.parametrize("kind", ["uniform", "bucketed", "on_edges", "poisson"])
@pytest.mark.parametrize("win", [0.1, 0.7, 2.5, 10.0])
def test_searched_counts_are_the_counts_of_the_pass(kind: str, win: float) -> None:
    """Per window and per sub-bin, the boundary search counts what the chunked pass over
    every arrival counts (ties on boundaries, bucketed times, a tail joining the last
    window), with chunks smaller than the input."""
    rng = np.random.default_rng(len(kind) * 100 + int(win * 10))
    for n in (60, 5_000, 70_001):
        ts = _arrivals(kind, n, rng)
        n_win = max(1, min(int((ts[-1] - ts[0]) // win), 5_000))
        _, per_window, per_sub = arrivals.arrival_counts(ts, win, n_win, keep=True)
        got_window, got_sub = arrivals._searched_counts(ts, win, n_win)
        assert got_window.dtype == np.int64 and got_sub.dtype == np.int64
        assert np.array_equal(got_window, per_window)
        assert np.array_equal(got_sub, per_sub)
        assert got_window.sum() == n


def test_arrival_profile_without_windows_kept_searches_and_matches_the_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Many arrivals per window (the search) and the pass give the same profile."""
    ts = _arrivals("poisson", 200_000, np.random.default_rng(7))  # ~2,000 s: 200 windows
    searched = arrivals.arrival_profile(ts, 2.0, keep_windows=False)
    monkeypatch.setattr(arrivals, "ARRIVALS_PER_SEARCHED_BOUNDARY", 10**9)  # always the pass
    passed = arrivals.arrival_profile(ts, 2.0, keep_windows=False)
    assert searched[0] == passed[0] and searched[1] == passed[1]
    assert searched[2] is not None and passed[2] is not None
    assert np.array_equal(searched[2].share, passed[2].share)
    assert np.array_equal(searched[2].rate_factor, passed[2].rate_factor)


@pytest.mark.parametrize("kind", ["uniform", "bucketed", "poisson"])
def test_ordered_arrivals_are_not_checked_again_and_give_the_same_profile(
        monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Arrivals the caller knows ascend (no NaN) are used as they are when their ends are
    finite (no pass over them) and give the profile of the checked path; an infinite end
    still drops the infinite ones."""
    ts = _arrivals(kind, 20_000, np.random.default_rng(len(kind)))
    passes: list[int] = []
    real_isfinite = np.isfinite

    def counted(x: np.ndarray, *a: object, **k: object) -> np.ndarray:
        passes.append(np.size(x))
        return real_isfinite(x, *a, **k)

    monkeypatch.setattr(arrivals.np, "isfinite", counted)
    fast = arrivals.arrival_profile(ts, 2.0, ordered=True)
    assert max(passes, default=0) < len(ts)  # no check of every arrival
    plain = arrivals.arrival_profile(ts, 2.0)
    assert max(passes) == len(ts)
    assert fast[:2] == plain[:2] and fast[2] is not None and plain[2] is not None
    assert np.array_equal(fast[2].share, plain[2].share)
    assert np.array_equal(fast[2].rate_factor, plain[2].rate_factor)
    tail = np.append(ts, [np.inf, np.inf])
    assert arrivals._sorted_finite(tail, ordered=True).tolist() == ts.tolist()
    assert arrivals._sorted_finite(np.zeros(0), ordered=True).size == 0
