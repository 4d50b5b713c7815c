"""The capacity model recalibrated against the window (issue 16): wait scale, calibrated
attainment at the deployed counts, the prefill count re-sized, TPOT at the deployed decode."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity.arrivals import arrival_profile
from pdprobe.analysis.capacity.calibrate import (
    MIN_CALIBRATION_REQUESTS,
    WAIT_SCALE_MAX,
    calibrate,
    measured_parts,
    observed_ttft_attainment,
    tpot_at,
)
from pdprobe.analysis.capacity.mix import mix_from_requests
from pdprobe.analysis.capacity.pool import PrefillPool, ServiceMoments
from pdprobe.analysis.capacity.recalibrate import check_model
from pdprobe.analysis.capacity.recommend import LengthWork, Slo

from ._data import busy_prompts_mix, mix, round_robin_waits, simple_model


def _pool(n: int = 2000, seed: int = 0) -> tuple[PrefillPool, np.ndarray]:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.uniform(0, 600, n))
    cv2, _, load = arrival_profile(ts, 2.0)
    alone = rng.gamma(2.0, 0.1, n)
    return PrefillPool((n - 1) / 600, cv2, ServiceMoments.of(alone, 0.8 * alone), load,
                       ts), alone


def test_scaled_pool_multiplies_every_wait() -> None:
    pool, bare = _pool()
    w1, w3 = pool.waits(1, len(bare)), pool.scaled(3.0).waits(1, len(bare))
    assert np.allclose(w3.tail_s, 3 * w1.tail_s) and np.allclose(w3.fluid_s, 3 * w1.fluid_s)
    assert np.array_equal(w3.p_wait, w1.p_wait)
    assert pool.wait_scale == 1.0  # the original is untouched


def test_measured_parts_follow_the_mix_order() -> None:
    """Records out of arrival order and one without an output length: the parts line up with
    the mix (filtered, sorted by arrival), as the prediction pairs them per request."""
    req = pd.DataFrame({"arrival_ts": [3.0, 1.0, 2.0, 4.0], "prompt_tokens": [10, 20, 30, 40],
                        "output_tokens": [5, 5, np.nan, 5], "queue_s": [0.3, 0.1, 0.2, 0.4],
                        "ttft_s": [1.3, 1.1, 1.2, np.nan]})
    m = mix_from_requests(req, rate_rps=None, timescale_s=2.0, description="t", rescale=False)
    parts = measured_parts(req, m)
    assert parts is not None
    queue, rest = parts
    assert np.allclose(queue[:2], [0.1, 0.3]) and np.allclose(rest[:2], [1.0, 1.0])
    assert math.isnan(queue[2]) and math.isnan(rest[2])  # no TTFT: unknown
    assert measured_parts(req.drop(columns="queue_s"), m) is None


def test_wait_scale_takes_the_window_level_and_keeps_the_shape() -> None:
    pool, bare = _pool()
    n = len(bare)
    model_p90 = pool.ttft_quantile(1, np.zeros(n), 0.9)
    rng = np.random.default_rng(1)
    queue = rng.exponential(1.0, n)
    queue *= 2.0 * model_p90 / np.quantile(queue, 0.9)  # the window waits twice as long
    cal = calibrate(pool, 1, (queue, np.full(n, 0.5)), bare, 2.0, 0.9)
    assert cal is not None and cal.wait_scale == pytest.approx(2.0, rel=1e-6)
    assert not cal.bounded and cal.requests == n
    raw = 1.0 - pool.miss_share(1, 2.0 - np.full(n, 0.5))
    assert cal.attainment < raw  # longer waits, fewer within the objective
    # too few measured waits: no recalibration
    few = np.full(n, np.nan)
    few[: MIN_CALIBRATION_REQUESTS - 1] = 1.0
    assert calibrate(pool, 1, (few, few), bare, 2.0, 0.9) is None
    # a window with waits where the model has none: the bound, said so
    idle, _ = _pool(n=200)
    cal = calibrate(idle, 50, (np.full(200, 5.0), np.full(200, 0.5)), np.full(200, 0.1), 2.0,
                    0.9)
    assert cal is not None and cal.wait_scale == WAIT_SCALE_MAX


def test_observed_attainment_of_the_measured_parts() -> None:
    queue = np.r_[np.zeros(90), np.full(10, 3.0), np.full(5, np.nan)]
    rest = np.r_[np.full(100, 0.5), np.full(5, np.nan)]
    assert observed_ttft_attainment((queue, rest), 2.0) == pytest.approx(0.9)
    assert observed_ttft_attainment((queue[:10], rest[:10]), 2.0) is None


def test_tpot_at_the_deployed_decode_count() -> None:
    """Step 10 ms + 0.05 ms per sequence: more decode instances, smaller batches, lower TPOT;
    one instance beyond its capacity has no steady TPOT."""
    m = mix([1000.0] * 100, [200.0] * 100)
    dm = simple_model(da=0.01, dc=5e-5).decode
    one, four = tpot_at(m, dm, 100.0, 2, 0.1), tpot_at(m, dm, 100.0, 8, 0.1)
    assert one is not None and four is not None
    assert four.p90_s < one.p90_s and four.batch_mean < one.batch_mean
    assert 0.0 <= one.attainment <= four.attainment <= 1.0
    # by hand at 8: tau = a / (1 - c r E[O]) with r = 12.5/s; batch = r E[O] tau
    tau = 0.01 / (1 - 5e-5 * 12.5 * 200)
    assert four.batch_mean == pytest.approx(12.5 * 200 * tau)
    assert four.p90_s == pytest.approx(0.01 + 5e-5 * (four.batch_mean
                                                      + 1.2816 * math.sqrt(four.batch_mean)))
    assert tpot_at(m, dm, 100.0, 1, 0.1) is None  # c r E[O] = 1: overloaded


def test_observed_ttft_quantile_of_the_measured_parts() -> None:
    """The window's TTFT quantile over the requests with both parts measured (the statistic
    the p90 check compares with the model's)."""
    from pdprobe.analysis.capacity.calibrate import observed_ttft_quantile

    queue = np.r_[np.arange(100.0), np.full(5, np.nan)]
    rest = np.r_[np.full(100, 0.5), np.full(5, np.nan)]
    assert observed_ttft_quantile((queue, rest), 0.9) == pytest.approx(89.1 + 0.5)
    assert observed_ttft_quantile((queue[:10], rest[:10]), 0.9) is None


