"""The evidence registry: every evidence column by name, with its unit, meaning and sources.

Evidence lives in four tables (``Table``): one row per instance (``instances``), per-bin frames
of one quantity over instances (``bins``), per-bin cluster/role series (``cluster``) and one
row per node (``nodes``). Every column name is a literal below, next to what produces it, so
grepping a name finds its producer; ``spec(table, name)`` raises ``UnknownEvidence`` for a name
that is not declared, so a misspelt column can never read as silently all-NaN.

``Spec.produced_by`` says which stage fills the column and ``Spec.source`` what it is read
from (a ``pdprobe.signals`` name, a request column, or other evidence). Quantities that more
than one input carries are ``Choice``s: the first option with a value wins, per instance, and
the chosen label lands in the choice's ``source`` column. That precedence exists only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pdprobe import signals as S
from pdprobe.analysis.evidence.registry_series import (
    CLUSTER,
    GAUGE_BINS,
    NODES,
    REQUEST_BINS,
    ROLE_COUNT_BINS,
)
from pdprobe.analysis.evidence.spec_types import TABLES, Choice, Spec, Table, UnknownEvidence
from pdprobe.analysis.evidence.spec_types import inst as _i

__all__ = ["CLUSTER", "GAUGE_BINS", "NODES", "REQUEST_BINS", "ROLE_COUNT_BINS", "Choice", "Spec",
           "Table", "UnknownEvidence"]

# -- per instance: labels and request records ---------------------------------------------------
INSTANCE_LABELS: Final = (
    _i("role", "label", "prefill, decode, frontend or unknown", "instances"),
    _i("node", "label", "the node the instance runs on (its host part)", "instances"),
)
# Request records, grouped by the column that names the instance in its role.
REQUEST_FIGURES: Final = (
    _i("req_count", "requests", "requests that name the instance", "requests"),
    _i("req_share", "ratio", "its share of its role's requests", "requests"),
    _i("req_hit_ratio", "ratio", "cached_tokens / prompt_tokens of its requests", "requests",
       "cached_tokens"),
)
# Per-instance quantiles of request-record columns (``source``; two are derived per request).
REQUEST_QUANTILES: Final = (
    _i("req_ttft_p50", "s", "median TTFT", "requests", "ttft_s", "p50"),
    _i("req_ttft_p90", "s", "TTFT p90", "requests", "ttft_s", "p90"),
    _i("req_tpot_p50", "s", "median TPOT", "requests", "tpot_s", "p50"),
    _i("req_tpot_p90", "s", "TPOT p90", "requests", "tpot_s", "p90"),
    _i("req_tpot_mean", "s", "mean TPOT", "requests", "tpot_s", "mean"),
    _i("req_queue_p50", "s", "median wait before prefill", "requests", "queue_s", "p50"),
    _i("req_queue_p90", "s", "p90 wait before prefill", "requests", "queue_s", "p90"),
    _i("req_kv_transfer_p50", "s", "median KV-transfer time", "requests", "kv_transfer_s", "p50"),
    _i("req_kv_transfer_p90", "s", "KV-transfer time p90", "requests", "kv_transfer_s", "p90"),
    _i("req_prefill_per_token_p50", "s/token", "median prefill time per uncached prompt token",
       "requests", "prefill_s_per_token", "p50"),
)

# -- per instance: engine gauges (mean / p90 over the window's samples) -----------------------
GAUGE_STATS: Final = (
    _i("g_waiting_mean", "requests", "mean requests waiting", "gauges", S.REQUESTS_WAITING, "mean"),
    _i("g_running_mean", "requests", "mean requests running", "gauges", S.REQUESTS_RUNNING, "mean"),
    _i("g_deferred_mean", "requests", "mean requests deferred for remote KV (vLLM)", "gauges",
       S.REQUESTS_DEFERRED, "mean"),
    _i("g_kv_fetch_mean", "requests", "mean requests fetching remote KV", "gauges",
       S.KV_FETCH_WAITING, "mean"),
    _i("g_kv_usage_p90", "ratio", "KV-cache usage p90", "gauges", S.KV_USAGE_RATIO, "p90"),
    _i("g_hit_gauge_mean", "ratio", "mean of the engine's prefix-hit-rate gauge", "gauges",
       S.PREFIX_HIT_RATIO, "mean"),
    _i("g_prealloc_mean", "requests", "mean decode pre-allocation queue (SGLang)", "gauges",
       S.DECODE_PREALLOC_QUEUE, "mean"),
    _i("g_transfer_queue_mean", "requests", "mean decode transfer queue (SGLang)", "gauges",
       S.DECODE_TRANSFER_QUEUE, "mean"),
    _i("g_bootstrap_mean", "requests", "mean prefill bootstrap queue (SGLang)", "gauges",
       S.PREFILL_BOOTSTRAP_QUEUE, "mean"),
    _i("g_retracted_mean", "requests", "mean retracted requests (SGLang)", "gauges",
       S.REQUESTS_RETRACTED, "mean"),
    _i("g_prompt_tps_mean", "tokens/s", "mean prompt throughput", "gauges",
       S.PROMPT_THROUGHPUT_TPS, "mean"),
    _i("g_gen_tps_mean", "tokens/s", "mean generation throughput", "gauges",
       S.GENERATION_THROUGHPUT_TPS, "mean"),
    _i("g_itl_last_mean", "s", "mean of the last inter-token latency gauge", "gauges",
       S.ITL_LAST_S, "mean"),
    _i("g_xfer_latency_gauge_mean", "s", "mean KV-transfer latency gauge", "gauges",
       S.KV_TRANSFER_LATENCY_S_GAUGE, "mean"),
    _i("g_xfer_speed_gauge_mean", "bytes/s", "mean KV-transfer speed gauge", "gauges",
       S.KV_TRANSFER_SPEED_GAUGE, "mean"),
    _i("g_xfer_avg_s_log_mean", "s", "mean KV-transfer time from log lines", "gauges",
       S.KV_TRANSFER_AVG_S_LOG, "mean"),
)
# A KV pool above this is "near full": vLLM/SGLang start preempting or refuse admissions there.
KV_NEAR_FULL: Final = 0.9
KV_FULL_FRAC: Final = _i("g_kv_usage_full_frac", "ratio",
                         f"share of KV-usage samples at or above {KV_NEAR_FULL:g}", "gauges",
                         S.KV_USAGE_RATIO, "full")

# -- per instance: counter increases over the window ------------------------------------------
COUNTERS: Final = (
    _i("c_preemptions", "sequences", "preemptions", "counters", S.PREEMPTIONS_TOTAL, "increase"),
    _i("c_prefix_hits", "tokens", "prefix-cache hits", "counters", S.PREFIX_HITS_TOTAL,
       "increase"),
    _i("c_prefix_queries", "tokens", "prefix-cache queries", "counters", S.PREFIX_QUERIES_TOTAL,
       "increase"),
    _i("c_finished", "requests", "finished requests", "counters", S.REQUESTS_FINISHED_TOTAL,
       "increase"),
    _i("c_prompt_tokens", "tokens", "prompt tokens", "counters", S.PROMPT_TOKENS_TOTAL,
       "increase"),
    _i("c_generation_tokens", "tokens", "generated tokens", "counters", S.GENERATION_TOKENS_TOTAL,
       "increase"),
    _i("c_kv_rdma_bytes", "bytes", "KV bytes the connector sent over RDMA", "counters",
       S.KV_RDMA_BYTES_TOTAL, "increase"),
    _i("c_kv_tcp_bytes", "bytes", "KV bytes the connector sent over TCP", "counters",
       S.KV_TCP_BYTES_TOTAL, "increase"),
    _i("c_kv_tx_bytes", "bytes", "KV bytes the transfer agent sent (NIXL telemetry)",
       "counters", S.KV_TX_BYTES_TOTAL, "increase"),
    _i("c_kv_rx_bytes", "bytes", "KV bytes the transfer agent received (NIXL telemetry)",
       "counters", S.KV_RX_BYTES_TOTAL, "increase"),
    _i("c_kv_transfers", "transfers", "successful KV transfers", "counters",
       S.KV_TRANSFERS_TOTAL, "increase"),
    _i("c_kv_failures", "transfers", "failed KV transfers (connector/transfer-engine counters)",
       "counters", S.KV_TRANSFER_FAILURES_TOTAL, "increase"),
    _i("c_kv_expired", "requests", "requests whose KV expired unpulled", "counters",
       S.KV_EXPIRED_TOTAL, "increase"),
    _i("c_kv_received_tokens", "tokens", "prompt tokens that arrived by KV transfer (decode)",
       "counters", S.KV_RECEIVED_TOKENS_TOTAL, "increase"),
)

# -- per instance: histogram quantiles and sums -------------------------------------------------
HISTOGRAM_STATS: Final = (
    _i("h_ttft_p50", "s", "median TTFT (histogram)", "histograms", S.TTFT_S, "p50"),
    _i("h_ttft_p90", "s", "TTFT p90 (histogram)", "histograms", S.TTFT_S, "p90"),
    _i("h_tpot_p50", "s", "median TPOT (histogram)", "histograms", S.TPOT_S, "p50"),
    _i("h_tpot_p90", "s", "TPOT p90 (histogram)", "histograms", S.TPOT_S, "p90"),
    _i("h_tpot_count", "observations", "TPOT observations", "histograms", S.TPOT_S, "count"),
    _i("h_tpot_sum", "s", "total of the TPOT observations", "histograms", S.TPOT_S, "sum"),
    _i("h_itl_p50", "s", "median inter-token latency (histogram)", "histograms", S.ITL_S, "p50"),
    _i("h_itl_p90", "s", "inter-token latency p90 (histogram)", "histograms", S.ITL_S, "p90"),
    _i("h_itl_sum", "s", "total inter-token latency", "histograms", S.ITL_S, "sum"),
    _i("h_itl_count", "observations", "inter-token latency observations", "histograms",
       S.ITL_S, "count"),
    _i("h_queue_s_p50", "s", "median queue time (histogram)", "histograms", S.QUEUE_S, "p50"),
    _i("h_queue_s_p90", "s", "queue time p90 (histogram)", "histograms", S.QUEUE_S, "p90"),
    _i("h_prefill_s_sum", "s", "total prefill time", "histograms", S.PREFILL_S, "sum"),
    _i("h_prefill_s_count", "observations", "prefills", "histograms", S.PREFILL_S, "count"),
    _i("h_xfer_s_p50", "s", "median KV-transfer time (histogram)", "histograms",
       S.KV_TRANSFER_S, "p50"),
    _i("h_xfer_s_p90", "s", "KV-transfer time p90 (histogram)", "histograms", S.KV_TRANSFER_S,
       "p90"),
    _i("h_xfer_s_sum", "s", "total KV-transfer time", "histograms", S.KV_TRANSFER_S, "sum"),
    _i("h_xfer_bytes_sum", "bytes", "KV bytes transferred", "histograms", S.KV_TRANSFER_BYTES,
       "sum"),
    _i("h_xfer_speed_p50", "bytes/s", "median KV-transfer speed (histogram)", "histograms",
       S.KV_TRANSFER_BYTES_PER_S, "p50"),
    _i("h_prompt_len_sum", "tokens", "prompt tokens (histogram sum)", "histograms",
       S.PROMPT_TOKENS, "sum"),
    _i("h_computed_sum", "tokens", "prefill-computed tokens (histogram sum)", "histograms",
       S.PREFILL_COMPUTED_TOKENS, "sum"),
)
# Request columns that make a histogram redundant (exact per-request figures exist).
HISTOGRAM_COVERED_BY: Final[Mapping[str, frozenset[str]]] = {
    S.TTFT_S: frozenset({"ttft_s", "prefill_instance", "decode_instance"}),
    S.TPOT_S: frozenset({"tpot_s", "decode_instance"}),
    S.ITL_S: frozenset({"tpot_s", "decode_instance"}),
    S.QUEUE_S: frozenset({"queue_s", "prefill_instance"}),
    S.PREFILL_S: frozenset({"prefill_s", "prefill_instance"}),
    S.KV_TRANSFER_S: frozenset({"kv_transfer_s", "prefill_instance", "decode_instance"}),
    S.KV_TRANSFER_BYTES: frozenset({"kv_bytes", "kv_transfer_s", "prefill_instance"}),
    S.KV_TRANSFER_BYTES_PER_S: frozenset({"kv_bytes", "kv_transfer_s", "prefill_instance"}),
    S.PROMPT_TOKENS: frozenset({"prompt_tokens", "prefill_s", "prefill_instance"}),
    S.PREFILL_COMPUTED_TOKENS: frozenset({"prompt_tokens", "prefill_s", "prefill_instance"}),
}

# -- per instance: derived figures and the chosen ones -----------------------------------------
DERIVED: Final = (
    _i("c_role_tokens", "tokens", "prompt tokens on prefill, generated tokens elsewhere",
       "derived", "c_prompt_tokens c_generation_tokens"),
    _i("g_role_tps", "tokens/s", "prompt throughput on prefill, generation elsewhere",
       "derived", "g_prompt_tps_mean g_gen_tps_mean"),
    _i("c_finished_share", "ratio", "share of the role's finished requests", "derived",
       "c_finished"),
    _i("c_role_tokens_share", "ratio", "share of the role's tokens", "derived", "c_role_tokens"),
    _i("g_role_tps_share", "ratio", "share of the role's throughput", "derived", "g_role_tps"),
    _i("c_hit_ratio", "ratio", "prefix-cache hits / queries", "derived",
       "c_prefix_hits c_prefix_queries"),
    _i("g_tpot_est", "s", "running / generation throughput (Little's law), not on prefill",
       "derived", "g_running_mean g_gen_tps_mean"),
    _i("h_xfer_achieved", "bytes/s", "KV bytes / transfer time from histogram sums", "derived",
       "h_xfer_bytes_sum h_xfer_s_sum"),
    _i("h_tpot_mean", "s", "mean TPOT from the histogram's sum / count (exact, no buckets)",
       "derived", "h_tpot_sum h_tpot_count"),
    _i("h_itl_mean", "s", "mean inter-token latency from the histogram's sum / count",
       "derived", "h_itl_sum h_itl_count"),
    _i("h_prefill_per_token", "s/token", "prefill time over computed (else prompt) tokens",
       "derived", "h_prefill_s_sum h_computed_sum h_prompt_len_sum"),
    _i("admission_wait_mean", "requests",
       "mean requests waiting for admission (waiting minus deferred)", "derived",
       "g_waiting_mean g_deferred_mean"),
    _i("remote_kv_wait_mean", "requests", "mean requests waiting for remote KV (the largest of "
       "kv-fetch, transfer queue, deferred)", "derived",
       "g_kv_fetch_mean g_transfer_queue_mean g_deferred_mean"),
)
CHOICES: Final = (
    Choice("traffic_share", "traffic_share_source", (
        ("req_share", "request records"),
        ("c_finished_share", "finished-request counters"),
        ("c_role_tokens_share", "token counters"),
        ("g_role_tps_share", "throughput in logs"))),
    Choice("traffic_count", "traffic_count_source", (
        ("req_count", "request records"), ("c_finished", "finished-request counters"))),
    Choice("hit_ratio", "hit_ratio_source", (
        ("c_hit_ratio", "prefix-cache counters"), ("g_hit_gauge_mean", "engine hit-rate gauge"),
        ("req_hit_ratio", "cached_tokens in request records"))),
    Choice("ttft_p50", "ttft_p50_source", (
        ("req_ttft_p50", "request records"), ("h_ttft_p50", "TTFT histogram"))),
    Choice("tpot_p50", "tpot_p50_source", (
        ("req_tpot_p50", "request records"), ("h_tpot_p50", "TPOT histogram"),
        ("h_itl_p50", "inter-token latency histogram"),
        ("g_itl_last_mean", "last inter-token latency gauge"),
        ("g_tpot_est", "running / generation throughput (Little's law)"))),
    # Exact in every source (records, histogram sum/count, Little's law): what severities that
    # must not depend on the source compare (a bucket-interpolated median is not).
    Choice("tpot_mean", "tpot_mean_source", (
        ("req_tpot_mean", "request records"), ("h_tpot_mean", "TPOT histogram sum/count"),
        ("h_itl_mean", "inter-token latency histogram sum/count"),
        ("g_tpot_est", "running / generation throughput (Little's law)"))),
    Choice("queue_s_p50", "queue_s_p50_source", (
        ("req_queue_p50", "request records"), ("h_queue_s_p50", "queue-time histogram"))),
    Choice("xfer_s_p50", "xfer_s_p50_source", (
        ("req_kv_transfer_p50", "request records"), ("h_xfer_s_p50", "KV-transfer histogram"),
        ("g_xfer_latency_gauge_mean", "KV-transfer gauge"),
        ("g_xfer_avg_s_log_mean", "KV transfer log lines"))),
    Choice("ttft_p90", "ttft_p90_source", (
        ("req_ttft_p90", "request records"), ("h_ttft_p90", "TTFT histogram"))),
    Choice("tpot_p90", "tpot_p90_source", (
        ("req_tpot_p90", "request records"), ("h_tpot_p90", "TPOT histogram"),
        ("h_itl_p90", "inter-token latency histogram"),
        ("g_itl_last_mean", "last inter-token latency gauge"))),
    Choice("queue_s_p90", "queue_s_p90_source", (
        ("req_queue_p90", "request records"), ("h_queue_s_p90", "queue-time histogram"))),
    Choice("xfer_s_p90", "xfer_s_p90_source", (
        ("req_kv_transfer_p90", "request records"), ("h_xfer_s_p90", "KV-transfer histogram"),
        ("g_xfer_latency_gauge_mean", "KV-transfer gauge"),
        ("g_xfer_avg_s_log_mean", "KV transfer log lines"))),
    # (from request records the cluster's bytes / seconds: ``Transfer.achieved_bytes_per_s``)
    Choice("xfer_bytes_per_s", "xfer_bytes_per_s_source", (
        ("h_xfer_achieved", "KV-transfer histograms"),
        ("h_xfer_speed_p50", "KV-transfer speed histogram"),
        ("g_xfer_speed_gauge_mean", "KV-transfer speed gauge"))),
    Choice("prefill_per_token_p50", "prefill_per_token_p50_source", (
        ("req_prefill_per_token_p50", "request records"),
        ("h_prefill_per_token", "prefill-time / token histograms (mean per token)"))),
    Choice("samples", "samples_source", (
        ("req_count", "request records"), ("h_tpot_count", "TPOT histogram"),
        ("h_prefill_s_count", "prefill-time histogram"))),
)


def _chosen() -> tuple[Spec, ...]:
    out = []
    for c in CHOICES:
        unit = _UNITS[c.options[0][0]]
        meaning = "best of: " + ", ".join(label for _, label in c.options)
        out.append(_i(c.name, unit, meaning, "precedence", " ".join(o for o, _ in c.options)))
        out.append(_i(c.source, "label", f"which input {c.name} came from", "precedence"))
    return tuple(out)


_UNITS: Final = {s.name: s.unit for s in (*REQUEST_FIGURES, *REQUEST_QUANTILES, *GAUGE_STATS,
                                           *COUNTERS, *HISTOGRAM_STATS, *DERIVED)}

REGISTRY: Final[Mapping[Table, Mapping[str, Spec]]] = {
    table: {s.name: s for s in (*INSTANCE_LABELS, *REQUEST_FIGURES, *REQUEST_QUANTILES,
                                *GAUGE_STATS, KV_FULL_FRAC, *COUNTERS, *HISTOGRAM_STATS,
                                *DERIVED, *_chosen(), *GAUGE_BINS, *REQUEST_BINS, *CLUSTER,
                                *NODES) if s.table == table}
    for table in TABLES
}


# Cluster figures of ``ClusterEvidence`` that are not table columns, by the name rules cite.
FIGURES: Final[Mapping[str, str]] = {
    "transfer": "KV-transfer latency, share of TTFT, achieved bandwidth, volume, congestion test",
    "slo": "TTFT/TPOT objectives, attainment and p90s",
    "slo_miss": "where the requests that missed the objective spent their time (per stage), "
                "how many arrived in the busiest bins, preemptions",
    "capacity": "the capacity model's estimate (recommended vs deployed counts, utilisation)",
    "mix": "change points of the length mix and arrivals",
    "events": "event counts per (event, instance) from logs",
    "failures": "KV-transfer failure, recompute and abort events and counters: counts, rate "
                "per bin, requests affected, NICs/peers/instances named, TTFT in failure bins",
    "arrival_rate": "requests per second",
    "queue_share": "median share of TTFT spent queueing, and the p90 wait",
    "sources": "the inputs read (their formats)",
}


def describe(reference: str) -> str:
    """``table.name`` or a figure name, as "name (unit): meaning"; raises when undeclared."""
    if reference in FIGURES:
        return f"{reference}: {FIGURES[reference]}"
    table, _, name = reference.partition(".")
    if table not in TABLES:
        raise UnknownEvidence(f"evidence reference {reference!r} is neither table.name nor a "
                              f"figure ({', '.join(FIGURES)})")
    s = spec(table, name)
    return f"{reference} ({s.unit}): {s.meaning}"


def spec(table: Table, name: str) -> Spec:
    """The declaration of ``name`` in ``table``; ``UnknownEvidence`` when it has none."""
    try:
        return REGISTRY[table][name]
    except KeyError:
        raise UnknownEvidence(f"no {table} evidence named {name!r} in "
                              f"pdprobe.analysis.evidence.registry") from None


def choice(name: str) -> Choice:
    """The precedence declaration of a chosen per-instance quantity."""
    for c in CHOICES:
        if c.name == name:
            return c
    raise UnknownEvidence(f"no chosen evidence named {name!r}")


def source_column(name: str) -> str | None:
    """The column recording which input a chosen quantity came from (None if not chosen)."""
    return next((c.source for c in CHOICES if c.name == name), None)


def _check() -> None:
    """Names unique per table; every choice option and derivation declared: fails at import."""
    every = [s for t in TABLES for s in REGISTRY[t].values()]
    declared = sum(1 for _ in (*INSTANCE_LABELS, *REQUEST_FIGURES, *REQUEST_QUANTILES,
                               *GAUGE_STATS, KV_FULL_FRAC, *COUNTERS, *HISTOGRAM_STATS,
                               *DERIVED, *_chosen(), *GAUGE_BINS, *REQUEST_BINS, *CLUSTER,
                               *NODES))
    if len(every) != declared:
        raise RuntimeError("duplicate evidence name in pdprobe.analysis.evidence.registry")
    for c in CHOICES:
        for option, _label in c.options:
            spec("instances", option)


_check()
