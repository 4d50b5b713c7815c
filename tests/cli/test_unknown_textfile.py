"""An UNKNOWN run still replaces its Prometheus textfile (issue 15, "runbook truth"): with
``-f prometheus -o FILE`` and with ``--textfile FILE``, for an input error raised before any
report exists, so an old critical status cannot keep an alert firing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OLD = 'pdprobe_status{status="critical"} 2\npdprobe_finding{code="PD101"} 1\n'


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pdprobe", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_format_prometheus_output_is_replaced_on_an_input_error(tmp_path: Path) -> None:
    out = tmp_path / "t.prom"
    out.write_text(OLD)
    res = _run("diagnose", str(tmp_path / "missing.jsonl"), "-f", "prometheus", "-o", str(out))
    assert res.returncode == 3
    assert res.stderr.startswith("pdprobe: error: ") and res.stderr.count("\n") == 1
    text = out.read_text()
    assert 'pdprobe_status{status="unknown"} 3' in text
    assert "missing.jsonl: no such file" in text
    assert "pdprobe_finding{" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.prom"]  # no temp file left


def test_textfile_is_written_beside_json_and_on_errors(tmp_path: Path) -> None:
    textfile = tmp_path / "t.prom"
    textfile.write_text(OLD)
    res = _run("diagnose", str(tmp_path / "nope"), "-f", "json", "-o", str(tmp_path / "r.json"),
               "--textfile", str(textfile))
    assert res.returncode == 3
    assert not (tmp_path / "r.json").exists()
    assert 'pdprobe_status{status="unknown"} 3' in textfile.read_text()


def test_render_of_an_unreadable_report_writes_unknown(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("{not json")
    out = tmp_path / "t.prom"
    out.write_text(OLD)
    res = _run("render", str(bad), "-f", "prometheus", "-o", str(out))
    assert res.returncode == 3
    assert 'pdprobe_status{status="unknown"} 3' in out.read_text()


def test_shared_format_variable_does_not_break_check() -> None:
    """``PDPROBE_FORMAT=prometheus`` is for diagnose/render; check has its own variable."""
    import os

    res = subprocess.run([sys.executable, "-m", "pdprobe", "check", "--prometheus",
                          "http://127.0.0.1:9", "--timeout", "2"], capture_output=True, text=True,
                         timeout=120, check=False, env={**os.environ, "PDPROBE_FORMAT": "prometheus"})
    assert "Invalid value" not in res.stderr and "--format" not in res.stderr, res.stderr
