"""Canonical signal names: the vocabulary every collector writes and every analysis reads.

Whatever the source (Prometheus metric, engine log line, captured file), a measurement lands
in the dataset under one of these names, in base units (seconds, bytes, tokens, ratio 0-1).
"""

from __future__ import annotations

from typing import Final, Literal

Role = Literal["prefill", "decode", "frontend", "unknown"]
ROLES: Final = ("prefill", "decode", "frontend", "unknown")

# Kinds of rows in the metrics/network tables.
GAUGE: Final = "gauge"
COUNTER: Final = "counter"  # cumulative, reset- and wrap-corrected, monotonic per instance
BUCKET: Final = "bucket"  # cumulative histogram bucket count, with `le` in base units
HSUM: Final = "sum"  # cumulative histogram sum (base units)
HCOUNT: Final = "count"  # cumulative histogram observation count
KINDS: Final = (GAUGE, COUNTER, BUCKET, HSUM, HCOUNT)

# --- instance gauges -------------------------------------------------------------------------
REQUESTS_RUNNING: Final = "requests_running"
REQUESTS_WAITING: Final = "requests_waiting"  # all waiting (vLLM 0.33: capacity + deferred)
REQUESTS_DEFERRED: Final = "requests_deferred"  # vLLM deferred (KV transfer, LoRA, blocked)
KV_FETCH_WAITING: Final = "kv_fetch_waiting"  # decode: requests waiting for remote KV (all stages)
KV_USAGE_RATIO: Final = "kv_usage_ratio"  # 0-1
KV_USED_TOKENS: Final = "kv_used_tokens"
DECODE_CONTEXT_TOKENS: Final = "decode_context_tokens"  # sum of sequence lengths in decode batch
PREFIX_HIT_RATIO: Final = "prefix_hit_ratio"  # 0-1, engine-reported (windowed or last report)
EXTERNAL_HIT_RATIO: Final = "external_hit_ratio"  # 0-1, KV-connector hit rate (vLLM logs)
PROMPT_THROUGHPUT_TPS: Final = "prompt_throughput_tps"
GENERATION_THROUGHPUT_TPS: Final = "generation_throughput_tps"
PREFILL_BOOTSTRAP_QUEUE: Final = "prefill_bootstrap_queue"  # SGLang PD prefill
PREFILL_INFLIGHT_QUEUE: Final = "prefill_inflight_queue"  # SGLang PD prefill: KV being sent
DECODE_PREALLOC_QUEUE: Final = "decode_prealloc_queue"  # SGLang PD decode: waiting for KV memory
DECODE_TRANSFER_QUEUE: Final = "decode_transfer_queue"  # SGLang PD decode: KV in flight
REQUESTS_RETRACTED: Final = "requests_retracted"  # SGLang retracted (decode memory pressure)
KV_TRANSFER_LATENCY_S_GAUGE: Final = "kv_transfer_latency_s_last"  # SGLang <=0.5.3 gauge
KV_TRANSFER_SPEED_GAUGE: Final = "kv_transfer_bytes_per_s_last"  # SGLang <=0.5.3 gauge
KV_TRANSFER_THROUGHPUT_LOG: Final = "kv_transfer_bytes_per_s_log"  # vLLM "Throughput (MB/s)"
KV_TRANSFER_AVG_S_LOG: Final = "kv_transfer_avg_s_log"  # vLLM "Avg xfer time (ms)"
KV_TRANSFER_P90_S_LOG: Final = "kv_transfer_p90_s_log"
KV_TRANSFER_AVG_BYTES_LOG: Final = "kv_transfer_avg_bytes_log"
ITL_LAST_S: Final = "itl_last_s"  # Dynamo per-worker last ITL
TTFT_LAST_S: Final = "ttft_last_s"  # Dynamo per-worker last TTFT
ACTIVE_PREFILL_TOKENS: Final = "active_prefill_tokens"  # Dynamo router view
ACTIVE_DECODE_BLOCKS: Final = "active_decode_blocks"
REQUESTS_SWAPPED: Final = "requests_swapped"  # vLLM V0: preempted requests swapped to CPU
CPU_KV_USAGE_RATIO: Final = "cpu_kv_usage_ratio"  # 0-1, vLLM V0 CPU (swap) KV cache usage

