"""Shared wording: the verdict line, number formats and every section as rows of text.

All renderers (text, Markdown, HTML, Prometheus) read a ``ReportView`` built here from the
``Report``, so a number or phrase reads the same in every format. Renderers only lay it out.
A cell that could not be computed keeps the ``Missing`` reason, shown where the format allows
(``-v`` in the terminal, footnotes in Markdown, tooltips in HTML).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from pdprobe.units import (  # the report's number wording lives in the units module
    COUNT_UNITS,
    NA,
    NON_NEGATIVE_UNITS,
    fmt_bytes,
    fmt_bytes_per_s,
    fmt_count,
    fmt_duration,
    fmt_num,
    fmt_p_value,
    fmt_pct,
    fmt_seconds,
)
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import (
        CapacityResult,
        InstanceSummary,
        LengthDistribution,
        Quantiles,
        RatioWindow,
        TimeSeries,
    )
    from pdprobe.report.model import Report
    from pdprobe.rules.base import Evidence, Finding


# Window starts before this are offsets from zero, not dates: simulator output and Mooncake
# traces start at t=0 and 1e9 s is September 2001, long before any LLM serving capture.
RELATIVE_TIME_LIMIT_S: Final = 1e9

STATUS_WORDS: Final = {"ok": "OK", "warning": "WARNING", "critical": "CRITICAL",
                       "unknown": "UNKNOWN"}
SEVERITY_WORDS: Final = {"info": "INFO", "warning": "WARNING", "critical": "CRITICAL"}
ROLE_ORDER: Final = ("prefill", "decode", "frontend", "unknown")

# Arrival CV² above this reads as bursty (Poisson arrivals have CV² = 1; a 2x margin keeps
# ordinary sampling noise of an hour-long window from being called bursty).
BURSTY_CV2: Final = 2.0
# A mean-based ratio this far (relative) below the distribution-based one is worth a sentence:
# sizing from mean lengths then under-provisions prefill noticeably (Jensen's inequality).
JENSEN_GAP_NOTE: Final = 0.10

SPARK_CHARS: Final = "▁▂▃▄▅▆▇█"


# --- numbers ---------------------------------------------------------------------------------

def is_na(value: object) -> bool:
    """True for Missing, None and non-finite floats (all print as n/a)."""
    if value is None or isinstance(value, Missing):
        return True
    return isinstance(value, float) and not math.isfinite(value)


def num(value: object) -> float | None:
    """The value as a float, or None when it is Missing, None or not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def count(value: object) -> int | None:
    """An instance count, or None when unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_SECONDS = {"s", "sec", "seconds"}
_RATIOS = {"ratio", "fraction", "share"}


def fmt_value(value: Any, unit: str = "") -> str:
    """A value with its unit, formatted by unit ("s", "ratio", "B/s", "p-value", counts, ...);
    strings as given."""
    if isinstance(value, Missing) or value is None:
        return NA
    if isinstance(value, str):
        return f"{value} {unit}".rstrip() if unit else value
    if isinstance(value, float) and not math.isfinite(value):
        return NA
    if unit in _SECONDS:
        return fmt_seconds(float(value))
    if unit in _RATIOS:
        return fmt_pct(float(value))
    if unit == "p-value":
        return fmt_p_value(float(value))
    if unit in ("B/s", "bytes/s", "bytes_per_s"):
        return fmt_bytes_per_s(float(value))
    if unit in ("B", "bytes"):
        return fmt_bytes(float(value))
    if unit in ("%", "percent"):
        return f"{fmt_num(value)}%"
    if unit in ("rps", "req/s", "requests/s"):
        return f"{fmt_num(value)} req/s"
    if unit in COUNT_UNITS:
        return fmt_count(value, unit)
    return f"{fmt_num(value)} {unit}".rstrip()


def baseline_phrase(value: Any, baseline: Any, unit: str) -> str:
    """`` (vs 1,798 tokens)`` — or nothing when the baseline means nothing: absent, the same
    number, or a negative level of a quantity that cannot be negative. A p-value's baseline is
    the significance level: `` (significant below 0.001)``."""
    if baseline is None or is_na(baseline):
        return ""
    if unit == "p-value":
        return f" (significant below {fmt_num(float(baseline))})"
    if isinstance(baseline, (int, float)) and baseline < 0 and unit in NON_NEGATIVE_UNITS:
        return ""
    shown = fmt_value(baseline, unit)
    return "" if shown == fmt_value(value, unit) else f" (vs {shown})"


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def pd_pair(prefill: Any, decode: Any) -> str:
    """``4P:4D``; n/a for an unknown side."""
    if is_na(prefill) and is_na(decode):
        return NA
    p = NA if is_na(prefill) else str(prefill)
    d = NA if is_na(decode) else str(decode)
    return f"{p}P:{d}D"


def fmt_ratio(x: Any) -> str:
    """A P/D ratio (prefill per decode instance), two decimals."""
    return NA if is_na(x) else f"{float(x):.2f}"


# --- time ------------------------------------------------------------------------------------

def is_relative(start_ts: float | None) -> bool:
    """Inputs whose clock starts near zero (traces, simulations) show offsets, not dates."""
    return start_ts is not None and math.isfinite(start_ts) and start_ts < RELATIVE_TIME_LIMIT_S


def fmt_offset(seconds: float) -> str:
    return "+" + fmt_duration(seconds) if seconds >= 0 else fmt_duration(seconds)


def fmt_ts(ts: float | None, relative: bool, *, with_date: bool = True) -> str:
    """``+12m30s`` for relative inputs, else ``2023-11-16 18:17:03 UTC`` (or just the time)."""
    if ts is None or not math.isfinite(ts):
        return NA
    if relative:
        return fmt_offset(ts)
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%d %H:%M:%S UTC") if with_date else dt.strftime("%H:%M:%S")


def window_phrase(start_ts: float | None, end_ts: float | None) -> str:
    """``2023-11-16 18:17:03 → 19:14:19 UTC (57m16s)`` or ``+0s → +58m57s (58m57s)``."""
    if start_ts is None or end_ts is None:
        return NA
    rel = is_relative(start_ts)
    span = fmt_duration(end_ts - start_ts)
    if rel:
        return f"{fmt_offset(start_ts)} → {fmt_offset(end_ts)} ({span}, relative times)"
    a = datetime.fromtimestamp(start_ts, tz=UTC)
    b = datetime.fromtimestamp(end_ts, tz=UTC)
    end = b.strftime("%H:%M:%S UTC") if a.date() == b.date() else b.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{a.strftime('%Y-%m-%d %H:%M:%S')} → {end} ({span})"


# --- cells and tables ------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """One printed value; ``reason`` says why it is n/a; ``flag`` marks an instance to look at."""

    text: str
    reason: str | None = None
    flag: bool = False

    @property
    def is_na(self) -> bool:
        return self.reason is not None


def cell(value: Any, fmt: Callable[[Any], str] = fmt_num, *, missing: str = "no value") -> Cell:
    """A cell for a ``Maybe`` value: n/a with the Missing reason, else formatted."""
    if isinstance(value, Missing):
        return Cell(NA, value.reason)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return Cell(NA, missing)
    return Cell(fmt(value))


def quantile_cell(q: Any, attr: str, fmt: Callable[[Any], str]) -> Cell:
    """One quantile (``p90``) of a ``Maybe[Quantiles]``."""
    if isinstance(q, Missing):
        return Cell(NA, q.reason)
    value = getattr(q, attr)
    if value is None or not math.isfinite(value):
        why = "histograms give quantiles, not the mean" if attr == "mean" and q.estimated else \
            f"no {attr} in the data"
        return Cell(NA, why)
    return Cell(fmt(value) + ("~" if q.estimated else ""))


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    numeric: tuple[bool, ...]  # right-align these columns
    note: str = ""
    # Columns a narrow terminal may hide, the least needed first (the text view says which).
    drop_order: tuple[str, ...] = ()

    def na_reasons(self) -> list[str]:
        """``column: reason (row names)`` for every n/a, deduplicated, in table order."""
        seen: dict[tuple[str, str], list[str]] = {}
        for row in self.rows:
            for col, c in zip(self.columns[1:], row[1:], strict=True):
                if c.reason is not None:
                    seen.setdefault((col, c.reason), []).append(row[0].text)
        out = []
        for (col, reason), names in seen.items():
            who = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            out.append(f"{col}: {reason} ({who})")
        return out


@dataclass(frozen=True)
class KeyValue:
    label: str
    value: Cell


# --- sparklines and series -------------------------------------------------------------------

def resample(values: Sequence[float], width: int) -> list[float]:
    """Down-sample to ``width`` points by bin mean (NaN bins stay NaN); shorter series unchanged."""
    import numpy as np

    arr = np.asarray(values, dtype="float64")
    n = arr.size
    if n <= width or width <= 0:
        return [float(v) for v in arr]
    idx = (np.arange(n) * width) // n
    finite = np.isfinite(arr)
    sums = np.bincount(idx[finite], weights=arr[finite], minlength=width)
    counts = np.bincount(idx[finite], minlength=width)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return [float(v) for v in out]


def sparkline(values: Sequence[float], width: int | None = None, *,
              hi: float | None = None) -> str:
    """``▁▂▃▅▇`` scaled from min(0, min) to max (or ``hi``, to share a scale across lines);
    unknown bins are blanks."""
    vals = resample(values, width) if width else [float(v) for v in values]
    finite = [v for v in vals if math.isfinite(v)]
    if not finite:
        return " " * len(vals)
    lo = min(0.0, min(finite))
    hi = max(finite) if hi is None or not math.isfinite(hi) else max(hi, max(finite))
    span = hi - lo
    out = []
    top = len(SPARK_CHARS) - 1
    for v in vals:
        if not math.isfinite(v):
            out.append(" ")
        elif span <= 0:
            out.append(SPARK_CHARS[0])
        else:
            out.append(SPARK_CHARS[min(top, round((v - lo) / span * top))])
    return "".join(out)


@dataclass(frozen=True)
class RoleSeries:
    """A per-role aggregate of instance series on one time grid (for sparklines and charts)."""

    role: str
    what: str  # "queue depth (sum)"
    unit: str
    ts: tuple[float, ...]
    values: tuple[float, ...]
    per_instance: tuple[tuple[str, tuple[float, ...]], ...]  # same grid

    @property
    def peak(self) -> float:
        finite = [v for v in self.values if math.isfinite(v)]
        return max(finite) if finite else float("nan")

    @property
    def instance_peak(self) -> float:
        """The highest value of any one instance (a shared scale makes an outlier visible)."""
        finite = [v for _, row in self.per_instance for v in row if math.isfinite(v)]
        return max(finite) if finite else float("nan")


def align_series(items: Sequence[tuple[str, TimeSeries]]
                 ) -> tuple[tuple[float, ...], list[tuple[str, tuple[float, ...]]]]:
    """Put series on one grid (the finest step over their joint span); NaN where absent."""
    import numpy as np

    usable = [(n, s) for n, s in items if s.ts]
    if not usable:
        return (), []
    start = min(s.ts[0] for _, s in usable)
    end = max(s.ts[-1] + s.step_s for _, s in usable)
    step = min(s.step_s for _, s in usable) or 1.0
    n_bins = max(1, math.ceil((end - start) / step - 1e-9))
    grid = tuple(float(start + step * i) for i in range(n_bins))
    out = []
    for name, s in usable:
        ts = np.asarray(s.ts, dtype="float64")
        vals = np.asarray(s.values, dtype="float64")
        idx = np.clip(((ts - start) // step).astype("int64"), 0, n_bins - 1)
        ok = np.isfinite(vals)
        sums = np.bincount(idx[ok], weights=vals[ok], minlength=n_bins)
        counts = np.bincount(idx[ok], minlength=n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            row = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        out.append((name, tuple(float(v) for v in row)))
    return grid, out


def role_series(report: Report, role: str, attr: str, how: str) -> RoleSeries | None:
    """Sum (queue depth) or mean (TTFT, KV usage) of one series over a role's instances."""
    import numpy as np

    items = [(i.name, getattr(i, attr)) for i in report.instances
             if i.role == role and getattr(i, attr) is not None]
    if not items:
        return None
    grid, rows = align_series(items)
    if not grid:
        return None
    mat = np.asarray([r for _, r in rows], dtype="float64")
    known = np.isfinite(mat)
    with np.errstate(invalid="ignore", divide="ignore"):
        if how == "sum":
            agg = np.where(known.any(axis=0), np.nansum(np.where(known, mat, 0.0), axis=0), np.nan)
        else:
            cnt = known.sum(axis=0)
            agg = np.where(cnt > 0, np.where(known, mat, 0.0).sum(axis=0) / np.maximum(cnt, 1),
                           np.nan)
    unit = items[0][1].unit
    label = {"queue_series": "queue depth", "ttft_series": "TTFT",
             "kv_usage_series": "KV usage"}.get(attr, attr)
    return RoleSeries(role=role, what=f"{label} ({how})", unit=unit, ts=grid,
                      values=tuple(float(v) for v in agg), per_instance=tuple(rows))


