"""Both role columns' cell rows and sums of whole-number columns from one pass: the very
floats."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_slices
from pdprobe.analysis.evidence import cell_sums
from pdprobe.analysis.evidence.bin_figures import bin_groups
from pdprobe.analysis.evidence.cell_sums import joint_cells
from pdprobe.analysis.evidence.cells import BinCells, cell_groups
from pdprobe.analysis.grouped import Groups


def _rows(seed: int, n: int) -> tuple[np.ndarray, Groups, Groups, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    bins = np.sort(rng.integers(0, 9, n)).astype(np.int8)
    bins[bins == 4] = 5  # a bin without rows
    first = Groups.of(rng.integers(0, 6, n).astype(np.int8), range(6))
    second = Groups.of(rng.integers(0, 3, n).astype(np.int8), range(3))
    cached = rng.integers(0, 4_000, n).astype(np.float64)
    cached[::11] = np.nan  # counted as 0
    prompt = rng.integers(1, 8_000, n)
    return bins, first, second, cached, prompt


def test_joint_cell_sums_are_each_role_columns_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    bins, first, second, cached, prompt = _rows(7, 5_000)
    found = joint_cells(bins, 9, (first, second), (cached, prompt))
    assert found is not None and found.sums is not None and found.bin_sums is not None
    for groups, counted, per_column in zip((first, second), found.counts, found.sums,
                                           strict=True):
        cells = cell_groups(bins, groups, 9, None)
        assert np.array_equal(counted[cells.ids], cells.totals)
        assert not np.delete(counted, cells.ids).any()
        assert isinstance(cells, BinCells)
        given = cell_groups(bins, groups, 9, None, counted=counted)
        assert np.array_equal(given.ids, cells.ids) and np.array_equal(given.totals, cells.totals)
        for got, want in zip(per_column, cells.sums_of((cached, prompt)), strict=True):
            assert np.array_equal(got[cells.ids], want)  # the same floats
            assert not np.delete(got, cells.ids).any()  # a cell without rows: 0
    by_bin = bin_groups(bins, 9, None)
    for got, column in zip(found.bin_sums, (cached, prompt), strict=True):
        assert np.array_equal(got[by_bin.ids], by_bin.sums(column))


@pytest.mark.parametrize("change", ["fraction", "negative", "huge", "unordered", "no key"])
def test_joint_cell_sums_refuse_what_is_not_exact(change: str) -> None:
    bins, first, second, cached, prompt = _rows(8, 2_000)
    if change == "fraction":
        cached[5] = 1.5
    elif change == "negative":
        prompt[7] = -1
    elif change == "huge":
        cached[9] = 2.0 ** 50
    elif change == "unordered":
        bins = bins[::-1].copy()
    else:
        codes = first.codes.copy()
        codes[3] = -1
        first = Groups.of(codes, range(6))
    found = joint_cells(bins, 9, (first, second), (cached, prompt))
    if change in ("unordered", "no key"):
        assert found is None
    else:  # the rows per cell still counted
        assert found is not None and found.sums is None and found.bin_sums is None
        assert np.array_equal(found.counts[1], joint_cells(bins, 9, (first, second), ()).counts[1])


def test_joint_cell_sums_of_columns_known_whole_are_the_tested_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A column marked whole (an earlier pass tested every value) is summed untested: the
    same floats as the tested pass."""
    bins, first, second, cached, prompt = _rows(5, 3_000)
    cached = np.nan_to_num(cached)  # a column known whole has no NaN
    tested = joint_cells(bins, 9, (first, second), (cached, prompt))
    with monkeypatch.context() as m:  # the marked columns are not tested again
        m.setattr(cell_sums, "exact_addends", lambda *a, **k: pytest.fail("a column known whole tested"))
        known = joint_cells(bins, 9, (first, second), (cached, prompt), (True, True))
    assert tested is not None and known is not None
    assert tested.sums is not None and known.sums is not None
    for want, got in zip(tested.sums, known.sums, strict=True):
        for a, b in zip(want, got, strict=True):
            assert np.array_equal(a, b)
    assert tested.bin_sums is not None and known.bin_sums is not None
    for a, b in zip(tested.bin_sums, known.bin_sums, strict=True):
        assert np.array_equal(a, b)
