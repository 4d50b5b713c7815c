"""Counter and histogram math (``pdprobe.promql_math`` and the table helpers of
``pdprobe.analysis.promql``), checked against hand-worked Prometheus semantics."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.promql import (
    counter_increase_by_instance,
    counter_increase_by_window,
    gauge_series,
    histogram_quantiles_by_instance,
    histogram_totals_by_window,
    histogram_window,
    rate_series,
)
from pdprobe.dataset import METRIC_COLUMNS, NETWORK_COLUMNS, conform
from pdprobe.promql_math import (
    correct_counter,
    correct_counters_grouped,
    fraction_below,
    histogram_quantile,
    increase,
    rate,
)

INF = math.inf

# --- correct_counter -------------------------------------------------------------------------


def test_reset_in_the_middle_counts_from_zero() -> None:
    out = correct_counter(np.array([100.0, 200.0, 50.0, 120.0]))
    np.testing.assert_array_equal(out, [100.0, 200.0, 250.0, 320.0])


def test_nan_samples_stay_nan_and_do_not_break_the_chain() -> None:
    out = correct_counter(np.array([1.0, 5.0, 2.0, np.nan, 4.0, 10.0]))
    np.testing.assert_array_equal(out[[0, 1, 2, 4, 5]], [1.0, 5.0, 7.0, 9.0, 15.0])
    assert np.isnan(out[3])


def test_monotonic_series_is_returned_bit_for_bit() -> None:
    values = np.array([0.1, 0.30000000000000004, 0.7, 1e15 + 0.5])
    np.testing.assert_array_equal(correct_counter(values), values)


def test_32bit_wrap_adds_two_to_the_32() -> None:
    raw = np.array([4_294_967_000.0, 4_294_967_290.0, 200.0, 5000.0])
    out = correct_counter(raw, bits=32)
    # 4294967290 -> 200 is a wrap: increase 2**32 - 4294967290 + 200 = 206
    np.testing.assert_array_equal(out, [4_294_967_000.0, 4_294_967_290.0, 4_294_967_496.0,
                                        4_294_972_296.0])


def test_small_drop_of_a_32bit_counter_is_a_reset_not_a_wrap() -> None:
    out = correct_counter(np.array([1000.0, 1200.0, 10.0]), bits=32)
    np.testing.assert_array_equal(out, [1000.0, 1200.0, 1210.0])


def test_without_bits_a_drop_near_the_top_is_a_reset() -> None:
    out = correct_counter(np.array([4_294_967_290.0, 200.0]))
    np.testing.assert_array_equal(out, [4_294_967_290.0, 4_294_967_490.0])


def test_grouped_correction_keeps_series_apart() -> None:
    group = np.array([0, 0, 1, 1, 1])
    out = correct_counters_grouped(group, np.array([5.0, 3.0, 10.0, 2.0, 1.0]))
    np.testing.assert_array_equal(out, [5.0, 8.0, 10.0, 12.0, 13.0])


def test_grouped_correction_with_per_sample_bits() -> None:
    group = np.array([0, 0, 1, 1])
    values = np.array([4_294_967_000.0, 100.0, 4_294_967_000.0, 100.0])
    out = correct_counters_grouped(group, values, np.array([32, 32, 0, 0]))
    np.testing.assert_array_equal(out, [4_294_967_000.0, 4_294_967_396.0, 4_294_967_000.0,
                                        4_294_967_100.0])


# --- increase / rate ---------------------------------------------------------------------------


def test_increase_extrapolates_to_both_edges_when_close() -> None:
    ts = np.array([5.0, 15.0, 25.0, 35.0])
    values = np.array([10.0, 20.0, 30.0, 40.0])
    # raw 30 over 30 s sampled; 5 s to each edge (< 1.1 * 10 s): extrapolated to 40 s
    assert increase(ts, values, 0.0, 40.0) == pytest.approx(40.0)
    assert rate(ts, values, 0.0, 40.0) == pytest.approx(1.0)


def test_increase_extrapolates_half_an_interval_when_far_from_the_edges() -> None:
    ts = np.array([20.0, 30.0])
    values = np.array([100.0, 110.0])
    # 20 s and 30 s gaps are above 11 s: add 5 s on each side -> 10 * 20 / 10
    assert increase(ts, values, 0.0, 60.0) == pytest.approx(20.0)


def test_increase_does_not_extrapolate_below_zero() -> None:
    ts = np.array([10.0, 20.0, 30.0])
    values = np.array([1.0, 11.0, 21.0])
    # zero point is 1 s before the first sample, closer than the 10 s to the window start
    assert increase(ts, values, 0.0, 30.0) == pytest.approx(20.0 * 21.0 / 20.0)


def test_increase_counts_a_reset_inside_the_window() -> None:
    ts = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    values = np.array([5.0, 10.0, 20.0, 3.0, 8.0])
    # corrected 5..28 (+23); start edge at 0, end 20 s away (> 11 s) adds 5 s: 23 * 45 / 40
    assert increase(ts, values, 0.0, 60.0) == pytest.approx(25.875)


def test_increase_needs_two_samples() -> None:
    assert math.isnan(increase(np.array([5.0]), np.array([1.0]), 0.0, 10.0))
    assert math.isnan(increase(np.array([5.0, 50.0]), np.array([1.0, 2.0]), 0.0, 10.0))


# --- histogram_quantile / fraction_below -------------------------------------------------------

LE = np.array([0.1, 0.5, 1.0, INF])
COUNTS = np.array([10.0, 20.0, 30.0, 40.0])


def test_quantile_inside_the_first_bucket_starts_at_zero() -> None:
    assert histogram_quantile(0.1, LE, COUNTS) == pytest.approx(0.04)


def test_quantile_inside_a_middle_bucket() -> None:
    # rank 20 is the top of (0.1, 0.5]; rank 25 is half way through (0.5, 1]
    assert histogram_quantile(0.5, LE, COUNTS) == pytest.approx(0.5)
    assert histogram_quantile(0.625, LE, COUNTS) == pytest.approx(0.75)


def test_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.99, LE, COUNTS) == pytest.approx(1.0)


def test_quantile_of_an_empty_histogram_is_nan() -> None:
    assert math.isnan(histogram_quantile(0.5, LE, np.zeros(4)))
    assert math.isnan(histogram_quantile(0.5, np.array([]), np.array([])))


def test_quantile_without_inf_bucket_is_nan() -> None:
    assert math.isnan(histogram_quantile(0.5, np.array([0.1, 1.0]), np.array([1.0, 2.0])))


def test_quantile_out_of_range_q() -> None:
    assert histogram_quantile(-0.1, LE, COUNTS) == -INF
    assert histogram_quantile(1.1, LE, COUNTS) == INF


def test_quantile_fixes_non_monotonic_counts_and_sorts_bounds() -> None:
    le = np.array([INF, 1.0, 0.1, 0.5])
    counts = np.array([40.0, 30.0, 10.0, 8.0])  # 0.5 bucket below 0.1's: raised to 10
    # cumulative becomes 10, 10, 30, 40: rank 20 lies in (0.5, 1] at half
    assert histogram_quantile(0.5, le, counts) == pytest.approx(0.75)


def test_quantile_with_a_zero_first_bound() -> None:
    le = np.array([0.0, 0.1, 1.0, INF])
    counts = np.array([0.0, 40.0, 90.0, 100.0])
    assert histogram_quantile(0.2, le, counts) == pytest.approx(0.05)
    assert histogram_quantile(0.9, le, counts) == pytest.approx(1.0)


def test_fraction_below_interpolates_inside_the_bucket() -> None:
    assert fraction_below(0.3, LE, COUNTS) == pytest.approx(15.0 / 40.0)
    assert fraction_below(0.05, LE, COUNTS) == pytest.approx(5.0 / 40.0)
    assert fraction_below(0.5, LE, COUNTS) == pytest.approx(0.5)
    assert fraction_below(5.0, LE, COUNTS) == pytest.approx(0.75)
    assert fraction_below(-1.0, LE, COUNTS) == 0.0
    assert math.isnan(fraction_below(0.3, LE, np.zeros(4)))


# --- table helpers -----------------------------------------------------------------------------


def _metrics() -> pd.DataFrame:
    rows = []
    for inst, mul in (("a:1", 1), ("b:1", 2)):
        for i, t in enumerate((0.0, 15.0, 30.0, 45.0)):
            rows.append((t, inst, "gen", "counter", np.nan, 100.0 + 10 * i * mul))
            for le, share in ((0.1, 0.5), (1.0, 0.8), (INF, 1.0)):
                rows.append((t, inst, "ttft_s", "bucket", le, share * 10 * i * mul))
            rows.append((t, inst, "ttft_s", "count", np.nan, 10.0 * i * mul))
            rows.append((t, inst, "ttft_s", "sum", np.nan, 3.0 * i * mul))
            rows.append((t, inst, "kv", "gauge", np.nan, float(i * mul)))
    frame = pd.DataFrame(rows, columns=["ts", "instance", "signal", "kind", "le", "value"])
    return conform(frame, METRIC_COLUMNS)


def test_counter_increase_by_instance_over_all_and_a_window() -> None:
    m = _metrics()
    assert counter_increase_by_instance(m, "gen").to_dict() == {"a:1": 30.0, "b:1": 60.0}
    # baseline: last sample at or before 15 s
    assert counter_increase_by_instance(m, "gen", 15.0, 45.0).to_dict() == {"a:1": 20.0,
                                                                             "b:1": 40.0}
    assert counter_increase_by_instance(m, "gen", 20.0, 40.0).to_dict() == {"a:1": 10.0,
                                                                             "b:1": 20.0}


def test_counter_increase_unknown_outside_the_data_and_for_one_sample() -> None:
    m = _metrics()
    assert counter_increase_by_instance(m, "gen", 50.0, 60.0).isna().all()
    one = m[m["ts"] == 0.0]
    assert counter_increase_by_instance(one, "gen").isna().all()
    assert counter_increase_by_instance(one, "gen", from_zero=True).to_dict() == {
        "a:1": 100.0, "b:1": 100.0}
    assert counter_increase_by_instance(m, "nothing").empty


def test_histogram_window_sums_instances_and_keeps_sum_and_count() -> None:
    h = histogram_window(_metrics(), "ttft_s", 15.0, 45.0)
    assert h["le"].tolist() == [0.1, 1.0, INF]
    assert h["count"].tolist() == pytest.approx([30.0, 48.0, 60.0])
    assert h.attrs["count"] == pytest.approx(60.0)
    assert h.attrs["sum"] == pytest.approx(18.0)
    assert h.attrs["count_by_instance"] == {"a:1": 20.0, "b:1": 40.0}
    assert h.attrs["skipped_instances"] == []


def test_histogram_window_by_instance_and_quantiles() -> None:
    h = histogram_window(_metrics(), "ttft_s", by_instance=True, instances=["b:1"])
    assert h["instance"].unique().tolist() == ["b:1"]
    assert h["count"].tolist() == pytest.approx([30.0, 48.0, 60.0])
    q = histogram_quantiles_by_instance(h, 0.9)
    # rank 54 lies in (1, inf]: the highest finite bound
    assert q.to_dict() == {"b:1": 1.0}
    q50 = histogram_quantiles_by_instance(h, 0.5)
    assert q50["b:1"] == pytest.approx(0.1)


def test_histogram_window_of_an_absent_signal_is_empty() -> None:
    h = histogram_window(_metrics(), "e2e_s")
    assert h.empty and list(h.columns) == ["le", "count"]
    assert math.isnan(h.attrs["sum"])


def test_rate_series_per_bin() -> None:
    r = rate_series(_metrics(), "gen", 15.0)
    a = r[r["instance"] == "a:1"]
    assert a["ts"].tolist() == [0.0, 15.0, 30.0]
    assert a["rate"].tolist() == pytest.approx([10.0 / 15.0] * 3)
    # 30 s bins: interpolated cumulative values at 0 and 30 s
    r30 = rate_series(_metrics(), "gen", 30.0)
    assert r30[r30["instance"] == "b:1"]["rate"].tolist() == pytest.approx([40.0 / 30.0])


def test_gauge_series_aggregates_per_bin() -> None:
    g = gauge_series(_metrics(), "kv", 30.0, "max")
    assert g[g["instance"] == "b:1"]["value"].tolist() == [2.0, 6.0]
    g = gauge_series(_metrics(), "kv", 30.0, "last")
    assert g[g["instance"] == "a:1"]["value"].tolist() == [1.0, 3.0]
    with pytest.raises(ValueError):
        gauge_series(_metrics(), "kv", 30.0, "p99")


def test_network_table_with_a_composite_key() -> None:
    net = conform(pd.DataFrame({
        "ts": [0.0, 10.0, 20.0, 0.0, 10.0, 20.0],
        "node": ["n1"] * 6,
        "device": ["mlx5_0"] * 3 + ["mlx5_1"] * 3,
        "port": ["1"] * 6,
        "signal": ["rdma_tx_bytes_total"] * 6,
        "kind": ["counter"] * 6,
        "value": [0.0, 100.0, 300.0, 50.0, 60.0, 70.0],
    }), NETWORK_COLUMNS)
    inc = counter_increase_by_instance(net, "rdma_tx_bytes_total",
                                       key=("node", "device", "port"))
    assert inc.to_dict() == {("n1", "mlx5_0", "1"): 300.0, ("n1", "mlx5_1", "1"): 20.0}
    r = rate_series(net, "rdma_tx_bytes_total", 10.0, key=("node", "device"))
    assert r[r["device"] == "mlx5_0"]["rate"].tolist() == pytest.approx([10.0, 20.0])


# --- cross-check against Prometheus itself -----------------------------------------------------


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_increase_and_quantile_match_promtool(tmp_path: Path) -> None:
    """promtool evaluates PromQL with the real engine; it passes only if our numbers agree."""
    step = 10.0
    counter = [5.0, 10.0, 20.0, 3.0, 8.0, 12.0]
    ts = np.arange(len(counter)) * step
    cases = []
    for window_s, eval_s in ((60, 60), (30, 50), (25, 40)):
        expected = increase(ts, np.array(counter), eval_s - window_s, eval_s)
        cases.append(f"""      - expr: increase(c[{window_s}s])
        eval_time: {eval_s}s
        exp_samples:
          - labels: '{{job="a"}}'
            value: {expected!r}""")
    buckets = {"0.1": [0, 4], "1": [0, 9], "+Inf": [0, 10]}
    le = np.array([0.1, 1.0, INF])
    for q in (0.2, 0.5, 0.95):
        expected = histogram_quantile(q, le, np.array([4.0, 9.0, 10.0]))
        cases.append(f"""      - expr: histogram_quantile({q}, h_bucket)
        eval_time: 10s
        exp_samples:
          - labels: '{{}}'
            value: {expected!r}""")
    series = "\n".join(
        f"""      - series: 'h_bucket{{le="{b}"}}'
        values: '{" ".join(str(v) for v in vals)}'""" for b, vals in buckets.items())
    spec = f"""rule_files: []
