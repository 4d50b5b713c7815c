"""Catalog families of the engines and components beyond vLLM/SGLang/Dynamo's core: TensorRT-LLM,
NIXL telemetry, the Dynamo planner, LMCache, SGLang's per-stage latency, production-stack's
router and llm-d's scheduler (issue 13). ``metric_catalog.ALL_SPECS`` includes them; each block
names the upstream file its names, labels and units come from.
"""

from __future__ import annotations

from typing import Final

from pdprobe import signals as S
from pdprobe.collectors.metric_spec import (
    MS_TO_S,
    US_TO_S,
    Aggregation,
    C,
    G,
    H,
    MetricSpec,
)

# TensorRT-LLM's own server metrics (NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py,
# MetricsCollector; labels model_name, engine_type="trtllm", finished_reason on the success
# counter, http_code on the error counter; seconds, ratios 0-1). Exposed by `trtllm-serve` and by
# Dynamo's TRT-LLM worker (ai-dynamo/dynamo docs/observability/metrics_examples/trtllm.log).
TRTLLM: Final = (
    MetricSpec("trtllm_request_success_total", S.REQUESTS_FINISHED_TOTAL, C, "trtllm"),
    MetricSpec("trtllm_request_error_total", S.REQUESTS_FAILED_TOTAL, C, "trtllm",
               note="HTTP errors, by http_code"),
    MetricSpec("trtllm_time_to_first_token_seconds", S.TTFT_S, H, "trtllm"),
    MetricSpec("trtllm_time_per_output_token_seconds", S.TPOT_S, H, "trtllm",
               note="per request (TPOT), not per token"),
    MetricSpec("trtllm_e2e_request_latency_seconds", S.E2E_S, H, "trtllm"),
    MetricSpec("trtllm_request_queue_time_seconds", S.QUEUE_S, H, "trtllm"),
    MetricSpec("trtllm_request_prefill_time_seconds", S.PREFILL_S, H, "trtllm"),
    MetricSpec("trtllm_request_decode_time_seconds", S.DECODE_S, H, "trtllm"),
    MetricSpec("trtllm_prompt_tokens_total", S.PROMPT_TOKENS_TOTAL, C, "trtllm"),
    MetricSpec("trtllm_generation_tokens_total", S.GENERATION_TOKENS_TOTAL, C, "trtllm"),
    MetricSpec("trtllm_prompt_cached_tokens_total", S.CACHED_TOKENS_TOTAL, C, "trtllm"),
    MetricSpec("trtllm_num_requests_running", S.REQUESTS_RUNNING, G, "trtllm"),
    MetricSpec("trtllm_num_requests_waiting", S.REQUESTS_WAITING, G, "trtllm"),
    MetricSpec("trtllm_kv_cache_utilization", S.KV_USAGE_RATIO, G, "trtllm", aggregate="mean"),
    MetricSpec("trtllm_kv_cache_hit_rate", S.PREFIX_HIT_RATIO, G, "trtllm", aggregate="mean"),
)

# NIXL's native telemetry (ai-dynamo/nixl src/plugins/telemetry/prometheus/README.md and
# prometheus_exporter.cpp; NIXL_TELEMETRY_EXPORTER=prometheus): per agent, labels hostname and
# agent_name (status on agent_errors_total); transfer times in microseconds.
NIXL: Final = (
    MetricSpec("agent_tx_bytes_total", S.KV_TX_BYTES_TOTAL, C, "nixl"),
    MetricSpec("agent_rx_bytes_total", S.KV_RX_BYTES_TOTAL, C, "nixl"),
    MetricSpec("agent_tx_requests_num_total", S.KV_TRANSFERS_TOTAL, C, "nixl",
               note="posted transfer requests, writes"),
    MetricSpec("agent_rx_requests_num_total", S.KV_TRANSFERS_TOTAL, C, "nixl",
               note="posted transfer requests, reads"),
    MetricSpec("agent_errors_total", S.KV_TRANSFER_FAILURES_TOTAL, C, "nixl",
               note="every AGENT_ERR_* status"),
    MetricSpec("agent_xfer_time_us", S.KV_TRANSFER_S, H, "nixl", scale=US_TO_S),
)

