"""HTML: one self-contained file, escaped data, the charts each scenario calls for."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

import pytest

from pdprobe.analysis.base import LabeledSeries, TimeSeries
from pdprobe.report.base import RenderOptions
from pdprobe.report.html import render
from pdprobe.report.svg_charts import heat_colour, nice_ticks
from pdprobe.values import Missing
from tests.report import factory as F

ALL = {**F.SCENARIOS, "unknown": F.unknown, "malicious": F.malicious}
VOID = {"meta", "br", "img", "hr", "input", "link", "col", "wbr", "source", "area", "base"}
SVG_SELF_CLOSING = {"line", "rect", "circle", "path", "polyline", "polygon", "ellipse", "stop"}

CHARTS = {
    "healthy": {"chart-rates", "chart-ratio", "heat-prefill", "heat-decode", "chart-lengths",
                "chart-kv-transfer"},
    "prefill_bound": {"chart-rates", "chart-ratio", "heat-prefill", "heat-decode",
                      "chart-lengths", "chart-kv-transfer"},
    "routing_skew": {"heat-prefill", "heat-decode", "chart-lengths", "chart-kv-transfer"},
    "metrics_only": {"heat-prefill", "heat-decode", "chart-lengths"},
}


class _Tree(HTMLParser):
    """Checks tags balance and collects element ids, classes, text and attribute values."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.ids: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.fills: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            self.attrs.append((k, v or ""))
            if k == "id" and v:
                self.ids.append(v)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            self.attrs.append((k, v or ""))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> _Tree:
    tree = _Tree()
    tree.feed(html)
    tree.close()
    assert tree.stack == [], f"unclosed: {tree.stack}"
    return tree


@pytest.mark.parametrize("name", sorted(ALL))
def test_well_formed_and_self_contained(name: str) -> None:
    html = render(ALL[name](), RenderOptions())
    tree = parse(html)
    assert "script" not in tree.tags
    assert not {"link", "img", "iframe", "object", "embed"} & set(tree.tags)
    for key, value in tree.attrs:
        if key in ("src", "href", "xlink:href", "action"):
            pytest.fail(f"{key}={value!r} would fetch")
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    allowed = {"http://www.w3.org/2000/svg"}  # an XML namespace name, never fetched
    data_urls = {u for u in urls if u.startswith("http://prometheus.monitoring")}  # input name
    assert urls - allowed - data_urls == set()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_expected_charts(name: str) -> None:
    tree = parse(render(F.SCENARIOS[name](), RenderOptions()))
    svg_ids = set(tree.ids)
    assert CHARTS[name] <= svg_ids
    assert "verdict" in svg_ids and "findings" in svg_ids


def test_capacity_missing_shows_pending() -> None:
    html = render(F.metrics_only(), RenderOptions())
    assert "ratio: pending — needs per-request lengths or a --profile" in html
    assert 'id="chart-ratio"' not in html


def test_malicious_strings_are_escaped() -> None:
    html = render(F.malicious(), RenderOptions(verbose=True))
    tree = parse(html)
    assert "script" not in tree.tags and "img" not in tree.tags
    assert "&lt;b&gt;bold&lt;/b&gt; &amp;" in html
    text = "".join(tree.text)
    assert "<script>alert(1)</script>" in text  # shown as text
    assert "</style><script>alert(3)</script>" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<title>pdprobe: WARNING  routing-skew: The router sends 41% of decode traffic to " \
           "&lt;script&gt;" in html


def test_hot_instance_stands_out_in_the_heat_map() -> None:
    html = render(F.routing_skew(), RenderOptions())
    heat = html.split('id="heat-decode"', 1)[1].split("</svg>", 1)[0]
    panel = heat.split('class="panel panel-queue"', 1)[1].split("</g>", 1)[0]
    fills = re.findall(r'<rect fill="(#[0-9a-f]{6})" x="[\d.]+" y="(\d+)" width="[\d.]+" '
                       r'height="17"', panel)  # grid cells, not the colour key
    rows: dict[str, list[str]] = {}
    for fill, y in fills:
        rows.setdefault(y, []).append(fill)
    assert len(rows) == 4
    brightness = {y: sum(int(c[1:3], 16) + int(c[3:5], 16) for c in cs) / len(cs)
                  for y, cs in rows.items()}
    ys = sorted(brightness, key=int)
    hot = brightness[ys[3]]
    assert all(hot > 2 * brightness[y] for y in ys[:3])
    assert heat.count('class="flagbox"') == 3  # outlined in each of the three panels
    assert 'class="rowlabel flag"' in heat and "10.1.0.24:8200 ⚑" in heat


def test_heat_colour_and_ticks() -> None:
    assert heat_colour(0.0) == "#440154"
    assert heat_colour(1.0) == "#fde725"
    assert heat_colour(0.5) == "#21918c"
    assert heat_colour(-1) == "#440154" and heat_colour(7) == "#fde725"
    assert nice_ticks(0, 44.6) == [0, 20, 40, 60]
    assert nice_ticks(0, 1.08) == [0, 0.5, 1.0, 1.5]
    assert nice_ticks(0, 0) == [0, 0.25, 0.5, 0.75, 1.0]


