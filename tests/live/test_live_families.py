"""Live parity for the catalog families of issue 13: a real Prometheus serves a Dynamo
disaggregated graph (a `backend` and a `prefill` component), its planner's series, an llm-d
scheduler's decision counter and a TensorRT-LLM counter exported without `_total`; the live
collector must read them as the offline reader reads the same OpenMetrics file.

Names and labels as in tests/collectors/test_catalog_more_families.py (ai-dynamo/dynamo
docs/observability/metrics_examples/vllm.log, components/src/dynamo/planner/monitoring/
planner_metrics.py; llm-d/llm-d-inference-scheduler pkg/metrics/metrics_test.go).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pdprobe import signals as S
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.prometheus import collect_live
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.roles import RoleOptions
from pdprobe.services.diagnose import DiagnoseRequest, load_dataset
from tests.live.conftest import END_BEFORE_NOW_S, require_prometheus
from tests.live.prom_server import PromServer, create_blocks

pytestmark = pytest.mark.live

STEP_S = 15
POINTS = 80  # 20 minutes


def _write(path: Path, end: int) -> None:
    start = end - STEP_S * (POINTS - 1)
    lines: list[str] = []

    def add(name: str, labels: str, f) -> None:
        for i in range(POINTS):
            lines.append(f"{name}{{{labels}}} {f(i):g} {start + STEP_S * i}")

    workers = {"10.0.1.1:8081": "backend", "10.0.1.2:8081": "prefill"}
    for inst, comp in workers.items():
        lab = f'instance="{inst}",job="dynamo",dynamo_component="{comp}",dynamo_namespace="dyn"'
        add("dynamo_component_requests_total", lab + ',dynamo_endpoint="generate"',
            lambda i: 4.0 * i)
        add("dynamo_component_kvstats_total_blocks", lab, lambda i: 5943.0)
        add("dynamo_component_kvstats_active_blocks", lab, lambda i: float(i % 7))
        add("vllm:num_requests_running", f'instance="{inst}",job="dynamo",engine="0"',
            lambda i: 3.0)
        add("trtllm_request_success", f'instance="{inst}",job="dynamo"', lambda i: 2.0 * i)
    plan = 'job="planner",instance="10.0.1.9:9085",namespace="dyn-prod"'
    add("dynamo_planner_num_decode_replicas", plan, lambda i: 2.0 if i < 60 else 4.0)
    add("dynamo_planner_predicted_num_decode_replicas", plan, lambda i: 2.0 if i < 40 else 4.0)
    add("dynamo_planner_observed_ttft_ms", plan, lambda i: 150.0 + i)
    add("llm_d_inference_scheduler_disagg_decision_total",
        'job="epp",instance="10.0.1.8:9090",decision_type="prefill-decode",model_name="m"',
        lambda i: 3.0 * i)
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def families_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, int]]:
    promtool, prometheus = require_prometheus()
    root = tmp_path_factory.mktemp("live-families")
    end = (int(time.time()) // STEP_S) * STEP_S - END_BEFORE_NOW_S
    om = root / "families.om"
    _write(om, end)
    create_blocks(om, root / "tsdb", promtool)
    server = PromServer.start(root / "tsdb", root / "server", prometheus)
    try:
        yield server.url, om, end
    finally:
        server.stop()


def test_new_families_live_equal_offline(families_server: tuple[str, Path, int]) -> None:
    url, om, end = families_server
    target = PrometheusTarget(url=url, since_s=float(STEP_S * (POINTS - 1)), until_ts=float(end),
                              timeout_s=60.0)
    live = collect_live(target, ReadContext(), RoleOptions())
    offline, _ = load_dataset(DiagnoseRequest(paths=(om,)))
    # A live `backend` component beside a `prefill` one is decode, as offline.
    roles = {i.name: i.role for i in live.instances}
    assert roles == {i.name: i.role for i in offline.instances}
    assert roles["10.0.1.1:8081"] == "decode" and roles["10.0.1.2:8081"] == "prefill"
    # A counter without `_total` is read live as offline (its increase, per instance).
    for ds in (live, offline):
        m = ds.metrics[(ds.metrics["signal"] == S.REQUESTS_FINISHED_TOTAL)]
        inc = m.groupby("instance")["value"].agg(lambda v: v.iloc[-1] - v.iloc[0])
        assert inc.to_dict() == {"10.0.1.1:8081": 158.0, "10.0.1.2:8081": 158.0}
        blocks = ds.metrics[ds.metrics["signal"] == S.KV_TOTAL_BLOCKS]
        assert set(blocks["value"]) == {5943.0}
    # The planner's and the scheduler's series are deployment rows, live as offline.
    assert live.deployment is not None and offline.deployment is not None
    for signal in (S.PLANNER_DECODE_REPLICAS, S.PLANNER_PREDICTED_DECODE_REPLICAS,
                   S.PLANNER_OBSERVED_TTFT_S, S.DISAGG_SPLIT_DECISIONS_TOTAL):
        a = live.deployment[live.deployment["signal"] == signal].sort_values("ts")
        b = offline.deployment[offline.deployment["signal"] == signal].sort_values("ts")
        assert len(a) == len(b) == POINTS, signal
        np.testing.assert_allclose(a["value"].to_numpy(), b["value"].to_numpy())
        assert list(a["deployment"].unique()) == list(b["deployment"].unique())
    assert set(live.deployment["deployment"]) == {"dyn-prod", ""}
    assert not {"10.0.1.9:9085", "10.0.1.8:9090"} & set(roles)  # no planner/EPP instance