# Dynamo planner (ai-dynamo/dynamo components/src/dynamo/planner/monitoring/planner_metrics.py,
# PlannerPrometheusMetrics; no labels of its own, Prometheus adds namespace/pod/instance; latencies
# in ms). `num_*_replicas` are the replicas the planner saw deployed, `predicted_num_*` the counts
# it decided on. Earlier releases (planner_core.py, PlannerPrometheusMetrics with prefix
# "planner") exported `planner:num_p_workers`, `planner:predicted_num_p`, `planner:observed_ttft`
# (ms), ... with the same meaning. A deployment number: one planner per Dynamo graph.
def _planner(name: str, signal: str, scale: float = 1.0, note: str = "") -> MetricSpec:
    return MetricSpec(name, signal, G, "dynamo", scale=scale, aggregate="max",
                      scope="deployment", note=note)


PLANNER: Final = (
    _planner("dynamo_planner_num_prefill_replicas", S.PLANNER_PREFILL_REPLICAS),
    _planner("dynamo_planner_num_decode_replicas", S.PLANNER_DECODE_REPLICAS),
    _planner("dynamo_planner_predicted_num_prefill_replicas",
             S.PLANNER_PREDICTED_PREFILL_REPLICAS),
    _planner("dynamo_planner_predicted_num_decode_replicas", S.PLANNER_PREDICTED_DECODE_REPLICAS),
    _planner("dynamo_planner_observed_ttft_ms", S.PLANNER_OBSERVED_TTFT_S, MS_TO_S),
    _planner("dynamo_planner_observed_itl_ms", S.PLANNER_OBSERVED_ITL_S, MS_TO_S),
    _planner("dynamo_planner_estimated_ttft_ms", S.PLANNER_ESTIMATED_TTFT_S, MS_TO_S),
    _planner("dynamo_planner_estimated_itl_ms", S.PLANNER_ESTIMATED_ITL_S, MS_TO_S),
    _planner("dynamo_planner_observed_requests_per_second", S.PLANNER_OBSERVED_RPS),
    _planner("dynamo_planner_predicted_requests_per_second", S.PLANNER_PREDICTED_RPS),
    _planner("planner:num_p_workers", S.PLANNER_PREFILL_REPLICAS, note="before dynamo_planner_*"),
    _planner("planner:num_d_workers", S.PLANNER_DECODE_REPLICAS, note="before dynamo_planner_*"),
    _planner("planner:predicted_num_p", S.PLANNER_PREDICTED_PREFILL_REPLICAS,
             note="before dynamo_planner_*"),
    _planner("planner:predicted_num_d", S.PLANNER_PREDICTED_DECODE_REPLICAS,
             note="before dynamo_planner_*"),
    _planner("planner:observed_ttft", S.PLANNER_OBSERVED_TTFT_S, MS_TO_S, "ms"),
    _planner("planner:observed_itl", S.PLANNER_OBSERVED_ITL_S, MS_TO_S, "ms"),
    _planner("planner:observed_request_rate", S.PLANNER_OBSERVED_RPS),
    _planner("planner:predicted_request_rate", S.PLANNER_PREDICTED_RPS),
)

# LMCache (LMCache/LMCache lmcache/observability.py, PrometheusLogger; labels model_name,
# worker_id (the TP rank, not an instance: see RANK_WORKER_ID_ENGINES), role,
# served_model_name; prometheus_client counters get `_total`). In a P/D deployment with LMCache's
# connector the prefill side stores and the decode side retrieves.
LMCACHE: Final = (
    MetricSpec("lmcache:num_requested_tokens_total", S.LMCACHE_REQUESTED_TOKENS_TOTAL, C,
               "lmcache"),
    MetricSpec("lmcache:num_hit_tokens_total", S.LMCACHE_HIT_TOKENS_TOTAL, C, "lmcache"),
    MetricSpec("lmcache:num_stored_tokens_total", S.LMCACHE_STORED_TOKENS_TOTAL, C, "lmcache"),
    MetricSpec("lmcache:num_lookup_tokens_total", S.LMCACHE_LOOKUP_TOKENS_TOTAL, C, "lmcache"),
    MetricSpec("lmcache:num_lookup_hits_total", S.LMCACHE_LOOKUP_HITS_TOTAL, C, "lmcache"),
    MetricSpec("lmcache:retrieve_hit_rate", S.LMCACHE_RETRIEVE_HIT_RATIO, G, "lmcache",
               aggregate="mean"),
    MetricSpec("lmcache:cache_hit_rate", S.LMCACHE_RETRIEVE_HIT_RATIO, G, "lmcache",
               aggregate="mean", note="older name of retrieve_hit_rate"),
    MetricSpec("lmcache:lookup_hit_rate", S.LMCACHE_LOOKUP_HIT_RATIO, G, "lmcache",
               aggregate="mean"),
    MetricSpec("lmcache:time_to_retrieve", S.LMCACHE_RETRIEVE_S, H, "lmcache"),
    MetricSpec("lmcache:time_to_store", S.LMCACHE_STORE_S, H, "lmcache"),
    MetricSpec("lmcache:num_remote_read_bytes_total", S.LMCACHE_REMOTE_READ_BYTES_TOTAL, C,
               "lmcache"),
    MetricSpec("lmcache:num_remote_write_bytes_total", S.LMCACHE_REMOTE_WRITE_BYTES_TOTAL, C,
               "lmcache"),
)


