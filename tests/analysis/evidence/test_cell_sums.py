"""Both role columns' cell sums of whole-number columns from one pass: the very floats."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_slices
from pdprobe.analysis.evidence.cell_sums import joint_cell_sums
from pdprobe.analysis.evidence.cells import cell_groups
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
    found = joint_cell_sums(bins, 9, (first, second), (cached, prompt))
    assert found is not None
    for groups, per_column in zip((first, second), found, strict=True):
        cells = cell_groups(bins, groups, 9, None)
        for got, want in zip(per_column, cells.sums_of((cached, prompt)), strict=True):
            assert np.array_equal(got[cells.ids], want)  # the same floats
            assert not np.delete(got, cells.ids).any()  # a cell without rows: 0


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
    assert joint_cell_sums(bins, 9, (first, second), (cached, prompt)) is None
