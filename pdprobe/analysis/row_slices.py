"""Full-length passes over request rows in bounded memory: slices, compact integer types.

At 10M rows a full-length temporary is tens of MB of fresh pages, and on a VM touching fresh
memory costs about 3 CPU-s of system time per GB: the grouped figures (``analysis.grouped``),
the instance summaries and the evidence run their passes over slices of ``CHUNK_ROWS`` rows
(each slice's temporaries reused by the allocator), keep codes and bins in the smallest
integer type that holds them and row positions in int32, and read derived columns through row
getters (``Column``) that are never built at full length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.grouped import Groups

# Full-length passes (counts, sums, the sample's draws) run over slices of this many rows:
# each slice's temporaries are reused by the allocator, where a whole-column temporary of 10M
# rows is 80 MB of fresh pages (on a VM about 0.25 CPU-s of system time each). Every input
# below it is one slice, so the figures are those of one pass.
CHUNK_ROWS: Final = 1 << 20

# A row getter: the values of a column (or of one derived from several) at some rows, given
# as a slice or an integer array of positions; lets derived columns be computed per slice and
# for a sample without ever being materialised at full length.
Rows = slice | np.ndarray
Column = np.ndarray | Callable[[Rows], np.ndarray]


class Derived:
    """A derived column as a row getter (``Column``) that may name a column holding NaN at
    exactly the rows where it does (``nan_like``): counting a group's values then tests that
    column's rows instead of computing the derived values of every row."""

    def __init__(self, compute: Callable[[Rows], np.ndarray],
                 nan_like: np.ndarray | None = None) -> None:
        self.compute = compute
        self.nan_like = nan_like

    def __call__(self, rows: Rows) -> np.ndarray:
        """The derived values at ``rows``."""
        return self.compute(rows)


def nan_probe(values: Column) -> Column:
    """What a NaN test of ``values`` reads: a ``Derived`` column's ``nan_like`` when it has
    one, else the values themselves."""
    probe = getattr(values, "nan_like", None)
    return values if probe is None else probe