def _stage(stage: str, signal: str) -> MetricSpec:
    return MetricSpec("sglang:per_stage_req_latency_seconds", signal, H, "sglang",
                      label_filter=(("stage", stage),))


# SGLang's per-stage request latency (python/sglang/srt/observability/metrics_collector.py,
# SchedulerMetricsCollector.per_stage_req_latency_seconds, label stage = RequestStage values of
# python/sglang/srt/managers/schedule_batch.py; observed in observability/req_time_stats.py).
# The P/D stages: prefill_bootstrap (bootstrap queue: handshake with decode, waiting for its
# memory), prefill_transfer_kv_cache (KV being sent), decode_prepare (prealloc queue),
# decode_bootstrap, decode_transferred (transfer queue: waiting for the KV), decode_waiting.
SGLANG_STAGES: Final = (
    _stage("prefill_waiting", S.STAGE_PREFILL_WAITING_S),
    _stage("prefill_forward", S.STAGE_PREFILL_FORWARD_S),
    _stage("prefill_bootstrap", S.STAGE_PREFILL_BOOTSTRAP_S),
    _stage("prefill_transfer_kv_cache", S.STAGE_PREFILL_KV_SEND_S),
    _stage("decode_prepare", S.STAGE_DECODE_PREALLOC_S),
    _stage("decode_bootstrap", S.STAGE_DECODE_BOOTSTRAP_S),
    _stage("decode_transferred", S.STAGE_DECODE_KV_WAIT_S),
    _stage("decode_waiting", S.STAGE_DECODE_WAITING_S),
)


# production-stack router's own per-backend series (vllm-project/production-stack
# src/vllm_router/services/metrics_service/__init__.py, set in routers/metrics_router.py from
# its request stats; label server="<backend URL>", which names the backend instance).
def _router(name: str, signal: str, kind: str = G, aggregate: Aggregation = "sum"
            ) -> MetricSpec:
    return MetricSpec(name, signal, kind, "vllm", aggregate=aggregate, instance_label="server",
                      note="production-stack router, its view of the backend")


ROUTER: Final = (
    _router("vllm:current_qps", S.ROUTER_QPS),
    _router("vllm:num_prefill_requests", S.ROUTER_PREFILL_REQUESTS),
    _router("vllm:num_decoding_requests", S.ROUTER_DECODING_REQUESTS),
    _router("vllm:avg_latency", S.ROUTER_AVG_LATENCY_S, aggregate="mean"),
    _router("vllm:avg_itl", S.ROUTER_AVG_ITL_S, aggregate="mean"),
    _router("vllm:healthy_pods_total", S.ROUTER_BACKEND_HEALTHY, aggregate="max"),
    _router("vllm:request_errors_total", S.ROUTER_ERRORS_TOTAL, C),
    _router("vllm:request_latency_seconds", S.ROUTER_LATENCY_S, H),
)

# llm-d inference scheduler (EPP) routing decisions (llm-d/llm-d-inference-scheduler
# docs/metrics.md, pkg/metrics/metrics.go; subsystem llm_d_inference_scheduler, labels
# model_name, decision_type). A deployment number: the scheduler decides for the whole pool.
_SPLIT: Final = "prefill-decode|encode-prefill-decode"
LLM_D: Final = (
    MetricSpec("llm_d_inference_scheduler_disagg_decision_total", S.DISAGG_DECISIONS_TOTAL, C,
               "llm-d", scope="deployment"),
    MetricSpec("llm_d_inference_scheduler_disagg_decision_total", S.DISAGG_SPLIT_DECISIONS_TOTAL,
               C, "llm-d", scope="deployment", label_filter=(("decision_type", _SPLIT),)),
    MetricSpec("llm_d_inference_scheduler_pd_decision_total", S.DISAGG_DECISIONS_TOTAL, C,
               "llm-d", scope="deployment", note="deprecated for disagg_decision_total"),
    MetricSpec("llm_d_inference_scheduler_pd_decision_total", S.DISAGG_SPLIT_DECISIONS_TOTAL, C,
               "llm-d", scope="deployment", label_filter=(("decision_type", _SPLIT),),
               note="deprecated for disagg_decision_total"),
)
