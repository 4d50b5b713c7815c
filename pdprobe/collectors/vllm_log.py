"""vLLM log lines: periodic stats, ``KV Transfer metrics:`` and NIXL warnings/errors.

Formats (docs/inputs/logs.md, vLLM), every released version: the V0 line
(``Running/Swapped/Pending``, CPU KV cache usage, trailing period) and its separate
``Prefix cache hit rate: GPU: x%, CPU: y%`` line; early V1 without ``Engine NNN: ``; 0.8.5-0.11;
0.14 (optional Preemptions, always Prefix cache hit rate); 0.33 (Deferred, KV fetch stages,
Preemptions, ``<DEVICE> KV cache usage``, optional Prefix/Corrupted/External/MM parts in that
order); ``N Engines Aggregated:``. The logger prefix is never parsed here (the message is found
anywhere in the line), so 0.6.x, 0.8.5, 0.11+ ``(APIServer pid=N)``, VLLM_LOGGING_PREFIX, DEBUG
file paths and GitHub-mangled ``[[loggers.py:259](http://loggers.py:259/)]`` all work.

The parse functions are pure (lines in, one row per understood line out, with its input
position in ``row`` and a malformed-value message in ``error``); ``assemble`` maps the rows to
signals. ``engine_log`` adds timestamps and the instance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe import signals as S
from pdprobe.collectors.log_toolkit import (
    MIB,
    MIN_EVIDENCE_LINES,
    ROLE_FROM_ENGINE_FIELDS,
    FamilyOutput,
    LineKind,
    SignalSpec,
    as_lines,
    combine_subseries,
    extract,
    first_bad,
    group,
    interval_events,
    literal_route,
    matched,
    numeric,
    parse_key_values,
)
from pdprobe.collectors.vllm_events import ABORT_ROUTE, NIXL_MARKERS, dedup_failures, parse_events
from pdprobe.dataset import ROLE_FROM_EVIDENCE
from pdprobe.signals import Role

ENGINE: Final = "vllm"
# A prefill-only instance emits one token per request, so its generation throughput is prompt
# throughput / mean prompt length: under 2 % for prompts of 50+ tokens. Colocated serving
# generates far more than that share.
PREFILL_GEN_SHARE_MAX: Final = 0.02
# A decode instance of a P/D pair computes no prompt: its KV arrives through the connector, so
# its prompt throughput stays near 0 while it generates (the reference's decode lines read
# "Avg prompt throughput: 0.0 tokens/s"). Colocated serving computes every prompt itself, and
# prompts are longer than outputs, so its prompt throughput is a large share of generation.
DECODE_PROMPT_SHARE_MAX: Final = 0.02

_V = r"[^ ,%]+"  # a value: anything up to the next separator, validated as a number afterwards
_STATS: Final = (
    r"(?:Engine (?P<engine>\d+): |(?P<agg>\d+) Engines Aggregated: )?"
    rf"Avg prompt throughput: (?P<prompt_tps>{_V}) tokens/s, "
    rf"Avg generation throughput: (?P<gen_tps>{_V}) tokens/s, "
    rf"Running: (?P<running>{_V}) reqs, "
    rf"(?:Swapped: (?P<swapped>{_V}) reqs, Pending: (?P<pending>{_V}) reqs, "
    rf"|Waiting: (?P<waiting>{_V}) reqs, )"
    rf"(?:Deferred: (?P<deferred>{_V}) reqs, )?"
    rf"(?:KV fetch: (?P<fetch_start>{_V}) waiting to start, (?P<fetch_progress>{_V}) in progress, "
    rf"(?P<fetch_done>{_V}) completed waiting, )?"
    rf"(?:Preemptions: (?P<preemptions>{_V}), )?"
    rf"(?P<device>[A-Za-z][A-Za-z0-9_]*) KV cache usage: (?P<kv_pct>{_V})%"
    rf"(?:, CPU KV cache usage: (?P<cpu_kv_pct>{_V})%)?"
    rf"(?:, Prefix cache hit rate: (?P<prefix_pct>{_V})%)?"
    rf"(?:, Corrupted: (?P<corrupted>{_V}) reqs)?"
    rf"(?:, External prefix cache hit rate: (?P<external_pct>{_V})%)?"
    rf"(?:, MM cache hit rate: (?P<mm_pct>{_V})%)?"
)
_STATS_NUMBERS: Final = ("prompt_tps", "gen_tps", "running", "waiting", "swapped", "pending",
                         "deferred", "fetch_start", "fetch_progress", "fetch_done", "preemptions",
                         "kv_pct", "cpu_kv_pct", "prefix_pct", "corrupted", "external_pct",
                         "mm_pct")
# How the log names each field, for messages about malformed values.
_STATS_LABELS: Final = {
    "prompt_tps": "Avg prompt throughput", "gen_tps": "Avg generation throughput",
    "running": "Running", "waiting": "Waiting", "swapped": "Swapped", "pending": "Pending",
    "deferred": "Deferred", "fetch_start": "KV fetch waiting to start",
    "fetch_progress": "KV fetch in progress", "fetch_done": "KV fetch completed waiting",
    "preemptions": "Preemptions", "kv_pct": "KV cache usage", "cpu_kv_pct": "CPU KV cache usage",
    "prefix_pct": "Prefix cache hit rate", "corrupted": "Corrupted",
    "external_pct": "External prefix cache hit rate", "mm_pct": "MM cache hit rate",
}
_V0_PREFIX: Final = rf"Prefix cache hit rate: GPU: (?P<gpu>{_V})%, CPU: (?P<cpu>{_V})%"
_KV_LINE: Final = r"KV Transfer metrics: (?P<body>.*)$"
# The never-merged draft (vllm PR 20443) printed a dataclass repr: not understood on purpose.
_KV_DRAFT: Final = "KVTransferAggregatedStats("
KV_KEYS: Final[Mapping[str, tuple[str, float]]] = {
    "num_successful_transfers": ("transfers", 1.0),  # 0.11.0
    "Num successful transfers": ("transfers", 1.0),
    "Avg xfer time (ms)": ("avg_xfer_s", 1e-3),
    "P90 xfer time (ms)": ("p90_xfer_s", 1e-3),
    "Avg post time (ms)": ("avg_post_s", 1e-3),
    "P90 post time (ms)": ("p90_post_s", 1e-3),
    "Avg MB per transfer": ("avg_bytes", MIB),  # MB is MiB
    "Throughput (MB/s)": ("throughput_bytes_per_s", MIB),
    "Avg per-transfer throughput (MB/s)": ("throughput_bytes_per_s", MIB),  # proposed, PR 48368
    "Avg number of descriptors": ("avg_descriptors", 1.0),
    "Num failed transfers": ("failed_transfers", 1.0),  # 0.33: transfer + handshake + notif
    "Num failed recvs": ("failed_recvs", 1.0),  # 0.33 Mooncake connector
    "Num KV expired reqs": ("expired", 1.0),
    "Num notifs after expiry": ("notifs_after_expiry", 1.0),
}

STATS_SPECS: Final = (
    SignalSpec("running", S.REQUESTS_RUNNING),
    SignalSpec("waiting", S.REQUESTS_WAITING),
    SignalSpec("deferred", S.REQUESTS_DEFERRED, zero_if_absent=True),
    SignalSpec("kv_fetch_waiting", S.KV_FETCH_WAITING, zero_if_absent=True),
    SignalSpec("kv_usage", S.KV_USAGE_RATIO, combine="mean"),
    SignalSpec("prefix_hit", S.PREFIX_HIT_RATIO, combine="mean"),
    SignalSpec("external_hit", S.EXTERNAL_HIT_RATIO, combine="mean"),
    SignalSpec("prompt_tps", S.PROMPT_THROUGHPUT_TPS),
    SignalSpec("gen_tps", S.GENERATION_THROUGHPUT_TPS),
    SignalSpec("preemptions", S.PREEMPTIONS_TOTAL, kind=S.COUNTER, per_interval=True,
               zero_if_absent=True),
)
PREFIX_SPECS: Final = (SignalSpec("prefix_hit", S.PREFIX_HIT_RATIO, combine="mean"),)
KV_SPECS: Final = (
    SignalSpec("transfers", S.KV_TRANSFERS_TOTAL, kind=S.COUNTER, per_interval=True,
               zero_if_absent=True),
    SignalSpec("failures", S.KV_TRANSFER_FAILURES_TOTAL, kind=S.COUNTER, per_interval=True,
               zero_if_absent=True),
    SignalSpec("expired", S.KV_EXPIRED_TOTAL, kind=S.COUNTER, per_interval=True,
               zero_if_absent=True),
    SignalSpec("avg_xfer_s", S.KV_TRANSFER_AVG_S_LOG, combine="mean"),
    SignalSpec("p90_xfer_s", S.KV_TRANSFER_P90_S_LOG, combine="mean"),
    SignalSpec("avg_bytes", S.KV_TRANSFER_AVG_BYTES_LOG, combine="mean"),
    SignalSpec("throughput_bytes_per_s", S.KV_TRANSFER_THROUGHPUT_LOG, combine="mean"),
)


def parse_stats(lines: Sequence[str] | pa.Array) -> pd.DataFrame:
    """One row per periodic stats line, values in base units (ratios 0-1, requests, tokens/s).

    ``waiting`` is ``Waiting`` (0.33: including deferred) or V0's ``Pending``;
    ``kv_fetch_waiting`` sums the three KV-fetch stages; ``engine`` is ``"000"``..., ``""`` for
    V0 and early V1; ``engines_aggregated`` is N of ``N Engines Aggregated:``.
    """
    arr = as_lines(lines)
    m = extract(arr, _STATS)
    ok = matched(m)
    rows = np.flatnonzero(ok)
    sub = m.filter(pa.array(ok))
    raw = {name: group(sub, name) for name in _STATS_NUMBERS}
    values: dict[str, np.ndarray] = {}
    bad: dict[str, np.ndarray] = {}
    for name in _STATS_NUMBERS:
        values[name], bad[name] = numeric(raw[name])
    engine = np.asarray(group(sub, "engine").to_numpy(zero_copy_only=False), dtype=object)
    aggregated, _ = numeric(group(sub, "agg"))
    v0 = ~np.isnan(values["pending"])
    fetch = np.stack([values["fetch_start"], values["fetch_progress"], values["fetch_done"]])
    fmt = np.where(v0, "v0", np.where(~np.isnan(aggregated), "aggregated",
                                      np.where(engine != "", "v1", "v1-early")))
    return pd.DataFrame({
        "row": rows,
        "error": first_bad(_STATS_NUMBERS, raw, bad, len(rows), _STATS_LABELS),
        "format": fmt,
        "engine": engine,
        "engines_aggregated": aggregated,
        "device": np.asarray(group(sub, "device").to_numpy(zero_copy_only=False), dtype=object),
        "prompt_tps": values["prompt_tps"],
        "gen_tps": values["gen_tps"],
        "running": values["running"],
        "waiting": np.where(v0, values["pending"], values["waiting"]),
        "swapped": values["swapped"],
        "deferred": values["deferred"],
        "kv_fetch_waiting_to_start": values["fetch_start"],
        "kv_fetch_in_progress": values["fetch_progress"],
        "kv_fetch_completed_waiting": values["fetch_done"],
        "kv_fetch_waiting": np.where(np.isnan(fetch).all(axis=0), np.nan,
                                     np.nansum(fetch, axis=0)),
        "preemptions": values["preemptions"],
        "kv_usage": values["kv_pct"] / 100.0,
        "cpu_kv_usage": values["cpu_kv_pct"] / 100.0,
        "prefix_hit": values["prefix_pct"] / 100.0,
        "corrupted": values["corrupted"],
        "external_hit": values["external_pct"] / 100.0,
        "mm_hit": values["mm_pct"] / 100.0,
    })


def parse_prefix_cache(lines: Sequence[str] | pa.Array) -> pd.DataFrame:
    """V0's separate ``Prefix cache hit rate: GPU: x%, CPU: y%`` lines, as ratios."""
    arr = as_lines(lines)
    m = extract(arr, _V0_PREFIX)
    ok = matched(m)
    sub = m.filter(pa.array(ok))
    raw = {"gpu": group(sub, "gpu"), "cpu": group(sub, "cpu")}
    gpu, gpu_bad = numeric(raw["gpu"])
    cpu, cpu_bad = numeric(raw["cpu"])
    rows = np.flatnonzero(ok)
    return pd.DataFrame({
        "row": rows,
        "error": first_bad(("gpu", "cpu"), raw, {"gpu": gpu_bad, "cpu": cpu_bad}, len(rows),
                           {"gpu": "GPU prefix cache hit rate", "cpu": "CPU prefix cache hit rate"}),
        "prefix_hit": gpu / 100.0,
        "cpu_prefix_hit": cpu / 100.0,
    })


