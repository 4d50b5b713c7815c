"""A sampled grouping's rows picked from a derived column computed once for the bin cells.

The prefill time per token is a derived column (``grouped.Derived``: three columns read and a
division per row). Its per-bin, per-instance medians compute it at every row, a block of bins
at a time (``cells.BinCells.medians``), and its per-instance medians read it at each
instance's sampled rows (``Groups.order``), which ``row_gather.take_grouped`` computed over
every row once more (at 10M rows ~40 ms). ``GroupPicks`` takes each instance's rows from
every block's values as the cells compute them, so the column is computed once: the very
values (a row getter computes each row from that row alone), so the same medians.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pdprobe.analysis.evidence.cells import CellGroups
    from pdprobe.analysis.grouped import Column, Groups


class GroupPicks:
    """The values of a grouping's rows (``order``, group ``g``'s at ``bounds[g]:bounds[g+1]``,
    ascending within a group) in group order, filled from blocks of consecutive table rows
    handed over in row order (``put``). ``complete`` once every row was handed over; a block
    skipped over rows of the grouping, or rows not handed over as a run (``lose``), leave it
    incomplete, and its values are then not to be read."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray) -> None:
        self._order = order
        self._ends = bounds[1:].tolist()
        self._next = bounds[:-1].tolist()  # per group: its first row not picked yet
        self._lost = False
        self.values = np.empty(order.size, dtype=np.float64)

    def put(self, lo: int, block: np.ndarray) -> None:
        """Pick the grouping's rows among table rows ``lo .. lo + block.size - 1`` from
        ``block``, their values (blocks come in ascending row order)."""
        order, out = self._order, self.values
        # the bound in the positions' own type: a Python int made numpy search a converted
        # (int64) copy of each group's positions (~18 us a call, ~1 us so; at 10M rows 1,320
        # calls: ~20 ms)
        hi = order.dtype.type(lo + block.size)
        for g, (a, end) in enumerate(zip(self._next, self._ends, strict=True)):
            if a == end:
                continue
            if order[a] < lo:  # rows of the group before this block were never handed over
                self._lost = True
                return
            b = a + int(np.searchsorted(order[a:end], hi))
            if b > a:
                np.take(block, order[a:b] - lo, out=out[a:b], mode="wrap")  # (valid: in range)
                self._next[g] = b

    def lose(self) -> None:
        """Rows were read other than as a run of table rows: the picks are not to be used."""
        self._lost = True

    @property
    def complete(self) -> bool:
        """Every row of the grouping picked."""
        return not self._lost and self._next == self._ends


def medians_with_cells(groups: Groups, cells: CellGroups, values: Column,
                       no_nan: bool = False) -> tuple[np.ndarray | None, np.ndarray]:
    """``cells.medians(values)`` and, from the same computation of ``values``, each group's
    median of its (sampled) non-NaN values: ``Groups.medians``' figures (``cells.medians_of``),
    or None when the cells did not read every row as runs (then ask ``Groups``).
    ``no_nan``: the caller counted no NaN among the values (``cells.medians_of``)."""
    from pdprobe.analysis.evidence.cells import BinCells, medians_of

    if not isinstance(cells, BinCells):
        return None, cells.medians(values, no_nan=no_nan)
    picks = GroupPicks(groups.order, groups.bounds)
    per_cell = cells.medians(values, picks, no_nan=no_nan)
    if not picks.complete:
        return None, per_cell
    return medians_of(picks.values, np.diff(groups.bounds), no_nan), per_cell
