"""The event loop end to end: completeness, determinism, scaling, SLOs and what breaks them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pdprobe.sim.config import SimConfig, parse_fault
from pdprobe.sim.engine import F
from pdprobe.sim.model import run_simulation, summarize
from pdprobe.values import Missing


def test_every_request_completes_or_is_reported_failed(small_config: SimConfig) -> None:
    config = replace(small_config, faults=(parse_fault("rdma-retransmits:rate=0.2"),))
    res = run_simulation(config)
    r = res.requests
    assert set(np.unique(r["status"])) <= {0, 1, 2}
    ok = r["status"] == 0
    assert (~ok).sum() > 0  # a 20 % loss rate fails a few transfers
    assert np.isfinite(r["t_finish"][ok]).all()
    assert np.isnan(r["t_finish"][~ok]).all()
    # failed requests released their decode memory: the decode side ends empty
    dec = [s.index for s in res.layout.of_role("decode")]
    assert (res.inst[-1, dec, F["kv_used_tokens"]] == 0).all()
    assert res.inst[-1, dec, F["fin_err"]].sum() == (r["status"] == 1).sum()
    # lifecycle times are ordered for every completed request
    order = ["arrival_s", "t_pstart", "t_pend", "t_admit", "t_xfer", "t_kv", "t_join", "t_first",
             "t_finish"]
    stacked = np.vstack([r[k][ok] for k in order])
    assert (np.diff(stacked, axis=0) >= -1e-12).all()


def test_same_seed_same_run_other_seed_other_run(small_config: SimConfig) -> None:
    a = run_simulation(small_config).requests
    b = run_simulation(small_config).requests
    c = run_simulation(replace(small_config, seed=8)).requests
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert a["arrival_s"].size != c["arrival_s"].size or not np.array_equal(a["prompt"], c["prompt"])


def test_requests_past_the_drain_time_time_out(small_config: SimConfig) -> None:
    # prefill at ~3x its capacity with no drain time: the backlog is cut off and reported
    config = replace(small_config, prefill=1, rate_rps=15.0, duration_s=60.0, drain_s=0.0)
    res = run_simulation(config)
    r = res.requests
    timed_out = r["status"] == 2
    assert timed_out.sum() > 100
    assert (res.inst[-1, :, F["fin_abort"]].sum()) == timed_out.sum()
    assert res.tick_s[-1] == pytest.approx(60.0)


def test_scale_events_add_and_drain_instances(small_config: SimConfig) -> None:
    config = replace(small_config, duration_s=180.0,
                     faults=(parse_fault("scale:at_s=60,decode=1"),
                             parse_fault("scale:at_s=120,decode=3,prefill=4")))
    res = run_simulation(config)
    names = [(s.role, s.role_index, s.start_s) for s in res.layout.instances]
    # 3 + 1 prefill, 2 + 2 decode (the second decode drains at 60 s; two new ones join at 120 s)
    assert sum(1 for n in names if n[0] == "prefill") == 4
    assert sorted(n[2] for n in names if n[0] == "decode") == [0.0, 0.0, 120.0, 120.0]
    decode = [s.index for s in res.layout.of_role("decode")]
    alive = res.alive[:, decode]
    t = res.tick_s
    assert alive[t < 60, 1].all() and not alive[(t > 90) & (t < 120), 1].any()
    assert not alive[t < 120, 2].any() and alive[t >= 120, 2].all()
    r = res.requests
    late = r["arrival_s"] >= 125
    assert np.isin(r["d_inst"][late], decode[2:]).any()
    assert not np.isin(r["d_inst"][(r["arrival_s"] > 65) & (r["arrival_s"] < 120)], decode[1]).any()
    assert (r["status"] == 0).all()


def test_healthy_cluster_meets_slos_and_halving_breaks_them(small_config: SimConfig) -> None:
    # 4P/2D of Llama-70B at 13 req/s: prefill ~55 % busy, decode batches of ~17 at 16 ms/token
    healthy = replace(small_config, prefill=4, decode=2, rate_rps=13.0, duration_s=300.0,
                      slo_ttft_s=2.0, slo_tpot_s=0.02)
    ok = summarize(run_simulation(healthy))
    assert not isinstance(ok.slo_attainment, Missing) and ok.slo_attainment >= 0.95
    half_prefill = summarize(run_simulation(replace(healthy, prefill=2)))
    assert not isinstance(half_prefill.ttft_attainment, Missing)
    assert not isinstance(half_prefill.ttft_s, Missing) and not isinstance(ok.ttft_s, Missing)
    assert half_prefill.ttft_attainment < 0.8
    assert half_prefill.ttft_s.p90 > 5 * ok.ttft_s.p90
    half_decode = summarize(run_simulation(replace(healthy, decode=1)))
    assert not isinstance(half_decode.tpot_attainment, Missing)
    assert not isinstance(half_decode.tpot_s, Missing) and not isinstance(ok.tpot_s, Missing)
    assert half_decode.tpot_attainment < 0.8
    assert half_decode.tpot_s.p50 > 1.15 * ok.tpot_s.p50


def test_straggler_steps_slower_than_its_peers(small_config: SimConfig) -> None:
    config = replace(small_config, decode=3, duration_s=240.0,
                     faults=(parse_fault("straggler:role=decode,index=1,factor=2"),))
    res = run_simulation(config)
    r = res.requests
    tpot = (r["t_finish"] - r["t_first"]) / np.maximum(r["output"] - 1, 1)
    decode = [s.index for s in res.layout.of_role("decode")]
    med = [np.nanmedian(tpot[(r["d_inst"] == d) & (r["output"] > 1)]) for d in decode]
    assert med[1] == pytest.approx(2 * np.mean([med[0], med[2]]), rel=0.15)
