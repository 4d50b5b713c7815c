"""The shipped JSON Schema: itself valid, accepts every report, rejects contract breaks."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from pdprobe.report.base import RenderOptions
from pdprobe.report.json_format import render, to_json_dict
from tests.report import factory as F
from tests.report import schema_check
from tests.report.schema_check import assert_valid_report, report_errors

ALL = {**F.SCENARIOS, "unknown": F.unknown, "malicious": F.malicious}


def test_schema_is_shipped_and_valid_2020_12() -> None:
    text = (resources.files("pdprobe.report") / "report.schema.json").read_text()
    schema = json.loads(text)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_factory_report_is_valid(name: str) -> None:
    assert_valid_report(render(ALL[name](), RenderOptions()), f"factory {name}")
    assert schema_check.CHECKED[-1] == f"factory {name}"


def _good() -> dict[str, Any]:
    return copy.deepcopy(to_json_dict(F.prefill_bound()))


@pytest.mark.parametrize(("mutate", "where"), [
    (lambda d: d.pop("status"), "<root>: 'status' is a required property"),
    (lambda d: d.update(schema_version=2), "schema_version: 1 was expected"),
    (lambda d: d["findings"][0].update(cause="gpu-melted"), "findings/0/cause"),
    (lambda d: d["findings"][0].update(severity="fatal"), "findings/0/severity"),
    (lambda d: d["findings"][0].pop("evidence"), "findings/0: 'evidence' is a required"),
    (lambda d: d["workload"].update(requests=-1), "workload/requests"),
    (lambda d: d["workload"]["prompt_tokens"].pop("p99"), "workload/prompt_tokens"),
    (lambda d: d["ratio"]["recommended"].update(prefill=2.5), "ratio/recommended/prefill"),
    (lambda d: d["window"].update(start="yesterday"), "window/start"),
    (lambda d: d["instances"].pop("decode"), "instances: 'decode' is a required"),
    (lambda d: d.update(status="ok"), "findings"),  # ok with a critical finding
    (lambda d: d.update(status="warning"), "findings"),  # warning with a critical finding
])
def test_contract_breaks_are_rejected(mutate: Any, where: str) -> None:
    data = _good()
    mutate(data)
    errors = report_errors(data)
    assert any(e.startswith(where) or where in e for e in errors), errors
    with pytest.raises(AssertionError, match=r"violates report\.schema\.json"):
        assert_valid_report(data)


def test_critical_status_needs_a_critical_finding() -> None:
    data = to_json_dict(F.routing_skew())
    data["status"] = "critical"
    assert report_errors(data)


def test_extra_fields_are_allowed() -> None:
    data = _good()
    data["something_new"] = {"a": 1}
    data["findings"][0]["new_detail"] = [1, 2]
    assert report_errors(data) == []


def test_reports_built_in_tests_are_validated() -> None:
    """The autouse fixture checks what --format json renders, as it renders it."""
    from pdprobe.report.base import renderer_for

    before = len(schema_check.CHECKED)
    renderer_for("json")(F.routing_skew(), RenderOptions())
    assert len(schema_check.CHECKED) == before + 1


def test_a_contract_breaking_report_fails_the_test_that_builds_it() -> None:
    import dataclasses

    from pdprobe.report.base import renderer_for

    broken = dataclasses.replace(F.prefill_bound(), status="ok")  # ok with a critical finding
    with pytest.raises(AssertionError, match="findings"):
        renderer_for("json")(broken, RenderOptions())
