"""``vllm bench serve --save-result --save-detailed`` JSON read as request records.

Fixtures: tests/fixtures/benchmarks/vllm_bench_serve*.json, written by make_fixtures.py the way
vllm-project/vllm ``vllm/benchmarks/serve.py`` (``benchmark()`` result dict, ``main()``
result_json, ``json.dump``) writes them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pdprobe.collectors.io import sniff
from pdprobe.errors import InputError
from tests.collectors.benchmarks.conftest import read


def test_reads_every_request_with_its_status(bench_dir: Path) -> None:
    part = read(bench_dir / "vllm_bench_serve.json")
    req = part.requests
    assert part.source.format == "vllm-bench" and part.source.kind == "requests"
    assert len(req) == 7
    assert list(req["status"]) == ["ok"] * 5 + ["error", "timeout"]
    assert req["prompt_tokens"].sum() == 512 + 1024 + 256 + 2048 + 768 + 900 + 1500
    assert req["output_tokens"].tolist() == [5, 4, 6, 3, 5, 0, 0]
    # arrivals: send times anchored at date (10:00:03 UTC) - duration 3.8 s
    assert req["arrival_ts"].iloc[0] == pytest.approx(1748858400.0 + 3.0 - 3.8)
    assert np.diff(req["arrival_ts"].to_numpy()) == pytest.approx([0.4, 0.5, 0.6, 0.6, 0.5, 0.4])
    assert req["ttft_s"].iloc[:5].tolist() == pytest.approx([0.12, 0.21, 0.08, 0.40, 0.15])
    # TPOT: mean of the per-token gaps
    assert req["tpot_s"].iloc[0] == pytest.approx(np.mean([0.020, 0.022, 0.021, 0.025]))
    assert req["e2e_s"].iloc[3] == pytest.approx(0.40 + 0.040 + 0.041)
    assert req[["ttft_s", "tpot_s", "e2e_s"]].iloc[5:].isna().all().all()
    notes = " ".join(part.source.notes)
    assert "no instance names" in notes and "read as UTC" in notes and "per-token ITLs" in notes
    assert {"ttft_s", "tpot_s", "e2e_s", "status"} <= part.request_columns


def test_summary_without_details_says_how_to_rerun(bench_dir: Path) -> None:
    sniffed = sniff(bench_dir / "vllm_bench_serve_summary.json")
    assert sniffed.kind == "unknown"
    assert "--save-detailed" in sniffed.why


def test_itls_in_milliseconds_are_detected_by_magnitude(bench_dir: Path, tmp_path: Path) -> None:
    doc = json.loads((bench_dir / "vllm_bench_serve.json").read_text())
    doc["itls"] = [[v * 1e3 for v in itl] for itl in doc["itls"]]
    path = tmp_path / "ms.json"
    path.write_text(json.dumps(doc))
    part = read(path)
    assert part.requests["tpot_s"].iloc[0] == pytest.approx(np.mean([0.020, 0.022, 0.021, 0.025]))
    assert any("itls read as milliseconds" in n for n in part.source.notes)


def test_unequal_lists_warn_with_counts(bench_dir: Path, tmp_path: Path) -> None:
    doc = json.loads((bench_dir / "vllm_bench_serve.json").read_text())
    doc["ttfts"] = doc["ttfts"][:5]
    path = tmp_path / "short.json"
    path.write_text(json.dumps(doc))
    part = read(path)
    assert len(part.requests) == 5
    assert any("unequal length" in w and "ttfts 5" in w and "input_lens 7" in w
               for w in part.warnings)


def test_file_cut_in_the_middle_is_one_line_error(bench_dir: Path, tmp_path: Path) -> None:
    text = (bench_dir / "vllm_bench_serve.json").read_text()
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(InputError, match="cut in the middle"):
        read(path)


def test_appended_runs_and_old_layout_without_start_times(bench_dir: Path, tmp_path: Path) -> None:
    doc = json.loads((bench_dir / "vllm_bench_serve.json").read_text())
    old = {k: v for k, v in doc.items() if k not in ("start_times", "latencies", "queue_times")}
    old["date"] = "20250602-100103"
    path = tmp_path / "append.json"  # --append-result: objects separated by a newline
    path.write_text(json.dumps(doc) + "\n" + json.dumps(old))
    part = read(path)
    assert len(part.requests) == 14
    assert any("2 runs" in n for n in part.source.notes)
    assert any("spread evenly" in n for n in part.source.notes)
