"""Rebuild a ``Report`` from its JSON (``to_json_dict`` output) to re-render it offline.

The JSON carries ``null`` for unknown values and their reasons under ``missing`` (keyed by
the same paths the serializer uses), so ``Missing(reason)`` comes back where it was. A null
float with no recorded reason was a NaN and comes back as NaN. Fields the JSON does not carry
(for example the workload's sample count) are rebuilt from what it does carry; the renderers
print only fields that survive the round trip.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pdprobe.analysis.base import LengthDistribution, Quantiles, TimeSeries, WorkloadSummary
from pdprobe.dataset import SourceInfo
from pdprobe.errors import InputError
from pdprobe.report.model import SCHEMA_VERSION, Report, RoleCounts
from pdprobe.rules.base import Finding, Inconclusive
from pdprobe.values import Missing

HINT = "pass a report written by 'pdprobe diagnose --format json'"
STATUSES = ("ok", "warning", "critical", "unknown")
NOT_RECORDED = "not recorded in the saved report"


class _Bad(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def load_report(path: Path | str) -> Report:
    """Read a JSON report file (``-`` reads stdin)."""
    import sys

    name = "<stdin>" if str(path) == "-" else str(path)
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{name}: no such file", hint=HINT) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{name}: cannot read ({exc.__class__.__name__}: {exc})",
                         hint=HINT) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: not valid JSON (line {exc.lineno} column {exc.colno}: "
                         f"{exc.msg})", hint=HINT) from None
    return report_from_dict(data, source=name)


def report_from_dict(data: Any, source: str = "report") -> Report:
    """The ``Report`` a ``to_json_dict`` result describes; ``InputError`` naming the bad path."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: not a pdprobe report (top level is "
                         f"{_kind(data)}, expected an object)", hint=HINT)
    version = data.get("schema_version")
    if version is None:
        raise InputError(f"{source}: not a pdprobe report (no schema_version)", hint=HINT)
    if version != SCHEMA_VERSION:
        raise InputError(f"{source}: schema_version {version!r} is not supported (this pdprobe "
                         f"reads {SCHEMA_VERSION})",
                         hint="re-run the diagnosis with this pdprobe, or render with the "
                              "pdprobe version that wrote it")
    try:
        return _Loader(data).report()
    except _Bad as exc:
        raise InputError(f"{source}: {exc.path}: {exc.problem}", hint=HINT) from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", int: "a number", float: "a number"}.get(type(value), "a value")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _parse_iso(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Bad(path, f"expected an ISO 8601 time, got {_kind(value)}")
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise _Bad(path, f"{value!r} is not an ISO 8601 time") from None


