"""The per-instance medians of a derived column read off the values the bin cells compute."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_slices
from pdprobe.analysis.evidence.cells import cell_groups
from pdprobe.analysis.evidence.picks import GroupPicks, medians_with_cells
from pdprobe.analysis.grouped import Groups


def _table(seed: int, n: int, n_bins: int, n_keys: int, every_key: bool
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    bins = np.sort(rng.integers(0, n_bins, n)).astype(np.int8)
    bins[bins == 2] = 3  # a bin without rows
    keys = rng.integers(0 if every_key else -1, n_keys, n).astype(np.int8)  # -1: no instance
    values = rng.exponential(1.0, n)
    values[::17] = np.nan
    return bins, keys, values


@pytest.mark.parametrize("every_key", [True, False])
def test_medians_with_cells_are_the_groupings_and_the_cells_medians(
        monkeypatch: pytest.MonkeyPatch, every_key: bool) -> None:
    # slices of 500 rows: several blocks of bins, each instance's rows across them
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    bins, keys, values = _table(4, 6_000, 10, 5, every_key)
    groups = Groups.of(keys, range(5), sample_max=300)  # a sample of each instance's rows
    assert groups.sampled

    def getter(rows: row_slices.Rows) -> np.ndarray:  # a derived column, computed per call
        return values[rows] * 3.0

    cells = cell_groups(bins, groups, 10, None)
    per_group, per_cell = medians_with_cells(groups, cells, getter)
    assert np.array_equal(per_cell, cell_groups(bins, groups, 10, None).medians(getter),
                          equal_nan=True)
    if every_key:  # every block read as a run: the instances' values picked from them
        assert per_group is not None
        assert np.array_equal(per_group, groups.medians(getter), equal_nan=True)
    else:  # a block read at the rows with an instance: nothing picked (Groups asked instead)
        assert per_group is None


def test_sampled_cells_pick_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    bins, keys, values = _table(5, 6_000, 10, 5, True)
    groups = Groups.of(keys, range(5), sample_max=300)
    per_group, per_cell = medians_with_cells(groups, cell_groups(bins, groups, 10, 40), values)
    assert per_group is None
    assert np.array_equal(per_cell, cell_groups(bins, groups, 10, 40).medians(values),
                          equal_nan=True)


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
