"""JSON report: the minimum fields of docs/contract.md first, then the full detail.

Missing values become ``null`` and their reasons are collected under ``missing`` keyed by the
JSON path, so a script can tell "not measured" from zero.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Final

from pdprobe.analysis.base import LengthDistribution, Quantiles
from pdprobe.report.base import RenderOptions
from pdprobe.report.model import Report
from pdprobe.values import Missing


def iso(ts: float | None) -> str | None:
    """A Unix time as ISO 8601 UTC (``2023-11-16T18:17:03Z``), None when unknown."""
    if ts is None or (isinstance(ts, float) and not math.isfinite(ts)):
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


# Scalars emitted as they are; checked by exact type first (most of a report's ~70k values).
_PLAIN: Final = frozenset({str, int, bool, type(None)})
# What a list of plain numbers holds: the report's series (hundreds of thousands of values).
_NUMBERS: Final = frozenset({float, int})


class _Serializer:
    def __init__(self) -> None:
        self.missing: dict[str, str] = {}
        # A type's dataclass field names, None for a type that is not a dataclass.
        self._fields: dict[type, tuple[str, ...] | None] = {}

    def value(self, obj: Any, path: str) -> Any:
        kind = type(obj)
        if kind in _PLAIN:
            return obj
        if kind is float:
            return obj if math.isfinite(obj) else None
        if isinstance(obj, Missing):
            self.missing[path] = obj.reason
            return None
        if isinstance(obj, Enum):
            return obj.value
        if isinstance(obj, float):  # numpy.float64 too: emitted as a plain float
            return float(obj) if math.isfinite(obj) else None
        names = self._field_names(kind)
        if names is not None:
            out = {}
            for name in names:  # plain fields inline: a call per leaf was most of the cost
                v = getattr(obj, name)
                vk = type(v)
                if vk in _PLAIN:
                    out[name] = v
                elif vk is float:
                    out[name] = v if math.isfinite(v) else None
                else:
                    out[name] = self.value(v, f"{path}.{name}")
            return out
        if isinstance(obj, dict):
            return {str(k): self.value(v, f"{path}.{k}") for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            kinds = set(map(type, obj))
            if kinds <= _NUMBERS:
                # Series values (hundreds of thousands in a large cluster's report): no path
                # per element is needed, as none of them can be a Missing. A finite sum means
                # every value is finite (a NaN or an infinity never sums to a finite number).
                if math.isfinite(sum(obj)):
                    return list(obj)
                return [v if type(v) is int or math.isfinite(v) else None for v in obj]
            if kinds <= _PLAIN:  # names, labels: emitted as they are
                return list(obj)
            return [self.value(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        if hasattr(obj, "item"):  # numpy scalar
            return self.value(obj.item(), path)
        return obj

    def _field_names(self, kind: type) -> tuple[str, ...] | None:
        """Field names of a dataclass type (cached per type), None for any other type."""
        try:
            return self._fields[kind]
        except KeyError:
            names = (tuple(f.name for f in dataclasses.fields(kind))
                     if dataclasses.is_dataclass(kind) and kind is not type else None)
            self._fields[kind] = names
            return names


def _length_summary(dist: Any, ser: _Serializer, path: str) -> Any:
    if isinstance(dist, Missing):
        ser.missing[path] = dist.reason
        return None
    q: Quantiles = dist.quantiles if isinstance(dist, LengthDistribution) else dist
    out: dict[str, Any] = {"mean": q.mean, "p50": q.p50, "p90": q.p90, "p99": q.p99, "count": q.count,
           "max": q.max}
    if isinstance(dist, LengthDistribution):
        out.update({"cv": dist.cv, "skewness": dist.skewness, "shape": dist.shape,
                    "estimated": q.estimated})
    return ser.value(out, path)


def to_json_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON data (the stable machine interface)."""
    ser = _Serializer()
    wl = report.workload
    workload: dict[str, Any]
    if isinstance(wl, Missing):
        ser.missing["workload"] = wl.reason
        workload = {"requests": 0, "arrival_rate_rps": None, "prompt_tokens": None,
                    "output_tokens": None}
    else:
        workload = {
            "requests": wl.requests,
            "arrival_rate_rps": ser.value(wl.arrival_rate_rps, "workload.arrival_rate_rps"),
            "prompt_tokens": _length_summary(wl.prompt_tokens, ser, "workload.prompt_tokens"),
            "output_tokens": _length_summary(wl.output_tokens, ser, "workload.output_tokens"),
            "offered_rate_rps": ser.value(wl.offered_rate_rps, "workload.offered_rate_rps"),
            "completed_rate_rps": ser.value(wl.completed_rate_rps, "workload.completed_rate_rps"),
            "cached_fraction": ser.value(wl.cached_fraction, "workload.cached_fraction"),
            "arrival_cv2": ser.value(wl.arrival_cv2, "workload.arrival_cv2"),
            "prompt_output_corr": ser.value(wl.prompt_output_corr, "workload.prompt_output_corr"),
            "failed_requests": wl.failed_requests,
            "source": wl.source,
            "window_start_ts": wl.window_start_ts,
            "window_end_ts": wl.window_end_ts,
            "arrival_series": ser.value(wl.arrival_series, "workload.arrival_series"),
        }
    cap = report.capacity
    counts = report.instance_counts
    actual = (counts.prefill / counts.decode
              if counts.prefill is not None and counts.decode else None)
    if isinstance(cap, Missing):
        ser.missing["ratio"] = cap.reason
        ratio: dict[str, Any] = {"actual": actual, "theoretical": None,
                                 "recommended": {"prefill": None, "decode": None}}
        capacity_detail = None
    else:
        ratio = {
            "actual": actual,
            "theoretical": ser.value(cap.theoretical_ratio, "ratio.theoretical"),
            "recommended": {
                "prefill": ser.value(cap.recommended_prefill, "ratio.recommended.prefill"),
                "decode": ser.value(cap.recommended_decode, "ratio.recommended.decode"),
            },
            "binding": ser.value(cap.binding, "ratio.binding"),
            "mean_based": {
                "theoretical": ser.value(cap.mean_based_ratio, "ratio.mean_based.theoretical"),
                "prefill": ser.value(cap.mean_based_prefill, "ratio.mean_based.prefill"),
                "decode": ser.value(cap.mean_based_decode, "ratio.mean_based.decode"),
            },
        }
        capacity_detail = ser.value(cap, "capacity")
    findings = []
    for i, f in enumerate(report.findings):
        item = ser.value(f, f"findings[{i}]")
        item["severity"] = f.severity.value
        findings.append(item)
    out: dict[str, Any] = {
        "schema_version": report.schema_version,
        "status": report.status,
        "status_reason": report.status_reason,
        "window": {"start": iso(report.window_start_ts), "end": iso(report.window_end_ts)},
        "workload": workload,
        "instances": {"prefill": counts.prefill, "decode": counts.decode,
                      "unknown": counts.unknown},
        "ratio": ratio,
        "findings": findings,
        "inconclusive": ser.value(report.inconclusive, "inconclusive"),
        "slo": ser.value(report.slo, "slo"),
        "per_instance": ser.value(report.instances, "per_instance"),
        "capacity": capacity_detail,
        "series": ser.value(report.series, "series"),
        "identity": ser.value(report.identity, "identity"),
        "input": {
            "description": report.input_description,
            "sources": ser.value(report.sources, "input.sources"),
        },
        "warnings": list(report.warnings),
        "notes": list(report.notes),
        "pdprobe_version": report.pdprobe_version,
        "generated_at": report.generated_at,
    }
    out["missing"] = dict(sorted(ser.missing.items()))
    return out


def render(report: Report, options: RenderOptions) -> str:
    """The report as indented JSON, in the layout ``report.schema.json`` describes."""
    # orjson: indented output of a 10 MB report (a 512-instance cluster) in a few hundredths of
    # a second; the standard library's encoder falls back to pure Python when indenting.
    import orjson

    return orjson.dumps(to_json_dict(report), option=orjson.OPT_INDENT_2).decode() + "\n"
