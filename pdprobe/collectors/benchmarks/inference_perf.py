"""inference-perf ``per_request_lifecycle_metrics.json`` as request records.

Upstream writer: kubernetes-sigs/inference-perf ``inference_perf/reportgen/base.py``
(``report.request_lifecycle.per_request``: a list of ``{start_time, end_time, request,
response, info, error}``), saved by ``inference_perf/client/filestorage/local.py`` with
``json.dumps(..., indent=2)``. ``info`` is ``InferenceInfo.model_dump()``
(``inference_perf/apis/base.py``), whose shape changed: ``input_tokens``, ``output_tokens`` and
``output_token_times`` at the top (2025), under ``response_info`` (early 2026), then under
``response_metrics`` with ``request_metrics.text.input_tokens`` (``input_tokens`` still mirrored
at the top). ``error`` is ``{error_type, error_msg}`` (``HTTP Error 504``, exception names).

Times are ``time.perf_counter()`` values (a clock with an arbitrary origin): arrivals are
anchored so the last request ends at the file's modification time (a guess, noted; spacing,
rates and bursts are exact). TTFT is the first token time - start, the ITLs are the gaps between
token times, e2e is end - start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.benchmarks.base import (
    NO_INSTANCES,
    Ragged,
    Runs,
    as_dict,
    error_status,
    file_end_ts,
    load_json_document,
    num_array,
    to_partial,
)
from pdprobe.collectors.benchmarks.detect import INFERENCE_PERF
from pdprobe.collectors.io import read_all_bytes
from pdprobe.dataset import Partial
from pdprobe.errors import InputError


def _response(info: dict[str, Any]) -> dict[str, Any]:
    for key in ("response_metrics", "response_info"):
        inner = info.get(key)
        if isinstance(inner, dict):
            return inner
    return info


def _input_tokens(info: dict[str, Any]) -> Any:
    if info.get("input_tokens") is not None:
        return info["input_tokens"]
    return as_dict(as_dict(info.get("request_metrics")).get("text")).get("input_tokens")


def read_inference_perf(path: Path, ctx: ReadContext) -> Partial:
    """Read inference-perf per-request lifecycle metrics into request records."""
    ctx.report(f"reading {path.name}", 0.0)
    doc = load_json_document(path, read_all_bytes(path), "inference-perf per-request")
    items = [x for x in doc if isinstance(x, dict)] if isinstance(doc, list) else []
    if not items:
        raise InputError(f"{path}: no request in this inference-perf per-request report",
                         hint="pass per_request_lifecycle_metrics.json")
    infos = [as_dict(x.get("info")) for x in items]
    responses = [_response(i) for i in infos]
    start = num_array([x.get("start_time") for x in items])
    end = num_array([x.get("end_time") for x in items])
    times = Ragged.from_lists([r.get("output_token_times") for r in responses])
    has = times.lengths > 0
    offsets = np.concatenate([[0], np.cumsum(times.lengths)[:-1]]).astype(np.int64)
    first = np.full(start.size, np.nan)
    first[has] = times.values[offsets[has]]
    # gaps between consecutive token times, without crossing from one request to the next
    gaps = np.diff(times.values)
    inside = np.ones(gaps.size, dtype=bool)
    boundaries = np.cumsum(times.lengths)[:-1] - 1
    inside[boundaries[(boundaries >= 0) & (boundaries < gaps.size)]] = False
    itl = Ragged(gaps[inside] if gaps.size else gaps, np.maximum(times.lengths - 1, 0))
    errors = []
    for x in items:
        err = x.get("error")
        errors.append(f"{err.get('error_type') or ''} {err.get('error_msg') or ''}".strip()
                      or "error" if isinstance(err, dict) else "")
    anchor = file_end_ts(path) - (np.nanmax(end) if np.isfinite(end).any() else 0.0)
    runs = Runs(
        arrival_ts=anchor + start,
        prompt_tokens=num_array([_input_tokens(i) for i in infos]),
        output_tokens=num_array([r.get("output_tokens") for r in responses]),
        status=error_status(errors),
        ttft_s=first - start,
        e2e_s=end - start,
        itl_s=itl,
        notes=["start/end times are perf_counter values: anchored so the last request ends at "
               "the file's modification time (a guess; spacing and rates are exact)"],
    )
    if not has.any():
        runs.notes.append("no output_token_times (non-streaming run): no TTFT, TPOT or ITLs")
        runs.ttft_s = None
    return to_partial(path, INFERENCE_PERF, runs, NO_INSTANCES)
