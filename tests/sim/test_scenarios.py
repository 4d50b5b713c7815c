"""The scenario matrix: each capture shows the symptoms of its root cause, and only those."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pdprobe.errors import UsageError
from pdprobe.sim.engine import F, SimResult
from pdprobe.sim.model import run_simulation, summarize
from pdprobe.sim.scenarios import CAUSES, SCENARIOS, build_scenario, run_to_dir
from pdprobe.values import Missing

_cache: dict[str, SimResult] = {}


def _run(cause: str) -> SimResult:
    if cause not in _cache:
        _cache[cause] = run_simulation(build_scenario(cause, seed=1))
    return _cache[cause]


def _role(res: SimResult, role: str) -> list[int]:
    return [s.index for s in res.layout.of_role(role)]


def _busy(res: SimResult, role: str) -> float:
    idx = _role(res, role)
    return float(res.inst[-1, idx, F["busy_s"]].sum() / (res.alive[:, idx].sum() * 5.0))


def _xfer(res: SimResult) -> np.ndarray:
    r = res.requests
    return r["t_kv"] - r["t_pend"]


def _tpot(res: SimResult) -> np.ndarray:
    r = res.requests
    return np.where(r["output"] > 1, (r["t_finish"] - r["t_first"]) / np.maximum(r["output"] - 1, 1), np.nan)


def test_every_cause_has_a_scenario() -> None:
    assert set(CAUSES) <= set(SCENARIOS)
    with pytest.raises(UsageError):
        build_scenario("bad-luck")


@pytest.mark.parametrize("cause", ["healthy-low", "healthy-high"])
def test_healthy_scenarios_meet_their_slos(cause: str) -> None:
    s = summarize(_run(cause))
    assert not isinstance(s.slo_attainment, Missing) and s.slo_attainment >= 0.95
    assert s.failed == 0 and s.timed_out == 0


def test_prefill_bound_queues_at_prefill_while_decode_idles() -> None:
    res = _run("prefill-bound")
    r = res.requests
    queue = r["t_pstart"] - r["arrival_s"]
    assert np.nanpercentile(queue, 90) > 10.0
    assert _busy(res, "prefill") > 0.85
    healthy = _run("healthy-high")
    dec = _role(res, "decode")
    assert res.inst[:, dec, F["running"]].mean() < 2 * healthy.inst[:, _role(healthy, "decode"), F["running"]].mean()


def test_decode_bound_fills_kv_and_makes_requests_wait() -> None:
    res = _run("decode-bound")
    dec = _role(res, "decode")
    usage = res.inst[:, dec, F["kv_used_tokens"]] / res.inst[:, dec, F["kv_capacity_tokens"]]
    assert usage.max() > 0.9
    assert (res.inst[:, dec, F["waiting"]] > 0).mean() > 0.3  # waiting for KV memory
    assert res.inst[-1, dec, F["preemptions"]].sum() > 0
    assert _busy(res, "prefill") < 0.6
    count = _run("decode-bound-count")
    assert np.nanmedian(_tpot(count)) > 2 * np.nanmedian(_tpot(_run("healthy-low")))


def test_kv_bandwidth_scenario_saturates_the_decode_link() -> None:
    res = _run("kv-transfer-bandwidth")
    assert np.nanpercentile(_xfer(res), 90) > 20 * np.nanpercentile(_xfer(_run("healthy-high")), 90)
    node = next(n for n in res.layout.nodes if n.role == "decode")
    steady = (res.tick_s >= 60) & (res.tick_s <= res.config.duration_s)
    rx = res.node[steady, node.index, 1]
    rate = (rx[-1] - rx[0]) / (res.tick_s[steady][-1] - res.tick_s[steady][0])
    assert rate > 0.6 * node.devices * node.line_rate_bytes_per_s * 0.8


def test_rdma_retransmits_show_timeouts_and_slice_failures() -> None:
    res = _run("rdma-retransmits")
    assert res.requests["timeouts"].sum() > 0
    assert sum(1 for e in res.events if e[2] == "slice_failed") > 0
    assert res.eff.retx_rate == 0.05


def test_no_rdma_moves_kv_over_slow_tcp() -> None:
    res = _run("no-rdma")
    assert res.eff.transport == "tcp"
    r = res.requests
    assert np.nanmedian(r["t_kv"] - r["t_xfer"]) > 10 * np.nanmedian(
        _run("healthy-high").requests["t_kv"] - _run("healthy-high").requests["t_xfer"])
    assert (r["status"] == 0).all()  # slow, but stable


def test_routing_skew_overloads_one_decode_instance() -> None:
    res = _run("routing-skew")
    dec = _role(res, "decode")
    shares = np.array([(res.requests["d_inst"] == d).mean() for d in dec])
    assert shares[0] > 0.7 and shares[1:].max() < 0.2
    running = res.inst[:, dec, F["running"]].mean(axis=0)
    assert running[0] > 3 * running[1:].max()


def test_straggler_is_one_slow_instance() -> None:
    res = _run("straggler")
    tpot = _tpot(res)
    dec = _role(res, "decode")
    med = [np.nanmedian(tpot[res.requests["d_inst"] == d]) for d in dec]
    assert med[1] > 2.2 * max(med[0], med[2])


def test_ratio_lag_breaks_ttft_after_the_shift_and_a_late_scale_up_recovers() -> None:
    res = _run("ratio-lag")
    r = res.requests
    at = res.config.duration_s * 0.4
    ttft = r["t_first"] - r["arrival_s"]
    before = np.nanpercentile(ttft[r["arrival_s"] < at], 90)
    after = np.nanpercentile(ttft[r["arrival_s"] > at + 60], 90)
    assert after > 5 * before
    late = _run("ratio-lag-late")
    lr = late.requests
    lt = lr["t_first"] - lr["arrival_s"]
    end = late.config.duration_s
    middle = np.nanpercentile(lt[(lr["arrival_s"] > at + 60) & (lr["arrival_s"] < end * 0.8)], 90)
    last = np.nanpercentile(lt[lr["arrival_s"] > end * 0.9], 90)
    assert last < 0.5 * middle
    assert len(late.layout.of_role("prefill")) == 3 * res.config.prefill


def test_ignoring_kv_hits_lowers_the_prefix_hit_rate() -> None:
    res = _run("routing-skew-kv-hits")
    fixed = run_simulation(replace(res.config, faults=()))
    hit = res.requests["cached_p"].sum() / res.requests["prompt"].sum()
    base = fixed.requests["cached_p"].sum() / fixed.requests["prompt"].sum()
    assert hit < 0.85 * base


def test_instance_churn_changes_the_decode_set() -> None:
    res = _run("instance-churn")
    alive = res.alive[:, _role(res, "decode")].sum(axis=1)
    assert alive.max() == 3 and alive.min() == 2


def test_a_scenario_on_a_trace_with_sglang_and_pod_names(traces_dir: Path, tmp_path: Path) -> None:
    trace = traces_dir / "mooncake_conversation_trace.jsonl"
    config = build_scenario("prefill-bound", trace=trace, engine="sglang", naming="pod", seed=2)
    assert config.engine == "sglang" and config.naming == "pod" and config.trace == str(trace)
    started = time.perf_counter()
    summary = run_to_dir(config, tmp_path / "c")
    assert time.perf_counter() - started < 10.0
    assert not isinstance(summary.ttft_s, Missing) and summary.ttft_s.p90 > 10 * config.slo_ttft_s
    text = (tmp_path / "c" / "metrics.om").read_text()
    assert 'pod="llm-prefill-' in text and "sglang:num_queue_reqs" in text
