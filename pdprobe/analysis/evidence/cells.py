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

from itertools import pairwise
from typing import TYPE_CHECKING, Protocol

import numpy as np

from pdprobe.analysis import row_slices
from pdprobe.analysis.key_search import key_starts
from pdprobe.analysis.row_sample import sample_rows
from pdprobe.analysis.row_slices import (
    Column,
    ascending,
    chunks,
    compact_dtype,
    index_dtype,
    integer_array,
    take,
)

if TYPE_CHECKING:
    from pdprobe.analysis.grouped import Groups


class CellGroups(Protocol):
    """What the evidence reads of a grouping of rows by cell (``WholeCells`` or ``BinCells``):
    the cells with rows, their rows, each cell's median and sums."""

    @property
    def ids(self) -> np.ndarray: ...

    @property
    def totals(self) -> np.ndarray: ...

    @property
    def n_groups(self) -> int: ...

    def medians(self, values: Column, *, no_nan: bool = False) -> np.ndarray: ...

    def sums_of(self, columns: tuple[Column, ...]) -> list[np.ndarray]: ...


class BinDraws(Protocol):
    """Another sample of the same rows drawn from ``BinCells``' draws (``bin_figures``)."""

    def take(self, b: int, lo: int, uniform: np.ndarray) -> None: ...


def cell_groups(bins: np.ndarray, keys: Groups, n_bins: int, sample_max: int | None,
                beside: BinDraws | None = None, counted: np.ndarray | None = None
                ) -> CellGroups:
    """The rows grouped by cell ``bin * n_keys + key`` (no cell where the key is missing), as
    ``Groups.of`` of those codes with ``sample_max``: by blocks of bins (``BinCells``) when the
    bins never decrease and the rows are more than one slice, else ``Groups.of`` itself
    (``WholeCells``). ``beside`` takes the sample's draws of every bin's rows, when drawn bin
    by bin (``BinCells._sample_by_bin``); ``counted``: the rows of every cell, when known
    (``cell_sums.joint_cells``), for ``BinCells`` of keys that cover every row."""
    from pdprobe.analysis.grouped import Groups

    n = keys.n_groups
    if bins.size > row_slices.CHUNK_ROWS and ascending(bins):
        return BinCells(bins, keys.codes, n, n_bins, sample_max, complete=keys.complete,
                        beside=beside, counted=counted)
    cell_code = bins.astype(compact_dtype(n_bins * n))  # the smallest type holding the cells
    cell_code *= n
    cell_code += keys.codes
    if not keys.complete:
        cell_code[keys.codes < 0] = -1
    return WholeCells(Groups.of(cell_code, range(n_bins * n), sample_max=sample_max))


class WholeCells:
    """``CellGroups`` of ``Groups.of`` on every row's cell: medians a block of grouped rows at
    a time (``row_slices.blocked_medians``), sums column after column."""

    def __init__(self, groups: Groups) -> None:
        self.groups = groups
        self.ids = groups.ids
        self.totals = groups.totals

    @property
    def n_groups(self) -> int:
        """Cells with at least one row."""
        return self.groups.n_groups

    def medians(self, values: Column, *, no_nan: bool = False) -> np.ndarray:
        """``Groups.medians`` of ``values`` (``no_nan``: read by ``BinCells`` alone)."""
        return row_slices.blocked_medians(self.groups, values)

    def sums_of(self, columns: tuple[Column, ...]) -> list[np.ndarray]:
        """``Groups.sums`` of each of ``columns``."""
        return [self.groups.sums(values) for values in columns]