def test_a_queue_per_instance_waits_whenever_its_own_instance_is_busy() -> None:
    """c single-server queues at rate/c: P(wait) is the utilisation and the tail Kingman's,
    whatever the pool size; one pooled queue at the same load makes far fewer wait."""
    pool, bare = _pool()
    n = len(bare)
    sep = pool.per_instance()
    assert not pool.separate and sep.separate  # the original is untouched
    for c in (1, 2, 4):
        w, p = sep.waits(c, n), pool.waits(c, n)
        capped = np.minimum(w.utilization, 0.95)
        assert np.allclose(w.p_wait[w.utilization > 0], capped[w.utilization > 0])
        if c == 1:  # one instance: both disciplines are the same queue
            assert np.allclose(w.p_wait, p.p_wait) and np.allclose(w.tail_s, p.tail_s)
        else:
            assert float(np.mean(p.p_wait)) < float(np.mean(w.p_wait))
    assert sep.scaled(2.0).separate


def test_routing_is_read_off_the_share_of_requests_that_waited() -> None:
    """Most requests waited where one pooled queue makes few wait: a queue per instance; about
    as many as the pooled queue says: pooled; too few measured waits: unknown."""
    from pdprobe.analysis.capacity.calibrate import routing_of

    pool, bare = _pool()
    n = len(bare)
    c = 4
    separate = float(np.mean(pool.per_instance().waits(c, n).p_wait))
    pooled = float(np.mean(pool.waits(c, n).p_wait))
    assert separate - pooled >= 0.1
    rng = np.random.default_rng(2)
    waits = np.where(rng.random(n) < separate, 0.5, 0.0)
    r = routing_of(pool, c, waits)
    assert r is not None and r.per_instance
    assert r.waited == pytest.approx(separate, abs=0.03)
    r = routing_of(pool, c, np.where(rng.random(n) < pooled, 0.5, 0.0))
    assert r is not None and not r.per_instance
    assert routing_of(pool, c, np.full(n, np.nan)) is None


def test_failed_share_counts_statuses_other_than_ok() -> None:
    from pdprobe.analysis.capacity.calibrate import failed_share

    req = pd.DataFrame({"arrival_ts": np.arange(100.0), "prompt_tokens": 1000,
                        "output_tokens": 10,
                        "status": pd.Categorical(["ok"] * 97 + ["error", "timeout", None])})
    m = mix_from_requests(req, rate_rps=None, timescale_s=2.0, description="t", rescale=False)
    assert failed_share(req, m) == pytest.approx(0.02)  # a missing status is not a failure
    assert failed_share(req.drop(columns="status"), m) == 0.0


def test_per_instance_shape_only_where_it_explains_the_wait_level() -> None:
    """Round-robin waits: recalibrated with a queue per instance (scale near 1, said in the
    calibration); every request waiting half a minute (a stalled or back-pressured pool):
    the share that waited looks per-instance but no queue per instance explains that level,
    so the pooled shape stands. Failed requests come out of the miss budget while they leave
    half of it, else the count is sized as without them."""
    from pdprobe.analysis.capacity.calibrate import PER_INSTANCE_SCALE_FACTOR

    ts, m = busy_prompts_mix()
    model, slo = simple_model(pb=8e-5), Slo(2.0, 0.1)
    work = LengthWork.of(m, model, slo)
    rr = (round_robin_waits(ts, work.bare, 16), work.bare)
    rec = check_model(m, model, slo, work, 16, rr)
    cal = rec.calibration
    assert rec.recalibrated and cal is not None and cal.routing is not None
    assert cal.routing.per_instance and 1 / PER_INSTANCE_SCALE_FACTOR <= cal.wait_scale <= 1
    assert rec.calibrated_prefill == 15
    # a few failures need more instances; failures beyond half the budget are left in
    more = check_model(m, model, slo, work, 16, rr, failed=0.045)
    assert more.calibrated_prefill is not None and more.calibrated_prefill > 15
    assert any("4.5% failed requests" in n for n in more.notes)
    many = check_model(m, model, slo, work, 16, rr, failed=0.2)
    assert many.calibrated_prefill == 15
    stalled = check_model(m, model, slo, work, 16, (np.full(len(ts), 30.0), work.bare))
    assert stalled.recalibrated and stalled.calibration is not None
    assert stalled.calibration.routing is None  # the pooled shape, scaled
