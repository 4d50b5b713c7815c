"""Validate JSON reports against the shipped schema (``pdprobe/report/report.schema.json``).

``assert_valid_report(data)`` checks one report (a dict or the JSON text) and records it in
``CHECKED``. Loaded as a pytest plugin (``pytest_plugins = ["tests.report.schema_check"]`` in
``tests/conftest.py``) this module also validates *every* report the suite produces in-process:
the autouse fixture wraps ``json_format.to_json_dict`` (which ``--format json`` and
``pdprobe render`` go through), and the terminal summary says how many reports were checked.
Reports written by a child process are checked by calling ``assert_valid_report`` on the file.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from importlib import resources
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

CHECKED: list[str] = []  # a short label of every report validated in this session

_FORMATS = FormatChecker()


@_FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    """RFC 3339 date-time with a zone (jsonschema skips it without an optional extra)."""
    if not isinstance(value, str):
        return True
    if "T" not in value or not (value.endswith("Z") or value[-6] in "+-"):
        raise ValueError(f"{value!r} is not an RFC 3339 date-time with a zone")
    datetime.fromisoformat(value)
    return True


@functools.cache
def schema() -> dict[str, Any]:
    text = (resources.files("pdprobe.report") / "report.schema.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@functools.cache
def validator() -> Draft202012Validator:
    Draft202012Validator.check_schema(schema())
    return Draft202012Validator(schema(), format_checker=_FORMATS)


def report_errors(data: dict[str, Any] | str) -> list[str]:
    """Every schema violation as ``path: message`` (empty when valid)."""
    doc = json.loads(data) if isinstance(data, str) else data
    errors = sorted(validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in errors]


def assert_valid_report(data: dict[str, Any] | str, label: str = "") -> None:
    """Fail with every violation listed when ``data`` does not match the report schema."""
    errors = report_errors(data)
    if errors:
        raise AssertionError("JSON report violates report.schema.json:\n  "
                             + "\n  ".join(errors[:20]))
    CHECKED.append(label or "report")


@pytest.fixture(scope="session")
def report_schema() -> Any:
    """The validator function, for tests outside tests/report (load this module as a plugin)."""
    return assert_valid_report


@pytest.fixture(autouse=True)
def validate_json_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every JSON report built in this test is checked against the schema as it is built."""
    from pdprobe.report import json_format

    original = json_format.to_json_dict

    def checked(report: Any) -> dict[str, Any]:
        data = original(report)
        assert_valid_report(data, "to_json_dict")
        return data

    monkeypatch.setattr(json_format, "to_json_dict", checked)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if CHECKED:
        terminalreporter.write_line(f"pdprobe: {len(CHECKED)} JSON reports matched "
                                    "report.schema.json")
