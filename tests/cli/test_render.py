"""``pdprobe render``: re-render a saved JSON report; exit codes and one-line errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pdprobe.report.json_format import to_json_dict
from tests.report import factory as F
from tests.report.schema_check import assert_valid_report


def run_process(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point in a child process (what a runbook sees)."""
    return subprocess.run([sys.executable, "-m", "pdprobe", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"})


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``main(argv)`` in this process (fast); returns code, stdout and stderr."""
    from pdprobe.cli.app import main

    def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        if stdin is not None:
            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out, err = capsys.readouterr()
        code = exc.value.code if isinstance(exc.value.code, int) else 3
        return subprocess.CompletedProcess(list(args), code, out, err)

    return _run


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(to_json_dict(F.prefill_bound())))
    return path


def test_text_to_stdout_exit_code_follows_status(saved: Path) -> None:
    res = run_process("render", str(saved))
    assert res.returncode == 2
    assert res.stdout.startswith("CRITICAL  prefill-bound: prefill short by 2 instances")
    assert "\x1b[" not in res.stdout
    assert res.stderr == ""


@pytest.mark.parametrize(("fmt", "marker"), [
    ("markdown", "# pdprobe report: CRITICAL"), ("html", "<!DOCTYPE html>"),
    ("prometheus", 'pdprobe_status{status="critical"} 2'), ("json", '"schema_version": 1'),
])
def test_formats_to_a_file(run: Any, saved: Path, tmp_path: Path, fmt: str, marker: str) -> None:
    out = tmp_path / f"out.{fmt}"
    res = run("render", str(saved), "--format", fmt, "-o", str(out))
    assert res.returncode == 2
    assert res.stdout == ""
    assert marker in out.read_text()
    assert f"wrote {fmt} report to {out}" in res.stderr
    if fmt == "json":
        assert_valid_report(out.read_text(), "render --format json")
        assert json.loads(out.read_text()) == json.loads(saved.read_text())


def test_quiet_and_fail_on(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "warn.json"
    path.write_text(json.dumps(to_json_dict(F.routing_skew())))
    res = run("render", str(path), "-q")
    assert res.returncode == 1
    assert res.stdout.count("\n") == 1 and res.stdout.startswith("WARNING  routing-skew")
    assert run("render", str(path), "-q", "--fail-on", "critical").returncode == 0


def test_stdin(run: Any, saved: Path) -> None:
    res = run("render", "-", "-f", "prometheus", stdin=saved.read_text())
    assert res.returncode == 2 and "pdprobe_finding{" in res.stdout


@pytest.mark.parametrize(("content", "expect"), [
    ("{not json", "not valid JSON (line 1 column 2"),
    ('{"schema_version": 9, "status": "ok"}', "schema_version 9 is not supported"),
])
def test_bad_input_is_one_line_exit_3(tmp_path: Path, content: str, expect: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    res = run_process("render", str(path))
    assert res.returncode == 3
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1 and expect in res.stderr
    assert res.stderr.startswith(f"pdprobe: error: {path}: ")
    assert "Traceback" not in res.stderr


def test_quiet_prints_the_verdict_while_output_gets_the_full_report(run: Any,
                                                                    tmp_path: Path) -> None:
    """-q is for stdout only: the verdict line, whatever -f; -o still writes the full report."""
    path = tmp_path / "warn.json"
    path.write_text(json.dumps(to_json_dict(F.routing_skew())))
    out = tmp_path / "full.json"
    res = run("render", str(path), "-q", "-f", "json", "-o", str(out))
    assert res.returncode == 1
    assert res.stdout.count("\n") == 1 and res.stdout.startswith("WARNING  routing-skew")
    assert json.loads(out.read_text()) == json.loads(path.read_text())
    res = run("render", str(path), "-q", "-f", "json")
    assert res.stdout.count("\n") == 1 and res.stdout.startswith("WARNING  routing-skew")
