"""Per-group order statistics of request columns for the evidence, and the median and
quantiles of one large array.

numpy's partition at several ranks in one call (what ``np.median``, ``np.quantile`` and a
partition at a group's figure ranks do) is many times slower on this build than a sort
(1M values: ``np.median`` 36-59 ms, ``np.sort`` 4-6 ms), and a partition even at one rank
slows down badly on values with many ties (half the queue times are 0: 26 ms at 90 % zeros).
So ``selected`` sorts each group's gathered values and ``median``/``quantile`` sort a copy:
every figure read off them (``OrderStatistics``: median, linear quantiles) is the one a sort
gives, bit for bit, whatever the ties.

``request_figures`` uses it for the per-instance figures only the evidence reads (the
instance summaries compute and cache the others: ``grouped.figures``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.group_figures import OrderStatistics

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.grouped import Groups
    from pdprobe.analysis.row_slices import Column

# Values from which ``median`` selects the middle itself (below it numpy's is as fast).
_MEDIAN_SELECT_MIN: Final = 10_000
# Above this many (slice, group) pairs ``gather`` gathers group after group (one Python step
# per pair: fine for instances, not for thousands of cells).
_SLICE_GROUPS_MAX: Final = 1 << 14


def gather(groups: Groups, values: Column) -> np.ndarray:
    """``groups.gather(values)`` (``values`` at the rows of ``groups.order``, group after
    group) read a slice of rows at a time: each slice's values are read as one run (a derived
    column computed on it), then every group's positions inside the slice are picked from it,
    a block of ``GATHER_BLOCK_ROWS`` of the slice's rows at a time.

    A group's positions are ascending, so its positions inside a slice (or a block) are one
    range of ``order``. Gathering group after group jumps across the whole table at every
    value (at 10M rows, 120 instances and a 6M-row sample: a group's rows every 120th row); a
    derived column read that way gathers each of its inputs at those positions: 224 ms for
    the prefill time per token of 6M sampled rows, ~50 ms a slice at a time, and ~30 ms when
    every group reads a block of the slice (2 MB, in cache) before the next block. A column
    of float64 values is gathered straight from it (``Groups.gather``: blocks of the table).
    The same values at the same places."""
    from pdprobe.analysis.row_gather import GATHER_BLOCK_ROWS
    from pdprobe.analysis.row_slices import chunks, take

    order, bounds = groups.order, groups.bounds
    parts = chunks(groups.codes.size)
    if len(parts) < 2 or groups.n_groups * len(parts) > _SLICE_GROUPS_MAX or \
            (isinstance(values, np.ndarray) and values.dtype == np.float64):
        return groups.gather(values)
    # every slice's first row and the blocks' inside it
    edges = np.unique(np.concatenate(
        [np.arange(p.start, p.stop, GATHER_BLOCK_ROWS) for p in parts]
        + [[groups.codes.size]])).astype(order.dtype)
    # cut[g, k]: where group g's positions reach edge k (in ``order``)
    cut = np.empty((groups.n_groups, len(edges)), dtype=np.int64)
    for g, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
        cut[g] = np.searchsorted(order[lo:hi], edges) + lo
    edge_at = {e: k for k, e in enumerate(edges.tolist())}
    out = np.empty(order.size, dtype=np.float64)
    for part in parts:
        block = take(values, part)
        for k in range(edge_at[part.start], edge_at[part.stop]):
            for j0, j1 in zip(cut[:, k].tolist(), cut[:, k + 1].tolist(), strict=True):
                if j1 > j0:
                    np.take(block, order[j0:j1] - part.start, out=out[j0:j1], mode="wrap")
    return out


def present(groups: Groups, values: Column) -> tuple[np.ndarray, np.ndarray]:
    """Each group's non-NaN ``values`` (gathered in group order by ``gather``, a new array)
    and their bounds: group ``g``'s values are ``v[bounds[g]:bounds[g + 1]]``, as
    ``Groups._present`` gives them from its own gather."""
    from pdprobe.analysis.row_gather import compacted

    v = gather(groups, values)
    missing = np.isnan(v)
    if not missing.any():
        return v, groups.bounds
    # the group of each missing value, from its position in group order
    where = np.searchsorted(groups.bounds, np.flatnonzero(missing), side="right") - 1
    counts = groups.sizes - np.bincount(where, minlength=groups.n_groups)
    bounds = np.zeros(groups.n_groups + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return compacted(v, missing), bounds  # in place: no second array of the gathered length


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


def selected(groups: Groups, values: Column) -> OrderStatistics:
    """Each group's non-NaN ``values`` sorted (``Groups.sorted``'s order statistics, gathered
    by ``present``), so its median and every ``quantile(q)`` read the sorted ranks."""
    v, bounds = present(groups, values)
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if end - start > 1:
            v[start:end].sort()
    return OrderStatistics(values=v, bounds=bounds, labels=groups.labels)


def quantile_figures(table: pd.DataFrame, key: str, column: str, values: Column
                     ) -> dict[str, np.ndarray]:
    """Per value of ``key`` (``grouped.key_groups`` order): ``count`` (non-NaN ``values`` over
    every row), ``median`` and ``p90``, the figures ``grouped.figures`` gives: on a sampled
    grouping read off ``selected``, else ``figures``' own. Only these small arrays are cached
    (per table, key and column), never the gathered column."""
    from pdprobe.analysis.grouped import figures, key_groups
    from pdprobe.analysis.table_cache import table_cache

    cache = table_cache(table)
    cache_key = ("evidence_quantiles", key, column)
    found: dict[str, np.ndarray] | None = cache.get(cache_key)
    if found is None:
        groups = key_groups(table, key)
        if groups.sampled:
            ranked = selected(groups, values)
            found = {"count": groups.counts(values), "median": ranked.median(),
                     "p90": ranked.quantile(0.9)}
            del ranked  # the gathered column: not held by the cache
        else:  # every row: each group sorted (exact figures, as ``figures`` reads them)
            figs = figures(table, key, column, values, moments=False)
            found = {"count": figs.count, "median": figs.median, "p90": figs.p90}
        cache[cache_key] = found
    return found
