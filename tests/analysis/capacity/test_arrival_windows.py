"""Tests for pdprobe/analysis/capacity/arrival_windows.py: every window's arrival profile at
once is each window's ``arrival_profile`` to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.capacity.arrival_windows import window_profiles
from pdprobe.analysis.capacity.arrivals import arrival_profile


def _same(got, want) -> None:  # type: ignore[no-untyped-def]
    assert got[0] == want[0] and got[1] == want[1]
    if want[2] is None:
        assert got[2] is None
        return
    assert got[2].width_s == want[2].width_s and got[2].window_of is None
    np.testing.assert_array_equal(got[2].share, want[2].share)
    np.testing.assert_array_equal(got[2].rate_factor, want[2].rate_factor)


@pytest.mark.parametrize("timescale_s", [0.05, 0.5, 2.0])
def test_every_window_at_once_is_each_windows_own_profile(timescale_s: float) -> None:
    rng = np.random.default_rng(5)
    n = 400_000
    # bursts, a quantised stretch (many equal timestamps), a nearly empty window
    ts = 1.7e9 + np.cumsum(rng.exponential(1 / 200, n) * rng.choice([0.2, 1.0, 3.0], n))
    ts[100_000:140_000] = np.round(ts[100_000:140_000], 0)
    ts = np.sort(ts)
    edges = ts[0] + 300.0 * np.arange(int((ts[-1] - ts[0]) // 300.0) + 1)
    edges = np.append(edges, ts[-1])
    bounds = np.concatenate([[0], np.searchsorted(ts, edges[1:-1], side="left"), [n]])
    bounds = np.insert(bounds, 3, bounds[3] - 30)  # a window of 30 arrivals
    wanted = np.ones(len(bounds) - 1, dtype=bool)
    wanted[1] = False
    got = window_profiles(ts, bounds, timescale_s, wanted=wanted)
    assert got[1] is None
    for w in np.flatnonzero(wanted):
        part = ts[bounds[w]:bounds[w + 1]]
        _same(got[w], arrival_profile(part, timescale_s, keep_windows=False, ordered=True))


def test_an_infinite_last_arrival_takes_the_windows_own_profile() -> None:
    ts = np.append(1.7e9 + np.arange(5000) * 0.01, np.inf)
    bounds = np.array([0, 2500, len(ts)])
    got = window_profiles(ts, bounds, 0.1)
    for w in range(2):
        part = ts[bounds[w]:bounds[w + 1]]
        _same(got[w], arrival_profile(part, 0.1, keep_windows=False, ordered=True))
