"""Request rows by (time bin, instance) cell, a block of bins at a time, when rows come in
arrival order.

The evidence's per-bin, per-instance series (request counts, median TPOT and prefill time per
token, prefix-hit ratio) group every request row by its cell. ``Groups.of`` on the cell of
every row holds the cell codes, the sampled rows, their codes and their stable order at once
(at 10M rows about 90 MB beside the capacity model's arrays in the other thread). When the
rows are in arrival order (the bins never decrease) each bin's rows are one run, so the cells
of a block of bins are grouped from that block's rows alone: ``BinCells`` gives the figures of
``Groups.of`` (the same cells, counts, sampled rows, medians and sums) holding the sampled
rows' positions and one block's temporaries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from pdprobe.analysis import row_slices
from pdprobe.analysis.row_slices import (
    Column,
    ascending,
    chunks,
    compact_dtype,
    index_dtype,
    key_starts,
    sample_rows,
    stable_order,
    take,
)

if TYPE_CHECKING:
    from pdprobe.analysis.grouped import Groups


class CellGroups(Protocol):
    """What the evidence reads of a grouping of rows by cell (``Groups`` or ``BinCells``)."""

    @property
    def ids(self) -> np.ndarray: ...

    @property
    def totals(self) -> np.ndarray: ...

    @property
    def n_groups(self) -> int: ...

    def medians(self, values: Column) -> np.ndarray: ...

    def sums(self, values: Column) -> np.ndarray: ...


def cell_groups(bins: np.ndarray, keys: Groups, n_bins: int,
                sample_max: int | None) -> CellGroups:
    """The rows grouped by cell ``bin * n_keys + key`` (no cell where the key is missing), as
    ``Groups.of`` of those codes with ``sample_max``: by blocks of bins (``BinCells``) when the
    bins never decrease and the rows are more than one slice, else ``Groups.of`` itself."""
    from pdprobe.analysis.grouped import Groups

    n = keys.n_groups
    if bins.size > row_slices.CHUNK_ROWS and ascending(bins):
        return BinCells(bins, keys.codes, n, n_bins, sample_max)
    cell_code = bins.astype(compact_dtype(n_bins * n))  # the smallest type holding the cells
    cell_code *= n
    cell_code += keys.codes
    if not keys.complete:
        cell_code[keys.codes < 0] = -1
    return Groups.of(cell_code, range(n_bins * n), sample_max=sample_max)


class BinCells:
    """``Groups.of`` of the cell codes ``bins * n_keys + keys`` for bins that never decrease
    (module docstring): the cells with rows (``ids``, ascending), their rows (``totals``), and
    their medians and sums, with ``Groups.of``'s sample (the same fixed-seed draws, row by
    row) when a cell holds more than ``sample_max`` rows."""

    def __init__(self, bins: np.ndarray, keys: np.ndarray, n_keys: int, n_bins: int,
                 sample_max: int | None) -> None:
        self._bins, self._keys, self._n_keys = bins, keys, n_keys
        n_cells = n_bins * n_keys
        per_cell = np.zeros(n_cells, dtype=np.int64)
        for part in chunks(bins.size):
            c = self._cells(part)
            per_cell += np.bincount(c[c >= 0], minlength=n_cells)
        used = per_cell > 0
        self.ids = np.flatnonzero(used)
        self.totals = per_cell[used]
        # cell -> its group (the used cells numbered in order), -1 for a row without a cell
        self._group = np.append(np.where(used, np.cumsum(used) - 1, -1), -1)
        self._group = self._group.astype(compact_dtype(int(used.sum())))
        # the groups of the cells before each bin's first cell: block of bins -> its groups
        self._first_group = np.concatenate(([0], np.cumsum(used)))[::n_keys]
        n_rows = bins.size
        if sample_max is not None and (self.totals > sample_max).any():
            from pdprobe.analysis.grouped import SAMPLE_SEED

            rate = np.minimum(1.0, sample_max / self.totals).astype(np.float32)
            self._rows: np.ndarray | None = sample_rows(self._codes, rate, SAMPLE_SEED,
                                                         n_rows=n_rows)
        else:  # every row with a cell: a block's rows are found when it is read, not held
            self._rows = None
        # each bin's first row (a binary search: no copy of the bins), and first sampled row
        self._bin_start = np.append(key_starts(lambda at: bins[at], n_bins, n_rows), n_rows)
        self._bin_picked = self._bin_start if self._rows is None else \
            np.searchsorted(self._rows, self._bin_start.astype(self._rows.dtype))

    @property
    def n_groups(self) -> int:
        """Cells with at least one row."""
        return int(self.ids.size)

    def _cells(self, rows: slice | np.ndarray) -> np.ndarray:
        """The cell of each row in ``rows`` (-1 where the key is missing)."""
        c = self._bins[rows].astype(np.int64)
        c *= self._n_keys
        keys = self._keys[rows]
        c += keys
        c[keys < 0] = -1
        return c

    def _codes(self, rows: slice | np.ndarray) -> np.ndarray:
        """The group of each row in ``rows`` (-1 without a cell)."""
        return self._group[self._cells(rows)]  # cell -1 reads the trailing -1

    def medians(self, values: Column) -> np.ndarray:
        """``Groups.medians``: each cell's median of its sampled non-NaN ``values`` (NaN
        without values), a block of bins at a time (a cell's median reads only its own
        values: the same figures)."""
        from pdprobe.analysis.grouped import Groups

        out = np.full(self.n_groups, np.nan)
        for first, end in row_slices.group_blocks(self._bin_picked):
            lo, hi = int(self._bin_picked[first]), int(self._bin_picked[end])
            g0, g1 = int(self._first_group[first]), int(self._first_group[end])
            if hi == lo or g1 == g0:
                continue
            rows = self._rows[lo:hi] if self._rows is not None else \
                (np.flatnonzero(self._keys[lo:hi] >= 0) + lo).astype(index_dtype(self._bins.size))
            local = self._codes(rows).astype(np.int64) - g0
            order = rows[stable_order(local, g1 - g0)]
            bounds = np.concatenate(([0], np.cumsum(np.bincount(local, minlength=g1 - g0))))
            block = Groups(codes=local, order=order, bounds=bounds, labels=("",) * (g1 - g0),
                           ids=self.ids[g0:g1], totals=self.totals[g0:g1])
            out[g0:g1] = block.medians(values)
        return out

    def sums(self, values: Column) -> np.ndarray:
        """``Groups.sums``: each cell's sum of its non-NaN values over every row, added in row
        order slice by slice (``ufunc.at``, as ``Groups`` adds them: the same floats)."""
        out = np.zeros(self.n_groups + 1)
        for part in chunks(self._bins.size):
            v = take(values, part)
            nan = np.isnan(v)
            if nan.any():
                v = np.where(nan, 0.0, v)
            np.add.at(out, self._codes(part).astype(np.intp), v)
        return out[:-1]
