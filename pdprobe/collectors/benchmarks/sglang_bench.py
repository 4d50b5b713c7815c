"""``python -m sglang.bench_serving --output-details`` results as request records.

Upstream writer: sgl-project/sglang ``python/sglang/bench_serving.py`` (``benchmark()``: the
``result`` dict of run settings and summary metrics, ``| result_details`` with ``input_lens``,
``output_lens``, ``ttfts``, ``itls``, ``generated_texts``, ``errors`` when ``--output-details``
is given, appended to a JSONL file, one line per run).

SGLang saves no send times and no date: each run's arrivals are spread evenly over its
``duration``, and the runs are laid end to end, the last ending at the file's modification time
(the writer appends when a run ends). That is a guess and the notes say so: request counts,
lengths and latencies are exact, rates per window and bursts are not.
"""

from __future__ import annotations

from pathlib import Path

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.benchmarks.base import (
    NO_INSTANCES,
    file_end_ts,
    spread_arrivals,
    to_partial,
)
from pdprobe.collectors.benchmarks.detect import RERUN_HINT, SGLANG
from pdprobe.collectors.benchmarks.listed import documents, fill, run_lists
from pdprobe.collectors.io import read_all_bytes
from pdprobe.dataset import Partial
from pdprobe.errors import InputError


def read_sglang_bench(path: Path, ctx: ReadContext) -> Partial:
    """Read SGLang serving-benchmark result lines into request records."""
    ctx.report(f"reading {path.name}", 0.0)
    warnings: list[str] = []
    docs = documents(path, read_all_bytes(path), "sglang.bench_serving", warnings)
    listed = []
    for k, doc in enumerate(docs):
        where = f"{path.name} line {k + 1}" if len(docs) > 1 else path.name
        n, lists = run_lists(doc, where, warnings)
        if n:
            listed.append((n, lists, float(doc.get("duration") or 0.0)))
    if not listed:
        raise InputError(f"{path}: {RERUN_HINT[SGLANG]}", hint="pdprobe needs the per-request "
                         "lists input_lens, output_lens, ttfts, itls")
    end = file_end_ts(path)
    parts = []
    for n, lists, duration in reversed(listed):  # the last run ends at the file's mtime
        parts.append((lists, spread_arrivals(n, end - duration, duration)))
        end -= duration
    parts.reverse()
    notes = ["no send times or date in SGLang results: arrivals spread evenly over each run's "
             "duration, runs laid end to end up to the file's modification time - a guess: "
             "rates per window and bursts are not real"]
    if len(listed) > 1:
        notes.insert(0, f"{len(listed)} runs in one file, read one after another")
    runs = fill(parts, notes, warnings, "SGLang")
    return to_partial(path, SGLANG, runs, NO_INSTANCES)
