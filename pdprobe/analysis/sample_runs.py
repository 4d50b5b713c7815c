"""Runs of rows for the time-block sample (``sampling.sample_intervals``): where the valid
intervals of each run of ``RUN_ROWS`` rows start and end, so that the sample's passes skip the
runs no sampled block can touch, and ranges of runs joined for reading; and the block
arithmetic the sample shares (``floor_quotient``, ``blocks_of``, ``sampled_around``).

Request records are nearly in time order, so a run of a few thousand rows covers seconds of a
capture and a sampled block (a minute in every ``k``) lies far from most runs: at 10 million
requests and one block in 25 the sampling pass read about a tenth of the rows instead of all
of them (the decode sample there is now one block in 50, the busy periods' one in 40).
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


def floor_quotient(x: np.ndarray, width: float) -> np.ndarray:
    """``x // width`` (float64): numpy's floor division, the floor of the exact quotient,
    computed as ``floor(x / width)`` (a twentieth of its cost) and by floor division only
    where the rounded quotient is a whole number. Only there can the two differ: a rounded
    quotient that is not whole has the exact one's integer part (a whole number between them
    would be nearer the exact quotient than the rounded one)."""
    q = np.divide(x, width)
    whole = np.floor(q)
    at = np.flatnonzero(whole == q)  # (NaN never equals; infinities are "whole": redone)
    if len(at):
        whole[at] = np.floor_divide(x[at], width)
    return whole


def blocks_of(s: np.ndarray, t0: float, block_s: float, n_blocks: int) -> np.ndarray:
    """The time block of each start (``floor((s - t0) / block_s)``, numpy's floor division)
    as an index into per-block tables: the valid starts' blocks lie in ``[0, n_blocks)``;
    invalid rows' (NaN) are clipped into it (garbage, masked off by the callers)."""
    with np.errstate(invalid="ignore"):
        b = floor_quotient(s - t0, block_s).astype(np.intp)
    return np.clip(b, 0, n_blocks - 1, out=b)


def sampled_around(n_blocks: int, every: int) -> tuple[np.ndarray, np.ndarray]:
    """Per block: the sampled block at or before it (-1: none) and the next sampled block
    after that one (as a float: compared with a float floor), for ``every`` and its phase."""
    phase = every // 2
    block = np.arange(n_blocks)
    prev = block - (block - phase) % every
    has_prev = prev >= 0
    # before the first sampled block, the next one is the first (``phase``)
    nxt = np.where(has_prev, prev + every, phase).astype(np.float64)
    return prev, nxt


def runs_to_read(runs: RunRanges, sampled: np.ndarray, nxt: np.ndarray, t0: float,
                 block_s: float, spans: list[tuple[np.ndarray, ...]], most: int
                 ) -> Iterator[tuple[int, int]]:
    """Row ranges of the runs ``sampling.sample_intervals``' pass reads: those whose valid
    starts' blocks hold a sampled one, or whose latest end reaches the next sampled block
    after their latest start's (``nxt``, ``sampled_around``'s; as the candidates' test
    rounds it; both monotone, so no row of another run is observed or ends that far). The
    runs not read are added to ``spans`` with their starts' blocks, for the candidates' second
    look (``sampling._candidates``); the others are read at most ``most`` rows at a time."""
    n_blocks = len(sampled)
    has = runs.start_min <= runs.start_max  # (a run without valid rows: inf > -inf)
    with np.errstate(invalid="ignore"):
        lowest = blocks_of(runs.start_min, t0, block_s, n_blocks)
        highest = blocks_of(runs.start_max, t0, block_s, n_blocks)
        end_block = np.floor(np.divide(np.subtract(runs.end_max, t0), block_s))
    upto = np.concatenate([[0], np.cumsum(sampled)])
    read = has & ((upto[highest + 1] > upto[lowest]) | (end_block >= nxt[highest]))
    rest = has & ~read
    spans.append((runs.first[rest], runs.end[rest], lowest[rest], highest[rest]))
    return merged_ranges(runs.first[read], runs.end[read], most)
