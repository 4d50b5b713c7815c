"""Row selections on the dataset's long tables that reuse the per-signal split.

A 512-instance live capture has 1.7M metric rows; comparing every ``signal`` string each time
an analysis needs one signal was a large share of the diagnosis. ``promql`` splits a big table
by signal once (cached per table); these helpers read that split and fall back to a plain scan
on small tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.table_cache import table_cache

if TYPE_CHECKING:
    import pandas as pd

# pd.factorize of a column is computed once per table and column (``table_cache``): several
# analyses need the instance of every one of 1.7M metric rows as an integer. Below this many
# rows factorizing again is as cheap as the cache.
_CODES_MIN_ROWS: Final = 50_000


# The rows of each signal are split once per table (``table_cache``): the analyses select by
# signal dozens of times, and scanning (then taking from) 1.7M string rows each time was most of
# a 512-instance live diagnosis. Below this many rows a scan is as cheap as the split.
_SIGNAL_SPLIT_MIN_ROWS: Final = 50_000


def signal_rows(table: pd.DataFrame, signal: str) -> pd.DataFrame:
    """The rows of ``signal``, in table order and with the table's index (``table[mask]``)."""
    if len(table) < _SIGNAL_SPLIT_MIN_ROWS:
        return table[(table["signal"] == signal).to_numpy(dtype=bool, na_value=False)]
    cache = table_cache(table)
    frames = cache.get("signal frames")
    if frames is None:
        import pandas as pd

        codes, uniques = pd.factorize(table["signal"], use_na_sentinel=True)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
        frames = cache["signal frames"] = {str(u): table.take(order[bounds[i]:bounds[i + 1]])
                                           for i, u in enumerate(uniques)}
    frame = frames.get(signal)
    return frame if frame is not None else table.iloc[0:0]


def has_signal(table: pd.DataFrame, signal: str) -> bool:
    """Whether any row of ``table`` carries ``signal``."""
    return len(signal_rows(table, signal)) > 0


def signals_present(table: pd.DataFrame, signals: Iterable[str]) -> list[str]:
    """The ``signals`` with rows in ``table``, in the order given."""
    return [s for s in signals if has_signal(table, s)]


def column_codes(table: pd.DataFrame, column: str) -> tuple[np.ndarray, pd.Index]:
    """``pd.factorize(table[column])``: codes (-1 where missing, read-only) and the labels in
    order of first appearance. Cached per table for big tables."""
    import pandas as pd

    if len(table) < _CODES_MIN_ROWS:
        return pd.factorize(table[column])
    cache = table_cache(table)
    found = cache.get(("codes", column))
    if found is None:
        codes, labels = pd.factorize(table[column])
        codes.setflags(write=False)
        found = cache[("codes", column)] = (codes, labels)
    return found
