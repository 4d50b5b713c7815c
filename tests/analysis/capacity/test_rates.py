"""Stage rates and the mean-based comparison, worked by hand."""

from __future__ import annotations

import pytest

from pdprobe.analysis.capacity.alternatives import mean_based
from pdprobe.analysis.capacity.rates import decode_batch, decode_context, stage_rates
from pdprobe.analysis.capacity.recommend import Slo

from ._data import mix, simple_model

MODEL = simple_model(pa=0.0, pb=1e-4, pc=1e-8, da=0.01, db=1e-7, dc=1e-4, bpt=1000.0,
                     link=1e12)
MIX = mix([1000, 3000], [100, 300], rate=10.0)


def test_prefill_rate_over_the_distribution() -> None:
    r = stage_rates(MIX, MODEL, 0.1)
    # shares 0.1 + 0.01 = 0.11 and 0.3 + 0.09 = 0.39; mean 0.25
    assert r.prefill_service_s == pytest.approx(0.25)
    assert r.prefill_capacity_rps == pytest.approx(4.0)
    assert r.prefill_service_cv2 == pytest.approx(0.14**2 / 0.25**2)
    assert r.prefill_tokens_per_s == pytest.approx(2000 / 0.25)


def test_decode_context_keeps_prompt_output_covariance() -> None:
    # (100 * 1050 + 300 * 3150) / 400 = 2625, against ISL + OSL/2 = 2100 from means
    assert decode_context(MIX) == pytest.approx(2625.0)
    assert decode_context(MIX.collapsed()) == pytest.approx(2100.0)
    # anti-correlated lengths: the long prompt has the short output
    anti = mix([1000, 3000], [300, 100])
    assert decode_context(anti) == pytest.approx((300 * 1150 + 100 * 3050) / 400)


def test_decode_batch_from_tpot_slo() -> None:
    r = stage_rates(MIX, MODEL, 0.1)
    # target 0.9 * 0.1 s; per sequence 1e-7 * 2625 + 1e-4 = 3.625e-4 s
    assert r.decode_batch == pytest.approx(0.08 / 3.625e-4)
    assert r.decode_batch_limit == "tpot-slo"
    assert r.decode_step_s == pytest.approx(0.09)
    assert r.decode_capacity_rps == pytest.approx((0.08 / 3.625e-4) / (200 * 0.09))
    assert r.theoretical_ratio == pytest.approx(r.decode_capacity_rps / 4.0)


def test_decode_batch_limits() -> None:
    tight = simple_model(da=0.01, db=0.0, dc=1e-5, max_batch=64, kv_tokens=10**9)
    assert decode_batch(tight.decode, 1000.0, 0.1)[:2] == (64.0, "max-batch")
    small_kv = simple_model(da=0.01, db=0.0, dc=1e-5, max_batch=512, kv_tokens=100_000)
    batch, limit, ok = decode_batch(small_kv.decode, 2000.0, 0.1)
    assert limit == "kv-memory"
    assert batch == pytest.approx(0.9 * 100_000 / 2000)
    assert ok
    slow = simple_model(da=0.2, db=0.0, dc=1e-5)
    batch, limit, ok = decode_batch(slow.decode, 1000.0, 0.1)
    assert batch == 1.0 and limit == "tpot-slo" and not ok


def test_transfer_rate() -> None:
    thin = simple_model(pb=1e-4, bpt=1e6, link=1e9)
    r = stage_rates(MIX, thin, 0.1)
    # 2000 tokens * 1 MB = 2 GB per request over 0.8 GB/s usable
    assert r.transfer_bytes_per_request == pytest.approx(2e9)
    assert r.transfer_capacity_rps == pytest.approx(0.4)
    assert r.producer_capacity_rps == pytest.approx(0.4)


def test_mean_based_counts_dynamo_style() -> None:
    slo = Slo.of(2.0, 0.1)
    mb = mean_based(MIX, MODEL, slo)
    # prefill at the mean: 0.2 + 1e-8 * 2000^2 = 0.24 s -> ceil(10 * 0.24) = 3
    assert mb.rates.prefill_service_s == pytest.approx(0.24)
    assert mb.prefill == 3
    # decode at ctx = ISL + OSL/2 = 2100: batch min(0.08 / 3.1e-4, 256) = 256
    step = 0.01 + 256 * (1e-7 * 2100 + 1e-4)
    assert mb.rates.decode_capacity_rps == pytest.approx(256 / (200 * step))
    assert mb.decode == 1
    assert mb.jensen_gap_prefill == pytest.approx(0.25 / 0.24 - 1)
    assert mb.jensen_gap_decode == pytest.approx(2625 / 2100 - 1)
    # exactly 12 instances of work is 12, not 13 (float noise)
    assert mean_based(MIX.with_rate(50.0), MODEL, slo).prefill == 12
    assert mean_based(MIX.with_rate(50.0), MODEL, slo).decode == 4