class _Loader:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        missing = data.get("missing") or {}
        if not isinstance(missing, dict):
            raise _Bad("missing", "expected an object of reasons")
        self.missing: dict[str, str] = {str(k): str(v) for k, v in missing.items()}

    def _get(self, obj: Any, key: str, path: str) -> Any:
        if not isinstance(obj, dict):
            raise _Bad(path, f"expected an object, got {_kind(obj)}")
        if key not in obj:
            raise _Bad(f"{path}.{key}" if path else key, "missing")
        return obj[key]

    def report(self) -> Report:
        d = self.data
        status = self._get(d, "status", "")
        if status not in STATUSES:
            raise _Bad("status", f"{status!r} is not one of {', '.join(STATUSES)}")
        window = self._get(d, "window", "")
        start = _parse_iso(self._get(window, "start", "window"), "window.start")
        end = _parse_iso(self._get(window, "end", "window"), "window.end")
        counts = self._get(d, "instances", "")
        known = {
            "schema_version": SCHEMA_VERSION,
            "status": status,
            "pdprobe_version": str(d.get("pdprobe_version", "unknown")),
            "generated_at": str(d.get("generated_at", "")),
            "window_start_ts": start,
            "window_end_ts": end,
            "input_description": str((d.get("input") or {}).get("description", "")),
            "sources": self.build(tuple[SourceInfo, ...],
                                  (d.get("input") or {}).get("sources") or [], "input.sources"),
            "workload": self.workload(start, end),
            "instance_counts": RoleCounts(
                prefill=self.build(int | None, counts.get("prefill"), "instances.prefill"),
                decode=self.build(int | None, counts.get("decode"), "instances.decode"),
                unknown=self.build(int, counts.get("unknown", 0), "instances.unknown")),
            "instances": self.build(_hints(Report)["instances"], d.get("per_instance") or [],
                                    "per_instance"),
            "slo": self.build(_hints(Report)["slo"], d.get("slo"), "slo"),
            "capacity": self.capacity(),
            "findings": self.build(tuple[Finding, ...], self._get(d, "findings", ""),
                                   "findings"),
            "inconclusive": self.build(tuple[Inconclusive, ...], d.get("inconclusive") or [],
                                       "inconclusive"),
            "warnings": self.build(tuple[str, ...], d.get("warnings") or [], "warnings"),
            "notes": self.build(tuple[str, ...], d.get("notes") or [], "notes"),
        }
        # Fields added to Report later (carried under the same name) load without a change here.
        for f in dataclasses.fields(Report):
            if f.name not in known and f.name in d:
                known[f.name] = self.build(_hints(Report)[f.name], d[f.name], f.name)
        return Report(**known)

    def capacity(self) -> Any:
        cap = self.data.get("capacity")
        if cap is None:
            return Missing(self.missing.get("ratio") or self.missing.get("capacity")
                           or NOT_RECORDED)
        return self.build(_hints(Report)["capacity"], cap, "capacity")

    def workload(self, start: float | None, end: float | None) -> Any:
        if "workload" in self.missing:
            return Missing(self.missing["workload"])
        wl = self._get(self.data, "workload", "")
        if not isinstance(wl, dict):
            raise _Bad("workload", f"expected an object, got {_kind(wl)}")
        requests = self.build(int, self._get(wl, "requests", "workload"), "workload.requests")
        hints = _hints(WorkloadSummary)
        rate = self.build(hints["arrival_rate_rps"], wl.get("arrival_rate_rps"),
                          "workload.arrival_rate_rps")
        extra = {}
        for name in ("offered_rate_rps", "completed_rate_rps", "cached_fraction", "arrival_cv2",
                     "prompt_output_corr"):
            if name in wl:
                extra[name] = self.build(hints[name], wl[name], f"workload.{name}")
        if "arrival_series" in wl and wl["arrival_series"] is not None:
            extra["arrival_series"] = self.build(TimeSeries, wl["arrival_series"],
                                                 "workload.arrival_series")
        ws = wl.get("window_start_ts", start)
        we = wl.get("window_end_ts", end)
        return WorkloadSummary(
            requests=requests,
            window_start_ts=float("nan") if ws is None else float(ws),
            window_end_ts=float("nan") if we is None else float(we),
            arrival_rate_rps=rate,
            prompt_tokens=self.lengths(wl.get("prompt_tokens"), "workload.prompt_tokens",
                                       requests),
            output_tokens=self.lengths(wl.get("output_tokens"), "workload.output_tokens",
                                       requests),
            failed_requests=self.build(int, wl.get("failed_requests", 0),
                                       "workload.failed_requests"),
            source=str(wl.get("source", "request records")),
            **extra,
        )

    def lengths(self, value: Any, path: str, requests: int) -> LengthDistribution | Missing:
        if value is None:
            return Missing(self.missing.get(path, NOT_RECORDED))
        if not isinstance(value, dict):
            raise _Bad(path, f"expected an object, got {_kind(value)}")

        def num(key: str) -> float:
            return self.build(float, value.get(key), f"{path}.{key}")

        count = value.get("count", requests)
        q = Quantiles(count=self.build(int, count, f"{path}.count"), mean=num("mean"),
                      p50=num("p50"), p90=num("p90"), p99=num("p99"),
                      max=self.build(float | None, value.get("max"), f"{path}.max"),
                      estimated=bool(value.get("estimated", False)))
        return LengthDistribution(quantiles=q, cv=num("cv"), skewness=num("skewness"),
                                  shape=str(value.get("shape") or ""))

    # --- generic: a JSON value into the annotated type ----------------------------------------

    def build(self, tp: Any, value: Any, path: str) -> Any:
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            return self._union(get_args(tp), value, path)
        if origin is Literal:
            if value not in get_args(tp):
                allowed = ", ".join(repr(a) for a in get_args(tp))
                raise _Bad(path, f"{value!r} is not one of {allowed}")
            return value
        if origin is tuple:
            args = get_args(tp)
            if not isinstance(value, list):
                raise _Bad(path, f"expected an array, got {_kind(value)}")
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(self.build(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
            if len(args) != len(value):
                raise _Bad(path, f"expected {len(args)} items, got {len(value)}")
            return tuple(self.build(a, v, f"{path}[{i}]")
                         for i, (a, v) in enumerate(zip(args, value, strict=True)))
        if origin in (dict, Mapping):
            key_tp, val_tp = get_args(tp)
            if not isinstance(value, dict):
                raise _Bad(path, f"expected an object, got {_kind(value)}")
            return {self.build(key_tp, k, path): self.build(val_tp, v, f"{path}.{k}")
                    for k, v in value.items()}
        if tp is Any or tp is object:
            return value
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return self._dataclass(tp, value, path)
        if isinstance(tp, type) and issubclass(tp, Enum):
            try:
                return tp(value)
            except ValueError:
                raise _Bad(path, f"{value!r} is not a valid {tp.__name__}") from None
        return self._scalar(tp, value, path)

    def _union(self, args: tuple[Any, ...], value: Any, path: str) -> Any:
        if value is None:
            if type(None) in args:
                return None
            if path in self.missing or (Missing in args and float not in args):
                return Missing(self.missing.get(path, NOT_RECORDED))
            if float in args:  # NaN serializes as null without a reason
                return float("nan")
            raise _Bad(path, "null is not allowed here")
        candidates = [a for a in args if a is not Missing and a is not type(None)]
        # primitives first, so `float | str` keeps the JSON's own type
        for a in candidates:
            if a in (str, bool) and isinstance(value, a):
                return value
            if a in (int, float) and isinstance(value, (int, float)) \
                    and not isinstance(value, bool):
                return value if a is float or isinstance(value, int) else self._scalar(a, value,
                                                                                       path)
        errors: list[_Bad] = []
        for a in candidates:
            try:
                return self.build(a, value, path)
            except _Bad as exc:
                errors.append(exc)
        if not errors:
            raise _Bad(path, f"unexpected {_kind(value)}")
        raise max(errors, key=lambda e: len(e.path))  # the deepest path says most

    def _dataclass(self, cls: type, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _Bad(path, f"expected an object, got {_kind(value)}")
        hints = _hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            sub = f"{path}.{f.name}"
            if f.name in value:
                kwargs[f.name] = self.build(hints[f.name], value[f.name], sub)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _Bad(sub, "missing")
        return cls(**kwargs)

    def _scalar(self, tp: Any, value: Any, path: str) -> Any:
        if tp is float:
            if value is None:
                return float("nan")  # NaN is written as null
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return value  # keep int vs float as written, so it prints the same
            raise _Bad(path, f"expected a number, got {_kind(value)}")
        if tp is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                return int(value)
            raise _Bad(path, f"expected an integer, got {_kind(value)}")
        if tp is str:
            if isinstance(value, str):
                return value
            raise _Bad(path, f"expected a string, got {_kind(value)}")
        if tp is bool:
            if isinstance(value, bool):
                return value
            raise _Bad(path, f"expected true or false, got {_kind(value)}")
        if tp is type(None):
            if value is None:
                return None
            raise _Bad(path, "expected null")
        raise _Bad(path, f"cannot read a value of type {tp!r}")


__all__ = ["load_report", "report_from_dict"]
