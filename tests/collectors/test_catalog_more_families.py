"""Catalog families of issue 13 item 2, second part, read through the OpenMetrics reader.

Fixtures in tests/fixtures/metrics/families/:

- dynamo_kvstats_nats_fe.prom: the kvstats block lines of ai-dynamo/dynamo
  docs/observability/metrics_examples/vllm.log and the dynamo_frontend_model_* lines of
  metrics_examples/fe.log verbatim; NATS service series in the layout of
  docs/observability/metrics.md ("NATS": typed gauge, labels dynamo_component,
  dynamo_namespace, service_name, milliseconds).
- dynamo_planner.om: ai-dynamo/dynamo components/src/dynamo/planner/monitoring/
  planner_metrics.py names (no labels of its own; namespace/pod/job as Prometheus adds them),
  as `promtool tsdb dump-openmetrics` prints them, over ten minutes.
- lmcache.prom: LMCache/LMCache lmcache/observability.py (PrometheusLogger: `lmcache:` names,
  labels model_name, worker_id, role, served_model_name), two TP ranks of one vLLM.
- sglang_per_stage.prom: sglang:per_stage_req_latency_seconds of sgl-project/sglang
  python/sglang/srt/observability/metrics_collector.py (exponential buckets from 1 ms, label
  stage = RequestStage values of managers/schedule_batch.py).
- production_stack_router.prom: vllm-project/production-stack
  src/vllm_router/services/metrics_service/__init__.py gauges as routers/metrics_router.py sets
  them (server="<backend URL>"; values as in src/tests/test_stale_metrics.py).
- llm_d_decisions.prom: llm-d/llm-d-inference-scheduler pkg/metrics/metrics_test.go's expected
  exposition, plus disagg_decision_total (docs/metrics.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import promql_found as pf
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.openmetrics import read_openmetrics

FAMILIES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "families"


def read(name: str):
    return read_openmetrics(FAMILIES / name, ReadContext())


def rows(partial, signal: str, kind: str | None = None):
    m = partial.metrics
    return m[(m["signal"] == signal) & ((m["kind"] == kind) if kind else True)]


def dep(partial, signal: str):
    d = partial.deployment
    return d[d["signal"] == signal]


def test_dynamo_kvstats_blocks_and_nats_timings():
    p = read("dynamo_kvstats_nats_fe.prom")
    assert rows(p, S.KV_TOTAL_BLOCKS)["value"].tolist() == [5943.0]
    assert rows(p, S.KV_ACTIVE_BLOCKS)["value"].tolist() == [0.0]
    assert rows(p, S.NATS_REQUESTS_TOTAL)["kind"].tolist() == [S.COUNTER]  # typed gauge
    assert rows(p, S.NATS_PROCESSING_S_TOTAL)["value"].tolist() == [3.577]  # ms -> s
    assert np.isclose(rows(p, S.NATS_PROCESSING_AVG_S)["value"].iloc[0], 1.7885)


def test_frontend_model_kv_blocks_are_deployment_numbers():
    p = read("dynamo_kvstats_nats_fe.prom")
    assert dep(p, S.MODEL_KV_BLOCKS_PER_WORKER)["value"].tolist() == [92962.0]
    assert dep(p, S.MODEL_KV_BLOCK_SIZE_TOKENS)["value"].tolist() == [1.0]
    assert not rows(p, S.MODEL_KV_BLOCKS_PER_WORKER).size  # never an instance's row


def test_planner_series_land_in_the_deployment_table_per_namespace():
    p = read("dynamo_planner.om")
    assert p.metrics is None  # the planner is no instance
    assert set(p.deployment["deployment"]) == {"dynamo-prod"}
    pred = dep(p, S.PLANNER_PREDICTED_DECODE_REPLICAS)
    cur = dep(p, S.PLANNER_DECODE_REPLICAS)
    assert len(pred) == len(cur) == 21
    assert pred["value"].iloc[10] == 4.0 and cur["value"].iloc[10] == 2.0
    assert np.isclose(dep(p, S.PLANNER_OBSERVED_ITL_S)["value"].iloc[-1], 0.048)  # ms -> s
    ds = fuse([p])
    assert ds.deployment is not None and len(ds.deployment) == len(p.deployment)
    assert not ds.instances


def test_planner_older_names_and_superseded():
    assert mc.lookup("planner:predicted_num_d")[0].signal == S.PLANNER_PREDICTED_DECODE_REPLICAS
    assert mc.lookup("planner:observed_ttft")[0].scale == mc.MS_TO_S
    assert mc.SUPERSEDED_BY["planner:num_d_workers"] == "dynamo_planner_num_decode_replicas"


def test_lmcache_worker_id_is_a_rank_not_an_instance():
    p = read("lmcache.prom")
    assert set(p.metrics["instance"]) == {"lmcache"}  # the file name, not "0" and "1"
    assert rows(p, S.LMCACHE_HIT_TOKENS_TOTAL)["value"].tolist() == [32768.0]  # ranks summed
    assert rows(p, S.LMCACHE_STORED_TOKENS_TOTAL)["value"].tolist() == [16384.0]
    assert rows(p, S.LMCACHE_RETRIEVE_HIT_RATIO)["value"].tolist() == [0.625]  # mean
    assert rows(p, S.LMCACHE_RETRIEVE_S, S.HCOUNT)["value"].tolist() == [12.0]
    assert set(p.engines.values()) == {"lmcache"}
    assert not [h for h in p.role_hints if h.how.startswith("label role")]  # role="worker"


def test_sglang_per_stage_pd_stages_become_signals():
    p = read("sglang_per_stage.prom")
    kv_wait = rows(p, S.STAGE_DECODE_KV_WAIT_S, S.BUCKET)
    assert dict(zip(kv_wait["le"], kv_wait["value"], strict=True)) == {
        0.001: 0.0, 0.026244: 3.0, np.inf: 4.0}
    assert rows(p, S.STAGE_DECODE_PREALLOC_S, S.HSUM)["value"].tolist() == [0.02]
    # decode_loop is no P/D stage: not read
    assert set(p.metrics["signal"]) == {S.STAGE_DECODE_KV_WAIT_S, S.STAGE_DECODE_PREALLOC_S}


def test_production_stack_router_series_belong_to_their_backends():
    p = read("production_stack_router.prom")
    qps = rows(p, S.ROUTER_QPS).set_index("instance")["value"].to_dict()
    assert qps == {"10.0.0.5:8000": 42.0, "10.0.0.6:8000": 3.5}
    assert rows(p, S.ROUTER_PREFILL_REQUESTS).set_index("instance")["value"].to_dict() == {
        "10.0.0.5:8000": 6.0, "10.0.0.6:8000": 0.0}
    assert rows(p, S.ROUTER_DECODING_REQUESTS)["value"].sum() == 22.0
    assert rows(p, S.ROUTER_BACKEND_HEALTHY).set_index("instance")["value"].to_dict() == {
        "10.0.0.5:8000": 1.0, "10.0.0.6:8000": 0.0}
    # the router's own running/swapped counts are not the engine's gauges
    assert not rows(p, S.REQUESTS_RUNNING).size and not rows(p, S.REQUESTS_SWAPPED).size
    keys = {k.name: dict(k.facts) for k in p.keys}
    assert keys["10.0.0.5:8000"]["url"] == "http://10.0.0.5:8000"


def test_llm_d_pd_decision_counter_is_a_deployment_number():
    p = read("llm_d_decisions.prom")
    assert p.metrics is None
    # disagg_decision_total supersedes pd_decision_total; splits are P/D and E/P/D
    assert dep(p, S.DISAGG_DECISIONS_TOTAL)["value"].tolist() == [4.0]
    assert dep(p, S.DISAGG_SPLIT_DECISIONS_TOTAL)["value"].tolist() == [3.0]
    assert set(p.deployment["deployment"]) == {""}


@pytest.mark.parametrize("name, signal", [
    ("dynamo_planner_predicted_num_decode_replicas", S.PLANNER_PREDICTED_DECODE_REPLICAS),
    ("dynamo_component_kvstats_total_blocks", S.KV_TOTAL_BLOCKS),
    ("dynamo_component_nats_service_processing_ms_avg", S.NATS_PROCESSING_AVG_S),
    ("lmcache:num_hit_tokens_total", S.LMCACHE_HIT_TOKENS_TOTAL),
    ("sglang:per_stage_req_latency_seconds_bucket", S.STAGE_DECODE_KV_WAIT_S),
    ("vllm:current_qps", S.ROUTER_QPS),
    ("llm_d_inference_scheduler_disagg_decision_total", S.DISAGG_SPLIT_DECISIONS_TOTAL),
])
def test_live_plan_and_check_know_the_new_families(name, signal):
    """The live query plan (and so `pdprobe check`, which reads the catalog through it) finds
    each new family by name and queries it."""
    import re

    index = pp.SpecIndex.build()
    fams = pp.families_from_names([name], index)
    assert signal in {s.signal for f in fams for s in f.specs}
    assert re.fullmatch(pp.ENGINE_NAME_RE, name), name
    assert pp.analysed(fams)
    found = pf.summarise(fams)
    assert found.has_any([signal])
