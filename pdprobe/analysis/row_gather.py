"""Gathers of grouped rows that stay in cache and in memory the allocator reuses.

A grouping's rows (``analysis.grouped``) are spread over the whole table: group after group,
each gathered value is a cache miss; and a full-length temporary above 32 MB is fresh pages
from the kernel every time (about 0.4 ms a MB of page faults on this VM) where a slice's is
reused. ``take_grouped`` reads the grouped positions a block of table rows at a time,
``code_counts`` works a slice at a time (as ``row_slices.take_rows`` gathers), ``compacted``
drops values in place. Each gives exactly the values of the plain numpy call.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from pdprobe.analysis.row_slices import Column, chunks, take

# ``take_grouped`` gathers the rows of every group a block of this many table rows at a time
# (2 MB of float64: the block stays in cache while each group reads its rows of it), in at
# most this many (block, group) pieces (one numpy call each).
GATHER_BLOCK_ROWS: Final = 1 << 18
_GATHER_PIECES_MAX: Final = 1 << 13


def take_grouped(values: Column, order: np.ndarray, bounds: np.ndarray,
                 n_rows: int) -> np.ndarray:
    """``take(values, order)`` for grouped positions of a table of ``n_rows`` rows (group
    ``g``'s are ``order[bounds[g]:bounds[g + 1]]``, ascending), read a block of about
    ``GATHER_BLOCK_ROWS`` table rows at a time: the same values in the same places.

    Every group's rows are spread over the whole column, so a gather group after group reads
    one value per cache line and the line is gone before the next group reads its neighbour
    (6M sampled rows of a 10M-row column: ~90 ms); block by block every group reads its rows
    of the block while the block is in cache (~40 ms). Each (block, group) piece is one numpy
    call, so the blocks grow with the groups (at most ``_GATHER_PIECES_MAX`` pieces). A
    getter (a derived column) is computed over a block's rows at once and picked from: at the
    sampled positions alone it would gather each of its inputs across the table (the prefill
    time per token of 6M sampled rows: 224 ms that way, ~30 ms by blocks)."""
    n_groups = len(bounds) - 1
    block = max(GATHER_BLOCK_ROWS, -(-n_rows * n_groups // _GATHER_PIECES_MAX))
    if n_groups < 2 or n_rows <= block or order.size <= block:
        return take(values, order)
    edges = np.arange(block, n_rows, block)
    # the keys in the positions' own dtype (they are table rows, so they fit): a wider key
    # has numpy search a widened copy of each group's positions (~10x the search)
    keys = edges.astype(order.dtype) if order.dtype.kind in "iu" else edges
    cuts = np.empty((n_groups, edges.size + 2), dtype=np.int64)
    cuts[:, 0], cuts[:, -1] = bounds[:-1], bounds[1:]
    for g, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
        cuts[g, 1:-1] = np.searchsorted(order[lo:hi], keys)
        cuts[g, 1:-1] += lo
    out = np.empty(order.size, dtype=np.float64)
    array = None if callable(values) else np.asarray(values)
    for k in range(edges.size + 1):
        pieces = [(lo, hi) for lo, hi in zip(cuts[:, k].tolist(), cuts[:, k + 1].tolist(),
                                             strict=True) if hi > lo]
        if not pieces:  # no group has rows in this block
            continue
        if array is not None and array.dtype == np.float64:
            for lo, hi in pieces:  # wrap: as ``row_slices.take_rows``
                np.take(array, order[lo:hi], out=out[lo:hi], mode="wrap")
            continue
        # a getter (or another dtype): computed over the block's rows as one run (a derived
        # column reads each of its inputs in order, in cache), then each piece picked from it
        start = 0 if k == 0 else int(edges[k - 1])
        got = take(values, slice(start, int(edges[k]) if k < edges.size else n_rows))
        for lo, hi in pieces:
            np.take(got, order[lo:hi] - start, out=out[lo:hi], mode="wrap")
    return out


def code_counts(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """``np.bincount(codes, minlength=n_codes)`` (codes 0 <= code < n_codes) a slice at a time:
    bincount widens its input to intp first (48 MB fresh for 6M int8 codes, 4x the count)."""
    out = np.zeros(n_codes, dtype=np.int64)
    for part in chunks(codes.size):
        out += np.bincount(codes[part], minlength=n_codes)
    return out


def compacted(v: np.ndarray, drop: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """``v[~drop]`` written over ``v``'s own front a chunk at a time (a view of it): the
    values kept from a chunk never land past where that chunk starts, so no second
    full-length array is made (80 MB at 10M float64 values)."""
    written = 0
    for start in range(0, v.size, chunk):
        kept = v[start:start + chunk][~drop[start:start + chunk]]
        v[written:written + kept.size] = kept
        written += kept.size
    return v[:written]