# --- instance counters (cumulative) ----------------------------------------------------------
PROMPT_TOKENS_TOTAL: Final = "prompt_tokens_total"
GENERATION_TOKENS_TOTAL: Final = "generation_tokens_total"
REQUESTS_FINISHED_TOTAL: Final = "requests_finished_total"
REQUESTS_FAILED_TOTAL: Final = "requests_failed_total"  # abort/error finishes
REQUESTS_STARTED_TOTAL: Final = "requests_started_total"  # offered load (Dynamo frontend)
PREEMPTIONS_TOTAL: Final = "preemptions_total"  # vLLM preemptions, SGLang retractions
PREFIX_QUERIES_TOTAL: Final = "prefix_queries_total"  # tokens
PREFIX_HITS_TOTAL: Final = "prefix_hits_total"  # tokens
EXTERNAL_QUERIES_TOTAL: Final = "external_prefix_queries_total"
EXTERNAL_HITS_TOTAL: Final = "external_prefix_hits_total"
CACHED_TOKENS_TOTAL: Final = "cached_tokens_total"
KV_RECEIVED_TOKENS_TOTAL: Final = "kv_received_tokens_total"  # decode: prompt tokens via KV transfer
KV_TRANSFERS_TOTAL: Final = "kv_transfers_total"  # successful transfers
KV_TRANSFER_FAILURES_TOTAL: Final = "kv_transfer_failures_total"
KV_EXPIRED_TOTAL: Final = "kv_expired_total"
KV_RDMA_BYTES_TOTAL: Final = "kv_rdma_bytes_total"  # Mooncake TENT, transport=rdma
KV_TCP_BYTES_TOTAL: Final = "kv_tcp_bytes_total"  # Mooncake TENT, transport=tcp
# Bytes the instance's KV transfer agent sent / received, any transport (NIXL telemetry
# agent_tx/rx_bytes_total): flat on both sides while requests complete = no KV crossed.
KV_TX_BYTES_TOTAL: Final = "kv_tx_bytes_total"
KV_RX_BYTES_TOTAL: Final = "kv_rx_bytes_total"

# --- instance histograms (base units; bucket/sum/count rows) ---------------------------------
TTFT_S: Final = "ttft_s"
ITL_S: Final = "itl_s"
TPOT_S: Final = "tpot_s"
E2E_S: Final = "e2e_s"
QUEUE_S: Final = "queue_s"
PREFILL_S: Final = "prefill_s"
DECODE_S: Final = "decode_s"
KV_TRANSFER_S: Final = "kv_transfer_s"
KV_TRANSFER_BYTES: Final = "kv_transfer_bytes"
KV_TRANSFER_BYTES_PER_S: Final = "kv_transfer_bytes_per_s"
PROMPT_TOKENS: Final = "prompt_tokens"
OUTPUT_TOKENS: Final = "output_tokens"
PREFILL_COMPUTED_TOKENS: Final = "prefill_computed_tokens"
WORKER_REQUEST_S: Final = "worker_request_s"  # Dynamo work handler time per request (s)

# --- Dynamo worker KV stats and NATS service timings (per instance) ----------------------------
KV_ACTIVE_BLOCKS: Final = "kv_active_blocks"  # Dynamo kvstats_active_blocks (blocks in use)
KV_TOTAL_BLOCKS: Final = "kv_total_blocks"  # Dynamo kvstats_total_blocks (blocks available)
NATS_REQUESTS_TOTAL: Final = "nats_requests_total"  # requests served over the NATS service
NATS_ERRORS_TOTAL: Final = "nats_errors_total"
NATS_PROCESSING_S_TOTAL: Final = "nats_processing_s_total"  # cumulative handler time (s)
NATS_PROCESSING_AVG_S: Final = "nats_processing_avg_s"  # mean handler time (s), gauge