def test_rates_chart_puts_both_demands_on_one_axis() -> None:
    """Prefill and decode demand share one (log) axis: no second axis whose scale makes the
    lines cross where the quantities do not."""
    html = render(F.prefill_bound(), RenderOptions())
    chart = html.split('id="chart-rates"', 1)[1].split("</svg>", 1)[0]
    assert "ytick-r" not in chart and "right axis" not in chart
    assert "decode: output tokens/s at +0s: 1,050" in chart
    assert "prefill: uncached prompt tokens/s at +0s: 33,000" in chart
    ticks = re.findall(r'<text class="ytick"[^>]*>([^<]+)</text>', chart)
    assert ticks == ["1,000", "2,000", "5,000", "10,000", "20,000", "50,000"]


def test_quiet_html_is_just_the_verdict() -> None:
    html = render(F.prefill_bound(), RenderOptions(quiet=True))
    tree = parse(html)
    assert "svg" not in tree.tags
    assert 'id="verdict"' in html


def test_extra_series_are_charted_when_the_report_has_them() -> None:
    base = F.prefill_bound()
    ts = TimeSeries(ts=(0.0, 60.0, 120.0), values=(0.0, 12.0, float("nan")), unit="1/s",
                    step_s=60.0)
    extra = (LabeledSeries("RDMA retransmits", "1/s", (("node", "node-0"), ("device", "mlx5_0")), ts),
             LabeledSeries("RDMA retransmits", "1/s", (("node", "<b>node-1</b>"),), ts))
    report = dataclasses.replace(base, series=extra)
    html = render(report, RenderOptions())
    tree = parse(html)
    assert "chart-series-0" in tree.ids
    assert "device=mlx5_0, node=node-0" in html  # the labels that tell the lines apart
    assert "node=&lt;b&gt;node-1&lt;/b&gt;" in html
    assert "RDMA retransmits per device and node, per second" in html
    assert render(base, RenderOptions()).count("chart-series") == 0


def test_ratio_chart_shows_the_recommended_counts() -> None:
    html = render(F.prefill_bound(), RenderOptions())
    chart = html.split('id="chart-ratio"', 1)[1].split("</svg>", 1)[0]
    spans = re.findall(r'<text class="span (s\d)" text-anchor="middle" x="([\d.]+)" '
                       r'y="[\d.]+">([^<]+)</text>', chart)
    # one label per run of equal counts: recommended 2P:4D, 3P:4D, 4P:4D; deployed 2P:4D where
    # it differs from the recommendation (not over the first window, where the lines coincide)
    assert [(css, text) for css, _, text in spans] == [
        ("s2", "2P:4D"), ("s2", "3P:4D"), ("s2", "4P:4D"), ("s1", "2P:4D")]
    xs = [float(x) for _, x, _ in spans]
    assert xs[0] < xs[1] < xs[2] and xs[1] < xs[3] < xs[2]  # centred over their windows
    assert "recommended at +10m00s: 3P:4D (0.75)</title>" in chart
    assert "deployed at +20m00s: 2P:4D (0.50)</title>" in chart


def test_ratio_chart_drops_labels_too_narrow_for_their_window() -> None:
    base = F.prefill_bound()
    cap = base.capacity
    assert not isinstance(cap, Missing)
    # 120 windows of 30 s alternating between two recommended counts: no room for their
    # labels; the deployed 2P:4D holds throughout and keeps its one label
    wins = tuple(dataclasses.replace(cap.windows[0], start_ts=30.0 * k, end_ts=30.0 * (k + 1),
                                     recommended_prefill=2 + k % 2) for k in range(120))
    report = dataclasses.replace(base, capacity=dataclasses.replace(cap, windows=wins))
    chart = render(report, RenderOptions()).split('id="chart-ratio"', 1)[1].split("</svg>", 1)[0]
    assert 'class="span s2"' not in chart
    assert chart.count('class="span s1"') == 1
    assert chart.count('<circle class="pt s2"') == 120  # the counts stay in the tooltips


def test_capacity_band_and_windows_tables() -> None:
    html = render(F.prefill_bound(), RenderOptions())
    parse(html)
    band = html.split('<table id="table-band">', 1)[1].split("</table>", 1)[0]
    heads = re.findall(r"<th(?: class=\"num\")?>([^<]*)</th>", band.split("</thead>")[0])
    assert heads == ["what-if", "P", "D", "ratio", "binding"]
    assert ('<th>p90 lengths (prompt 27,367, output 597)</th><td class="num">9</td>'
            '<td class="num">7</td><td class="num">1.21</td><td>prefill</td>') in band
    section = html.split('<section id="capacity">', 1)[1].split("</section>", 1)[0]
    assert ('<p class="windows-summary">deployed ≠ recommended in 5 of 6 windows of 10m00s; '
            'latest +50m00s needs 4P:4D, has 2P:4D</p><details class="windows"><summary>'
            'per-window table (6 windows)</summary><table id="table-windows">') in section
    windows = section.split('<table id="table-windows">', 1)[1].split("</details>", 1)[0]
    assert windows.count('<td class="num flag">2P:4D</td>') == 5
    assert windows.count("<tr>") == 7  # the header and six windows
    assert "⚑ deployed ≠ recommended" in windows
    assert ("mean-based planner</dt><dd>would deploy 3P:4D; prefill work +17.0%, decode context "
            "+4.0% vs f(mean)</dd>") in section
