"""Decode instances: analytic stepping equals step-by-step batching, Little's law, preemption."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pdprobe.profiles import BUILTIN_PROFILES
from pdprobe.sim.config import LengthDist, SimConfig, parse_fault
from pdprobe.sim.engine import F
from pdprobe.sim.model import run_simulation


def _reference_decode(t_kv: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                      a: float, b: float, c: float) -> tuple[np.ndarray, np.ndarray]:
    """Continuous batching one step at a time (the slow, obvious way): first-token and finish
    times of requests whose KV arrives at ``t_kv``."""
    order = np.argsort(t_kv, kind="stable")
    first = np.full(t_kv.size, np.nan)
    finish = np.full(t_kv.size, np.nan)
    running: dict[int, int] = {}  # rid -> generated
    nxt = 0
    t = 0.0
    while nxt < order.size or running:
        if not running:
            t = max(t, t_kv[order[nxt]])
        while nxt < order.size and t_kv[order[nxt]] <= t:
            running[int(order[nxt])] = 0
            nxt += 1
        batch = len(running)
        context = sum(int(prompt[r]) + g for r, g in running.items())
        t += a + b * context + c * batch
        for rid in list(running):
            running[rid] += 1
            if running[rid] == 1:
                first[rid] = t
            if running[rid] == output[rid]:
                finish[rid] = t
                del running[rid]
    return first, finish


def test_analytic_stepping_matches_step_by_step_batching() -> None:
    profile = BUILTIN_PROFILES["llama3-8b-h100"]
    config = SimConfig(profile=profile, prefill=2, decode=1, rate_rps=6.0, duration_s=40.0,
                       prompt=LengthDist("lognormal", median=800, sigma=0.6, max_tokens=4000),
                       output=LengthDist("lognormal", median=120, sigma=0.8, max_tokens=1500),
                       seed=5)
    r = run_simulation(config).requests
    assert r["arrival_s"].size > 150
    first, finish = _reference_decode(r["t_kv"], r["prompt"], r["output"], profile.decode_a_s,
                                      profile.decode_b_s_per_ctx_token, profile.decode_c_s_per_seq)
    np.testing.assert_allclose(r["t_first"], first, rtol=0, atol=1e-7)
    np.testing.assert_allclose(r["t_finish"], finish, rtol=0, atol=1e-7)


def test_a_lone_request_decodes_at_the_formula_rate() -> None:
    # alone in the batch, step j (j = 1..O) lasts a + c + b * (P + j - 1); the O - 1 steps
    # after the first token average a context of P + O/2
    profile = BUILTIN_PROFILES["llama3-70b-h100-tp4"]
    config = SimConfig(profile=profile, prefill=1, decode=1, rate_rps=0.02, duration_s=150.0,
                       prompt=LengthDist("fixed", median=4000, sigma=0, max_tokens=4000),
                       output=LengthDist("fixed", median=301, sigma=0, max_tokens=301), seed=3)
    r = run_simulation(config).requests
    tpot = (r["t_finish"] - r["t_first"]) / 300
    expected = profile.decode_a_s + profile.decode_c_s_per_seq + \
        profile.decode_b_s_per_ctx_token * (4000 + 301 / 2)
    np.testing.assert_allclose(tpot, expected, rtol=1e-9)


def test_littles_law_for_decode_concurrency(small_config: SimConfig) -> None:
    config = replace(small_config, duration_s=600.0, rate_rps=9.0)
    res = run_simulation(config)
    r = res.requests
    residence = r["t_finish"] - r["t_join"]
    dec = [s.index for s in res.layout.of_role("decode")]
    # 1) the engine's own integral of the batch size equals the sum of residence times:
    #    ITL samples cover every step but each request's first one
    first_steps = np.nansum(r["t_first"] - r["t_join"])
    integral = res.itl_sum[-1, dec].sum() + first_steps
    assert integral == pytest.approx(np.nansum(residence), rel=1e-6)
    # 2) L = lambda * W: the running gauge, sampled every 5 s in the steady part, against the
    #    arrival rate times the mean residence
    steady = (res.tick_s >= 60) & (res.tick_s <= config.duration_s)
    sampled = res.inst[steady][:, dec, F["running"]].sum(axis=1).mean()
    arrived = r["arrival_s"].size / config.duration_s
    assert sampled == pytest.approx(arrived * np.nanmean(residence), rel=0.08)


def test_preemption_keeps_kv_within_capacity_and_loses_no_tokens(small_config: SimConfig) -> None:
    config = replace(small_config, prefill=4, decode=1, rate_rps=10.0, duration_s=120.0,
                     faults=(parse_fault("small-kv:fraction=0.06"),))
    res = run_simulation(config)
    dec = res.layout.of_role("decode")[0].index
    cap = res.inst[0, dec, F["kv_capacity_tokens"]]
    assert cap == int(config.profile.kv_capacity_tokens * 0.06)
    assert res.inst[:, dec, F["kv_used_tokens"]].max() <= cap
    assert res.inst[-1, dec, F["preemptions"]] > 0
    r = res.requests
    ok = r["status"] == 0
    assert ok.all()
    # every sequence still produced exactly its output, and the counter agrees
    np.testing.assert_array_equal(r["generated"][ok], r["output"][ok])
    assert res.inst[-1, dec, F["gen_total"]] == r["generated"].sum()
    # memory pressure shows up as requests waiting for admission
    assert res.inst[:, dec, F["waiting"]].max() > 0


def test_without_preemption_admission_reserves_the_whole_sequence(small_config: SimConfig) -> None:
    config = replace(small_config, prefill=4, decode=1, rate_rps=10.0, preemption=False,
                     faults=(parse_fault("small-kv:fraction=0.06"),))
    res = run_simulation(config)
    dec = res.layout.of_role("decode")[0].index
    assert res.inst[-1, dec, F["preemptions"]] == 0
    assert res.inst[:, dec, F["kv_used_tokens"]].max() <= res.inst[0, dec, F["kv_capacity_tokens"]]
    assert (res.requests["status"] == 0).all()
