"""Row selections on the dataset's long tables that reuse the per-signal split.

A 512-instance live capture has 1.7M metric rows; comparing every ``signal`` string each time
an analysis needs one signal was a large share of the diagnosis. ``promql`` splits a big table
by signal once (cached per table); these helpers read that split and fall back to a plain scan
on small tables.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# pd.factorize of a column, per table and column, computed once: several analyses need the
# instance of every one of 1.7M metric rows as an integer. Keyed by id() and dropped when the
# table is garbage-collected; sound because tables are not modified in place (Dataset is frozen).
_CODES: dict[int, tuple[weakref.ref[pd.DataFrame], dict[str, tuple[np.ndarray, pd.Index]]]] = {}
# Below this many rows factorizing again is as cheap as the cache.
_CODES_MIN_ROWS: Final = 50_000


# The rows of each signal, per table, split once: the analyses select by signal dozens of
# times, and scanning (then taking from) 1.7M string rows each time was most of a 512-instance
# live diagnosis. Keyed by id() and dropped when the table is garbage-collected.
_SIGNAL_FRAMES: dict[int, tuple[weakref.ref[pd.DataFrame], dict[str, pd.DataFrame]]] = {}
# Below this many rows a scan is as cheap as the split.
_SIGNAL_SPLIT_MIN_ROWS: Final = 50_000


def signal_rows(table: pd.DataFrame, signal: str) -> pd.DataFrame:
    """The rows of ``signal``, in table order and with the table's index (``table[mask]``)."""
    if len(table) < _SIGNAL_SPLIT_MIN_ROWS:
        return table[(table["signal"] == signal).to_numpy(dtype=bool, na_value=False)]
    key = id(table)
    hit = _SIGNAL_FRAMES.get(key)
    if hit is None or hit[0]() is not table:
        import pandas as pd

        codes, uniques = pd.factorize(table["signal"], use_na_sentinel=True)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
        frames = {str(u): table.take(order[bounds[i]:bounds[i + 1]])
                  for i, u in enumerate(uniques)}
        hit = (weakref.ref(table, lambda _ref: _SIGNAL_FRAMES.pop(key, None)), frames)
        _SIGNAL_FRAMES[key] = hit
    frame = hit[1].get(signal)
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
    key = id(table)
    hit = _CODES.get(key)
    if hit is None or hit[0]() is not table:
        hit = (weakref.ref(table, lambda _ref: _CODES.pop(key, None)), {})
        _CODES[key] = hit
    if column not in hit[1]:
        codes, labels = pd.factorize(table[column])
        codes.setflags(write=False)
        hit[1][column] = (codes, labels)
    return hit[1][column]
