"""Per-group order statistics of request columns for the evidence, one rank at a time.

``Groups.selected`` (``analysis.grouped``) partitions each group at every rank its median and
quantiles read with one ``ndarray.partition(kth)`` call. numpy's multi-rank partition is
several times slower than a partition at a single rank (on this build also slower than
sorting the group outright): at 50,000 values 0.43–0.54 ms against 0.08 ms. ``selected``
here partitions each group at its ranks in ascending order, each on what lies right of the
previous one: every rank then holds the value a sort puts there, so every figure read off
them (``OrderStatistics``: median, linear quantiles) is the same bit for bit. ``median`` is
``np.median`` of one large array the same way (numpy's own partitions at several ranks).

``request_figures`` uses it for the per-instance figures only the evidence reads (the
instance summaries compute and cache the others: ``grouped.figures``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.group_figures import OrderStatistics, figure_ranks

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.grouped import Groups
    from pdprobe.analysis.row_slices import Column

# Values moved forward at once when a gathered column's NaNs are dropped (``present``).
_COMPACT_CHUNK: Final = 1 << 20
# Values from which ``median`` selects the middle itself (below it numpy's is as fast).
_MEDIAN_SELECT_MIN: Final = 10_000
# Above this many (slice, group) pairs ``gather`` gathers group after group (one Python step
# per pair: fine for instances, not for thousands of cells).
_SLICE_GROUPS_MAX: Final = 1 << 14


def gather(groups: Groups, values: Column) -> np.ndarray:
    """``groups.gather(values)`` (``values`` at the rows of ``groups.order``, group after
    group) read a slice of rows at a time: each slice's values are read as one run (a derived
    column computed on it), then every group's positions inside the slice are picked from it.

    A group's positions are ascending, so its positions inside a slice are one range of
    ``order``. Gathering group after group jumps across the whole table at every value (at
    10M rows, 120 instances and a 6M-row sample: a group's rows every 120th row); a derived
    column read that way gathers each of its inputs at those positions: 224 ms for the
    prefill time per token of 6M sampled rows, ~50 ms a slice at a time. The same values at
    the same places."""
    from pdprobe.analysis.row_slices import chunks, take

    order, bounds = groups.order, groups.bounds
    parts = chunks(groups.codes.size)
    if len(parts) < 2 or groups.n_groups * len(parts) > _SLICE_GROUPS_MAX:
        return groups.gather(values)
    edges = np.array([p.start for p in parts] + [groups.codes.size], dtype=order.dtype)
    # cut[g, k]: where group g's positions reach slice k's first row (in ``order``)
    cut = np.empty((groups.n_groups, len(edges)), dtype=np.int64)
    for g, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
        cut[g] = np.searchsorted(order[lo:hi], edges) + lo
    out = np.empty(order.size, dtype=np.float64)
    for k, part in enumerate(parts):
        block = take(values, part)
        for j0, j1 in zip(cut[:, k].tolist(), cut[:, k + 1].tolist(), strict=True):
            if j1 > j0:
                out[j0:j1] = block[order[j0:j1] - part.start]
    return out


def present(groups: Groups, values: Column) -> tuple[np.ndarray, np.ndarray]:
    """Each group's non-NaN ``values`` (gathered in group order, a new array) and their
    bounds: group ``g``'s values are ``v[bounds[g]:bounds[g + 1]]`` (``Groups._present``)."""
    v = gather(groups, values)
    missing = np.isnan(v)
    if not missing.any():
        return v, groups.bounds
    # the group of each missing value, from its position in group order
    where = np.searchsorted(groups.bounds, np.flatnonzero(missing), side="right") - 1
    counts = groups.sizes - np.bincount(where, minlength=groups.n_groups)
    # the kept values moved to the array's front a chunk at a time (a chunk's kept values
    # never land past where it starts): no second array of the gathered length
    written = 0
    for start in range(0, v.size, _COMPACT_CHUNK):
        kept = v[start:start + _COMPACT_CHUNK][~missing[start:start + _COMPACT_CHUNK]]
        v[written:written + kept.size] = kept
        written += kept.size
    bounds = np.zeros(groups.n_groups + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return v[:written], bounds


def median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a 1-D array, bit for bit. numpy's median partitions at
    the middle rank(s) and the last one (its NaN check) in one call: the multi-rank partition,
    ~20x slower on this build than a partition at one rank (1M values: 36-59 ms against
    2.3 ms). Here the upper middle is selected alone and the lower one is the largest value
    left of it, both averaged by ``np.mean`` as numpy averages them. An array with a NaN
    (numpy's answer: NaN), a small one or another dtype goes to ``np.median``."""
    a = np.asarray(values)
    if a.ndim != 1 or a.dtype != np.float64 or a.size < _MEDIAN_SELECT_MIN or \
            np.isnan(a).any():
        return float(np.median(a))
    mid = a.size // 2
    part = np.partition(a, mid)
    middle = part[mid:mid + 1] if a.size % 2 else np.array([part[:mid].max(), part[mid]])
    return float(np.mean(middle))


def quantile(values: np.ndarray, q: float) -> float:
    """``float(np.quantile(values, q))`` (linear) of a 1-D array, bit for bit, NaN dropped
    first (pandas' ``Series.quantile``; NaN when no value is left). numpy partitions at 0,
    the last rank and the two ranks it interpolates between in one call (the slow multi-rank
    partition, as for ``median``): here the two ranks are selected one at a time and
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
    n = a.size
    virtual = (n - 1) * q
    lower = n - 1 if virtual >= n - 1 else max(int(np.floor(virtual)), 0)
    upper = min(lower + 1, n - 1) if virtual >= 0 else 0
    # numpy's fraction: against its lower index, -1 (the last) above the top
    gamma = virtual - (-1 if virtual >= n - 1 else lower)
    part = a.copy()
    select_ranks(part, sorted({lower, upper}))
    low, high = part[lower], part[upper]
    diff = high - low
    return float(high - diff * (1 - gamma) if gamma >= 0.5 else low + diff * gamma)


def select_ranks(segment: np.ndarray, kth: list[int]) -> None:
    """Partition ``segment`` in place so that each rank in ``kth`` (ascending, distinct)
    holds the value a sort puts there: one single-rank partition per rank, each of what lies
    right of the previous rank (all of it no smaller)."""
    done = 0
    for k in kth:
        segment[done:].partition(k - done)
        done = k + 1


def selected(groups: Groups, values: Column, quantiles: tuple[float, ...]) -> OrderStatistics:
    """``Groups.selected``: each group's non-NaN ``values`` with the ranks its median and
    ``quantile(q)`` for ``q`` in ``quantiles`` read in place (``figure_ranks``), a rank at a
    time (module docstring)."""
    v, bounds = present(groups, values)
    n = np.diff(bounds)
    ranks = figure_ranks(n, quantiles)
    for start, end, kth in zip(bounds[:-1].tolist(), bounds[1:].tolist(), ranks.tolist(),
                               strict=True):
        if end - start > 1:
            select_ranks(v[start:end], sorted(set(kth)))
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
            ranked = selected(groups, values, (0.9,))
            found = {"count": groups.counts(values), "median": ranked.median(),
                     "p90": ranked.quantile(0.9)}
            del ranked  # the gathered column: not held by the cache
        else:  # every row: each group sorted (exact figures, as ``figures`` reads them)
            figs = figures(table, key, column, values, moments=False)
            found = {"count": figs.count, "median": figs.median, "p90": figs.p90}
        cache[cache_key] = found
    return found