def parse_kv_transfer(lines: Sequence[str] | pa.Array) -> pd.DataFrame:
    """``KV Transfer metrics: k=v, ...`` lines of every version; unknown keys are tolerated.

    Times are in seconds, sizes in bytes (MB is MiB), ``failures`` = failed transfers + failed
    receives. A line with no known key (for example the draft ``KVTransferAggregatedStats(...)``
    form) is not understood and left out.
    """
    arr = as_lines(lines)
    m = extract(arr, _KV_LINE)
    body = group(m, "body")
    draft = np.asarray(pc.starts_with(body, _KV_DRAFT).to_numpy(zero_copy_only=False), dtype=bool)
    kv = parse_key_values(body, separator=", ", assign="=", keys=KV_KEYS)
    ok = matched(m) & ~draft & (kv.known > 0)
    rows = np.flatnonzero(ok)
    frame = pd.DataFrame({"row": rows, "error": [kv.errors[i] for i in rows]})
    for column, values in kv.columns.items():
        frame[column] = values[rows]
    failures = np.stack([frame["failed_transfers"].to_numpy(), frame["failed_recvs"].to_numpy()])
    frame["failures"] = np.where(np.isnan(failures).all(axis=0), np.nan,
                                 np.nansum(failures, axis=0))
    frame["unknown_keys"] = [kv.unknown_per_row[i] for i in rows]
    return frame


