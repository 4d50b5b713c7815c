"""The planner's own view per capacity window (issue 13 item 4, controller audit).

Fixture: tests/fixtures/metrics/families/dynamo_planner.om, the dynamo_planner_* gauges of
ai-dynamo/dynamo components/src/dynamo/planner/monitoring/planner_metrics.py over ten minutes:
at +300 s the planner's predicted decode replicas go 2 -> 4 (its recommendation follows the
load at once), the deployed decode replicas stay at 2 until +540 s (actuation lags).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from pdprobe.analysis.base import RatioWindow
from pdprobe.analysis.capacity.window_counts import window_edges
from pdprobe.analysis.capacity.windows import planner_by_window, with_planner
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.openmetrics import read_openmetrics
from pdprobe.values import Missing

FIXTURE = (Path(__file__).resolve().parents[2] / "fixtures" / "metrics" / "families"
           / "dynamo_planner.om")
T0 = 1767225600.0


def _dataset():
    return fuse([read_openmetrics(FIXTURE, ReadContext())])


def _window(lo: float, hi: float) -> RatioWindow:
    return RatioWindow(start_ts=lo, end_ts=hi, theoretical_ratio=Missing("x"),
                       recommended_prefill=Missing("x"), recommended_decode=Missing("x"),
                       deployed_prefill=Missing("x"), deployed_decode=Missing("x"),
                       arrival_rate_rps=1.0, mean_prompt_tokens=1.0, mean_output_tokens=1.0)


def test_planner_counts_per_window_are_the_last_value_in_each():
    edges = window_edges(T0, T0 + 600, 120.0)
    found = planner_by_window(_dataset(), edges)
    pred = found["planner_predicted_decode_replicas"]
    cur = found["planner_decode_replicas"]
    # windows [0,120) [120,240) [240,360) [360,480) [480,600]
    assert pred.tolist() == [2.0, 2.0, 4.0, 4.0, 4.0]
    assert cur.tolist() == [2.0, 2.0, 2.0, 2.0, 4.0]
    assert np.allclose(found["planner_observed_itl_s"], [0.022, 0.022, 0.048, 0.048, 0.048])
    assert np.allclose(found["planner_estimated_itl_s"][-1], 0.025)


def test_with_planner_fills_the_windows_and_leaves_others_missing():
    wins = tuple(_window(T0 + a, T0 + a + 120) for a in range(0, 600, 120))
    out = with_planner(_dataset(), wins)
    assert [w.planner_predicted_decode for w in out] == [2.0, 2.0, 4.0, 4.0, 4.0]
    assert [w.planner_decode for w in out] == [2.0, 2.0, 2.0, 2.0, 4.0]
    assert out[0].planner_prefill == 2.0
    late = with_planner(_dataset(), (_window(T0 + 5000, T0 + 5100),))
    assert isinstance(late[0].planner_decode, Missing)
    assert not math.isnan(out[-1].planner_observed_ttft_s)  # type: ignore[arg-type]
