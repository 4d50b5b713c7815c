"""Tests for pdprobe/analysis/evidence/columns.py: the instances the evidence has rows for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.evidence.columns import instance_names
from pdprobe.dataset import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    Dataset,
    InstanceInfo,
    conform,
    empty_frame,
)


@pytest.mark.parametrize("categorical", [True, False])
def test_instance_names_are_those_some_row_or_label_names(categorical: bool) -> None:
    """Known instances, every value a role column holds (not a category no row uses, not a
    missing value) and the metrics' instance labels; never the empty name."""
    prefill = ["p1", None, "p0", "p1", ""]
    decode = ["d0", "d0", None, "d1", "d0"]
    requests = pd.DataFrame({"arrival_ts": np.arange(5.0), "prefill_instance": prefill,
                             "decode_instance": decode})
    if categorical:
        for col, unused in (("prefill_instance", "p-idle"), ("decode_instance", "d-idle")):
            values = requests[col].astype(object)
            categories = sorted({v for v in values if isinstance(v, str)} | {unused})
            requests[col] = pd.Categorical(values, categories=categories)
    metrics = conform(pd.DataFrame({"ts": [1.0], "instance": ["m0"], "signal": ["x"],
                                    "kind": ["gauge"], "le": [np.nan], "value": [1.0]}),
                      METRIC_COLUMNS)
    ds = Dataset(requests=requests, metrics=metrics, network=empty_frame(NETWORK_COLUMNS),
                 events=empty_frame(EVENT_COLUMNS),
                 instances=(InstanceInfo("k0", "decode", "test"),), sources=(),
                 request_columns=frozenset(requests.columns))
    assert instance_names(ds) == {"k0", "p0", "p1", "d0", "d1", "m0"}


@pytest.mark.parametrize("overlap", [False, True])
def test_merged_frames_are_combine_first(overlap: bool) -> None:
    """Frames of different instances are put side by side, overlapping ones combined: either
    way the frame ``combine_first`` gives (earlier values win, NaN filled from the later)."""
    from pdprobe.analysis.evidence.frame_bins import FrameBins

    rng = np.random.default_rng(0)
    index = pd.Index(np.arange(6) * 60.0, name="ts")
    first = pd.DataFrame(rng.random((6, 3)), index=index, columns=["p-1", "p-0", "z"])
    first.iloc[1:3, 0] = np.nan
    later = pd.DataFrame(rng.random((6, 2)), index=index,
                         columns=["p-0", "d-0"] if overlap else ["d-1", "d-0"])
    later.iloc[4, 1] = np.nan
    bins = FrameBins()
    bins.merge("req_hit", first)
    assert bins["req_hit"] is first
    bins.merge("req_hit", later)
    pd.testing.assert_frame_equal(bins["req_hit"], first.combine_first(later), check_exact=True)


@pytest.mark.parametrize("ends", [False, True])
def test_arrival_bins_in_time_order_are_the_bins_of_every_arrival(ends: bool) -> None:
    """Arrivals in time order: the bins as runs (each bin's first row by a binary search) are
    ``Window.bin_of`` of every arrival, clipped ends and ties included."""
    from pdprobe.analysis.evidence.columns import arrival_bins
    from pdprobe.analysis.evidence.model import Window
    from tests.rules.builders import make_dataset

    rng = np.random.default_rng(9)
    arrival = np.sort(rng.uniform(-30.0, 1_230.0, 5_000).round(1))  # ties; some outside
    if ends:
        arrival[0], arrival[-1] = -np.inf, np.inf
    for window in (Window(0.0, 1_200.0, 60.0), Window(0.0, 1_199.5, 7.0)):
        ds = make_dataset(pd.DataFrame({"arrival_ts": arrival, "prompt_tokens": 100,
                                        "output_tokens": 10}))
        got = arrival_bins(ds, window)
        want = window.bin_of(arrival)
        assert got.dtype == want.dtype and np.array_equal(got, want)
