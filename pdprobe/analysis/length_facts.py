"""The range of a request table's integer length columns, kept per table once found.

The workload summary counts every request per prompt and output length
(``length_shape.length_counts``); the smallest and largest length fall out of the counts. The
capacity mix (``capacity.mix.mix_from_requests``) then knows, without a test of each row, that
every prompt holds a token and every output is whole (integers hold no NaN): with the
arrivals known to be in time order (``table_facts.column_ascending``), every record is usable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe.analysis.table_cache import table_cache

if TYPE_CHECKING:
    import pandas as pd


def know_length_range(table: pd.DataFrame, column: str, counts: np.ndarray) -> None:
    """Record the smallest and largest value of ``table[column]``, an integer column whose
    every row ``counts`` counts by value (``length_counts``: rows per value ``0..max``)."""
    present = np.flatnonzero(counts)
    if len(present):
        table_cache(table)[("length_range", column)] = (int(present[0]), int(present[-1]))


def known_length_range(table: pd.DataFrame, column: str) -> tuple[int, int] | None:
    """``(smallest, largest)`` of ``table[column]`` when ``know_length_range`` recorded it."""
    found: tuple[int, int] | None = table_cache(table).get(("length_range", column))
    return found
