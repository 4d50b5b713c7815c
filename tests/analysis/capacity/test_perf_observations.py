"""Tests for pdprobe/analysis/capacity/perf_observations.py: busy periods on a time sample.

Above ``sampling.BUSY_SAMPLE_MAX_REQUESTS`` prefills the busy periods are reconstructed around a
time-block sample: whether a sampled request ran alone is exact, the busy segments kept are
exact ones, and the busy-time fit agrees with the full one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis import sampling
from pdprobe.analysis.capacity.model_build import too_thin
from pdprobe.analysis.capacity.perf_busy import BUSY_GAP_TOLERANCE_S
from pdprobe.analysis.capacity.perf_observations import (
    BUSY_SEGMENT_S,
    busy_periods,
    busy_segments,
    isolated_rows,
    sort_by_group,
)
from pdprobe.analysis.capacity.perf_policy import (
    BUSY_SEGMENTS,
    fit_prefill_busy,
    prefill_observations,
)
from pdprobe.profiles import DEFAULT_PROFILE, load_profile
from tests.analysis.capacity._data import alone_reference, dataset


def _prefills(n: int, instances: int = 4, rate: float = 12.0, seed: int = 7,
              idle_every: int | None = None) -> pd.DataFrame:
    """FCFS prefill queues per instance (a request starts when the one before it ends, so busy
    periods are chains of touching intervals), alone time ``0.02 + 1e-4·u`` plus noise; a
    quiet stretch every ten minutes leaves some requests alone (or, with ``idle_every``, a
    two-second pause after every so many requests: few alone)."""
    rng = np.random.default_rng(seed)
    arrival = 1.7e9 + np.cumsum(rng.exponential(1.0 / rate, n))
    if idle_every is None:
        quiet = ((arrival - arrival[0]) % 600.0) < 60.0
        arrival = arrival + np.cumsum(np.where(quiet, rng.exponential(0.5, n), 0.0))
    else:
        arrival = arrival + 2.0 * (np.arange(n) // idle_every)
    prompt = np.maximum(np.round(rng.lognormal(6.5, 0.9, n)), 1.0)
    service = (0.02 + 1e-4 * prompt) * rng.uniform(0.97, 1.03, n)
    inst = rng.integers(0, instances, n)
    start = np.empty(n)
    free = np.full(instances, -np.inf)
    for i in range(n):  # the queue itself (test data only)
        start[i] = max(arrival[i], free[inst[i]])
        free[inst[i]] = start[i] + service[i]
    return pd.DataFrame({
        "arrival_ts": arrival, "prompt_tokens": prompt.astype(np.int64),
        "output_tokens": np.full(n, 50, dtype=np.int64),
        "queue_s": start - arrival, "prefill_s": service,
        "prefill_instance": [f"p{i}" for i in inst],
    })


def test_sampled_periods_keep_exact_isolation_for_the_sampled_requests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    req = dataset(_prefills(40_000)).requests
    full = busy_periods(req, sample=False)
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_MAX_REQUESTS", 8_000)
    part = busy_periods(req)
    assert full.sample is None and full.observed is None
    assert part.sample is not None and part.observed is not None
    assert len(part) < 0.5 * len(full)
    alone_full = alone_reference(req)
    alone_part = np.zeros(len(req), dtype=bool)
    alone_part[isolated_rows(req, part)] = True
    observed = np.zeros(len(req), dtype=bool)
    observed[part.row[part.observed]] = True
    assert alone_part.sum() > 20
    assert np.array_equal(alone_part, alone_full & observed)  # exact on the sample, nowhere else
    assert np.flatnonzero(alone_full).tolist() == isolated_rows(req, full).tolist()


def test_sampled_busy_segments_are_exact_ones_and_the_fit_agrees(
        monkeypatch: pytest.MonkeyPatch) -> None:
    req = dataset(_prefills(40_000, rate=30.0)).requests
    seg_full = busy_segments(req, busy_periods(req, sample=False))
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_MAX_REQUESTS", 8_000)
    part = busy_periods(req)
    seg = busy_segments(req, part)
    assert seg is not None and seg_full is not None
    assert 0 < len(seg[2]) < 0.6 * len(seg_full[2])
    assert np.all(seg[2] > 0) and np.all(seg[2] < 4 * BUSY_SEGMENT_S)
    # every segment's busy time is the work of the prefills finishing in it: with a tight
    # service law, seconds per (0.02 + 1e-4·u) unit stay the full data's
    profile = load_profile(DEFAULT_PROFILE)
    a = fit_prefill_busy(req, profile, busy_periods(req, sample=False))
    b = fit_prefill_busy(req, profile, part)
    assert a is not None and b is not None
    u = np.array([500.0, 2000.0, 8000.0])
    assert b[0].batched_s(u) == pytest.approx(a[0].batched_s(u), rel=0.02)


def test_too_few_sampled_requests_alone_fall_back_to_every_prefill(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests alone on their instance are rare under load: when the sample holds too few to
    fit but the capture holds enough, the periods are rebuilt from every prefill."""
    req = dataset(_prefills(40_000, rate=48.0, idle_every=200))  # 188 alone, 24 sampled
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_MAX_REQUESTS", 4_000)
    part = busy_periods(req.requests)
    obs = prefill_observations(req, part)
    assert not isinstance(obs, str) and obs[3] == BUSY_SEGMENTS
    assert too_thin(req.requests, part, obs)
    full = prefill_observations(req, busy_periods(req.requests, sample=False))
    assert not isinstance(full, str) and full[3] != BUSY_SEGMENTS
    assert not too_thin(req.requests, busy_periods(req.requests, sample=False), full)


