"""Per-group sums of one whole-number column under several groupings at once.

The instance summaries (and the evidence) sum the prompt and cached tokens per prefill and
per decode instance: a ``ufunc.at`` pass over every row per grouping and column (22 ms per
10M rows each, plus a float copy of an integer column). When every value is a whole number
from 0 up and every sum stays below 2**53, each partial sum is a whole number held exactly
in float64, so row order does not matter: one pass adds each row into its cell of every
grouping at once (``code_a * n_b + code_b``) and each grouping's sums are its cells' sums,
the very floats a pass per grouping adds. ``joint_sums`` checks those conditions slice by
slice and answers None (sum each grouping alone) as soon as one fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.grouped import Groups, column_values, group_sums, key_groups
from pdprobe.analysis.row_slices import chunks
from pdprobe.analysis.table_cache import table_cache
from pdprobe.analysis.table_facts import know_whole

if TYPE_CHECKING:
    import pandas as pd

# Whole numbers below this are exact in float64, and so is every sum of them below it.
_EXACT: Final = 1 << 53
# The cells of every grouping at once, held as int16 codes (one slot update per row).
_CELLS_MAX: Final = np.iinfo(np.int16).max


def joint_sums(groupings: list[Groups], values: np.ndarray) -> list[np.ndarray] | None:
    """``[g.sums(values) for g in groupings]`` (groupings of one table's rows, each covering
    every row) from one pass over the rows, or None where that would not give the very same
    floats: a value that is NaN, infinite, negative or not a whole number, sums that could
    reach 2**53, a row without a group, or more cells than an int16 holds."""
    shape = tuple(g.n_groups for g in groupings)
    n = values.size
    if len(groupings) < 2 or not n or not all(g.complete for g in groupings) or \
            int(np.prod(shape)) > _CELLS_MAX or values.dtype.kind not in "iuf":
        return None
    whole = values.dtype.kind in "iu"
    cells = np.zeros(int(np.prod(shape)), dtype=np.int64 if whole else np.float64)
    for part in chunks(n):
        v = values[part]
        low, high = v.min(), v.max()  # (NaN: both NaN, so the test below fails)
        # every value at most the largest, so every partial sum below 2**53 (Python ints:
        # no overflow; a float product rounds to 2**53 or above when the true one is)
        top = int(high) if whole else float(high)
        if not (low >= 0 and top * n < _EXACT):
            return None
        if whole:
            v = v.astype(np.int64, copy=False)  # (uint64 below 2**53: the same values)
        elif not np.array_equal(v, np.floor(v)):
            return None
        cell = groupings[0].codes[part].astype(np.int16)
        for g, size in zip(groupings[1:], shape[1:], strict=True):
            cell *= size
            cell += g.codes[part]
        np.add.at(cells, cell, v)
    table = cells.reshape(shape)
    axes = range(len(shape))
    return [table.sum(axis=tuple(a for a in axes if a != k)).astype(np.float64)
            for k in axes]


def group_sums_each(table: pd.DataFrame, keys: list[str], column: str) -> list[np.ndarray]:
    """``grouped.group_sums(table, key, column)`` for each of ``keys``; those not cached yet
    from one pass over the rows when it gives the very same floats (``joint_sums``), else
    one pass per key. A joint pass records the column's values as whole (``know_whole``)."""
    cache = table_cache(table)
    todo = [key for key in dict.fromkeys(keys) if ("sums", key, column) not in cache]
    if len(todo) > 1:
        found = joint_sums([key_groups(table, key) for key in todo], column_values(table, column))
        if found is not None:
            for key, sums in zip(todo, found, strict=True):
                cache[("sums", key, column)] = sums
            # every value passed the test of a whole number from 0 up, sums below 2**53
            know_whole(table, column)
    return [group_sums(table, key, column) for key in keys]
