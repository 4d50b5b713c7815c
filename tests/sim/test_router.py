"""Routing policies, the routing-skew fault and KV-hit awareness."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pdprobe.sim.config import LengthDist, SimConfig, parse_fault
from pdprobe.sim.model import run_simulation


def _shares(inst: np.ndarray, names: list[int]) -> np.ndarray:
    return np.array([(inst == i).mean() for i in names])


def test_round_robin_splits_evenly(small_config: SimConfig) -> None:
    res = run_simulation(replace(small_config, router="round-robin"))
    r = res.requests
    prefill = [s.index for s in res.layout.of_role("prefill")]
    decode = [s.index for s in res.layout.of_role("decode")]
    assert np.abs(_shares(r["p_inst"], prefill) - 1 / 3).max() < 0.01
    assert np.abs(_shares(r["d_inst"], decode) - 1 / 2).max() < 0.01


def test_least_tokens_balances_the_decode_load(small_config: SimConfig) -> None:
    res = run_simulation(replace(small_config, decode=3, duration_s=300.0))
    decode = [s.index for s in res.layout.of_role("decode")]
    tokens = np.array([res.requests["prompt"][res.requests["d_inst"] == i].sum() for i in decode])
    assert tokens.max() / tokens.min() < 1.1


def test_routing_skew_sends_the_share_to_its_targets(small_config: SimConfig) -> None:
    config = replace(small_config, decode=4, duration_s=300.0,
                     faults=(parse_fault("routing-skew:share=0.6,targets=1"),))
    res = run_simulation(config)
    decode = [s.index for s in res.layout.of_role("decode")]
    shares = _shares(res.requests["d_inst"], decode)
    # 60 % forced onto decode 0; the balancing router then keeps most of the rest away from it
    assert shares[0] == pytest.approx(0.6, abs=0.04)
    assert shares[1:].min() > 0.1


def test_kv_aware_routing_reuses_prefixes_and_ignoring_hits_loses_them(small_config: SimConfig) -> None:
    # 500 shared prefixes (80 % of each prompt) and small per-instance caches: a KV-aware router
    # keeps a group where it is cached, a blind one scatters it and caches thrash
    base = replace(small_config, duration_s=300.0, rate_rps=4.0, router="kv-aware", decode=3,
                   prompt=LengthDist("lognormal", median=3000, sigma=0.5, max_tokens=16384),
                   prefix_hit_rate=0.8, prefix_groups=500, prefix_cache_tokens=100_000)
    aware = run_simulation(base).requests
    blind = run_simulation(replace(base, faults=(parse_fault("ignore-kv-hits"),))).requests
    hit_aware = aware["cached_p"].sum() / aware["prompt"].sum()
    hit_blind = blind["cached_p"].sum() / blind["prompt"].sum()
    assert hit_aware > 1.2 * hit_blind
    assert hit_aware < 0.8  # never more than the shared share
    assert aware["cached_d"].sum() > blind["cached_d"].sum()
    # decode-side hits are not transferred
    np.testing.assert_allclose(
        aware["kv_bytes"], (aware["prompt"] - aware["cached_d"]) * base.profile.kv_bytes_per_token)
