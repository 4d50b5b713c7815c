"""``pdprobe diff``: compare two saved reports (before/after a scale-out, two windows).

Findings are matched by code; a finding is *worse* when its severity rose. Key figures are the
cluster's (status, counts, ratio, workload, SLO attainment); movers are the instances whose
latency, queue, KV usage or traffic share changed most (instances in both reports only).
"""

from __future__ import annotations

import math
from typing import Final

from pdprobe.analysis.base import InstanceSummary, Quantiles
from pdprobe.report.diff_view import (
    DIFF_EXIT_NEW_CRITICAL,
    DIFF_EXIT_NEW_WARNING,
    DIFF_EXIT_SAME_OR_BETTER,
    DIFF_EXIT_UNKNOWN,
    FigureChange,
    FindingChange,
    InstanceMover,
    ReportDiff,
)
from pdprobe.report.model import Report
from pdprobe.report.verdict import deployed_counts
from pdprobe.values import Missing

SEVERITY_RANK: Final = {"info": 0, "warning": 1, "critical": 2}
# An instance figure must move by at least this factor (either way) to be a mover: smaller
# changes between two windows are noise.
MOVER_MIN_FACTOR: Final = 1.25
# A share or usage (0-1) must also move by this many points: 0.6% -> 2.5% is no news.
MOVER_MIN_POINTS: Final = 0.05
# Movers listed, the largest first; the JSON lists the same.
MAX_MOVERS: Final = 8
# Per-instance figures compared: (label, unit, how to read it from an InstanceSummary).
_INSTANCE_FIGURES: Final = (("TTFT p90", "s", "ttft_s"), ("TPOT p90", "s", "tpot_s"),
                            ("queue depth p90", "requests", "queue_depth"),
                            ("KV usage p90", "ratio", "kv_usage_ratio"),
                            ("traffic share", "ratio", "traffic_share"))


def diff_reports(before: Report, after: Report, before_label: str = "before",
                 after_label: str = "after") -> ReportDiff:
    """What changed from ``before`` to ``after``, with the exit code of ``pdprobe diff``."""
    findings = _findings(before, after)
    names_b = {i.name: i for i in before.instances}
    names_a = {i.name: i for i in after.instances}
    return ReportDiff(
        before_label=before_label, after_label=after_label,
        before_status=before.status, after_status=after.status,
        findings=findings,
        figures=_figures(before, after),
        movers=_movers(names_b, names_a),
        instances_added=tuple(n for n in names_a if n not in names_b),
        instances_removed=tuple(n for n in names_b if n not in names_a),
        exit_code=_exit_code(after, findings),
    )


def _findings(before: Report, after: Report) -> tuple[FindingChange, ...]:
    b = {f.code: f for f in before.findings}
    a = {f.code: f for f in after.findings}
    out = []
    for code, f in a.items():
        old = b.get(code)
        if old is None:
            change = "new"
        else:
            rank_a, rank_b = SEVERITY_RANK[f.severity.value], SEVERITY_RANK[old.severity.value]
            change = "worse" if rank_a > rank_b else "better" if rank_a < rank_b else "same"
        out.append(FindingChange(code, f.cause, change,  # type: ignore[arg-type]
                                 old.severity.value if old else None, f.severity.value,
                                 f.summary))
    out += [FindingChange(code, f.cause, "gone", f.severity.value, None, f.summary)
            for code, f in b.items() if code not in a]
    order = {"new": 0, "worse": 1, "gone": 2, "better": 3, "same": 4}
    return tuple(sorted(out, key=lambda c: (order[c.change],
                                            -SEVERITY_RANK.get(c.severity_after or
                                                               c.severity_before or "", 0),
                                            c.code)))


def _exit_code(after: Report, findings: tuple[FindingChange, ...]) -> int:
    if after.status == "unknown":
        return DIFF_EXIT_UNKNOWN
    worse = [SEVERITY_RANK[f.severity_after or "info"] for f in findings
             if f.change in ("new", "worse")]
    if 2 in worse:
        return DIFF_EXIT_NEW_CRITICAL
    if 1 in worse:
        return DIFF_EXIT_NEW_WARNING
    return DIFF_EXIT_SAME_OR_BETTER


