"""docs/reports.md stays true: its alert rules load in promtool, its runbook script branches
on pdprobe's exit codes as described, and its example verdicts are what pdprobe prints."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pdprobe.report.json_format import to_json_dict
from pdprobe.report.verdict import verdict_line
from tests.report import factory as F

DOC = Path(__file__).resolve().parents[2] / "docs" / "reports.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def _runbook() -> str:
    (script,) = [b for b in _blocks("sh") if "pdprobe-check.sh" in b]
    return script


def test_example_verdicts_are_real() -> None:
    text = DOC.read_text(encoding="utf-8")
    for make in (F.prefill_bound, F.routing_skew, F.unknown):
        assert verdict_line(make()) in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_alert_rules_load(tmp_path: Path) -> None:
    (rules,) = [b for b in _blocks("yaml") if b.startswith("groups:")]
    path = tmp_path / "pdprobe.rules.yml"
    path.write_text(rules)
    res = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 5 rules found" in res.stdout


FAKE = """#!/bin/sh
# diagnose: copy the prepared report to --output and exit with the prepared code;
# anything else goes to the real pdprobe.
if [ "$1" = diagnose ]; then
    while [ $# -gt 0 ]; do
        if [ "$1" = --output ]; then out=$2; fi
        if [ "$1" = --textfile ]; then tf=$2; fi
        shift
    done
    if [ -n "$FAKE_REPORT" ]; then
        cp "$FAKE_REPORT" "$out"
        "$PYTHON" -m pdprobe render "$FAKE_REPORT" -f prometheus -o "$tf" 2>/dev/null
    fi
    if [ -n "$FAKE_STDERR" ]; then echo "$FAKE_STDERR" >&2; fi
    exit "$FAKE_RC"
fi
exec "$PYTHON" -m pdprobe "$@"
"""


@pytest.mark.parametrize(("scenario", "fail_on", "rc", "first"), [
    ("healthy", "warning", 0, "OK  no warning or critical finding"),
    ("routing_skew", "warning", 1, "WARNING  routing-skew"),
    ("prefill_bound", "warning", 2, "CRITICAL  prefill-bound"),
    (None, "warning", 3, "UNKNOWN  could not judge: http://prom:9090: connection refused"),
])
def test_runbook_branches_on_the_exit_code(tmp_path: Path, scenario: str | None, fail_on: str,
                                           rc: int, first: str) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "pdprobe"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    report = ""
    if scenario is not None:
        report = str(tmp_path / "saved.json")
        Path(report).write_text(json.dumps(to_json_dict(F.SCENARIOS[scenario]())))
    script = tmp_path / "pdprobe-check.sh"
    script.write_text(_runbook())
    state = tmp_path / "state"
    textfile = tmp_path / "pdprobe.prom"
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "PYTHON": sys.executable, "NO_COLOR": "1",
           "PROM_URL": "http://prom:9090", "PDPROBE_STATE": str(state),
           "PDPROBE_TEXTFILE": str(textfile), "PDPROBE_FAIL_ON": fail_on,
           "FAKE_REPORT": report, "FAKE_RC": str(rc),
           "FAKE_STDERR": "" if report else "pdprobe: error: http://prom:9090: connection refused",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    res = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == rc, res.stdout + res.stderr
    assert res.stdout.startswith(first), res.stdout
    assert res.stdout.count("\n") == 1
    if scenario is None:  # the fake writes no textfile; test_runbook_e2e.py runs the real one
        return
    assert textfile.read_text().startswith("# HELP pdprobe_status")
    assert (state / "ticket.md").exists() == (rc == 1)
    assert (state / "report.html").exists() == (rc == 2)


def test_runbook_is_valid_posix_sh(tmp_path: Path) -> None:
    script = tmp_path / "check.sh"
    script.write_text(_runbook())
    res = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
