"""Tell the five benchmark layouts apart from the head of a file (called by ``io.sniff``).

Only key names are looked at, in the first bytes, with no JSON parsing: a detailed result is
often one long line far bigger than the head. Each layout is recognised by keys its writer
always saves and no request-record file carries (see docs/inputs/benchmarks.md).
Light on purpose: imported while sniffing, before pandas.
"""

from __future__ import annotations

import re
from typing import Final

VLLM: Final = "vllm-bench"
SGLANG: Final = "sglang-bench"
AIPERF: Final = "aiperf"
GUIDELLM: Final = "guidellm"
INFERENCE_PERF: Final = "inference-perf"
FORMATS: Final = (VLLM, SGLANG, AIPERF, GUIDELLM, INFERENCE_PERF)

# format -> "module:function" of its reader, imported when a file of that format is read
# (``benchmarks.read_benchmark``). Declared beside the detection: a new layout is its reader
# module plus this file.
BENCHMARK_READERS: Final = {
    VLLM: "pdprobe.collectors.benchmarks.vllm_bench:read_vllm_bench",
    SGLANG: "pdprobe.collectors.benchmarks.sglang_bench:read_sglang_bench",
    AIPERF: "pdprobe.collectors.benchmarks.aiperf:read_aiperf",
    GUIDELLM: "pdprobe.collectors.benchmarks.guidellm:read_guidellm",
    INFERENCE_PERF: "pdprobe.collectors.benchmarks.inference_perf:read_inference_perf",
}

_KEY = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:')


def _keys(text: str) -> set[str]:
    return set(_KEY.findall(text))


def detect(text: str, complete: bool) -> tuple[str, str, bool] | None:
    """``(format, why, detailed)`` when ``text`` (the head of a file) is a benchmark output.

    ``complete`` says the head is the whole file. ``detailed`` is False for a summary without
    per-request data (vLLM without ``--save-detailed``, SGLang without ``--output-details``,
    AIPerf/inference-perf summary files): the caller turns that into a message saying how to
    re-run.
    """
    body = text.lstrip("\ufeff \t\r\n")
    if not body or body[0] not in "{[":
        return None
    first_line = body.split("\n", 1)[0]
    keys = _keys(body)
    if body[0] == "{":
        head_keys = _keys(first_line)
        if {"metadata", "request_start_ns"} <= head_keys and (
                "metrics" in head_keys or "session_num" in head_keys):
            return AIPERF, "AIPerf profile_export.jsonl records", True
        if "guidellm_version" in keys or ("benchmarks" in keys and (
                "generative_benchmark" in body or "generative_request_stats" in body)):
            return GUIDELLM, "guidellm benchmarks report", True
        if {"date", "model_id", "num_prompts"} <= head_keys:
            detailed = "input_lens" in head_keys or "ttfts" in head_keys
            # a one-line result cut by the head is longer than any summary: it holds the lists
            line_cut = "\n" not in body and not complete
            return VLLM, "vllm bench serve result", detailed or line_cut
        if {"backend", "dataset_name"} <= head_keys and (
                "sharegpt_output_len" in head_keys or "random_input_len" in head_keys):
            detailed = "input_lens" in head_keys or "ttfts" in head_keys
            line_cut = "\n" not in body and not complete
            return SGLANG, "sglang.bench_serving result lines", detailed or line_cut
        if {"successes", "failures"} <= keys and "load_summary" in keys:
            return INFERENCE_PERF, "inference-perf lifecycle summary", False
        if {"benchmark_duration", "request_throughput", "input_config"} <= keys:
            return AIPERF, "AIPerf aggregated profile export", False
        return None
    # a JSON array: inference-perf's per_request_lifecycle_metrics.json
    if {"start_time", "end_time", "info"} <= keys and ("request" in keys or "error" in keys):
        return INFERENCE_PERF, "inference-perf per-request lifecycle metrics", True
    return None


# What to run again to get per-request data, by format (for summary files).
RERUN_HINT: Final = {
    VLLM: "a summary without per-request lists: re-run 'vllm bench serve' with --save-result "
          "--save-detailed",
    SGLANG: "a summary without per-request lists: re-run 'python -m sglang.bench_serving' with "
            "--output-details",
    AIPERF: "AIPerf's aggregated statistics: read profile_export.jsonl (per-request records) "
            "from the same artifacts folder",
    INFERENCE_PERF: "an inference-perf summary: enable report.request_lifecycle.per_request and "
                    "read per_request_lifecycle_metrics.json",
    GUIDELLM: "",
}