def series_value(value: float, unit: str) -> str:
    """A series value by its unit (TimeSeries units: "s", "ratio", "requests", ...)."""
    return fmt_value(value, unit if unit in _SECONDS | _RATIOS else "")


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


def _differences(capacity: CapacityResult) -> list[tuple[str, int]]:
    """(role, recommended - deployed) for the roles where both are known."""
    out = []
    for role, rec, dep in (("prefill", capacity.recommended_prefill, capacity.deployed_prefill),
                           ("decode", capacity.recommended_decode, capacity.deployed_decode)):
        r, d = count(rec), count(dep)
        if r is not None and d is not None:
            out.append((role, r - d))
    return out


def shortfall_phrase(capacity: CapacityResult) -> str | None:
    """``prefill short by 2 instances`` from recommended vs deployed, or None."""
    parts = [f"{role} short by {plural(diff, 'instance')}"
             for role, diff in _differences(capacity) if diff > 0]
    return ", ".join(parts) or None


def surplus_phrase(capacity: CapacityResult) -> str | None:
    """``2 decode instances more than needed``, or None."""
    parts = [f"{plural(-diff, role + ' instance')} more than needed"
             for role, diff in _differences(capacity) if diff < 0]
    return ", ".join(parts) or None


def recommendation_phrase(report: Report) -> str | None:
    """``recommended 4P:4D (deployed 2P:4D)``, or None when the capacity model has no answer."""
    cap = report.capacity
    if isinstance(cap, Missing) or is_na(cap.recommended_prefill) or is_na(cap.recommended_decode):
        return None
    dep_p, dep_d = deployed_counts(report)
    rec = pd_pair(cap.recommended_prefill, cap.recommended_decode)
    if dep_p is None and dep_d is None:
        return f"recommended {rec}"
    return f"recommended {rec} (deployed {pd_pair(dep_p, dep_d)})"


