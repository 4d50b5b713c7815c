"""Status and exit codes as docs/contract.md says: status follows the findings, UNKNOWN (exit 3) only
when nothing could be judged and then with a one-line reason, single scrapes judged on what one
scrape shows.

The single-scrape fixtures (tests/fixtures/metrics/single_scrape/) are the first scrape of the
two-scrape fixtures beside them, without sample timestamps, as a plain ``GET /metrics`` returns
them: vLLM's names from vllm/v1/metrics/loggers.py (PrometheusStatLogger), SGLang's from
python/sglang/srt/metrics/collector.py (SchedulerMetricsCollector/TokenizerMetricsCollector),
node_exporter's from collector/infiniband_linux.go (see docs/inputs/ for the full references).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdprobe.cli.common import EXIT_UNKNOWN, FailOn, exit_code_for
from pdprobe.report.model import status_for
from pdprobe.rules.base import Finding, Severity
from pdprobe.services.diagnose import DiagnoseRequest, diagnose

SINGLE = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "single_scrape"


def _run(name: str):  # type: ignore[no-untyped-def]
    return diagnose(DiagnoseRequest(paths=(SINGLE / name,)))


def test_single_vllm_scrape_is_judged_since_start() -> None:
    report = _run("vllm_033_pd.prom")
    assert report.status != "unknown"
    assert report.slo is not None and getattr(report.slo, "since_start", False)
    assert any(n.startswith("a single scrape:") and "two scrapes" in n for n in report.notes)
    judged = {"PD101", "PD201", "PD202", "PD801"} - {i.code for i in report.inconclusive}
    assert judged  # gauges and histograms since start are enough for some rules


def test_single_trtllm_scrape_is_judged_on_its_histograms_since_start() -> None:
    """TensorRT-LLM's own names as one scrape through Dynamo (fixture: series of ai-dynamo/dynamo
    docs/observability/metrics_examples/, see tests/collectors/test_catalog_families.py): the
    TTFT/TPOT histograms since engine start give the attainment, labelled so, and the report says
    what needs two scrapes; never unknown."""
    report = diagnose(DiagnoseRequest(
        paths=(SINGLE.parent / "families" / "dynamo_trtllm_agg.prom",)))
    assert report.status == "ok"  # two requests, both within the default objectives
    assert report.slo is not None and getattr(report.slo, "since_start", False)
    assert report.slo.ttft == 1.0 and "one scrape" in report.slo.method
    assert any(n.startswith("a single scrape:") and "two scrapes" in n for n in report.notes)
    assert "PD801" not in {i.code for i in report.inconclusive}


def test_single_sglang_scrape_finds_decode_starvation_from_gauges() -> None:
    report = _run("sglang_0523_pd.prom")
    assert report.status == "warning"
    assert report.findings[0].cause == "decode-bound"
    assert any(n.startswith("a single scrape:") for n in report.notes)


def test_single_node_exporter_scrape_says_what_needs_two() -> None:
    report = _run("node_infiniband.prom")
    assert any("need two scrapes" in n for n in report.notes)
    if report.status == "unknown":
        assert report.status_reason and "single scrape" in report.status_reason


def test_nothing_judged_is_unknown_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"arrival_ts": 1.7e9, "prompt_tokens": 10, "output_tokens": 2}\n')
    report = diagnose(DiagnoseRequest(paths=(path,)))
    assert report.status == "unknown"
    assert report.status_reason and "\n" not in report.status_reason
    assert exit_code_for(report, FailOn.warning) == EXIT_UNKNOWN


_SEVERITIES = st.sampled_from(list(Severity))


@settings(max_examples=200, deadline=None)
@given(severities=st.lists(_SEVERITIES, max_size=5), judged=st.booleans())
def test_never_unknown_with_a_finding(severities: list[Severity], judged: bool) -> None:
    findings = tuple(Finding(code=f"PD{100 + i}", cause="straggler", severity=s, confidence=0.5,
                             summary="x") for i, s in enumerate(severities))
    status = status_for(findings, judged=judged)
    if findings:
        assert status != "unknown"
    if any(s.rank >= 1 for s in severities):
        assert status in ("warning", "critical")
    if not findings and not judged:
        assert status == "unknown"


@pytest.mark.parametrize("name", ["vllm_033_pd.prom", "sglang_0523_pd.prom",
                                  "node_infiniband.prom"])
def test_exit_3_always_has_a_reason_and_no_warning(name: str) -> None:
    report = _run(name)
    code = exit_code_for(report, FailOn.warning)
    if code == EXIT_UNKNOWN:
        assert report.status_reason
        assert not any(f.severity.rank >= 1 for f in report.findings)
