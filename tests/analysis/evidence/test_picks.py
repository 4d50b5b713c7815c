"""The per-instance medians of a derived column picked from slices of rows."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_slices
from pdprobe.analysis.evidence.picks import GroupPicks, picked_medians
from pdprobe.analysis.grouped import Groups


@pytest.mark.parametrize("every_key", [True, False])
@pytest.mark.parametrize("with_nan", [True, False])
def test_picked_medians_are_the_groupings_medians(monkeypatch: pytest.MonkeyPatch,
                                                  every_key: bool, with_nan: bool) -> None:
    # slices of 500 rows: each instance's rows across many of them
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    rng = np.random.default_rng(4)
    n = 6_000
    keys = rng.integers(0 if every_key else -1, 5, n).astype(np.int8)  # -1: no instance
    values = rng.exponential(1.0, n)
    if with_nan:
        values[::17] = np.nan
    groups = Groups.of(keys, range(5), sample_max=300)  # a sample of each instance's rows
    assert groups.sampled
    calls: list[row_slices.Rows] = []

    def getter(rows: row_slices.Rows) -> np.ndarray:  # a derived column, computed per call
        calls.append(rows)
        return values[rows] * 3.0

    found = picked_medians(groups, getter, no_nan=not with_nan)
    assert np.array_equal(found, groups.medians(lambda rows: values[rows] * 3.0),
                          equal_nan=True)
    # computed a slice of rows at a time, every row once
    assert all(isinstance(rows, slice) for rows in calls)
    assert sum(rows.stop - rows.start for rows in calls) == n  # type: ignore[union-attr]


def test_picks_from_blocks_in_row_order() -> None:
    rng = np.random.default_rng(6)
    values = rng.normal(size=1_000)
    groups = Groups.of(rng.integers(0, 4, 1_000).astype(np.int8), range(4), sample_max=100)
    picks = GroupPicks(groups.order, groups.bounds)
    for lo in range(0, 1_000, 130):
        picks.put(lo, values[lo:lo + 130])
    assert picks.complete
    assert np.array_equal(picks.values, values[groups.order])
    skipped = GroupPicks(groups.order, groups.bounds)
    skipped.put(0, values[:130])
    skipped.put(260, values[260:])  # rows 130..259 never handed over
    assert not skipped.complete
