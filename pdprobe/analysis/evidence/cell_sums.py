"""Per-(bin, instance) rows and sums of whole-number columns for both role columns in one pass.

The prefix-hit series (``req_hit``) sum the cached and the prompt tokens per (bin, instance)
cell of the prefill and of the decode column: a weighted ``np.bincount`` per bin, column and
role column (``cells.BinCells.sums_of``; at 10M rows ~100 ms). When every value is a whole
number from 0 up and no sum can reach 2**53, every partial sum is a whole number held exactly
in float64, so the order of adding does not matter (as in ``analysis.joint_sums``): each bin's
rows are added once into the slot of their (prefill, decode) pair, and each role column's
cell sums are that table's sums over the other column: the very floats of a pass per role
column. ``joint_cells`` checks those conditions bin by bin and gives no sums (a pass per
role column) as soon as one fails. The same pass counts each role column's rows per cell (a
bincount of the pairs instead of one of each column's keys: ``cells.BinCells`` takes them)
and each bin's sums (``series._request_series`` takes the prompt tokens': the very floats of
the exact integer sums it adds, when every partial sum is exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.ahead import Ahead
from pdprobe.analysis.exact_sums import exact_addends
from pdprobe.analysis.key_search import key_starts
from pdprobe.analysis.row_slices import ascending

if TYPE_CHECKING:
    from pdprobe.analysis.grouped import Groups

# The most (prefill, decode) pairs taken: each bin's rows are counted (and summed) into a table
# of every pair (a bincount of intp pair indices, ``n_a * n_b`` slots per bin), kept small.
_PAIRS_MAX: Final = np.iinfo(np.int16).max  # 32,767


@dataclass(frozen=True)
class JointCells:
    """What one pass over the rows of two role columns' (bin, instance) cells gives: per
    grouping, the rows of every cell (``bin * n_keys + key``, 0 without rows) and, when exact,
    each column's sum per cell and per bin (else None)."""

    counts: tuple[np.ndarray, np.ndarray]
    sums: tuple[list[np.ndarray], list[np.ndarray]] | None
    bin_sums: list[np.ndarray] | None


def joint_cells(bins: np.ndarray, n_bins: int, groupings: tuple[Groups, Groups],
                columns: tuple[np.ndarray, ...],
                whole: tuple[bool, ...] = (),
                per_bin: tuple[np.ndarray, ...] = ()) -> JointCells | None:
    """The rows of each grouping's cells and, when exact, each column's sums per cell (what
    ``cells.cell_groups(...).sums_of`` gives at the cells with rows: the sum of the non-NaN
    values) and per bin, from one pass over each bin's rows; None unless the bins (each
    row's, below ``n_bins``) never decrease, both groupings cover every row and they make at
    most ``_PAIRS_MAX`` pairs. The sums are None unless every value (NaN counted as 0) is a
    whole number from 0 up whose sums stay below 2**53: not tested for a column ``whole``
    marks so (``table_facts.known_whole``: an earlier pass tested every value, none NaN).
    ``per_bin``: columns known whole so, summed per bin only (``bin_sums`` after the
    ``columns``' own; exact sums, the very floats of any order of adding)."""
    first, second = groupings
    n_rows = bins.size
    n_a, n_b = first.n_groups, second.n_groups
    if not n_rows or n_a * n_b > _PAIRS_MAX or not (first.complete and second.complete) or \
            bins[0] < 0 or bins[-1] >= n_bins or not ascending(bins):
        return None
    bounds = np.append(key_starts(lambda at: bins[at], n_bins, n_rows), n_rows).tolist()
    counts = (np.zeros(n_bins * n_a, dtype=np.int64), np.zeros(n_bins * n_b, dtype=np.int64))
    exact = all(c.dtype.kind in "iuf" for c in columns)
    sums = ([np.zeros(n_bins * n_a) for _ in columns], [np.zeros(n_bins * n_b) for _ in columns])
    bin_sums = [np.zeros(n_bins) for _ in (*columns, *per_bin)]
    for b in range(n_bins):
        lo, hi = bounds[b], bounds[b + 1]
        if hi == lo:
            continue
        # the pair computed in int16 (it holds every pair: _PAIRS_MAX), then widened once
        # for the bincounts (each widens any other type again): a quarter of the memory
        # traffic of computing it in intp (at 10M rows ~6 ms less)
        pair = first.codes[lo:hi].astype(np.int16)
        pair *= n_b
        pair += second.codes[lo:hi]
        pair = pair.astype(np.intp)
        table = np.bincount(pair, minlength=n_a * n_b).reshape(n_a, n_b)
        counts[0][b * n_a:(b + 1) * n_a] = table.sum(axis=1)
        counts[1][b * n_b:(b + 1) * n_b] = table.sum(axis=0)
        for k, column in enumerate(columns if exact else ()):
            v = column[lo:hi] if k < len(whole) and whole[k] else \
                exact_addends(column[lo:hi], n_rows, nan_as_zero=True)
            if v is None:
                exact = False
                break
            per_pair = np.bincount(pair, weights=v, minlength=n_a * n_b).reshape(n_a, n_b)
            sums[0][k][b * n_a:(b + 1) * n_a] = per_pair.sum(axis=1)
            sums[1][k][b * n_b:(b + 1) * n_b] = per_pair.sum(axis=0)
            bin_sums[k][b] = per_pair.sum()
        for k, column in enumerate(per_bin, start=len(columns)):
            bin_sums[k][b] = column[lo:hi].sum()  # (whole numbers: an exact sum)
    return JointCells(counts=counts, sums=sums if exact else None,
                      bin_sums=bin_sums if exact else None)


# Per-cell sums of each column, per grouping (0, 1): ``JointCells.sums``.
CellSums = tuple[list[np.ndarray], list[np.ndarray]]


def cell_hit_sums(bins: np.ndarray, n_bins: int, groupings: tuple[Groups, Groups],
                  columns: tuple[np.ndarray, ...], whole: tuple[bool, ...]) -> Ahead[CellSums]:
    """Both role columns' per-cell sums of whole-number token columns (``joint_cells``' sums
    of ``columns``, each marked whole), made by their first reader and kept for the other
    (``analysis.ahead.Ahead``; indexed by grouping, 0 or 1): the prefix-hit frames
    (``req_hit``), which PD502 reads only for an instance whose hit rate is already low, are
    summed when read (``frame_bins``; at 10M rows the weighted bincounts are ~45 of the joint
    pass's ~65 ms)."""

    def make() -> CellSums:
        found = joint_cells(bins, n_bins, groupings, columns, whole)
        # (the pass that counted the cells passed: whole numbers sum exactly)
        assert found is not None and found.sums is not None
        return found.sums

    return Ahead(make)
