"""JSON -> Report: the round trip renders identically; bad files fail with one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pdprobe.errors import InputError
from pdprobe.report.base import FORMATS, RenderOptions, renderer_for
from pdprobe.report.json_format import to_json_dict
from pdprobe.report.load import load_report, report_from_dict
from pdprobe.values import Missing
from tests.report import factory as F
from tests.report.schema_check import assert_valid_report

ALL = {**F.SCENARIOS, "unknown": F.unknown, "malicious": F.malicious}


def _roundtrip(report: object) -> object:
    data = json.loads(json.dumps(to_json_dict(report), allow_nan=False))  # type: ignore[arg-type]
    assert_valid_report(data, "load round trip")
    return report_from_dict(data)


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_roundtrip_renders_identically(name: str, fmt: str) -> None:
    report = ALL[name]()
    loaded = _roundtrip(report)
    render = renderer_for(fmt)
    for options in (RenderOptions(), RenderOptions(verbose=True), RenderOptions(quiet=True)):
        assert render(loaded, options) == render(report, options)  # type: ignore[arg-type]


def test_missing_reasons_and_nan_come_back() -> None:
    loaded = _roundtrip(F.metrics_only())
    assert loaded.capacity == Missing("needs per-request lengths or a --profile for the model "  # type: ignore[attr-defined]
                                      "and GPU")
    wl = loaded.workload  # type: ignore[attr-defined]
    assert wl.arrival_cv2 == Missing("metrics give counts per scrape, not arrival times")
    assert math.isnan(wl.prompt_tokens.quantiles.mean)
    assert wl.prompt_tokens.quantiles.p50 == 980
    assert wl.prompt_tokens.quantiles.estimated is True
    inst = loaded.instances[0]  # type: ignore[attr-defined]
    assert inst.tpot_s == Missing("no TPOT data")
    assert math.isnan(inst.ttft_s.mean) and inst.ttft_s.p90 == 0.9
    assert loaded.slo.both == Missing("needs per-request TTFT and TPOT")  # type: ignore[attr-defined]


def test_findings_and_capacity_come_back_equal() -> None:
    report = F.prefill_bound()
    loaded = _roundtrip(report)
    assert loaded.findings == report.findings  # type: ignore[attr-defined]
    assert loaded.capacity == report.capacity  # type: ignore[attr-defined]
    assert loaded.instances == report.instances  # type: ignore[attr-defined]
    assert loaded.sources == report.sources  # type: ignore[attr-defined]
    assert loaded.window_start_ts == 0.0 and loaded.window_end_ts == 3537.0  # type: ignore[attr-defined]


def test_load_file_and_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    text = json.dumps(to_json_dict(F.routing_skew()))
    path = tmp_path / "r.json"
    path.write_text(text)
    assert load_report(path).status == "warning"
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert load_report("-").status == "warning"


@pytest.mark.parametrize(("content", "message"), [
    ("{oops", "bad.json: not valid JSON (line 1 column 2"),
    ("[1, 2]", "bad.json: not a pdprobe report (top level is an array"),
    ('{"status": "ok"}', "bad.json: not a pdprobe report (no schema_version)"),
    ('{"schema_version": 2}', "bad.json: schema_version 2 is not supported (this pdprobe reads 1)"),
])
def test_bad_files_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        load_report(path)
    line = info.value.one_line()
    assert "\n" not in line
    assert line.startswith(str(tmp_path / message.split(":")[0]) + ":" + message.split(":", 1)[1])


def test_wrong_types_name_the_path() -> None:
    data = to_json_dict(F.prefill_bound())
    data["findings"][0]["severity"] = "fatal"
    with pytest.raises(InputError, match=r"r\.json: findings\[0\]\.severity: 'fatal' is not a "
                                         r"valid Severity"):
        report_from_dict(data, "r.json")
    data = to_json_dict(F.prefill_bound())
    data["per_instance"][1]["ttft_s"]["p90"] = "slow"
    with pytest.raises(InputError, match=r"per_instance\[1\]\.ttft_s\.p90: expected a number"):
        report_from_dict(data, "r.json")
    data = to_json_dict(F.prefill_bound())
    data["status"] = "fine"
    with pytest.raises(InputError, match="status: 'fine' is not one of ok, warning"):
        report_from_dict(data, "r.json")
    data = to_json_dict(F.prefill_bound())
    del data["findings"][0]["code"]
    with pytest.raises(InputError, match=r"findings\[0\]\.code: missing"):
        report_from_dict(data, "r.json")


def test_missing_file() -> None:
    with pytest.raises(InputError, match=r"nope\.json: no such file"):
        load_report("nope.json")
