"""``vllm bench serve --save-result --save-detailed`` results as request records.

Upstream writer: vllm-project/vllm ``vllm/benchmarks/serve.py`` (``benchmark()`` builds the
result dict, ``main()`` adds ``date``, ``model_id``, ``num_prompts``, ... and ``json.dump``s it;
``--append-result`` appends one object per line). Older releases: ``benchmarks/
benchmark_serving.py``, the same keys without ``start_times``/``latencies``.

Arrival times: ``start_times`` are ``time.perf_counter()`` values (seconds on a clock with an
arbitrary origin), so they are anchored to the run's ``date`` (``%Y%m%d-%H%M%S``, local time of
the client, taken when the run ended) minus its ``duration``; the zone is unknown and taken as
UTC. Without ``start_times`` arrivals are spread evenly over the run. Both are said in notes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.benchmarks.base import (
    NO_INSTANCES,
    file_end_ts,
    spread_arrivals,
    to_partial,
)
from pdprobe.collectors.benchmarks.detect import RERUN_HINT, VLLM
from pdprobe.collectors.benchmarks.listed import documents, fill, run_lists
from pdprobe.collectors.io import read_all_bytes
from pdprobe.dataset import Partial
from pdprobe.errors import InputError

DATE_FORMAT: Final = "%Y%m%d-%H%M%S"  # vllm/benchmarks/serve.py: current_dt


def _date_ts(value: Any) -> float | None:
    try:
        return datetime.strptime(str(value), DATE_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def read_vllm_bench(path: Path, ctx: ReadContext) -> Partial:
    """Read a vLLM serving-benchmark result (one run, or several appended) into records."""
    ctx.report(f"reading {path.name}", 0.0)
    warnings: list[str] = []
    notes: list[str] = []
    docs = documents(path, read_all_bytes(path), "vllm bench serve", warnings)
    parts = []
    anchors: set[str] = set()
    for k, doc in enumerate(docs):
        where = f"{path.name} run {k + 1}" if len(docs) > 1 else path.name
        n, lists = run_lists(doc, where, warnings)
        if n == 0:
            continue
        duration = float(doc.get("duration") or 0.0)
        end = _date_ts(doc.get("date"))
        if end is None:
            end = file_end_ts(path)
            anchors.add("the run's end taken from the file's modification time (no usable "
                        "'date')")
        else:
            anchors.add("'date' is the client's local time without a zone: read as UTC, when "
                        "the run ended")
        start = end - duration
        st = np.asarray(lists.get("start_times") or [], dtype=np.float64)
        if st.size == n and np.isfinite(st).all():
            arrival = start + (st - st.min())
            anchors.add("arrivals are the send times (start_times, a monotonic clock) anchored "
                        "at date - duration")
        else:
            arrival = spread_arrivals(n, start, duration)
            anchors.add("no start_times (older vLLM): arrivals spread evenly over each "
                        "run's duration, a guess - rates per window and bursts are not real")
        parts.append((lists, arrival))
    if not parts:
        raise InputError(f"{path}: {RERUN_HINT[VLLM]}", hint="pdprobe needs the per-request "
                         "lists input_lens, output_lens, ttfts, itls")
    notes.extend(sorted(anchors))
    runs = fill(parts, notes, warnings, "vLLM")
    if len(docs) > 1:
        runs.notes.insert(0, f"{len(docs)} runs appended in one file, read one after another")
    return to_partial(path, VLLM, runs, NO_INSTANCES)

