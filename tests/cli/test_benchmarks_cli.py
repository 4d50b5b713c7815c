"""End to end: ``pdprobe diagnose results.json`` on load-generator outputs (issue 13 item 1).

Runs the real CLI in a subprocess on the benchmark fixtures (tests/fixtures/benchmarks/, built
from each writer's code path, see make_fixtures.py): a report, no traceback; a summary without
per-request data is one ``pdprobe: error:`` line saying how to re-run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO_ROOT

BENCH = FIXTURES / "benchmarks"
RUN_TIMEOUT_S = 120.0
DETAILED = sorted(p.name for p in BENCH.glob("*") if p.suffix in (".json", ".jsonl")
                  and "summary" not in p.name)


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pdprobe", *map(str, args)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)


@pytest.mark.parametrize("name", DETAILED)
def test_diagnose_benchmark_output(name: str, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = _run("diagnose", BENCH / name, "--format", "json", "-o", out)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(out.read_text())
    text = json.dumps(report)
    assert "no instance names" in text
    assert report["workload"]["requests"] == 7


def test_summary_only_result_is_one_line_error() -> None:
    proc = _run("diagnose", BENCH / "vllm_bench_serve_summary.json")
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "--save-detailed" in proc.stderr
