"""``estimate_capacity`` end to end on generated captures with known engine speed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.base import CapacityResult
from pdprobe.analysis.capacity import estimate_capacity
from pdprobe.analysis.capacity.estimate import CapacityOptions
from pdprobe.analysis.capacity.perf_fit import (
    PrefillModel,
    decode_concurrency,
    decode_from_profile,
    prefill_from_profile,
)
from pdprobe.dataset import InstanceInfo
from pdprobe.profiles import load_profile
from pdprobe.values import Missing

from ._data import dataset

PROFILE = load_profile("llama3-70b-h100-tp4")


def capture(n: int = 1500, rate: float = 2.0, slowdown: float = 1.5, seed: int = 0,
            decode_instances: int = 3) -> pd.DataFrame:
    """Requests whose prefill and decode times follow the profile × ``slowdown``."""
    rng = np.random.default_rng(seed)
    arrival = 1.7e9 + np.cumsum(rng.exponential(1 / rate, n))
    prompt = np.clip(rng.lognormal(7.5, 0.9, n), 50, 30000).round()
    output = np.clip(rng.lognormal(5, 0.7, n), 2, 2000).round()
    cached = (prompt * rng.uniform(0, 0.3, n)).round()
    pm = prefill_from_profile(PROFILE)
    truth = PrefillModel(pm.a_s * slowdown, pm.b_s_per_token * slowdown,
                         pm.c_s_per_token2 * slowdown, pm.max_batch_tokens)
    prefill_s = truth.alone_s(prompt - cached, cached) * rng.lognormal(0, 0.03, n)
    ttft = prefill_s + 0.01
    dm = decode_from_profile(PROFILE)
    group = np.array([f"d{i % decode_instances}" for i in range(n)], dtype=object)
    tpot = np.full(n, 0.02)
    for _ in range(4):  # fixed point: the batch depends on how long everyone decodes
        start = arrival + ttft
        end = start + tpot * (output - 1)
        batch, ctx = decode_concurrency(start, end, prompt, output - 1, group)
        tpot = (dm.a_s + dm.b_s_per_ctx_token * ctx + dm.c_s_per_seq * batch) * slowdown
    return pd.DataFrame({
        "arrival_ts": arrival, "prompt_tokens": prompt.astype(int),
        "output_tokens": output.astype(int), "cached_tokens": cached, "prefill_s": prefill_s,
        "ttft_s": ttft, "tpot_s": tpot, "e2e_s": ttft + tpot * (output - 1),
        "kv_bytes": (prompt - cached) * PROFILE.kv_bytes_per_token,
        "decode_instance": group, "prefill_instance": "p0", "status": "ok",
    })


INSTANCES = (InstanceInfo("p0", "prefill", "test"),
             *(InstanceInfo(f"d{i}", "decode", "test") for i in range(3)))


def test_observed_fit_drives_the_estimate() -> None:
    ds = dataset(capture(), instances=INSTANCES)
    result = estimate_capacity(ds, Missing("not needed"), CapacityOptions(window_s=300.0))
    assert isinstance(result, CapacityResult)
    assert result.model_source.startswith("prefill: fit to 1500 requests")
    assert "decode: fit to" in result.model_source or "decode: profile" in result.model_source
    assert result.fit_quality["prefill_r2"] > 0.95
    assert result.fit_quality["prefill_scale_vs_profile"] == pytest.approx(1.5, rel=0.05)
    assert result.fit_quality["decode_scale_vs_profile"] == pytest.approx(1.5, rel=0.1)
    # measured KV bytes match Llama-3-70B: the profile is inferred from them
    assert result.profile == "llama3-70b-h100-tp4"
    assert result.kv_bytes_per_token == pytest.approx(327_680)
    assert result.deployed_prefill == 1 and result.deployed_decode == 3
    assert result.binding_basis == "deployed counts"
    assert not isinstance(result.deployed_prefill_utilization, Missing)
    assert result.slo_defaulted == ("ttft", "tpot")
    assert len(result.windows) == pytest.approx(750 / 300, abs=1)
    w = result.windows[0]
    assert w.deployed_prefill == 1 and w.deployed_decode == 3
    assert w.requests > 100
    assert not isinstance(w.served_rate_rps, Missing)
    assert len(result.band) >= 4
    assert isinstance(result.verified, Missing)


def test_slower_engines_need_more_instances() -> None:
    ds_fast = dataset(capture(slowdown=1.0, rate=4.0), instances=INSTANCES)
    ds_slow = dataset(capture(slowdown=3.0, rate=4.0), instances=INSTANCES)
    req = CapacityOptions(slo_ttft_s=3.0, slo_tpot_s=0.1)
    fast = estimate_capacity(ds_fast, Missing("x"), req)
    slow = estimate_capacity(ds_slow, Missing("x"), req)
    assert isinstance(fast, CapacityResult) and isinstance(slow, CapacityResult)
    assert slow.recommended_prefill > fast.recommended_prefill
    assert slow.recommended_decode >= fast.recommended_decode
    assert any("slower than profile" in n for n in slow.notes)
    assert not any("slower than profile" in n for n in fast.notes)


def test_lengths_only_use_the_profile_and_say_so() -> None:
    frame = capture()[["arrival_ts", "prompt_tokens", "output_tokens"]]
    result = estimate_capacity(dataset(frame), Missing("x"),
                               CapacityOptions(profile="llama3-8b-h100"))
    assert isinstance(result, CapacityResult)
    assert result.profile == "llama3-8b-h100"
    assert result.model_source == "prefill: profile llama3-8b-h100; decode: profile llama3-8b-h100"
    assert any("no prefill_s column" in n for n in result.notes)
    assert isinstance(result.deployed_prefill, Missing)
    assert result.binding_basis == "recommended counts"


def test_no_data_is_missing_with_reason() -> None:
    result = estimate_capacity(dataset(), Missing("x"), CapacityOptions())
    assert isinstance(result, Missing)
    assert "length histograms" in result.reason


def test_metrics_only_mix_from_histograms() -> None:
    rows = []
    for ts, scale in ((0.0, 0), (600.0, 1)):
        for le, cum in ((512.0, 300), (2048.0, 900), (8192.0, 1200), (np.inf, 1200)):
            rows.append((ts, "d0", "prompt_tokens", "bucket", le, cum * scale))
        rows.append((ts, "d0", "prompt_tokens", "sum", np.nan, 1_500_000.0 * scale))
        rows.append((ts, "d0", "prompt_tokens", "count", np.nan, 1200.0 * scale))
        for le, cum in ((64.0, 400), (256.0, 1000), (1024.0, 1200), (np.inf, 1200)):
            rows.append((ts, "d0", "output_tokens", "bucket", le, cum * scale))
        rows.append((ts, "d0", "output_tokens", "sum", np.nan, 180_000.0 * scale))
        rows.append((ts, "d0", "output_tokens", "count", np.nan, 1200.0 * scale))
    metrics = pd.DataFrame(rows, columns=["ts", "instance", "signal", "kind", "le", "value"])
    ds = dataset(metrics=metrics, instances=(InstanceInfo("d0", "decode", "t"),))
    result = estimate_capacity(ds, Missing("x"), CapacityOptions())
    assert isinstance(result, CapacityResult)
    assert result.arrival_rate_rps == pytest.approx(2.0)
    assert result.decode_context_tokens == pytest.approx(1250 + 75, rel=0.25)
    assert result.deployed_decode == 1
    # windows from the histograms: nothing is known before the second scrape
    assert len(result.windows) == 2
    first, second = result.windows
    assert isinstance(first.theoretical_ratio, Missing)
    assert second.requests == 1200
    assert second.mean_prompt_tokens == pytest.approx(1250)
    assert second.arrival_rate_rps == pytest.approx(2 * result.arrival_rate_rps)  # all in one window
    assert second.recommended_prefill >= result.recommended_prefill
