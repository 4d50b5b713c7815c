"""Live and offline agree on the same data: scenario-matrix captures replayed through Prometheus.

Each case of the simulator's scenario matrix (``pdprobe.sim.scenarios``) writes its engine and
node metrics as OpenMetrics with sample timestamps (vLLM 0.33 names and buckets, node_exporter
``node_network_*``/``node_infiniband_*``), placed in the past one after the other. All of them
go through ``promtool tsdb create-blocks-from openmetrics`` into one TSDB served by a real
Prometheus (tests/live/prom_server.py). Per case, ``pdprobe diagnose --prometheus`` over the
case's own window must give the verdict ``pdprobe diagnose`` gives on the same metric files:
the same status, the same findings (code, cause, severity), the same top cause. (Tried on
independent captures, a length-mix shift the offline reading named ratio-lag came out live as
routing-skew/info, status ok.)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from pdprobe.cli.app import main
from tests.live.conftest import END_BEFORE_NOW_S, require_prometheus
from tests.live.prom_server import PromServer, create_blocks

pytestmark = [pytest.mark.live, pytest.mark.slow]

scenarios = pytest.importorskip("pdprobe.sim.scenarios")

# Few enough to keep CI fast, one per family of evidence: a length-mix shift (ratio-lag), a
# per-instance comparison (straggler), a queue (prefill-bound) and a healthy cluster.
CASES = ("ratio-lag", "straggler", "prefill-bound", "healthy-low")
# Cases are placed this far apart so their series never overlap in the TSDB.
CASE_SPACING_S = 1800
_TS = re.compile(rb" (\d+(?:\.\d+)?)\n")


@dataclass(frozen=True)
class Replayed:
    name: str
    files: tuple[Path, ...]
    first_ts: float
    last_ts: float


@dataclass(frozen=True)
class Matrix:
    url: str
    cases: dict[str, Replayed]


def _span(path: Path) -> tuple[float, float]:
    stamps = [float(m) for m in _TS.findall(path.read_bytes())]
    return min(stamps), max(stamps)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    promtool, prometheus = require_prometheus()
    root = tmp_path_factory.mktemp("live-matrix")
    latest = (int(time.time()) // 15) * 15 - END_BEFORE_NOW_S
    cases: dict[str, Replayed] = {}
    for k, name in enumerate(CASES):
        cfg = scenarios.build_scenario(name)
        start = latest - (len(CASES) - k) * CASE_SPACING_S
        out = root / name
        scenarios.run_to_dir(replace(cfg, start_ts=float(start)), out)
        files = tuple(p for p in (out / "metrics.om", out / "node_metrics.om") if p.is_file())
        spans = [_span(p) for p in files]
        for p in files:
            create_blocks(p, root / "tsdb", promtool)
        cases[name] = Replayed(name, files, min(s[0] for s in spans), max(s[1] for s in spans))
    server = PromServer.start(root / "tsdb", root / "server", prometheus)
    try:
        yield Matrix(server.url, cases)
    finally:
        server.stop()


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as info:
        main([*args, "--format", "json"])
    out, _ = capsys.readouterr()
    return int(info.value.code or 0), json.loads(out)


def _verdict(report: dict) -> dict:
    findings = report["findings"]
    return {"status": report["status"],
            "top": (findings[0]["cause"], findings[0]["severity"]) if findings else None,
            "findings": sorted((f["code"], f["cause"], f["severity"]) for f in findings)}


@pytest.mark.parametrize("name", CASES)
def test_live_verdict_equals_offline_verdict(matrix: Matrix, name: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    case = matrix.cases[name]
    code_off, offline = _run(["diagnose", *map(str, case.files)], capsys)
    since = case.last_ts - case.first_ts
    code_live, live = _run(["diagnose", "--prometheus", matrix.url, "--since", f"{since:.0f}s",
                            "--until", f"{case.last_ts:.0f}", "--timeout", "60"], capsys)
    injected = None if name.startswith("healthy") else name
    top = _verdict(offline)["top"]
    assert (top[0] if top and top[1] != "info" else None) == injected, _verdict(offline)
    assert live["instances"] == offline["instances"]
    assert _verdict(live) == _verdict(offline), (name, _verdict(live), _verdict(offline))
    assert code_live == code_off
