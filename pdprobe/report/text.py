"""The terminal view (rich): the verdict line first, then findings, workload, instances,
sparklines over time, capacity, SLO attainment, inputs and warnings.

Fits ``RenderOptions.width`` columns (100 by default); without ``color`` it emits no ANSI
codes. Data strings are rich ``Text`` (never markup), so ``[brackets]`` print as they are.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Final

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table as RichTable
from rich.text import Text

from pdprobe.report.base import RenderOptions
from pdprobe.report.cells import FLAG_MARK, STATUS_WORDS, Cell, KeyValue, Table, fmt_ts
from pdprobe.report.safe_view import safe_view
from pdprobe.report.series_view import RoleSeries, series_value, sparkline
from pdprobe.report.verdict import verdict_line
from pdprobe.report.view import ReportView, build_view
from pdprobe.units import NA

if TYPE_CHECKING:
    from pdprobe.report.model import Report

_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
_TRAILING: Final = re.compile(r"(?:\s|\x1b\[[0-9;]*m)+$")
STATUS_STYLES: Final = {"ok": "bold green", "warning": "bold yellow", "critical": "bold red",
                        "unknown": "bold magenta"}
SEVERITY_STYLES: Final = {"INFO": "cyan", "WARNING": "yellow", "CRITICAL": "red"}
SECTION_STYLE: Final = "bold underline"
LABEL_WIDTH: Final = 26  # key/value labels: the longest ("prompt/output correlation") + 1
SPARK_LABEL_WIDTH: Final = 30
INSTANCE_MIN_WIDTH: Final = 12  # long pod names fold rather than squeeze the name column away
# Names up to this long never fold (an ip:port with the flag is 24); longer pod names fold.
NAME_MAX_WIDTH: Final = 32
COLUMN_GAP: Final = 2  # box.SIMPLE_HEAD's blank divider plus the cell's right padding
# Instance tables list at most this many rows per role without -v (flagged instances first),
# so a 64-instance cluster still fits a screen; -v lists them all.
MAX_ROWS_QUIET: Final = 12


def render(report: Report, options: RenderOptions) -> str:
    """The report for a terminal: the verdict, findings, instance tables with sparklines, workload,
    capacity, SLO and inputs (rich, width-aware)."""
    console = Console(file=io.StringIO(), width=options.width, force_terminal=options.color,
                      color_system="standard" if options.color else None,
                      no_color=not options.color, highlight=False, emoji=False, markup=False,
                      legacy_windows=False, soft_wrap=False, record=False)
    if options.quiet:  # one physical line, whatever the width: runbooks read line 1
        console.print(_verdict(report.status, verdict_line(report)), no_wrap=True,
                      overflow="ignore", crop=False)
        return _output(console)
    view = safe_view(build_view(report))
    for part in _sections(view, options):
        console.print(part)
    return _output(console)


def _output(console: Console) -> str:
    buf = console.file
    assert isinstance(buf, io.StringIO)
    # rich pads wrapped lines; trailing blanks (also before a colour reset) are noise
    return "\n".join(_TRAILING.sub(lambda m: "".join(_ANSI.findall(m.group(0))), line)
                     for line in buf.getvalue().splitlines()) + "\n"


def _verdict(status: str, line: str) -> Text:
    word = STATUS_WORDS[status]
    text = Text()
    text.append(word, style=STATUS_STYLES[status])
    text.append(line[len(word):], style="bold")
    return text


def _heading(title: str) -> Text:
    return Text("\n" + title, style=SECTION_STYLE)


def _cell_text(c: Cell, verbose: bool, *, inline_reason: bool = False) -> Text:
    if c.reason is not None and verbose and inline_reason and c.text == NA:
        return Text(f"n/a — {c.reason}", style="dim")
    if c.reason is not None:
        return Text(c.text, style="dim")
    if c.flag:
        return Text(c.text + FLAG_MARK, style="bold yellow")
    return Text(c.text)


def _kv_table(rows: tuple[KeyValue, ...] | list[KeyValue], verbose: bool) -> RichTable:
    t = RichTable.grid(padding=(0, 1))
    t.add_column(width=LABEL_WIDTH, no_wrap=True, style="dim")
    t.add_column(overflow="fold")
    for kv in rows:
        t.add_row(Text(kv.label), _cell_text(kv.value, verbose, inline_reason=True))
    return t


def _fit_columns(table: Table, width: int) -> tuple[Table, list[str]]:
    """``table`` without the columns (``drop_order``) a ``width``-column terminal has no room
    for, and their names; every other column keeps its full cells."""
    hidden: list[str] = []
    cols = list(table.columns)
    keep = list(range(len(cols)))

    def needed() -> int:
        return sum(max([len(table.columns[i]) + (0 if i else len(FLAG_MARK))]
                       + [len(r[i].text) + (len(FLAG_MARK) if r[i].flag else 0)
                          for r in table.rows]) + COLUMN_GAP for i in keep)

    for name in table.drop_order:
        if needed() <= width or name not in cols:
            continue
        keep.remove(cols.index(name))
        hidden.append(name)
    if not hidden:
        return table, []
    return Table(title=table.title, columns=tuple(cols[i] for i in keep),
                 rows=tuple(tuple(r[i] for i in keep) for r in table.rows),
                 numeric=tuple(table.numeric[i] for i in keep), note=table.note), hidden


def _table(table: Table, verbose: bool, *, limit: int | None = None,
           flagged: dict[str, str] | None = None, width: int | None = None) -> RenderableType:
    hidden_cols: list[str] = []
    if width is not None and table.drop_order:
        table, hidden_cols = _fit_columns(table, width)
    rt = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                   header_style="bold")
    name_width = max([INSTANCE_MIN_WIDTH] + [len(r[0].text) + len(FLAG_MARK) * r[0].flag
                                              for r in table.rows])
    for i, (col, numeric) in enumerate(zip(table.columns, table.numeric, strict=True)):
        rt.add_column(col, justify="right" if numeric else "left", overflow="fold",
                      no_wrap=i > 0,
                      min_width=min(name_width, NAME_MAX_WIDTH) if i == 0 else None)
    rows = list(table.rows)
    hidden = 0
    if limit is not None and len(rows) > limit:
        # keep the instances a finding names, then the first others, in report order
        keep = {id(r) for r in rows if r[0].flag}
        for r in rows:
            if len(keep) >= limit:
                break
            keep.add(id(r))
        hidden = len(rows) - len(keep)
        rows = [r for r in rows if id(r) in keep]
    for row in rows:
        rt.add_row(*(_cell_text(c, verbose) for c in row))
    parts: list[RenderableType] = [rt]
    if hidden:
        parts.append(Text(f"… {hidden} more (use -v to list all)", style="dim"))
    if table.note:
        parts.append(Text(table.note, style="dim"))
    if hidden_cols:
        parts.append(Text(f"not shown at this width: {', '.join(hidden_cols)} (-f markdown "
                          "or a wider terminal shows them)", style="dim"))
    if verbose:
        for reason in table.na_reasons():
            parts.append(Text("n/a " + reason, style="dim"))
    return Group(*parts)


def _findings(view: ReportView, verbose: bool) -> list[RenderableType]:
    out: list[RenderableType] = [_heading("FINDINGS")]
    if not view.findings:
        out.append(Padding(Text("No findings."), (0, 0, 0, 1)))
    for fv in view.findings:
        head = Text(" ")
        head.append(f"{fv.severity:<9}", style=SEVERITY_STYLES[fv.severity])
        head.append(f" {fv.title}", style="bold")
        extras = [f"confidence {fv.confidence}"] + ([fv.relations] if fv.relations else [])
        head.append("  (" + "; ".join(extras) + ")", style="dim")
        lines = RichTable.grid(padding=(0, 1))
        lines.add_column(no_wrap=True)
        lines.add_column(overflow="fold")
        for ev in fv.evidence:
            lines.add_row(Text("•"), Text(ev))
        for step in fv.next_steps:
            lines.add_row(Text("→"), Text(step, style="green" if fv.severity != "INFO" else ""))
        body: list[RenderableType] = [Text(fv.summary)]
        if fv.instances:
            body.append(Text("instances: " + fv.instances))
        if lines.row_count:
            body.append(lines)
        out += [head, Padding(Group(*body), (0, 0, 0, 3))]
    if view.inconclusive:
        if verbose:
            out.append(Text(" Not judged:", style="dim"))
            out += [Padding(Text(line, style="dim"), (0, 0, 0, 3)) for line in view.inconclusive]
        else:
            codes = ", ".join(line.split(":")[0] for line in view.inconclusive)
            grid = RichTable.grid(padding=(0, 1))
            grid.add_column(no_wrap=True)
            grid.add_column(overflow="fold")
            grid.add_row(Text("Not judged:", style="dim"),
                         Text(f"{codes} (-v for what they need)", style="dim"))
            out.append(Padding(grid, (0, 0, 0, 1)))
    return out


def _series_block(view: ReportView, width: int, verbose: bool) -> list[RenderableType]:
    if not view.series:
        return []
    spark_w = max(10, width - SPARK_LABEL_WIDTH - 18)
    first = view.series[0]
    out: list[RenderableType] = [_heading("OVER TIME")]
    axis = Text(" " * (SPARK_LABEL_WIDTH + 1), style="dim")
    t0 = fmt_ts(first.ts[0], view.relative, with_date=False)
    t1 = fmt_ts(first.ts[-1] + _step(first), view.relative, with_date=False)
    shown = min(spark_w, max(len(rs.ts) for rs in view.series))
    axis.append(t0 + " " * max(1, shown - len(t0) - len(t1)) + t1)
    out.append(axis)
    for rs in view.series:
        out.append(_spark_line(f"{rs.role} {rs.what}", rs.values, rs, spark_w, view, None))
        if verbose:
            for name, values in rs.per_instance:
                out.append(_spark_line(f"  {name}", values, rs, spark_w, view,
                                       rs.instance_peak))
    return out


def _step(rs: RoleSeries) -> float:
    return rs.ts[1] - rs.ts[0] if len(rs.ts) > 1 else 0.0


def _spark_line(label: str, values: tuple[float, ...], rs: RoleSeries, width: int,
                view: ReportView, scale: float | None) -> Text:
    finite = [v for v in values if v == v]
    peak = series_value(max(finite), rs.unit) if finite else NA
    name = label if len(label) <= SPARK_LABEL_WIDTH else label[:SPARK_LABEL_WIDTH - 1] + "…"
    is_flagged = label.strip() in view.flagged
    text = Text(f"{name:<{SPARK_LABEL_WIDTH}} ", style="bold yellow" if is_flagged else "")
    text.append(sparkline(values, width, hi=scale), style="cyan")
    text.append(f"  peak {peak}", style="dim")
    return text


def _capacity_tables(view: ReportView, verbose: bool) -> list[RenderableType]:
    """The what-if band, then the windows: one summary line, the table with -v (a day's
    capture has hundreds of windows)."""
    out: list[RenderableType] = []
    if view.band is not None:
        out += [Text(""), Text(view.band.title, style="bold"), _table(view.band, verbose)]
    if view.windows is not None and view.windows_summary:
        title = Text(view.windows.title, style="bold")
        if not verbose:
            title.append(" (-v lists them)", style="dim")
        out += [Text(""), title, Text(view.windows_summary)]
        if verbose:
            out.append(_table(view.windows, verbose))
    return out


def _sections(view: ReportView, options: RenderOptions) -> list[RenderableType]:
    verbose = options.verbose
    out: list[RenderableType] = [_verdict(view.status, view.verdict),
                                 _kv_table(view.header, verbose)]
    out += _findings(view, verbose)

    out.append(_heading("WORKLOAD"))
    out.append(_kv_table(view.workload, verbose))
    if view.lengths is not None:
        out.append(Text(""))
        out.append(_table(view.lengths, verbose))

    if view.roles:
        out.append(_heading("INSTANCES"))
        tables = view.role_details if verbose else ()
        for i, table in enumerate(view.roles):
            out.append(Text(table.title, style="bold"))
            out.append(_table(table, verbose, limit=None if verbose else MAX_ROWS_QUIET,
                              width=options.width))
            if verbose:
                out.append(_table(tables[i], verbose))
            if i < len(view.roles) - 1:
                out.append(Text(""))

    out += _series_block(view, options.width, verbose)

    out.append(_heading("CAPACITY"))
    out.append(_kv_table(view.capacity, verbose))
    out += _capacity_tables(view, verbose)

    out.append(_heading("SLO ATTAINMENT"))
    out.append(_kv_table(view.slo, verbose))

    out.append(_heading("INPUTS"))
    if view.sources.rows:
        out.append(_table(view.sources, verbose))
    else:
        out.append(Text("no input was usable", style="dim"))
    for note in view.source_notes:
        out.append(Text("note: " + note, style="dim"))
    if verbose and view.identity is not None:
        out.append(_heading("IDENTITY"))
        for inst, role, how, names in view.identity.rows:
            out.append(Text(f"{inst.text}  {role.text} ({how.text})"))
            out.append(Text(f"    {names.text}", style="dim"))

    if view.warnings:
        out.append(_heading("WARNINGS"))
        out += [Text("! " + w, style="yellow") for w in view.warnings]
    if view.notes:
        out.append(_heading("NOTES"))
        out += [Text("- " + n) for n in view.notes]
    return out
