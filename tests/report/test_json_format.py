"""pdprobe/report/json_format.py: the planner audit's data (issue 13 item 4)."""

from __future__ import annotations

import json
from pathlib import Path


def test_planner_counts_per_window_in_json_match_the_schema() -> None:
    """Controller audit: the planner's counts per capacity window are JSON data (null without)."""
    import dataclasses

    import jsonschema

    from pdprobe.report.json_format import to_json_dict
    from tests.report import factory as F

    report = F.prefill_bound()
    cap = report.capacity
    cap = dataclasses.replace(cap, windows=tuple(  # type: ignore[arg-type]
        dataclasses.replace(w, planner_decode=2.0, planner_predicted_decode=4.0)
        for w in cap.windows))  # type: ignore[union-attr]
    doc = to_json_dict(dataclasses.replace(report, capacity=cap))
    win = doc["capacity"]["windows"][0]
    assert (win["planner_decode"], win["planner_predicted_decode"]) == (2.0, 4.0)
    assert win["planner_prefill"] is None
    schema = json.loads((Path(__file__).resolve().parents[2] / "pdprobe" / "report"
                         / "report.schema.json").read_text())
    jsonschema.validate(doc, schema)
