"""The runbook of docs/reports.md end to end: its cron script with the real pdprobe through
OK → CRITICAL → UNKNOWN, and its alert rules fed the textfiles that script wrote
(``promtool test rules``, the rule-test harness of Prometheus itself).

The only stand-in is the data source: a ``pdprobe`` shim on PATH turns ``--prometheus
file:///capture --since 30m`` into the capture folder (written by ``pdprobe simulate``), and
passes everything else to the real CLI unchanged. The UNKNOWN run uses a real unreachable
Prometheus URL (a closed local port).
"""

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

from tests.live.prom_server import free_port
from tests.report.test_docs import _blocks, _runbook

SHIM = """#!{python}
import os, sys
args = sys.argv[1:]
if "--prometheus" in args:
    i = args.index("--prometheus")
    if args[i + 1].startswith("file://"):
        path = args[i + 1][len("file://"):]
        del args[i:i + 2]
        j = args.index("--since")
        del args[j:j + 2]
        args.append(path)
os.execv(sys.executable, [sys.executable, "-m", "pdprobe", *args])
"""

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")
# Minutes each run's textfile stays in place (the cron interval), and how long the UNKNOWN
# state then lasts: past PdprobeCannotJudge's ``for: 1h``.
RUN_MINUTES = 10
UNKNOWN_MINUTES = 70


def _simulate(out: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "pdprobe", "simulate", "-o", str(out),
                    "--duration", "120", *args], check=True, capture_output=True, timeout=300)


def _samples(textfile: Path) -> dict[str, float]:
    rows = {}
    for line in textfile.read_text().splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        rows[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return rows


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_cron_script_and_alerts_ok_critical_unknown(tmp_path: Path) -> None:
    ok, critical = tmp_path / "ok", tmp_path / "critical"
    _simulate(ok)  # 2P:2D at 5 req/s: healthy
    _simulate(critical, "--prefill", "1", "--decode", "2", "--rate", "12")  # prefill-bound
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "pdprobe"
    shim.write_text(SHIM.format(python=sys.executable))
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    script = tmp_path / "pdprobe-check.sh"
    script.write_text(_runbook())
    state, textfile = tmp_path / "state", tmp_path / "pdprobe.prom"
    base_env = {"PATH": f"{bindir}:/usr/bin:/bin", "NO_COLOR": "1",
                "PDPROBE_STATE": str(state), "PDPROBE_TEXTFILE": str(textfile),
                "PYTHONPATH": os.environ.get("PYTHONPATH", "")}

    runs = []
    for url, rc, first in ((f"file://{ok}", 0, "OK  "),
                           (f"file://{critical}", 2, "CRITICAL  prefill-bound"),
                           (f"http://127.0.0.1:{free_port()}", 3, "UNKNOWN  could not judge: "
                                                                 "cannot reach Prometheus")):
        res = subprocess.run(["sh", str(script)], env={**base_env, "PROM_URL": url},
                             capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == rc, res.stdout + res.stderr
        assert res.stdout.startswith(first), res.stdout
        assert res.stdout.count("\n") == 1, res.stdout
        assert (state / "report.html").exists() == (rc == 2)  # the old one is gone on UNKNOWN
        assert not (state / "ticket.md").exists()
        assert (state / "report.json").exists() == (rc != 3)
        runs.append(_samples(textfile))

    ok_s, crit_s, unknown_s = runs
    assert ok_s['pdprobe_status{status="ok"}'] == 0
    assert crit_s['pdprobe_status{status="critical"}'] == 2
    assert unknown_s['pdprobe_status{status="unknown"}'] == 3
    assert not [k for k in unknown_s if k.startswith("pdprobe_finding{")]
    (reason,) = [k for k in unknown_s if k.startswith("pdprobe_unknown_reason")]
    assert "cannot reach Prometheus" in reason
    critical_findings = [k for k in crit_s if k.startswith("pdprobe_finding{")
                         and 'severity="critical"' in k and 'root_cause="true"' in k]
    assert critical_findings

    _promtool_test(tmp_path, runs, critical_findings)


def _promtool_test(tmp_path: Path, runs: list[dict[str, float]], critical: list[str]) -> None:
    """One scrape a minute of the textfile as it was after each run; the alerts at 5, 15, 25
    and 85 minutes (OK, CRITICAL, UNKNOWN pending, UNKNOWN for over an hour)."""
    (rules,) = [b for b in _blocks("yaml") if b.startswith("groups:")]
    (tmp_path / "rules.yml").write_text(rules)
    starts = [0, RUN_MINUTES, 2 * RUN_MINUTES]
    minutes = 2 * RUN_MINUTES + UNKNOWN_MINUTES
    run_at = [min(m // RUN_MINUTES, 2) for m in range(minutes)]
    names = sorted({k for run in runs for k in run})
    series = []
    for name in names:
        values = []
        for m in range(minutes):
            run = runs[run_at[m]]
            if name.startswith("pdprobe_last_run_timestamp_seconds"):
                values.append(str(starts[run_at[m]] * 60))  # the run's time on the test clock
            else:
                values.append(_num(run[name]) if name in run else "_")
        series.append({"series": name, "values": " ".join(values)})

    def labels(sample: str) -> dict[str, str]:
        return dict(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', sample))

    crit_alerts = []
    for sample in critical:
        lab = labels(sample)
        crit_alerts.append({
            "exp_labels": {**lab, "severity": "page"},
            "exp_annotations": {
                "summary": f"pdprobe: {lab['cause']} ({lab['code']})",
                "description": f"Run `pdprobe explain {lab['code']}` and see the last report."}})
    cannot_judge = [{"exp_labels": {"status": "unknown", "severity": "ticket"},
                     "exp_annotations": {"summary": "pdprobe could not judge the cluster for an "
                                                    "hour (see pdprobe_unknown_reason)"}}]
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "PdprobeCriticalFinding", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "PdprobeCriticalFinding", "exp_alerts": crit_alerts},
            {"eval_time": "25m", "alertname": "PdprobeCriticalFinding", "exp_alerts": []},
            {"eval_time": "25m", "alertname": "PdprobeCannotJudge", "exp_alerts": []},
            {"eval_time": "25m", "alertname": "PdprobeStale", "exp_alerts": []},
            {"eval_time": "85m", "alertname": "PdprobeCannotJudge", "exp_alerts": cannot_judge},
        ]}]}
    (tmp_path / "tests.yml").write_text(json.dumps(tests))  # JSON is YAML
    res = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def _num(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
