"""The "result dict of parallel lists" layout shared by vLLM and SGLang serving benchmarks.

vLLM's ``benchmark_serving.py`` (now ``vllm/benchmarks/serve.py``) saves one JSON object per
run whose per-request data are parallel lists, index ``i`` being request ``i`` everywhere:
``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls`` (list of s per request),
``generated_texts``, ``errors`` ('' when it succeeded), and in newer vLLM ``latencies``,
``start_times`` (``time.perf_counter()`` at send) and ``queue_times``. SGLang's
``bench_serving.py`` was adapted from it and saves the same six lists. Failed requests have
``ttft`` 0, no ITLs and an error text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pdprobe.collectors.benchmarks.base import (
    LATENCY_SECONDS_MAX,
    Ragged,
    Runs,
    equal_lengths,
    error_status,
    itl_to_seconds,
    json_lines,
    load_json_document,
    num_array,
    to_seconds,
)
from pdprobe.errors import InputError

PER_REQUEST: tuple[str, ...] = ("input_lens", "output_lens", "ttfts", "itls", "errors",
                                "latencies", "start_times")


def documents(path: Path, data: bytes, what: str, warnings: list[str]) -> list[dict[str, Any]]:
    """Each run's result object: one JSON document, or one per line (vLLM ``--append-result``,
    SGLang's appended JSONL)."""
    import orjson

    try:
        docs: list[Any] = [orjson.loads(data)]
    except orjson.JSONDecodeError:
        if data.strip().count(b"\n") == 0:
            load_json_document(path, data, what)  # raises the one-line error
        docs = json_lines(path, data, what + " result", warnings)
    runs = [d for d in docs if isinstance(d, dict)]
    if not runs:
        raise InputError(f"{path}: no {what} result object", hint="check the file")
    return runs


def run_lists(doc: dict[str, Any], where: str, warnings: list[str]) -> tuple[int, dict[str, Any]]:
    """How many requests the run lists, and its per-request lists cut to that length."""
    lists: dict[str, list[Any]] = {k: doc[k] for k in PER_REQUEST if isinstance(doc.get(k), list)}
    if "input_lens" not in lists or "ttfts" not in lists:
        return 0, {}
    n = equal_lengths(dict(lists), where, warnings)
    return n, {k: v[:n] for k, v in lists.items()}


def fill(parts: list[tuple[dict[str, Any], np.ndarray]], notes: list[str],
         warnings: list[str], what: str) -> Runs:
    """Build ``Runs`` from each run's lists (``run_lists``) and its arrival times."""
    lists_in = [lists for lists, _ in parts]
    arrivals = [a for _, a in parts]
    arrival = np.concatenate(arrivals) if arrivals else np.zeros(0)

    def cat(key: str) -> list[Any]:
        out: list[Any] = []
        for lists, arr in zip(lists_in, arrivals, strict=True):
            out.extend(lists.get(key) or [None] * arr.size)
        return out

    prompt = num_array(cat("input_lens"))
    output = num_array(cat("output_lens"))
    ttft = to_seconds(num_array(cat("ttfts")), f"{what} ttfts", LATENCY_SECONDS_MAX, notes)
    itl = itl_to_seconds(Ragged.from_lists(cat("itls")), f"{what} itls", notes)
    if any("errors" in lists for lists in lists_in):
        status = error_status(cat("errors"))
    else:
        status = np.where(ttft > 0, "ok", "error").astype(object)
        notes.append("no errors list: requests with no first token counted as errors")
    if any("latencies" in lists for lists in lists_in):
        e2e = to_seconds(num_array(cat("latencies")), f"{what} latencies", LATENCY_SECONDS_MAX,
                         notes)
    else:
        e2e = ttft + itl.sums()
        notes.append("e2e_s = TTFT + the sum of the ITLs (no per-request latency list)")
    return Runs(arrival_ts=arrival, prompt_tokens=prompt, output_tokens=output, status=status,
                ttft_s=ttft, e2e_s=e2e, itl_s=itl, notes=notes, warnings=warnings)
