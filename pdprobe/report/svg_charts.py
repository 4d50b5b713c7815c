"""Hand-built inline SVG charts for the HTML report: line charts and heat maps.

Every label is laid out from its estimated width (``text_px``), never at a fixed offset: the
y-axis label area is as wide as the longest tick label, legends wrap onto as many rows as their
entries need (the chart grows taller), and names too long for their slot lose their middle
(``short_label``), so the part that tells pods apart (the suffix) stays. The browser test
measures the drawn text boxes against the chart and each other.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Final

from pdprobe.units import NA

CHART_W: Final = 520  # two line charts side by side in the 1072 px content column
CHART_W_WIDE: Final = 1060
CHART_H: Final = 240
MARGIN_L_MIN: Final = 40
MARGIN_R: Final = 16
MARGIN_T: Final = 34  # title, then the first legend row (heat maps: the panel titles)
LEGEND_CLEAR: Final = 10  # between the last legend row and the top tick label
MARGIN_B: Final = 34
TICK_GAP: Final = 6  # px between a tick label and the plot area
LEGEND_ROW_H: Final = 16
LOG_MAX_TICKS: Final = 7  # labels 13 px tall stay apart on a 170 px axis
LEGEND_SWATCH: Final = 14  # swatch and the gap after it
LEGEND_GAP: Final = 16  # between legend entries
HEAT_LABEL_W: Final = 180  # row-name area: at least this, up to ROW_LABEL_MAX_W for long names
ROW_LABEL_MAX_W: Final = 320  # a 1060 px heat map keeps 3 panels of ~240 px
HEAT_ROW_H: Final = 18
HEAT_MAX_COLS: Final = 120  # a wider grid is down-sampled; cells below ~4 px are unreadable
# Advance width of one character as a fraction of the font size: DejaVu Sans (headless
# Chromium's fallback for system-ui on Linux) averages 0.53-0.64 em over names and digits
# (measured in the browser test: 0.55 for host names, 0.63 for pod suffixes with m and w);
# 0.66 errs on the wide side so an estimate never under-sizes a label area. Symbols (⚑, …)
# are wider.
CHAR_EM: Final = 0.66
SYMBOL_EM: Final = 1.4
FONT_PX: Final = 11.0  # svg text (report.css)
TITLE_PX: Final = 12.5  # .ctitle, bold: ~10% wider per character
# Sequential colour scale (viridis stops): perceptually even, readable by colour-blind people.
HEAT_STOPS: Final = ((0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)),
                     (0.75, (94, 201, 98)), (1.0, (253, 231, 37)))


def h(text: object) -> str:
    """Escape for HTML text and attribute values (quotes too)."""
    return escape(str(text), quote=True)


def text_px(text: str, font_px: float = FONT_PX) -> float:
    """Estimated drawn width of ``text`` (upper bound for the report's fonts)."""
    symbols = sum(1 for c in text if ord(c) >= 0x2000)
    return ((len(text) - symbols) * CHAR_EM + symbols * SYMBOL_EM) * font_px


def short_label(text: str, width_px: float, font_px: float = FONT_PX) -> str:
    """``text`` if it fits ``width_px``, else its start and end around "…" (the end keeps
    more: pod and host names differ in their suffix)."""
    if text_px(text, font_px) <= width_px:
        return text
    chars = int((width_px - SYMBOL_EM * font_px) // (font_px * CHAR_EM)) + 1
    if chars < 4:
        return text[:max(chars - 1, 0)] + "…"
    tail = (chars - 1) * 3 // 5
    return text[:chars - 1 - tail] + "…" + text[len(text) - tail:]


def nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5, 5 x 10^k steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t < hi + step * 0.999:
        ticks.append(round(t, 12))
        t += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2, 5 x 10^k ticks just covering [lo, hi] (lo, hi > 0); decades only when that
    would print more than LOG_MAX_TICKS labels."""
    d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if d1 <= d0:
        d1 = d0 + 1
    for mults in ((1, 2, 5), (1,)):
        ticks = [m * 10.0 ** d for d in range(d0, d1) for m in mults] + [10.0 ** d1]
        first = max([t for t in ticks if t <= lo], default=ticks[0])
        last = min([t for t in ticks if t >= hi], default=ticks[-1])
        ticks = [t for t in ticks if first <= t <= last]
        if len(ticks) <= LOG_MAX_TICKS:
            break
    return ticks


@dataclass(frozen=True)
class Line:
    """One line of a chart: its label, points and CSS series class."""
    label: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    css: str  # series class: s0, s1, ...
    step: bool = False  # draw as a step (value holds until the next x)
    tips: tuple[str, ...] | None = None  # per-point tooltip values instead of the formatted y


@dataclass(frozen=True)
class Span:
    """A text label over the x range [x0, x1] at height y (e.g. "3P:1D" over its windows)."""

    x0: float
    x1: float
    y: float
    text: str
    css: str


def _path(points: Sequence[tuple[float, float]]) -> str:
    """SVG path data; a NaN y breaks the line instead of drawing it to zero."""
    parts = []
    pen_down = False
    for x, y in points:
        if not math.isfinite(y):
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{x:.1f},{y:.1f}")
        pen_down = True
    return "".join(parts)


def svg_open(cid: str, title: str, width: int | float, height: int | float,
             cls: str = "chart") -> str:
    """The figure and svg element with its title drawn in the top-left corner (shortened to
    the chart's width; the full title stays in the tooltip)."""
    shown = short_label(title, width - 8, TITLE_PX * 1.1)
    return (f"<figure class=\"{cls}-figure\"><svg id=\"{h(cid)}\" class=\"{cls}\" role=\"img\" "
            f"viewBox=\"0 0 {width:g} {height:g}\" width=\"{width:g}\" height=\"{height:g}\" "
            f"preserveAspectRatio=\"xMinYMin meet\" xmlns=\"http://www.w3.org/2000/svg\">"
            f"<title>{h(title)}</title>"
            f"<text class=\"ctitle\" x=\"4\" y=\"16\">{h(shown)}</text>")


class _Scale:
    """A y scale over round ticks: linear, or logarithmic (values <= 0 are not drawn)."""

    def __init__(self, values: Sequence[float], floor: float | None, top: float,
                 height: float, log: bool = False) -> None:
        self.log = log
        if log:
            pos = [v for v in values if v > 0] or [1.0]
            self.ticks = log_ticks(min(pos), max(pos))
        else:
            lo = min(values) if floor is None else min(floor, min(values))
            self.ticks = nice_ticks(lo, max(values))
        self.lo, self.hi = self._t(self.ticks[0]), self._t(self.ticks[-1])
        self.top, self.height = top, height

    def _t(self, y: float) -> float:
        if not self.log:
            return y
        return math.log10(y) if y > 0 else float("nan")

    def __call__(self, y: float) -> float:
        return self.top + self.height - (self._t(y) - self.lo) / (self.hi - self.lo) * self.height


def _legend_rows(labels: Sequence[str], width: float) -> list[list[tuple[float, str]]]:
    """Legend entries (x offset, text) packed into rows no wider than ``width``."""
    rows: list[list[tuple[float, str]]] = [[]]
    x = 0.0
    for label in labels:
        text = short_label(label, width - LEGEND_SWATCH)
        w = LEGEND_SWATCH + text_px(text)
        if rows[-1] and x + w > width:
            rows.append([])
            x = 0.0
        rows[-1].append((x, text))
        x += w + LEGEND_GAP
    return rows


def line_chart(cid: str, title: str, lines: Sequence[Line], *, x_fmt: Callable[[float], str],
               y_fmt: Callable[[float], str], y_floor: float | None = 0.0, log_y: bool = False,
               spans: Sequence[Span] = ()) -> str:
    """Lines over time on one y axis, with ticks, a legend naming every line and per-point
    tooltips. The y labels' area is as wide as the longest label; the legend wraps (the chart
    grows). ``spans`` are labels centred over their x range, dropped when too narrow."""
    xs = [x for ln in lines for x in ln.xs]
    ys = [y for ln in lines for y in ln.ys if math.isfinite(y) and (y > 0 or not log_y)]
    if not xs or not ys:
        return ""
    x0, x1 = min(xs), max(xs)
    if x1 <= x0:
        x1 = x0 + 1.0
    legend = _legend_rows([ln.label for ln in lines], CHART_W - 12)
    extra = LEGEND_ROW_H * (len(legend) - 1)
    top, height = MARGIN_T + LEGEND_CLEAR + extra, CHART_H + LEGEND_CLEAR + extra
    ph = height - top - MARGIN_B
    scale = _Scale(ys, y_floor, top, ph, log=log_y)
    tick_labels = [y_fmt(t) for t in scale.ticks]
    margin_l = max(MARGIN_L_MIN, math.ceil(max(text_px(s) for s in tick_labels)) + TICK_GAP + 4)
    # the last x label is anchored at its end: it needs no right margin beyond the default
    pw = CHART_W - margin_l - MARGIN_R

    def px(x: float) -> float:
        return margin_l + (x - x0) / (x1 - x0) * pw

    out = [svg_open(cid, title, CHART_W, height)]
    for t, label in zip(scale.ticks, tick_labels, strict=True):
        out.append(f"<line class=\"grid\" x1=\"{margin_l}\" x2=\"{CHART_W - MARGIN_R}\" "
                   f"y1=\"{scale(t):.1f}\" y2=\"{scale(t):.1f}\"/>"
                   f"<text class=\"ytick\" x=\"{margin_l - TICK_GAP}\" y=\"{scale(t) + 4:.1f}\">"
                   f"{h(label)}</text>")
    for frac in (0.0, 0.5, 1.0):
        x = x0 + (x1 - x0) * frac
        anchor = ("start", "middle", "end")[int(frac * 2)]
        out.append(f"<text class=\"xtick\" text-anchor=\"{anchor}\" x=\"{px(x):.1f}\" "
                   f"y=\"{height - MARGIN_B + 18}\">{h(x_fmt(x))}</text>")
    out.append(f"<line class=\"axis\" x1=\"{margin_l}\" x2=\"{CHART_W - MARGIN_R}\" "
               f"y1=\"{top + ph}\" y2=\"{top + ph}\"/>")
    for ln in lines:
        pts: list[tuple[float, float]] = []
        for i, (x, y) in enumerate(zip(ln.xs, ln.ys, strict=True)):
            yy = scale(y) if math.isfinite(y) and (y > 0 or not log_y) else float("nan")
            pts.append((px(x), yy))
            if ln.step and i + 1 < len(ln.xs):
                pts.append((px(ln.xs[i + 1]), yy))
        out.append(f"<path class=\"line {h(ln.css)}\" d=\"{_path(pts)}\"/>")
        last = len(ln.xs) - 1
        for i, (x, y) in enumerate(zip(ln.xs, ln.ys, strict=True)):
            if math.isfinite(y) and (y > 0 or not log_y) and not (ln.step and i == last and i):
                tip = ln.tips[i] if ln.tips is not None else y_fmt(y)
                out.append(f"<circle class=\"pt {h(ln.css)}\" cx=\"{px(x):.1f}\" "
                           f"cy=\"{scale(y):.1f}\" r=\"2.5\"><title>{h(ln.label)} at "
                           f"{h(x_fmt(x))}: {h(tip)}</title></circle>")
    for sp in spans:
        if not math.isfinite(sp.y) or (px(sp.x1) - px(sp.x0)) < text_px(sp.text) + 4:
            continue  # a label wider than its span would collide with its neighbours
        out.append(f"<text class=\"span {h(sp.css)}\" text-anchor=\"middle\" "
                   f"x=\"{(px(sp.x0) + px(sp.x1)) / 2:.1f}\" y=\"{scale(sp.y) - 5:.1f}\">"
                   f"{h(sp.text)}</text>")
    entries = iter(lines)
    for r, row in enumerate(legend):
        y = MARGIN_T - 3 + LEGEND_ROW_H * r
        for lx, text in row:
            ln = next(entries)
            out.append(f"<rect class=\"swatch {h(ln.css)}\" x=\"{8 + lx:.1f}\" y=\"{y - 9}\" "
                       f"width=\"10\" height=\"10\"/><text class=\"legend\" "
                       f"x=\"{8 + lx + LEGEND_SWATCH:.1f}\" y=\"{y}\"><title>{h(ln.label)}"
                       f"</title>{h(text)}</text>")
    out.append("</svg></figure>")
    return "".join(out)


def heat_colour(frac: float) -> str:
    """Viridis colour for a 0-1 value."""
    frac = min(1.0, max(0.0, frac))
    for (a, ca), (b, cb) in itertools.pairwise(HEAT_STOPS):
        if frac <= b:
            t = (frac - a) / (b - a)
            rgb = tuple(round(x + (y - x) * t) for x, y in zip(ca, cb, strict=True))
            return f"#{rgb[0]:02x}{rgb[1]:02x}{rgb[2]:02x}"
    return "#fde725"


@dataclass(frozen=True)
class HeatPanel:
    """One metric of a heat map: values per row on a shared time grid."""

    key: str  # css/id suffix: "queue", "ttft", "kv-usage"
    label: str
    ts: tuple[float, ...]
    step_s: float
    rows: tuple[tuple[float, ...], ...]  # one per heat-map row, aligned with ``names``
    v_fmt: Callable[[float], str]


def _downsample(mat: Any, ts: Sequence[float], step_s: float) -> tuple[Any, list[float], float]:
    """Columns down-sampled by bin mean to at most HEAT_MAX_COLS."""
    import numpy as np

    n = mat.shape[1]
    cols = min(n, HEAT_MAX_COLS)
    if cols == n:
        return mat, list(ts), step_s
    idx = (np.arange(n) * cols) // n
    finite = np.isfinite(mat)
    sums = np.zeros((mat.shape[0], cols))
    counts = np.zeros((mat.shape[0], cols))
    np.add.at(sums.T, idx, np.where(finite, mat, 0.0).T)
    np.add.at(counts.T, idx, finite.T.astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    first = np.searchsorted(idx, np.arange(cols))
    return out, [float(ts[int(j)]) for j in first], step_s * n / cols


def label_area(names: Sequence[str], flagged: Sequence[bool], max_w: float = ROW_LABEL_MAX_W
               ) -> float:
    """Width of a row-name area that shows every name whole (with its ⚑) when it can."""
    need = max((text_px(n + (" ⚑" if f else "")) for n, f in zip(names, flagged, strict=True)),
               default=0.0)
    return float(min(max_w, max(HEAT_LABEL_W, math.ceil(need) + 14)))


def row_label(name: str, flagged: bool, x: float, y: float) -> str:
    """A row name ending at ``x`` (shortened in the middle to fit), the full
    name as its tooltip; a flagged row is marked ⚑."""
    mark = " ⚑" if flagged else ""
    short = short_label(name, x - 4 - text_px(mark))
    cls = "rowlabel flag" if flagged else "rowlabel"
    return (f"<text class=\"{cls}\" x=\"{x:g}\" y=\"{y:g}\"><title>{h(name)}</title>"
            f"{h(short)}{mark}</text>")


def heatmap(cid: str, title: str, names: Sequence[str], flagged: Sequence[bool],
            panels: Sequence[HeatPanel], *, x_fmt: Callable[[float], str]) -> str:
    """Instances (rows) x time (columns), one panel per metric side by side.

    Each panel has one colour scale from 0 to the highest value of any row, so an instance
    that queues more or runs slower than its peers is the bright row. Flagged rows (named by a
    finding) are outlined and their labels marked.
    """
    import numpy as np

    if not names or not panels:
        return ""
    gap = 14.0
    label_w = label_area(names, flagged)
    panel_w = (CHART_W_WIDE - label_w - gap * (len(panels) - 1)) / len(panels)
    body_h = HEAT_ROW_H * len(names)
    height = MARGIN_T + 16 + body_h + 44
    out = [svg_open(cid, title, CHART_W_WIDE, height, "heatmap")]
    top = MARGIN_T + 16
    for r, (name, flag) in enumerate(zip(names, flagged, strict=True)):
        out.append(row_label(name, flag, label_w - 8, top + r * HEAT_ROW_H + 13))
    for k, panel in enumerate(panels):
        x0 = label_w + k * (panel_w + gap)
        mat, col_ts, col_step = _downsample(np.asarray(panel.rows, dtype="float64"), panel.ts,
                                            panel.step_s)
        cols = mat.shape[1]
        cw = panel_w / cols
        finite_vals = mat[np.isfinite(mat)]
        peak = float(finite_vals.max()) if finite_vals.size else 0.0
        scale = peak if peak > 0 else 1.0
        out.append(f"<g class=\"panel panel-{h(panel.key)}\">"
                   f"<text class=\"ptitle\" x=\"{x0:.1f}\" y=\"{MARGIN_T + 8}\">"
                   f"{h(panel.label)}</text>")
        for r, name in enumerate(names):
            y = top + r * HEAT_ROW_H
            for c in range(cols):
                v = float(mat[r, c])
                fill = f"fill=\"{heat_colour(v / scale)}\"" if math.isfinite(v) else \
                    "class=\"nan\""
                tip = f"{name}, {panel.label} at {x_fmt(col_ts[c])}: " + \
                    (panel.v_fmt(v) if math.isfinite(v) else NA)
                out.append(f"<rect {fill} x=\"{x0 + c * cw:.2f}\" y=\"{y}\" "
                           f"width=\"{cw + 0.3:.2f}\" height=\"{HEAT_ROW_H - 1}\">"
                           f"<title>{h(tip)}</title></rect>")
            if flagged[r]:
                out.append(f"<rect class=\"flagbox\" x=\"{x0 - 1:.1f}\" y=\"{y - 1}\" "
                           f"width=\"{panel_w + 2:.1f}\" height=\"{HEAT_ROW_H + 1}\"/>")
        base = top + body_h
        out.append(f"<text class=\"xtick\" text-anchor=\"start\" x=\"{x0:.1f}\" "
                   f"y=\"{base + 13}\">{h(x_fmt(col_ts[0]))}</text>"
                   f"<text class=\"xtick\" text-anchor=\"end\" x=\"{x0 + panel_w:.1f}\" "
                   f"y=\"{base + 13}\">{h(x_fmt(col_ts[-1] + col_step))}</text>")
        kx = x0 + 14
        for j in range(5):
            out.append(f"<rect fill=\"{heat_colour(j / 4)}\" x=\"{kx + 18 * j:.1f}\" "
                       f"y=\"{base + 22}\" width=\"16\" height=\"10\"/>")
        out.append(f"<text class=\"xtick\" text-anchor=\"end\" x=\"{kx - 4:.1f}\" "
                   f"y=\"{base + 31}\">0</text><text class=\"xtick\" x=\"{kx + 94:.1f}\" "
                   f"y=\"{base + 31}\">{h(panel.v_fmt(peak))}</text></g>")
    out.append("</svg></figure>")
    return "".join(out)
