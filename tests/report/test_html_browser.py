"""The HTML report in a real headless Chromium: loads without console errors or network
requests, the charts are there, no text is clipped or overlaps another (measured in the page,
``browser.TEXT_LAYOUT_JS``), and a screenshot lands in test-artifacts/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pdprobe.report.base import RenderOptions
from pdprobe.report.html import render
from tests.report import factory as F
from tests.report.browser import TEXT_LAYOUT_JS, Chromium, find_chromium

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# {svg id: [the text each matching element draws itself (not its <title> tooltip)]}
_OWN_TEXTS = ("Object.fromEntries(Array.from(document.querySelectorAll('svg[id]')).map(s => "
              "[s.id, Array.from(s.querySelectorAll('%s')).map(t => Array.from(t.childNodes)"
              ".filter(n => n.nodeType === 3).map(n => n.data).join('').trim())]))")
QUERIES = {
    "svg_ids": "Array.from(document.querySelectorAll('svg[id]')).map(s => s.id)",
    "scripts": "document.querySelectorAll('script').length",
    "verdict": "document.getElementById('verdict').innerText",
    "heat_cells": "document.querySelectorAll('svg.heatmap rect[fill]').length",
    "svg_sizes": "Array.from(document.querySelectorAll('svg[id]'))"
                 ".map(s => [s.id, s.getBoundingClientRect().width, "
                 "s.getBoundingClientRect().height])",
    "body_text": "document.body.innerText",
    "page_width": "document.documentElement.scrollWidth",
    "span_labels": "Array.from(document.querySelectorAll('#chart-ratio text.span'))"
                   ".map(t => [t.textContent, t.getBBox().width])",
    "band_rows": "document.querySelectorAll('#table-band tbody tr').length",
    "windows_rows": "document.querySelectorAll('details.windows #table-windows tbody tr').length",
    "windows_open": "document.querySelector('details.windows')?.open ?? null",
    "text_problems": TEXT_LAYOUT_JS,
    "chart_texts": _OWN_TEXTS % "text",
    "legends": _OWN_TEXTS % "text.legend",
    "heat_labels": _OWN_TEXTS % "text.rowlabel",
    "input_rows": "Array.from(document.querySelectorAll('#table-inputs tbody th'))"
                  ".map(t => t.innerText)",
}


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("PDPROBE_REQUIRE_BROWSER") == "1":
            pytest.fail("PDPROBE_REQUIRE_BROWSER=1 but no chromium was found")
        pytest.skip("chromium not installed")
    with Chromium(binary) as browser:
        yield browser


def _open(chromium: Chromium, name: str, html: str, tmp_path: Path) -> dict:
    path = tmp_path / f"{name}.html"
    path.write_text(html, encoding="utf-8")
    result = chromium.open(path, QUERIES)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"report-{name}.png").write_bytes(result.screenshot)
    assert result.screenshot.startswith(b"\x89PNG\r\n\x1a\n") and len(result.screenshot) > 10_000
    assert result.errors == [], result.errors
    assert result.requests == [path.resolve().as_uri()], result.requests  # nothing fetched
    assert result.values["text_problems"] == [], "\n".join(result.values["text_problems"])
    return result.values


@pytest.mark.parametrize("name", ["prefill_bound", "routing_skew", "metrics_only"])
def test_loads_cleanly_with_charts(chromium: Chromium, name: str, tmp_path: Path) -> None:
    report = F.SCENARIOS[name]()
    values = _open(chromium, name, render(report, RenderOptions(verbose=True)), tmp_path)
    assert values["scripts"] == 0
    assert {"heat-prefill", "heat-decode", "chart-lengths"} <= set(values["svg_ids"])
    assert values["heat_cells"] > 100
    for svg_id, width, height in values["svg_sizes"]:
        assert width > 200 and height > 50, (svg_id, width, height)  # laid out, not collapsed
    assert values["page_width"] <= 1280  # no horizontal scrolling at a laptop width
    assert values["verdict"].startswith(report.status.upper())


def test_capacity_charts_render(chromium: Chromium, tmp_path: Path) -> None:
    values = _open(chromium, "capacity", render(F.prefill_bound(), RenderOptions()), tmp_path)
    assert {"chart-rates", "chart-ratio", "chart-kv-transfer"} <= set(values["svg_ids"])
    # recommended counts drawn over their windows (and deployed where it differs)
    assert [text for text, _ in values["span_labels"]] == ["2P:4D", "3P:4D", "4P:4D", "2P:4D"]
    assert all(width > 10 for _, width in values["span_labels"])
    assert values["band_rows"] == 6  # 5 what-ifs and the recommendation
    assert values["windows_rows"] == 6 and values["windows_open"] is False  # folded


def test_malicious_names_stay_text(chromium: Chromium, tmp_path: Path) -> None:
    values = _open(chromium, "malicious", render(F.malicious(), RenderOptions(verbose=True)),
                   tmp_path)
    assert values["scripts"] == 0
    assert "<script>alert(1)</script>" in values["body_text"]
    assert 'x"><img src=x onerror=alert(2)>.jsonl' in values["body_text"]


def test_transfer_path_charts_read_whole(chromium: Chromium, tmp_path: Path) -> None:
    """Pod names sharing a 40-character prefix, four latency series and bytes/s in the
    hundreds of millions: every label, legend entry and row name is drawn whole (the layout
    check in ``_open``), legends name every series, titles are words, not column names."""
    report = F.transfer_path()
    values = _open(chromium, "transfer_path", render(report, RenderOptions(verbose=True)),
                   tmp_path)
    texts = values["chart_texts"]
    kv = texts["chart-series-0"]
    assert not any("kv_transfer_latency_s" in t or "stat=" in t for t in kv), kv
    for suffix in ("x2kqp", "9wz7m", "r4tnb", "hb6vd"):  # every series named, distinguishably
        assert any(t.endswith(suffix) for t in values["legends"]["chart-series-0"]), suffix
    assert len(set(values["heat_labels"]["heat-decode"])) == 4  # distinct row labels
    assert len(set(values["input_rows"])) == 3
