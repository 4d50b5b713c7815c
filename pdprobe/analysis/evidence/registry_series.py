"""Registry declarations of the per-bin frames, the cluster series and the per-node columns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pdprobe import signals as S
from pdprobe.analysis.evidence.spec_types import binned as _b
from pdprobe.analysis.evidence.spec_types import clus as _c
from pdprobe.analysis.evidence.spec_types import node as _n

# -- per-bin frames (bins x instances) ------------------------------------------------------------
GAUGE_BINS: Final = (
    _b("g_waiting", "requests", "requests waiting, per-bin mean", "gauges", S.REQUESTS_WAITING),
    _b("g_running", "requests", "requests running, per-bin mean", "gauges", S.REQUESTS_RUNNING),
    _b("g_deferred", "requests", "requests deferred for remote KV", "gauges",
       S.REQUESTS_DEFERRED),
    _b("g_kv_fetch", "requests", "requests fetching remote KV", "gauges", S.KV_FETCH_WAITING),
    _b("g_kv_usage", "ratio", "KV-cache usage", "gauges", S.KV_USAGE_RATIO),
    _b("g_hit_gauge", "ratio", "engine prefix-hit-rate gauge", "gauges", S.PREFIX_HIT_RATIO),
    _b("g_prealloc", "requests", "decode pre-allocation queue", "gauges",
       S.DECODE_PREALLOC_QUEUE),
    _b("g_transfer_queue", "requests", "decode transfer queue", "gauges",
       S.DECODE_TRANSFER_QUEUE),
    _b("g_bootstrap", "requests", "prefill bootstrap queue", "gauges", S.PREFILL_BOOTSTRAP_QUEUE),
    _b("g_inflight", "requests", "prefill in-flight queue", "gauges", S.PREFILL_INFLIGHT_QUEUE),
    _b("g_retracted", "requests", "retracted requests", "gauges", S.REQUESTS_RETRACTED),
    _b("g_prompt_tps", "tokens/s", "prompt throughput", "gauges", S.PROMPT_THROUGHPUT_TPS),
    _b("g_gen_tps", "tokens/s", "generation throughput", "gauges", S.GENERATION_THROUGHPUT_TPS),
)
REQUEST_BINS: Final = (
    _b("req_count_prefill", "requests", "requests per bin by prefill_instance", "requests",
       "prefill_instance"),
    _b("req_count_decode", "requests", "requests per bin by decode_instance", "requests",
       "decode_instance"),
    _b("req_tpot", "s", "median TPOT per bin", "requests", "tpot_s"),
    _b("req_prefill_per_token", "s/token", "median prefill time per uncached token per bin",
       "requests", "prefill_s_per_token"),
    _b("req_hit", "ratio", "cached / prompt tokens per bin", "requests", "cached_tokens"),
    _b("alive", "0/1", "1 where the instance served in the bin", "alive"),
)
# Requests per bin by the column naming the instance of each role.
ROLE_COUNT_BINS: Final[Mapping[str, str]] = {"prefill": "req_count_prefill",
                                              "decode": "req_count_decode"}

# -- cluster series (one value per bin) ------------------------------------------------------------
CLUSTER: Final = (
    _c("prefill_queue", "requests", "mean requests waiting per prefill instance", "g_waiting"),
    _c("prefill_bootstrap", "requests", "mean bootstrap queue per prefill instance",
       "g_bootstrap"),
    _c("prefill_inflight", "requests", "mean in-flight queue per prefill instance", "g_inflight"),
    _c("prefill_running", "requests", "mean running per prefill instance", "g_running"),
    _c("decode_waiting", "requests", "mean requests waiting per decode instance", "g_waiting"),
    _c("decode_deferred", "requests", "mean deferred per decode instance", "g_deferred"),
    _c("decode_kv_fetch", "requests", "mean kv-fetch waiters per decode instance", "g_kv_fetch"),
    _c("decode_prealloc", "requests", "mean pre-allocation queue per decode instance",
       "g_prealloc"),
    _c("decode_transfer_queue", "requests", "mean transfer queue per decode instance",
       "g_transfer_queue"),
    _c("decode_kv_usage", "ratio", "mean KV usage per decode instance", "g_kv_usage"),
    _c("decode_running", "requests", "mean running per decode instance", "g_running"),
    _c("decode_retracted", "requests", "mean retracted per decode instance", "g_retracted"),
    _c("prompt_tps_total", "tokens/s", "prefill pool's prompt throughput",
       f"g_prompt_tps, else {S.PROMPT_TOKENS_TOTAL}"),
    _c("gen_tps_total", "tokens/s", "decode pool's generation throughput",
       f"g_gen_tps, else {S.GENERATION_TOKENS_TOTAL}"),
    _c("decode_admission", "requests", "decode waiting minus deferred (admission queue)",
       "decode_waiting decode_deferred"),
    _c("prefill_alive", "instances", "prefill instances serving", "alive"),
    _c("decode_alive", "instances", "decode instances serving", "alive"),
    _c("arrivals", "requests", "requests arriving in the bin", "arrival_ts"),
    _c("arrivals_hist", "requests", "requests per bin from the prompt-length histogram count",
       S.PROMPT_TOKENS),
    _c("prompt_mean", "tokens", "mean prompt length", f"prompt_tokens, else {S.PROMPT_TOKENS}"),
    _c("output_mean", "tokens", "mean output length", f"output_tokens, else {S.OUTPUT_TOKENS}"),
    _c("queue_s_p50", "s", "median wait before prefill", "queue_s"),
    _c("ttft_p50", "s", "median TTFT", "ttft_s"),
    _c("ttft_p90", "s", "TTFT p90", "ttft_s"),
    _c("tpot_p50", "s", "median TPOT", "tpot_s"),
    _c("xfer_s_p50", "s", "median KV-transfer time", "kv_transfer_s"),
    _c("kv_bytes_per_s", "bytes/s", "KV transfer demand", "kv_bytes"),
    _c("xfer_s_per_gb_p50", "s/GB", "median KV-transfer time per GB", "kv_transfer_s kv_bytes"),
)

# -- per node (RDMA / TCP counters over the window) ---------------------------------------------
NODES: Final = (
    _n("rdma_tx_bytes", "bytes", "RDMA bytes sent", S.RDMA_TX_BYTES_TOTAL),
    _n("rdma_rx_bytes", "bytes", "RDMA bytes received", S.RDMA_RX_BYTES_TOTAL),
    _n("rdma_tx_packets", "packets", "RDMA packets sent", S.RDMA_TX_PACKETS_TOTAL),
    _n("rdma_rx_packets", "packets", "RDMA packets received", S.RDMA_RX_PACKETS_TOTAL),
    _n("tcp_tx_bytes", "bytes", "TCP/IP bytes sent", S.NODE_TCP_TX_BYTES_TOTAL),
    _n("tcp_rx_bytes", "bytes", "TCP/IP bytes received", S.NODE_TCP_RX_BYTES_TOTAL),
    _n("link_downed", "events", "link-downed events", S.RDMA_LINK_DOWNED_TOTAL),
    _n("port_errors", "events", "port errors", S.RDMA_PORT_ERRORS_TOTAL),
    _n("retransmits", "events", "retransmission events (all counters)", "RETRANSMIT_SIGNALS"),
    _n("retransmit_top_signal", "label", "the retransmission counter with most events",
       "RETRANSMIT_SIGNALS"),
    _n("cnp", "events", "congestion notifications and ECN marks", "CONGESTION_SIGNALS"),
    _n("rdma_bytes", "bytes", "RDMA bytes both directions", "rdma_tx_bytes rdma_rx_bytes"),
    _n("rdma_packets", "packets", "RDMA packets (estimated from bytes at a 4 KiB MTU if no "
       "packet counter)", "rdma_tx_packets rdma_rx_packets rdma_bytes"),
    _n("rdma_packets_measured", "bool", "whether rdma_packets was counted, not estimated"),
    _n("tcp_bytes", "bytes", "TCP/IP bytes both directions", "tcp_tx_bytes tcp_rx_bytes"),
    _n("link_bytes_per_s", "bytes/s", "link rate summed over ACTIVE ports",
       f"{S.LINK_RATE_BYTES_PER_S} {S.PORT_STATE}"),
    _n("ports", "ports", "RDMA ports", S.PORT_STATE),
    _n("ports_active", "ports", "ACTIVE RDMA ports", S.PORT_STATE),
    _n("rdma_tx_p90_bytes_per_s", "bytes/s", "p90 over bins of the RDMA send rate",
       S.RDMA_TX_BYTES_TOTAL),
    _n("rdma_rx_p90_bytes_per_s", "bytes/s", "p90 over bins of the RDMA receive rate",
       S.RDMA_RX_BYTES_TOTAL),
    _n("retransmit_bins", "bins", "bins with retransmissions", "RETRANSMIT_SIGNALS"),
    _n("measured_bins", "bins", "bins with retransmission counter samples",
       "RETRANSMIT_SIGNALS"),
)