def unknown_reason(report: Report) -> str:
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
            detail += " (" + _names(lead.instances, 3) + ")"
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


def _names(names: Sequence[str], limit: int) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" +{len(names) - limit} more" if len(names) > limit else "")


def evidence_phrase(ev: Evidence, relative: bool, *, with_source: bool = True) -> str:
    """``prefill queue depth p90: 37 requests (baseline 4) on p-0, p-1 [vllm:num_requests_waiting]``."""
    text = f"{ev.what}: {fmt_value(ev.value, ev.unit)}"
    text += baseline_phrase(ev.value, ev.baseline, ev.unit)
    if ev.instances:
        text += " on " + _names(ev.instances, 4)
    if ev.window_start_ts is not None and ev.window_end_ts is not None:
        text += (f", {fmt_ts(ev.window_start_ts, relative, with_date=False)}"
                 f"–{fmt_ts(ev.window_end_ts, relative, with_date=False)}")
    if with_source and ev.source:
        text += f" [{ev.source}]"
    return text


@dataclass(frozen=True)
class FindingView:
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
        instances=_names(f.instances, 8) if f.instances else "",
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


FLAG_MARK: Final = " !"  # appended to instance names a warning/critical finding names
INSTANCE_COLUMNS: Final = ("instance", "share", "TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90",
                           "queue p90", "KV p90", "hit rate")


def instance_row(inst: InstanceSummary, flagged: bool) -> tuple[Cell, ...]:
    return (
        Cell(inst.name, flag=flagged),
        cell(inst.traffic_share, fmt_pct),
        quantile_cell(inst.ttft_s, "p50", fmt_seconds),
        quantile_cell(inst.ttft_s, "p90", fmt_seconds),
        quantile_cell(inst.tpot_s, "p50", fmt_seconds),
        quantile_cell(inst.tpot_s, "p90", fmt_seconds),
        quantile_cell(inst.queue_depth, "p90", fmt_num),
        quantile_cell(inst.kv_usage_ratio, "p90", fmt_pct),
        cell(inst.prefix_hit_ratio, fmt_pct),
    )


DETAIL_COLUMNS: Final = ("instance", "reqs", "wait p90", "xfer p50", "xfer p90", "running",
                         "preempt", "in tok/s", "out tok/s")
DETAIL_NOTE: Final = ("wait: queue time before prefill; xfer: KV transfer time; running: "
                      "running requests p50; preempt: preemptions in the window")


def detail_row(inst: InstanceSummary, flagged: bool) -> tuple[Cell, ...]:
    return (
        Cell(inst.name, flag=flagged),
        cell(inst.requests, fmt_num),
        quantile_cell(inst.queue_s, "p90", fmt_seconds),
        quantile_cell(inst.kv_transfer_s, "p50", fmt_seconds),
        quantile_cell(inst.kv_transfer_s, "p90", fmt_seconds),
        quantile_cell(inst.running, "p50", fmt_num),
        cell(inst.preemptions, fmt_num),
        cell(inst.prompt_tokens_per_s, fmt_num),
        cell(inst.generation_tokens_per_s, fmt_num),
    )


def role_tables(report: Report, *, detail: bool = False) -> list[Table]:
    """One table per role (prefill, decode, then others), instances in report order."""
    flagged = flagged_instances(report)
    tables = []
    for role in ROLE_ORDER:
        members = [i for i in report.instances if i.role == role]
        if not members:
            continue
        if detail:
            rows = tuple(detail_row(i, i.name in flagged) for i in members)
            cols = DETAIL_COLUMNS
        else:
            rows = tuple(instance_row(i, i.name in flagged) for i in members)
            cols = INSTANCE_COLUMNS
        sources = sorted({i.role_source for i in members})
        note = "role from " + "; ".join(sources) if sources else ""
        if detail:
            note = DETAIL_NOTE
        elif any(r[0].flag for r in rows):
            note = FLAG_MARK.strip() + " named by a finding; " + note
        tables.append(Table(title=f"{role} ({len(members)})", columns=cols, rows=rows,
                            numeric=(False,) + (True,) * (len(cols) - 1), note=note,
                            drop_order=() if detail else NARROW_DROP_ORDER))
    return tables


