"""The verdict line and the findings as worded for every view.

``verdict_line`` is the first line of every format (the lead root cause, the shortfall and
the recommendation); ``finding_view`` words one finding (evidence, relations, confidence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pdprobe.report.cells import (
    SEVERITY_WORDS,
    STATUS_WORDS,
    baseline_phrase,
    count,
    fmt_ts,
    fmt_value,
    is_na,
    name_list,
    pd_pair,
    plural,
)
from pdprobe.units import (
    NA,
)
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import (
        CapacityResult,
    )
    from pdprobe.report.model import Report
    from pdprobe.rules.base import Evidence, Finding


# --- findings --------------------------------------------------------------------------------

def next_action(report: Report) -> str | None:
    """The one thing to do first: the lead finding's first next step (None when all is well
    or nothing could be judged)."""
    lead = lead_finding(report)
    if lead is None or not lead.next_steps or lead.severity.rank == 0:
        return None
    return lead.next_steps[0]


def lead_finding(report: Report) -> Finding | None:
    """The finding the verdict names: the worst root cause, in the rule engine's rank order."""
    ranked = [f for f in report.findings if f.severity.rank > 0]
    if not ranked:
        return None
    roots = [f for f in ranked if f.is_root_cause] or ranked
    worst = max(f.severity.rank for f in roots)
    return next(f for f in roots if f.severity.rank == worst)


def ordered_findings(report: Report) -> list[Finding]:
    """Root causes first, then consequences, then info; the engine's order within each."""
    return sorted(report.findings,
                  key=lambda f: (f.severity.rank == 0, not f.is_root_cause, -f.severity.rank))


def explained_by(report: Report, finding: Finding) -> list[str]:
    """Codes of the findings that list this one as a consequence."""
    return [f.code for f in report.findings if finding.code in f.consequences and f is not finding]


def deployed_counts(report: Report) -> tuple[int | None, int | None]:
    """Deployed prefill/decode counts: the capacity model's, else the instances found."""
    counts = report.instance_counts
    cap = report.capacity
    if isinstance(cap, Missing):
        return counts.prefill, counts.decode
    p, d = count(cap.deployed_prefill), count(cap.deployed_decode)
    return (counts.prefill if p is None else p), (counts.decode if d is None else d)


def _differences(capacity: CapacityResult, needed: bool = False) -> list[tuple[str, int]]:
    """(role, recommended - deployed) for the roles where both are known; with ``needed``,
    what meets the objective (before headroom) instead of the recommendation."""
    out = []
    for role, rec, need, dep in (
            ("prefill", capacity.recommended_prefill, capacity.needed_prefill,
             capacity.deployed_prefill),
            ("decode", capacity.recommended_decode, capacity.needed_decode,
             capacity.deployed_decode)):
        r, d = count(rec), count(dep)
        if needed and count(need) is not None:
            r = count(need)
        if r is not None and d is not None:
            out.append((role, r - d))
    return out


def shortfall_phrase(capacity: CapacityResult) -> str | None:
    """``prefill short by 2 instances`` from what meets the objective vs deployed, or None."""
    parts = [f"{role} short by {plural(diff, 'instance')}"
             for role, diff in _differences(capacity, needed=True) if diff > 0]
    return ", ".join(parts) or None


def surplus_phrase(capacity: CapacityResult) -> str | None:
    """``could save 2 decode instances`` (deployed beyond the recommendation, headroom
    included), or None."""
    parts = [plural(-diff, role + " instance")
             for role, diff in _differences(capacity) if diff < 0]
    return ("could save " + ", ".join(parts)) if parts else None


def recommendation_phrase(report: Report) -> str | None:
    """``recommended 4P:4D (deployed 2P:4D)``, or None when the capacity model has no answer."""
    cap = report.capacity
    if isinstance(cap, Missing) or is_na(cap.recommended_prefill) or is_na(cap.recommended_decode):
        return None
    dep_p, dep_d = deployed_counts(report)
    rec = pd_pair(cap.recommended_prefill, cap.recommended_decode)
    need_p, need_d = count(cap.needed_prefill), count(cap.needed_decode)
    if need_p is not None and need_d is not None and (need_p, need_d) != (
            count(cap.recommended_prefill), count(cap.recommended_decode)):
        # headroom asked for: what meets the objective apart from what is kept on top
        rec += f" (needed {pd_pair(need_p, need_d)} to meet the objective, plus headroom)"
        if dep_p is None and dep_d is None:
            return f"recommended {rec}"
        return f"recommended {rec}; deployed {pd_pair(dep_p, dep_d)}"
    if dep_p is None and dep_d is None:
        return f"recommended {rec}"
    return f"recommended {rec} (deployed {pd_pair(dep_p, dep_d)})"


def unknown_reason(report: Report) -> str:
    """Why the status is unknown, for the verdict line: the service's reason, else the first
    warning, else why there is no workload."""
    if report.status_reason:
        return report.status_reason
    if report.warnings:
        return report.warnings[0]
    if isinstance(report.workload, Missing) and not report.instances:
        return report.workload.reason
    return "too little data to judge any rule"


