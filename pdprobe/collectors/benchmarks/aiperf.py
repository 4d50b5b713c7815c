"""AIPerf ``profile_export.jsonl`` (per-request records) as request records.

Upstream writer: ai-dynamo/aiperf ``aiperf/post_processors/record_export_results_processor.py``
writes one ``MetricRecordInfo.model_dump_json()`` per line (``aiperf/common/models/
record_models.py``): ``metadata`` (``x_request_id``, ``request_start_ns``/``request_end_ns`` as
``time.time_ns()``, ``worker_id``, ``benchmark_phase``, ``was_cancelled``), ``metrics`` (tag ->
``{"value", "unit"}`` in display units, ms for latencies) and ``error`` (``code``, ``type``,
``message``). Documented in ``docs/tutorials/working-with-profile-exports.md``.

Mapping: ``request_start_ns`` -> ``arrival_ts`` (absolute); ``input_sequence_length`` (or
``error_isl`` on failures) -> prompt; ``output_sequence_length`` -> output;
``time_to_first_token`` -> TTFT; ``inter_token_latency`` ((latency - TTFT) / (OSL - 1)) -> TPOT;
``request_latency`` -> e2e; ``inter_chunk_latency`` (list) -> the ITL spread note. Warmup
records are left out. ``worker_id`` is AIPerf's own client worker, not a serving instance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.benchmarks.base import (
    LATENCY_SECONDS_MAX,
    NO_INSTANCES,
    Ragged,
    Runs,
    as_dict,
    error_status,
    itl_to_seconds,
    json_lines,
    num_array,
    to_partial,
    to_seconds,
)
from pdprobe.collectors.benchmarks.detect import AIPERF
from pdprobe.collectors.io import read_all_bytes
from pdprobe.dataset import Partial

# aiperf/common/enums/metric_enums.py MetricTimeUnit tags -> seconds
UNIT_S: Final = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0}
WARMUP_PHASE: Final = "warmup"


def _metric(metrics: Any, *tags: str) -> tuple[Any, str]:
    if isinstance(metrics, dict):
        for tag in tags:
            m = metrics.get(tag)
            if isinstance(m, dict) and "value" in m:
                return m["value"], str(m.get("unit") or "")
    return None, ""


def _seconds(pairs: list[tuple[Any, str]], what: str, notes: list[str]) -> np.ndarray:
    """Values in seconds by their own unit; values without a unit by magnitude."""
    values = num_array([v if not isinstance(v, list) else None for v, _ in pairs])
    scale = np.array([UNIT_S.get(u, np.nan) for _, u in pairs], dtype=np.float64)
    known = np.isfinite(scale)
    out = values * np.where(known, scale, 1.0)
    if (~known & np.isfinite(values)).any():
        out[~known] = to_seconds(values[~known], f"{what} without a unit", LATENCY_SECONDS_MAX,
                                 notes)
    return out


def read_aiperf(path: Path, ctx: ReadContext) -> Partial:
    """Read an AIPerf per-request export into request records."""
    ctx.report(f"reading {path.name}", 0.0)
    warnings: list[str] = []
    notes: list[str] = []
    records = [r for r in json_lines(path, read_all_bytes(path), "AIPerf record", warnings)
               if isinstance(r, dict)]
    metas = [as_dict(r.get("metadata")) for r in records]
    warm = np.array([m.get("benchmark_phase") == WARMUP_PHASE for m in metas], dtype=bool)
    if warm.any():
        notes.append(f"{int(warm.sum())} warmup record(s) left out")
        records = [r for r, w in zip(records, warm, strict=True) if not w]
        metas = [m for m, w in zip(metas, warm, strict=True) if not w]
    metrics = [r.get("metrics") for r in records]
    start_ns = num_array([m.get("request_start_ns") for m in metas])
    prompt = num_array([_metric(m, "input_sequence_length", "error_isl")[0] for m in metrics])
    output = num_array([_metric(m, "output_sequence_length", "output_token_count")[0]
                        for m in metrics])
    errors = []
    for r, m in zip(records, metas, strict=True):
        err = r.get("error")
        if isinstance(err, dict):
            errors.append(f"{err.get('code') or ''} {err.get('type') or ''} "
                          f"{err.get('message') or ''}".strip() or "error")
        elif m.get("was_cancelled"):
            errors.append("cancelled")
        else:
            errors.append("")
    status = error_status(errors)
    cancelled = np.array([bool(m.get("was_cancelled")) for m in metas], dtype=bool)
    status[cancelled] = "aborted"
    ttft = _seconds([_metric(m, "time_to_first_token") for m in metrics], "time_to_first_token",
                    notes)
    tpot = _seconds([_metric(m, "inter_token_latency") for m in metrics], "inter_token_latency",
                    notes)
    e2e = _seconds([_metric(m, "request_latency") for m in metrics], "request_latency", notes)
    chunks = [_metric(m, "inter_chunk_latency") for m in metrics]
    itl = Ragged.from_lists([v for v, _ in chunks])
    unit = next((u for v, u in chunks if isinstance(v, list) and u), "")
    itl = itl.scaled(UNIT_S[unit]) if unit in UNIT_S else itl_to_seconds(
        itl, "inter_chunk_latency", notes)
    ids = np.array([m.get("x_request_id") for m in metas], dtype=object)
    notes.append("arrival_ts from request_start_ns (wall clock, ns)")
    runs = Runs(arrival_ts=start_ns / 1e9, prompt_tokens=prompt, output_tokens=output,
                status=status, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, request_id=ids, itl_s=itl,
                notes=notes, warnings=warnings)
    return to_partial(path, AIPERF, runs, NO_INSTANCES + "; worker_id is AIPerf's client "
                      "worker, not a serving instance")