# At 80 columns the instance table cannot show all nine columns: the p50s go first (the p90s
# carry the tail a finding is about), then the queue (the sparklines show it over time).
NARROW_DROP_ORDER: Final = ("TPOT p50", "TTFT p50", "queue p90")


def length_table(report: Report) -> Table | None:
    wl = report.workload
    if isinstance(wl, Missing):
        return None
    rows = tuple(_length_row(label, dist) for label, dist in
                 (("prompt tokens", wl.prompt_tokens), ("output tokens", wl.output_tokens)))
    estimated = any(c.text.endswith("~") for row in rows for c in row)
    return Table(title="lengths", columns=("", "mean", "p50", "p90", "p99", "CV", "shape"),
                 rows=rows, numeric=(False, True, True, True, True, True, False),
                 note="~ marks quantiles interpolated from histogram buckets" if estimated else "")


def _length_row(label: str, dist: Any) -> tuple[Cell, ...]:
    if isinstance(dist, Missing):
        return (Cell(label), *(Cell(NA, dist.reason) for _ in range(6)))
    d: LengthDistribution = dist
    q: Quantiles = d.quantiles
    return (Cell(label), quantile_cell(q, "mean", fmt_num), quantile_cell(q, "p50", fmt_num),
            quantile_cell(q, "p90", fmt_num), quantile_cell(q, "p99", fmt_num),
            cell(d.cv, lambda v: f"{v:.2f}"), Cell(d.shape or NA, None if d.shape else "unknown"))


def workload_rows(report: Report) -> list[KeyValue]:
    wl = report.workload
    if isinstance(wl, Missing):
        return [KeyValue("workload", Cell(NA, wl.reason))]
    requests = fmt_num(wl.requests)
    if wl.failed_requests:
        requests += f" ({fmt_num(wl.failed_requests)} failed)"
    arrival = wl.arrival_rate_rps
    rate = (Cell(NA, arrival.reason) if isinstance(arrival, Missing)
            else Cell(f"{fmt_num(arrival)} req/s") if math.isfinite(arrival) else Cell(NA))
    rows = [
        KeyValue("requests", Cell(requests + f" from {wl.source}")),
        KeyValue("arrival rate", rate),
    ]
    cv2 = wl.arrival_cv2
    if isinstance(cv2, Missing) or not math.isfinite(cv2):
        rows.append(KeyValue("arrival burstiness", cell(cv2)))
    else:
        shape = "bursty" if cv2 > BURSTY_CV2 else "near Poisson" if cv2 > 1 / BURSTY_CV2 else "smooth"
        rows.append(KeyValue("arrival burstiness", Cell(f"CV² {cv2:.2f} ({shape})")))
    rows += [
        KeyValue("offered rate", cell(wl.offered_rate_rps, lambda v: f"{fmt_num(v)} req/s")),
        KeyValue("completed rate", cell(wl.completed_rate_rps, lambda v: f"{fmt_num(v)} req/s")),
        KeyValue("prefix-cached prompt", cell(wl.cached_fraction, fmt_pct)),
        KeyValue("prompt/output correlation", cell(wl.prompt_output_corr, lambda v: f"{v:+.2f}")),
    ]
    return rows


def capacity_rows(report: Report) -> list[KeyValue]:
    """The capacity section as label/value rows; one "ratio: pending" row when Missing."""
    cap = report.capacity
    if isinstance(cap, Missing):
        return [KeyValue("ratio", Cell(f"pending — {cap.reason}", cap.reason))]
    dep_p, dep_d = deployed_counts(report)
    deployed_ratio = dep_p / dep_d if dep_p is not None and dep_d else None
    rows = [
        KeyValue("theoretical P/D", cell(
            cap.theoretical_ratio,
            lambda v: f"{v:.2f} prefill per decode instance"
                      + (" (whole window; per window below)" if cap.windows else ""))),
        KeyValue("deployed", Cell(f"{pd_pair(dep_p, dep_d)} (ratio {fmt_ratio(deployed_ratio)})")),
        KeyValue("recommended", Cell(pd_pair(cap.recommended_prefill, cap.recommended_decode),
                                     reason=_first_reason(cap.recommended_prefill,
                                                          cap.recommended_decode))),
    ]
    binding = cell(cap.binding, str)
    if not binding.is_na and cap.binding_basis:
        binding = Cell(f"{binding.text} (at the {cap.binding_basis})")
    rows.append(KeyValue("binding stage", binding))
    for label, values in (
            ("utilization (deployed)", (cap.deployed_prefill_utilization,
                                        cap.deployed_decode_utilization,
                                        cap.deployed_transfer_utilization)),
            ("utilization (recommended)", (cap.prefill_utilization, cap.decode_utilization,
                                           cap.transfer_utilization))):
        parts = [f"{stage} {fmt_pct(v)}"
                 for stage, v in zip(("prefill", "decode", "transfer"), map(num, values),
                                     strict=True)
                 if v is not None]
        if parts:  # detail rows appear only when the model computed them
            rows.append(KeyValue(label, Cell(", ".join(parts))))
    for label, value in (("objectives", _objectives(cap)), ("prefill pool", _prefill_pool(cap)),
                         ("decode pool", _decode_pool(cap))):
        if not value.is_na:  # like the utilisations: only what the model computed
            rows.append(KeyValue(label, value))
    rows.append(KeyValue("mean-based planner", _mean_based(cap)))
    rows.append(KeyValue("per-instance capacity", Cell(
        f"prefill {_rate(cap.prefill_capacity_rps)}, decode {_rate(cap.decode_capacity_rps)}",
        reason=_first_reason(cap.prefill_capacity_rps, cap.decode_capacity_rps))))
    req, avail = num(cap.transfer_required_bytes_per_s), num(cap.transfer_capacity_bytes_per_s)
    if req is not None and avail is not None and avail > 0:
        xfer = (f"{fmt_bytes_per_s(req)} needed of {fmt_bytes_per_s(avail)} usable "
                f"per node ({fmt_pct(req / avail)})")
        if cap.transfer_capacity_source:
            xfer += f"; link from {cap.transfer_capacity_source}"
        rows.append(KeyValue("KV transfer", Cell(xfer)))
    else:
        why = _first_reason(cap.transfer_required_bytes_per_s, cap.transfer_capacity_bytes_per_s)
        rows.append(KeyValue("KV transfer", Cell(NA, why or "not estimated")))
    kvb = cell(cap.kv_bytes_per_token, fmt_bytes)
    if not kvb.is_na and cap.kv_bytes_source:
        kvb = Cell(f"{kvb.text}, from {cap.kv_bytes_source}")
    rows.append(KeyValue("KV bytes per token", kvb))
    model = cap.model_source
    if cap.profile and cap.profile not in model:
        model += f" {cap.profile}" if model.startswith("profile") else f" (profile {cap.profile})"
    rows.append(KeyValue("model", Cell(model)))
    fit = fit_phrase(cap.fit_quality)
    if fit:
        rows.append(KeyValue("model fit", Cell(fit)))
    rows.append(KeyValue("verified", _verified(cap)))
    rows += [KeyValue("note", Cell(note)) for note in cap.notes]
    return rows


