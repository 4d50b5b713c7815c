"""Stable orders of integer codes in bounded memory: the rows of each group in row order.

A grouping orders its rows by group (``group_plan``, ``evidence.cells``): numpy's stable
argsort answers in int64 (80 MB at 10M rows); here each ``CHUNK_ROWS`` slice is sorted on its
own (8- and 16-bit codes by numpy's radix sort) and its rows of each group copied to where
they belong, the same positions as one stable sort in ``index_dtype`` integers.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from pdprobe.analysis import row_slices

# numpy's stable sort of 8- and 16-bit integers is a radix sort (linear in rows); codes with
# more groups than an int16 holds are sorted as two 15-bit digits, least significant first.
_RADIX_MAX: Final = 1 << 15


def stable_order(codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Positions of ``codes`` (0 <= code < n_groups) sorted by code, equal codes in row order,
    as ``index_dtype`` integers (int32 below 2**31 rows).

    Above ``CHUNK_ROWS`` rows each slice is sorted on its own and its rows of each group copied
    to where they belong (after every smaller group's rows and this group's rows of earlier
    slices): the same positions as one stable sort, but numpy's argsort answers in int64, so a
    whole-column sort held 80 MB at 10M rows (plus the int32 copy callers keep) where this holds
    the 40 MB answer and one slice's temporaries."""
    return stable_take_counted(codes, n_groups, None)[0]


def stable_take_counted(codes: np.ndarray, n_groups: int,
                        values: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``values[stable_order(codes, n_groups)]`` (``values`` aligned with ``codes``; None:
    ``stable_order`` itself), each slice's values gathered within the slice (the rows a sampled
    grouping keeps, ordered by their codes, without a gather over the whole array: every
    group's rows spread over all of it, a cache miss per row), and the rows per code
    (``np.bincount(codes, minlength=n_groups)``): the ordering counts each slice's codes to place its rows, and those
    counts are the groups' bounds a caller needs (a second count of every code was 13 ms for
    the 8M sampled rows of two groupings at 10M rows)."""
    c = np.asarray(codes)
    n = c.size
    dtype = row_slices.index_dtype(n) if values is None else values.dtype
    parts = row_slices.chunks(n)
    step = min(row_slices.CHUNK_ROWS, _STABLE_SLICE_ROWS)
    if len(parts) > 1 and n_groups * -(-n // step) <= _SLICE_COPIES_MAX:
        # a few groups: slices that stay in cache (the sampled rows of 120 instances at 10M
        # rows: 37 ms instead of 52), each group's rows of a slice one block copy
        parts = [slice(i, min(i + step, n)) for i in range(0, n, step)]
    # one slice, or a huge count table
    if len(parts) < 2 or n_groups * len(parts) > row_slices.CHUNK_ROWS:
        order = _sorted_positions(c, n_groups)
        taken = order.astype(dtype, copy=False) if values is None else values[order]
        sizes = np.zeros(n_groups, dtype=np.int64)
        for part in parts:  # (as ``row_gather.code_counts``: no intp copy of every code)
            sizes += np.bincount(c[part], minlength=n_groups)
        return taken, sizes
    counts = np.zeros((len(parts), n_groups), dtype=np.int64)
    for k, part in enumerate(parts):
        counts[k] = np.bincount(c[part], minlength=n_groups)
    # where slice k's rows of group g start in the answer
    first = np.cumsum(counts, axis=0) - counts
    totals = counts.sum(axis=0)
    first += (np.cumsum(totals) - totals)[None, :]
    out = np.empty(n, dtype=dtype)
    by_group = n_groups * len(parts) <= _SLICE_COPIES_MAX
    for k, part in enumerate(parts):
        local = _sorted_positions(c[part], n_groups)
        if values is None:
            local += part.start
        else:
            local = np.take(values[part], local)
        if by_group:  # a few groups: one block copy per group (no per-row destinations)
            at = 0
            for dst, m in zip(first[k].tolist(), counts[k].tolist(), strict=True):
                out[dst:dst + m] = local[at:at + m]
                at += m
        else:
            dest = np.repeat(first[k] - (np.cumsum(counts[k]) - counts[k]), counts[k])
            dest += np.arange(local.size)
            out[dest] = local
    return out, totals


# Above this many (slice, group) pairs ``stable_order`` scatters each slice's rows to their
# places in one call instead of copying group by group (a Python step per pair).
_SLICE_COPIES_MAX: Final = 1 << 14
# ``stable_take_counted`` of more than ``CHUNK_ROWS`` rows of a few groups sorts slices of this
# many rows: a slice's positions (1 MB of int64) and values stay in the 2 MB L2 cache while
# they are gathered, where a ``CHUNK_ROWS`` slice's spilled (a third of the time).
_STABLE_SLICE_ROWS: Final = 1 << 17


def _sorted_positions(c: np.ndarray, n_groups: int) -> np.ndarray:
    """``stable_order`` of one array in one sort (int64 positions, numpy's answer)."""
    if n_groups <= np.iinfo(np.uint8).max + 1:  # one 8-bit radix pass: a third faster than two
        # as unsigned bytes (the codes are never negative): numpy's stable argsort of uint8
        # takes 3.8 ms per million rows where int8's took 6.3 (int16's 4.7)
        unsigned = c.view(np.uint8) if c.dtype == np.int8 else c.astype(np.uint8)
        return np.argsort(unsigned, kind="stable")
    if n_groups <= _RADIX_MAX:
        return np.argsort(c.astype(np.int16, copy=False), kind="stable")
    if n_groups <= _RADIX_MAX * _RADIX_MAX:
        low = np.argsort((c % _RADIX_MAX).astype(np.int16), kind="stable")
        high = (c[low] // _RADIX_MAX).astype(np.int16)
        return low[np.argsort(high, kind="stable")]
    return np.argsort(c, kind="stable")
