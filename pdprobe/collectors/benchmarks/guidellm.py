"""guidellm ``benchmarks.json`` as request records.

Upstream writer: vllm-project/guidellm ``src/guidellm/benchmark/schemas/report.py``
(``GenerativeBenchmarksReport.save_file``: ``json.dumps(self.model_dump(mode="json"))``):
``benchmarks`` -> each ``GenerativeBenchmark`` -> ``requests`` = ``{successful, errored,
incomplete}`` lists of ``GenerativeRequestStats`` (``src/guidellm/schemas/request_stats.py``),
whose computed fields are serialised: ``request_start_time`` (Unix s), ``request_latency`` (s),
``prompt_tokens``, ``output_tokens``, ``cached_tokens``, ``time_to_first_token_ms``,
``inter_token_latency_ms`` ((last - first token) / (tokens - 1), pdprobe's TPOT). guidellm
0.3 wrote ``start_time`` and the same computed names (``src/guidellm/benchmark/benchmark.py``).

guidellm keeps no per-token ITL list (only first/last token times), so there is no ITL spread,
and it may keep only a sample of the requests (``--sample-size``): a warning then compares the
listed requests with ``request_totals``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.benchmarks.base import (
    NO_INSTANCES,
    Runs,
    as_dict,
    error_status,
    load_json_document,
    num_array,
    to_partial,
)
from pdprobe.collectors.benchmarks.detect import GUIDELLM
from pdprobe.collectors.io import read_all_bytes
from pdprobe.dataset import Partial
from pdprobe.errors import InputError

GROUPS: Final = ("successful", "errored", "incomplete")


def _start(r: dict[str, Any]) -> Any:
    if r.get("request_start_time") is not None:
        return r["request_start_time"]
    if r.get("start_time") is not None:
        return r["start_time"]
    return as_dict(as_dict(r.get("info")).get("timings")).get("request_start")


def _error(r: dict[str, Any], group: str) -> str:
    if group == "successful":
        return ""
    if group == "incomplete":
        return "cancelled (incomplete when the benchmark ended)"
    return str(r.get("error") or as_dict(r.get("info")).get("error") or "error")


def _totals(bench: dict[str, Any]) -> dict[str, Any]:
    return as_dict(as_dict(bench.get("metrics")).get("request_totals")
                   or bench.get("request_totals"))


def read_guidellm(path: Path, ctx: ReadContext) -> Partial:
    """Read a guidellm benchmark report into request records."""
    ctx.report(f"reading {path.name}", 0.0)
    doc = load_json_document(path, read_all_bytes(path), "guidellm benchmarks")
    benchmarks = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(benchmarks, list):
        raise InputError(f"{path}: no 'benchmarks' list in this guidellm report",
                         hint="pass the benchmarks.json guidellm wrote")
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    warnings: list[str] = []
    for k, bench in enumerate(b for b in benchmarks if isinstance(b, dict)):
        requests = as_dict(bench.get("requests"))
        totals = _totals(bench)
        for group in GROUPS:
            listed = [r for r in (requests.get(group) or []) if isinstance(r, dict)]
            rows.extend(listed)
            errors.extend(_error(r, group) for r in listed)
            total = totals.get(group)
            if isinstance(total, int) and total > len(listed):
                warnings.append(f"{path.name} benchmark {k + 1}: {len(listed)} of {total} "
                                f"{group} requests listed (guidellm kept a sample): rates and "
                                f"counts are of the sample")
    if not rows:
        raise InputError(f"{path}: the guidellm report lists no request",
                         hint="re-run guidellm without --sample-size 0")
    ms = 1e-3
    runs = Runs(
        arrival_ts=num_array([_start(r) for r in rows]),
        prompt_tokens=num_array([r.get("prompt_tokens") for r in rows]),
        output_tokens=num_array([r.get("output_tokens") for r in rows]),
        status=error_status(errors),
        ttft_s=num_array([r.get("time_to_first_token_ms") for r in rows]) * ms,
        tpot_s=num_array([r.get("inter_token_latency_ms") for r in rows]) * ms,
        e2e_s=num_array([r.get("request_latency") for r in rows]),
        cached_tokens=num_array([r.get("cached_tokens") for r in rows]),
        request_id=np.array([r.get("request_id") for r in rows], dtype=object),
        notes=[f"{len(benchmarks)} benchmark(s) of the report read one after another",
               "no per-token ITL lists in guidellm reports: no ITL spread"],
        warnings=warnings,
    )
    return to_partial(path, GUIDELLM, runs, NO_INSTANCES)
