"""Per-group sums of whole-number columns under several groupings at once.

The instance summaries (and the evidence) sum the prompt and cached tokens per prefill and
per decode instance: a ``ufunc.at`` pass over every row per grouping and column (22 ms per
10M rows each, plus a float copy of an integer column). When every value is a whole number
from 0 up and every sum stays below 2**53, each partial sum is a whole number held exactly
in float64, so row order does not matter: one pass adds each row into its cell of every
grouping at once (``code_a * n_b + code_b``) and each grouping's sums are its cells' sums,
the very floats a pass per grouping adds. ``joint_sums_columns`` checks those conditions
slice by slice (``exact_sums``) and answers None for a column (sum each grouping alone) as
soon as one fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.exact_sums import exact_addends
from pdprobe.analysis.grouped import Groups, column_values, group_sums, key_groups
from pdprobe.analysis.row_slices import chunks
from pdprobe.analysis.table_cache import table_cache
from pdprobe.analysis.table_facts import know_whole

if TYPE_CHECKING:
    import pandas as pd

# The cells of every grouping at once, held as int16 codes (one slot update per row).
_CELLS_MAX: Final = np.iinfo(np.int16).max


def joint_sums_columns(groupings: list[Groups],
                       columns: list[np.ndarray]) -> list[list[np.ndarray] | None]:
    """``[g.sums(values) for g in groupings]`` (groupings of one table's rows, each covering
    every row) for each ``values`` of ``columns``, from one pass over the rows (each slice's
    cells computed once for every column: a third of a column's cost); None for a column
    where that would not give the very same floats: a value that is NaN, infinite, negative
    or not a whole number, or sums that could reach 2**53 (``exact_sums``); None for every
    column for a row without a group, fewer than two groupings or more cells than an int16
    holds."""
    shape = tuple(g.n_groups for g in groupings)
    n = columns[0].size if columns else 0
    if len(groupings) < 2 or not n or not all(g.complete for g in groupings) or \
            int(np.prod(shape)) > _CELLS_MAX:
        return [None for _ in columns]
    whole = [values.dtype.kind in "iu" for values in columns]
    cells: list[np.ndarray | None] = [
        np.zeros(int(np.prod(shape)), dtype=np.int64 if w else np.float64)
        if values.dtype.kind in "iuf" else None for values, w in zip(columns, whole, strict=True)]
    for part in chunks(n):
        if not any(c is not None for c in cells):
            break
        cell = groupings[0].codes[part].astype(np.int16)
        for g, size in zip(groupings[1:], shape[1:], strict=True):
            cell *= size
            cell += g.codes[part]
        for k, (values, is_whole, found) in enumerate(zip(columns, whole, cells, strict=True)):
            if found is None:
                continue
            v = exact_addends(values[part], n)
            if v is None:
                cells[k] = None
                continue
            if is_whole:
                v = v.astype(np.int64, copy=False)  # (uint64 below 2**53: the same values)
            np.add.at(found, cell, v)
    axes = range(len(shape))
    return [None if found is None else
            [found.reshape(shape).sum(axis=tuple(a for a in axes if a != k)).astype(np.float64)
             for k in axes] for found in cells]


def group_sums_columns(table: pd.DataFrame, keys: list[str],
                       columns: list[str]) -> list[list[np.ndarray]]:
    """``[[grouped.group_sums(table, key, column) for key in keys] for column in columns]``:
    the sums not cached yet from one pass over the rows when it gives the very same floats
    (``joint_sums_columns``: every column at once, each slice's cells computed once), else
    a pass per key and column. The joint pass reads only the keys with a sum still missing
    (two or more), and records each column it sums as whole (``know_whole``)."""
    cache = table_cache(table)
    unique = list(dict.fromkeys(columns))
    todo = [key for key in dict.fromkeys(keys)
            if any(("sums", key, column) not in cache for column in unique)]
    pending = [column for column in unique
               if any(("sums", key, column) not in cache for key in todo)]
    if len(todo) > 1 and pending:
        found = joint_sums_columns([key_groups(table, key) for key in todo],
                                   [column_values(table, column) for column in pending])
        for column, sums in zip(pending, found, strict=True):
            if sums is None:
                continue
            for key, key_sums in zip(todo, sums, strict=True):
                cache.setdefault(("sums", key, column), key_sums)
            # every value passed the test of a whole number from 0 up, sums below 2**53
            know_whole(table, column)
    return [[group_sums(table, key, column) for key in keys] for column in columns]
