"""Map real exposed metric names (vLLM, SGLang, Dynamo, node_exporter, Mooncake) to signals.

Names are the engines' own, including renamed and older ones (docs/inputs/metrics.md). Lookup
keys are normalised with ``:`` rewritten to ``_`` because some pipelines rewrite it; both
spellings therefore match. Histograms are keyed by family name (without ``_bucket``/``_sum``/
``_count``); counters by the exposed name (with ``_total``).

Both the offline OpenMetrics reader and the live Prometheus collector use this table, so the two
paths fill the same dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from pdprobe import signals as S

Engine = Literal["vllm", "sglang", "dynamo", "trtllm", "node", "mooncake", "rdma-exporter",
                 "nixl", "lmcache", "llm-d", "custom"]  # custom: names from a --metrics-map file
Aggregation = Literal["sum", "max", "mean"]
# instance: one engine instance's number; network: a node's port; deployment: a number about the
# whole deployment (a planner's replica counts, a scheduler's decisions), the `deployment` table.
Scope = Literal["instance", "network", "deployment"]


@dataclass(frozen=True)
class MetricSpec:
    """How one exposed metric becomes one signal."""

    name: str  # exposed name as the reference spells it (with ':')
    signal: str
    kind: str  # signals.GAUGE | COUNTER | "histogram"
    engine: Engine
    scale: float = 1.0  # multiply values (and `le` bounds) by this to reach base units
    label_filter: tuple[tuple[str, str], ...] = ()  # only series whose labels match
    aggregate: Aggregation = "sum"  # combining sub-series (engine=, dp_rank=, ...) of an instance
    scope: Scope = "instance"
    instance_label: str | None = None  # label naming the instance when not `instance`
    counter_bits: int | None = None  # 32 for mlx5 Q-counters that wrap at 2**32
    note: str = ""
    aliases: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        return normalise_name(self.name)


def normalise_name(name: str) -> str:
    """``vllm:num_requests_running`` and ``vllm_num_requests_running`` give the same key."""
    return name.replace(":", "_")


H = "histogram"
G = S.GAUGE
C = S.COUNTER
MS_TO_S = 1e-3
US_TO_S = 1e-6
MIB = float(2**20)
GIB = float(2**30)

_VLLM: Final = (
    MetricSpec("vllm:num_requests_running", S.REQUESTS_RUNNING, G, "vllm"),
    MetricSpec("vllm:num_requests_waiting", S.REQUESTS_WAITING, G, "vllm"),
    MetricSpec(
        "vllm:num_requests_waiting_by_reason", S.REQUESTS_DEFERRED, G, "vllm",
        label_filter=(("reason", "deferred"),),
    ),
    MetricSpec("vllm:num_requests_kv_fetch_by_stage", S.KV_FETCH_WAITING, G, "vllm",
               note="decode side only; summed over stages"),
    MetricSpec("vllm:kv_cache_usage_perc", S.KV_USAGE_RATIO, G, "vllm", aggregate="mean"),
    MetricSpec("vllm:gpu_cache_usage_perc", S.KV_USAGE_RATIO, G, "vllm", aggregate="mean",
               note="before 0.14 (deprecated 0.9.2)"),
    MetricSpec("vllm:gpu_prefix_cache_hit_rate", S.PREFIX_HIT_RATIO, G, "vllm", aggregate="mean",
               note="V0 only"),
    MetricSpec("vllm:avg_prompt_throughput_toks_per_s", S.PROMPT_THROUGHPUT_TPS, G, "vllm",
               note="V0 only"),
    MetricSpec("vllm:avg_generation_throughput_toks_per_s", S.GENERATION_THROUGHPUT_TPS, G,
               "vllm", note="V0 only"),
    MetricSpec("vllm:prefix_cache_queries_total", S.PREFIX_QUERIES_TOTAL, C, "vllm"),
    MetricSpec("vllm:prefix_cache_hits_total", S.PREFIX_HITS_TOTAL, C, "vllm"),
    MetricSpec("vllm:gpu_prefix_cache_queries_total", S.PREFIX_QUERIES_TOTAL, C, "vllm",
               note="before 0.14; early 0.8.0 counted blocks"),
    MetricSpec("vllm:gpu_prefix_cache_hits_total", S.PREFIX_HITS_TOTAL, C, "vllm",
               note="before 0.14"),
    MetricSpec("vllm:external_prefix_cache_queries_total", S.EXTERNAL_QUERIES_TOTAL, C, "vllm"),
    MetricSpec("vllm:external_prefix_cache_hits_total", S.EXTERNAL_HITS_TOTAL, C, "vllm"),
    MetricSpec("vllm:num_preemptions_total", S.PREEMPTIONS_TOTAL, C, "vllm"),
    MetricSpec("vllm:prompt_tokens_total", S.PROMPT_TOKENS_TOTAL, C, "vllm"),
    MetricSpec("vllm:generation_tokens_total", S.GENERATION_TOKENS_TOTAL, C, "vllm"),
    MetricSpec("vllm:prompt_tokens_cached_total", S.CACHED_TOKENS_TOTAL, C, "vllm"),
    MetricSpec(
        "vllm:prompt_tokens_by_source_total", S.KV_RECEIVED_TOKENS_TOTAL, C, "vllm",
        label_filter=(("source", "external_kv_transfer"),),
    ),
    MetricSpec("vllm:request_success_total", S.REQUESTS_FINISHED_TOTAL, C, "vllm"),
    MetricSpec(
        "vllm:request_success_total", S.REQUESTS_FAILED_TOTAL, C, "vllm",
        label_filter=(("finished_reason", "abort|error"),),
    ),
    MetricSpec("vllm:time_to_first_token_seconds", S.TTFT_S, H, "vllm"),
    MetricSpec("vllm:inter_token_latency_seconds", S.ITL_S, H, "vllm"),
    MetricSpec("vllm:time_per_output_token_seconds", S.ITL_S, H, "vllm",
               note="before 0.33 (deprecated 0.11)"),
    MetricSpec("vllm:request_time_per_output_token_seconds", S.TPOT_S, H, "vllm"),
    MetricSpec("vllm:e2e_request_latency_seconds", S.E2E_S, H, "vllm"),
    MetricSpec("vllm:request_queue_time_seconds", S.QUEUE_S, H, "vllm"),
    MetricSpec("vllm:request_prefill_time_seconds", S.PREFILL_S, H, "vllm"),
    MetricSpec("vllm:request_decode_time_seconds", S.DECODE_S, H, "vllm"),
    MetricSpec("vllm:request_prompt_tokens", S.PROMPT_TOKENS, H, "vllm"),
    MetricSpec("vllm:request_generation_tokens", S.OUTPUT_TOKENS, H, "vllm"),
    MetricSpec("vllm:request_prefill_kv_computed_tokens", S.PREFILL_COMPUTED_TOKENS, H, "vllm"),
    # KV connectors
    MetricSpec("vllm:nixl_xfer_time_seconds", S.KV_TRANSFER_S, H, "vllm", note="0.14+"),
    MetricSpec("vllm:nixl_bytes_transferred", S.KV_TRANSFER_BYTES, H, "vllm", note="0.14+"),
    MetricSpec("vllm:nixl_num_failed_transfers_total", S.KV_TRANSFER_FAILURES_TOTAL, C, "vllm"),
    MetricSpec("vllm:nixl_num_kv_expired_reqs_total", S.KV_EXPIRED_TOTAL, C, "vllm"),
    MetricSpec("vllm:mooncake_xfer_time_seconds", S.KV_TRANSFER_S, H, "vllm",
               note="populated on prefill only (push-based)"),
    MetricSpec("vllm:mooncake_bytes_transferred", S.KV_TRANSFER_BYTES, H, "vllm"),
    MetricSpec("vllm:mooncake_num_failed_transfers_total", S.KV_TRANSFER_FAILURES_TOTAL, C,
               "vllm"),
    MetricSpec("vllm:mooncake_num_failed_recvs_total", S.KV_TRANSFER_FAILURES_TOTAL, C, "vllm"),
    MetricSpec("vllm:mooncake_num_kv_expired_reqs_total", S.KV_EXPIRED_TOTAL, C, "vllm"),
    # V0 (vllm/engine/metrics.py, removed with V0 in 0.10)
    MetricSpec("vllm:num_requests_swapped", S.REQUESTS_SWAPPED, G, "vllm", note="V0 only"),
    MetricSpec("vllm:cpu_cache_usage_perc", S.CPU_KV_USAGE_RATIO, G, "vllm", aggregate="mean",
               note="V0 only"),
)

_SGLANG: Final = (
    MetricSpec("sglang:num_running_reqs", S.REQUESTS_RUNNING, G, "sglang"),
    MetricSpec("sglang:num_queue_reqs", S.REQUESTS_WAITING, G, "sglang"),
    MetricSpec("sglang:num_requests_running", S.REQUESTS_RUNNING, G, "sglang", note="<=0.3.x"),
    MetricSpec("sglang:num_requests_waiting", S.REQUESTS_WAITING, G, "sglang", note="<=0.3.x"),
    MetricSpec("sglang:token_usage", S.KV_USAGE_RATIO, G, "sglang", aggregate="mean"),
    MetricSpec("sglang:num_used_tokens", S.KV_USED_TOKENS, G, "sglang"),
    MetricSpec("sglang:decode_sum_seq_lens", S.DECODE_CONTEXT_TOKENS, G, "sglang"),
    MetricSpec("sglang:cache_hit_rate", S.PREFIX_HIT_RATIO, G, "sglang", aggregate="mean",
               note="last prefill report, not windowed"),
    MetricSpec("sglang:gen_throughput", S.GENERATION_THROUGHPUT_TPS, G, "sglang"),
    MetricSpec("sglang:num_prefill_bootstrap_queue_reqs", S.PREFILL_BOOTSTRAP_QUEUE, G, "sglang",
               note="0.5.23+"),
    MetricSpec("sglang:num_prefill_prealloc_queue_reqs", S.PREFILL_BOOTSTRAP_QUEUE, G, "sglang",
               note="<=0.5.10 name of the bootstrap queue"),
    MetricSpec("sglang:num_prefill_inflight_queue_reqs", S.PREFILL_INFLIGHT_QUEUE, G, "sglang"),
    MetricSpec("sglang:num_prefill_infight_queue_reqs", S.PREFILL_INFLIGHT_QUEUE, G, "sglang",
               note="0.4.x typo"),
    MetricSpec("sglang:num_decode_prealloc_queue_reqs", S.DECODE_PREALLOC_QUEUE, G, "sglang"),
    MetricSpec("sglang:num_decode_transfer_queue_reqs", S.DECODE_TRANSFER_QUEUE, G, "sglang"),
    MetricSpec("sglang:num_retracted_reqs", S.REQUESTS_RETRACTED, G, "sglang"),
    MetricSpec("sglang:kv_transfer_latency_ms", S.KV_TRANSFER_S, H, "sglang", scale=MS_TO_S,
               note="histogram from 0.5.10; a gauge in <=0.5.3 (see gauge entry)"),
    MetricSpec("sglang:kv_transfer_speed_gb_s", S.KV_TRANSFER_BYTES_PER_S, H, "sglang",
               scale=GIB, note="GiB/s; histogram from 0.5.10"),
    MetricSpec("sglang:kv_transfer_total_mb", S.KV_TRANSFER_BYTES, H, "sglang", scale=MIB),
    MetricSpec("sglang:prompt_tokens_total", S.PROMPT_TOKENS_TOTAL, C, "sglang"),
    MetricSpec("sglang:generation_tokens_total", S.GENERATION_TOKENS_TOTAL, C, "sglang"),
    MetricSpec("sglang:num_requests_total", S.REQUESTS_FINISHED_TOTAL, C, "sglang"),
    MetricSpec("sglang:num_aborted_requests_total", S.REQUESTS_FAILED_TOTAL, C, "sglang"),
    MetricSpec("sglang:cached_tokens_total", S.CACHED_TOKENS_TOTAL, C, "sglang"),
    MetricSpec("sglang:num_transfer_failed_reqs_total", S.KV_TRANSFER_FAILURES_TOTAL, C,
               "sglang"),
    MetricSpec("sglang:num_bootstrap_failed_reqs_total", S.KV_TRANSFER_FAILURES_TOTAL, C,
               "sglang"),
    MetricSpec("sglang:num_retracted_requests_total", S.PREEMPTIONS_TOTAL, C, "sglang"),
    MetricSpec("sglang:time_to_first_token_seconds", S.TTFT_S, H, "sglang"),
    MetricSpec("sglang:inter_token_latency_seconds", S.ITL_S, H, "sglang"),
    MetricSpec("sglang:request_time_per_output_token_seconds", S.TPOT_S, H, "sglang"),
    MetricSpec("sglang:e2e_request_latency_seconds", S.E2E_S, H, "sglang"),
    MetricSpec("sglang:queue_time_seconds", S.QUEUE_S, H, "sglang"),
    MetricSpec("sglang:prompt_tokens_histogram", S.PROMPT_TOKENS, H, "sglang"),
    MetricSpec("sglang:generation_tokens_histogram", S.OUTPUT_TOKENS, H, "sglang"),
)

# SGLang <=0.5.3 exposed these two as gauges under the same names as the later histograms;
# the reader picks this entry when the family's TYPE is gauge.
SGLANG_GAUGE_VARIANTS: Final = {
    normalise_name("sglang:kv_transfer_latency_ms"): MetricSpec(
        "sglang:kv_transfer_latency_ms", S.KV_TRANSFER_LATENCY_S_GAUGE, G, "sglang",
        scale=MS_TO_S, aggregate="mean", note="gauge in <=0.5.3"),
    normalise_name("sglang:kv_transfer_speed_gb_s"): MetricSpec(
        "sglang:kv_transfer_speed_gb_s", S.KV_TRANSFER_SPEED_GAUGE, G, "sglang", scale=GIB,
        aggregate="mean", note="gauge in <=0.5.3"),
}

_DYNAMO: Final = (
    MetricSpec("dynamo_frontend_requests_total", S.REQUESTS_FINISHED_TOTAL, C, "dynamo"),
    MetricSpec("dynamo_frontend_requests_total", S.REQUESTS_FAILED_TOTAL, C, "dynamo",
               label_filter=(("status", "error"),)),
    MetricSpec("dynamo_frontend_requests_started_total", S.REQUESTS_STARTED_TOTAL, C, "dynamo"),
    MetricSpec("dynamo_frontend_queued_requests", S.REQUESTS_WAITING, G, "dynamo"),
    MetricSpec("dynamo_frontend_active_requests", S.REQUESTS_RUNNING, G, "dynamo"),
    MetricSpec("dynamo_frontend_inflight_requests", S.REQUESTS_RUNNING, G, "dynamo",
               note="deprecated alias of active_requests"),
    MetricSpec("dynamo_frontend_time_to_first_token_seconds", S.TTFT_S, H, "dynamo"),
    MetricSpec("dynamo_frontend_inter_token_latency_seconds", S.ITL_S, H, "dynamo"),
    MetricSpec("dynamo_frontend_request_duration_seconds", S.E2E_S, H, "dynamo"),
    MetricSpec("dynamo_frontend_input_sequence_tokens", S.PROMPT_TOKENS, H, "dynamo"),
    MetricSpec("dynamo_frontend_output_sequence_tokens", S.OUTPUT_TOKENS, H, "dynamo"),
    MetricSpec("dynamo_frontend_output_tokens_total", S.GENERATION_TOKENS_TOTAL, C, "dynamo"),
    MetricSpec("dynamo_frontend_worker_last_time_to_first_token_seconds", S.TTFT_LAST_S, G,
               "dynamo", instance_label="worker_id", aggregate="mean"),
    MetricSpec("dynamo_frontend_worker_last_inter_token_latency_seconds", S.ITL_LAST_S, G,
               "dynamo", instance_label="worker_id", aggregate="mean"),
    MetricSpec("dynamo_frontend_worker_active_decode_blocks", S.ACTIVE_DECODE_BLOCKS, G,
               "dynamo", instance_label="worker_id"),
    MetricSpec("dynamo_frontend_worker_active_prefill_tokens", S.ACTIVE_PREFILL_TOKENS, G,
               "dynamo", instance_label="worker_id"),
    MetricSpec("dynamo_component_gpu_cache_usage_percent", S.KV_USAGE_RATIO, G, "dynamo",
               aggregate="mean", note="1.6.1"),
    MetricSpec("dynamo_component_kv_cache_hit_rate", S.PREFIX_HIT_RATIO, G, "dynamo",
               aggregate="mean", note="1.6.1"),
    MetricSpec("dynamo_component_kvstats_gpu_cache_usage_percent", S.KV_USAGE_RATIO, G,
               "dynamo", aggregate="mean", note="<=0.6 / early 1.x"),
    MetricSpec("dynamo_component_kvstats_gpu_prefix_cache_hit_rate", S.PREFIX_HIT_RATIO, G,
               "dynamo", aggregate="mean", note="<=0.6 / early 1.x"),
    MetricSpec("dynamo_component_inflight_requests", S.REQUESTS_RUNNING, G, "dynamo"),
    MetricSpec("dynamo_component_requests_total", S.REQUESTS_FINISHED_TOTAL, C, "dynamo"),
    # Work-handler request time of a worker (lib/runtime metrics; docs/observability/
    # metrics_examples/*.log, dynamo_component="tensorrt_llm"|"backend"|"prefill", endpoint=)
    MetricSpec("dynamo_component_request_duration_seconds", S.WORKER_REQUEST_S, H, "dynamo"),
    # KV stats blocks of a worker (lib/llm kv_router publisher; metrics_examples/vllm.log,
    # dynamo_component="backend", dynamo_namespace=; the 1.x names carry worker_id, dp_rank).
    MetricSpec("dynamo_component_kvstats_active_blocks", S.KV_ACTIVE_BLOCKS, G, "dynamo"),
    MetricSpec("dynamo_component_kvstats_total_blocks", S.KV_TOTAL_BLOCKS, G, "dynamo"),
    MetricSpec("dynamo_component_total_blocks", S.KV_TOTAL_BLOCKS, G, "dynamo", note="1.x"),
    # NATS service timings of a component (docs/observability/metrics.md, "NATS"; labels
    # dynamo_component, dynamo_namespace, service_name). All four are typed gauge; the three
    # `_total` ones are cumulative since the worker started and read as counters.
    MetricSpec("dynamo_component_nats_service_requests_total", S.NATS_REQUESTS_TOTAL, C,
               "dynamo", note="typed gauge, cumulative"),
    MetricSpec("dynamo_component_nats_service_errors_total", S.NATS_ERRORS_TOTAL, C, "dynamo",
               note="typed gauge, cumulative"),
    MetricSpec("dynamo_component_nats_service_processing_ms_total", S.NATS_PROCESSING_S_TOTAL,
               C, "dynamo", scale=MS_TO_S, note="typed gauge, cumulative, ms"),
    MetricSpec("dynamo_component_nats_service_processing_ms_avg", S.NATS_PROCESSING_AVG_S, G,
               "dynamo", scale=MS_TO_S, aggregate="mean", note="ms"),
    # The frontend's per-model worker configuration (metrics_examples/fe.log, labels model):
    # the same for every worker of the model, so a deployment number.
    MetricSpec("dynamo_frontend_model_total_kv_blocks", S.MODEL_KV_BLOCKS_PER_WORKER, G,
               "dynamo", aggregate="max", scope="deployment"),
    MetricSpec("dynamo_frontend_model_kv_cache_block_size", S.MODEL_KV_BLOCK_SIZE_TOKENS, G,
               "dynamo", aggregate="max", scope="deployment"),
    # TensorRT-LLM under Dynamo
    MetricSpec("trtllm_kv_transfer_latency_seconds", S.KV_TRANSFER_S, H, "trtllm"),
    MetricSpec("trtllm_kv_transfer_bytes", S.KV_TRANSFER_BYTES, H, "trtllm"),
    MetricSpec("trtllm_kv_transfer_success_total", S.KV_TRANSFERS_TOTAL, C, "trtllm"),
)

# TensorRT-LLM's own server metrics (NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py,
# MetricsCollector; labels model_name, engine_type="trtllm", finished_reason on the success
# counter, http_code on the error counter; seconds, ratios 0-1). Exposed by `trtllm-serve` and by
# Dynamo's TRT-LLM worker (ai-dynamo/dynamo docs/observability/metrics_examples/trtllm.log).
_TRTLLM: Final = (
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
_NIXL: Final = (
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

_MOONCAKE: Final = (
    MetricSpec("tent_write_bytes_total", S.KV_RDMA_BYTES_TOTAL, C, "mooncake",
               label_filter=(("transport", "rdma"),)),
    MetricSpec("tent_read_bytes_total", S.KV_RDMA_BYTES_TOTAL, C, "mooncake",
               label_filter=(("transport", "rdma"),)),
    MetricSpec("tent_write_bytes_total", S.KV_TCP_BYTES_TOTAL, C, "mooncake",
               label_filter=(("transport", "tcp"),)),
    MetricSpec("tent_read_bytes_total", S.KV_TCP_BYTES_TOTAL, C, "mooncake",
               label_filter=(("transport", "tcp"),)),
    MetricSpec("tent_write_failures_total", S.KV_TRANSFER_FAILURES_TOTAL, C, "mooncake"),
    MetricSpec("tent_read_failures_total", S.KV_TRANSFER_FAILURES_TOTAL, C, "mooncake"),
    MetricSpec("tent_write_latency_us", S.KV_TRANSFER_S, H, "mooncake", scale=US_TO_S),
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


_PLANNER: Final = (
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
_LMCACHE: Final = (
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
_SGLANG_STAGES: Final = (
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


_ROUTER: Final = (
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
_LLM_D: Final = (
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


def _ib(name: str, signal: str, kind: str = C, bits: int | None = None) -> MetricSpec:
    return MetricSpec(f"node_infiniband_{name}", signal, kind, "node", scope="network",
                      counter_bits=bits)


# mlx5 Q-counters (retransmission group, out_of_sequence, out_of_buffer) are read as 32-bit.
_NODE: Final = (
    _ib("rate_bytes_per_second", S.LINK_RATE_BYTES_PER_S, G),
    _ib("state_id", S.PORT_STATE, G),
    _ib("port_data_transmitted_bytes_total", S.RDMA_TX_BYTES_TOTAL),
    _ib("port_data_received_bytes_total", S.RDMA_RX_BYTES_TOTAL),
    _ib("port_packets_transmitted_total", S.RDMA_TX_PACKETS_TOTAL),
    _ib("port_packets_received_total", S.RDMA_RX_PACKETS_TOTAL),
    _ib("out_of_sequence_packets_received_total", S.RDMA_OUT_OF_SEQUENCE_TOTAL, bits=32),
    _ib("duplicate_requests_packets_total", S.RDMA_DUPLICATE_REQUESTS_TOTAL, bits=32),
    _ib("packet_sequence_errors_total", S.RDMA_PACKET_SEQ_ERRORS_TOTAL, bits=32),
    _ib("implied_nak_seq_errors_total", S.RDMA_IMPLIED_NAK_TOTAL, bits=32),
    _ib("local_ack_timeout_errors_total", S.RDMA_LOCAL_ACK_TIMEOUTS_TOTAL, bits=32),
    _ib("rnr_nak_retry_packets_received_total", S.RDMA_RNR_NAK_TOTAL, bits=32),
    _ib("out_of_buffer_drops_total", S.RDMA_OUT_OF_BUFFER_TOTAL, bits=32),
    _ib("roce_adp_retransmits_total", S.RDMA_ADP_RETRANS_TOTAL),
    _ib("roce_adp_retransmits_timeout_total", S.RDMA_ADP_RETRANS_TIMEOUTS_TOTAL),
    _ib("rp_cnp_packets_handled_total", S.RDMA_CNP_HANDLED_TOTAL),
    _ib("np_cnp_packets_sent_total", S.RDMA_CNP_SENT_TOTAL),
    _ib("np_ecn_marked_roce_packets_received_total", S.RDMA_ECN_MARKED_TOTAL),
    _ib("link_downed_total", S.RDMA_LINK_DOWNED_TOTAL),
    _ib("port_transmit_wait_total", S.RDMA_PORT_XMIT_WAIT_TOTAL),
    _ib("port_errors_received_total", S.RDMA_PORT_ERRORS_TOTAL),
    MetricSpec("node_network_transmit_bytes_total", S.NODE_TCP_TX_BYTES_TOTAL, C, "node",
               scope="network"),
    MetricSpec("node_network_receive_bytes_total", S.NODE_TCP_RX_BYTES_TOTAL, C, "node",
               scope="network"),
)


def _spiderpool(counter: str, signal: str, bits: int | None = None) -> tuple[MetricSpec, ...]:
    """spiderpool exports ``rdma_<hw_counter>``; the ``_total`` suffix is unverified, take both."""
    return tuple(
        MetricSpec(f"rdma_{counter}{suffix}", signal, C, "rdma-exporter", scope="network",
                   counter_bits=bits)
        for suffix in ("", "_total")
    )


_RDMA_EXPORTERS: Final = (
    *_spiderpool("out_of_sequence", S.RDMA_OUT_OF_SEQUENCE_TOTAL, 32),
    *_spiderpool("duplicate_request", S.RDMA_DUPLICATE_REQUESTS_TOTAL, 32),
    *_spiderpool("packet_seq_err", S.RDMA_PACKET_SEQ_ERRORS_TOTAL, 32),
    *_spiderpool("implied_nak_seq_err", S.RDMA_IMPLIED_NAK_TOTAL, 32),
    *_spiderpool("local_ack_timeout_err", S.RDMA_LOCAL_ACK_TIMEOUTS_TOTAL, 32),
    *_spiderpool("roce_adp_retrans", S.RDMA_ADP_RETRANS_TOTAL),
    *_spiderpool("roce_adp_retrans_to", S.RDMA_ADP_RETRANS_TIMEOUTS_TOTAL),
    *_spiderpool("rp_cnp_handled", S.RDMA_CNP_HANDLED_TOTAL),
    *_spiderpool("np_cnp_sent", S.RDMA_CNP_SENT_TOTAL),
    *_spiderpool("np_ecn_marked_roce_packets", S.RDMA_ECN_MARKED_TOTAL),
    *_spiderpool("tx_vport_rdma_unicast_bytes", S.RDMA_TX_BYTES_TOTAL),
    *_spiderpool("rx_vport_rdma_unicast_bytes", S.RDMA_RX_BYTES_TOTAL),
)

ALL_SPECS: Final[tuple[MetricSpec, ...]] = (
    *_VLLM, *_SGLANG, *_DYNAMO, *_TRTLLM, *_NIXL, *_MOONCAKE, *_NODE, *_RDMA_EXPORTERS,
    *_PLANNER, *_LMCACHE, *_SGLANG_STAGES, *_ROUTER, *_LLM_D,
)


# Renamed metrics that servers expose under both names during a deprecation period (vLLM
# 0.9.2-0.11 shows gpu_* and time_per_output_token_* beside their successors; Dynamo workers may
# publish kvstats_* and the 1.x names). Both feed the same signal, so when an instance exposes
# the new name the old one is dropped instead of being added to it.
SUPERSEDED_BY: Final = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "vllm:gpu_prefix_cache_queries_total": "vllm:prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total": "vllm:prefix_cache_hits_total",
    "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",
    "sglang:num_requests_running": "sglang:num_running_reqs",
    "sglang:num_requests_waiting": "sglang:num_queue_reqs",
    "sglang:num_prefill_prealloc_queue_reqs": "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_infight_queue_reqs": "sglang:num_prefill_inflight_queue_reqs",
    "dynamo_component_kvstats_gpu_cache_usage_percent":
        "dynamo_component_gpu_cache_usage_percent",
    "dynamo_component_kvstats_gpu_prefix_cache_hit_rate": "dynamo_component_kv_cache_hit_rate",
    "dynamo_frontend_inflight_requests": "dynamo_frontend_active_requests",
    "dynamo_component_kvstats_total_blocks": "dynamo_component_total_blocks",
    "lmcache:cache_hit_rate": "lmcache:retrieve_hit_rate",
    "llm_d_inference_scheduler_pd_decision_total":
        "llm_d_inference_scheduler_disagg_decision_total",
    "planner:num_p_workers": "dynamo_planner_num_prefill_replicas",
    "planner:num_d_workers": "dynamo_planner_num_decode_replicas",
    "planner:predicted_num_p": "dynamo_planner_predicted_num_prefill_replicas",
    "planner:predicted_num_d": "dynamo_planner_predicted_num_decode_replicas",
}


def _index(specs: tuple[MetricSpec, ...]) -> dict[str, tuple[MetricSpec, ...]]:
    out: dict[str, list[MetricSpec]] = {}
    for spec in specs:
        out.setdefault(spec.key, []).append(spec)
    return {k: tuple(v) for k, v in out.items()}


SPECS_BY_KEY: Final[dict[str, tuple[MetricSpec, ...]]] = _index(ALL_SPECS)

# Labels that name an instance's role (checked in this order) and the values they take.
ROLE_LABELS: Final = ("role", "engine_type", "worker_type", "disaggregation_mode",
                      "dynamo_component", "component")
PREFILL_VALUES: Final = frozenset({"prefill", "p", "producer", "kv_producer", "context", "ctx"})
DECODE_VALUES: Final = frozenset({"decode", "d", "consumer", "kv_consumer", "generation", "gen"})
# Labels that name an instance (first present wins) when the spec does not say otherwise and
# no backend label (below) carries an address. `kubernetes_pod_name` is the pod label of
# Prometheus' own example Kubernetes scrape config.
INSTANCE_LABELS: Final = ("instance", "pod", "pod_name", "kubernetes_pod_name", "worker_id",
                          "hostname", "job")
# Engines whose `worker_id` label is a rank inside one engine (LMCache: the TP rank), not an
# instance: it never names one.
RANK_WORKER_ID_ENGINES: Final = frozenset({"lmcache"})
# Labels that name the deployment of a deployment-scope series (first present wins): Dynamo's
# namespace, then the Kubernetes namespace Prometheus adds; none: "" (one deployment per input).
DEPLOYMENT_LABELS: Final = ("dynamo_namespace", "namespace", "kubernetes_namespace")
# Of those, the ones whose value is a Kubernetes pod name (two namespaces may reuse one).
POD_LABELS: Final = ("pod", "pod_name", "kubernetes_pod_name")
# Labels giving the namespace of `pod` (kube-prometheus; Prometheus' example config).
NAMESPACE_LABELS: Final = ("namespace", "kubernetes_namespace")


@dataclass(frozen=True)
class BackendLabel:
    """A label by which a router or gateway says which engine (backend) a series is about.

    A router's ``/metrics`` carries one series per backend; Prometheus adds the router's own
    ``instance``. A series with one of these labels whose value is an address or URL belongs to
    the backend the label names, never to the router (``pdprobe/collectors/metric_names.py``).
    """

    label: str
    writer: str  # who writes it
    upstream: str  # the file that writes it, for the docs and tests


BACKEND_LABELS: Final = (
    BackendLabel("server", "vLLM production-stack router (server=\"http://<pod ip>:<port>\")",
                 "vllm-project/production-stack src/vllm_router/services/metrics_service/"
                 "__init__.py, src/vllm_router/routers/metrics_router.py"),
    BackendLabel("worker_addr", "SGLang model gateway /engine_metrics (each engine's /metrics "
                 "with worker_addr=\"<worker url>\" added)",
                 "lightseekorg/smg model_gateway/src/core/worker_manager.rs (get_engine_metrics),"
                 " model_gateway/src/core/metrics_aggregator.rs"),
    BackendLabel("worker", "SGLang router (sgl_router_worker_load{worker}, ...) and SGLang "
                 "model gateway (smg_worker_requests_active{worker}, ...)",
                 "sgl-project/sglang sgl-router/src/metrics.rs; lightseekorg/smg "
                 "docs/reference/metrics.md"),
    BackendLabel("worker_url", "SGLang router forks (sgl_router_worker_requests_total"
                 "{worker_url})", ""),
    BackendLabel("endpoint", "generic proxies (prometheus-operator's endpoint= is a port name "
                 "and is not an address, so it never matches)", ""),
    BackendLabel("backend", "generic proxies", ""),
    BackendLabel("upstream", "generic proxies", ""),
)
BACKEND_LABEL_NAMES: Final = tuple(b.label for b in BACKEND_LABELS)


@dataclass(frozen=True)
class RouterSeries:
    """A router's re-export, under an engine metric name, of a number about one backend."""

    name: str  # exposed name (an engine's name from the specs above)
    label: str  # the backend label it carries
    read: bool  # True: the engine's own number, read into the backend's signal
    why: str


