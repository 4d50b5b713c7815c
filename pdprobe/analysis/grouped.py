"""The groupings of a request table, cached, and the figures read off them.

``groups.Groups`` holds rows grouped by integer codes and reads counts, sums, maxima, medians
and sorted groups off them; this module makes one grouping per key column of a request table
(``key_groups``, ``key_groupings``), caches it with the figures read off it (``figures``,
``group_sums``) and decides which rows quantiles are read from.

Above ``QUANTILE_EXACT_ROWS`` rows the quantiles (never the counts, sums, means or maxima, which
stay exact) are read from a sample: every row of a group of at most ``GROUP_SAMPLE_MAX`` rows,
and a fixed-seed random ``GROUP_SAMPLE_MAX / rows`` of each larger group (a Bernoulli sample
per row, so a round-robin router's period cannot alias it). A quantile read from ``m`` sampled
values has a rank error of about ``sqrt(q (1 - q) / m)`` (one standard deviation): at
``m = 50,000`` that is 0.22 percentage points for the median, 0.13 for p90 and 0.045 for p99,
e.g. a p90 read between the true p89.7 and p90.3 (two deviations). The per-bin, per-instance
cells use ``CELL_SAMPLE_MAX`` (median within about 1.1 points, one deviation). Every bundled
input, simulated scenario and public trace is below ``QUANTILE_EXACT_ROWS``: exact.

``key_groups`` and ``figures`` cache their answer per request table and column (keyed by
``id()``, dropped when the table is garbage-collected; sound because tables are never modified
in place), so the instance summaries and the evidence read one computation. The cache holds
only the grouping of each key and the small per-group figures, never a sorted copy of a
column: a categorical key's own int8/int16 codes (no copy when every category is used) and
int32 positions of the rows its quantiles read (the sample above ``QUANTILE_EXACT_ROWS``).

Counts, sums and the sample run over row slices in compact types (``row_slices``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.analysis.group_figures import GroupFigures, SortedGroups
from pdprobe.analysis.group_plan import GroupPlan
from pdprobe.analysis.groups import SAMPLE_SEED, Groups
from pdprobe.analysis.row_sample import sample_rows, sample_rows_each
from pdprobe.analysis.row_slices import (
    Column,
    Derived,
    Rows,
    category_mask,
    chunks,
    column_values,
    compact_dtype,
    key_codes,
    take,
)
from pdprobe.analysis.stable_order import stable_order
from pdprobe.analysis.table_cache import table_cache

# the row helpers the analyses import from here with the groupings
__all__ = ["SAMPLE_SEED", "Column", "Derived", "GroupFigures", "Groups", "Rows", "SortedGroups",
           "category_mask", "chunks", "column_values", "compact_dtype", "key_codes",
           "stable_order", "take"]

if TYPE_CHECKING:
    import pandas as pd

# Tables up to this many rows get exact quantiles; above it quantiles come from a sample
# (module docstring): sorting 10M rows per column and grouping is most of the cost of a
# diagnosis, while a million rows already pin every quantile the rules read.
QUANTILE_EXACT_ROWS: Final = 1_000_000
# Values per group a sampled quantile is read from: p90 within 0.13 percentage points of rank
# (one standard deviation), far below what any rule threshold resolves.
GROUP_SAMPLE_MAX: Final = 50_000
# Values per (bin, instance) cell for the per-bin medians of persistence checks (a cell's median
# within about 1.1 points of rank): thousands of cells must not each sort their full rows.
CELL_SAMPLE_MAX: Final = 2_000
# Whole-column quantiles of a table above QUANTILE_EXACT_ROWS (cluster TTFT p90, median
# transfer time, ...) are read from a sample of about this many rows: p90 within 0.03
# percentage points of rank (one standard deviation).
COLUMN_SAMPLE_ROWS: Final = 1_000_000


def sample_max(table_rows: int, per_group: int) -> int | None:
    """``Groups.of``'s ``sample_max`` for a table of ``table_rows`` rows: None (every row) up
    to ``QUANTILE_EXACT_ROWS``, else ``per_group``."""
    return None if table_rows <= QUANTILE_EXACT_ROWS else per_group


def quantile_rows(table: pd.DataFrame) -> np.ndarray | None:
    """Rows whole-column quantiles of ``table`` are read from: None (every row) up to
    ``QUANTILE_EXACT_ROWS``, else a fixed-seed random sample of about ``COLUMN_SAMPLE_ROWS``
    rows in row order (cached per table)."""
    n = len(table)
    if n <= QUANTILE_EXACT_ROWS:
        return None
    cache = table_cache(table)
    if "quantile_rows" not in cache:
        # the draws of one rate for every row, taken slice by slice (no array per row)
        rows = sample_rows(n, _column_rate(n), SAMPLE_SEED)
        rows.setflags(write=False)
        cache["quantile_rows"] = rows
    found: np.ndarray = cache["quantile_rows"]
    return found


def _column_rate(n: int) -> np.ndarray:
    """The rate ``quantile_rows`` draws a table of ``n`` rows at (as a one-code rate array)."""
    return np.array([COLUMN_SAMPLE_ROWS / n], dtype=np.float32)


def for_quantiles(table: pd.DataFrame, values: Any) -> Any:
    """``values`` (an array or series aligned with ``table``'s rows) on ``quantile_rows``: the
    very same object below the threshold."""
    rows = quantile_rows(table)
    if rows is None:
        return values
    # np.take's wrap mode reads the valid positions as indexing does, a fifth cheaper, but
    # wraps an out-of-range one where indexing raised: the rows are the table's, so
    # ``values`` must be as long as the table for each position to be the row meant
    assert np.shape(values)[0] == len(table), "values not aligned with the table's rows"
    return values.iloc[rows] if hasattr(values, "iloc") else \
        np.take(np.asarray(values), rows, axis=0, mode="wrap")


def key_groupings(table: pd.DataFrame, keys: list[str]) -> list[Groups]:
    """``key_groups(table, key)`` for each of ``keys``; those not cached yet are made together,
    and with them ``quantile_rows(table)``: their samples come from one stream of draws
    (``row_sample.sample_rows_each``), the same rows as each drawn alone (one seed), with the
    draws taken once (about 17 ms per 10M rows saved for each further sample)."""
    cache = table_cache(table)
    todo = [key for key in dict.fromkeys(keys) if ("groups", key) not in cache]
    per_group = sample_max(len(table), GROUP_SAMPLE_MAX)
    plans = [GroupPlan.of(*table_key_codes(table, key), sample_max=per_group,
                          counts=cache.get(("code_counts", key))) for key in todo]
    samples: list[tuple[np.ndarray | int, np.ndarray]] = [
        plan.draws() for plan in plans if plan.rate is not None]
    column_sample = bool(samples) and len(table) > QUANTILE_EXACT_ROWS and \
        "quantile_rows" not in cache
    if column_sample:
        samples.append((len(table), _column_rate(len(table))))
    rows = sample_rows_each(samples, SAMPLE_SEED) if samples else []
    if column_sample:
        rows[-1].setflags(write=False)
        cache["quantile_rows"] = rows[-1]
    drawn_rows = iter(rows)
    for key, plan in zip(todo, plans, strict=True):
        cache[("groups", key)] = Groups(**plan.fields(None if plan.rate is None
                                                      else next(drawn_rows)))
    return [key_groups(table, key) for key in keys]


def key_groups(table: pd.DataFrame, key: str) -> Groups:
    """The rows of ``table`` grouped by the key column ``key`` (cached per table)."""
    cache = table_cache(table)
    if ("groups", key) not in cache:
        cache[("groups", key)] = Groups.of(*table_key_codes(table, key),
                                           sample_max=sample_max(len(table), GROUP_SAMPLE_MAX),
                                           counts=cache.get(("code_counts", key)))
    found: Groups = cache[("groups", key)]
    return found


def know_code_counts(table: pd.DataFrame, key: str, counts: np.ndarray) -> None:
    """Record the rows of ``table`` per code of ``key`` (every label of ``table_key_codes``)
    as another pass over every row counted them (the instance summaries' TTFT series): the
    grouping of ``key`` made later (``key_groupings``) takes them instead of counting every
    row again, when they add up to every row."""
    table_cache(table)[("code_counts", key)] = counts


def table_key_codes(table: pd.DataFrame, key: str) -> tuple[np.ndarray, list[str]]:
    """``key_codes(table[key])``, cached per table: a string key factorized once for its
    grouping and the instance series (no copy kept: a categorical's own codes, or the array
    the grouping holds when every value is used)."""
    cache = table_cache(table)
    found: tuple[np.ndarray, list[str]] | None = cache.get(("key_codes", key))
    if found is None:
        codes, labels = key_codes(table[key])
        codes.setflags(write=False)  # shared by every reader of the cache
        found = cache[("key_codes", key)] = (codes, labels)
    return found


def figures(table: pd.DataFrame, key: str, column: str, values: Column | None = None,
            moments: bool = True) -> GroupFigures:
    """Count, mean, max, median and p50/p90/p99 of ``column`` per value of ``key`` (cached per
    table; ``values`` stands in for a column derived from the table under that name). Without
    ``moments`` the mean and max may be NaN (``GroupFigures.measure``)."""
    cache = table_cache(table)
    found: GroupFigures | None = cache.get(("figures", key, column))
    if found is None or (moments and not found.moments):
        groups = key_groups(table, key)
        data = column_values(table, column) if values is None else values
        known = cache.get(("known_sums", key, column))
        found = GroupFigures.measure(groups, data, moments, None if known is None else
                                     (known[0][groups.ids], known[1][groups.ids]))
        cache[("figures", key, column)] = found
    return found


def know_sums(table: pd.DataFrame, key: str, column: str, counts: np.ndarray,
              sums: np.ndarray) -> None:
    """Record the non-NaN values and their sum of ``column`` per code of ``key`` (every
    label of ``table_key_codes``, used or not) as another pass over every row found them (the
    instance summaries' TTFT series): ``figures`` of a sampled grouping reads its count and
    mean off them instead of a pass of its own (the same counts, sums up to the last bits)."""
    table_cache(table)[("known_sums", key, column)] = (counts, sums)


def group_sums(table: pd.DataFrame, key: str, column: str) -> np.ndarray:
    """Sum of ``column``'s non-NaN values per value of ``key`` (``key_groups`` order; cached)."""
    cache = table_cache(table)
    if ("sums", key, column) not in cache:
        cache[("sums", key, column)] = key_groups(table, key).sums(column_values(table, column))
    found: np.ndarray = cache[("sums", key, column)]
    return found