class BinCells:
    """``Groups.of`` of the cell codes ``bins * n_keys + keys`` for bins that never decrease
    (module docstring): the cells with rows (``ids``, ascending), their rows (``totals``), and
    their medians and sums, with ``Groups.of``'s sample (the same fixed-seed draws, row by
    row) when a cell holds more than ``sample_max`` rows."""

    def __init__(self, bins: np.ndarray, keys: np.ndarray, n_keys: int, n_bins: int,
                 sample_max: int | None, complete: bool = False,
                 beside: BinDraws | None = None, counted: np.ndarray | None = None) -> None:
        self._bins, self._keys, self._n_keys = bins, keys, n_keys
        # every key present (no -1): no row is left without a cell, so no mask per slice
        self._complete = complete
        n_cells = self._n_cells = n_bins * n_keys
        # the cells in the smallest type holding them (int16 for 10,800 cells, not int64:
        # a slice's cells are computed at every pass over the rows)
        self._cell_dtype = compact_dtype(n_cells)
        n_rows = bins.size
        # each bin's first row (a binary search: no copy of the bins)
        self._bin_start = np.append(key_starts(lambda at: bins[at], n_bins, n_rows), n_rows)
        per_cell = np.zeros(n_cells, dtype=np.int64)
        if complete and counted is not None:  # counted already (``cell_sums.joint_cells``)
            per_cell = counted
        elif complete:  # a bin's cells are its rows' keys: counted bin by bin, no cell per row
            bounds = self._bin_start.tolist()
            for b in range(n_bins):
                if bounds[b + 1] > bounds[b]:
                    per_cell[b * n_keys:(b + 1) * n_keys] = np.bincount(
                        keys[bounds[b]:bounds[b + 1]], minlength=n_keys)
        else:
            for part in chunks(n_rows):
                c = self._cells(part)
                per_cell += np.bincount(c[c >= 0], minlength=n_cells)
        used = per_cell > 0
        # the rows of every cell, which ``_in_cell_order`` reads when every row is read (no sample)
        self._per_cell = per_cell
        # every cell has rows (the usual case): a cell is its own group, no lookup per row
        self._every_cell = bool(used.all())
        self.ids = np.flatnonzero(used)
        self.totals = per_cell[used]
        # cell -> its group (the used cells numbered in order), -1 for a row without a cell
        self._group = np.append(np.where(used, np.cumsum(used) - 1, -1), -1)
        self._group = self._group.astype(compact_dtype(int(used.sum())))
        # the groups of the cells before each bin's first cell: block of bins -> its groups
        self._first_group = np.concatenate(([0], np.cumsum(used)))[::n_keys]
        if sample_max is not None and (self.totals > sample_max).any():
            from pdprobe.analysis.grouped import SAMPLE_SEED

            rate = np.minimum(1.0, sample_max / self.totals).astype(np.float32)
            self._rows: np.ndarray | None = self._sample_by_bin(rate, SAMPLE_SEED, beside) \
                if complete else sample_rows(self._codes, rate, SAMPLE_SEED, n_rows=n_rows)
        else:  # every row with a cell: a block's rows are found when it is read, not held
            self._rows = None
        # each bin's first sampled row
        self._bin_picked = self._bin_start if self._rows is None else \
            np.searchsorted(self._rows, self._bin_start.astype(self._rows.dtype))

    @property
    def n_groups(self) -> int:
        """Cells with at least one row."""
        return int(self.ids.size)

    @property
    def sampled(self) -> bool:
        """Whether the cells' medians read a sample of their rows (its positions held)."""
        return self._rows is not None

    def _sample_by_bin(self, rate: np.ndarray, seed: int,
                       beside: BinDraws | None = None) -> np.ndarray:
        """``sample_rows(self._codes, rate, seed)`` when every row has a key: the same draws
        (one float32 per row, a slice at a time, from one seeded stream) compared with each
        row's rate, looked up bin by bin from its key in that bin's rates (a bin's cells are
        its keys) instead of from a cell computed for every row. ``beside`` is handed each
        bin's draws, in row order."""
        n_keys, n_rows = self._n_keys, self._bins.size
        per_cell = np.zeros(self._n_cells, dtype=np.float32)  # a cell without rows: never
        per_cell[self.ids] = rate
        starts = self._bin_start.tolist()
        rng = np.random.default_rng(seed)
        rows = np.empty(n_rows, dtype=index_dtype(n_rows))  # pages past the kept: untouched
        kept = 0
        for part in chunks(n_rows):
            uniform = rng.random(part.stop - part.start, dtype=np.float32)
            b = int(np.searchsorted(self._bin_start, part.start, side="right")) - 1
            while b < len(starts) - 1 and starts[b] < part.stop:
                lo, hi = max(starts[b], part.start), min(starts[b + 1], part.stop)
                if hi > lo:
                    threshold = np.take(per_cell[b * n_keys:(b + 1) * n_keys],
                                        self._keys[lo:hi])
                    drawn = uniform[lo - part.start:hi - part.start]
                    hit = np.flatnonzero(drawn < threshold)
                    np.add(hit, lo, out=rows[kept:kept + hit.size], casting="unsafe")
                    kept += hit.size
                    if beside is not None:
                        beside.take(b, lo, drawn)
                b += 1
        return rows[:kept]

    def _cells(self, rows: slice | np.ndarray) -> np.ndarray:
        """The cell of each row in ``rows`` (-1 where the key is missing)."""
        c = self._bins[rows].astype(self._cell_dtype)
        c *= self._n_keys
        keys = self._keys[rows]
        c += keys
        if not self._complete:
            c[keys < 0] = -1
        return c

    def _codes(self, rows: slice | np.ndarray) -> np.ndarray:
        """The group of each row in ``rows`` (-1 without a cell)."""
        if self._every_cell:
            return self._cells(rows)
        return self._group[self._cells(rows)]  # cell -1 reads the trailing -1

    def medians(self, values: Column, *, no_nan: bool = False) -> np.ndarray:
        """``Groups.medians``: each cell's median of its sampled non-NaN ``values`` (NaN
        without values), a block of bins at a time (a cell's median reads only its own
        values: the same figures). ``no_nan``: the caller counted no NaN among the values
        (``medians_of``)."""
        out = np.full(self.n_groups, np.nan)
        for first, end in row_slices.group_blocks(self._bin_picked):
            lo, hi = int(self._bin_picked[first]), int(self._bin_picked[end])
            g0, g1 = int(self._first_group[first]), int(self._first_group[end])
            if hi == lo or g1 == g0:
                continue
            rows: slice | np.ndarray
            if self._rows is not None:
                rows = self._rows[lo:hi]
            elif self._complete or bool((self._keys[lo:hi] >= 0).all()):
                rows = slice(lo, hi)  # every row of the block: read as one run, no positions
            else:
                rows = (np.flatnonzero(self._keys[lo:hi] >= 0) + lo).astype(
                    index_dtype(self._bins.size))
            # The block's values read in row order (a run, or ascending positions: sequential
            # reads of the columns, where reading them cell after cell jumped across the
            # block's rows at every value), then put in cell order from that small array in
            # one gather (each bin's rows are a few MB; ``Groups.medians`` gathered them in
            # thousands of pieces and copied each size's cells again into a matrix). A
            # cell's values in any order have the same order statistics: the same medians.
            block = take(values, rows)
            v, per_cell = self._in_cell_order(block, rows, first, end, lo)
            # the block's used cells (its groups), in order: the unused ones hold no rows
            sizes = per_cell[self.ids[g0:g1] - first * self._n_keys]
            out[g0:g1] = medians_of(v, sizes, no_nan)
        return out

    def _in_cell_order(self, block: np.ndarray, rows: slice | np.ndarray, first: int, end: int,
                       lo: int) -> tuple[np.ndarray, np.ndarray]:
        """``block`` (the values of ``rows``: the rows of bins ``first..end - 1`` with a cell,
        starting at ``lo``) in ``stable_order.stable_order`` of their cells (equal cells in row order); and
        the rows of each cell of those bins (``(end - first) * n_keys`` of them, used or not).
        The rows are in bin order and a cell is a (bin, key) pair, so this is each bin's
        values stably sorted by key: a radix sort of the (int8) keys bin by bin, about 4x
        cheaper than sorting the block's int16 cells at once, each bin's values gathered
        from its own sort's positions (a bin's values stay in cache; no block-long positions
        array shifted and gathered from again: at 10M rows ~30 ms less)."""
        keys = self._keys[rows]
        if keys.dtype.kind == "i":
            # every key here is >= 0 (rows without one are left out; a sampled row has one):
            # as unsigned the same order, and numpy's radix sort skips flipping the sign bit
            keys = keys.view(f"u{keys.dtype.itemsize}")
        if isinstance(rows, np.ndarray) and self._rows is None:  # only the rows with a key
            starts = np.searchsorted(rows, self._bin_start[first:end + 1].astype(rows.dtype))
        else:  # every row of the bins, or the sample's: where each bin's own rows start
            starts = self._bin_picked[first:end + 1] - lo
        n_keys = self._n_keys
        out = np.empty(keys.size, dtype=np.float64)
        # without a sample these are the rows counted per cell already (a bincount per bin
        # fewer: at 10M rows ~10 ms)
        counted = self._rows is None
        per_cell = self._per_cell[first * n_keys:end * n_keys] if counted else \
            np.zeros((end - first) * n_keys, dtype=np.int64)
        for j, (a, b) in enumerate(zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)):
            if b > a:
                # wrap: the positions are valid; no buffered copy of the output
                np.take(block[a:b], np.argsort(keys[a:b], kind="stable"), out=out[a:b],
                        mode="wrap")
                if not counted:
                    per_cell[j * n_keys:(j + 1) * n_keys] = np.bincount(keys[a:b],
                                                                        minlength=n_keys)
        return out, per_cell

    def sums_of(self, columns: tuple[Column, ...]) -> list[np.ndarray]:
        """``Groups.sums`` of each of ``columns`` (each cell's sum of its non-NaN values over
        every row, added in row order slice by slice, as ``Groups`` adds them: the same
        floats) in one pass over the rows: each slice's cells are found once for every column
        (they cost more than the adding). Each column's values
        are added in row order by ``ufunc.at``, as ``Groups`` adds them: the same floats."""
        if self._complete:
            return self._sums_by_bin(columns)
        outs = [np.zeros(self.n_groups + 1) for _ in columns]  # the last slot: rows without a cell
        for part in chunks(self._bins.size):
            codes = self._codes(part).astype(np.intp)  # intp: ufunc.at's fast path
            for values, out in zip(columns, outs, strict=True):
                v = take(values, part)
                nan = np.isnan(v)
                if nan.any():
                    v = np.where(nan, 0.0, v)
                np.add.at(out, codes, v)
        return [out[:-1] for out in outs]

    def _sums_by_bin(self, columns: tuple[Column, ...]) -> list[np.ndarray]:
        """``sums_of`` when every row has a key: a bin's cells are its rows' keys, so each
        bin's rows are added by key with ``np.bincount`` (row after row from 0.0, as
        ``ufunc.at`` adds them: the same floats), no cell computed per row."""
        n_keys = self._n_keys
        per_cell = [np.zeros(self._n_cells) for _ in columns]
        bounds = self._bin_start.tolist()
        for b in range(len(bounds) - 1):
            part = slice(bounds[b], bounds[b + 1])
            if part.stop == part.start:
                continue
            keys = self._keys[part]
            for values, out in zip(columns, per_cell, strict=True):
                out[b * n_keys:(b + 1) * n_keys] = np.bincount(
                    keys, weights=_weights(values, part), minlength=n_keys)
        return [out[self.ids] for out in per_cell]


