"""The prefill pool: partial batching, fluid backlog across windows, decode occupancy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity.arrivals import LoadWindows, arrival_profile
from pdprobe.analysis.capacity.perf_busy import BUSY_GAP_TOLERANCE_S
from pdprobe.analysis.capacity.perf_fit import (
    DecodeModel,
    busy_segments,
    isolated_rows,
)
from pdprobe.analysis.capacity.pool import (
    NARROW_REQUESTS,
    PrefillPool,
    ServiceMoments,
    exceed_probability,
)
from pdprobe.analysis.capacity.queueing import allen_cunneen
from pdprobe.analysis.capacity.rates import (
    KV_OCCUPANCY_Z,
    OccupancyMoments,
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


def test_isolated_rows_and_busy_segments() -> None:
    req = pd.DataFrame({
        "arrival_ts": [0.0, 0.5, 5.0, 0.0], "queue_s": [0.0, 0.0, 0.0, 0.0],
        "prefill_s": [1.0, 1.5, 1.0, 1.0], "prefill_instance": ["p0", "p0", "p0", "p1"],
        "prompt_tokens": [100, 200, 300, 400], "cached_tokens": [0.0, 50.0, 0.0, 0.0],
    })
    assert isolated_rows(req).tolist() == [2, 3]
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


def _busy_reference(req: pd.DataFrame) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Isolated flags and busy segments the plain pandas way (groupby, shift, agg)."""
    start = req["arrival_ts"] + req["queue_s"]
    frame = pd.DataFrame({"inst": req["prefill_instance"], "start": start,
                          "end": start + req["prefill_s"], "row": np.arange(len(req))})
    frame = frame.dropna().sort_values(["inst", "start"], kind="stable")
    reach = frame.groupby("inst")["end"].cummax()
    before = reach.groupby(frame["inst"]).shift(1)
    # a start within the tolerance of the reach continues the period (timestamp rounding)
    frame["period"] = np.cumsum(before.isna() | (frame["start"] > before + BUSY_GAP_TOLERANCE_S))
    sizes = frame.groupby("period")["row"].transform("size")
    alone = np.zeros(len(req), dtype=bool)
    alone[frame.loc[sizes == 1, "row"].to_numpy()] = True
    u = np.maximum((req["prompt_tokens"] - req["cached_tokens"]).to_numpy(), 1.0)[frame["row"]]
    frame["u"] = u
    frame["attn"] = u * (u + 2 * req["cached_tokens"].to_numpy()[frame["row"]])
    first = frame.groupby("period")["start"].transform("min")
    frame["seg"] = ((frame["end"] - first) // 10.0).astype("int64")
    seg = frame.groupby(["period", "seg"]).agg(u=("u", "sum"), attn=("attn", "sum"),
                                               last=("end", "max"))
    begin = seg.groupby(level="period")["last"].shift(1).fillna(
        frame.groupby("period")["start"].min().reindex(seg.index.get_level_values(0)).set_axis(
            seg.index))
    duration = (seg["last"] - begin).to_numpy()
    ok = duration > 0
    return alone, (seg["u"].to_numpy()[ok], seg["attn"].to_numpy()[ok], duration[ok])


def test_busy_periods_match_a_plain_groupby() -> None:
    rng = np.random.default_rng(3)
    n = 3000
    arrival = np.round(rng.uniform(0, 400, n), 2)
    prefill = np.round(rng.exponential(0.4, n), 2) + 0.01
    queue = np.round(rng.exponential(0.2, n), 2)
    queue[::7] = 0.0
    inst = rng.choice(np.array(["p10", "p2", "p1", None], dtype=object), n, p=[.4, .3, .29, .01])
    req = pd.DataFrame({"arrival_ts": arrival, "queue_s": queue, "prefill_s": prefill,
                        "prefill_instance": inst,
                        "prompt_tokens": rng.integers(10, 9000, n).astype(float),
                        "cached_tokens": rng.integers(0, 9, n).astype(float)})
    alone, (u, attn, busy) = _busy_reference(req)
    assert 100 < alone.sum() < n  # both kinds occur
    assert isolated_rows(req).tolist() == np.flatnonzero(alone).tolist()
    seg = busy_segments(req)
    assert seg is not None
    assert seg[0] == pytest.approx(u, rel=1e-12)  # same segments, in the same order
    assert seg[1] == pytest.approx(attn, rel=1e-12)
    assert seg[2] == pytest.approx(busy, rel=1e-12)


def test_exceed_probability_edge_cases() -> None:
    s = np.array([-1.0, 0.0, 0.0, 2.0, 2.0, 5000.0, 1.0])
    p = np.array([0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    tail = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, np.inf])
    out = exceed_probability(s, p, tail)
    # negative slack always misses; no tail means no wait; beyond the cap the tail is nil
    assert out.tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0, 0.5 * np.exp(-2.0), 0.0, 0.5])