def verdict_line(report: Report) -> str:
    """The first line of every view, e.g.
    ``CRITICAL  prefill-bound: prefill short by 2 instances — recommended 4P:4D (deployed 2P:4D)``.
    """
    status = STATUS_WORDS[report.status]
    if report.status == "unknown":
        return f"{status}  could not judge: {unknown_reason(report)}"
    lead = lead_finding(report)
    rec = recommendation_phrase(report)
    if lead is None:
        text = "no warning or critical finding"
        cap = report.capacity
        if not isinstance(cap, Missing):
            surplus = surplus_phrase(cap)
            if surplus:
                text += f"; {surplus}"
        return f"{status}  {text}" + (f" — {rec}" if rec else "") + more_findings(report, None)
    detail = None
    cap = report.capacity
    if lead.cause in ("prefill-bound", "decode-bound") and not isinstance(cap, Missing):
        detail = shortfall_phrase(cap)
    if detail is None:
        detail = clip_clause(lead.summary.rstrip(". "), VERDICT_DETAIL_CHARS)
        if lead.instances and not any(i in detail for i in lead.instances):
            detail += " (" + name_list(lead.instances, 3) + ")"
    line = f"{status}  {lead.cause}: {detail}"
    if rec and lead.cause in ("prefill-bound", "decode-bound", "ratio-lag"):
        line += f" — {rec}"
    return line + more_findings(report, lead)


def more_findings(report: Report, lead: Finding | None) -> str:
    """``; +3 more findings (routing-skew)``: every finding besides the lead is counted (the
    verdict never hides that there is more below it), the other root causes of warning or
    worse named; empty when the lead is the only finding."""
    others = [f for f in report.findings if f is not lead]
    if not others:
        return ""
    text = f"; +{plural(len(others), 'more finding')}"
    causes = sorted({f.cause for f in others if f.severity.rank > 0 and f.is_root_cause}
                    - ({lead.cause} if lead is not None else set()))
    return text + (" (" + ", ".join(causes) + ")" if causes else "")


# The verdict is the first line a runbook reads: the finding's full summary follows below it,
# so the line keeps only the summary's leading clauses.
VERDICT_DETAIL_CHARS: Final = 140
_CLAUSE_BREAKS: Final = ("; ", ": ", ", ", " — ")


def clip_clause(text: str, limit: int) -> str:
    """``text`` cut after its last whole clause within ``limit`` characters, marked with …"""
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = max(head.rfind(sep) for sep in _CLAUSE_BREAKS)
    if cut < limit // 3:  # no clause break early enough: cut at a word
        cut = head.rfind(" ")
    return head[: cut if cut > 0 else limit].rstrip(" ,;:") + " …"




def evidence_phrase(ev: Evidence, relative: bool, *, with_source: bool = True) -> str:
    """``prefill queue depth p90: 37 requests (baseline 4) on p-0, p-1 [vllm:num_requests_waiting]``."""
    text = f"{ev.what}: {fmt_value(ev.value, ev.unit)}"
    text += baseline_phrase(ev.value, ev.baseline, ev.unit)
    if ev.instances:
        text += " on " + name_list(ev.instances, 4)
    if ev.window_start_ts is not None and ev.window_end_ts is not None:
        text += (f", {fmt_ts(ev.window_start_ts, relative, with_date=False)}"
                 f"–{fmt_ts(ev.window_end_ts, relative, with_date=False)}")
    if with_source and ev.source:
        text += f" [{ev.source}]"
    return text


@dataclass(frozen=True)
class FindingView:
    """One finding as every renderer prints it: severity word, title, summary, evidence phrases,
    next steps, relations and confidence."""
    finding: Finding
    severity: str  # "CRITICAL"
    title: str  # "PD001 prefill-bound"
    summary: str
    instances: str
    evidence: tuple[str, ...]
    next_steps: tuple[str, ...]
    relations: str  # "also explains PD004" / "consequence of PD001"
    confidence: str


def finding_view(report: Report, f: Finding, relative: bool) -> FindingView:
    """Word one finding: evidence phrases, the findings it explains or is a consequence of, and its
    confidence."""
    rel = []
    if f.consequences:
        rel.append("explains " + ", ".join(f.consequences))
    parents = explained_by(report, f)
    if parents or not f.is_root_cause:
        rel.append("consequence of " + (", ".join(parents) if parents else "another finding"))
    if f.component:
        rel.append(f"component: {f.component}")
    return FindingView(
        finding=f,
        severity=SEVERITY_WORDS[f.severity.value],
        title=f"{f.code} {f.cause}",
        summary=f.summary,
        instances=name_list(f.instances, 8) if f.instances else "",
        evidence=tuple(evidence_phrase(e, relative) for e in f.evidence),
        next_steps=f.next_steps,
        relations="; ".join(rel),
        confidence=f"{f.confidence:.0%}" if math.isfinite(f.confidence) else NA,
    )


# --- the sections ----------------------------------------------------------------------------

def flagged_instances(report: Report) -> dict[str, str]:
    """Instance name -> worst severity of a warning/critical finding that names it."""
    out: dict[str, tuple[int, str]] = {}
    for f in report.findings:
        if f.severity.rank == 0:
            continue
        names = set(f.instances)
        for ev in f.evidence:
            names.update(ev.instances)
        for n in names:
            if n not in out or out[n][0] < f.severity.rank:
                out[n] = (f.severity.rank, f.severity.value)
    return {k: v[1] for k, v in out.items()}