# --- LMCache (per instance; its own counters, not vLLM's external prefix-cache ones) ----------
LMCACHE_REQUESTED_TOKENS_TOTAL: Final = "lmcache_requested_tokens_total"  # asked to retrieve
LMCACHE_HIT_TOKENS_TOTAL: Final = "lmcache_hit_tokens_total"  # retrieved (hit)
LMCACHE_STORED_TOKENS_TOTAL: Final = "lmcache_stored_tokens_total"
LMCACHE_LOOKUP_TOKENS_TOTAL: Final = "lmcache_lookup_tokens_total"
LMCACHE_LOOKUP_HITS_TOTAL: Final = "lmcache_lookup_hits_total"
LMCACHE_RETRIEVE_HIT_RATIO: Final = "lmcache_retrieve_hit_ratio"  # 0-1, since last log
LMCACHE_LOOKUP_HIT_RATIO: Final = "lmcache_lookup_hit_ratio"
LMCACHE_RETRIEVE_S: Final = "lmcache_retrieve_s"  # histogram
LMCACHE_STORE_S: Final = "lmcache_store_s"  # histogram
LMCACHE_REMOTE_READ_BYTES_TOTAL: Final = "lmcache_remote_read_bytes_total"
LMCACHE_REMOTE_WRITE_BYTES_TOTAL: Final = "lmcache_remote_write_bytes_total"

# --- SGLang per-stage request latency (histograms, s; sglang:per_stage_req_latency_seconds) ---
STAGE_PREFILL_WAITING_S: Final = "stage_prefill_waiting_s"  # waiting queue on prefill
STAGE_PREFILL_FORWARD_S: Final = "stage_prefill_forward_s"
STAGE_PREFILL_BOOTSTRAP_S: Final = "stage_prefill_bootstrap_s"  # P: bootstrap queue (handshake)
STAGE_PREFILL_KV_SEND_S: Final = "stage_prefill_kv_send_s"  # P: KV being sent (inflight)
STAGE_DECODE_PREALLOC_S: Final = "stage_decode_prealloc_s"  # D: waiting for KV memory
STAGE_DECODE_BOOTSTRAP_S: Final = "stage_decode_bootstrap_s"  # D: handshake with prefill
STAGE_DECODE_KV_WAIT_S: Final = "stage_decode_kv_wait_s"  # D: transfer queue (KV in flight)
STAGE_DECODE_WAITING_S: Final = "stage_decode_waiting_s"  # D: waiting to join the batch

# --- a router's own view of one backend (production-stack `server=`) --------------------------
ROUTER_QPS: Final = "router_qps"  # requests per second the router sent to the backend
ROUTER_PREFILL_REQUESTS: Final = "router_prefill_requests"  # in flight before the first token
ROUTER_DECODING_REQUESTS: Final = "router_decoding_requests"  # in flight after it
ROUTER_AVG_LATENCY_S: Final = "router_avg_latency_s"
ROUTER_AVG_ITL_S: Final = "router_avg_itl_s"
ROUTER_BACKEND_HEALTHY: Final = "router_backend_healthy"  # 1 healthy, 0 not
ROUTER_ERRORS_TOTAL: Final = "router_errors_total"
ROUTER_LATENCY_S: Final = "router_latency_s"  # histogram, end to end at the router

# --- node network signals (per node/device/port; network table) -------------------------------
LINK_RATE_BYTES_PER_S: Final = "link_rate_bytes_per_s"  # gauge
PORT_STATE: Final = "port_state"  # gauge (4 = ACTIVE)
RDMA_TX_BYTES_TOTAL: Final = "rdma_tx_bytes_total"
RDMA_RX_BYTES_TOTAL: Final = "rdma_rx_bytes_total"
RDMA_TX_PACKETS_TOTAL: Final = "rdma_tx_packets_total"
RDMA_RX_PACKETS_TOTAL: Final = "rdma_rx_packets_total"
RDMA_OUT_OF_SEQUENCE_TOTAL: Final = "rdma_out_of_sequence_total"
RDMA_DUPLICATE_REQUESTS_TOTAL: Final = "rdma_duplicate_requests_total"
RDMA_PACKET_SEQ_ERRORS_TOTAL: Final = "rdma_packet_seq_errors_total"
RDMA_IMPLIED_NAK_TOTAL: Final = "rdma_implied_nak_seq_errors_total"
RDMA_LOCAL_ACK_TIMEOUTS_TOTAL: Final = "rdma_local_ack_timeouts_total"
RDMA_ADP_RETRANS_TOTAL: Final = "rdma_adp_retransmits_total"
RDMA_ADP_RETRANS_TIMEOUTS_TOTAL: Final = "rdma_adp_retransmit_timeouts_total"
RDMA_RNR_NAK_TOTAL: Final = "rdma_rnr_nak_retries_total"
RDMA_CNP_HANDLED_TOTAL: Final = "rdma_cnp_handled_total"  # sender throttled
RDMA_CNP_SENT_TOTAL: Final = "rdma_cnp_sent_total"
RDMA_ECN_MARKED_TOTAL: Final = "rdma_ecn_marked_total"
RDMA_OUT_OF_BUFFER_TOTAL: Final = "rdma_out_of_buffer_total"
RDMA_LINK_DOWNED_TOTAL: Final = "rdma_link_downed_total"
RDMA_PORT_XMIT_WAIT_TOTAL: Final = "rdma_port_xmit_wait_total"
RDMA_PORT_ERRORS_TOTAL: Final = "rdma_port_errors_total"
NODE_TCP_TX_BYTES_TOTAL: Final = "tcp_tx_bytes_total"  # ordinary netdev bytes (TCP fallback)
NODE_TCP_RX_BYTES_TOTAL: Final = "tcp_rx_bytes_total"

