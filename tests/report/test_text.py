"""The terminal view: golden files at width 100, no ANSI without colour, -q and -v."""

from __future__ import annotations

import dataclasses
import re

import pytest
from rich.cells import cell_len

from pdprobe.analysis.base import InstanceSummary
from pdprobe.report.base import RenderOptions
from pdprobe.report.text import MAX_ROWS_QUIET, render
from pdprobe.report.verdict import VERDICT_DETAIL_CHARS, clip_clause, verdict_line
from pdprobe.values import Missing
from tests.report import factory as F
from tests.report.golden import check_golden

ANSI = re.compile(r"\x1b\[")
WIDTH = 100
ALL = {**F.SCENARIOS, "unknown": F.unknown, "malicious": F.malicious}


@pytest.mark.parametrize("name", sorted(F.SCENARIOS))
def test_golden_default(name: str) -> None:
    check_golden(f"{name}.txt", render(F.SCENARIOS[name](), RenderOptions(width=WIDTH)))


@pytest.mark.parametrize("name", ["routing_skew", "metrics_only", "prefill_bound"])
def test_golden_verbose(name: str) -> None:
    check_golden(f"{name}.verbose.txt",
                 render(F.SCENARIOS[name](), RenderOptions(width=WIDTH, verbose=True)))


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("verbose", [False, True])
def test_fits_width_without_ansi(name: str, verbose: bool) -> None:
    out = render(ALL[name](), RenderOptions(width=WIDTH, verbose=verbose))
    assert not ANSI.search(out)
    widest = max(cell_len(line) for line in out.splitlines())
    assert widest <= WIDTH, f"{widest} columns"


@pytest.mark.parametrize("name", ["prefill_bound", "routing_skew"])
def test_golden_80_columns(name: str) -> None:
    """An 80-column terminal: names whole, the least needed instance columns hidden (and said
    so), every line within 80 columns."""
    out = render(F.SCENARIOS[name](), RenderOptions(width=80))
    check_golden(f"{name}.80.txt", out)
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    assert "not shown at this width" in out


def test_narrow_terminal_still_fits() -> None:
    out = render(F.routing_skew(), RenderOptions(width=80, verbose=True))
    assert max(cell_len(line) for line in out.splitlines()) <= 80