def take_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` (same dtype) gathered ``CHUNK_ROWS`` positions at a time: numpy widens
    a positions array to intp before it gathers, a fresh 48 MB for 6M int32 positions (about
    20 ms of page faults on a VM), where a slice's widening reuses the allocator's memory.
    ``np.take``'s ``wrap`` mode reads a valid position (negative ones from the end) as
    indexing does, without the default mode's buffered copy of the output; ``rows`` must
    hold valid positions only (``-len(array) <= p < len(array)``): an out-of-range one is
    wrapped silently where indexing raised IndexError."""
    if rows.size <= CHUNK_ROWS:
        return np.take(array, rows, mode="wrap")  # (a fifth cheaper than indexing)
    out = np.empty(rows.size, dtype=array.dtype)
    for part in chunks(rows.size):
        np.take(array, rows[part], out=out[part], mode="wrap")
    return out


def take(values: Column, rows: Rows) -> np.ndarray:
    """``values`` at ``rows`` (an array indexed, a getter called) as float64.

    A getter is called ``CHUNK_ROWS`` positions at a time into one output array: its
    temporaries (each input column gathered at the rows) stay a slice long, where a
    derived column gathered at 10M sampled rows would hold three 80 MB arrays at once. A row
    getter computes each row from that row alone, so the values are the same.

    Integer ``rows`` must be valid positions of ``values``: an array is gathered with
    ``np.take``'s wrap mode (``take_rows``), which wraps an out-of-range position silently
    where indexing raised IndexError."""
    if callable(values):
        if isinstance(rows, np.ndarray) and rows.size > CHUNK_ROWS:
            out = np.empty(rows.size, dtype=np.float64)
            for part in chunks(rows.size):
                out[part] = values(rows[part])
            return out
        return np.asarray(values(rows), dtype=np.float64)
    array = np.asarray(values)
    if isinstance(rows, np.ndarray) and rows.size > CHUNK_ROWS:
        if array.dtype == np.float64:
            return take_rows(array, rows)
        out = np.empty(rows.size, dtype=np.float64)
        for part in chunks(rows.size):  # converted a slice at a time
            out[part] = array[rows[part]]
        return out
    if isinstance(rows, np.ndarray) and rows.dtype.kind in "iu":
        # positions: np.take's wrap mode, as indexing reads them (``take_rows``), a fifth
        # cheaper than indexing; only these rows converted
        return np.take(array, rows, mode="wrap").astype(np.float64, copy=False)
    return array[rows].astype(np.float64, copy=False)  # only these rows converted


def blocked_medians(groups: Groups, values: Column) -> np.ndarray:
    """``groups.medians(values)`` a block of about ``CHUNK_ROWS`` grouped rows at a time
    (``group_slices``): a group's median reads only its own values, so the figures are the
    same, but the values of every group gathered at once were a full-length temporary (80 MB
    at 10M rows unsampled, beside the capacity model's in the other thread)."""
    out = np.empty(groups.n_groups)
    for first, end, block in group_slices(groups):
        out[first:end] = block.medians(values)
    return out


def group_slices(groups: Groups, rows: int | None = None) -> Iterator[tuple[int, int, Groups]]:
    """``(first, end, block)`` for consecutive groups of at most ``rows`` grouped rows
    (``group_blocks``), ``block`` the grouping of those groups alone (the same codes, its part of
    ``order``): a figure computed block by block gathers a block's values at a time."""
    from dataclasses import replace

    bounds = groups.bounds
    for first, end in group_blocks(bounds, rows):
        lo, hi = int(bounds[first]), int(bounds[end])
        yield first, end, replace(groups, order=groups.order[lo:hi],
                                  bounds=bounds[first:end + 1] - lo,
                                  labels=groups.labels[first:end], ids=groups.ids[first:end],
                                  totals=groups.totals[first:end])


def group_blocks(bounds: np.ndarray, rows: int | None = None) -> list[tuple[int, int]]:
    """Consecutive groups ``(first, end)`` of grouped rows whose ``bounds`` (group ``g`` is
    ``bounds[g]:bounds[g + 1]``) are given, each block at most ``rows`` rows (or one group
    when a group alone is larger; ``CHUNK_ROWS`` by default): a per-group figure computed a
    block at a time gathers a block's values, not every group's at once."""
    rows = CHUNK_ROWS if rows is None else rows
    n_groups = len(bounds) - 1
    out: list[tuple[int, int]] = []
    first = 0
    while first < n_groups:
        end = int(np.searchsorted(bounds, bounds[first] + rows, side="right")) - 1
        end = min(max(end, first + 1), n_groups)
        out.append((first, end))
        first = end
    return out


def integer_array(values: Column) -> bool:
    """Whether ``values`` is an integer (or boolean) array: no row of it is NaN."""
    return isinstance(values, np.ndarray) and values.dtype.kind in "iub"


def chunks(n: int) -> list[slice]:
    """``range(n)`` as slices of at most ``CHUNK_ROWS`` rows."""
    return [slice(i, min(i + CHUNK_ROWS, n)) for i in range(0, n, CHUNK_ROWS)]


def finite_ends(values: np.ndarray) -> bool:
    """Whether the first and the last of ``values`` are finite (True for none): for values
    that never decrease (``ascending``), whether every value is, without a pass. Binning by
    runs of sorted times needs it: an infinite time's bin is not in the times' order."""
    return not len(values) or bool(np.isfinite(values[[0, -1]]).all())


def ascending(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease (so hold no NaN), checked ``CHUNK_ROWS`` at a time
    (no full-length boolean temporary)."""
    last = len(values) - 1
    return all(bool(np.all(values[lo + 1:min(lo + CHUNK_ROWS, last) + 1]
                           >= values[lo:min(lo + CHUNK_ROWS, last)]))
               for lo in range(0, last, CHUNK_ROWS))


def compact_dtype(n_codes: int) -> type[np.signedinteger[Any]]:
    """The smallest signed integer type holding -1..n_codes (codes, a spare slot, -1)."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_codes < np.iinfo(dtype).max:
            return dtype
    return np.int64


def index_dtype(n_rows: int) -> type[np.signedinteger[Any]]:
    """int32 for positions below 2**31 (half of int64's memory), else int64."""
    return np.int32 if n_rows < np.iinfo(np.int32).max else np.int64


def key_codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes (-1 for missing) and labels of a key column: a categorical's own codes and
    categories; other columns as strings, labels sorted (as ``astype(str).astype("category")``)."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        # its own (int8/int16) codes, read-only: no copy (``.cat.codes`` builds a Series of a
        # copy, 10 MB per 10M rows held by every cached grouping)
        return np.asarray(column.array.codes), [str(c) for c in column.cat.categories]
    present = column.notna().to_numpy()
    sub_codes, uniques = pd.factorize(column[present].astype(str), sort=True)
    codes = np.full(len(column), -1, dtype=compact_dtype(len(uniques)))
    codes[present] = sub_codes
    return codes, [str(u) for u in uniques]


def column_values(table: pd.DataFrame, column: str) -> np.ndarray:
    """A numeric column's own array (a view: ``take`` converts the rows it reads to float64),
    else the column as float64 with NaN for missing."""
    series = table[column]
    if series.dtype.kind in "fiu":
        return series.to_numpy()
    return series.to_numpy(dtype=np.float64, na_value=np.nan)


def distinct_codes(column: pd.Series) -> tuple[np.ndarray, list[Any]]:
    """Each row's code (-1 where missing) and the distinct values the codes index: a
    categorical's own codes and categories, else the factorized values."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):  # its own codes, read-only: no copy
        return np.asarray(column.array.codes), list(column.cat.categories)
    codes, uniques = pd.factorize(column)
    return codes, list(uniques)


# ``category_mask`` compares the codes with each passing value's code up to this many values.
FEW_CODES: Final = 4


def category_mask(column: pd.Series, test: Callable[[str], bool]) -> np.ndarray:
    """``test(str(value))`` for every row (False where missing), evaluated once per distinct
    value: on a categorical's categories, else on the factorized values. A few passing values
    (a status column: "ok" or not) are found by comparing the codes with each one's code, 4x
    cheaper than looking every row's code up in a table (numpy widens int8 codes to intp for
    the lookup: 80 MB at 10M rows)."""
    codes, values = distinct_codes(column)
    passing = [code for code, value in enumerate(values) if test(str(value))]
    if len(passing) > FEW_CODES:
        lookup = np.zeros(len(values) + 1, dtype=bool)
        lookup[passing] = True
        return lookup[codes]  # code -1 (missing) reads the trailing False
    mask = np.zeros(codes.shape, dtype=bool)
    for code in passing:
        mask |= codes == code
    return mask


# ``category_counts`` counts up to this many distinct values by comparing the codes with each
# one (a vectorised comparison of int8 codes: 10M rows of a 4-value status in 2.5 ms, where
# bincount widens every code to intp first: 28 ms).
FEW_CODES_COUNTED: Final = 16


def category_count(table: pd.DataFrame, column: str, test: Callable[[str], bool]) -> int:
    """``category_mask(table[column], test).sum()`` from the rows per distinct value (counted
    once per table and column, a slice at a time, and cached), so each test is a sum over the
    distinct values instead of a pass over every row."""
    return sum(n for value, n in category_counts(table, column).items() if test(value))


def category_counts(table: pd.DataFrame, column: str) -> dict[str, int]:
    """Rows of ``table`` per distinct value of ``column`` as ``str`` (missing values not
    counted), cached per table."""
    from pdprobe.analysis.table_cache import table_cache

    cache = table_cache(table)
    key = ("category_counts", column)
    if key not in cache:
        codes, values = distinct_codes(table[column])
        counts = np.zeros(len(values) + 1, dtype=np.int64)  # slot 0: missing (code -1)
        for part in chunks(codes.size):
            if len(values) <= FEW_CODES_COUNTED:  # a status column: one comparison per code
                c = codes[part]
                for code in range(len(values)):
                    counts[code + 1] += np.count_nonzero(c == code)
            else:
                counts += np.bincount(codes[part].astype(np.intp) + 1, minlength=counts.size)
        out: dict[str, int] = {}
        for value, n in zip(values, counts[1:].tolist(), strict=True):
            out[str(value)] = out.get(str(value), 0) + n
        cache[key] = out
    found: dict[str, int] = cache[key]
    return found


def has_values(table: pd.DataFrame, column: str) -> bool:
    """Whether ``column`` holds at least one value (``notna().any()``), cached per table: a
    dozen analyses ask it of the same request columns, each a full-length pass at 10M rows."""
    from pdprobe.analysis.table_cache import table_cache

    cache = table_cache(table)
    key = ("has_values", column)
    if key not in cache:
        cache[key] = _any_value(table[column])
    found: bool = cache[key]
    return found


def _any_value(column: pd.Series) -> bool:
    """``column.notna().any()``: a categorical's codes or a numpy float array tested a slice at
    a time, stopping at the first slice with a value (usually the first: a pass over one slice
    instead of a NaN mask of every row); other columns as pandas tests them."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = np.asarray(column.array.codes)  # -1: missing
        return any(bool((codes[part] >= 0).any()) for part in chunks(codes.size))
    if isinstance(column.dtype, np.dtype) and column.dtype.kind == "f":
        values = column.to_numpy()  # its own array: NaN is missing
        return any(not bool(np.isnan(values[part]).all()) for part in chunks(values.size))
    return bool(column.notna().any())
