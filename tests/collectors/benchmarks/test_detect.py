"""Sniffing the five benchmark layouts from their heads (``io.sniff`` -> ``detect.detect``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pdprobe.collectors.io import sniff

LAYOUTS = {
    "vllm_bench_serve.json": "vllm-bench",
    "sglang_bench_serving.jsonl": "sglang-bench",
    "aiperf_profile_export.jsonl": "aiperf",
    "guidellm_benchmarks.json": "guidellm",
    "inference_perf_per_request_lifecycle_metrics.json": "inference-perf",
}


@pytest.mark.parametrize(("name", "fmt"), LAYOUTS.items())
def test_each_layout_is_sniffed(bench_dir: Path, name: str, fmt: str) -> None:
    sniffed = sniff(bench_dir / name)
    assert (sniffed.kind, sniffed.format) == ("benchmark", fmt)


@pytest.mark.parametrize(("name", "fmt"), LAYOUTS.items())
def test_compressed_and_renamed(bench_dir: Path, tmp_path: Path, name: str, fmt: str) -> None:
    path = tmp_path / "results.data"
    path.write_bytes(gzip.compress((bench_dir / name).read_bytes()))
    assert (sniff(path).kind, sniff(path).format) == ("benchmark", fmt)


def test_long_detailed_line_cut_by_the_head(bench_dir: Path, tmp_path: Path) -> None:
    """A detailed vLLM result much longer than the sniffed head is still detailed."""
    doc = json.loads((bench_dir / "vllm_bench_serve.json").read_text())
    n = 20_000
    big = {k: v for k, v in doc.items() if not isinstance(v, list)}
    big |= {"input_lens": [512] * n, "output_lens": [5] * n, "ttfts": [0.1] * n,
            "itls": [[0.02] * 4] * n, "errors": [""] * n}
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    assert sniff(path).format == "vllm-bench"


@pytest.mark.parametrize("content", [
    '{"arrival_ts": 1, "prompt_tokens": 2, "output_tokens": 3, "date": "x"}\n',
    '[{"arrival_ts": 1, "prompt_tokens": 2, "output_tokens": 3}]\n',
])
def test_request_records_stay_request_records(tmp_path: Path, content: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(content)
    assert sniff(path).kind != "benchmark"


@pytest.mark.parametrize(("doc", "hint"), [
    ({"successes": {"count": 1}, "failures": {"count": 0}, "load_summary": {}},
     "per_request"),
    ({"benchmark_duration": {"avg": 1}, "request_throughput": {"avg": 2},
      "input_config": {}}, "profile_export.jsonl"),
])
def test_summaries_say_what_to_read_instead(tmp_path: Path, doc: dict, hint: str) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(doc, indent=2))
    sniffed = sniff(path)
    assert sniffed.kind == "unknown" and hint in sniffed.why


def test_every_detected_layout_has_an_importable_reader() -> None:
    """A layout ``detect`` recognises is read by the reader registered beside it."""
    import importlib

    from pdprobe.collectors.benchmarks.detect import BENCHMARK_READERS, FORMATS

    assert set(BENCHMARK_READERS) == set(FORMATS)
    for target in BENCHMARK_READERS.values():
        module_name, func = target.split(":")
        assert callable(getattr(importlib.import_module(module_name), func))
