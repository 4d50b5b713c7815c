"""Map real exposed metric names (vLLM, SGLang, Dynamo, node_exporter, Mooncake) to signals.

Names are the engines' own, including renamed and older ones (docs/inputs/metrics.md). Lookup
keys are normalised with ``:`` rewritten to ``_`` because some pipelines rewrite it; both
spellings therefore match. Histograms are keyed by family name (without ``_bucket``/``_sum``/
``_count``); counters by the exposed name (with ``_total``).

Both the offline OpenMetrics reader and the live Prometheus collector use this table, so the two
paths fill the same dataset. ``MetricSpec`` lives in ``metric_spec``; the families of TensorRT-LLM,
NIXL telemetry, the Dynamo planner, LMCache, SGLang's per-stage latency, production-stack's router
and llm-d in ``metric_families`` (all are part of ``ALL_SPECS``). Labels (role, instance, backend,
router series) live in ``metric_labels`` and are re-exported here.
"""

from __future__ import annotations

from typing import Final

from pdprobe import signals as S
from pdprobe.collectors.metric_families import (
    LLM_D,
    LMCACHE,
    NIXL,
    PLANNER,
    ROUTER,
    SGLANG_STAGES,
    TRTLLM,
)
from pdprobe.collectors.metric_labels import BACKEND_LABEL_NAMES as BACKEND_LABEL_NAMES
from pdprobe.collectors.metric_labels import BACKEND_LABELS as BACKEND_LABELS
from pdprobe.collectors.metric_labels import DECODE_VALUES as DECODE_VALUES
from pdprobe.collectors.metric_labels import DEPLOYMENT_LABELS as DEPLOYMENT_LABELS
from pdprobe.collectors.metric_labels import INSTANCE_LABELS as INSTANCE_LABELS
from pdprobe.collectors.metric_labels import NAMESPACE_LABELS as NAMESPACE_LABELS
from pdprobe.collectors.metric_labels import POD_LABELS as POD_LABELS
from pdprobe.collectors.metric_labels import PREFILL_VALUES as PREFILL_VALUES
from pdprobe.collectors.metric_labels import RANK_WORKER_ID_ENGINES as RANK_WORKER_ID_ENGINES
from pdprobe.collectors.metric_labels import ROLE_LABELS as ROLE_LABELS
from pdprobe.collectors.metric_labels import ROUTER_OWN_VIEW as ROUTER_OWN_VIEW
from pdprobe.collectors.metric_labels import ROUTER_SERIES as ROUTER_SERIES
from pdprobe.collectors.metric_labels import BackendLabel as BackendLabel
from pdprobe.collectors.metric_labels import RouterSeries as RouterSeries
from pdprobe.collectors.metric_spec import (
    GIB,
    MIB,
    MS_TO_S,
    US_TO_S,
    C,
    G,
    H,
    MetricSpec,
    normalise_name,
)
from pdprobe.collectors.metric_spec import Aggregation as Aggregation  # re-exported
from pdprobe.collectors.metric_spec import Engine as Engine  # re-exported
from pdprobe.collectors.metric_spec import Scope as Scope  # re-exported

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
    *_VLLM, *_SGLANG, *_DYNAMO, *TRTLLM, *NIXL, *_MOONCAKE, *_NODE, *_RDMA_EXPORTERS,
    *PLANNER, *LMCACHE, *SGLANG_STAGES, *ROUTER, *LLM_D,
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
    """The engine of an exposed metric name (``engines.ENGINES`` prefixes); None when unknown."""
    from pdprobe.collectors.engines import engine_of as by_prefix

    return by_prefix(normalise_name(name))
