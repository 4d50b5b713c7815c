"""Shared wording: number formats, time offsets, sparklines, the verdict line, evidence."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pdprobe.analysis.base import TimeSeries
from pdprobe.report.cells import fmt_ts, fmt_value, is_relative, pd_pair, window_phrase
from pdprobe.report.series_view import align_series, resample, role_series, sparkline
from pdprobe.report.verdict import evidence_phrase, lead_finding, ordered_findings, verdict_line
from pdprobe.report.view import build_view
from pdprobe.report.windows_view import window_differs
from pdprobe.rules.base import Evidence, Finding, Severity
from pdprobe.units import NA, fmt_bytes_per_s, fmt_duration, fmt_num, fmt_pct, fmt_seconds
from pdprobe.values import Missing
from tests.report import factory as F


@pytest.mark.parametrize(("value", "text"), [
    (12031, "12,031"), (12035.1, "12,035"), (137.4, "137"), (37.0, "37"), (12.34, "12.3"),
    (1.236, "1.24"), (0.01234, "0.0123"), (0.0, "0"), (float("nan"), NA), (-2.5, "-2.5"),
])
def test_fmt_num(value: float, text: str) -> None:
    assert fmt_num(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (0.000085, "85 µs"), (0.0042, "4.2 ms"), (0.85, "850 ms"), (1.236, "1.24 s"),
    (8.7, "8.7 s"), (42.0, "42 s"), (125.0, "2m05s"), (7300.0, "2h01m"), (0.0, "0 s"),
    (float("inf"), NA),
])
def test_fmt_seconds(value: float, text: str) -> None:
    assert fmt_seconds(value) == text


def test_fmt_pct_never_rounds_up_to_100() -> None:
    assert fmt_pct(0.9341) == "93.4%"
    assert fmt_pct(0.99971) == ">99.9%"
    assert fmt_pct(1.0) == "100.0%"
    assert fmt_pct(0.0004) == "0.04%"
    assert fmt_pct(1.42) == "142.0%"


def test_units_pick_the_format() -> None:
    assert fmt_value(0.094, "s") == "94 ms"
    assert fmt_value(0.41, "ratio") == "41.0%"
    assert fmt_value(6.7e9, "B/s") == "6.7 GB/s"
    assert fmt_value(37.0, "requests") == "37 requests"
    assert fmt_value("tcp", "") == "tcp"
    assert fmt_value(Missing("x"), "s") == NA
    assert fmt_bytes_per_s(2.2e10) == "22 GB/s"


def test_durations_and_offsets() -> None:
    assert fmt_duration(750) == "12m30s"
    assert fmt_duration(45.4) == "45s"
    assert fmt_duration(3 * 86400 + 4 * 3600) == "3d04h"
    assert fmt_ts(750.0, relative=True) == "+12m30s"
    assert fmt_ts(1700158546.68, relative=False) == "2023-11-16 18:15:46 UTC"
    assert fmt_ts(1700158546.68, relative=False, with_date=False) == "18:15:46"


def test_relative_windows_show_offsets_not_1970() -> None:
    assert is_relative(0.0)
    assert is_relative(3537.0)
    assert not is_relative(1700158546.68)
    assert not is_relative(None)
    assert window_phrase(0.0, 3537.0) == "+0s → +58m57s (58m57s, relative times)"
    assert window_phrase(1700158546.68, 1700162048.38) == \
        "2023-11-16 18:15:46 → 19:14:08 UTC (58m22s)"
    assert window_phrase(1700158546.0, 1700158546.0 + 2 * 86400) == \
        "2023-11-16 18:15:46 → 2023-11-18 18:15:46 UTC (2d00h)"
    assert window_phrase(None, None) == NA


def test_pd_pair() -> None:
    assert pd_pair(4, 4) == "4P:4D"
    assert pd_pair(Missing("x"), 4) == "n/aP:4D"
    assert pd_pair(None, None) == NA


def test_sparkline_scales_from_zero_and_blanks_unknown() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "███"  # flat but non-zero: at the top of a 0-based scale
    assert sparkline([0.0, 0.0]) == "▁▁"
    assert sparkline([1.0, float("nan"), 2.0]) == "▅ █"
    assert sparkline([float("nan")] * 3) == "   "
    # a shared scale keeps a small series small
    assert sparkline([1.0, 1.0], hi=7.0) == "▂▂"


def test_resample_averages_bins_and_keeps_gaps() -> None:
    assert resample([1, 3, 5, 7], 2) == [2.0, 6.0]
    out = resample([1.0, float("nan"), float("nan"), float("nan")], 2)
    assert out[0] == 1.0 and math.isnan(out[1])
    assert resample([1, 2], 10) == [1.0, 2.0]


def test_align_series_puts_different_grids_on_one() -> None:
    a = TimeSeries(ts=(0.0, 60.0, 120.0), values=(1.0, 2.0, 3.0), unit="requests", step_s=60.0)
    b = TimeSeries(ts=(60.0, 120.0, 180.0), values=(5.0, 6.0, 7.0), unit="requests", step_s=60.0)
    grid, rows = align_series([("a", a), ("b", b)])
    assert grid == (0.0, 60.0, 120.0, 180.0)
    assert rows[0][1][:3] == (1.0, 2.0, 3.0) and math.isnan(rows[0][1][3])
    assert math.isnan(rows[1][1][0]) and rows[1][1][1:] == (5.0, 6.0, 7.0)


def test_role_series_sums_queue_and_averages_ttft() -> None:
    r = F.routing_skew()
    queue = role_series(r, "decode", "queue_series", "sum")
    ttft = role_series(r, "decode", "ttft_series", "mean")
    assert queue is not None and ttft is not None
    decode = [i for i in r.instances if i.role == "decode"]
    first_sum = sum(i.queue_series.values[0] for i in decode if i.queue_series)
    assert queue.values[0] == pytest.approx(first_sum)
    first_mean = sum(i.ttft_series.values[0] for i in decode if i.ttft_series) / 4
    assert ttft.values[0] == pytest.approx(first_mean)
    assert len(queue.per_instance) == 4
    assert queue.instance_peak == pytest.approx(15.0, abs=0.01)  # the hot instance's peak


VERDICTS = {
    "healthy": "OK  no warning or critical finding — recommended 2P:4D (deployed 2P:4D); "
               "+1 more finding",
    "prefill_bound": "CRITICAL  prefill-bound: prefill short by 2 instances — recommended "
                     "4P:4D (deployed 2P:4D); +1 more finding",
    "routing_skew": "WARNING  routing-skew: The router sends 41% of decode traffic to "
                    "10.1.0.24:8200 (fair share 25%)",
    "metrics_only": "OK  no warning or critical finding; +1 more finding",
}


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_verdict_line(name: str) -> None:
    assert verdict_line(F.SCENARIOS[name]()) == VERDICTS[name]


def test_verdict_unknown_names_the_reason() -> None:
    assert verdict_line(F.unknown()) == ("UNKNOWN  could not judge: empty.jsonl: no rows with "
                                         "arrival_ts, prompt_tokens and output_tokens")


def test_verdict_counts_further_root_causes() -> None:
    r = F.prefill_bound()
    extra = Finding(code="PD401", cause="rdma-retransmits", severity=Severity.WARNING,
                    confidence=0.7, summary="RDMA retransmits on node-2.")
    r2 = dataclasses.replace(r, findings=(*r.findings, extra))
    # every other finding is counted (the consequence too), other root causes named
    assert verdict_line(r2).endswith("(deployed 2P:4D); +2 more findings (rdma-retransmits)")


def test_verdict_names_instances_when_summary_does_not() -> None:
    f = Finding(code="PD501", cause="straggler", severity=Severity.WARNING, confidence=0.8,
                summary="One decode instance is 2.4x slower than its peers.",
                instances=("decode-7",))
    r = dataclasses.replace(F.healthy(), findings=(f,), status="warning")
    assert verdict_line(r) == ("WARNING  straggler: One decode instance is 2.4x slower than its "
                               "peers (decode-7)")


def test_over_provisioned_ok_cluster_says_so() -> None:
    r = F.healthy()
    assert not isinstance(r.capacity, Missing)
    cap = dataclasses.replace(r.capacity, deployed_decode=6)
    r2 = dataclasses.replace(r, capacity=cap)
    assert verdict_line(r2) == ("OK  no warning or critical finding; could save 2 decode "
                                "instances — recommended 2P:4D (deployed 2P:6D); +1 more finding")


def test_lead_is_the_worst_root_cause_not_a_consequence() -> None:
    r = F.prefill_bound()
    consequence = dataclasses.replace(r.findings[1], severity=Severity.CRITICAL)
    root = dataclasses.replace(r.findings[0], severity=Severity.WARNING)
    r2 = dataclasses.replace(r, findings=(consequence, root))
    lead = lead_finding(r2)
    assert lead is not None and lead.code == "PD001"
    assert [f.code for f in ordered_findings(r2)] == ["PD001", "PD004"]


def test_evidence_phrase() -> None:
    ev = Evidence("prefill queue depth p90", 37.0, "requests", ("prefill-0", "prefill-1"),
                  baseline=4.0, source="vllm:num_requests_waiting")
    assert evidence_phrase(ev, relative=False) == (
        "prefill queue depth p90: 37 requests (vs 4 requests) on prefill-0, prefill-1 "
        "[vllm:num_requests_waiting]")
    ev2 = Evidence("queue growth", 0.7, "requests/min", window_start_ts=0.0,
                   window_end_ts=3537.0)
    assert evidence_phrase(ev2, relative=True) == "queue growth: 0.7 requests/min, +0s–+58m57s"
    many = Evidence("x", 1, instances=tuple(f"d{i}" for i in range(6)))
    assert evidence_phrase(many, relative=False, with_source=False) == \
        "x: 1 on d0, d1, d2, d3 +2 more"


def test_view_keeps_missing_reasons() -> None:
    view = build_view(F.metrics_only())
    cap = {kv.label: kv.value for kv in view.capacity}
    assert cap["ratio"].text.startswith("pending — needs per-request lengths")
    wl = {kv.label: kv.value for kv in view.workload}
    assert wl["arrival burstiness"].text == NA
    assert wl["arrival burstiness"].reason == "metrics give counts per scrape, not arrival times"
    assert view.lengths is not None
    mean_cell = view.lengths.rows[0][1]
    assert mean_cell.text == NA and "histograms" in (mean_cell.reason or "")
    assert view.lengths.rows[0][2].text == "980~"  # interpolated quantiles are marked


def test_flagged_instances_come_from_findings_and_evidence() -> None:
    view = build_view(F.routing_skew())
    assert view.flagged == {"10.1.0.24:8200": "warning"}
    decode = view.roles[1]
    assert [row[0].flag for row in decode.rows] == [False, False, False, True]


def test_capacity_rows_use_the_model_jensen_gap() -> None:
    rows = {kv.label: kv.value.text for kv in build_view(F.prefill_bound()).capacity}
    assert rows["mean-based planner"] == ("would deploy 3P:4D; prefill work +17.0%, decode "
                                          "context +4.0% vs f(mean)")
    assert rows["utilization (deployed)"] == "prefill 142.0%, decode 33.0%, transfer 15.0%"
    assert rows["binding stage"] == "prefill (at the deployed counts)"
    assert rows["KV transfer"] == ("6.7 GB/s needed of 44 GB/s usable per node (15.2%); link "
                                   "from profile")


def test_capacity_rows_name_the_limits_and_the_verification() -> None:
    report = F.prefill_bound()
    rows = {kv.label: kv.value for kv in build_view(report).capacity}
    assert rows["objectives"].text == "TTFT 2 s, TPOT 50 ms (default)"
    assert rows["prefill pool"].text == ("sized by ttft-slo; expected TTFT p90 1.62 s, mean "
                                         "740 ms (M/D/1 1.41 s)")
    assert rows["decode pool"].text == "sized by throughput; mean batch 38, capped by tpot-slo"
    assert rows["verified"].text == (
        "TTFT ≤ 2 s: 91.7%, TPOT ≤ 50 ms: 99.6%, both: 91.3% (simulation of 12031 requests on "
        "4P/4D); the model predicted TTFT 93.0%")
    cap = report.capacity
    assert not isinstance(cap, Missing)
    # other limits, a lone M/D/1 figure, both objectives defaulted
    other = dataclasses.replace(cap, prefill_limit="transfer", ttft_estimate_mean_s=Missing("x"),
                                decode_limit="kv-memory", decode_batch_limit="max-batch",
                                decode_batch_size=Missing("x"), slo_defaulted=("ttft", "tpot"),
                                verified=Missing("not verified by simulation (use --verify)"),
                                jensen_gap_decode=Missing("x"), jensen_gap_prefill=-0.02)
    rows = {kv.label: kv.value for kv in build_view(dataclasses.replace(
        report, capacity=other)).capacity}
    assert rows["objectives"].text == "TTFT 2 s, TPOT 50 ms (defaults)"
    assert rows["prefill pool"].text == ("sized by transfer; expected TTFT p90 1.62 s; M/D/1 "
                                         "mean 1.41 s")
    assert rows["decode pool"].text == "sized by kv-memory; batch capped by max-batch"
    assert rows["mean-based planner"].text == "would deploy 3P:4D; prefill work -2.0% vs f(mean)"
    assert rows["verified"].is_na
    assert rows["verified"].reason == "not verified by simulation (use --verify)"


def test_capacity_rows_skip_what_the_model_did_not_compute() -> None:
    rows = {kv.label: kv.value for kv in build_view(F.healthy()).capacity}
    assert not {"objectives", "prefill pool", "decode pool"} & set(rows)
    # no Jensen gap from the model: the ratios still show the mean-based shortfall
    assert rows["mean-based planner"].text == ("would deploy 2P:4D (ratio 0.41, 10.9% below the "
                                               "theoretical)")


def test_windows_summary_and_marks() -> None:
    report = F.prefill_bound()
    view = build_view(report)
    assert view.windows_summary == ("deployed ≠ recommended in 5 of 6 windows of 10m00s; latest "
                                    "+50m00s needs 4P:4D, has 2P:4D")
    assert view.windows is not None
    assert [row[8].flag for row in view.windows.rows] == [False] + [True] * 5
    assert view.windows.note.startswith("! deployed ≠ recommended; ")
    cap = report.capacity
    assert not isinstance(cap, Missing)
    assert not window_differs(cap.windows[0]) and window_differs(cap.windows[1])
    healthy = build_view(F.healthy())
    assert healthy.windows_summary == "deployed = recommended in all 6 windows of 10m00s"
    assert healthy.windows is not None and not healthy.windows.note.startswith("!")
    unknown = dataclasses.replace(cap, windows=tuple(
        dataclasses.replace(w, deployed_prefill=Missing("no instance series"),
                            deployed_decode=Missing("no instance series")) for w in cap.windows))
    view = build_view(dataclasses.replace(report, capacity=unknown))
    assert view.windows_summary == "6 windows of 10m00s; deployed or recommended counts unknown"
    assert view.windows is not None and not any(row[8].flag for row in view.windows.rows)
    assert build_view(F.metrics_only()).windows_summary is None


def test_planner_audit_columns_and_summary() -> None:
    """Controller audit (issue 13 item 4): with planner counts per window the windows table
    shows the planner's recommendation and the replicas it saw, and the summary says where they
    differ (the dynamo_planner.om scenario: recommended 4 decode, 2 still deployed)."""
    report = F.prefill_bound()
    cap = report.capacity
    assert not isinstance(cap, Missing)
    planned = dataclasses.replace(cap, windows=tuple(
        dataclasses.replace(w, planner_predicted_prefill=2.0,
                            planner_predicted_decode=2.0 if i < 3 else 4.0,
                            planner_prefill=2.0, planner_decode=2.0 if i < 5 else 4.0,
                            planner_observed_itl_s=0.048, planner_estimated_itl_s=0.025)
        for i, w in enumerate(cap.windows)))
    view = build_view(dataclasses.replace(report, capacity=planned))
    assert view.windows is not None
    assert view.windows.columns[-3:] == ("planner rec", "planner saw", "planner ITL obs/est")
    last = view.windows.rows[3]
    assert (last[-3].text, last[-2].text, last[-1].text) == ("2P:4D", "2P:2D", "48 ms/25 ms")
    assert last[-3].flag and not view.windows.rows[0][-3].flag
    assert view.windows_summary is not None
    assert view.windows_summary.endswith("; the planner's recommendation ≠ what it saw deployed "
                                         "in 2 of 6 (latest 2P:4D vs 2P:2D)")
    # without planner data nothing changes
    assert build_view(report).windows is not None
    assert "planner rec" not in build_view(report).windows.columns  # type: ignore[union-attr]
