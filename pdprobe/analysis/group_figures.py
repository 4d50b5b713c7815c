"""Figures of each group's sorted values, as pandas' grouped figures compute them.

``Groups.sorted`` (``analysis.grouped``) gathers a value column in group order, drops its NaNs
and sorts each group's slice; every figure here is then read off that one array, one value per
group: ``quantile`` is pandas' grouped linear interpolation (``v[i] + (v[i+1] - v[i]) * frac``),
``median`` pandas' grouped median (the mean of the two middle values), ``mean`` the sum over the
count. ``GroupFigures`` holds the figures the instance summaries and the evidence read (count,
mean, max, median, p50/p90/p99), with count, mean and max over every row of a sampled grouping.

A sampled grouping's median and quantiles need only a few ranks of each group
(read off each sorted group), and its mean and max come from every row in one pass
(``Groups.moments``), not from the sorted sample. Each group is still sorted (``Groups.sorted``):
with numpy 2.4's AVX-512 sort that is cheaper than its partition at those six to eight ranks
(0.2 against 0.6 ms for 50,000 values; a partition of values with many ties, such as queue
times that are mostly 0, takes longer still). ``middles`` partitions same-size groups at the
single middle rank, for ``Groups.medians``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.grouped import Groups
    from pdprobe.analysis.row_slices import Column

# The quantiles ``GroupFigures`` reads besides the median (p50, p90, p99).
FIGURE_QUANTILES: Final = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class OrderStatistics:
    """Each group's non-NaN values with the order statistics the figures read in place: group
    ``g`` is ``values[bounds[g]:bounds[g + 1]]``, and the value at each rank ``median`` and
    ``quantile`` read is the one a sort would put there.

    Every figure is one value per group, NaN for a group without values.
    """

    values: np.ndarray
    bounds: np.ndarray
    labels: tuple[str, ...]

    @property
    def count(self) -> np.ndarray:
        """Non-NaN values per group."""
        return np.diff(self.bounds)

    def _at(self, offset: np.ndarray) -> np.ndarray:
        """``values[start + offset]`` per group with values, NaN elsewhere."""
        out = np.full(len(self.labels), np.nan)
        has = self.count > 0
        out[has] = self.values[self.bounds[:-1][has] + offset[has]]
        return out

    def quantile(self, q: float) -> np.ndarray:
        """pandas' grouped ``quantile(q)`` (linear): ``v[i] + (v[i+1] - v[i]) * frac`` with
        ``i = int(q * (n - 1))`` and ``frac = q * (n - 1) % 1``."""
        n = self.count
        idx = quantile_ranks(n, q)
        frac = q * (np.maximum(n, 1) - 1).astype(np.float64) % 1.0
        low = self._at(idx)
        high = self._at(np.minimum(idx + 1, np.maximum(n - 1, 0)))
        with np.errstate(invalid="ignore"):
            return np.where(frac == 0.0, low, low + (high - low) * frac)

    def median(self) -> np.ndarray:
        """pandas' grouped median: the middle value, or the mean of the two middle values."""
        n = self.count
        upper = self._at(n // 2)
        lower = self._at(np.maximum(n // 2 - 1, 0))
        return np.where(n % 2 == 1, upper, (upper + lower) / 2)


@dataclass(frozen=True)
class SortedGroups(OrderStatistics):
    """Each group's non-NaN values sorted ascending: every rank in place, so the mean (summed
    in that order) and the max are read off it too."""

    def mean(self) -> np.ndarray:
        """Sum over count (pandas' grouped mean up to the last bits of the sum)."""
        n = self.count
        out = np.full(len(self.labels), np.nan)
        has = n > 0
        if has.any():
            sums = np.add.reduceat(self.values, self.bounds[:-1][has])
            out[has] = sums / n[has]
        return out

    def max(self) -> np.ndarray:
        """Largest value per group."""
        return self._at(np.maximum(self.count - 1, 0))


def _blocked_order_statistics(groups: Groups, values: Column) -> list[np.ndarray]:
    """Median, p50, p90, p99 and max per group of ``groups.sorted(values)``, a
    block of about ``CHUNK_ROWS`` sampled rows at a time (``row_slices.group_slices``): each
    group's figures read only its own values, so they are the same, and each block's gathered
    values (8 MB) reuse the allocator's memory where all of them at once (48 MB for 120 groups
    of 50,000) were fresh pages every time (about a quarter of the selection's cost)."""
    from pdprobe.analysis.row_slices import group_slices

    out = [np.empty(groups.n_groups) for _ in range(2 + len(FIGURE_QUANTILES))]
    for first, end, block in group_slices(groups):
        ranked = block.sorted(values)
        out[0][first:end] = ranked.median()
        for figure, q in zip(out[1:-1], FIGURE_QUANTILES, strict=True):
            figure[first:end] = ranked.quantile(q)
        out[-1][first:end] = ranked.max()
    return out


def quantile_ranks(n: np.ndarray, q: float) -> np.ndarray:
    """The lower rank ``int(q * (n - 1))`` pandas' linear ``quantile(q)`` reads in a group of
    ``n`` values (the upper one is the next)."""
    return (q * (np.maximum(n, 1) - 1).astype(np.float64)).astype(np.int64)


@dataclass(frozen=True)
class GroupFigures:
    """Figures of one value column per group (arrays aligned with ``labels``)."""

    labels: tuple[str, ...]
    count: np.ndarray  # non-NaN values
    mean: np.ndarray  # all-NaN when measured without ``moments``
    max: np.ndarray  # ditto
    median: np.ndarray  # pandas' grouped median
    p50: np.ndarray  # pandas' grouped linear quantiles
    p90: np.ndarray
    p99: np.ndarray
    moments: bool = True  # mean and max were measured

    @classmethod
    def of(cls, groups: SortedGroups) -> GroupFigures:
        """The figures of sorted groups."""
        return cls(labels=groups.labels, count=groups.count, mean=groups.mean(),
                   max=groups.max(), median=groups.median(), p50=groups.quantile(0.5),
                   p90=groups.quantile(0.9), p99=groups.quantile(0.99))

    @classmethod
    def measure(cls, groups: Groups, values: Column, moments: bool = True,
                known: tuple[np.ndarray, np.ndarray] | None = None) -> GroupFigures:
        """The figures of ``values`` per group; quantiles from the sample of a sampled grouping
        (count, mean and max stay exact). Without ``moments`` a sampled grouping skips the
        mean and max (two passes over every row) and leaves them NaN. ``known``: each group's
        non-NaN values and their sum over every row, found by another pass (a sampled
        grouping then passes over the rows for the maxima alone)."""
        if not groups.sampled:
            return cls.of(groups.sorted(values))
        median, p50, p90, p99, sample_max = _blocked_order_statistics(groups, values)
        if moments:
            if known is not None:
                count, total = known
                top = groups.maxima_above(values, count, floor=sample_max)
            else:  # count, sum and max in one pass over every row
                # the sample's maxima bound each group's from below: only the rows above the
                # smallest of them can raise one (``Groups.moments``' ``floor``)
                count, total, top = groups.moments(values, floor=sample_max)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        else:
            count = groups.counts(values)
            mean = np.full(groups.n_groups, np.nan)
            top = mean
        return cls(labels=groups.labels, count=count, mean=mean, max=top, median=median,
                   p50=p50, p90=p90, p99=p99, moments=moments)

    def series(self, stat: str) -> pd.Series:
        """One figure per group as a float series indexed by label."""
        import pandas as pd

        return pd.Series(getattr(self, stat), index=pd.Index(list(self.labels), dtype=object),
                         dtype="float64")


def middles(v: np.ndarray, starts: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """For groups of ``size`` values at ``starts`` in ``v``: the value at rank ``size // 2``
    and, for ``size`` > 1, the largest value left of it (NaN for groups of one)."""
    mid = size // 2
    rows = v[starts[:, None] + np.arange(size)]
    if size == 1:
        return rows[:, 0], np.full(len(starts), np.nan)
    rows.partition(mid, axis=1)
    return rows[:, mid], rows[:, :mid].max(axis=1)