def fit_phrase(quality: dict[str, float]) -> str:
    """``prefill R² 0.97, median error 3.1%, 2,646 requests; decode ...`` from the capacity
    model's fit statistics (keys ``<stage>_r2``, ``_median_rel_error``, ``_n``,
    ``_scale_vs_profile``); keys it does not know are left out."""
    parts = []
    for stage in ("prefill", "decode"):
        bits = []
        r2 = quality.get(f"{stage}_r2")
        if r2 is not None and math.isfinite(r2):
            bits.append(f"R² {r2:.2f}")
        err = quality.get(f"{stage}_median_rel_error")
        if err is not None and math.isfinite(err):
            bits.append(f"median error {fmt_pct(err)}")
        scale = quality.get(f"{stage}_scale_vs_profile")
        if scale is not None and math.isfinite(scale) and abs(scale - 1) >= FIT_SCALE_SHOWN:
            bits.append(f"{scale:.2f}× the profile")
        n = quality.get(f"{stage}_n")
        if n is not None and math.isfinite(n):
            bits.append(fmt_count(int(n), "samples"))
        if bits:
            parts.append(f"{stage} " + ", ".join(bits))
    return "; ".join(parts)


# A fitted speed within this share of the profile's is the profile: not worth a mention.
FIT_SCALE_SHOWN: Final = 0.05


def _objectives(cap: CapacityResult) -> Cell:
    """``TTFT 2 s, TPOT 100 ms (defaults)``: the objectives the counts are sized for."""
    parts = [(f"{key.upper()} {fmt_seconds(value)}", key in cap.slo_defaulted)
             for key, value in (("ttft", cap.slo_ttft_s), ("tpot", cap.slo_tpot_s))
             if value is not None]
    if not parts:
        return Cell(NA, "no objective")
    if len(parts) > 1 and all(d for _, d in parts):
        return Cell(", ".join(t for t, _ in parts) + " (defaults)")
    return Cell(", ".join(t + (" (default)" if d else "") for t, d in parts))


def _prefill_pool(cap: CapacityResult) -> Cell:
    """What sized the prefill pool (ttft-slo, utilization, transfer) and the TTFT it gives."""
    parts = []
    if not is_na(cap.prefill_limit):
        parts.append(f"sized by {cap.prefill_limit}")
    ttft_p90, mean, md1 = (num(cap.ttft_estimate_p90_s), num(cap.ttft_estimate_mean_s),
                           num(cap.md1_ttft_s))
    if ttft_p90 is not None:
        text = f"expected TTFT p90 {fmt_seconds(ttft_p90)}"
        if mean is not None:
            text += f", mean {fmt_seconds(mean)}"
        if md1 is not None:  # DistServe's M/D/1 mean, a cross-check of the G/G/c one
            text += f" (M/D/1 {fmt_seconds(md1)})" if mean is not None else \
                f"; M/D/1 mean {fmt_seconds(md1)}"
        parts.append(text)
    if not parts:
        return Cell(NA, _first_reason(cap.prefill_limit, cap.ttft_estimate_p90_s)
                    or "not estimated")
    return Cell("; ".join(parts))


def _decode_pool(cap: CapacityResult) -> Cell:
    """What sized the decode pool (throughput, kv-memory, transfer) and what caps its batch."""
    parts = []
    if not is_na(cap.decode_limit):
        parts.append(f"sized by {cap.decode_limit}")
    batch = num(cap.decode_batch_size)
    limit = None if is_na(cap.decode_batch_limit) else f"capped by {cap.decode_batch_limit}"
    if batch is not None:
        parts.append(f"mean batch {fmt_num(batch)}" + (f", {limit}" if limit else ""))
    elif limit:
        parts.append(f"batch {limit}")
    if not parts:
        return Cell(NA, _first_reason(cap.decode_limit, cap.decode_batch_size)
                    or "not estimated")
    return Cell("; ".join(parts))


def _signed_pct(x: float) -> str:
    """A relative gap with its sign: +17.0%, -8.6%."""
    return f"{x * 100:+.1f}%"


def _mean_based(cap: CapacityResult) -> Cell:
    """What a mean-based planner (Dynamo's) would deploy, and the Jensen gap behind it."""
    pair = pd_pair(cap.mean_based_prefill, cap.mean_based_decode)
    mean_based = num(cap.mean_based_ratio)
    if pair == NA and mean_based is None:
        return Cell(NA, _first_reason(cap.mean_based_prefill, cap.mean_based_ratio)
                    or "not estimated")
    text = f"would deploy {pair}" if pair != NA else f"ratio {fmt_ratio(mean_based)}"
    gaps = [f"{what} {_signed_pct(gap)}" for what, gap in
            (("prefill work", num(cap.jensen_gap_prefill)),
             ("decode context", num(cap.jensen_gap_decode))) if gap is not None]
    if gaps:
        return Cell(f"{text}; {', '.join(gaps)} vs f(mean)")
    # Without the model's own gap, the ratios still show how far mean lengths under-size prefill.
    if mean_based is None or pair == NA:
        return Cell(text)
    th = num(cap.theoretical_ratio)
    shortfall = 1 - mean_based / th if th is not None and th > 0 else 0.0
    if shortfall >= JENSEN_GAP_NOTE:
        return Cell(f"{text} (ratio {fmt_ratio(mean_based)}, {fmt_pct(shortfall)} below the "
                    "theoretical)")
    return Cell(f"{text} (ratio {fmt_ratio(mean_based)})")


