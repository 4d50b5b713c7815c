"""End to end on simulated captures: the top finding names the injected cause.

Each scenario of the simulator's matrix is written to a folder (request records, engine
metrics, node metrics, engine logs) and diagnosed through the public service, exactly as
``pdprobe diagnose DIR`` would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pdprobe.values import Missing
from tests.analysis.capacity._consistency import count_disagreements

scenarios = pytest.importorskip(
    "pdprobe.sim.scenarios", reason="the simulator's scenario matrix (pdprobe.sim.scenarios) "
                                    "is not available")

CAUSES = ("prefill-bound", "decode-bound", "kv-transfer-bandwidth", "rdma-retransmits",
          "no-rdma", "routing-skew", "straggler", "ratio-lag")


def _diagnose(name: str, out: Path):  # type: ignore[no-untyped-def]
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose

    scenarios.run_to_dir(scenarios.build_scenario(name, seed=0), out)
    report = diagnose(DiagnoseRequest(paths=(out,)))
    # every count of the capacity section describes one model (the windows and the band
    # agree with the recommendation), whatever the scenario
    assert isinstance(report.capacity, Missing) or not count_disagreements(report.capacity)
    return report


@pytest.mark.slow
@pytest.mark.parametrize("name,cause", [*((c, c) for c in CAUSES),
                                        ("decode-bound-count", "decode-bound"),
                                        ("ratio-lag-late", "ratio-lag")])
def test_top_finding_names_the_injected_cause(name: str, cause: str, tmp_path: Path) -> None:
    report = _diagnose(name, tmp_path / name)
    assert report.findings, f"{cause}: no finding"
    top = report.findings[0]
    assert top.cause == cause, [(f.code, f.cause, f.severity.value) for f in report.findings]
    assert top.is_root_cause
    assert report.status in ("warning", "critical")
    assert top.evidence and top.next_steps and top.component


@pytest.mark.slow
@pytest.mark.parametrize("name", ["healthy-low", "healthy-high", "instance-churn"])
def test_healthy_captures_get_status_ok(name: str, tmp_path: Path) -> None:
    report = _diagnose(name, tmp_path / name)
    assert report.status == "ok", [(f.code, f.severity.value, f.summary) for f in report.findings]