def test_verdict_comes_first() -> None:
    for make in ALL.values():
        report = make()
        out = render(report, RenderOptions(width=WIDTH))
        verdict = verdict_line(report)
        # a verdict longer than the terminal wraps onto the next line(s)
        head = " ".join(out.splitlines()[:1 + len(verdict) // WIDTH])
        assert " ".join(head.split()) == " ".join(verdict.split())


def test_color_adds_ansi_and_same_text() -> None:
    report = F.prefill_bound()
    colored = render(report, RenderOptions(width=WIDTH, color=True))
    plain = render(report, RenderOptions(width=WIDTH))
    assert ANSI.search(colored)
    assert re.sub(r"\x1b\[[0-9;]*m", "", colored) == plain


def test_quiet_prints_only_the_verdict() -> None:
    report = F.prefill_bound()
    assert render(report, RenderOptions(width=WIDTH, quiet=True)) == verdict_line(report) + "\n"


def test_missing_reasons_only_with_verbose() -> None:
    report = F.routing_skew()
    plain = render(report, RenderOptions(width=WIDTH))
    verbose = render(report, RenderOptions(width=WIDTH, verbose=True))
    assert "offered rate               n/a\n" in plain
    assert "no offered-load counter" not in plain
    assert "offered rate               n/a — no offered-load counter" in verbose
    assert "n/a TPOT p50: prefill instances emit one token (10.1.0.11:8100, 10.1.0.12:8100)" \
        in verbose


def test_capacity_missing_says_pending() -> None:
    out = render(F.metrics_only(), RenderOptions(width=WIDTH))
    assert ("ratio                      pending — needs per-request lengths or a --profile for "
            "the model and GPU") in out


def test_relative_times_are_offsets() -> None:
    out = render(F.prefill_bound(), RenderOptions(width=WIDTH))
    assert "+0s → +58m57s (58m57s, relative times)" in out
    assert "1970" not in out
    assert "latest +50m00s needs 4P:4D" in out  # capacity windows


def test_sparklines_per_role() -> None:
    out = render(F.prefill_bound(), RenderOptions(width=WIDTH))
    line = next(x for x in out.splitlines() if x.startswith("prefill queue depth (sum)"))
    spark = line.split()[4]
    assert set(spark) <= set("▁▂▃▄▅▆▇█")
    assert spark[-1] == "█" and spark[0] in "▁▂"  # the prefill queue grows through the window
    assert line.endswith("peak 87")
    decode = next(x for x in out.splitlines() if x.startswith("decode queue depth (sum)"))
    assert "peak 0" in decode


def test_hot_instance_is_marked() -> None:
    out = render(F.routing_skew(), RenderOptions(width=WIDTH))
    assert "10.1.0.24:8200 !  41.0%" in out
    assert "10.1.0.21:8200    19.7%" in out


def test_rich_markup_in_data_prints_literally() -> None:
    report = F.routing_skew(hot="[bold red]x[/bold red]")
    out = render(report, RenderOptions(width=WIDTH, verbose=True))
    assert "[bold red]x[/bold red]" in out


def test_many_instances_are_capped_without_verbose() -> None:
    report = F.routing_skew()
    decode = [i for i in report.instances if i.role == "decode"]
    extra = tuple(dataclasses.replace(decode[0], name=f"10.1.1.{k}:8200") for k in range(20))
    many: tuple[InstanceSummary, ...] = (*report.instances, *extra)
    report = dataclasses.replace(report, instances=many)
    out = render(report, RenderOptions(width=WIDTH))
    assert f"… {24 - MAX_ROWS_QUIET} more (use -v to list all)" in out
    assert "10.1.0.24:8200 !" in out  # the flagged one is always listed
    verbose = render(report, RenderOptions(width=WIDTH, verbose=True))
    assert "10.1.1.19:8200" in verbose and "more (use -v" not in verbose


def test_quiet_is_one_line_even_for_long_summaries() -> None:
    base = F.routing_skew()
    lead = base.findings[0]
    long_summary = ("decode-2 gets 41 % of the traffic, " * 12) + "and its hit rate is 3 %."
    report = dataclasses.replace(base, findings=(dataclasses.replace(lead, summary=long_summary),
                                                 *base.findings[1:]))
    out = render(report, RenderOptions(width=60, quiet=True))
    assert out.count("\n") == 1
    assert "…" in out
    clipped = clip_clause(long_summary, VERDICT_DETAIL_CHARS)
    assert len(clipped) <= VERDICT_DETAIL_CHARS + 2 and clipped.endswith(" …")
    assert clip_clause("short", 10) == "short"


def _section(out: str, start: str, end: str) -> list[str]:
    return out.split("\n" + start + "\n", 1)[1].split("\n" + end, 1)[0].splitlines()


def test_capacity_says_what_limits_each_pool_and_the_jensen_gap() -> None:
    out = render(F.prefill_bound(), RenderOptions(width=WIDTH))
    lines = _section(out, "CAPACITY", "what-if band")
    assert "objectives                 TTFT 2 s, TPOT 50 ms (default)" in lines
    assert ("prefill pool               sized by ttft-slo; expected TTFT p90 1.62 s, mean 740 ms "
            "(M/D/1 1.41 s)") in lines
    assert "decode pool                sized by throughput; mean batch 38, capped by tpot-slo" \
        in lines
    # the mean-based comparison stays on one line at 100 columns
    assert ("mean-based planner         would deploy 3P:4D; prefill work +17.0%, decode context "
            "+4.0% vs f(mean)") in lines
    assert ("verified                   TTFT ≤ 2 s: 91.7%, TPOT ≤ 50 ms: 99.6%, both: 91.3% "
            "(simulation of 12031") in lines


def test_band_table_has_counts_per_what_if() -> None:
    out = render(F.prefill_bound(), RenderOptions(width=WIDTH))
    band = _section(out, "what-if band", "capacity per window")
    assert band[0].split() == ["what-if", "P", "D", "ratio", "binding"]
    rows = {line.rsplit(None, 4)[0]: line.rsplit(None, 4)[1:] for line in band[2:8]}
    assert rows["load +20% (4.08 req/s)"] == ["5", "5", "0.95", "prefill"]
    assert rows["p90 lengths (prompt 27,367, output 597)"] == ["9", "7", "1.21", "prefill"]
    assert rows["hit rate 42% (-10 pts)"] == ["5", "4", "1.13", "prefill"]
    # centred on the answer: fewer instances above the recommendation, as many or more below
    assert list(rows) == ["load -20% (2.72 req/s)", "hit rate 62% (+10 pts)",
                          "observed workload (the recommendation)", "hit rate 42% (-10 pts)",
                          "load +20% (4.08 req/s)", "p90 lengths (prompt 27,367, output 597)"]
    assert rows["observed workload (the recommendation)"] == ["4", "4", "0.95", "prefill"]
    assert "rows above the recommendation need fewer instances" in " ".join(band[8:])


def test_windows_summarised_by_default_and_listed_with_verbose() -> None:
    report = F.prefill_bound()
    plain = render(report, RenderOptions(width=WIDTH))
    summary = ("deployed ≠ recommended in 5 of 6 windows of 10m00s; latest +50m00s needs 4P:4D, "
               "has 2P:4D")
    assert "capacity per window (-v lists them)\n" + summary + "\n" in plain
    assert "+10m00s" not in plain  # no per-window rows without -v
    verbose = render(report, RenderOptions(width=WIDTH, verbose=True))
    rows = _section(verbose, "capacity per window\n" + summary, "! deployed")
    assert rows[0].split() == ["from", "reqs", "offered", "served", "prompt", "output", "ratio",
                               "recommended", "deployed", "binding"]
    cells = [r.split() for r in rows[2:]]
    assert len(cells) == 6
    # the first window fits the deployed 2P:4D; the later ones need more prefill
    assert cells[0] == ["+0s", "1,860", "3.1", "3.1", "11,000", "340", "0.52", "2P:4D", "2P:4D",
                        "prefill"]
    assert cells[1] == ["+10m00s", "1,920", "3.2", "2.2", "11,400", "340", "0.63", "3P:4D",
                        "2P:4D", "!", "prefill"]
    assert [c[-2] == "!" for c in cells] == [False] + [True] * 5


def test_window_without_an_estimate_is_na_and_not_marked() -> None:
    base = F.prefill_bound()
    cap = base.capacity
    assert not isinstance(cap, Missing)
    thin = dataclasses.replace(
        cap.windows[-1], requests=12, theoretical_ratio=Missing("12 requests, 20 needed"),
        recommended_prefill=Missing("12 requests, 20 needed"),
        recommended_decode=Missing("12 requests, 20 needed"), binding=Missing("not estimated"))
    report = dataclasses.replace(base, capacity=dataclasses.replace(
        cap, windows=(*cap.windows[:-1], thin)))
    out = render(report, RenderOptions(width=WIDTH, verbose=True))
    assert ("deployed ≠ recommended in 4 of 5 windows of 10m00s (and 1 without both counts); "
            "latest +40m00s needs 4P:4D, has 2P:4D") in " ".join(out.split())  # wraps at 100
    last = next(line for line in out.splitlines() if line.startswith("+50m00s"))
    assert last.split() == ["+50m00s", "12", "3.6", "2.2", "13,000", "340", "n/a", "n/a",
                            "2P:4D", "n/a"]
    assert "n/a recommended: 12 requests, 20 needed (+50m00s)" in out