evaluation_interval: 5s
tests:
  - interval: {int(step)}s
    input_series:
      - series: 'c{{job="a"}}'
        values: '{" ".join(f"{v:g}" for v in counter)}'
{series}
    promql_expr_test:
""" + "\n".join(cases) + "\n"
    path = tmp_path / "promql_test.yml"
    path.write_text(spec)
    res = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_vectorised_quantiles_match_the_scalar_function() -> None:
    import pandas as pd

    from pdprobe.analysis.promql import histogram_quantiles_by_instance
    from pdprobe.promql_math import histogram_quantiles_matrix

    rng = np.random.default_rng(7)
    le = np.array([0.0, 0.1, 0.5, 1.0, 2.5, np.inf])
    raw = rng.integers(0, 20, size=(200, len(le))).astype(float)
    raw[:10] = 0.0  # empty histograms
    raw[10:20, :-1] = 0.0  # everything in +Inf
    counts = np.cumsum(raw, axis=1)
    for q in (0.0, 0.01, 0.5, 0.9, 0.99, 1.0):
        expected = np.array([histogram_quantile(q, le, row) for row in counts])
        got = histogram_quantiles_matrix(q, le, counts)
        np.testing.assert_allclose(got, expected, equal_nan=True)
    hist = pd.DataFrame({"instance": np.repeat([f"i{j}" for j in range(200)], len(le)),
                         "le": np.tile(le, 200), "count": counts.ravel()})
    by_instance = histogram_quantiles_by_instance(hist, 0.9)
    np.testing.assert_allclose(by_instance.reindex([f"i{j}" for j in range(200)]).to_numpy(),
                               [histogram_quantile(0.9, le, row) for row in counts], equal_nan=True)


def _ragged_metrics() -> pd.DataFrame:
    """Three instances with restarts, gaps, a late starter and a bucket with a hole."""
    rng = np.random.default_rng(7)
    rows = []
    for k, inst in enumerate(("a:1", "b:1", "c:1")):
        ts = np.arange(0.0, 600.0, 15.0) + 3.0 * k
        if inst == "c:1":
            ts = ts[ts > 200]  # starts late
        count = np.cumsum(rng.integers(0, 9, len(ts))).astype(float)
        if inst == "b:1":
            count[20:] -= count[19]  # restart: counts again from about 0
        for i, t in enumerate(ts):
            if inst == "a:1" and 10 <= i < 14:
                continue  # a gap
            rows.append((t, inst, "gen", "counter", np.nan, 5 * count[i]))
            for le, share in ((0.5, 0.4), (2.0, 0.9), (INF, 1.0)):
                if inst == "c:1" and le == 2.0 and i == 5:
                    continue  # one bucket sample missing
                rows.append((t, inst, "ttft_s", "bucket", le, np.floor(share * count[i])))
            rows.append((t, inst, "ttft_s", "count", np.nan, count[i]))
            rows.append((t, inst, "ttft_s", "sum", np.nan, 0.7 * count[i]))
    frame = pd.DataFrame(rows, columns=["ts", "instance", "signal", "kind", "le", "value"])
    return conform(frame, METRIC_COLUMNS)


@pytest.mark.parametrize("block_cells", [2_000_000, 1])
@pytest.mark.parametrize("instances", [None, ["a:1", "c:1"]])
def test_window_helpers_equal_one_call_per_window(block_cells: int, instances: list[str] | None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """All windows at once (in blocks of any size) give what a call per window gives."""
    import pdprobe.analysis.promql as promql

    monkeypatch.setattr(promql, "MAX_BLOCK_CELLS", block_cells)
    m = _ragged_metrics()
    edges = np.array([-50.0, 0.0, 100.0, 190.0, 300.0, 301.0, 450.0, 620.0, 700.0])
    counts, sums, has = histogram_totals_by_window(m, "ttft_s", edges, instances)
    inc = counter_increase_by_window(m, "gen", edges)
    for w in range(len(edges) - 1):
        lo, hi = edges[w], edges[w + 1]
        h = histogram_window(m, "ttft_s", lo, hi, instances=instances)
        assert has[w] == (len(h) > 0)
        np.testing.assert_allclose(counts[w], h.attrs["count"], rtol=1e-12)
        np.testing.assert_allclose(sums[w], h.attrs["sum"], rtol=1e-12)
        one = counter_increase_by_instance(m, "gen", lo, hi)
        np.testing.assert_allclose(inc[w].reindex(one.index).to_numpy(), one.to_numpy(),
                                   rtol=1e-12)
        assert inc[w].drop(one.index).isna().all()
    assert np.isfinite(counts).any() and not np.isfinite(counts).all()