def _verified(cap: CapacityResult) -> Cell:
    """Simulated attainment at the recommended counts, next to what the model predicted."""
    ver = cap.verified
    if isinstance(ver, Missing):
        return Cell(NA, ver.reason)
    text = f"{slo_summary(ver)} ({ver.method})"
    predicted = num(cap.ttft_attainment_estimate)
    if predicted is not None and ver.ttft_slo_s is not None:
        text += f"; the model predicted TTFT {fmt_pct(predicted)}"
    return Cell(text)


def _rate(v: Any) -> str:
    return NA if is_na(v) else f"{fmt_num(v)} req/s"


def _first_reason(*values: Any) -> str | None:
    for v in values:
        if isinstance(v, Missing):
            return v.reason
    return None


BAND_NOTE: Final = ("P, D: recommended counts; ratio: theoretical P/D; binding: at those counts; "
                    "rows above the recommendation need fewer instances, below as many or more")
# The recommendation's own row in the band, at the observed workload.
BAND_ANSWER_LABEL: Final = "observed workload (the recommendation)"


def band_table(report: Report) -> Table | None:
    """How the recommendation moves under each what-if (load, p90 lengths, hit rate), centred
    on the answer: the recommendation's own row in the middle, the what-ifs that need fewer
    instances (P + D; then fewer prefill) above it and those that need as many or more below,
    each side ordered by that need."""
    cap = report.capacity
    if isinstance(cap, Missing) or not cap.band:
        return None

    def row(label: str, p: int, d: int, ratio: Any, binding: Any) -> tuple[Cell, ...]:
        return (Cell(label), Cell(fmt_num(p)), Cell(fmt_num(d)), Cell(fmt_ratio(ratio)),
                Cell(binding) if isinstance(binding, str) and binding
                else Cell(NA, "not estimated"))

    ordered = sorted(cap.band, key=lambda b: (b.prefill + b.decode, b.prefill))
    p_rec, d_rec = count(cap.recommended_prefill), count(cap.recommended_decode)
    if p_rec is None or d_rec is None:
        rows = tuple(row(b.label, b.prefill, b.decode, b.theoretical_ratio, b.binding)
                     for b in ordered)
    else:
        need = (p_rec + d_rec, p_rec)
        below = [b for b in ordered if (b.prefill + b.decode, b.prefill) < need]
        rest = [b for b in ordered if (b.prefill + b.decode, b.prefill) >= need]
        rows = (*(row(b.label, b.prefill, b.decode, b.theoretical_ratio, b.binding)
                  for b in below),
                row(BAND_ANSWER_LABEL, p_rec, d_rec, cap.theoretical_ratio, cap.binding),
                *(row(b.label, b.prefill, b.decode, b.theoretical_ratio, b.binding)
                  for b in rest))
    return Table(title="what-if band", columns=("what-if", "P", "D", "ratio", "binding"),
                 rows=rows, numeric=(False, True, True, True, False), note=BAND_NOTE)


def window_differs(w: RatioWindow) -> bool:
    """True when both counts are known and the deployed ones are not the recommended ones."""
    rec = (count(w.recommended_prefill), count(w.recommended_decode))
    dep = (count(w.deployed_prefill), count(w.deployed_decode))
    return None not in rec and None not in dep and rec != dep


WINDOWS_NOTE: Final = "offered/served: req/s; prompt/output: mean tokens; ratio: theoretical P/D"
WINDOWS_FLAG_NOTE: Final = FLAG_MARK.strip() + " deployed ≠ recommended; "


def windows_table(report: Report) -> Table | None:
    """The capacity estimate per window next to what was deployed (ratio lag)."""
    cap = report.capacity
    if isinstance(cap, Missing) or not cap.windows:
        return None
    rel = is_relative(report.window_start_ts)
    planner = has_planner(cap.windows)
    rows = []
    for w in cap.windows:
        deployed = Cell(pd_pair(w.deployed_prefill, w.deployed_decode),
                        reason=_first_reason(w.deployed_prefill, w.deployed_decode),
                        flag=window_differs(w))
        rows.append((
            Cell(fmt_ts(w.start_ts, rel, with_date=False)),
            Cell(fmt_num(w.requests)),
            cell(w.offered_rate_rps),
            cell(w.served_rate_rps),
            cell(w.mean_prompt_tokens),
            cell(w.mean_output_tokens),
            cell(w.theoretical_ratio, fmt_ratio),
            Cell(pd_pair(w.recommended_prefill, w.recommended_decode),
                 reason=_first_reason(w.recommended_prefill, w.recommended_decode)),
            deployed,
            cell(w.binding, str),
            *(_planner_cells(w) if planner else ()),
        ))
    columns = ("from", "reqs", "offered", "served", "prompt", "output", "ratio",
               "recommended", "deployed", "binding")
    return Table(title="capacity per window",
                 columns=columns + (PLANNER_COLUMNS if planner else ()),
                 rows=tuple(rows),
                 numeric=(False,) + (True,) * 8 + (False,) + (True,) * (
                     len(PLANNER_COLUMNS) if planner else 0),
                 note=(WINDOWS_FLAG_NOTE if any(r[8].flag for r in rows) else "") + WINDOWS_NOTE
                 + (PLANNER_NOTE if planner else ""))


# Controller audit: a planner's own view (Dynamo dynamo_planner_*) next to pdprobe's, per window.
PLANNER_COLUMNS: Final = ("planner rec", "planner saw", "planner ITL obs/est")
PLANNER_NOTE: Final = ("; planner rec: the replicas the planner decided on; planner saw: the "
                       "replicas it saw deployed; ITL observed/estimated by its model")


def has_planner(windows: Iterable[RatioWindow]) -> bool:
    """True when any window carries the planner's recommended or deployed counts."""
    return any(not is_na(w.planner_predicted_decode) or not is_na(w.planner_decode)
               for w in windows)


def _replicas(x: Any) -> Any:
    return x if is_na(x) else round(float(x))


