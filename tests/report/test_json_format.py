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


def _plain_value(obj: object, path: str, missing: dict[str, str]) -> object:
    """The serializer before its fast paths (one recursive call per value), as the reference."""
    import dataclasses
    import math
    from enum import Enum

    from pdprobe.values import Missing

    if isinstance(obj, Missing):
        missing[path] = obj.reason
        return None
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain_value(getattr(obj, f.name), f"{path}.{f.name}", missing)
                for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain_value(v, f"{path}.{k}", missing) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain_value(v, f"{path}[{i}]", missing) for i, v in enumerate(obj)]
    if hasattr(obj, "item"):
        return _plain_value(obj.item(), path, missing)  # type: ignore[attr-defined]
    return obj


def test_serializer_fast_paths_give_what_the_plain_recursion_gives() -> None:
    """Exact types, cached dataclass fields and whole-list passes change no value and no
    ``missing`` path: NaN/inf in series, numpy scalars, bools, Missing inside lists."""
    import dataclasses

    import numpy as np

    from pdprobe.report.json_format import _Serializer
    from pdprobe.values import Missing
    from tests.report import factory as F

    @dataclasses.dataclass(frozen=True)
    class Row:
        name: str
        value: object

    nan, inf = float("nan"), float("inf")
    odd = {
        "series": (1.0, 2, nan, -inf, 3.5), "finite": [1.0, 2.0, 1e308, 1e308], "ints": (1, 2, 3),
        "flags": [True, False], "names": ("a", "b", None), "empty": (),
        "mixed": [1.0, "x", np.float64(nan), np.int64(7), np.bool_(True), Missing("gone")],
        "rows": (Row("a", Missing("no data")), Row("b", np.float64(2.5)), Row("c", (nan, 1.0))),
        "nested": ((1.0, nan), ("p", "q"), [Row("d", inf)]), "np": np.float64(inf),
        "cls": Row, 3: "int key",
    }
    reports = [factory() for factory in F.SCENARIOS.values()]
    reports += [F.unknown(), F.malicious(), F.transfer_path()]
    for obj in [odd, *reports]:
        ser = _Serializer()
        want: dict[str, str] = {}
        assert ser.value(obj, "r") == _plain_value(obj, "r", want)
        assert ser.missing == want
    ser = _Serializer()
    out = ser.value(odd, "r")
    assert out["series"] == [1.0, 2, None, None, 3.5] and out["finite"][2] == 1e308
    assert ser.missing == {"r.mixed[5]": "gone", "r.rows[0].value": "no data"}
