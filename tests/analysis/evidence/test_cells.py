"""Request rows by (bin, instance) cell a block of bins at a time: the figures of Groups.of."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_slices
from pdprobe.analysis.evidence.cells import BinCells, cell_groups
from pdprobe.analysis.grouped import Groups


def _rows(seed: int, n: int, n_bins: int, n_keys: int) -> tuple[np.ndarray, Groups]:
    rng = np.random.default_rng(seed)
    bins = np.sort(rng.integers(0, n_bins, n)).astype(np.int16)
    bins[bins == 3] = 4  # a bin without rows
    keys = rng.integers(-1, n_keys, n).astype(np.int8)  # -1: no instance
    keys[(bins == 5) & (keys == 2)] = 0  # a cell without rows in a bin with rows
    codes = np.where(keys >= 0, bins.astype(np.int64) * n_keys + keys, -1)
    return bins, Groups.of(keys, range(n_keys)), codes


@pytest.mark.parametrize("sample_max", [None, 40, 1_000_000])
def test_bin_cells_give_the_figures_of_one_grouping(monkeypatch: pytest.MonkeyPatch,
                                                    sample_max: int | None) -> None:
    # slices of 500 rows: blocks of bins, the sample's draws across slice edges
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    n_bins, n_keys = 12, 7
    bins, keys, codes = _rows(1, 6_000, n_bins, n_keys)
    rng = np.random.default_rng(2)
    values = rng.exponential(1.0, bins.size)
    values[::13] = np.nan
    ints = rng.integers(0, 1000, bins.size)
    cells = cell_groups(bins, keys, n_bins, sample_max)
    assert isinstance(cells, BinCells)
    whole = Groups.of(codes, range(n_bins * n_keys), sample_max=sample_max)
    assert np.array_equal(cells.ids, whole.ids) and np.array_equal(cells.totals, whole.totals)
    assert cells.n_groups == whole.n_groups
    assert np.array_equal(cells.medians(values), whole.medians(values), equal_nan=True)
    assert np.array_equal(cells.medians(lambda rows: values[rows] * 2),
                          whole.medians(lambda rows: values[rows] * 2), equal_nan=True)
    assert np.array_equal(cells.sums(values), whole.sums(values))  # the same floats
    assert np.array_equal(cells.sums(ints), whole.sums(ints))


def test_bins_out_of_order_group_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    bins, keys, codes = _rows(3, 3_000, 6, 4)
    bins = bins[::-1].copy()
    cells = cell_groups(bins, keys, 6, 40)
    assert isinstance(cells, Groups)
    codes = np.where(keys.codes >= 0, bins.astype(np.int64) * 4 + keys.codes, -1)
    whole = Groups.of(codes, range(24), sample_max=40)
    assert np.array_equal(cells.order, whole.order)
