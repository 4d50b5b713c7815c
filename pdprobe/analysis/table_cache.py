"""Figures computed from one of the dataset's long tables, kept as long as the table lives.

Several analyses need the same derived arrays of a big table (the instance codes of 1.7M metric
rows, the rows of each signal, per-instance request groupings): computing them once per table
was a large share of a diagnosis. The cache is keyed by ``id()`` and dropped when the table is
garbage-collected; sound because tables are not modified in place (``Dataset`` is frozen).
Callers namespace their keys (``("codes", column)``, ``("groups", key)``, ...).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

_CACHE: dict[int, tuple[weakref.ref[pd.DataFrame], dict[Any, Any]]] = {}
# The capacity model and the evidence run in two threads over the same tables: both must get
# the same dict (a figure computed twice is only waste; a dict replaced would lose figures).
_LOCK = threading.Lock()


def table_cache(table: pd.DataFrame) -> dict[Any, Any]:
    """A dict of figures computed from ``table``, kept as long as the table lives."""
    key = id(table)
    hit = _CACHE.get(key)
    if hit is None or hit[0]() is not table:
        with _LOCK:
            hit = _CACHE.get(key)
            if hit is None or hit[0]() is not table:
                hit = (weakref.ref(table, lambda _ref: _CACHE.pop(key, None)), {})
                _CACHE[key] = hit
    return hit[1]
