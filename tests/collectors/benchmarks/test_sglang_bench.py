"""``python -m sglang.bench_serving --output-details`` JSONL read as request records.

Fixture: tests/fixtures/benchmarks/sglang_bench_serving.jsonl, written by make_fixtures.py the
way sgl-project/sglang ``python/sglang/bench_serving.py`` appends ``result | result_details``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from pdprobe.collectors.io import sniff
from tests.collectors.benchmarks.conftest import read


def test_reads_runs_anchored_at_the_file_time(bench_dir: Path, tmp_path: Path) -> None:
    line = (bench_dir / "sglang_bench_serving.jsonl").read_text()
    path = tmp_path / "sglang.jsonl"
    path.write_text(line + line)  # two runs appended
    os.utime(path, (1748862000.0, 1748862000.0))
    part = read(path)
    req = part.requests
    assert part.source.format == "sglang-bench"
    assert len(req) == 14
    assert (req["status"] == "ok").sum() == 10
    assert set(req["status"]) == {"ok", "error", "timeout"}
    assert req["arrival_ts"].max() < 1748862000.0
    assert req["arrival_ts"].min() == pytest.approx(1748862000.0 - 2 * 3.8)
    assert req["tpot_s"].dropna().iloc[0] == pytest.approx(np.mean([0.020, 0.022, 0.021, 0.025]))
    notes = " ".join(part.source.notes)
    assert "a guess" in notes and "no instance names" in notes and "2 runs" in notes


def test_summary_line_says_how_to_rerun(bench_dir: Path, tmp_path: Path) -> None:
    doc = json.loads((bench_dir / "sglang_bench_serving.jsonl").read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        del doc[key]
    path = tmp_path / "summary.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    assert "--output-details" in sniff(path).why


def test_last_line_cut_is_a_warning(bench_dir: Path, tmp_path: Path) -> None:
    line = (bench_dir / "sglang_bench_serving.jsonl").read_text()
    path = tmp_path / "cut.jsonl"
    path.write_text(line + line[: len(line) // 2])
    part = read(path)
    assert len(part.requests) == 7
    assert any("broken" in w and "line 2" in w and "cut" in w for w in part.warnings)
