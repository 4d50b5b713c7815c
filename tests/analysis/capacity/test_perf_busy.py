"""Busy periods from timestamps with float rounding (``perf_busy``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis import sampling
from pdprobe.analysis.capacity.perf_busy import (
    BUSY_GAP_TOLERANCE_S,
    busy_periods,
    busy_segments,
    isolated_rows,
)

from ._data import alone_reference

EPOCH_S = 1.7e9  # epoch seconds today: float64 steps of ~2.4e-7 s


def _fifo(gaps_s: np.ndarray, service_s: np.ndarray) -> pd.DataFrame:
    """One instance serving requests first come, first served: each arrives ``gaps_s`` after
    the previous one. The queue runs on times since the first arrival and the capture
    records epoch arrivals, so ``arrival_ts + queue_s`` lands only within rounding of the
    previous request's end (as a server's own clock and its log's timestamps do)."""
    arrival = np.cumsum(gaps_s)
    start = np.empty(len(arrival))
    free = -np.inf
    for i, a in enumerate(arrival):  # the queue itself (test data only)
        start[i] = max(a, free)
        free = start[i] + service_s[i]
    return pd.DataFrame({"arrival_ts": EPOCH_S + arrival, "queue_s": start - arrival,
                         "prefill_s": service_s,
                         "prefill_instance": ["p0"] * len(arrival)})


def test_back_to_back_prefills_with_rounded_timestamps_form_one_period() -> None:
    rng = np.random.default_rng(1)
    n = 400
    service = rng.uniform(0.05, 0.3, n)
    req = _fifo(rng.uniform(0.001, 0.01, n), service)  # arrivals far faster than service
    start = (req["arrival_ts"] + req["queue_s"]).to_numpy()
    end = start + req["prefill_s"].to_numpy()
    gap = start[1:] - end[:-1]
    # the fixture has what captures have: queued starts rounded past the previous end
    assert (gap > 0).sum() > 10 and np.abs(gap).max() < 1e-6
    busy = busy_periods(req, sample=False)
    assert np.all(busy.period == 1)  # one period: every request but the first queued
    assert not isolated_rows(req, busy).size and not alone_reference(req).any()


def test_a_real_idle_gap_opens_a_period() -> None:
    service = np.full(6, 0.1)
    # 2, 3 queue behind 1 (touching); 4 arrives 5 ms after 3 ends: idle; 5, 6 alone
    gaps = np.array([0.0, 0.01, 0.01, 0.3 - 0.02 + 0.005, 1.0, 1.0])
    req = _fifo(gaps, service)
    assert req["queue_s"].iloc[3] == 0.0
    busy = busy_periods(req, sample=False)
    assert busy.period.tolist() == [1, 1, 1, 2, 3, 4]
    assert isolated_rows(req, busy).tolist() == [3, 4, 5]
    assert alone_reference(req).tolist() == [False] * 3 + [True] * 3
    # the tolerance is what tells them apart: a gap of 5 ms is well beyond it
    assert 4 * BUSY_GAP_TOLERANCE_S < 0.005


@pytest.mark.parametrize("idle_s", [0.0, 0.2 * BUSY_GAP_TOLERANCE_S, 5e-3])
def test_the_sampled_reconstruction_keeps_neighbours_within_the_tolerance(
        monkeypatch: pytest.MonkeyPatch, idle_s: float) -> None:
    """Pairs of prefills, the second starting ``idle_s`` after the first ends (plus
    rounding): a sampled request's alone-ness is the full data's, so the sample also keeps
    a neighbour that only comes within the tolerance."""
    n_pairs = 3000
    first = EPOCH_S + 7.0 * np.arange(n_pairs)  # pairs 7 s apart, the first 0.13 s long
    arrival = np.empty(2 * n_pairs)
    arrival[0::2] = first
    arrival[1::2] = first + 0.13 + idle_s
    req = pd.DataFrame({"arrival_ts": arrival, "queue_s": np.zeros(2 * n_pairs),
                        "prefill_s": np.full(2 * n_pairs, 0.13),
                        "prefill_instance": ["p0"] * (2 * n_pairs)})
    full = busy_periods(req, sample=False)
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_MAX_REQUESTS", 1_000)
    part = busy_periods(req)
    assert part.observed is not None and len(part) < 0.5 * len(full)
    alone = alone_reference(req)
    assert alone.all() if idle_s > BUSY_GAP_TOLERANCE_S else not alone.any()
    for busy in (full, part):  # exact for every request, or every sampled one
        rows = isolated_rows(req, busy)
        assert rows.dtype == np.int32
        np.testing.assert_array_equal(rows, np.flatnonzero(alone_reference(req, busy)))
    # the periods' ends are the true ones (the tolerance only widened the overlap test)
    np.testing.assert_array_equal(
        part.end, (req["arrival_ts"] + req["queue_s"] + req["prefill_s"]).to_numpy()[part.row])


def test_int8_instance_codes_give_the_segments_int64_codes_give(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """126 instances: a categorical column's int8 codes (pandas: up to 125; the last code
    + 1 still an int8) are kept as the periods' groups; the sampled segments are those of the
    same periods with int64 groups."""
    rng = np.random.default_rng(4)
    n = 40_000
    arrival = EPOCH_S + np.sort(rng.uniform(0, 3600, n))
    names = [f"p{i:03d}" for i in range(126)]
    req = pd.DataFrame({"arrival_ts": arrival, "queue_s": np.zeros(n),
                        "prefill_s": rng.uniform(0.5, 8.0, n),
                        "prefill_instance": pd.Categorical(
                            [names[i] for i in rng.integers(0, 126, n)], categories=names),
                        "prompt_tokens": rng.integers(10, 9000, n).astype(float),
                        "cached_tokens": np.zeros(n)})
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_MAX_REQUESTS", 10_000)
    busy = busy_periods(req)
    assert busy.group is not None and busy.group.dtype == np.int8 and busy.group.max() == 125
    wide = replace(busy, group=busy.group.astype(np.int64))
    got, want = busy_segments(req, busy), busy_segments(req, wide)
    assert got is not None and want is not None and len(got[2]) > 100
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_empty_request_table_has_no_busy_periods() -> None:
    """No rows: no period and no traceback (the chunked first pass never runs)."""
    busy = busy_periods(_fifo(np.zeros(0), np.zeros(0)), sample=False)
    assert len(busy.period) == 0
