"""Per-group order statistics of request columns for the evidence, and the median and
quantiles of one large array.

numpy's partition at several ranks in one call (what ``np.median``, ``np.quantile`` and a
partition at a group's figure ranks do) is many times slower on this build than a sort
(1M values: ``np.median`` 36-59 ms, ``np.sort`` 4-6 ms), and a partition even at one rank
slows down badly on values with many ties (half the queue times are 0: 26 ms at 90 % zeros).
So the per-group figures come from ``Groups.sorted`` and ``median``/``quantile`` sort a copy:
every figure read off them (``OrderStatistics``: median, linear quantiles) is the one a sort
gives, bit for bit, whatever the ties.

``request_figures`` uses it for the per-instance figures only the evidence reads (the
instance summaries compute and cache the others: ``grouped.figures``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.grouped import Groups
    from pdprobe.analysis.row_slices import Column

# Values from which ``median`` selects the middle itself (below it numpy's is as fast).
_MEDIAN_SELECT_MIN: Final = 10_000
def median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a 1-D array, bit for bit. numpy's median partitions at
    the middle rank(s) and the last one (its NaN check) in one call, the slow multi-rank
    partition (module docstring): here a sorted copy's middle value(s), averaged by
    ``np.mean`` as numpy averages them. An array with a NaN (numpy's answer: NaN), a small
    one or another dtype goes to ``np.median``."""
    a = np.asarray(values)
    if a.ndim != 1 or a.dtype != np.float64 or a.size < _MEDIAN_SELECT_MIN or \
            np.isnan(a).any():
        return float(np.median(a))
    return _sorted_median(np.sort(a))


def _sorted_median(ordered: np.ndarray) -> float:
    """``median``'s figure of sorted values: the middle value(s), averaged by ``np.mean``."""
    mid = ordered.size // 2
    middle = ordered[mid:mid + 1] if ordered.size % 2 else ordered[mid - 1:mid + 1]
    return float(np.mean(middle))


def quantile(values: np.ndarray, q: float) -> float:
    """``float(np.quantile(values, q))`` (linear) of a 1-D array, bit for bit, NaN dropped
    first (pandas' ``Series.quantile``; NaN when no value is left). numpy partitions at 0,
    the last rank and the two ranks it interpolates between in one call (the slow multi-rank
    partition, as for ``median``): here the two ranks are read off a sorted copy and
    interpolated with numpy's own arithmetic (``_lerp``: from the lower value up to
    ``q (n - 1)``'s fraction 0.5, down from the upper one from there). An array with an
    infinity, a small one or another dtype goes to ``np.quantile``."""
    a = np.asarray(values)
    if a.ndim == 1 and a.dtype == np.float64:
        nan = np.isnan(a)
        if nan.any():
            a = a[~nan]
        if not a.size:
            return float("nan")
    if a.ndim != 1 or a.dtype != np.float64 or a.size < _MEDIAN_SELECT_MIN or \
            not np.isfinite(a).all():
        return float(np.quantile(a, q))
    return _sorted_quantile(np.sort(a), q)


def _sorted_quantile(ordered: np.ndarray, q: float) -> float:
    """``quantile``'s figure of sorted finite values (numpy's linear interpolation)."""
    n = ordered.size
    virtual = (n - 1) * q
    lower = n - 1 if virtual >= n - 1 else max(int(np.floor(virtual)), 0)
    upper = min(lower + 1, n - 1) if virtual >= 0 else 0
    # numpy's fraction: against its lower index, -1 (the last) above the top
    gamma = virtual - (-1 if virtual >= n - 1 else lower)
    low, high = ordered[lower], ordered[upper]
    diff = high - low
    return float(high - diff * (1 - gamma) if gamma >= 0.5 else low + diff * gamma)


def median_and_quantile(values: np.ndarray, q: float) -> tuple[float, float]:
    """``(median(values), quantile(values, q))`` of finite values from one sorted copy where
    both would sort one (a float64 array of at least ``_MEDIAN_SELECT_MIN`` finite values:
    the same sorted array, so the same figures), else each computed alone."""
    a = np.asarray(values)
    if a.ndim == 1 and a.dtype == np.float64 and a.size >= _MEDIAN_SELECT_MIN and \
            np.isfinite(a).all():
        ordered = np.sort(a)
        return _sorted_median(ordered), _sorted_quantile(ordered, q)
    return median(a), quantile(a, q)


def quantile_figures(table: pd.DataFrame, key: str, column: str, values: Column,
                     p90: bool = True) -> dict[str, np.ndarray]:
    """Per value of ``key`` (``grouped.key_groups`` order): ``count`` (non-NaN ``values`` over
    every row), ``median`` and, with ``p90``, ``p90``: the figures ``grouped.figures`` gives,
    on a sampled grouping read off ``Groups.sorted``, else ``figures``' own. Only these small
    arrays are cached (per table, key, column and ``p90``), never the gathered column.

    Without ``p90`` a sampled grouping's medians are each group partitioned at its middle
    (the same order statistics as a sort: the same medians), a column's a block of groups at
    a time (``row_slices.blocked_medians``: each block's gather stays in memory the
    allocator reuses; at 10M rows the prefill instances' 6M sampled transfer times cost
    62 ms sorted, 48 ms so, with the CLI's heap kept). With ``p90`` a sampled grouping's
    groups are sorted, an array's a block of groups at a time (``_sorted_figures``)."""
    from pdprobe.analysis.grouped import figures, key_groups
    from pdprobe.analysis.row_slices import blocked_medians
    from pdprobe.analysis.table_cache import table_cache

    cache = table_cache(table)
    cache_key = ("evidence_quantiles", key, column, p90)
    found: dict[str, np.ndarray] | None = cache.get(cache_key)
    if found is None:
        groups = key_groups(table, key)
        if groups.sampled and not p90:
            # a getter (a derived column) in one gather over the table (``take_grouped``
            # computes it a block of table rows at a time): by blocks of groups it would be
            # computed over every row once per block
            found = {"count": groups.counts(values),
                     "median": groups.medians(values) if callable(values)
                     else blocked_medians(groups, values)}
        elif groups.sampled:
            found = {"count": groups.counts(values), **_sorted_figures(groups, values)}
        else:  # every row: each group sorted (exact figures, as ``figures`` reads them)
            figs = figures(table, key, column, values, moments=False)
            found = {"count": figs.count, "median": figs.median, "p90": figs.p90}
        cache[cache_key] = found
    return found


def _sorted_figures(groups: Groups, values: Column) -> dict[str, np.ndarray]:
    """``median`` and ``p90`` per group of a sampled grouping from its sorted values. An
    array's a block of groups at a time (``row_slices.group_slices``: a group's figures read
    only its own values, so they are the same, and the gather of every group at once, 48 MB
    for the prefill instances' 6M sampled transfer times at 10M rows, is not held); a getter's
    in one gather (by blocks of groups it would be computed over every row once per block)."""
    from pdprobe.analysis.row_slices import group_slices

    if callable(values):
        ranked = groups.sorted(values)
        return {"median": ranked.median(), "p90": ranked.quantile(0.9)}
    median, p90 = np.empty(groups.n_groups), np.empty(groups.n_groups)
    for first, end, block in group_slices(groups):
        ranked = block.sorted(values)
        median[first:end], p90[first:end] = ranked.median(), ranked.quantile(0.9)
        del ranked  # the block's gathered values, before the next block's
    return {"median": median, "p90": p90}