def assemble(frames: Mapping[str, pd.DataFrame]) -> FamilyOutput:
    """Instance signals, events and role hints from the parsed, timestamped vLLM lines."""
    metrics: list[pd.DataFrame] = []
    events: list[pd.DataFrame] = []
    hints: list[tuple[Role, str, int]] = []
    notes: list[str] = []
    used = 0
    stats = frames.get("vllm-stats")
    if stats is not None and len(stats):
        aggregated = (stats["format"] == "aggregated").to_numpy()
        if aggregated.any() and (~aggregated).any():
            notes.append(f"vLLM: {int((~aggregated).sum())} per-engine stats lines left out; the "
                         f"'Engines Aggregated' lines already cover them")
            stats = stats[aggregated]
        stats = stats.assign(sub=np.where(stats["format"] == "aggregated", "agg",
                                          stats["engine"].astype(str)))
        engines = sorted(e for e in stats["engine"].unique() if e)
        if len(engines) > 1:
            notes.append(f"vLLM: stats of engines {', '.join(engines)} combined per interval "
                         f"(requests and throughput summed, KV usage and hit rates averaged)")
        used += len(stats)
        metrics.append(combine_subseries(stats, STATS_SPECS))
        events.append(interval_events(stats, "preemptions", S.EV_PREEMPTION, _preemption_detail))
        hints.extend(_stats_hints(stats))
    prefix = frames.get("vllm-prefix-cache")
    if prefix is not None and len(prefix):
        used += len(prefix)
        metrics.append(combine_subseries(prefix.assign(sub=""), PREFIX_SPECS))
    kv = frames.get("vllm-kv-transfer")
    if kv is not None and len(kv):
        used += len(kv)
        metrics.append(combine_subseries(kv.assign(sub=""), KV_SPECS))
        unknown = int((kv["unknown_keys"] > 0).sum())
        if unknown:
            notes.append(f"vLLM: {unknown} 'KV Transfer metrics' line(s) carry keys pdprobe does "
                         f"not know; those keys were ignored")
        if kv["throughput_bytes_per_s"].notna().any():
            notes.append("vLLM 'Throughput (MB/s)' divides bytes by the sum of per-transfer "
                         "times, so it under-reports by about the transfer concurrency "
                         "(vllm issue 48224)")
    nixl = frames.get("vllm-nixl")
    if nixl is not None and len(nixl):
        used += int(nixl["line"].nunique())
        events.append(dedup_failures(nixl)[["ts", "event", "detail", "line"]])
    return FamilyOutput(
        metrics=pd.concat(metrics, ignore_index=True) if metrics else None,
        events=pd.concat(events, ignore_index=True) if events else None,
        hints=tuple(hints),
        notes=tuple(notes),
        lines_used=used,
    )


