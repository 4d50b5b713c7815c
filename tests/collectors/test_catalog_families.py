"""New catalog families read through the OpenMetrics reader (issue 13, item 2).

Fixtures in tests/fixtures/metrics/families/:

- dynamo_trtllm_agg.prom: series of ai-dynamo/dynamo docs/observability/metrics_examples/
  trtllm.log (an aggregated TensorRT-LLM worker, dynamo_component="tensorrt_llm"), verbatim,
  with some buckets left out; the trtllm_* names and labels are those of NVIDIA/TensorRT-LLM
  tensorrt_llm/metrics/collector.py.
- nixl_telemetry.prom: ai-dynamo/nixl src/plugins/telemetry/prometheus/README.md (names: the
  `_total` counters, agent_errors_total{status}, agent_xfer_time_us histogram in µs) and
  prometheus_exporter.cpp (labels hostname, agent_name; AGENT_ERR_* statuses).
- no_total_untyped.prom: counters exported without `_total` and without `# TYPE` lines, as
  `promtool tsdb dump` and exporters that strip suffixes give them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.metric_roles import generic_component_hints
from pdprobe.collectors.openmetrics import read_openmetrics

FAMILIES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "families"


def read(name: str):
    return read_openmetrics(FAMILIES / name, ReadContext())


def rows(partial, signal: str, kind: str | None = None):
    m = partial.metrics
    sel = m[(m["signal"] == signal) & ((m["kind"] == kind) if kind else True)]
    return sel


def test_trtllm_under_dynamo_latency_histograms_in_seconds():
    p = read("dynamo_trtllm_agg.prom")
    ttft = rows(p, S.TTFT_S, S.BUCKET)
    assert dict(zip(ttft["le"], ttft["value"], strict=True)) == {0.02: 0.0, 0.04: 1.0, 0.06: 2.0,
                                                                 np.inf: 2.0}
    assert rows(p, S.TTFT_S, S.HSUM)["value"].tolist() == [0.06795299984514713]
    assert rows(p, S.TPOT_S, S.HCOUNT)["value"].tolist() == [2.0]
    assert rows(p, S.QUEUE_S, S.HCOUNT)["value"].tolist() == [2.0]
    assert rows(p, S.WORKER_REQUEST_S, S.HCOUNT)["value"].tolist() == [2.0]
    assert rows(p, S.WORKER_REQUEST_S, S.HSUM)["value"].tolist() == [1.735419241]
    # trtllm_request_success_total and dynamo_component_requests_total: the engine's own wins
    assert rows(p, S.REQUESTS_FINISHED_TOTAL)["value"].tolist() == [2.0]
    assert rows(p, S.KV_USAGE_RATIO)["value"].tolist() == [0.0]
    assert set(p.engines.values()) == {"trtllm"}


def test_aggregated_dynamo_worker_is_no_decode_instance():
    p = read("dynamo_trtllm_agg.prom")
    assert not [h for h in p.role_hints if h.role == "decode"]


def test_generic_dynamo_component_is_decode_only_beside_a_prefill_component():
    alone = [("w1:8081", "dynamo_component", "backend")]
    assert generic_component_hints(alone, "x") == []
    pair = [*alone, ("w2:8081", "dynamo_component", "prefill")]
    hints = generic_component_hints(pair, "x")
    assert [(h.instance, h.role) for h in hints] == [("w1:8081", "decode")]
    assert "beside a prefill component" in hints[0].how


def test_nixl_telemetry_bytes_errors_and_transfer_time():
    p = read("nixl_telemetry.prom")
    assert set(p.metrics["instance"]) == {"prefill-0"}  # hostname label names the instance
    assert rows(p, S.KV_TX_BYTES_TOTAL)["value"].tolist() == [1073741824.0]
    assert rows(p, S.KV_RX_BYTES_TOTAL)["value"].tolist() == [0.0]
    assert rows(p, S.KV_TRANSFERS_TOTAL)["value"].tolist() == [64.0]
    assert rows(p, S.KV_TRANSFER_FAILURES_TOTAL)["value"].tolist() == [1.0]  # statuses summed
    xfer = rows(p, S.KV_TRANSFER_S, S.BUCKET)
    assert np.allclose(sorted(xfer["le"]), [1e-4, 1e-3, np.inf])  # µs bounds in seconds
    assert np.isclose(rows(p, S.KV_TRANSFER_S, S.HSUM)["value"].iloc[0], 0.0512)
    assert set(p.engines.values()) == {"nixl"}


def test_counters_without_total_and_type_are_counters():
    p = read("no_total_untyped.prom")
    succ = rows(p, S.REQUESTS_FINISHED_TOTAL)
    assert succ["kind"].unique().tolist() == [S.COUNTER]
    assert succ["value"].tolist() == [2.0, 5.0]
    prompt = rows(p, S.PROMPT_TOKENS_TOTAL)
    assert prompt["kind"].unique().tolist() == [S.COUNTER]
    assert prompt["value"].tolist() == [100.0, 140.0]  # the drop is a restart, corrected


def test_v0_swapped_and_cpu_cache_are_in_the_catalog():
    assert mc.lookup("vllm:num_requests_swapped")[0].signal == S.REQUESTS_SWAPPED
    assert mc.lookup("vllm:cpu_cache_usage_perc")[0].signal == S.CPU_KV_USAGE_RATIO


def test_live_plan_reads_the_new_families():
    index = pp.SpecIndex.build()
    names = ["trtllm_time_to_first_token_seconds_bucket", "agent_tx_bytes_total",
             "agent_xfer_time_us_bucket", "dynamo_component_request_duration_seconds_bucket",
             "vllm:num_requests_swapped"]
    fams = pp.families_from_names(names, index)
    signals = {s.signal for f in fams for s in f.specs}
    assert {S.TTFT_S, S.KV_TX_BYTES_TOTAL, S.KV_TRANSFER_S, S.WORKER_REQUEST_S,
            S.REQUESTS_SWAPPED} <= signals
    import re
    for name in names[:4]:
        assert re.fullmatch(pp.ENGINE_NAME_RE, name), name
    assert not re.fullmatch(pp.ENGINE_NAME_RE, "agent_unrelated_metric")