# production-stack's router re-exports five vLLM names with `server=` (metrics_router.py).
# Only the two counters it copies from the engine's own /metrics are the engine's numbers.
# Everything carrying SGLang's gateway `worker_addr=` is the engine's exposition passed through
# verbatim and is read as the engine's.
ROUTER_SERIES: Final = (
    RouterSeries("vllm:num_requests_running", "server", False,
                 "the router's count of requests it has in flight to the backend (prefill + "
                 "decoding in its request stats), not the engine's scheduler gauge"),
    RouterSeries("vllm:num_requests_waiting", "server", False,
                 "declared by the router but never set; it would be the router's number"),
    RouterSeries("vllm:gpu_prefix_cache_hit_rate", "server", False,
                 "copied from a V0-only engine gauge; the router writes 0 when the engine does "
                 "not expose it, which would read as a real 0% hit rate"),
    RouterSeries("vllm:gpu_prefix_cache_hits_total", "server", True,
                 "copied from the engine's own counter by the router's engine_stats scraper "
                 "(exported as a gauge, cumulative)"),
    RouterSeries("vllm:gpu_prefix_cache_queries_total", "server", True,
                 "copied from the engine's own counter by the router's engine_stats scraper "
                 "(exported as a gauge, cumulative)"),
    RouterSeries("vllm:num_requests_swapped", "server", False,
                 "the router's own request stats (num_swapped_requests), not the V0 engine "
                 "gauge of the same name"),
)
# (catalog key, backend label) of router series that are the router's own view: not read.
ROUTER_OWN_VIEW: Final = frozenset((normalise_name(r.name), r.label) for r in ROUTER_SERIES
                                   if not r.read)


def lookup(name: str, type_hint: str | None = None) -> tuple[MetricSpec, ...]:
    """Specs for an exposed metric or histogram family name; empty when pdprobe ignores it.

    ``type_hint`` is the ``# TYPE`` of the family when known; it disambiguates SGLang's
    kv_transfer gauges (<=0.5.3) from the later histograms of the same name.
    """
    key = normalise_name(name)
    if type_hint == "gauge" and key in SGLANG_GAUGE_VARIANTS:
        return (SGLANG_GAUGE_VARIANTS[key],)
    return SPECS_BY_KEY.get(key, ())


def engine_of(name: str) -> str | None:
    key = normalise_name(name)
    for prefix, engine in (("vllm_", "vllm"), ("sglang_", "sglang"), ("dynamo_", "dynamo"),
                           ("trtllm_", "trtllm"), ("node_", "node"), ("tent_", "mooncake"),
                           ("agent_", "nixl"), ("lmcache_", "lmcache"),
                           ("llm_d_", "llm-d"), ("planner_", "dynamo")):
        if key.startswith(prefix):
            return engine
    return None
