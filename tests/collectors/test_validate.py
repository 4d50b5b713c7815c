"""Numeric validation at the collector edge (issue 14): bounds, time outliers, metric rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pdprobe.collectors.validate import (
    MAX_EPOCH_S,
    OUTLIER_GAP_S,
    check_times,
    implausible,
    sanitize_metrics,
    time_outliers,
)

T0 = 1_750_000_000.0


def test_implausible_counts_each_kind_and_leaves_nan_alone() -> None:
    values = np.array([1.0, -2.0, np.inf, -np.inf, 5e9, np.nan, 0.0])
    mask, why = implausible(values, 0.0, 1e9)
    assert mask.tolist() == [False, True, True, True, True, False, False]
    assert why == "2 infinite, 1 negative, 1 above 1e+09"


def test_implausible_reason_is_empty_exactly_when_nothing_is_out_of_range() -> None:
    cases = {
        "inside": np.array([0.0, 3.0, 1e9]),  # the bounds themselves are plausible
        "inside with NaN": np.array([np.nan, 2.0, np.nan]),
        "all NaN": np.array([np.nan, np.nan]),
        "empty": np.array([]),
        "one above": np.array([1.0, 1e9 + 1]),
        "one below, NaN first": np.array([np.nan, -0.5]),
        "infinity": np.array([1.0, np.inf]),
    }
    for label, values in cases.items():
        mask, why = implausible(values, 0.0, 1e9)
        with np.errstate(invalid="ignore"):
            expected = (values < 0.0) | (values > 1e9)
        assert mask.tolist() == expected.tolist(), label
        assert (why == "") == (not expected.any()), label


def test_one_arrival_of_1970_is_an_outlier_and_a_real_gap_is_not() -> None:
    ts = T0 + np.arange(583) * 0.5
    ts[7] = 1.0
    assert np.flatnonzero(time_outliers(ts)).tolist() == [7]
    weekend = np.concatenate([T0 + np.arange(100.0), T0 + 3 * 86400 + np.arange(100.0)])
    assert not time_outliers(weekend).any()  # a quiet weekend is shorter than the gap


def test_rows_in_milliseconds_among_seconds_are_outliers() -> None:
    ts = T0 + np.arange(300) * 0.2
    ts[::3] *= 1000.0  # a third of the rows written in ms
    drops = check_times(ts)
    assert sum(d.count for d in drops) == 100
    assert "between 1970 and 2286" in drops[0].why
    # relative traces in seconds and one wall-clock row: the wall-clock row goes
    rel = np.arange(1000.0)
    rel[500] = T0
    assert np.flatnonzero(time_outliers(rel)).tolist() == [500]
    assert T0 < MAX_EPOCH_S and OUTLIER_GAP_S < T0


def test_sanitize_metrics_drops_what_no_engine_reports() -> None:
    frame = pd.DataFrame({"ts": [T0, T0 + 15, T0 + 30, T0 + 45, 1.0, np.nan, T0 + 60],
                          "value": [1.0, -820.0, 1e308, np.nan, 2.0, 3.0, 4.0]})
    kept, warnings = sanitize_metrics(frame, "m.om")
    assert kept["value"].tolist() == [1.0, 4.0]
    text = "\n".join(warnings)
    assert "1 negative" in text and "1 above" in text and "1 NaN" in text
    assert "30 days away" in text and "without a time" in text
    same, none = sanitize_metrics(kept, "m.om")
    assert same is kept and none == []


def test_infinities_and_nan_among_times_do_not_hide_outliers() -> None:
    ts = T0 + np.arange(200) * 0.5
    ts[[3, 50]] = np.nan
    ts[[10, 90]] = [np.inf, -np.inf]
    ts[120] = 5.0  # 1970: far from the bulk
    assert np.flatnonzero(time_outliers(ts)).tolist() == [120]
    assert not time_outliers(np.array([np.nan, np.inf, -np.inf])).any()
    assert not time_outliers(np.full(4, np.nan)).any()
    assert not time_outliers(np.zeros(0)).any()
    # out-of-range times are dropped once, not again as outliers of the rest
    ts[120] = T0
    ts[7] = -3.0
    drops = check_times(ts)
    assert [d.count for d in drops] == [3]  # -3 and the two infinities
