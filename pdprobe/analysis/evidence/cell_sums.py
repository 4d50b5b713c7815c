"""Per-(bin, instance) sums of whole-number columns for both role columns in one pass.

The prefix-hit series (``req_hit``) sum the cached and the prompt tokens per (bin, instance)
cell of the prefill and of the decode column: a weighted ``np.bincount`` per bin, column and
role column (``cells.BinCells.sums_of``; at 10M rows ~100 ms). When every value is a whole
number from 0 up and no sum can reach 2**53, every partial sum is a whole number held exactly
in float64, so the order of adding does not matter (as in ``analysis.joint_sums``): each bin's
rows are added once into the slot of their (prefill, decode) pair, and each role column's
cell sums are that table's sums over the other column: the very floats of a pass per role
column. ``joint_cell_sums`` checks those conditions bin by bin and answers None (a pass per
role column) as soon as one fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.row_slices import ascending, key_starts

if TYPE_CHECKING:
    from pdprobe.analysis.grouped import Groups

# Whole numbers below this are exact in float64, and so is every sum of them below it.
_EXACT: Final = 1 << 53
# The (prefill, decode) pairs held as int16 slots.
_PAIRS_MAX: Final = np.iinfo(np.int16).max


def joint_cell_sums(bins: np.ndarray, n_bins: int, groupings: tuple[Groups, Groups],
                    columns: tuple[np.ndarray, ...]) -> list[list[np.ndarray]] | None:
    """Per grouping, per column: each cell's (``bin * n_keys + key``, every cell, 0 without
    rows) sum of the column's non-NaN values, what ``cells.cell_groups(...).sums_of`` gives
    at the cells with rows; None unless the bins (each row's, below ``n_bins``) never
    decrease, both groupings cover every row, their pairs fit an int16 and every value
    (NaN counted as 0) is a whole number from 0 up whose sums stay below 2**53."""
    first, second = groupings
    n_rows = bins.size
    n_a, n_b = first.n_groups, second.n_groups
    if not n_rows or n_a * n_b > _PAIRS_MAX or not (first.complete and second.complete) or \
            any(c.dtype.kind not in "iuf" for c in columns) or bins[0] < 0 or \
            bins[-1] >= n_bins or not ascending(bins):
        return None
    bounds = np.append(key_starts(lambda at: bins[at], n_bins, n_rows), n_rows).tolist()
    sums = [[np.zeros(n_bins * n_a) for _ in columns], [np.zeros(n_bins * n_b) for _ in columns]]
    for b in range(n_bins):
        lo, hi = bounds[b], bounds[b + 1]
        if hi == lo:
            continue
        pair = first.codes[lo:hi].astype(np.intp)
        pair *= n_b
        pair += second.codes[lo:hi]
        for k, column in enumerate(columns):
            v = _whole(column[lo:hi], n_rows)
            if v is None:
                return None
            table = np.bincount(pair, weights=v, minlength=n_a * n_b).reshape(n_a, n_b)
            sums[0][k][b * n_a:(b + 1) * n_a] = table.sum(axis=1)
            sums[1][k][b * n_b:(b + 1) * n_b] = table.sum(axis=0)
    return sums


def _whole(v: np.ndarray, n_rows: int) -> np.ndarray | None:
    """``v`` with NaN as 0 when every value is a whole number from 0 up and ``n_rows`` of
    the largest stay below 2**53 (each partial sum of the column exact), else None."""
    if v.dtype.kind == "f":
        nan = np.isnan(v)
        if nan.any():
            v = np.where(nan, 0.0, v)
    low, high = v.min(), v.max()
    # (a float product rounds to 2**53 or above when the true one is; Python ints: exact)
    top = int(high) if v.dtype.kind in "iu" else float(high)
    if not (low >= 0 and top * n_rows < _EXACT):
        return None
    if v.dtype.kind == "f" and not np.array_equal(v, np.floor(v)):
        return None
    return v
