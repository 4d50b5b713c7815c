"""``pdprobe diff`` as text, Markdown or JSON: the verdict line first, then the findings that
came, went or moved, the key figures before → after, and the instances that moved most."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Final

from pdprobe.report.cells import fmt_value
from pdprobe.report.diff_view import FigureChange, InstanceMover, ReportDiff

DIFF_SCHEMA_VERSION: Final = 1
CHANGE_WORDS: Final = {"new": "new", "gone": "gone", "worse": "worse", "better": "milder",
                       "same": "still"}


def _change(before: Any, after: Any, unit: str) -> str:
    """``+26.0 pts``, ``-1.2 s``, ``×2.3``; "" when either side is unknown or not a number."""
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
        return ""  # words (status, counts): the two columns say it
    if before == after:
        return "same"
    if unit == "ratio":
        return f"{(after - before) * 100:+.1f} pts"
    if before > 0 and after > 0 and unit in ("s", "requests", "req/s"):
        factor = after / before
        return f"×{factor:.3g}" if factor >= 1 else f"÷{1 / factor:.3g}"
    return f"{after - before:+,.3g}"


def _fig_row(f: FigureChange) -> tuple[str, str, str, str]:
    return (f.what, fmt_value(f.before, f.unit), fmt_value(f.after, f.unit),
            _change(f.before, f.after, f.unit))


def _mover_row(m: InstanceMover) -> tuple[str, str, str, str, str, str]:
    return (m.instance, m.role, m.what, fmt_value(m.before, m.unit), fmt_value(m.after, m.unit),
            _change(m.before, m.after, m.unit))


def _columns(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in [header, *rows]]


def render_text(d: ReportDiff) -> str:
    """The diff for a terminal: the verdict line, both reports' labels and status, then the findings
    that changed."""
    d = _safe(d)
    out = [d.verdict,
           f"before {d.before_label} ({d.before_status})  →  after {d.after_label} "
           f"({d.after_status})", "", "FINDINGS"]
    if not d.findings:
        out.append("  none in either report")
    for f in d.findings:
        sev = (f.severity_after or f.severity_before or "").upper()
        was = (f" (was {f.severity_before})" if f.change in ("worse", "better") else "")
        out.append(f"  {CHANGE_WORDS[f.change]:<6}  {sev:<8}  {f.code} {f.cause}{was}")
    out += ["", "KEY FIGURES"]
    out += ["  " + line for line in _columns([_fig_row(f) for f in d.figures],
                                             ("", d.before_label, d.after_label, "change"))]
    if d.movers or d.instances_added or d.instances_removed:
        out += ["", "INSTANCES THAT MOVED"]
        if d.movers:
            out += ["  " + line for line in _columns(
                [_mover_row(m) for m in d.movers],
                ("instance", "role", "figure", "before", "after", "change"))]
        if d.instances_added:
            out.append("  added: " + ", ".join(d.instances_added))
        if d.instances_removed:
            out.append("  removed: " + ", ".join(d.instances_removed))
    return "\n".join(out) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return lines


def render_markdown(d: ReportDiff) -> str:
    """The diff as Markdown, for a pull request or a deploy log."""
    d = _safe(d)
    out = [f"**{_md_cell(d.verdict)}**", "",
           f"before `{d.before_label}` ({d.before_status}) → after `{d.after_label}` "
           f"({d.after_status})", "", "### Findings", ""]
    if d.findings:
        out += _md_table(("change", "severity", "finding", "summary"), [
            (CHANGE_WORDS[f.change], (f.severity_after or f.severity_before or ""),
             f"{f.code} {f.cause}", f.summary) for f in d.findings])
    else:
        out.append("None in either report.")
    out += ["", "### Key figures", ""]
    out += _md_table(("", d.before_label, d.after_label, "change"),
                     [_fig_row(f) for f in d.figures])
    if d.movers:
        out += ["", "### Instances that moved", ""]
        out += _md_table(("instance", "role", "figure", "before", "after", "change"),
                         [_mover_row(m) for m in d.movers])
    if d.instances_added or d.instances_removed:
        out += ["", f"Added: {', '.join(d.instances_added) or 'none'}; removed: "
                    f"{', '.join(d.instances_removed) or 'none'}."]
    return "\n".join(out) + "\n"


def render_json(d: ReportDiff) -> str:
    """The diff as JSON (``diff_schema_version``) for scripts."""
    data = {"diff_schema_version": DIFF_SCHEMA_VERSION, "verdict": d.verdict,
            **dataclasses.asdict(d)}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _safe(d: ReportDiff) -> ReportDiff:
    """Names and summaries come from the reports' inputs: no escape sequences on a terminal."""
    from pdprobe.report.safe_view import safe_view

    result: ReportDiff = safe_view(d)
    return result


RENDERERS: Final = {"text": render_text, "markdown": render_markdown, "json": render_json}