def _planner_cells(w: RatioWindow) -> tuple[Cell, ...]:
    rec = (_replicas(w.planner_predicted_prefill), _replicas(w.planner_predicted_decode))
    saw = (_replicas(w.planner_prefill), _replicas(w.planner_decode))
    obs, est = w.planner_observed_itl_s, w.planner_estimated_itl_s
    itl = (NA if is_na(obs) and is_na(est) else
           f"{NA if is_na(obs) else fmt_seconds(float(obs))}/"  # type: ignore[arg-type]
           f"{NA if is_na(est) else fmt_seconds(float(est))}")  # type: ignore[arg-type]
    return (Cell(pd_pair(*rec), reason=_first_reason(w.planner_predicted_prefill,
                                                      w.planner_predicted_decode),
                 flag=None not in rec and rec != saw and not any(map(is_na, rec + saw))),
            Cell(pd_pair(*saw), reason=_first_reason(w.planner_prefill, w.planner_decode)),
            Cell(itl))


def windows_summary(report: Report) -> str | None:
    """``deployed ≠ recommended in 3 of 5 windows of 5m00s; latest 10:20:00 needs 3P:1D, has
    2P:4D`` (or that they matched, or that the counts are unknown)."""
    cap = report.capacity
    if isinstance(cap, Missing) or not cap.windows:
        return None
    wins = cap.windows
    length = fmt_duration(wins[0].end_ts - wins[0].start_ts)
    known = [w for w in wins if None not in (
        count(w.recommended_prefill), count(w.recommended_decode), count(w.deployed_prefill),
        count(w.deployed_decode))]
    audit = planner_summary(wins)
    if not known:
        return (f"{plural(len(wins), 'window')} of {length}; deployed or recommended counts "
                f"unknown{audit}")
    rest = len(wins) - len(known)
    tail = f" (and {rest} without both counts)" if rest else ""
    differ = [w for w in known if window_differs(w)]
    if not differ:
        return (f"deployed = recommended in all {plural(len(known), 'window')} of {length}"
                f"{tail}{audit}")
    last = differ[-1]
    when = fmt_ts(last.start_ts, is_relative(report.window_start_ts), with_date=False)
    return (f"deployed ≠ recommended in {len(differ)} of {plural(len(known), 'window')} of "
            f"{length}{tail}; latest {when} needs "
            f"{pd_pair(last.recommended_prefill, last.recommended_decode)}, has "
            f"{pd_pair(last.deployed_prefill, last.deployed_decode)}{audit}")


def planner_summary(wins: Sequence[RatioWindow]) -> str:
    """``; the planner's recommendation ≠ what it saw deployed in 2 of 5 windows (latest
    2P:4D vs 2P:2D)``, or "" without planner data."""
    if not has_planner(wins):
        return ""
    pairs = [((_replicas(w.planner_predicted_prefill), _replicas(w.planner_predicted_decode)),
              (_replicas(w.planner_prefill), _replicas(w.planner_decode))) for w in wins]
    both = [(r, d) for r, d in pairs if not any(map(is_na, r + d))]
    if not both:
        return "; planner: recommended or deployed replicas unknown"
    apart = [(r, d) for r, d in both if r != d]
    if not apart:
        return f"; the planner's replicas followed its recommendation in all {len(both)}"
    r, d = apart[-1]
    return (f"; the planner's recommendation ≠ what it saw deployed in {len(apart)} of "
            f"{len(both)} (latest {pd_pair(*r)} vs {pd_pair(*d)})")


def slo_summary(slo: Any) -> str:
    parts = []
    if slo.ttft_slo_s is not None:
        parts.append(f"TTFT ≤ {fmt_seconds(slo.ttft_slo_s)}: {_pct_or_na(slo.ttft)}")
    if slo.tpot_slo_s is not None:
        parts.append(f"TPOT ≤ {fmt_seconds(slo.tpot_slo_s)}: {_pct_or_na(slo.tpot)}")
    if slo.ttft_slo_s is not None and slo.tpot_slo_s is not None:
        parts.append(f"both: {_pct_or_na(slo.both)}")
    return ", ".join(parts) if parts else "no SLO given"


def _pct_or_na(v: Any) -> str:
    return NA if is_na(v) else fmt_pct(float(v))


def slo_rows(report: Report) -> list[KeyValue]:
    slo = report.slo
    if isinstance(slo, Missing):
        return [KeyValue("SLO attainment", Cell(NA, slo.reason))]
    rows = []
    defaulted = getattr(slo, "defaulted", ())
    if slo.ttft_slo_s is not None:
        rows.append(KeyValue(f"TTFT ≤ {fmt_seconds(slo.ttft_slo_s)}"
                             + (" (default)" if "ttft" in defaulted else ""),
                             cell(slo.ttft, fmt_pct)))
    if slo.tpot_slo_s is not None:
        rows.append(KeyValue(f"TPOT ≤ {fmt_seconds(slo.tpot_slo_s)}"
                             + (" (default)" if "tpot" in defaulted else ""),
                             cell(slo.tpot, fmt_pct)))
    if slo.ttft_slo_s is not None and slo.tpot_slo_s is not None:
        rows.append(KeyValue("both", cell(slo.both, fmt_pct)))
    if not rows:
        return [KeyValue("SLO attainment", Cell(NA, "no SLO given (use --slo-ttft / --slo-tpot)"))]
    rows.append(KeyValue("target", Cell(f"{fmt_pct(slo.target)} of requests within both")))
    rows.append(KeyValue("method", Cell(slo.method)))
    return rows


def sources_table(report: Report) -> Table:
    """One row per input; paths relative to the folder they share (named in the note), so
    rows differ in their first characters, not after a long common prefix."""
    paths = [s.path for s in report.sources]
    base = common_folder(paths)
    shown = [_relative(p, base) for p in paths]
    rows = tuple((Cell(path), Cell(s.kind), Cell(s.format), Cell(fmt_num(s.rows)),
                  Cell(fmt_num(s.skipped), flag=s.skipped > 0))
                 for path, s in zip(shown, report.sources, strict=True))
    notes = [f"paths under {base}"] if base else []
    if any(s.skipped for s in report.sources):
        notes.append("! some lines or rows were not understood and were skipped")
    return Table(title="inputs", columns=("source", "kind", "format", "used", "skipped"),
                 rows=rows, numeric=(False, False, False, True, True), note="; ".join(notes))


def common_folder(paths: Sequence[str]) -> str:
    """The folder every path lies in ("" when there is none worth stripping: one input,
    URLs, stdin, or nothing in common)."""
    import os.path

    files = [p for p in paths if "/" in p and "://" not in p and p != "-"]
    if len(files) < 2 or len(files) != len(paths):
        return ""
    try:
        base = os.path.commonpath(files)
    except ValueError:  # absolute and relative mixed
        return ""
    if base in ("", "/") or base in files:
        return ""
    return base


