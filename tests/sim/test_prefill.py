"""Prefill instances: queueing matches M/D/1, chunked batches, and the batch-time formula."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pdprobe.profiles import BUILTIN_PROFILES
from pdprobe.sim.config import LengthDist, SimConfig
from pdprobe.sim.engine import F
from pdprobe.sim.model import run_simulation

PROMPT = 2000


def _single_server(rho: float, requests: int, seed: int) -> tuple[float, float]:
    """Mean simulated wait and the M/D/1 prediction for one prefill instance at load ``rho``."""
    # one request per pass: the token budget equals the prompt, so service is deterministic
    profile = replace(BUILTIN_PROFILES["llama3-8b-h100"], prefill_max_batch_tokens=PROMPT)
    service_s = profile.prefill_time_s(PROMPT)
    rate = rho / service_s
    config = SimConfig(profile=profile, prefill=1, decode=1, rate_rps=rate,
                       duration_s=requests / rate, seed=seed,
                       prompt=LengthDist("fixed", median=PROMPT, sigma=0.0, max_tokens=PROMPT),
                       output=LengthDist("fixed", median=1, sigma=0.0, max_tokens=1))
    r = run_simulation(config).requests
    wait = float(np.mean(r["t_pstart"] - r["arrival_s"]))
    return wait, rho * service_s / (2 * (1 - rho))


@pytest.mark.parametrize(("rho", "requests"), [(0.3, 15000), (0.6, 20000), (0.8, 40000)])
def test_mean_wait_matches_md1(rho: float, requests: int) -> None:
    # W = rho * D / (2 (1 - rho)) for Poisson arrivals and deterministic service D
    wait, expected = _single_server(rho, requests, seed=11)
    assert wait == pytest.approx(expected, rel=0.10)


def test_chunked_prefill_time_adds_up_to_the_formula() -> None:
    # a 20k-token prompt alone: three passes (8192-token budget), whose attention terms sum to
    # c * l^2 and whose fixed costs add one `a` per pass
    profile = BUILTIN_PROFILES["llama3-70b-h100-tp4"]
    config = SimConfig(profile=profile, prefill=1, decode=1, rate_rps=0.01, duration_s=200.0,
                       prompt=LengthDist("fixed", median=20000, sigma=0, max_tokens=20000),
                       output=LengthDist("fixed", median=2, sigma=0, max_tokens=2), seed=1)
    r = run_simulation(config).requests
    prefill_s = r["t_pend"] - r["t_pstart"]
    expected = 3 * profile.prefill_a_s + profile.prefill_b_s_per_token * 20000 \
        + profile.prefill_c_s_per_token2 * 20000**2
    assert r["arrival_s"].size >= 1
    np.testing.assert_allclose(prefill_s, expected, rtol=1e-9)


def test_batching_amortises_the_fixed_cost() -> None:
    # under a burst, several short prompts share a pass: the prefill instance finishes the
    # burst faster than one-by-one service would
    profile = BUILTIN_PROFILES["llama3-70b-h100-tp4"]
    config = SimConfig(profile=profile, prefill=1, decode=2, rate_rps=20.0, duration_s=60.0,
                       prompt=LengthDist("fixed", median=500, sigma=0, max_tokens=500),
                       output=LengthDist("fixed", median=4, sigma=0, max_tokens=4), seed=2)
    res = run_simulation(config)
    one_by_one = profile.prefill_time_s(500)
    busy = res.inst[-1, 0, F["busy_s"]]
    # offered 20 req/s against 1/0.06 s = 16.7 req/s one by one: only batching keeps up
    assert busy < 0.8 * res.n_requests * one_by_one
    assert (res.requests["status"] == 0).all()
