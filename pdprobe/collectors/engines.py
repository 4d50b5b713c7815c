"""Every engine pdprobe knows, as data: name prefixes, live discovery, precedence, versions.

One entry per engine (``EngineNames``) says how its metric names start (``engine_of``), which
names a live collection asks Prometheus for (``DISCOVERY_RE``), which engine's series win when
several report one signal of one instance (``ENGINE_PRIORITY``), and which name sets date its
version (``VERSION_HINTS``). The metric names themselves (``MetricSpec``: signal, kind, unit,
labels) are in ``metric_catalog`` (vLLM, SGLang, Dynamo, Mooncake, node_exporter, RDMA
exporters) or ``metric_families`` (TensorRT-LLM, NIXL, the Dynamo planner, LMCache, SGLang's
per-stage latency, production-stack's router, llm-d).

A new engine is its specs (one tuple in ``metric_families.py``, added to
``metric_catalog.ALL_SPECS``) and its ``EngineNames`` line here; the file reader and the live
collector then both read it (they share the catalog, this table and ``metric_roles``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class VersionHint:
    """Names (normalised) that date an engine's version: all of ``need``, none of ``absent``."""

    need: tuple[str, ...]
    absent: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class EngineNames:
    """How one engine's metric names are recognised, discovered and ranked."""

    engine: str  # MetricSpec.engine
    prefixes: tuple[str, ...]  # normalised (":" -> "_") name prefixes of its families
    discovery: tuple[str, ...]  # regexes over __name__ a live collection asks for ("" scope)
    priority: int  # lower wins when several engines report one signal of one instance
    versions: tuple[VersionHint, ...] = ()  # first match wins


# NIXL telemetry's `agent_` prefix and the pre-1.x Dynamo planner's `planner:` prefix are
# generic: discovery asks for the catalog's families only. An engine's own metrics outrank a
# wrapper's (a Dynamo vLLM worker exposes vllm:* and dynamo_component_*), a wrapper's outrank a
# KV-transfer library's.
ENGINES: Final = (
    EngineNames("vllm", ("vllm_",), (r"vllm[:_].+",), 0, (
        VersionHint(("vllm_num_requests_waiting_by_reason",), (), "vLLM 0.33-era names"),
        VersionHint(("vllm_kv_cache_usage_perc",), ("vllm_time_per_output_token_seconds",),
                    "vLLM >= 0.14 names"),
        VersionHint(("vllm_kv_cache_usage_perc",), (),
                    "vLLM 0.9.2-0.13 names (deprecated names kept)"),
        VersionHint(("vllm_gpu_cache_usage_perc",), (), "vLLM < 0.9.2 names"),
    )),
    EngineNames("sglang", ("sglang_",), (r"sglang[:_].+",), 0, (
        VersionHint(("sglang_num_prefill_bootstrap_queue_reqs",), (), "SGLang >= 0.5.23 names"),
        VersionHint(("sglang_num_prefill_infight_queue_reqs",), (), "SGLang 0.4.x names"),
        VersionHint(("sglang_num_prefill_prealloc_queue_reqs",), (),
                    "SGLang 0.5.3-0.5.10 names"),
    )),
    EngineNames("dynamo", ("dynamo_", "planner_"), (
        r"dynamo_.+",
        r"planner[:_](num_[pd]_workers|predicted_num_[pd]|observed_(ttft|itl|request_rate)"
        r"|predicted_request_rate)"), 2, (
        VersionHint(("dynamo_component_gpu_cache_usage_percent",), (), "Dynamo 1.6-era names"),
        VersionHint(("dynamo_component_kvstats_gpu_cache_usage_percent",), (),
                    "Dynamo <= 0.6 / early 1.x names (kvstats_*)"),
    )),
    EngineNames("trtllm", ("trtllm_",), (r"trtllm_.+",), 1),
    EngineNames("node", ("node_",), (), 0),  # network scope: discovery's own regex
    EngineNames("mooncake", ("tent_",), (r"tent_.+",), 3),
    EngineNames("nixl", ("agent_",), (r"agent_(tx|rx)_(bytes|requests_num)_total",
                                      r"agent_errors_total",
                                      r"agent_xfer_time_us_(bucket|sum|count)"), 3),
    EngineNames("lmcache", ("lmcache_",), (r"lmcache[:_].+",), 3),
    EngineNames("llm-d", ("llm_d_",), (r"llm_d_inference_scheduler_.+",), 2),
    EngineNames("rdma-exporter", (), (), 1),  # network scope
    EngineNames("custom", (), (), 0),  # names from a --metrics-map file
)

# Regex over __name__ of the engine families a live collection discovers (instance and
# deployment scope; network families have NETWORK_NAME_RE in promql_plan).
DISCOVERY_RE: Final = "|".join(d for e in ENGINES for d in e.discovery)
ENGINE_PRIORITY: Final[dict[str, int]] = {e.engine: e.priority for e in ENGINES}
# The engine a file reports an instance as when several expose its series: engine before
# wrapper before library, vLLM before SGLang on a tie (one instance never runs both).
ENGINE_PREFERENCE: Final = ("vllm", "sglang", "trtllm", "dynamo", "mooncake", "nixl", "lmcache")
VERSION_HINTS: Final = tuple((e.engine, v) for e in ENGINES for v in e.versions)
_PREFIXES: Final = tuple((p, e.engine) for e in ENGINES for p in e.prefixes)


def engine_of(key: str) -> str | None:
    """The engine of a normalised metric name (``:`` rewritten to ``_``); None when unknown."""
    for prefix, engine in _PREFIXES:
        if key.startswith(prefix):
            return engine
    return None
