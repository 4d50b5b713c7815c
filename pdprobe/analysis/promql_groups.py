"""Window increases of a signal's cumulative rows from a sort done once per table.

``window_increase`` (``promql_grouped``) factorizes the key columns, sorts every row and takes the
key strings again on each call. A live diagnosis of 512 instances asks for the increases of the
same few histogram and counter signals over different windows and instance sets a hundred
times; here each (signal rows, kind, key) is sorted once (cached while its rows live, like
``tables.signal_rows``) and every call is a pass of numpy over the sorted rows. The result is
``window_increase``'s, value for value and row for row.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pdprobe.analysis.table_cache import table_cache
from pdprobe.promql_grouped import SortedGroups, group_sorted, increase_within

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class KindGroups:
    """The rows of one kind (value known) of a signal's rows, grouped by key and time-sorted."""

    groups: SortedGroups  # order: positions in ``rows``
    rows: np.ndarray  # positions in the signal's rows of the kind's rows
    first_key: pd.DataFrame  # the key columns at each group's first row (dtypes kept)




def kind_groups(rows: pd.DataFrame, kind: str, cols: list[str]) -> KindGroups:
    """``rows`` (one signal's rows) of ``kind`` with a value, grouped by ``cols`` then time."""
    cache = table_cache(rows)  # per signal-rows frame
    spec = ("kind groups", kind, tuple(cols))
    found: KindGroups | None = cache.get(spec)
    if found is None:
        keep = ((rows["kind"] == kind) & rows["value"].notna()).fillna(False).to_numpy(dtype=bool)
        picked = np.flatnonzero(keep)
        frame = rows[[*cols, "ts", "value"]].take(picked)
        g = group_sorted(frame, cols, dropna=False)
        found = KindGroups(g, picked, g.key_frame(frame, cols, g.starts))
        cache[spec] = found
    return found


def increase_in_window(kg: KindGroups, cols: list[str], start_ts: float | None,
                       end_ts: float | None, from_zero: bool,
                       instances: Collection[str] | None = None) -> pd.DataFrame:
    """``promql_grouped.window_increase`` of the kind's rows (of ``instances``, the first key
    column, when given): per group with a sample up to ``end_ts``, its increase; groups sorted
    by key."""
    import pandas as pd

    g = kg.groups
    ts = g.ts
    upto = np.ones(len(ts), dtype=bool) if end_ts is None else ts <= end_ts
    n_end = (np.add.reduceat(upto.astype(np.int64), g.starts) if len(g.starts)
             else np.zeros(0, dtype=np.int64))
    use = n_end > 0
    if instances is not None and len(g.starts):
        use &= _first_key_in(kg, cols[0], instances)
    if not use.any():
        return pd.DataFrame(columns=[*cols, "increase"])
    sel = np.flatnonzero(use)
    counts = None
    if start_ts is not None:
        # Samples at or before the start, and strictly before it, among those up to the end.
        counts = (np.add.reduceat((upto & (ts <= start_ts)).astype(np.int64), g.starts)[sel],
                  np.add.reduceat((upto & (ts < start_ts)).astype(np.int64), g.starts)[sel])
    inc = increase_within(g.values, ts, g.starts[sel], n_end[sel], start_ts, counts, from_zero)
    out = kg.first_key.take(sel).reset_index(drop=True)
    out["increase"] = inc
    return out


def _first_key_in(kg: KindGroups, col: str, wanted: Collection[str]) -> np.ndarray:
    """``kg.first_key[col].isin(wanted)`` (missing keys never in): one membership test per
    distinct key (a few hundred instances) instead of per group, codes cached per groups."""
    cache = table_cache(kg.first_key)
    found = cache.get(("key codes", col))
    if found is None:
        import pandas as pd

        codes, labels = pd.factorize(kg.first_key[col], use_na_sentinel=True)
        found = cache[("key codes", col)] = (codes, list(labels))
    codes, uniques = found
    chosen = wanted if isinstance(wanted, (set, frozenset, dict)) else set(wanted)
    member = np.fromiter((u in chosen for u in uniques), dtype=bool, count=len(uniques))
    return np.append(member, False)[codes]
