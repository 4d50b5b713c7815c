"""Markdown: golden files, escaping of data strings, well-formed GFM tables."""

from __future__ import annotations

import re

import pytest

from pdprobe.report.base import RenderOptions
from pdprobe.report.markdown import esc, render
from pdprobe.report.verdict import verdict_line
from tests.report import factory as F
from tests.report.golden import check_golden

ALL = {**F.SCENARIOS, "unknown": F.unknown, "malicious": F.malicious}


@pytest.mark.parametrize("name", sorted(F.SCENARIOS))
def test_golden(name: str) -> None:
    check_golden(f"{name}.md", render(F.SCENARIOS[name](), RenderOptions(width=100)))


def test_golden_verbose() -> None:
    check_golden("routing_skew.verbose.md",
                 render(F.routing_skew(), RenderOptions(width=100, verbose=True)))


def test_escape() -> None:
    assert esc("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert esc("a|b") == "a\\|b"
    assert esc("*bold* `code` [link](x) ~~s~~") == "\\*bold\\* \\`code\\` \\[link\\](x) \\~\\~s\\~\\~"
    assert esc("engine_type _em_") == "engine_type \\_em\\_"
    assert esc("two\nlines") == "two lines"
    assert esc("a & b") == "a &amp; b"


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


@pytest.mark.parametrize("name", sorted(ALL))
def test_tables_are_rectangular(name: str) -> None:
    """Every row of a GFM table has as many cells as its header (no stray pipes from data)."""
    out = render(ALL[name](), RenderOptions(width=100, verbose=True))
    in_code = False
    table: list[str] = []
    for line in [*out.splitlines(), ""]:
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("|"):
            table.append(line)
            continue
        if table:
            counts = {_unescaped_pipes(row) for row in table}
            assert len(counts) == 1, table
            assert re.fullmatch(r"\|(---:?\|)+", table[1]) or table[1] == "|---|---|"
            table = []


def test_malicious_strings_cannot_inject_html() -> None:
    out = render(F.malicious(), RenderOptions(width=100, verbose=True))
    outside_code = re.sub(r"```.*?```", "", out, flags=re.S)
    assert "<script" not in outside_code.lower()
    assert "<img" not in outside_code.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert "note with \\| pipe and \\`tick\\` and \\*star\\*" in out


def test_verdict_is_the_first_quote() -> None:
    report = F.prefill_bound()
    out = render(report, RenderOptions())
    assert out.splitlines()[0] == "# pdprobe report: CRITICAL"
    assert out.splitlines()[2] == ("> **CRITICAL** prefill-bound: prefill short by 2 instances — "
                                   "recommended 4P:4D (deployed 2P:4D); +1 more finding")
    assert render(report, RenderOptions(quiet=True)) == esc(verdict_line(report)) + "\n"


def test_missing_reasons_are_listed() -> None:
    out = render(F.metrics_only(), RenderOptions())
    assert "| ratio | pending — needs per-request lengths or a --profile for the model and GPU |" \
        in out
    assert "- n/a: TTFT p50: no TTFT data (sglang-decode-0, sglang-decode-1, sglang-decode-2)" \
        in out


def test_sparklines_in_a_code_block() -> None:
    out = render(F.prefill_bound(), RenderOptions())
    block = out.split("## Over time\n\n```text\n", 1)[1].split("```", 1)[0]
    assert "prefill queue depth (sum)" in block
    assert "+0s" in block and "+58m00s" in block


def test_capacity_band_and_windows_as_tables() -> None:
    out = render(F.prefill_bound(), RenderOptions())
    cap = out.split("## Capacity\n", 1)[1].split("## SLO attainment", 1)[0]
    assert ("| mean-based planner | would deploy 3P:4D; prefill work +17.0%, decode context +4.0% "
            "vs f(mean) |") in cap
    assert "| decode pool | sized by throughput; mean batch 38, capped by tpot-slo |" in cap
    assert "| verified | TTFT ≤ 2 s: 91.7%, TPOT ≤ 50 ms: 99.6%, both: 91.3% (simulation" in cap
    band = cap.split("**what-if band**\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert band[:2] == ["| what-if | P | D | ratio | binding |", "|---|---:|---:|---:|---|"]
    assert "| p90 lengths (prompt 27,367, output 597) | 9 | 7 | 1.21 | prefill |" in band
    assert band[4] == "| observed workload (the recommendation) | 4 | 4 | 0.95 | prefill |"
    assert len(band) == 8  # header, rule, 5 what-ifs and the recommendation
    # windows: the summary in the text, the table folded in <details> (GitHub renders it)
    assert ("**capacity per window**\n\ndeployed ≠ recommended in 5 of 6 windows of 10m00s; "
            "latest +50m00s needs 4P:4D, has 2P:4D\n\n"
            "<details><summary>per-window table (6 windows)</summary>\n\n"
            "| from | reqs | offered | served | prompt | output | ratio | recommended | deployed "
            "| binding |\n") in cap
    details = cap.split("<details>", 1)[1].split("</details>", 1)[0]
    assert "| +0s | 1,860 | 3.1 | 3.1 | 11,000 | 340 | 0.52 | 2P:4D | 2P:4D | prefill |" in details
    assert ("| +10m00s | 1,920 | 3.2 | 2.2 | 11,400 | 340 | 0.63 | 3P:4D | **2P:4D** ! | prefill |"
            in details)
    assert details.count("**2P:4D** !") == 5
    assert "_! deployed ≠ recommended; offered/served: req/s;" in details
