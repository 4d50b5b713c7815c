"""The view model: everything a renderer prints, worded once per render.

All renderers (text, Markdown, HTML, Prometheus) read a ``ReportView`` built here from the
``Report``, so a number or phrase reads the same in every format. Renderers only lay it out.
A cell that could not be computed keeps the ``Missing`` reason, shown where the format allows
(``-v`` in the terminal, footnotes in Markdown, tooltips in HTML).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pdprobe.report.capacity_view import band_table, capacity_rows
from pdprobe.report.cells import ROLE_ORDER, Cell, KeyValue, Table, is_relative, window_phrase
from pdprobe.report.sections import (
    group_lines,
    identity_table,
    inconclusive_lines,
    length_table,
    role_tables,
    slo_rows,
    source_notes,
    sources_table,
    workload_rows,
)
from pdprobe.report.series_view import SERIES_SPECS, RoleSeries, role_series
from pdprobe.report.verdict import (
    FindingView,
    finding_view,
    flagged_instances,
    next_action,
    ordered_findings,
    verdict_line,
)
from pdprobe.report.windows_view import windows_summary, windows_table
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.report.model import Report


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



def build_view(report: Report) -> ReportView:
    """Word the whole report once: header, findings, sections, series and notes, for every renderer."""
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