def _num(value: object) -> float | None:
    if isinstance(value, Missing) or value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    return None


def _pair(p: object, d: object) -> str | None:
    if p is None and d is None:
        return None
    return f"{p if p is not None else '?'}P:{d if d is not None else '?'}D"


def _figures(before: Report, after: Report) -> tuple[FigureChange, ...]:
    def cap(r: Report, attr: str) -> object:
        return None if isinstance(r.capacity, Missing) else getattr(r.capacity, attr)

    def wl(r: Report, attr: str) -> object:
        return None if isinstance(r.workload, Missing) else getattr(r.workload, attr)

    def slo(r: Report, attr: str) -> object:
        return None if isinstance(r.slo, Missing) else getattr(r.slo, attr)

    def recommended(r: Report) -> str | None:
        return _pair(_num(cap(r, "recommended_prefill")), _num(cap(r, "recommended_decode"))
                     ) if not isinstance(r.capacity, Missing) else None

    def deployed(r: Report) -> str | None:
        return _pair(*deployed_counts(r))

    def nums(getter: object, attr: str) -> tuple[float | None, float | None]:
        return (_num(getter(before, attr)), _num(getter(after, attr)))  # type: ignore[operator]

    figs = [FigureChange("status", "", before.status, after.status),
            FigureChange("deployed", "", deployed(before), deployed(after)),
            FigureChange("recommended", "", _fmt_pair(recommended(before)),
                         _fmt_pair(recommended(after))),
            FigureChange("theoretical P/D", "", *nums(cap, "theoretical_ratio")),
            FigureChange("requests", "requests", *nums(wl, "requests")),
            FigureChange("arrival rate", "req/s", *nums(wl, "arrival_rate_rps")),
            FigureChange("failed requests", "requests", *nums(wl, "failed_requests"),
                         better="lower")]
    for label, attr in (("SLO attainment TTFT", "ttft"), ("SLO attainment TPOT", "tpot"),
                        ("SLO attainment both", "both")):
        figs.append(FigureChange(label, "ratio", *nums(slo, attr), better="higher"))
    for role in ("prefill", "decode"):
        for label, attr in (("TTFT p90", "ttft_s"), ("TPOT p90", "tpot_s")):
            b, a = _role_median(before, role, attr), _role_median(after, role, attr)
            if b is not None or a is not None:
                figs.append(FigureChange(f"{role} {label} (median instance)", "s", b, a,
                                         better="lower"))
    return tuple(f for f in figs if f.before is not None or f.after is not None)


def _fmt_pair(pair: str | None) -> str | None:
    return pair.replace(".0", "") if pair else pair


def _figure(inst: InstanceSummary, attr: str) -> float | None:
    value = getattr(inst, attr)
    if isinstance(value, Quantiles):
        return _num(value.p90)
    return _num(value)


def _role_median(report: Report, role: str, attr: str) -> float | None:
    values = sorted(v for i in report.instances if i.role == role
                    if (v := _figure(i, attr)) is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _movers(before: dict[str, InstanceSummary], after: dict[str, InstanceSummary]
            ) -> tuple[InstanceMover, ...]:
    found = []
    for name, a in after.items():
        b = before.get(name)
        if b is None:
            continue
        for label, unit, attr in _INSTANCE_FIGURES:
            vb, va = _figure(b, attr), _figure(a, attr)
            if vb is None or va is None or vb <= 0 or va <= 0:
                continue
            factor = max(va / vb, vb / va)
            if factor >= MOVER_MIN_FACTOR and (unit != "ratio"
                                               or abs(va - vb) >= MOVER_MIN_POINTS):
                found.append((factor, InstanceMover(name, a.role, label, unit, vb, va)))
    found.sort(key=lambda x: -x[0])
    return tuple(m for _, m in found[:MAX_MOVERS])
