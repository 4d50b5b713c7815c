"""A sampled grouping's rows picked from a derived column computed a slice of rows at a time.

The prefill time per token is a derived column (``grouped.Derived``: three columns read and a
division per row). Its per-instance medians read it at each instance's sampled rows
(``Groups.order``, 60 % of the rows at 10M): computed over every row a slice at a time, each
instance's rows of the slice picked (``GroupPicks``). The very values (a row getter computes
each row from that row alone), so the same medians. (Its per-bin, per-instance medians, which
a rule reads only for a straggler, are computed when read: ``frame_bins``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pdprobe.analysis.grouped import Column, Groups


class GroupPicks:
    """The values of a grouping's rows (``order``, group ``g``'s at ``bounds[g]:bounds[g+1]``,
    ascending within a group) in group order, filled from blocks of consecutive table rows
    handed over in row order (``put``). ``complete`` once every row was handed over; a block
    that skipped over rows of the grouping leaves it incomplete, and its values are then not
    to be read."""

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

    @property
    def complete(self) -> bool:
        """Every row of the grouping picked."""
        return not self._lost and self._next == self._ends


def picked_medians(groups: Groups, values: Column, no_nan: bool = False) -> np.ndarray:
    """Each group's median of its (sampled) non-NaN ``values``: ``Groups.medians``' figures
    (``cells.medians_of``: the same order statistics), with ``values`` computed a slice of
    table rows at a time (``row_slices.chunks``) and each group's rows picked from the slice
    (``GroupPicks``). For a derived column: ``Groups.medians`` computes it a block of
    ``row_gather.GATHER_BLOCK_ROWS`` at a time and picks every group's rows of each block in
    a call per (block, group) piece, 4x the pieces (at 10M rows 92 -> 71 ms). ``no_nan``: the
    caller counted no NaN among the values."""
    from pdprobe.analysis.evidence.cells import medians_of
    from pdprobe.analysis.row_slices import chunks, take

    picks = GroupPicks(groups.order, groups.bounds)
    for part in chunks(groups.codes.size):
        picks.put(part.start, take(values, part))
    assert picks.complete  # every table row handed over, in order
    return medians_of(picks.values, np.diff(groups.bounds), no_nan)