def _weights(values: Column, rows: slice) -> np.ndarray:
    """``values`` at ``rows`` with NaN as 0, as ``np.bincount`` weights: an integer column's
    own slice (never NaN; bincount converts it to float64 as ``take`` would), else ``take``'s
    float64 values."""
    if integer_array(values):
        return np.asarray(values)[rows]
    v = take(values, rows)
    nan = np.isnan(v)
    return np.where(nan, 0.0, v) if nan.any() else v


def medians_of(v: np.ndarray, sizes: np.ndarray, no_nan: bool = False) -> np.ndarray:
    """Each group's median of its non-NaN values, group ``g`` being the next ``sizes[g]``
    values of ``v`` (partitioned in place): ``Groups.medians``' figures (the value at rank
    ``n // 2`` of its ``n`` values, averaged with the largest value left of it when ``n`` is
    even; NaN without values). One in-place partition per group of a few thousand values (a
    cell), where ``Groups.medians`` first copies each size's groups into a matrix.
    ``no_nan``: the caller knows no value is NaN (it counted them): no NaN test of every
    value (at 10M values ~7 ms)."""
    missing = None if no_nan else np.isnan(v)
    if missing is not None and missing.any():
        where = np.repeat(np.arange(sizes.size), sizes)[missing]
        sizes = sizes - np.bincount(where, minlength=sizes.size)
        v = v[~missing]
    out = np.full(sizes.size, np.nan)
    bounds = np.concatenate(([0], np.cumsum(sizes))).tolist()
    for g, (a, b) in enumerate(pairwise(bounds)):
        n = b - a
        if n:
            values = v[a:b]
            mid = n // 2
            values.partition(mid)
            upper = values[mid]
            out[g] = upper if n % 2 else (upper + values[:mid].max()) / 2
    return out
