"""Per-window estimates next to the deployed counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity.mix import mix_from_requests
from pdprobe.analysis.capacity.recommend import Slo
from pdprobe.analysis.capacity.windows import MIN_WINDOW_REQUESTS, ratio_windows
from pdprobe.dataset import Dataset, InstanceInfo
from pdprobe.values import Missing

from ._data import dataset, simple_model


def test_windows_follow_a_load_step_and_the_deployment() -> None:
    rng = np.random.default_rng(0)
    # 1 req/s for 600 s, then 6 req/s for 600 s; a second prefill instance joins at 600 s
    ts = np.concatenate([np.sort(rng.uniform(0, 600, 600)), np.sort(rng.uniform(600, 1200, 3600))])
    n = len(ts)
    frame = pd.DataFrame({
        "arrival_ts": 1.7e9 + ts, "prompt_tokens": 4000, "output_tokens": 100,
        "prefill_instance": np.where(ts < 600, "p0", np.where(np.arange(n) % 2, "p0", "p1")),
        "decode_instance": "d0", "e2e_s": 5.0, "status": "ok",
    })
    insts = (InstanceInfo("p0", "prefill", "t"), InstanceInfo("p1", "prefill", "t"),
             InstanceInfo("d0", "decode", "t"))
    ds = dataset(frame, instances=insts)
    mix = mix_from_requests(ds.requests, rate_rps=None, timescale_s=2.0, description="t")
    model = simple_model(pb=1e-4, da=0.01, db=1e-8)  # 0.4 s per prefill
    windows = ratio_windows(ds, mix, model, Slo.of(2.0, 0.1), 300.0)
    assert len(windows) == 4
    first, last = windows[0], windows[-1]
    assert first.arrival_rate_rps == pytest.approx(1.0, rel=0.15)
    assert last.arrival_rate_rps == pytest.approx(6.0, rel=0.1)
    assert first.deployed_prefill == 1 and last.deployed_prefill == 2
    assert first.deployed_decode == 1
    assert last.recommended_prefill > first.recommended_prefill
    assert last.recommended_prefill >= 3  # 6 req/s * 0.4 s = 2.4 busy instances
    assert last.producer_tokens_per_s == pytest.approx(last.arrival_rate_rps * 4000)
    assert not isinstance(last.served_rate_rps, Missing)
    assert last.binding == "prefill"  # 2 deployed instances for 2.4 instances of work


def test_thin_windows_are_missing_with_reason() -> None:
    ts = np.concatenate([np.arange(0, 300, 10.0), np.arange(300, 600, 1.0)])
    frame = pd.DataFrame({"arrival_ts": ts, "prompt_tokens": 100, "output_tokens": 10})
    ds = dataset(frame)
    mix = mix_from_requests(ds.requests, rate_rps=None, timescale_s=2.0, description="t")
    windows = ratio_windows(ds, mix, simple_model(), Slo.of(2.0, 0.1), 300.0)
    assert windows[0].requests == 30 >= MIN_WINDOW_REQUESTS
    thin = ratio_windows(ds, mix, simple_model(), Slo.of(2.0, 0.1), 100.0)
    assert isinstance(thin[0].theoretical_ratio, Missing)
    assert "only 10 requests" in thin[0].theoretical_ratio.reason
    assert isinstance(thin[0].deployed_prefill, Missing)


def test_metric_windows_find_the_records_runs_once_for_both_roles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The metric windows' deployed counts take each window's run of request records, found
    once (``record_firsts``) and shared by both roles, as ``window_frames`` does."""
    from pdprobe.analysis.capacity import window_counts
    from pdprobe.analysis.capacity import windows as windowsmod

    rng = np.random.default_rng(3)
    ts = np.sort(rng.uniform(0, 1200, 400))
    frame = pd.DataFrame({
        "arrival_ts": ts, "prompt_tokens": 100, "output_tokens": 10,
        "prefill_instance": np.where(ts < 600, "p0", "p1"), "decode_instance": "d0"})
    metrics = pd.DataFrame({  # d1 only ever reports metrics
        "ts": np.arange(0.0, 1200.0, 15.0), "instance": "d1",
        "signal": "requests_running", "kind": "gauge", "le": np.nan, "value": 1.0})
    insts = (InstanceInfo("p0", "prefill", "t"), InstanceInfo("p1", "prefill", "t"),
             InstanceInfo("d0", "decode", "t"), InstanceInfo("d1", "decode", "t"))
    ds = dataset(frame, metrics=metrics, instances=insts)
    mix = mix_from_requests(ds.requests, rate_rps=None, timescale_s=2.0, description="t")
    found: list[np.ndarray | None] = []
    shared: list[np.ndarray | None] = []

    def record_firsts(dataset: Dataset, edges: np.ndarray) -> np.ndarray | None:
        found.append(window_counts.record_firsts(dataset, edges))
        return found[-1]

    def active_instances(dataset: Dataset, role: str, edges: np.ndarray,
                         firsts: np.ndarray | None) -> list[int | None]:
        shared.append(firsts)
        return window_counts.active_instances(dataset, role, edges, firsts)

    monkeypatch.setattr(windowsmod, "record_firsts", record_firsts)
    monkeypatch.setattr(windowsmod, "active_instances", active_instances)
    got = windowsmod.metric_windows(ds, mix, simple_model(), Slo.of(2.0, 0.1), 300.0)
    assert len(found) == 1 and found[0] is not None  # sorted arrivals: runs of rows
    assert len(shared) == 2 and all(f is found[0] for f in shared)
    assert [w.deployed_prefill for w in got] == [1, 1, 1, 1]  # p0, then p1
    assert [w.deployed_decode for w in got] == [2, 2, 2, 2]  # d0's records, d1's metrics