def _relative(path: str, base: str) -> str:
    return path[len(base):].lstrip("/") if base and path.startswith(base + "/") else path


def source_notes(report: Report) -> list[str]:
    """Per-input notes, one line per kind of note: the same note about six logs is printed
    once, with the count and the first few files (the words that differ are the file's); the
    kinds about the same files share one line."""
    base = common_folder([s.path for s in report.sources])
    groups: dict[str, list[tuple[str, str]]] = {}
    for s in report.sources:
        for n in s.notes:
            groups.setdefault(_NOTE_SHAPE.sub("…", n), []).append((_relative(s.path, base), n))
    by_files: dict[tuple[str, ...], list[str]] = {}
    for items in groups.values():
        files = tuple(dict.fromkeys(p for p, _ in items))
        text = items[0][1]
        if len({n for _, n in items}) > 1:
            text += " (likewise for the others)"
        by_files.setdefault(files, []).append(text)
    out = []
    for files, texts in by_files.items():
        if len(files) == 1:
            who = files[0]
        else:
            shown = ", ".join(_short_path(p) for p in files[:MAX_NOTE_FILES])
            more = (f" and {len(files) - MAX_NOTE_FILES} more"
                    if len(files) > MAX_NOTE_FILES else "")
            who = f"{len(files)} inputs ({shown}{more})"
        out.append(f"{who}: " + "; ".join(texts))
    return out


# What differs between two notes of the same kind: quoted names and numbers.
_NOTE_SHAPE: Final = re.compile(r"'[^']*'|\"[^\"]*\"|\d+(?:[.,:]\d+)*")
# Files named in a grouped note; the rest are counted.
MAX_NOTE_FILES: Final = 3


def group_lines(lines: Sequence[str]) -> list[str]:
    """Warnings or notes, one line per kind: lines that differ only in names and numbers
    (the same warning for each of six files) print once, with how many there were."""
    groups: dict[str, list[str]] = {}
    for line in lines:
        groups.setdefault(_NOTE_SHAPE.sub("…", line), []).append(line)
    return [items[0] if len(items) == 1 else f"{items[0]} (and {len(items) - 1} more like it)"
            for items in groups.values()]


def _short_path(path: str) -> str:
    """The file name, with its folder when that is all that tells two inputs apart."""
    from pathlib import PurePath

    return PurePath(path).name


def identity_table(report: Report) -> Table | None:
    """Per instance: role, how decided, and the other names the inputs gave it (``-v``, HTML)."""
    if not report.identity:
        return None
    rows = []
    for entry in report.identity:
        names = "; ".join(f"{a.name} in {_short_path(a.source)} ({a.how})"
                          for a in entry.aliases if a.name != entry.name)
        names = names or "same name in every input"
        rows.append((Cell(entry.name), Cell(entry.role), Cell(entry.role_source), Cell(names)))
    return Table(title="identity", columns=("instance", "role", "role from", "other names"),
                 rows=tuple(rows), numeric=(False, False, False, False))


def inconclusive_lines(report: Report) -> list[str]:
    return [f"{i.code} {i.cause}: needs {i.needs}" for i in report.inconclusive]


@dataclass(frozen=True)
class ReportView:
    """Everything a renderer prints, already worded; built once per render."""

    verdict: str
    status: str
    relative: bool
    window: str
    header: tuple[KeyValue, ...]
    findings: tuple[FindingView, ...]
    inconclusive: tuple[str, ...]
    workload: tuple[KeyValue, ...]
    lengths: Table | None
    roles: tuple[Table, ...]
    role_details: tuple[Table, ...]
    series: tuple[RoleSeries, ...]
    capacity: tuple[KeyValue, ...]
    capacity_missing: bool
    band: Table | None
    windows: Table | None
    windows_summary: str | None
    slo: tuple[KeyValue, ...]
    sources: Table
    source_notes: tuple[str, ...]
    identity: Table | None
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    flagged: dict[str, str] = field(default_factory=dict)


SERIES_SPECS: Final = (("queue_series", "sum"), ("ttft_series", "mean"),
                       ("kv_usage_series", "mean"))


def build_view(report: Report) -> ReportView:
    rel = is_relative(report.window_start_ts)
    counts = report.instance_counts
    inst_text = f"{counts.prefill or 0}P:{counts.decode or 0}D"
    missing_roles = [r for r, n in (("prefill", counts.prefill), ("decode", counts.decode)) if not n]
    if missing_roles:
        inst_text += f" (no {' or '.join(missing_roles)} instance found)"
    if counts.unknown:
        inst_text += f" + {counts.unknown} of unknown role"
    action = next_action(report)
    header = (
        *((KeyValue("do first", Cell(action)),) if action else ()),
        KeyValue("window", Cell(window_phrase(report.window_start_ts, report.window_end_ts))),
        KeyValue("instances", Cell(inst_text)),
        KeyValue("input", Cell(report.input_description)),
        KeyValue("generated", Cell(f"{report.generated_at} by pdprobe {report.pdprobe_version}")),
    )
    series = []
    for role in ROLE_ORDER:
        for attr, how in SERIES_SPECS:
            rs = role_series(report, role, attr, how)
            if rs is not None:
                series.append(rs)
    return ReportView(
        verdict=verdict_line(report),
        status=report.status,
        relative=rel,
        window=window_phrase(report.window_start_ts, report.window_end_ts),
        header=header,
        findings=tuple(finding_view(report, f, rel) for f in ordered_findings(report)),
        inconclusive=tuple(inconclusive_lines(report)),
        workload=tuple(workload_rows(report)),
        lengths=length_table(report),
        roles=tuple(role_tables(report)),
        role_details=tuple(role_tables(report, detail=True)),
        series=tuple(series),
        capacity=tuple(capacity_rows(report)),
        capacity_missing=isinstance(report.capacity, Missing),
        band=band_table(report),
        windows=windows_table(report),
        windows_summary=windows_summary(report),
        slo=tuple(slo_rows(report)),
        sources=sources_table(report),
        source_notes=tuple(source_notes(report)),
        identity=identity_table(report),
        warnings=tuple(group_lines(report.warnings)),
        notes=tuple(group_lines(report.notes)),
        flagged=flagged_instances(report),
    )


def join_nonempty(parts: Iterable[str], sep: str = "; ") -> str:
    return sep.join(p for p in parts if p)
