"""``pdprobe diff``: findings new/gone/worse, key figures, movers, and the exit code a deploy
check reads (0 nothing worse, 1 a new warning, 2 a new critical, 3 unreadable/unknown)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pdprobe.report.diff_format import render_json, render_markdown, render_text
from pdprobe.report.json_format import to_json_dict
from pdprobe.rules.base import Severity
from pdprobe.services.diff import diff_reports
from tests.report import factory as F


def test_fix_that_worked_is_better_and_exits_0() -> None:
    d = diff_reports(F.prefill_bound(), F.healthy())
    assert d.exit_code == 0
    assert d.verdict.startswith("BETTER  gone or milder: PD001 prefill-bound")
    gone = {f.code for f in d.findings if f.change == "gone"}
    assert "PD001" in gone
    figures = {f.what: f for f in d.figures}
    assert figures["status"].before == "critical" and figures["status"].after == "ok"


def test_new_critical_exits_2_and_new_warning_1() -> None:
    assert diff_reports(F.healthy(), F.prefill_bound()).exit_code == 2
    d = diff_reports(F.healthy(), F.routing_skew())
    assert d.exit_code == 1
    assert d.verdict.startswith("WORSE  new warning finding")


def test_same_finding_that_got_worse_counts_as_new_at_its_severity() -> None:
    before = F.routing_skew()
    worse = dataclasses.replace(before, findings=tuple(
        dataclasses.replace(f, severity=Severity.CRITICAL) for f in before.findings),
        status="critical")
    d = diff_reports(before, worse)
    assert d.exit_code == 2
    assert {f.change for f in d.findings} == {"worse"}
    assert "(was warning)" in render_text(d)


def test_unknown_after_exits_3() -> None:
    assert diff_reports(F.healthy(), F.unknown()).exit_code == 3


def test_movers_name_the_instance_that_changed() -> None:
    before = F.healthy()
    slow = before.instances[0]
    after = dataclasses.replace(before, instances=(
        dataclasses.replace(slow, ttft_s=F.q(3.0, 2.5, 9.0, 12.0)), *before.instances[1:]))
    d = diff_reports(before, after)
    assert [(m.instance, m.what) for m in d.movers] == [(slow.name, "TTFT p90")]
    assert d.movers[0].after == 9.0
    assert d.exit_code == 0  # a slower instance alone is no new finding


@pytest.mark.parametrize("render", [render_text, render_markdown])
def test_renderings_carry_verdict_and_figures(render) -> None:  # type: ignore[no-untyped-def]
    d = diff_reports(F.prefill_bound(), F.healthy(), "before.json", "after.json")
    out = render(d)
    assert d.verdict in out.replace("**", "")
    assert "before.json" in out and "after.json" in out
    assert "recommended" in out


def test_json_is_machine_readable() -> None:
    data = json.loads(render_json(diff_reports(F.healthy(), F.prefill_bound())))
    assert data["diff_schema_version"] == 1 and data["exit_code"] == 2
    assert any(f["change"] == "new" for f in data["findings"])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pdprobe", "diff", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_cli_exit_codes_and_quiet(tmp_path: Path) -> None:
    healthy, bound = tmp_path / "healthy.json", tmp_path / "bound.json"
    healthy.write_text(json.dumps(to_json_dict(F.healthy())))
    bound.write_text(json.dumps(to_json_dict(F.prefill_bound())))
    res = _cli(str(healthy), str(bound), "-q")
    assert res.returncode == 2 and res.stdout.count("\n") == 1
    assert res.stdout.startswith("WORSE  new critical finding")
    out = tmp_path / "d.md"
    res = _cli(str(bound), str(healthy), "-f", "markdown", "-o", str(out))
    assert res.returncode == 0 and out.read_text().startswith("**BETTER")
    res = _cli(str(healthy), str(tmp_path / "missing.json"))
    assert res.returncode == 3 and "missing.json: no such file" in res.stderr