# --- deployment signals (deployment table: one value per deployment, not per instance) -------
# Dynamo planner (its own view: deployed and recommended replicas, observed and estimated
# latency; components/src/dynamo/planner/monitoring/planner_metrics.py).
PLANNER_PREFILL_REPLICAS: Final = "planner_prefill_replicas"  # current (deployed) prefill
PLANNER_DECODE_REPLICAS: Final = "planner_decode_replicas"
PLANNER_PREDICTED_PREFILL_REPLICAS: Final = "planner_predicted_prefill_replicas"  # recommended
PLANNER_PREDICTED_DECODE_REPLICAS: Final = "planner_predicted_decode_replicas"
PLANNER_OBSERVED_TTFT_S: Final = "planner_observed_ttft_s"
PLANNER_OBSERVED_ITL_S: Final = "planner_observed_itl_s"
PLANNER_ESTIMATED_TTFT_S: Final = "planner_estimated_ttft_s"  # the planner's model's estimate
PLANNER_ESTIMATED_ITL_S: Final = "planner_estimated_itl_s"
PLANNER_OBSERVED_RPS: Final = "planner_observed_rps"
PLANNER_PREDICTED_RPS: Final = "planner_predicted_rps"
PLANNER_SIGNALS: Final = (PLANNER_PREFILL_REPLICAS, PLANNER_DECODE_REPLICAS,
                          PLANNER_PREDICTED_PREFILL_REPLICAS, PLANNER_PREDICTED_DECODE_REPLICAS,
                          PLANNER_OBSERVED_TTFT_S, PLANNER_OBSERVED_ITL_S,
                          PLANNER_ESTIMATED_TTFT_S, PLANNER_ESTIMATED_ITL_S,
                          PLANNER_OBSERVED_RPS, PLANNER_PREDICTED_RPS)
# Dynamo frontend's per-model worker configuration (dynamo_frontend_model_*).
MODEL_KV_BLOCKS_PER_WORKER: Final = "model_kv_blocks_per_worker"
MODEL_KV_BLOCK_SIZE_TOKENS: Final = "model_kv_block_size_tokens"
# llm-d inference scheduler (EPP) disaggregation decisions, counters.
DISAGG_DECISIONS_TOTAL: Final = "disagg_decisions_total"  # every routing decision
DISAGG_SPLIT_DECISIONS_TOTAL: Final = "disagg_split_decisions_total"  # sent to P then D
DEPLOYMENT_SIGNALS: Final = frozenset({*PLANNER_SIGNALS, MODEL_KV_BLOCKS_PER_WORKER,
                                       MODEL_KV_BLOCK_SIZE_TOKENS, DISAGG_DECISIONS_TOTAL,
                                       DISAGG_SPLIT_DECISIONS_TOTAL})

# Retransmission-type counters, summed by the rules into one "retransmits" rate.
RETRANSMIT_SIGNALS: Final = (
    RDMA_OUT_OF_SEQUENCE_TOTAL,
    RDMA_DUPLICATE_REQUESTS_TOTAL,
    RDMA_PACKET_SEQ_ERRORS_TOTAL,
    RDMA_IMPLIED_NAK_TOTAL,
    RDMA_LOCAL_ACK_TIMEOUTS_TOTAL,
    RDMA_ADP_RETRANS_TOTAL,
    RDMA_ADP_RETRANS_TIMEOUTS_TOTAL,
)
CONGESTION_SIGNALS: Final = (RDMA_CNP_HANDLED_TOTAL, RDMA_CNP_SENT_TOTAL, RDMA_ECN_MARKED_TOTAL)

