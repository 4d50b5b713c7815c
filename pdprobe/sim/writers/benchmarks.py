"""A run's request records in the layout of a load generator's output (issue 13 item 1).

``pdprobe simulate --benchmark-format NAME`` writes these instead of ``requests.jsonl``, so the
benchmark readers (``pdprobe/collectors/benchmarks/``) are covered by tests and benchmarks on
whole runs. Each layout follows its upstream writer (cited in the readers and in
docs/inputs/benchmarks.md); values come from ``request_frame`` (the canonical records).

The simulator has no per-token times, only first and last token: the ITL lists are the decode
time split over ``output - 1`` gaps with seeded lognormal weights, so their sum (and so TPOT)
is exact and only the spread is made up. Failed requests are written the way each client
records them (no first token, an error text); vLLM and SGLang count 0 output tokens for them.
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np

from pdprobe.sim.engine import SimResult
from pdprobe.sim.writers.requests import request_frame

FORMATS: Final = ("vllm-bench", "sglang-bench", "aiperf", "guidellm", "inference-perf")
FILE_NAMES: Final = {
    "vllm-bench": "vllm_bench_serve.json",
    "sglang-bench": "sglang_bench_serving.jsonl",
    "aiperf": "profile_export.jsonl",
    "guidellm": "benchmarks.json",
    "inference-perf": "per_request_lifecycle_metrics.json",
}
ITL_SIGMA: Final = 0.3  # spread of the made-up per-token gaps (lognormal sigma of the weights)
PERF_ORIGIN_S: Final = 81234.5  # time.perf_counter() at the run's start: any boot-relative value
# The error texts the Python clients record (aiohttp / asyncio exception tracebacks, last line).
ERROR_TEXT: Final = {
    "error": "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected",
    "timeout": "asyncio.exceptions.TimeoutError",
}


def _itl_lists(result: SimResult, out: np.ndarray, decode_s: np.ndarray) -> list[list[float]]:
    """Per request, ``out - 1`` gaps summing to its decode time (empty when not ok)."""
    gaps = np.where(np.isfinite(decode_s) & (out > 1), out - 1, 0).astype(np.int64)
    rng = np.random.default_rng(result.config.seed + 1)
    weights = rng.lognormal(0.0, ITL_SIGMA, int(gaps.sum()))
    ids = np.repeat(np.arange(gaps.size), gaps)
    totals = np.bincount(ids, weights=weights, minlength=gaps.size)
    values = weights / totals[ids] * np.nan_to_num(decode_s)[ids]
    return [chunk.tolist() for chunk in np.split(values, np.cumsum(gaps)[:-1])] \
        if gaps.size else []


def _rows(result: SimResult) -> dict[str, Any]:
    frame = request_frame(result)
    ok = (frame["status"] == "ok").to_numpy()
    out = frame["output_tokens"].to_numpy(dtype=np.int64)
    ttft = frame["ttft_s"].to_numpy(dtype=np.float64)
    e2e = frame["e2e_s"].to_numpy(dtype=np.float64)
    decode = np.where(ok, e2e - ttft, np.nan)
    return {
        "arrival": frame["arrival_ts"].to_numpy(dtype=np.float64),
        "prompt": frame["prompt_tokens"].to_numpy(dtype=np.int64),
        "out": out, "ok": ok, "ttft": ttft, "e2e": e2e,
        "status": frame["status"].astype(str).to_numpy(), "itl": _itl_lists(result, out, decode),
        "ids": frame["request_id"].astype(str).to_numpy(),
    }


def _errors(rows: dict[str, Any]) -> list[str]:
    return [ERROR_TEXT.get(s, ERROR_TEXT["error"]) if s != "ok" else "" for s in rows["status"]]


def _lists(rows: dict[str, Any]) -> dict[str, Any]:
    """vLLM/SGLang parallel lists (failed: ttft 0, no ITLs, 0 output tokens)."""
    ok = rows["ok"]
    return {
        "input_lens": rows["prompt"].tolist(),
        "output_lens": np.where(ok, rows["out"], 0).tolist(),
        "ttfts": np.where(ok, rows["ttft"], 0.0).tolist(),
        "itls": rows["itl"],
        "generated_texts": ["" for _ in ok],
        "errors": _errors(rows),
    }


def _span(rows: dict[str, Any]) -> tuple[float, float]:
    """(first arrival, end rounded up to a whole second) of the run."""
    first = float(rows["arrival"].min())
    last = float(np.nanmax(np.where(rows["ok"], rows["arrival"] + rows["e2e"], rows["arrival"])))
    return first, float(np.ceil(last))


def vllm_doc(rows: dict[str, Any]) -> str:
    """``vllm/benchmarks/serve.py``: main()'s result_json merged with benchmark()'s result."""
    first, end = _span(rows)
    lists = _lists(rows)
    ok = rows["ok"]
    doc = {
        "date": datetime.fromtimestamp(end, UTC).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai", "backend": "openai", "label": None,
        "model_id": "pdprobe-sim", "tokenizer_id": "pdprobe-sim",
        "num_prompts": int(ok.size), "request_rate": "inf", "burstiness": 1.0,
        "max_concurrency": None,
        "duration": end - first, "completed": int(ok.sum()), "failed": int((~ok).sum()),
        "total_input_tokens": int(rows["prompt"][ok].sum()),
        "total_output_tokens": int(rows["out"][ok].sum()),
        **lists,
        "latencies": np.where(ok, rows["e2e"], 0.0).tolist(),
        "start_times": (PERF_ORIGIN_S + rows["arrival"] - first).tolist(),
        "queue_times": [0.0] * ok.size,
    }
    return json.dumps(doc)


def sglang_doc(rows: dict[str, Any]) -> str:
    """``python/sglang/bench_serving.py``: ``result | result_details``, one line per run."""
    first, end = _span(rows)
    ok = rows["ok"]
    result = {"tag": None, "backend": "sglang", "dataset_name": "random", "request_rate": "inf",
              "max_concurrency": None, "sharegpt_output_len": None, "random_input_len": 0,
              "random_output_len": 0, "random_range_ratio": 0.0, "server_info": None,
              "duration": end - first, "completed": int(ok.sum())}
    return json.dumps(result | _lists(rows)) + "\n"


def aiperf_doc(rows: dict[str, Any]) -> str:
    """``record_export_results_processor.py``: one ``MetricRecordInfo`` JSON per line."""
    lines = []
    ms = 1e3
    for i, (arr, ok, prompt, out, ttft, e2e, itl, rid, status) in enumerate(zip(
            rows["arrival"], rows["ok"], rows["prompt"], rows["out"], rows["ttft"], rows["e2e"],
            rows["itl"], rows["ids"], rows["status"], strict=True)):
        start_ns = round(arr * 1e9)
        meta = {"session_num": i, "x_request_id": rid, "x_correlation_id": rid,
                "conversation_id": None, "turn_index": 0, "request_start_ns": start_ns,
                "request_ack_ns": None, "request_end_ns": start_ns + round(
                    (e2e if ok else 0.0) * 1e9), "worker_id": "worker_0",
                "record_processor_id": "record_processor_0", "benchmark_phase": "profiling",
                "was_cancelled": False, "cancellation_time_ns": None}
        if ok:
            metrics: dict[str, Any] = {
                "input_sequence_length": {"value": int(prompt), "unit": "tokens"},
                "time_to_first_token": {"value": ttft * ms, "unit": "ms"},
                "request_latency": {"value": e2e * ms, "unit": "ms"},
                "output_sequence_length": {"value": int(out), "unit": "tokens"},
            }
            if out > 1:
                metrics["inter_chunk_latency"] = {"value": [v * ms for v in itl], "unit": "ms"}
                metrics["inter_token_latency"] = {"value": (e2e - ttft) / (out - 1) * ms,
                                                  "unit": "ms"}
            error = None
        else:
            metrics = {"error_isl": {"value": int(prompt), "unit": "tokens"}}
            error = {"code": 504 if status == "timeout" else 502,
                     "type": "TimeoutError" if status == "timeout" else "ServerDisconnectedError",
                     "message": ERROR_TEXT.get(str(status), ERROR_TEXT["error"])}
        lines.append(json.dumps({"metadata": meta, "metrics": metrics, "error": error},
                                separators=(",", ":")))
    return "\n".join(lines) + "\n"


def guidellm_doc(rows: dict[str, Any]) -> str:
    """``report.py``: ``json.dumps(model_dump(mode="json"))`` with the computed request fields."""
    first, end = _span(rows)
    groups: dict[str, list[dict[str, Any]]] = {"successful": [], "errored": [], "incomplete": []}
    for arr, ok, prompt, out, ttft, e2e, rid, status in zip(
            rows["arrival"], rows["ok"], rows["prompt"], rows["out"], rows["ttft"], rows["e2e"],
            rows["ids"], rows["status"], strict=True):
        req = {"type_": "generative_request_stats", "request_id": rid,
               "request_start_time": arr, "prompt_tokens": int(prompt), "cached_tokens": None,
               "output_tokens": int(out) if ok else None,
               "request_latency": e2e if ok else None,
               "time_to_first_token_ms": ttft * 1e3 if ok else None,
               "inter_token_latency_ms": (e2e - ttft) / (out - 1) * 1e3 if ok and out > 1
               else None,
               "info": {"request_id": rid, "status": "completed" if ok else "errored",
                        "error": None if ok else ERROR_TEXT.get(str(status), "error")}}
        groups["successful" if ok else "errored"].append(req)
    bench = {"type_": "generative_benchmark", "start_time": first, "end_time": end,
             "duration": end - first,
             "metrics": {"request_totals": {k: len(v) for k, v in groups.items()}
                         | {"total": int(rows["ok"].size)}},
             "requests": groups | {"total": None}}
    report = {"metadata": {"version": 2, "guidellm_version": "pdprobe-sim"},
              "config": {}, "benchmarks": [bench]}
    return json.dumps(report)


def inference_perf_doc(rows: dict[str, Any]) -> str:
    """``reportgen/base.py`` per_request_lifecycle_metrics, saved with ``indent=2``."""
    first, _end = _span(rows)
    items = []
    for arr, ok, prompt, out, ttft, e2e, itl, status in zip(
            rows["arrival"], rows["ok"], rows["prompt"], rows["out"], rows["ttft"], rows["e2e"],
            rows["itl"], rows["status"], strict=True):
        start = PERF_ORIGIN_S + arr - first
        times = (start + ttft + np.concatenate([[0.0], np.cumsum(itl)])).tolist() if ok else []
        info = {"request_metrics": {"text": {"input_tokens": int(prompt)}},
                "response_metrics": {"output_tokens": int(out) if ok else 0,
                                     "server_usage": None, "output_token_times": times},
                "extra_info": {}, "lora_adapter": None, "labels": {},
                "input_tokens": int(prompt)}
        error = None if ok else {"error_type": "HTTP Error 504" if status == "timeout"
                                 else "ServerDisconnectedError",
                                 "error_msg": ERROR_TEXT.get(str(status), "error")}
        items.append({"start_time": start, "end_time": start + (e2e if ok else 0.0),
                      "request": "{}", "response": None, "info": info, "error": error})
    return json.dumps(items, indent=2)


_WRITERS: Final = {"vllm-bench": vllm_doc, "sglang-bench": sglang_doc, "aiperf": aiperf_doc,
                   "guidellm": guidellm_doc, "inference-perf": inference_perf_doc}


def write_benchmark(result: SimResult, out_dir: Path, fmt: str, compress: bool) -> Path:
    """The run's requests as ``fmt`` (one of ``FORMATS``), gzip-compressed when asked."""
    text = _WRITERS[fmt](_rows(result))
    path = out_dir / (FILE_NAMES[fmt] + (".gz" if compress else ""))
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path
