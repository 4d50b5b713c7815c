"""The HTML report's charts, built from the report: P/D over time, per-instance heat maps,
the length distribution, KV transfer latency per instance and any extra series.

The drawing primitives (scales, axes, paths, colours) are in ``svg_charts.py``; this module
chooses what to draw from the ``Report`` and its view. Every string goes through ``h``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from pdprobe.analysis.series import (
    KV_TRANSFER_LATENCY,
    RDMA_CONGESTION,
    RDMA_RETRANSMITS,
    RDMA_TX_BANDWIDTH,
)
from pdprobe.report.cells import (
    fmt_ratio,
    fmt_ts,
    fmt_value,
    is_na,
    pd_pair,
)
from pdprobe.report.series_view import align_series
from pdprobe.report.svg_charts import (
    CHART_W,
    CHART_W_WIDE,
    MARGIN_R,
    MARGIN_T,
    HeatPanel,
    Line,
    Span,
    h,
    heatmap,
    label_area,
    line_chart,
    nice_ticks,
    row_label,
    svg_open,
)
from pdprobe.report.view import ReportView
from pdprobe.units import fmt_num, fmt_pct, fmt_seconds
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import RatioWindow, TimeSeries
    from pdprobe.report.model import Report


# --- charts from the report ------------------------------------------------------------------

def _x_fmt(view: ReportView) -> Callable[[float], str]:
    return lambda t: fmt_ts(t, view.relative, with_date=False)


def capacity_charts(report: Report, view: ReportView) -> str:
    """Producer vs consumer demand and the theoretical, recommended and deployed P/D over the
    capacity windows (the counts written over their windows), or why there is no chart."""
    cap = report.capacity
    if isinstance(cap, Missing):
        return (f"<section id=\"ratio-over-time\"><h2>P/D ratio over time</h2>"
                f"<p class=\"pending\">ratio: pending — {h(cap.reason)}</p></section>")
    if not cap.windows:
        return ""
    wins = cap.windows
    xs = (*(w.start_ts for w in wins), wins[-1].end_ts)

    def stepped(values: list[float]) -> tuple[float, ...]:
        return (*values, values[-1] if values else float("nan"))

    def num(v: Any) -> float:
        return float("nan") if is_na(v) else float(v)

    def ratio(p: Any, d: Any) -> float:
        return float("nan") if is_na(p) or is_na(d) or not d else float(p) / float(d)

    out = ["<section id=\"ratio-over-time\"><h2>Producer vs consumer over time</h2>"
           "<div class=\"multiples\">"]
    # one shared axis, so the two demands compare directly; logarithmic, because prefill
    # demand (uncached prompt tokens) runs one to two orders of magnitude above decode demand
    # (output tokens) and a linear axis would flatten the decode line at the bottom
    out.append(line_chart(
        "chart-rates", "Token demand: prefill vs decode (tokens/s, log scale)",
        [Line("prefill: uncached prompt tokens/s", xs,
              stepped([num(w.producer_tokens_per_s) for w in wins]), "s0", step=True),
         Line("decode: output tokens/s", xs,
              stepped([num(w.consumer_tokens_per_s) for w in wins]), "s1", step=True)],
        x_fmt=_x_fmt(view), y_fmt=fmt_num, log_y=True))
    rec = [(w.recommended_prefill, w.recommended_decode) for w in wins]
    dep = [(w.deployed_prefill, w.deployed_decode) for w in wins]

    def tips(pairs: list[tuple[Any, Any]]) -> tuple[str, ...]:
        out = tuple(f"{pd_pair(p, d)} ({fmt_ratio(ratio(p, d))})" for p, d in pairs)
        return (*out, out[-1])

    out.append(line_chart(
        "chart-ratio", "P/D ratio per window: theoretical, recommended, deployed",
        [Line("theoretical", xs, stepped([num(w.theoretical_ratio) for w in wins]), "s0",
              step=True),
         Line("recommended", xs, stepped([ratio(p, d) for p, d in rec]), "s2", step=True,
              tips=tips(rec)),
         Line("deployed", xs, stepped([ratio(p, d) for p, d in dep]), "s1", step=True,
              tips=tips(dep))],
        x_fmt=_x_fmt(view), y_fmt=lambda v: f"{v:.2f}",
        spans=_count_spans(wins, rec, dep, ratio)))
    out.append("</div></section>")
    return "".join(out)


def _count_spans(wins: Sequence[RatioWindow], rec: list[tuple[Any, Any]],
                 dep: list[tuple[Any, Any]], ratio: Callable[[Any, Any], float]) -> list[Span]:
    """``3P:1D`` over each run of windows with the same recommended counts, and the deployed
    counts over theirs where they differ from the recommended ones (else the labels overlap)."""
    out: list[Span] = []
    for pairs, css, other in ((rec, "s2", None), (dep, "s1", rec)):
        start = 0
        for i in range(1, len(wins) + 1):
            if i < len(wins) and pairs[i] == pairs[start]:
                continue
            p, d = pairs[start]
            same = other is not None and all(other[k] == pairs[k] for k in range(start, i))
            if not (is_na(p) or is_na(d) or same):
                out.append(Span(wins[start].start_ts, wins[i - 1].end_ts, ratio(p, d),
                                pd_pair(p, d), css))
            start = i
    return out


HEATMAPS: Final = (
    ("queue_series", "queue", "queue depth", fmt_num),
    ("ttft_series", "ttft", "TTFT", fmt_seconds),
    ("kv_usage_series", "kv-usage", "KV usage", fmt_pct),
)


def role_heatmap(report: Report, view: ReportView, role: str) -> str:
    """Queue depth | TTFT | KV usage per instance of one role, on one time grid."""
    members = [i for i in report.instances if i.role == role]
    items: list[tuple[str, TimeSeries]] = []
    keys: list[tuple[int, str]] = []
    for k, (attr, _, _, _) in enumerate(HEATMAPS):
        for inst in members:
            ts = getattr(inst, attr)
            if ts is not None and ts.ts:
                items.append((f"{k}\x00{inst.name}", ts))
                keys.append((k, inst.name))
    if not items:
        return ""
    grid, rows = align_series(items)
    step = grid[1] - grid[0] if len(grid) > 1 else items[0][1].step_s
    by_key = dict(zip(keys, (values for _, values in rows), strict=True))
    names = [i.name for i in members]
    panels = []
    for k, (_, key, label, fmt) in enumerate(HEATMAPS):
        if not any((k, n) in by_key for n in names):
            continue
        blank = tuple(float("nan") for _ in grid)
        panels.append(HeatPanel(key, label, grid, step,
                                tuple(by_key.get((k, n), blank) for n in names), fmt))
    return heatmap(f"heat-{role}", f"{role} instances over time", names,
                   [n in view.flagged for n in names], panels, x_fmt=_x_fmt(view))


def length_chart(report: Report) -> str:
    """Prompt and output length quantiles on a log axis: p50-p90 box, p99 whisker, mean."""
    wl = report.workload
    if isinstance(wl, Missing):
        return ""
    rows = []
    for label, dist in (("prompt", wl.prompt_tokens), ("output", wl.output_tokens)):
        if isinstance(dist, Missing):
            continue
        q = dist.quantiles
        vals = [v for v in (q.p50, q.p90, q.p99, q.mean) if math.isfinite(v) and v > 0]
        if vals:
            rows.append((label, q, dist.shape))
    if not rows:
        return ""
    allv = [v for _, q, _ in rows for v in (q.p50, q.p90, q.p99, q.mean)
            if math.isfinite(v) and v > 0]
    lo = 10 ** math.floor(math.log10(min(allv)))
    hi = 10 ** math.ceil(math.log10(max(allv) * 1.01))
    left, right = 110, 40
    pw = CHART_W_WIDE - left - right
    row_h = 64
    height = MARGIN_T + row_h * len(rows) + 30

    def px(v: float) -> float:
        return left + (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * pw

    out = [svg_open("chart-lengths", "request length distribution (tokens, log scale)",
                     CHART_W_WIDE, height)]
    decade = lo
    while decade <= hi * 1.0001:
        x = px(decade)
        out.append(f"<line class=\"grid\" x1=\"{x:.1f}\" x2=\"{x:.1f}\" y1=\"{MARGIN_T}\" "
                   f"y2=\"{height - 30}\"/><text class=\"xtick\" text-anchor=\"middle\" "
                   f"x=\"{x:.1f}\" y=\"{height - 14}\">{h(fmt_num(decade))}</text>")
        decade *= 10
    for r, (label, q, shape) in enumerate(rows):
        y = MARGIN_T + r * row_h + 28
        css = f"s{r}"
        out.append(f"<text class=\"rowlabel\" x=\"100\" y=\"{y + 4}\">{h(label)}</text>"
                   f"<text class=\"rowsub\" x=\"100\" y=\"{y + 18}\">{h(shape)}</text>")
        ok = [v for v in (q.p50, q.p90, q.p99) if math.isfinite(v) and v > 0]
        if len(ok) == 3:
            out.append(f"<line class=\"whisker {css}\" x1=\"{px(q.p90):.1f}\" "
                       f"x2=\"{px(q.p99):.1f}\" y1=\"{y}\" y2=\"{y}\"/>")
            out.append(f"<rect class=\"box {css}\" x=\"{px(q.p50):.1f}\" y=\"{y - 9}\" "
                       f"width=\"{max(1.0, px(q.p90) - px(q.p50)):.1f}\" height=\"18\">"
                       f"<title>{h(label)} p50–p90: {h(fmt_num(q.p50))}–{h(fmt_num(q.p90))}"
                       "</title></rect>")
        # labels alternate above and below the box so close quantiles do not overlap
        for k, (name, v) in enumerate((("p50", q.p50), ("p90", q.p90), ("p99", q.p99))):
            if math.isfinite(v) and v > 0:
                ty = y - 15 if k % 2 == 0 else y + 24
                out.append(f"<line class=\"qtick\" x1=\"{px(v):.1f}\" x2=\"{px(v):.1f}\" "
                           f"y1=\"{y - 12}\" y2=\"{y + 12}\"/><text class=\"qlabel\" "
                           f"x=\"{px(v):.1f}\" y=\"{ty}\">{name} {h(fmt_num(v))}</text>")
        if math.isfinite(q.mean) and q.mean > 0:
            x = px(q.mean)
            out.append(f"<path class=\"mean\" d=\"M{x:.1f},{y - 5}l5,5l-5,5l-5,-5z\">"
                       f"<title>{h(label)} mean {h(fmt_num(q.mean))}</title></path>")
    out.append("</svg></figure>")
    return "".join(out)


TRANSFER_LABEL_MAX_W: Final = 240  # of the 520 px chart; the bars keep 200 px


def transfer_chart(report: Report, view: ReportView) -> str:
    """KV transfer latency p50/p90 per instance (bars), where measured."""
    rows = [(i.name, i.kv_transfer_s) for i in report.instances
            if not isinstance(i.kv_transfer_s, Missing) and math.isfinite(i.kv_transfer_s.p90)]
    if not rows:
        return ""
    top = max(q.p90 for _, q in rows)
    ticks = nice_ticks(0.0, top)
    bar_h = 16
    height = MARGIN_T + (bar_h * 2 + 8) * len(rows) + 30
    label_w = label_area([n for n, _ in rows], [n in view.flagged for n, _ in rows],
                         TRANSFER_LABEL_MAX_W)
    pw = CHART_W - label_w - MARGIN_R - 60

    def px(v: float) -> float:
        return label_w + v / ticks[-1] * pw

    out = ["<section id=\"kv-transfer\"><h2>KV transfer latency</h2>",
           svg_open("chart-kv-transfer", "KV transfer time per instance (p50, p90)",
                     CHART_W, height)]
    for t in ticks:
        out.append(f"<line class=\"grid\" x1=\"{px(t):.1f}\" x2=\"{px(t):.1f}\" "
                   f"y1=\"{MARGIN_T}\" y2=\"{height - 30}\"/><text class=\"xtick\" "
                   f"text-anchor=\"middle\" x=\"{px(t):.1f}\" y=\"{height - 14}\">"
                   f"{h(fmt_seconds(t))}</text>")
    for r, (name, q) in enumerate(rows):
        y = MARGIN_T + r * (bar_h * 2 + 8)
        flagged = name in view.flagged
        out.append(row_label(name, flagged, label_w - 6, y + bar_h + 4))
        for k, (qn, v) in enumerate((("p50", q.p50), ("p90", q.p90))):
            if not math.isfinite(v):
                continue
            yy = y + k * bar_h
            out.append(f"<rect class=\"bar s{k}\" x=\"{label_w}\" y=\"{yy}\" "
                       f"width=\"{max(1.0, px(v) - label_w):.1f}\" height=\"{bar_h - 2}\">"
                       f"<title>{h(name)} {qn}: {h(fmt_seconds(v))}</title></rect>"
                       f"<text class=\"barlabel\" x=\"{px(v) + 4:.1f}\" y=\"{yy + 12}\">"
                       f"{qn} {h(fmt_seconds(v))}</text>")
    out.append("</svg></figure></section>")
    return "".join(out)


# Chart titles for the transfer-path series (analysis/series.py names them by column).
SERIES_TITLES: Final = {
    KV_TRANSFER_LATENCY: "KV transfer latency",
    RDMA_RETRANSMITS: "RDMA retransmits",
    RDMA_CONGESTION: "RDMA congestion notifications (CNP)",
    RDMA_TX_BANDWIDTH: "RDMA transmit bandwidth",
}
PER_SECOND: Final = ("1/s", "/s", "per_s")  # event rates: "per second" in the title


def _unit_fmt(unit: str) -> Callable[[float], str]:
    if unit in PER_SECOND:
        return fmt_num
    return lambda v: fmt_value(v, unit)


def series_title(name: str, unit: str, common: dict[str, str], varying: Sequence[str]) -> str:
    """"RDMA retransmits per node, per second", "KV transfer latency per instance, p90": the
    quantity in words, what the lines are, the statistic all lines share, the unit when the
    ticks do not carry it."""
    what = SERIES_TITLES.get(name) or name.replace("_per_s", "").replace("_", " ").strip()
    parts = [what + (f" per {' and '.join(varying)}" if varying else "")]
    parts += [v for k, v in sorted(common.items()) if k == "stat"]
    parts += [f"{k} {v}" for k, v in sorted(common.items()) if k != "stat"]
    if unit in PER_SECOND:
        parts.append("per second")
    return ", ".join(parts)


def series_lines(members: Sequence[Any]) -> tuple[list[Line], dict[str, str], list[str]]:
    """One line per series, labelled by the label values that differ between them (a single
    varying label by its value alone); the labels all share, for the title."""
    label_sets = [dict(m.labels) if m.labels else {} for m in members]
    keys = sorted({k for ls in label_sets for k in ls})
    common = {k: label_sets[0][k] for k in keys
              if all(k in ls and ls[k] == label_sets[0].get(k) for ls in label_sets)}
    if len(members) == 1:
        common = {}
    varying = [k for k in keys if k not in common]
    lines = []
    for j, (item, ls) in enumerate(zip(members, label_sets, strict=True)):
        parts = [ls[k] if len(varying) == 1 else f"{k}={ls[k]}" for k in varying if k in ls]
        ts: TimeSeries = item.series
        lines.append(Line(", ".join(parts) or str(item.name), ts.ts, ts.values, f"s{j % 6}"))
    return lines, common, varying


def extra_series(report: Report, view: ReportView) -> str:
    """Transfer-path series (KV transfer latency per instance, RDMA rates per node) from
    ``report.series``, one chart per series name, titled in words."""
    if not report.series:
        return ""
    groups: dict[str, list[Any]] = {}
    for item in report.series:
        groups.setdefault(str(item.name), []).append(item)
    out = ["<section id=\"series\"><h2>Network and transfer over time</h2>"
           "<div class=\"multiples\">"]
    for k, (name, members) in enumerate(groups.items()):
        lines, common, varying = series_lines(members)
        unit = str(members[0].unit or members[0].series.unit)
        out.append(line_chart(f"chart-series-{k}", series_title(name, unit, common, varying),
                              lines, x_fmt=_x_fmt(view), y_fmt=_unit_fmt(unit)))
    out.append("</div></section>")
    return "".join(out)