def _preemption_detail(hit: pd.DataFrame) -> pd.Series:
    texts = [f"{count:g} preemption(s) in the stats interval" + (f" (Engine {engine})" if engine
                                                                  else "")
             for count, engine in zip(hit["preemptions"], hit["engine"], strict=True)]
    return pd.Series(texts, index=hit.index, dtype=object)


def _stats_hints(stats: pd.DataFrame) -> list[tuple[Role, str, int]]:
    hints: list[tuple[Role, str, int]] = []
    if stats["kv_fetch_waiting"].notna().any():
        hints.append(("decode", "vLLM stats lines report 'KV fetch:' (only a decode instance "
                                "waits for remote KV)", ROLE_FROM_ENGINE_FIELDS))
    active = stats[(stats["prompt_tps"] > 0) | (stats["gen_tps"] > 0)]
    if len(active) >= MIN_EVIDENCE_LINES:
        prompt = float(active["prompt_tps"].sum())
        gen = float(active["gen_tps"].sum())
        if prompt > 0 and gen <= PREFILL_GEN_SHARE_MAX * prompt:
            hints.append(("prefill", f"vLLM generation throughput is {gen / prompt:.2%} of prompt "
                                     f"throughput (a prefill instance emits one token per "
                                     f"request)", ROLE_FROM_EVIDENCE))
        elif gen > 0 and prompt <= DECODE_PROMPT_SHARE_MAX * gen:
            hints.append(("decode", f"vLLM prompt throughput is {prompt / gen:.2%} of generation "
                                    f"throughput over {len(active)} active stats lines (a decode "
                                    f"instance receives prompts' KV instead of computing it)",
                          ROLE_FROM_EVIDENCE))
    return hints


LINE_KINDS: Final = (
    LineKind("vllm-stats", ENGINE, "vLLM stats", r"Avg prompt throughput: ", parse_stats,
             high_volume=True),
    LineKind("vllm-prefix-cache", ENGINE, "vLLM prefix-cache", r"Prefix cache hit rate: GPU: ",
             parse_prefix_cache),
    LineKind("vllm-kv-transfer", ENGINE, "vLLM 'KV Transfer metrics'", r"KV Transfer metrics",
             parse_kv_transfer),
    LineKind("vllm-nixl", ENGINE, "vLLM KV-transfer warning/error",
             literal_route(NIXL_MARKERS) + ABORT_ROUTE, parse_events),
)
