"""Cached per-kind groups give ``window_increase``'s answer, row for row, for any window."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.promql_groups import increase_in_window, kind_groups
from pdprobe.promql_grouped import window_increase


def _rows(seed: int) -> pd.DataFrame:
    """One histogram signal's rows: shuffled, with gaps, NaN values, a missing instance and a
    counter reset, as a long table holds them."""
    rng = np.random.default_rng(seed)
    parts = []
    for inst in ("b:1", "a:1", None, "c:1"):
        for le in (0.1, 1.0, float("inf")):
            ts = np.sort(rng.choice(np.arange(0.0, 600.0, 15.0), size=25, replace=False))
            value = np.cumsum(rng.integers(0, 5, size=len(ts))).astype(float)
            value[rng.random(len(ts)) < 0.1] = np.nan
            parts.append(pd.DataFrame({"instance": inst, "ts": ts, "kind": "bucket", "le": le,
                                       "value": value}))
        ts = np.arange(0.0, 600.0, 30.0)
        for kind in ("sum", "count"):
            parts.append(pd.DataFrame({"instance": inst, "ts": ts, "kind": kind,
                                       "le": np.nan, "value": np.arange(len(ts), dtype=float)}))
    frame = pd.concat(parts, ignore_index=True).sample(frac=1.0, random_state=seed)
    frame = frame.reset_index(drop=True)
    frame["instance"] = frame["instance"].astype("string[pyarrow]")
    return frame


def _reference(rows: pd.DataFrame, kind: str, cols: list[str], start: float | None,
               end: float | None, from_zero: bool,
               instances: Collection[str] | None) -> pd.DataFrame:
    keep = (rows["kind"] == kind) & rows["value"].notna()
    if instances is not None:
        keep &= rows[cols[0]].isin(list(instances)).fillna(False)
    frame = rows.loc[keep.to_numpy(dtype=bool), [*cols, "ts", "value"]]
    return window_increase(frame, cols, start, end, from_zero)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("start", "end"), [(None, None), (100.0, 400.0), (0.0, 15.0),
                                            (590.0, 900.0), (-50.0, -10.0), (200.0, None)])
@pytest.mark.parametrize("from_zero", [False, True])
@pytest.mark.parametrize("instances", [None, ["a:1", "c:1"], ["nobody"], {"b:1", "c:1"},
                                       ("a:1", "a:1")])
def test_cached_groups_give_window_increase(seed: int, start: float | None, end: float | None,
                                            from_zero: bool,
                                            instances: Collection[str] | None) -> None:
    rows = _rows(seed)
    for kind, cols in (("bucket", ["instance", "le"]), ("count", ["instance"])):
        got = increase_in_window(kind_groups(rows, kind, cols), cols, start, end, from_zero,
                                 instances)
        want = _reference(rows, kind, cols, start, end, from_zero, instances)
        pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_groups_are_sorted_once_per_rows_frame() -> None:
    rows = _rows(4)
    first = kind_groups(rows, "bucket", ["instance", "le"])
    assert kind_groups(rows, "bucket", ["instance", "le"]) is first
    assert kind_groups(rows, "count", ["instance"]) is not first
    assert kind_groups(rows.copy(), "bucket", ["instance", "le"]) is not first
