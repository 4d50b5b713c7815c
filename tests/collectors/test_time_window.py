"""--since/--until for captured files: the window resolved against the capture and the cut
(pdprobe/collectors/time_window.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pdprobe.collectors.time_window import TimeWindow, apply_window, cut, iso
from pdprobe.dataset import Partial, SourceInfo
from pdprobe.errors import InsufficientDataError

T0 = 1796040000.0  # 2026-11-30T12:00:00Z


def _requests(times: list[float]) -> Partial:
    frame = pd.DataFrame({"arrival_ts": times, "prompt_tokens": [100] * len(times),
                          "output_tokens": [10] * len(times)})
    return Partial(source=SourceInfo("r.csv", "requests", "csv", rows=len(times)),
                   requests=frame)


def _metrics(times: list[float]) -> Partial:
    frame = pd.DataFrame({"ts": times, "instance": ["a:1"] * len(times),
                          "signal": ["kv_usage_ratio"] * len(times),
                          "kind": ["gauge"] * len(times), "le": [math.nan] * len(times),
                          "value": [0.5] * len(times)})
    return Partial(source=SourceInfo("m.om", "metrics", "openmetrics", rows=len(times)),
                   metrics=frame)


def test_a_length_ends_at_the_capture_end_and_an_absolute_time_is_kept() -> None:
    assert TimeWindow(length_s=600).resolve(T0 + 3600) == (T0 + 3000, T0 + 3600)
    assert TimeWindow(length_s=600, until_ts=T0 + 60).resolve(T0 + 3600) == (T0 - 540, T0 + 60)
    assert TimeWindow(since_ts=T0).resolve(T0 + 3600) == (T0, T0 + 3600)
    start, end = TimeWindow(until_ts=T0).resolve(None)
    assert start == -math.inf and end == T0
    assert TimeWindow(length_s=60).needs_capture_end
    assert not TimeWindow(length_s=60, until_ts=T0).needs_capture_end


def test_cut_keeps_the_inclusive_window_and_counts_what_it_dropped() -> None:
    parts = [_requests([T0, T0 + 10, T0 + 20, math.nan]), _metrics([T0 + 5, T0 + 30])]
    out, counts = cut(parts, T0 + 10, T0 + 20)
    assert out[0].requests is not None and out[0].requests["arrival_ts"].tolist() == [
        T0 + 10, T0 + 20]
    assert out[0].source.rows == 2  # rows used: those in the window
    assert out[1].metrics is not None and out[1].metrics.empty
    assert "nothing in the --since/--until window" in out[1].source.notes
    assert counts.kept == {"requests": 2, "metrics": 0}
    assert counts.dropped == {"requests": 2, "metrics": 2}  # a row without a time is outside


def test_untouched_partials_are_the_same_objects() -> None:
    part = _requests([T0, T0 + 1])
    out, _ = cut([part], T0 - 1, T0 + 2)
    assert out[0] is part


def test_the_note_states_the_window_and_what_was_outside() -> None:
    window = TimeWindow(length_s=15, text="--since 15s before the capture's end")
    out, note = apply_window([_requests([T0, T0 + 10, T0 + 20]), _metrics([T0 + 19])], window)
    assert note == ("window 2026-11-30T12:00:05Z to 2026-11-30T12:00:20Z (--since 15s before "
                    "the capture's end); outside it: 1 of 3 request records, 0 of 1 metric "
                    "samples")
    assert len(out) == 2
    _, note = apply_window([_requests([T0, T0 + 10])], TimeWindow(until_ts=T0 + 5, text="x"),
                           outside_unread=7)
    assert note.startswith("window 2026-11-30T12:00:00Z to")  # open start: the capture's first
    assert "8 of 9 request records" in note  # unread rows of a pushed-down dataset count


def test_an_empty_window_ends_the_run_naming_the_capture_span() -> None:
    window = TimeWindow(since_ts=T0 + 7200, text="--since 2026-11-30T14:00:00Z")
    with pytest.raises(InsufficientDataError) as err:
        apply_window([_requests([T0, T0 + 60])], window)
    assert "the capture spans 2026-11-30T12:00:00Z to 2026-11-30T12:01:00Z" in str(err.value)


def test_iso_names_open_ends() -> None:
    assert iso(-math.inf) == "start of capture" and iso(math.inf) == "end of capture"