def test_sort_by_group_is_the_stable_sort_by_group_then_value() -> None:
    rng = np.random.default_rng(3)
    for groups in (1, 5, 300, 1000):  # radix first, and value first beyond FEW_GROUPS
        codes = rng.integers(0, groups, 5000)
        values = np.round(rng.normal(size=5000), 1)
        values[::97] = np.nan
        order = np.argsort(values, kind="stable")
        expected = order[np.argsort(codes[order], kind="stable")]
        assert np.array_equal(sort_by_group(codes, groups, values), expected)


def test_event_order_is_the_sort_by_group_of_the_events() -> None:
    """The sweep's events laid out per instance and sorted on their own: the permutation
    (and times) of ``sort_by_group`` of ``[starts, ends]`` by instance, ties (starts before
    ends, rows in order) and NaN included, for few and for many instances."""
    from pdprobe.analysis.capacity.perf_observations import _event_order

    rng = np.random.default_rng(4)
    for groups in (1, 5, 300):
        codes = np.sort(rng.integers(0, groups, 4000))
        codes = np.unique(codes, return_inverse=True)[1]  # dense: no instance empty
        s = np.round(rng.uniform(0, 50, len(codes)), 1)
        e = s + np.round(rng.uniform(0, 5, len(codes)), 1) * (rng.random(len(codes)) > 0.1)
        s[::211] = np.nan
        heads = np.flatnonzero(np.diff(codes, prepend=-1))
        order, times = _event_order(s, e, heads)
        times_all = np.concatenate([s, e])
        expected = sort_by_group(np.concatenate([codes, codes]), len(heads), times_all)
        assert np.array_equal(order, expected)
        assert np.array_equal(times, times_all[expected], equal_nan=True)