# Signals the readers keep but no analysis, rule or report reads (a test holds this true). The
# live collector does not query them: each is a histogram whose range query reads every bucket
# series of every instance, a tenth of a live collection's time on a large cluster.
UNANALYSED_SIGNALS: Final = frozenset({E2E_S, DECODE_S})

# --- events (events table, column `event`) ----------------------------------------------------
EV_KV_TRANSFER_FAILED: Final = "kv_transfer_failed"
EV_KV_BOOTSTRAP_FAILED: Final = "kv_bootstrap_failed"
EV_KV_EXPIRED: Final = "kv_expired"
EV_RDMA_SLICE_FAILED: Final = "rdma_slice_failed"  # Mooncake worker_pool slice failure
EV_RDMA_RETRY_EXCEEDED: Final = "rdma_retry_exceeded"  # "transport retry counter exceeded"
EV_SESSION_FAILED: Final = "kv_session_failed"
EV_SESSION_RECOVERED: Final = "kv_session_recovered"  # Mooncake session un-blacklisted after a probe
EV_PREEMPTION: Final = "preemption"
EV_NIXL_WARNING: Final = "nixl_warning"
EV_TRANSPORT_TCP: Final = "transport_tcp"  # evidence that KV used TCP
EV_INSTANCE_START: Final = "instance_start"
EV_INSTANCE_STOP: Final = "instance_stop"
# Failure evidence read from logs that may hold nothing else (issue 13); docs/inputs/logs.md
# lists the lines behind each one.
EV_KV_TRANSFER_TIMEOUT: Final = "kv_transfer_timeout"  # a transfer batch gave up after a timeout
EV_KV_PEER_LOST: Final = "kv_peer_lost"  # the KV peer stopped answering (heartbeat, dead session)
EV_KV_LOAD_RECOMPUTED: Final = "kv_load_recomputed"  # decode recomputes prompts whose KV failed
EV_REQUEST_ABORTED: Final = "request_aborted"  # the engine aborted a request (client or error)
EV_RDMA_NIC_INACTIVE: Final = "rdma_nic_inactive"  # Mooncake marks a local RNIC inactive
EV_RDMA_RAIL_PAUSED: Final = "rdma_rail_paused"  # Mooncake pauses a path to a peer NIC
EV_RDMA_CONNECT_FAILED: Final = "rdma_connect_failed"  # no RDMA connection to a peer endpoint

# Every event's ``detail`` is a sentence for people, ending, when the line names them, with
# `` [key=value ...]`` fields a rule can group on (values hold no spaces or brackets):
#   request  the request id;  peer  the remote end (host:port, or Mooncake's host:port@nic);
#   nic      the local NIC (mlx5_1);  key  a Mooncake Store object key;
#   requests / tokens  how many requests / tokens one line counts (integers).
DETAIL_REQUEST: Final = "request"
DETAIL_KEY: Final = "key"
DETAIL_PEER: Final = "peer"
DETAIL_NIC: Final = "nic"
DETAIL_REQUESTS: Final = "requests"
DETAIL_TOKENS: Final = "tokens"
DETAIL_KEYS: Final = (DETAIL_REQUEST, DETAIL_PEER, DETAIL_NIC, DETAIL_KEY, DETAIL_REQUESTS,
                      DETAIL_TOKENS)


def detail_field_pattern(key: str) -> str:
    """A regex whose group 1 is the value of ``key`` in an event detail, for
    ``Series.str.extract``; e.g. ``detail_field_pattern("peer")``."""
    return rf"\[(?:[^\]]* )?{key}=([^\s\]]+)[^\]]*\]$"


def event_detail(text: str, **fields: object) -> str:
    """``text`` followed by the `` [key=value ...]`` fields that are set (see DETAIL_KEYS)."""
    parts = []
    for key, value in fields.items():
        if value is None or value == "":
            continue
        clean = "".join("_" if c.isspace() or c in "[]" else c for c in str(value))
        parts.append(f"{key}={clean}")
    return f"{text} [{' '.join(parts)}]" if parts else text
