"""Which source column is which canonical request column: aliases, units, layouts.

Three layouts are recognised from the column names (see docs/inputs/requests.md): the canonical
columns of docs/contract.md with a small alias table (``input_tokens`` -> ``prompt_tokens``,
``ttft_ms`` -> ``ttft_s`` / 1000, ...); Azure LLM inference traces (``TIMESTAMP, ContextTokens,
GeneratedTokens``); Mooncake traces (``timestamp`` in ms, ``input_length``, ``output_length``,
``hash_ids``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pdprobe.errors import InputError

if TYPE_CHECKING:

    pass

# --- column aliases ---------------------------------------------------------------------------
# Names are compared after normalisation: lower case, spaces and hyphens turned into "_".
# The first name present wins, so the canonical name always beats an alias.
ALIASES: Final[Mapping[str, tuple[str, ...]]] = {
    "arrival_ts": ("arrival_ts", "arrival_time", "arrival", "arrived_at", "timestamp", "ts",
                   "time", "start_ts", "start_time", "created_at", "request_time"),
    "prompt_tokens": ("prompt_tokens", "input_tokens", "input_length", "contexttokens",
                      "context_tokens", "prompt_len", "prompt_length", "input_len",
                      "num_prefill_tokens", "request_tokens", "isl"),
    "output_tokens": ("output_tokens", "output_length", "generatedtokens", "generated_tokens",
                      "completion_tokens", "output_len", "num_decode_tokens", "response_tokens",
                      "osl"),
    "request_id": ("request_id", "req_id", "requestid", "id"),
    "cached_tokens": ("cached_tokens", "cached_prompt_tokens", "prefix_hit_tokens",
                      "cache_hit_tokens", "num_cached_tokens"),
    "prefill_instance": ("prefill_instance", "prefill_worker", "prefill_host", "prefill_node"),
    "decode_instance": ("decode_instance", "decode_worker", "decode_host", "decode_node"),
    "kv_bytes": ("kv_bytes", "kv_transfer_bytes", "kv_size_bytes"),
    "status": ("status", "finish_status", "outcome", "result", "finish_reason"),
}
# Timing columns: base names, each accepted with a unit suffix (``ttft_ms``) or bare (seconds).
TIMING_BASES: Final[Mapping[str, tuple[str, ...]]] = {
    "queue_s": ("queue", "queue_time", "queue_delay", "waiting_time"),
    "prefill_s": ("prefill", "prefill_time", "prefill_latency"),
    "kv_transfer_s": ("kv_transfer", "kv_transfer_time", "kv_transfer_latency", "transfer_time"),
    "ttft_s": ("ttft", "time_to_first_token"),
    "tpot_s": ("tpot", "time_per_output_token", "mean_itl"),
    "e2e_s": ("e2e", "e2e_latency", "e2el", "latency", "request_latency"),
}
# A bare base name (no unit suffix) is read as seconds only when it plainly names a duration:
# a column called "prefill" or "queue" may just as well hold an instance name or a flag.
TIMING_BARE_OK: Final = frozenset({"ttft", "tpot", "time_to_first_token", "time_per_output_token",
                                   "mean_itl", "e2el", "e2e_latency", "latency",
                                   "request_latency", "queue_time", "queue_delay", "waiting_time",
                                   "prefill_time", "prefill_latency", "kv_transfer_time",
                                   "kv_transfer_latency", "transfer_time"})
# Suffix -> factor to seconds. Checked in this order so "_ms" is not read as "_s".
TIME_SUFFIXES: Final = (("_ms", 1e-3), ("_us", 1e-6), ("_ns", 1e-9), ("_seconds", 1.0),
                        ("_sec", 1.0), ("_s", 1.0), ("", 1.0))
# An arrival column named with one of these suffixes says its own unit.
ARRIVAL_UNIT_SUFFIXES: Final = (("_ms", 1e-3), ("_us", 1e-6), ("_ns", 1e-9))

NUMERIC_COLUMNS: Final = ("prompt_tokens", "output_tokens", "cached_tokens", "kv_bytes",
                          *TIMING_BASES)
STRING_COLUMNS: Final = ("request_id", "prefill_instance", "decode_instance", "status")
LOW_CARDINALITY: Final = frozenset({"prefill_instance", "decode_instance", "status"})

# Layout names (also SourceInfo.format for the public traces).
AZURE: Final = "azure-trace"
MOONCAKE: Final = "mooncake-trace"
RECORDS: Final = "records"


@dataclass(frozen=True)
class ColumnMap:
    """Which source column feeds which canonical column, and at what scale."""

    sources: Mapping[str, str]  # canonical -> original column name
    scales: Mapping[str, float]  # canonical timing/arrival column -> factor to seconds
    layout: str
    ignored: tuple[str, ...]
    hash_ids: str | None = None  # original name of a Mooncake hash_ids column


def _normalise(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip().lstrip("\ufeff").strip().lower())


def _timing_names(canonical: str) -> list[tuple[str, float]]:
    names = [(canonical, 1.0)]
    for base in TIMING_BASES[canonical]:
        names.extend((base + suffix, factor) for suffix, factor in TIME_SUFFIXES
                     if suffix or base in TIMING_BARE_OK)
    return names


def map_columns(names: Sequence[str]) -> ColumnMap:
    """Decide the layout and the canonical meaning of each source column."""
    by_norm: dict[str, str] = {}
    for name in names:
        by_norm.setdefault(_normalise(name), name)
    sources: dict[str, str] = {}
    scales: dict[str, float] = {}
    norms = set(by_norm)
    if {"timestamp", "contexttokens", "generatedtokens"} <= norms:
        layout = AZURE
    elif {"timestamp", "input_length", "output_length"} <= norms and "arrival_ts" not in norms:
        layout = MOONCAKE
    else:
        layout = RECORDS
    for canonical, aliases in ALIASES.items():
        for alias in aliases:
            if alias in by_norm:
                sources[canonical] = by_norm[alias]
                break
    if "arrival_ts" not in sources:
        for alias in ALIASES["arrival_ts"]:
            hit = next(((alias + sfx, f) for sfx, f in ARRIVAL_UNIT_SUFFIXES
                        if alias + sfx in by_norm), None)
            if hit:
                sources["arrival_ts"] = by_norm[hit[0]]
                scales["arrival_ts"] = hit[1]
                break
    elif layout == MOONCAKE:
        scales["arrival_ts"] = 1e-3  # Mooncake timestamps are integer milliseconds
    for canonical in TIMING_BASES:
        for alias, factor in _timing_names(canonical):
            if alias in by_norm:
                sources[canonical] = by_norm[alias]
                scales[canonical] = factor
                break
    hash_ids = by_norm.get("hash_ids")
    used = set(sources.values()) | ({hash_ids} if hash_ids else set())
    ignored = tuple(n for n in names if n not in used)
    return ColumnMap(sources, scales, layout, ignored, hash_ids)


def _require(path: Path, cmap: ColumnMap, found: Sequence[str]) -> None:
    missing = [c for c in ("arrival_ts", "prompt_tokens", "output_tokens") if c not in cmap.sources]
    if not missing:
        return
    what = "; ".join(f"{c} (accepted: {', '.join(ALIASES[c][:6])}, ...)" for c in missing)
    shown = ", ".join(list(found)[:20]) or "none"
    raise InputError(
        f"{path}: no column for {what}; found columns: {shown}",
        hint="rename the columns or see docs/inputs/requests.md for the accepted names",
    )