def _chunk(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """Passes over every request in chunks of ``size`` (odd boundaries)."""
    from pdprobe.analysis.capacity import perf_busy, perf_observations

    for module in (sampling, perf_busy, perf_observations):
        monkeypatch.setattr(module, "PASS_CHUNK", size)


@pytest.mark.parametrize("chunk", [13, 1 << 16])
def test_sampled_busy_periods_by_chunks_are_the_whole_array_reconstruction(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """The intervals are computed chunk by chunk and at the kept rows only: the periods equal a
    reconstruction from whole start/end arrays sampled with ``time_sample`` (rows without a
    start or an instance left out)."""
    frame = _prefills(12_000)
    frame.loc[frame.index % 17 == 0, "queue_s"] = np.nan
    frame["prefill_instance"] = frame["prefill_instance"].where(frame.index % 23 != 0)
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_MAX_REQUESTS", 3_000)
    _chunk(monkeypatch, chunk)
    req = dataset(frame).requests
    got = busy_periods(req)
    start = (req["arrival_ts"] + req["queue_s"]).to_numpy()
    end = start + req["prefill_s"].to_numpy()
    codes = req["prefill_instance"].cat.codes.to_numpy().astype(np.int64)
    valid = np.isfinite(start) & np.isfinite(end) & (codes >= 0)
    rows = np.flatnonzero(valid)
    # periods join prefills within the tolerance: the sample keeps those neighbours too
    ref = sampling.time_sample(start[rows], end[rows] + BUSY_GAP_TOLERANCE_S, codes[rows],
                               closed=True, max_requests=3_000)
    assert ref is not None and got.sample is not None and got.observed is not None
    keep = rows[ref.needed]
    order = sort_by_group(codes[keep], int(codes.max()) + 1, start[keep])
    np.testing.assert_array_equal(got.row, keep[order])
    np.testing.assert_array_equal(got.start, start[keep[order]])
    np.testing.assert_array_equal(got.end, end[keep[order]])
    np.testing.assert_array_equal(got.group, codes[keep[order]])
    np.testing.assert_array_equal(got.observed, ref.observed[ref.needed][order])


def _decoding(n: int, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    arrival = 1.7e9 + np.sort(rng.uniform(0, 3 * 3600, n))
    ttft = rng.uniform(0.05, 1.0, n)
    ttft[rng.random(n) < 0.05] = np.nan  # placed back from the end instead
    out = rng.integers(1, 400, n)
    tpot = rng.uniform(0.01, 0.05, n)
    e2e = ttft + tpot * (out - 1) + 0.01
    e2e[rng.random(n) < 0.02] = np.nan
    return pd.DataFrame({
        "arrival_ts": arrival, "prompt_tokens": rng.integers(10, 4000, n),
        "output_tokens": out, "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e,
        "decode_instance": [f"d{i}" for i in rng.integers(0, 5, n)],
        "status": np.where(rng.random(n) < 0.03, "error", "ok"),
    })


@pytest.mark.parametrize("chunk", [11, 1 << 16])
def test_decode_observations_by_chunks_are_the_whole_array_reconstruction(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Decode intervals computed chunk by chunk and at the needed rows only give the
    observations of whole arrays: placed from the first token (or back from the end), sampled
    with ``time_sample`` on the usable rows, swept on the needed ones."""
    from pdprobe.analysis.capacity.perf_observations import (
        decode_concurrency,
        decode_observations,
    )

    monkeypatch.setattr(sampling, "SAMPLE_MAX_REQUESTS", 2_000)
    _chunk(monkeypatch, chunk)
    ds = dataset(_decoding(10_000))
    got = decode_observations(ds)
    assert not isinstance(got, str) and "a sample of" in got[3]
    req = ds.requests
    arrival, ttft, tpot, e2e = (req[c].to_numpy(dtype=float)
                                for c in ("arrival_ts", "ttft_s", "tpot_s", "e2e_s"))
    out = req["output_tokens"].to_numpy(dtype=float)
    steps = np.maximum(out - 1.0, 0.0)
    s = arrival + ttft
    e = s + tpot * steps
    back = ~np.isfinite(s) & np.isfinite(arrival + e2e)
    e = np.where(back, arrival + e2e, e)
    s = np.where(back, e - tpot * steps, s)
    usable = np.flatnonzero(np.isfinite(s) & np.isfinite(e) & (e > s))
    codes = req["decode_instance"].cat.codes.to_numpy().astype(np.int64)
    ref = sampling.time_sample(s[usable], e[usable], codes[usable])
    assert ref is not None
    rows = usable[ref.needed]
    b, k = decode_concurrency(s[rows], e[rows], req["prompt_tokens"].to_numpy(dtype=float)[rows],
                              steps[rows], codes[rows])
    observed = np.zeros(len(req), dtype=bool)
    observed[usable[ref.observed]] = True
    fit = observed & (out >= 2) & np.isfinite(tpot) & (req["status"] == "ok").to_numpy()
    np.testing.assert_array_equal(got[0], b[fit[rows]])
    np.testing.assert_array_equal(got[1], k[fit[rows]])
    np.testing.assert_array_equal(got[2], tpot[fit])


@pytest.mark.parametrize("chunk", [9, 1 << 16])
def test_prefill_observations_by_chunks_are_the_whole_column_reads(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """The lone requests' observations and, when they are too few, every request's are read
    at the rows kept (by chunks): the values of whole float columns masked by known times and
    ok status."""
    from pdprobe.analysis.capacity import perf_policy

    _chunk(monkeypatch, chunk)
    monkeypatch.setattr(perf_policy, "PASS_CHUNK", chunk)
    frame = _prefills(3000)
    rng = np.random.default_rng(5)
    frame["cached_tokens"] = np.where(rng.random(len(frame)) < 0.5, np.nan,
                                      np.floor(frame["prompt_tokens"] * 0.3))
    frame.loc[frame.index % 13 == 0, "prefill_s"] = np.nan
    frame["status"] = np.where(rng.random(len(frame)) < 0.05, "error", "ok")
    ds = dataset(frame)
    req = ds.requests
    t = req["prefill_s"].to_numpy(dtype=float)
    prompt = req["prompt_tokens"].to_numpy(dtype=float)
    cached = np.nan_to_num(req["cached_tokens"].to_numpy(dtype=float), nan=0.0)
    ok = np.isfinite(t) & (req["status"] == "ok").to_numpy()
    alone = ok & alone_reference(req)
    for keep, what in ((alone, "prefill_s of requests alone on their instance"),
                       (ok, BUSY_SEGMENTS)):
        obs = prefill_observations(ds)
        assert not isinstance(obs, str) and obs[3] == what
        np.testing.assert_array_equal(obs[0], np.maximum(prompt - cached, 1.0)[keep])
        np.testing.assert_array_equal(obs[1], t[keep])
        np.testing.assert_array_equal(obs[2], cached[keep])
        # then too few alone for a fit: every request is read
        monkeypatch.setattr(perf_policy, "MIN_FIT_POINTS", int(alone.sum()) + 1)


@pytest.mark.parametrize("size, every", [(2_500, 20), (1_250, 40)])
def test_a_bounded_busy_sample_gives_the_full_fit_and_counts(
        monkeypatch: pytest.MonkeyPatch, size: int, every: int) -> None:
    """Above ``BUSY_SAMPLE_MAX_REQUESTS`` the busy-period sample is a size
    (``BUSY_SAMPLE_REQUESTS``), not a fraction: forced to 5,000 and 2,500 or 1,250 of 50,000
    prefills (one block in twenty or forty, as 1M and 500k or 250k are at 10 million) the plan
    keeps the full data's recommended counts and its prefill fit (predicted alone time within
    1 % at 500, 2,000 and 8,000 tokens, ±3 % service noise in the data; measured: 0.02-0.16 %
    and -0.02-+0.03 %, the same 2P/1D, prefill service time +0.09 % and +0.03 %, TTFT p90
    estimate +0.26 % and +0.05 %)."""
    from pdprobe.analysis.capacity.estimate import CapacityOptions, estimate_capacity
    from pdprobe.analysis.capacity.mix import mix_from_requests
    from pdprobe.analysis.capacity.model_build import build_model
    from pdprobe.values import Missing

    ds = dataset(_prefills(50_000, rate=12.0))
    profile = load_profile(DEFAULT_PROFILE)
    mix = mix_from_requests(ds.requests, rate_rps=None, timescale_s=1.0, description="t")
    options = CapacityOptions()
    full_model = build_model(ds, mix, profile)
    full = estimate_capacity(ds, Missing("none"), options)
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_MAX_REQUESTS", 5_000)
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_REQUESTS", size)
    part_model = build_model(ds, mix, profile)
    part = estimate_capacity(ds, Missing("none"), options)
    assert not isinstance(full, Missing) and not isinstance(part, Missing)
    assert any("busy periods are reconstructed around a sample" in n and f"every {every};" in n
               for n in part.notes)
    assert not any("busy periods are reconstructed around a sample" in n for n in full.notes)
    assert "alone on their instance" in part_model.inputs.prefill.source
    a, b = full_model.inputs.prefill, part_model.inputs.prefill
    u = np.array([500.0, 2000.0, 8000.0])
    assert b.alone_s(u) == pytest.approx(a.alone_s(u), rel=0.01)
    assert (b.a_s, b.b_s_per_token) == pytest.approx((a.a_s, a.b_s_per_token), rel=0.05)
    assert (part.recommended_prefill, part.recommended_decode) == (
        full.recommended_prefill, full.recommended_decode)
    assert part.prefill_service_s == pytest.approx(full.prefill_service_s, rel=0.01)
    # at or below the threshold every prefill is used, whatever the sample's size
    monkeypatch.setattr(sampling, "BUSY_SAMPLE_MAX_REQUESTS", 50_000)
    assert busy_periods(ds.requests).sample is None