def _bursty_pool(n: int, seed: int = 0) -> tuple[PrefillPool, np.ndarray]:
    rng = np.random.default_rng(seed)
    ts = np.sort(np.concatenate([rng.uniform(0, 600, n - n // 5), rng.uniform(200, 260, n // 5)]))
    cv2, _, load = arrival_profile(ts, 2.0)
    alone = rng.gamma(2.0, 0.1, n)
    pool = PrefillPool((n - 1) / (ts[-1] - ts[0]), cv2, ServiceMoments.of(alone, 0.8 * alone),
                       load, ts)
    return pool, alone + 0.02


def _bisect_quantile(pool: PrefillPool, servers: int, bare: np.ndarray, q: float) -> float:
    """The quantile by 200 plain bisections on the per-request miss probabilities."""
    w = pool.waits(servers, len(bare))

    def above(t: float) -> float:
        return float(np.mean(w.exceed(t - bare)))

    lo, hi = float(np.quantile(bare, q)), float(np.quantile(bare, q)) + 1.0
    if above(lo) <= 1 - q:
        return lo
    while above(hi) > 1 - q:
        hi = lo + 2 * (hi - lo)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if above(mid) > 1 - q else (lo, mid)
    return hi


@pytest.mark.parametrize("n", [300, 4 * NARROW_REQUESTS])
def test_ttft_quantile_matches_plain_bisection(n: int) -> None:
    pool, bare = _bursty_pool(n)
    servers = pool.smallest(1.0 - bare, 0.1)
    for c in (servers, servers + 1, servers + 3):
        ours = pool.ttft_quantile(c, bare, 0.9)
        assert ours == pytest.approx(_bisect_quantile(pool, c, bare, 0.9), rel=1e-10)
        w = pool.waits(c, n)
        assert np.mean(w.exceed(ours - bare)) <= 0.1 + 1e-12
        assert np.mean(w.exceed(ours * (1 - 1e-6) - bare)) > 0.1


def test_share_above_within_a_bracket_is_the_full_sum() -> None:
    from pdprobe.analysis.capacity.pool import ShareAbove

    pool, bare = _bursty_pool(5000, seed=1)
    c = pool.smallest(1.0 - bare, 0.1)
    w = pool.waits(c, len(bare))
    share = ShareAbove(bare + w.fluid_s, w)
    within = share.within(0.2, 0.6)
    for t in np.linspace(0.2, 0.6, 17):
        assert within(float(t)) == pytest.approx(share.at(float(t)), rel=1e-12, abs=1e-15)
    assert share.count_within(0.2, 0.6) == int(np.sum((bare + w.fluid_s > 0.2)
                                                      & (bare + w.fluid_s <= 0.6)))


def test_smallest_at_least_is_the_max_of_both() -> None:
    pool, bare = _bursty_pool(2000, seed=2)
    slack = 1.0 - bare
    best = pool.smallest(slack, 0.1)
    assert pool.miss_share(best, slack) <= 0.1 < pool.miss_share(best - 1, slack)
    for floor in (1, best - 2, best - 1, best, best + 1, 2 * best + 5):
        assert pool.smallest(slack, 0.1, at_least=floor) == max(floor, best)


def _large_pool() -> tuple[PrefillPool, np.ndarray]:
    """Arrivals like ``_bursty_pool``'s (its service times) at 60 times the rate: tens of
    instances."""
    small, bare = _bursty_pool(2000, seed=2)
    ts = np.sort(np.concatenate([np.random.default_rng(2).uniform(0, 600, 1600),
                                 np.random.default_rng(2).uniform(200, 260, 400)]))
    cv2, _, load = arrival_profile(ts, 2.0)
    return PrefillPool(small.rate * 60, cv2, small.moments, load, ts), bare


def test_a_guess_finds_the_same_pool_size_whatever_it_is() -> None:
    """A guess (above, below, at, far from the answer; at or below the search's start) only
    moves where the search starts: the size is the one found without it, with or without a
    floor, and a guess near the answer takes fewer evaluations."""
    pool, bare = _large_pool()
    slack = 1.0 - bare
    best = pool.smallest(slack, 0.1)
    assert best > 3
    calls: list[int] = []
    miss_share = pool.miss_share

    def counted(c: int, s: np.ndarray) -> float:
        calls.append(c)
        return miss_share(c, s)

    pool.miss_share = counted  # type: ignore[method-assign]
    for floor in (1, best - 3, best - 1, best, best + 1, 2 * best + 5):
        plain = pool.smallest(slack, 0.1, at_least=floor)
        assert plain == max(floor, best)
        for guess in (1, floor, floor + 1, best - 2, best - 1, best, best + 1, best + 7,
                      4 * best, 1000):
            assert pool.smallest(slack, 0.1, at_least=floor, guess=guess) == plain
    calls.clear()
    pool.smallest(slack, 0.1, at_least=2)
    without = len(calls)
    calls.clear()
    pool.smallest(slack, 0.1, at_least=2, guess=best)
    assert len(calls) == 2 < without  # the guess meets the objective, the size below misses


def test_a_guess_raises_where_the_search_gallops_past_the_largest_pool(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The search from its start raises when its gallop passes ``MAX_SERVERS`` before a size
    that meets the objective, even where one below it does: with a guess, the same."""
    from pdprobe.analysis.capacity import pool as pool_module

    pool, bare = _large_pool()
    slack = 1.0 - bare
    best = pool.smallest(slack, 0.1)
    start = max(1, int(0.5 * pool.rate * pool.moments.batched_mean))
    assert best - start >= 3
    # the gallop probes start + 1, start + 3, start + 7, ...: a limit between the answer
    # and the probe past it, and one at that probe
    probe = start + 1
    step = 1
    while probe < best:
        step *= 2
        probe += step
    for limit in (best, probe - 1, probe, probe + 1):
        monkeypatch.setattr(pool_module, "MAX_SERVERS", limit)
        try:
            plain: int | None = pool.smallest(slack, 0.1)
        except ValueError:
            plain = None
        for guess in (start + 1, best - 1, best, best + 1, limit + 5):
            if plain is None:
                with pytest.raises(ValueError, match="no prefill pool size"):
                    pool.smallest(slack, 0.1, guess=guess)
            else:
                assert pool.smallest(slack, 0.1, guess=guess) == plain
        assert (plain is None) == (probe > limit)


def test_mean_wait_is_the_mean_over_requests() -> None:
    pool, bare = _bursty_pool(3000, seed=4)
    c = pool.smallest(1.0 - bare, 0.1)
    w = pool.waits(c, len(bare))
    per_request = w.fluid_s + (w.p_wait * w.tail_s)[w.window]
    assert pool.mean_wait_s(c, len(bare)) == pytest.approx(float(per_request.mean()), rel=1e-12)
    assert pool.mean_wait_s(c, len(bare)) > 0


def test_pool_reuses_the_arrival_windows_of_the_load() -> None:
    from dataclasses import replace

    rng = np.random.default_rng(5)
    ts = np.sort(rng.uniform(0, 900, 4000))
    _, _, load = arrival_profile(ts, 2.0)
    assert load is not None and load.window_of is not None
    m = ServiceMoments.of(np.full(10, 0.2), np.full(10, 0.15))
    binned = PrefillPool(4.0, 1.0, m, load, ts)
    own = PrefillPool(4.0, 1.0, m, replace(load, window_of=None), ts)
    assert own.window_of is not None and binned.window_of is not None
    assert np.array_equal(binned.window_of, own.window_of)
    slack = rng.uniform(0.0, 1.0, len(ts))
    assert binned.miss_share(2, slack) == own.miss_share(2, slack)


def test_occupancy_moments_can_be_computed_once() -> None:
    m = mix([1000, 200, 5000], [100, 800, 20])
    model = DecodeModel(0.01, 2e-8, 1e-4, 256, 50_000)
    moments = OccupancyMoments.of(m)
    for rate in (0.5, 2.0, 7.0):
        assert decode_occupancy(m, model, rate, moments) == decode_occupancy(m, model, rate)
    assert decode_count_for_memory(m, model, 9.0, moments) == decode_count_for_memory(m, model, 9.0)


def test_erlang_b_closed_form_matches_the_recursion_for_large_pools() -> None:
    """Pools beyond ERLANG_RECURSION_MAX_SERVERS use gammaincc; same numbers, constant cost
    (a kv_bytes of 1e17 once sized pools of 1e5 in a Python loop per evaluation)."""
    import time

    from pdprobe.analysis.capacity.pool import ERLANG_RECURSION_MAX_SERVERS, erlang_b

    for c in (ERLANG_RECURSION_MAX_SERVERS + 1, 1000, 5000):
        offered = np.array([0.0, 0.5 * c, 0.9 * c, 0.99 * c])
        b = np.ones_like(offered)
        for k in range(1, c + 1):
            b = offered * b / (k + offered * b)
        assert np.allclose(erlang_b(c, offered), b, rtol=1e-9, atol=1e-300)
    start = time.perf_counter()
    for _ in range(100):
        erlang_b(100_000, np.full(1000, 95_000.0))
    assert time.perf_counter() - start < 5.0


def test_erlang_b_recursion_in_place_is_the_plain_formula_to_the_bit() -> None:
    """The product computed once, in place: the bits of ``b = a·b / (k + a·b)``."""
    from pdprobe.analysis.capacity.pool import erlang_b

    rng = np.random.default_rng(11)
    for c in (1, 2, 7, 64, 256):
        a = np.concatenate([rng.uniform(0, 1.5 * c, 500), [0.0, 1e-300, 1e300, np.inf]])
        b = np.ones_like(a)
        with np.errstate(invalid="ignore"):
            for k in range(1, c + 1):
                b = a * b / (k + a * b)
            got = erlang_b(c, a)
        np.testing.assert_array_equal(got, b)


@pytest.mark.parametrize("backlog", [False, True])
def test_exceed_without_backlog_reads_no_fluid_and_gives_the_same_bits(backlog: bool) -> None:
    """``exceed`` skips the backlog's gather when no window has one (``s - 0`` is ``s``,
    up to the sign of a zero, which ``P(W > s)`` does not see): the plain formula's bits."""
    from pdprobe.analysis.capacity.pool import PoolWaits
    from pdprobe.analysis.capacity.wait_tail import exceed_probability

    rng = np.random.default_rng(12)
    window = np.sort(rng.integers(0, 4, 2000))
    fluid = np.array([0.0, 0.5, 0.0, 2.0]) if backlog else np.array([0.0, -0.0, 0.0, 0.0])
    waits = PoolWaits(3, np.full(4, 0.5), np.array([0.2, 0.0, 0.9, 1.0]),
                      np.array([0.1, 0.0, 2.0, np.inf]), fluid, window)
    slack = np.concatenate([rng.normal(0.5, 1.0, 1996), [0.0, -0.0, np.nan, np.inf]])
    with np.errstate(all="ignore"):
        want = exceed_probability(slack - fluid[window], waits.p_wait[window],
                                  waits.tail_s[window])
    np.testing.assert_array_equal(waits.exceed(slack), want)
