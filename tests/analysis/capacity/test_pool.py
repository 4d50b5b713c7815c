"""The prefill pool: partial batching, fluid backlog across windows, decode occupancy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity.mix import LoadWindows, arrival_profile
from pdprobe.analysis.capacity.perf_fit import (
    DecodeModel,
    busy_segments,
    isolated_prefills,
)
from pdprobe.analysis.capacity.pool import PrefillPool, ServiceMoments
from pdprobe.analysis.capacity.queueing import allen_cunneen
from pdprobe.analysis.capacity.rates import (
    KV_OCCUPANCY_Z,
    decode_count_for_memory,
    decode_occupancy,
)

from ._data import mix


def test_service_between_alone_and_batched() -> None:
    m = ServiceMoments.of(np.array([0.12, 0.32]), np.array([0.10, 0.30]))
    mean0, _ = m.at(np.array([0.0]))
    assert mean0[0] == pytest.approx(0.22)  # idle: every request pays its own forwards
    mean1, _ = m.at(np.array([1.0]))
    assert mean1[0] == pytest.approx(0.20 + 0.02 / 2)
    big, _ = m.at(np.array([1e9]))
    assert big[0] == pytest.approx(0.20)
    # total busy time lambda * s rises with load even as s falls
    x = np.linspace(0, 5, 50)
    assert np.all(np.diff(x * m.at(x)[0]) > 0)


def test_stationary_pool_matches_allen_cunneen() -> None:
    m = ServiceMoments.of(np.full(10, 0.2), np.full(10, 0.2))
    pool = PrefillPool(8.0, 1.5, m)
    w = pool.waits(3, n=1)
    ref = allen_cunneen(3, 8.0, 0.2, 1.5, 0.0)
    assert w.p_wait[0] == pytest.approx(ref.p_wait)
    assert w.tail_s[0] == pytest.approx(ref.tail_s)
    assert pool.miss_share(3, np.array([0.5])) == pytest.approx(
        ref.exceed_probability(np.array([0.5]))[0])


def test_fluid_backlog_carries_an_overloaded_window() -> None:
    # 10 s windows at 4, 16 and 4 req/s, 0.1 s of work each, one instance
    ts = np.concatenate([np.linspace(0, 9.99, 40), np.linspace(10, 19.99, 160),
                         np.linspace(20, 29.99, 40)])
    span = ts[-1] - ts[0]
    load = LoadWindows(np.array([40, 160, 40]) / 240, np.array([4, 16, 4]) / (240 / span), 10.0)
    m = ServiceMoments.of(np.full(240, 0.1), np.full(240, 0.1))
    pool = PrefillPool(239 / span, 1.0, m, load, ts)
    w = pool.waits(1, 240)
    # window 2 adds 10 * (1.6 - 1) = 6 s of backlog: found half-way 3 s; window 3 drains 6 s
    util = w.utilization
    assert util == pytest.approx([0.4, 1.6, 0.4], rel=0.01)
    d = pool.window_s
    assert d == pytest.approx(10.0, rel=0.01)
    assert w.fluid_s[0] == 0.0
    assert w.fluid_s[100] == pytest.approx(d * (util[1] - 1) / 2)
    assert w.fluid_s[-1] == pytest.approx(d * (util[1] - 1) + d * (util[2] - 1) / 2)
    assert w.fluid_s[-1] == pytest.approx(3.0, rel=0.05)
    assert pool.overloaded_share(1) == pytest.approx(160 / 240)
    # two instances absorb it: no backlog at all
    assert np.all(pool.waits(2, 240).fluid_s == 0.0)
    assert pool.smallest(np.full(240, 1.0), 0.1) == 2


def test_arrival_profile_windows_and_within_burstiness() -> None:
    rng = np.random.default_rng(0)
    # Poisson at 2/s, with a 10x busier stretch of 60 s
    quiet = np.cumsum(rng.exponential(0.5, 2000))
    burst = 300 + np.sort(rng.uniform(0, 60, 1200))
    ts = np.sort(np.concatenate([quiet, burst]))
    cv2, how, load = arrival_profile(ts, 2.0)
    assert load is not None
    assert load.width_s == 10.0
    assert load.share.sum() == pytest.approx(1.0)
    assert load.rate_factor.max() > 3.0  # the burst windows stand out
    assert cv2 == pytest.approx(1.0, abs=0.2)  # inside a window arrivals are Poisson
    assert "within 10 s windows" in how


def test_isolated_prefills_and_busy_segments() -> None:
    req = pd.DataFrame({
        "arrival_ts": [0.0, 0.5, 5.0, 0.0], "queue_s": [0.0, 0.0, 0.0, 0.0],
        "prefill_s": [1.0, 1.5, 1.0, 1.0], "prefill_instance": ["p0", "p0", "p0", "p1"],
        "prompt_tokens": [100, 200, 300, 400], "cached_tokens": [0.0, 50.0, 0.0, 0.0],
    })
    assert isolated_prefills(req).tolist() == [False, False, True, True]
    seg = busy_segments(req)
    assert seg is not None
    u, attn, busy = seg
    order = np.argsort(u)
    # periods: p0 [0, 2] with 100 + 150 computed tokens; p0 [5, 6] with 300; p1 [0, 1] with 400
    assert u[order] == pytest.approx([250, 300, 400])
    assert busy[order] == pytest.approx([2.0, 1.0, 1.0])
    assert attn[order][0] == pytest.approx(100**2 + 150 * (150 + 100))


def test_decode_occupancy_by_hand() -> None:
    m = mix([1000], [100])
    model = DecodeModel(0.01, 0.0, 0.0, 256, 10_000)
    occ = decode_occupancy(m, model, 1.0)
    assert occ.step_s == pytest.approx(0.01)
    # Campbell: mean r tau O (I + O/2); variance r tau (O I^2 + I O^2 + O^3 / 3)
    assert occ.mean_tokens == pytest.approx(1050.0)
    assert occ.sd_tokens == pytest.approx(np.sqrt(0.01 * (1e8 + 1e7 + 1e6 / 3)))
    assert occ.quantile_tokens() == pytest.approx(1050 + KV_OCCUPANCY_Z * occ.sd_tokens)
    assert decode_count_for_memory(m, model, 1.0) == 1
    # ten times the load: 10500 +- 3322 tokens does not fit 9000; two instances do
    assert decode_count_for_memory(m, model, 10.0) == 2
    # the step time grows with the batch: tau = a / (1 - (b kappa + c) r E[O])
    busy = DecodeModel(0.01, 0.0, 1e-3, 256, 10**9)
    assert decode_occupancy(m, busy, 5.0).step_s == pytest.approx(0.01 / (1 - 1e-3 * 5 * 100))
