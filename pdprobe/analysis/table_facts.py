"""Facts of the request table that several analyses read, computed once and cached per table.

The workload summary, the SLO attainment, the instance series and the evidence each ask the
same questions of millions of request rows (which requests failed, whether the arrivals are in
time order): each answer is one pass, kept in the table's cache (``table_cache``). A fact
another pass proves on its way (``know_whole``, ``know_length_range``) is recorded for the
later readers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe.analysis.row_slices import ascending, category_mask
from pdprobe.analysis.table_cache import table_cache

if TYPE_CHECKING:
    import pandas as pd


def failed_mask(table: pd.DataFrame) -> np.ndarray:
    """``category_mask(table["status"], lambda s: s != "ok")``, read-only and cached per table:
    the workload's completed rate and the SLO attainment both leave out the failed requests (a
    full pass over the status codes each, 10 MB of mask at 10M rows)."""
    cache = table_cache(table)
    found: np.ndarray | None = cache.get("failed_mask")
    if found is None:
        found = category_mask(table["status"], lambda s: s != "ok")
        found.setflags(write=False)  # shared by every reader of the cache
        cache["failed_mask"] = found
    return found


def column_ascending(table: pd.DataFrame, column: str) -> bool:
    """``ascending`` of ``table[column]`` as float64, cached per table under the key the
    evidence reads (``("ascending", column)``): the workload, the instance series and the
    evidence each ask whether the arrivals are in time order."""
    cache = table_cache(table)
    key = ("ascending", column)
    if key not in cache:
        cache[key] = ascending(table[column].to_numpy(dtype=np.float64))
    found: bool = cache[key]
    return found


def know_whole(table: pd.DataFrame, column: str) -> None:
    """Record that every value of ``table[column]`` is a whole number from 0 up (none NaN)
    and ``len(table)`` times the largest stays below 2**53, as the instance summaries' token
    sums (``joint_sums``) found on their way: the evidence's per-bin token sums
    (``evidence.cell_sums``) then skip their own test of every value (a floor, a comparison,
    a minimum and a maximum of each row)."""
    table_cache(table)[("whole", column)] = True


def known_whole(table: pd.DataFrame, column: str) -> bool:
    """Whether ``know_whole(table, column)`` was recorded (False: not known, either way)."""
    return bool(table_cache(table).get(("whole", column), False))


def know_length_range(table: pd.DataFrame, column: str, counts: np.ndarray) -> None:
    """Record the smallest and largest value of ``table[column]``, an integer column whose
    every row ``counts`` counts by value (``length_counts``: rows per value ``0..max``, so no
    negative one), as the workload summary found them on its way. The capacity mix
    (``capacity.population.known_rows``) then knows, without a test of each row, that every
    prompt holds a token and every output is whole (integers hold no NaN): with the arrivals
    known to be in time order (``column_ascending``), every record is usable."""
    present = np.flatnonzero(counts)
    if len(present):
        table_cache(table)[("length_range", column)] = (int(present[0]), int(present[-1]))


def known_length_range(table: pd.DataFrame, column: str) -> tuple[int, int] | None:
    """``(smallest, largest)`` of ``table[column]`` when ``know_length_range`` recorded it."""
    found: tuple[int, int] | None = table_cache(table).get(("length_range", column))
    return found


def column_sum(table: pd.DataFrame, name: str) -> float:
    """numpy's sum of ``table[name]`` as float64 (NaN or infinite when a value is NaN or
    infinite), cached per table: the transfer figures add the KV bytes, and a finite total
    tells them, the failure figures and the per-bin series that no value needs a NaN test
    (``column_finite``; a pass of every row each)."""
    cache = table_cache(table)
    key = ("column_sum", name)
    if key not in cache:
        cache[key] = table[name].to_numpy(dtype="float64").sum()
    found: float = cache[key]
    return found


def column_finite(table: pd.DataFrame, name: str) -> bool:
    """Whether ``column_sum(table, name)`` is finite: then no value of the column is NaN or
    infinite (either makes the sum so), and a reader skips its test of every row for one."""
    return bool(np.isfinite(column_sum(table, name)))
