"""Substrings that mark a file as an engine log, for content sniffing (``io.sniff``).

A log may hold nothing but failure lines (what an on-call engineer pastes first), so every line
kind the engine-log families read (``vllm_log``, ``sglang_log``, ``mooncake_log``) has a marker
here. This module imports nothing, so sniffing stays cheap; ``tests/collectors/
test_failure_lines.py`` checks that each family's failure markers are listed.
"""

from __future__ import annotations

from typing import Final

STATS_MARKERS: Final = (
    "Avg prompt throughput",
    "Prefill batch",
    "Decode batch",
    "KV Transfer metrics",
    "[Metrics] Transfer Engine",
    "Transfer Engine",
)
# vLLM KV connectors and scheduler: also the route of vllm_events' failure line kind.
VLLM_FAILURE_MARKERS: Final = (
    "NIXL transfer failure",
    "Releasing expired KV blocks",
    "Potentially invalid KV blocks",
    "Declining expired remote read",
    "Skipping KV post-processing for failed request",
    "Local NIXL metadata for remote engine",
    "Got invalid KVTransferParams",
    "Recovered from KV load failure",
    "due to KV load failure",
    "Failed to receive all KVs",
    "Mooncake transfer failed for request",
    "Failed to transfer KV cache for request",
)
FAILURE_MARKERS: Final = (
    # SGLang disaggregation (python/sglang/srt/disaggregation/)
    "transfer failed for request",
    "bootstrap failed for request",
    "Losing connection with prefill instance",
    *VLLM_FAILURE_MARKERS,
    # Mooncake transfer engine (RDMA worker pool) and Store client
    "Process failed for slice",
    "WR flush error",
    "transport retry counter exceeded",
    "Too many errors found in local RNIC",
    "Failed to establish peer endpoints in local RNIC",
    "All rails failed for context",
    "Rail paused: peer=",
    "Cannot make connection for endpoint",
    "Cannot redispatch slice",
    "Worker: Context ",  # "... <dev> is now inactive due to fatal event"
    "Transfer failed for key",
    "Transfer failed, error code is",
    "transfer_read_failed key=",
    "transfer_read_range_failed key=",
    "Failed to complete transfers after",
    "transfer timeout after",
)
# Every marker an engine log can be recognised by.
SNIFF_MARKERS: Final = STATS_MARKERS + FAILURE_MARKERS
