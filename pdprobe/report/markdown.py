"""GitHub-flavoured Markdown: the terminal view's content, ready to paste into a ticket.

Every string from the data is escaped (Markdown punctuation, ``|`` in tables, and ``<``/``&``
as entities), so an instance called ``<script>`` or ``a|b`` cannot change the document.
n/a cells keep their reasons in a list under each table.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from pdprobe.report.base import RenderOptions
from pdprobe.report.cells import FLAG_MARK, Cell, KeyValue, Table, fmt_ts, plural
from pdprobe.report.safe_view import safe_view
from pdprobe.report.series_view import series_value, sparkline
from pdprobe.report.verdict import verdict_line
from pdprobe.report.view import ReportView, build_view
from pdprobe.units import NA

if TYPE_CHECKING:
    from pdprobe.report.model import Report

SPARK_WIDTH: Final = 60
SPARK_LABEL_WIDTH: Final = 32

# Characters that start inline markup anywhere in a line (emphasis, code, links, tables,
# strikethrough). Intraword underscores are literal in GFM, so only word-edge ones are escaped
# (keeps metric names like vllm:num_requests_waiting readable in the raw text).
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def esc(text: str) -> str:
    """Escape a data string for inline Markdown (also safe inside a table cell)."""
    text = " ".join(text.split())  # no newlines: they would end a table row or paragraph
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def _code_safe(text: str) -> str:
    """Text for a fenced code block: a line of backticks cannot close the fence early."""
    return text.replace("```", "`\u200b``")


def render(report: Report, options: RenderOptions) -> str:
    """The report as GitHub-flavoured Markdown (the verdict line alone with ``--quiet``)."""
    if options.quiet:
        return esc(verdict_line(report)) + "\n"
    view = safe_view(build_view(report))
    out: list[str] = []
    status_word = view.verdict.split("  ", 1)[0]
    out.append(f"# pdprobe report: {status_word}")
    out.append("")
    head, _, rest = view.verdict.partition("  ")
    out.append(f"> **{esc(head)}** {esc(rest)}")
    out.append("")
    out += _kv(view.header)
    out += _findings(view)
    out.append("## Workload")
    out.append("")
    out += _kv(view.workload)
    if view.lengths is not None:
        out += _table(view.lengths)
    if view.roles:
        out.append("## Instances")
        out.append("")
        for i, table in enumerate(view.roles):
            out.append(f"### {esc(table.title)}")
            out.append("")
            out += _table(table)
            if options.verbose:
                out += _table(view.role_details[i])
    out += _series(view, options.verbose)
    out.append("## Capacity")
    out.append("")
    out += _kv(view.capacity)
    out += _capacity_tables(view)
    out.append("## SLO attainment")
    out.append("")
    out += _kv(view.slo)
    out.append("## Inputs")
    out.append("")
    if view.sources.rows:
        out += _table(view.sources)
    else:
        out += ["No input was usable.", ""]
    if view.source_notes:
        out += [f"- {esc(n)}" for n in view.source_notes] + [""]
    if view.identity is not None and options.verbose:
        out.append("### Instance identity")
        out.append("")
        out += _table(view.identity)
    if view.warnings:
        out.append("## Warnings")
        out.append("")
        out += [f"- ⚠ {esc(w)}" for w in view.warnings] + [""]
    if view.notes:
        out.append("## Notes")
        out.append("")
        out += [f"- {esc(n)}" for n in view.notes] + [""]
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


def _cell(c: Cell) -> str:
    if c.flag:
        return f"**{esc(c.text)}**{FLAG_MARK}"  # a constant " !", nothing to escape
    return esc(c.text)


def _kv(rows: tuple[KeyValue, ...] | list[KeyValue]) -> list[str]:
    out = ["| | |", "|---|---|"]  # GFM needs a header row; label/value tables leave it blank
    for kv in rows:
        value = kv.value
        text = _cell(value)
        if value.reason is not None and value.text == NA:
            text = f"{NA} — {esc(value.reason)}"
        out.append(f"| {esc(kv.label)} | {text} |")
    return [*out, ""]


def _table(table: Table) -> list[str]:
    cols = [esc(c) if c else " " for c in table.columns]
    out = ["| " + " | ".join(cols) + " |",
           "|" + "|".join("---:" if n else "---" for n in table.numeric) + "|"]
    for row in table.rows:
        out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    out.append("")
    if table.note:
        out += [f"_{esc(table.note)}_", ""]
    reasons = [f"- {NA}: {esc(r)}" for r in table.na_reasons()]
    if reasons:
        out += [*reasons, ""]
    return out


def _capacity_tables(view: ReportView) -> list[str]:
    """The what-if band, then the windows: a summary line and the table folded in a
    ``<details>`` block (GitHub renders the table inside; a day has hundreds of windows)."""
    out: list[str] = []
    if view.band is not None:
        out += [f"**{esc(view.band.title)}**", "", *_table(view.band)]
    if view.windows is not None and view.windows_summary:
        rows = len(view.windows.rows)
        out += [f"**{esc(view.windows.title)}**", "", esc(view.windows_summary), "",
                f"<details><summary>per-window table ({plural(rows, 'window')})</summary>", "",
                *_table(view.windows), "</details>", ""]
    return out


def _findings(view: ReportView) -> list[str]:
    out = ["## Findings", ""]
    if not view.findings:
        out += ["No findings.", ""]
    for fv in view.findings:
        out.append(f"### {fv.severity}: {esc(fv.title)}")
        out.append("")
        meta = [f"confidence {fv.confidence}"] + ([esc(fv.relations)] if fv.relations else [])
        out.append(f"{esc(fv.summary)}  ")
        out.append(f"_{'; '.join(meta)}_")
        out.append("")
        if fv.instances:
            out += [f"**Instances:** {esc(fv.instances)}", ""]
        if fv.evidence:
            out += ["**Evidence**", ""] + [f"- {esc(e)}" for e in fv.evidence] + [""]
        if fv.next_steps:
            out += ["**Next steps**", ""] + [f"1. {esc(s)}" for s in fv.next_steps] + [""]
    if view.inconclusive:
        out += ["**Not judged** (inputs missing)", ""]
        out += [f"- {esc(line)}" for line in view.inconclusive] + [""]
    return out


def _series(view: ReportView, verbose: bool) -> list[str]:
    if not view.series:
        return []
    first = view.series[0]
    step = first.ts[1] - first.ts[0] if len(first.ts) > 1 else 0.0
    t0 = fmt_ts(first.ts[0], view.relative, with_date=False)
    t1 = fmt_ts(first.ts[-1] + step, view.relative, with_date=False)
    shown = min(SPARK_WIDTH, max(len(rs.ts) for rs in view.series))
    lines = [" " * (SPARK_LABEL_WIDTH + 1) + t0 + " " * max(1, shown - len(t0) - len(t1)) + t1]
    for rs in view.series:
        lines.append(_spark(f"{rs.role} {rs.what}", rs.values, rs.unit, None))
        if verbose:
            lines += [_spark(f"  {name}", values, rs.unit, rs.instance_peak)
                      for name, values in rs.per_instance]
    return ["## Over time", "", "```text", *(_code_safe(x) for x in lines), "```", ""]


def _spark(label: str, values: tuple[float, ...], unit: str, scale: float | None) -> str:
    finite = [v for v in values if v == v]
    peak = series_value(max(finite), unit) if finite else NA
    name = label if len(label) <= SPARK_LABEL_WIDTH else label[:SPARK_LABEL_WIDTH - 1] + "…"
    return f"{name:<{SPARK_LABEL_WIDTH}} {sparkline(values, SPARK_WIDTH, hi=scale)}  peak {peak}"
