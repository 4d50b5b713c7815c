"""Prometheus textfile output: valid exposition, escaped labels, the numbers of the report."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from pdprobe.report.base import RenderOptions
from pdprobe.report.prometheus_format import escape_label, render
from tests.report import factory as F

ALL = {**F.SCENARIOS, "unknown": F.unknown, "malicious": F.malicious}
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|'
                    r'\\["\\n])*",?)*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\["\\n])*)"')


def parse(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """A strict reader of the exposition format: HELP and TYPE before the samples, once."""
    families: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    helped: set[str] = set()
    typed: set[str] = set()
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert name not in helped, f"second HELP for {name}"
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind == "gauge" and name in helped and name not in typed
            typed.add(name)
        else:
            m = SAMPLE.match(line)
            assert m, f"bad sample line {line!r}"
            name, labels, value = m.group(1), m.group(3) or "", m.group(4)
            assert name in typed, f"sample before TYPE: {line}"
            key = tuple(LABEL.findall(labels))
            series = families.setdefault(name, {})
            assert key not in series, f"duplicate series {line}"
            series[key] = float(value)
    return families


@pytest.mark.parametrize("name", sorted(ALL))
def test_valid_exposition(name: str) -> None:
    parse(render(ALL[name](), RenderOptions()))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
@pytest.mark.parametrize("name", sorted(ALL))
def test_promtool_accepts_it(name: str) -> None:
    text = render(ALL[name](), RenderOptions())
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_key_figures() -> None:
    m = parse(render(F.prefill_bound(), RenderOptions()))
    assert m["pdprobe_status"] == {(("status", "critical"),): 2.0}
    assert m["pdprobe_finding"] == {
        (("code", "PD001"), ("cause", "prefill-bound"), ("severity", "critical"),
         ("root_cause", "true")): 1.0,
        (("code", "PD004"), ("cause", "decode-bound"), ("severity", "warning"),
         ("root_cause", "false")): 1.0,
    }
    assert m["pdprobe_findings"][(("severity", "critical"),)] == 1.0
    assert m["pdprobe_findings"][(("severity", "info"),)] == 0.0
    assert m["pdprobe_ratio_theoretical"][()] == 0.95
    assert m["pdprobe_ratio_deployed"][()] == 0.5
    assert m["pdprobe_instances"][(("role", "prefill"), ("kind", "recommended"))] == 4.0
    assert m["pdprobe_instances"][(("role", "prefill"), ("kind", "deployed"))] == 2.0
    assert m["pdprobe_capacity_known"][()] == 1.0
    assert m["pdprobe_workload_prompt_tokens"][(("stat", "p99"),)] == 85400.4
    assert m["pdprobe_workload_arrival_rate_requests_per_second"][()] == 3.401
    assert m["pdprobe_slo_attainment_ratio"][(("objective", "ttft"),)] == 0.412
    assert m["pdprobe_last_run_timestamp_seconds"][()] == 1714642200.0  # 2024-05-02T09:30:00Z
    assert m["pdprobe_window_seconds"][()] == 3537.0
    assert m["pdprobe_binding_stage"] == {(("stage", "prefill"),): 1.0}


def test_missing_values_are_left_out_not_zero() -> None:
    m = parse(render(F.metrics_only(), RenderOptions()))
    assert m["pdprobe_capacity_known"][()] == 0.0
    assert "pdprobe_ratio_theoretical" not in m
    assert (("role", "prefill"), ("kind", "recommended")) not in m["pdprobe_instances"]
    assert "pdprobe_workload_cached_ratio" not in m  # Missing in the report
    assert (("stat", "mean"),) not in m["pdprobe_workload_prompt_tokens"]  # NaN from histograms
    assert m["pdprobe_workload_prompt_tokens"][(("stat", "p50"),)] == 980.0
    assert (("objective", "both"),) not in m["pdprobe_slo_attainment_ratio"]


def test_unknown_status() -> None:
    m = parse(render(F.unknown(), RenderOptions()))
    assert m["pdprobe_status"] == {(("status", "unknown"),): 3.0}
    assert "pdprobe_finding" not in m
    assert "pdprobe_workload_requests" not in m


def test_label_values_are_escaped() -> None:
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    text = render(F.malicious(), RenderOptions())
    m = parse(text)
    sources = {dict(k)["source"] for k in m["pdprobe_input_rows"]}
    assert 'x\\"><img src=x onerror=alert(2)>.jsonl' in sources


def test_unknown_without_a_report_names_the_reason_and_no_finding() -> None:
    from pdprobe.report.prometheus_format import render_unknown

    text = render_unknown('input "x.jsonl": line 3\nbad', now_s=1700000000.0)
    families = parse(text)
    assert families["pdprobe_status"] == {(("status", "unknown"),): 3.0}
    ((labels, value),) = families["pdprobe_unknown_reason"].items()
    assert value == 1 and labels == (("reason", 'input \\"x.jsonl\\": line 3 bad'),)
    assert families["pdprobe_last_run_timestamp_seconds"] == {(): 1700000000.0}
    assert "pdprobe_finding" not in families
    assert set(families["pdprobe_findings"].values()) == {0.0}


def test_unknown_report_carries_its_reason() -> None:
    families = parse(render(F.unknown(), RenderOptions()))
    assert list(families["pdprobe_unknown_reason"].values()) == [1.0]
