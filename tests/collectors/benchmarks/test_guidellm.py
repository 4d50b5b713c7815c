"""guidellm ``benchmarks.json`` read as request records.

Fixture: tests/fixtures/benchmarks/guidellm_benchmarks.json, written by make_fixtures.py the way
vllm-project/guidellm ``src/guidellm/benchmark/schemas/report.py`` saves a report
(``json.dumps(model_dump(mode="json"))``, computed fields of
``src/guidellm/schemas/request_stats.py`` included).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdprobe.errors import InputError
from tests.collectors.benchmarks.conftest import read


def test_reads_every_status_group(bench_dir: Path) -> None:
    part = read(bench_dir / "guidellm_benchmarks.json")
    req = part.requests
    assert part.source.format == "guidellm"
    assert len(req) == 7
    assert list(req["status"]) == ["ok"] * 5 + ["error", "aborted"]  # errored, incomplete
    assert req["arrival_ts"].iloc[1] == pytest.approx(1748858400.4)
    assert req["ttft_s"].iloc[3] == pytest.approx(0.40)
    assert req["tpot_s"].iloc[0] == pytest.approx((0.020 + 0.022 + 0.021 + 0.025) / 4)
    assert req["e2e_s"].iloc[0] == pytest.approx(0.208)
    assert req["cached_tokens"].iloc[0] == 0
    assert not part.warnings


def test_sampled_report_warns(bench_dir: Path, tmp_path: Path) -> None:
    doc = json.loads((bench_dir / "guidellm_benchmarks.json").read_text())
    doc["benchmarks"][0]["metrics"]["request_totals"]["successful"] = 500
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    part = read(path)
    assert any("5 of 500 successful" in w for w in part.warnings)


def test_guidellm_0_3_names(bench_dir: Path, tmp_path: Path) -> None:
    """guidellm 0.3 (``src/guidellm/benchmark/benchmark.py``): ``start_time`` and
    ``request_totals`` on the benchmark, no ``metadata``."""
    doc = json.loads((bench_dir / "guidellm_benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    bench["request_totals"] = bench.pop("metrics")["request_totals"]
    for group in ("successful", "errored", "incomplete"):
        for r in bench["requests"][group]:
            r["start_time"] = r.pop("request_start_time")
            del r["info"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"benchmarks": [bench]}))
    req = read(path).requests
    assert len(req) == 7 and req["arrival_ts"].iloc[0] == pytest.approx(1748858400.0)


def test_cut_report_is_one_line_error(bench_dir: Path, tmp_path: Path) -> None:
    text = (bench_dir / "guidellm_benchmarks.json").read_text()
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(InputError, match="cut in the middle"):
        read(path)
