"""Runs of rows for the time-block sample (``sampling.sample_intervals``): where the valid
intervals of each run of ``RUN_ROWS`` rows start and end, so that the sample's passes skip the
runs no sampled block can touch, and ranges of runs joined for reading.

Request records are nearly in time order, so a run of a few thousand rows covers seconds of a
capture and a sampled block (a minute in every ``k``) lies far from most runs: at 10 million
requests and one block in 25 (the decode sample) the sampling pass reads about a tenth of the
rows instead of all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np

# Rows per run: short against a block's rows (a minute of requests), so runs in other blocks
# are not read; long enough that the per-run figures cost little against the rows' own.
RUN_ROWS: Final = 1 << 12


@dataclass(frozen=True)
class RunRanges:
    """Per run of rows (ascending, disjoint, covering every row): its first row and end, and
    its valid intervals' earliest start, latest start and latest end (``inf``, ``-inf``,
    ``-inf`` for a run without a valid interval)."""

    first: np.ndarray
    end: np.ndarray
    start_min: np.ndarray
    start_max: np.ndarray
    end_max: np.ndarray

    @property
    def start_range(self) -> tuple[float, float]:
        """The valid intervals' earliest and latest start."""
        return float(self.start_min.min()), float(self.start_max.max())


class RunRangesBuilder:
    """``RunRanges`` gathered chunk by chunk while a caller's own pass computes the intervals
    (runs of ``RUN_ROWS`` rows from each chunk's first row)."""

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, ...]] = []

    def add(self, lo: int, start: np.ndarray, end: np.ndarray,
            valid: np.ndarray | None) -> None:
        """The runs of the chunk of rows ``lo..lo + len(start) - 1``: ``valid`` marks its valid
        intervals (None: all of them). ``start`` and ``end`` are the caller's scratch arrays:
        overwritten where not valid (in place: no masked copies of the chunk)."""
        if not len(start):
            return
        at = np.arange(0, len(start), RUN_ROWS)
        invalid = None if valid is None or valid.all() else ~valid
        if invalid is not None:  # the others must not widen a range (nor be NaN)
            np.copyto(start, np.inf, where=invalid)
        lowest = np.minimum.reduceat(start, at)
        if invalid is not None:
            np.copyto(start, -np.inf, where=invalid)
            np.copyto(end, -np.inf, where=invalid)
        self._parts.append((at + lo, np.append(at[1:], len(start)) + lo, lowest,
                            np.maximum.reduceat(start, at), np.maximum.reduceat(end, at)))

    def done(self) -> RunRanges:
        """The runs added, in row order."""
        cols = [np.concatenate([p[i] for p in self._parts]) if self._parts else
                np.zeros(0) for i in range(5)]
        return RunRanges(*cols)


def merged_ranges(starts: np.ndarray, ends: np.ndarray, most: int
                  ) -> Iterator[tuple[int, int]]:
    """The row ranges ``[starts[i], ends[i])`` (ascending, disjoint) with touching ones
    joined, cut into pieces of at most ``most`` rows."""
    if not len(starts):
        return
    cut = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    firsts, lasts = starts[np.append(0, cut)], ends[np.append(cut - 1, len(ends) - 1)]
    for lo, hi in zip(firsts.tolist(), lasts.tolist(), strict=True):
        for piece in range(lo, hi, most):
            yield piece, min(piece + most, hi)
