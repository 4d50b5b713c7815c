"""Rows grouped by integer codes, and the figures read off each group in one pass.

The per-instance summaries, the evidence tables and the per-bin series all ask the same
question of millions of request rows: per instance (or per time bin, or both), how many, what
sum, what mean, which quantiles. pandas answers each ``groupby(...).quantile`` with its own
sort of the whole frame and a copy of it; here the rows are grouped once per key (a stable
radix sort of small integer codes, O(rows)), each value column is gathered in group order with
its NaNs dropped, and every group's slice is sorted in place (numpy's vectorised sort), so all
quantiles of that column in every group are read off one sorted array.

The figures reproduce pandas exactly, so reports do not move (read off the sorted groups in
``group_figures``). Sums are plain float sums (pandas uses compensated sums: the two differ in
the last bits only). ``grouped`` makes and caches the groupings of a request table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from pdprobe.analysis.exact_sums import exact_addends
from pdprobe.analysis.group_figures import SortedGroups, middles
from pdprobe.analysis.group_plan import GroupPlan
from pdprobe.analysis.row_gather import compacted, take_grouped
from pdprobe.analysis.row_sample import sample_rows
from pdprobe.analysis.row_slices import (
    Column,
    chunks,
    integer_array,
    nan_probe,
    take,
)

# Values partitioned at once by ``Groups.medians`` (one matrix of same-size groups): 8 MB.
MEDIAN_BLOCK_VALUES: Final = 1 << 20
# The sample's random stream: the same capture always gives the same sample.
SAMPLE_SEED: Final = 17

@dataclass(frozen=True)
class Groups:
    """Rows grouped by integer codes: only groups with at least one row, in code order.

    ``codes`` gives each row's group (-1: none), in the smallest integer type that holds them
    (a categorical key's own codes when every category is used: no copy); ``totals`` each
    group's rows; group ``g``'s rows are ``order[bounds[g]:bounds[g + 1]]`` (int32 positions
    below 2**31 rows), in row order: all of them, or a sample when ``sampled`` (``codes`` and
    ``totals`` still cover every row, and so do ``counts``, ``sums`` and ``maxima``).
    ``labels`` names the groups; ``ids`` gives the code each group had before the unused ones
    were dropped.
    """

    codes: np.ndarray
    order: np.ndarray
    bounds: np.ndarray
    labels: tuple[str, ...]
    ids: np.ndarray
    totals: np.ndarray
    sampled: bool = False
    complete: bool = False  # every row has a group (no code -1)
    # complete and the codes never decrease (time bins of arrivals in time order): each
    # group's rows are one run, and ``order`` is ascending without a sort
    ordered: bool = False

    @classmethod
    def of(cls, codes: np.ndarray, labels: Any, sample_max: int | None = None,
           counts: np.ndarray | None = None) -> Groups:
        """Group rows by ``codes`` (-1 for none) into ``labels[code]``; groups without rows are
        dropped (as a groupby with ``observed=True``).

        With ``sample_max``, a group of more rows is ordered on a fixed-seed random
        ``sample_max / rows`` of them (a Bernoulli sample per row: a round-robin router's period
        cannot alias it), and only those rows are sorted. ``counts``: the rows per code, when
        known (``GroupPlan.of``).
        """
        plan = GroupPlan.of(codes, labels, sample_max, counts)
        rows = None if plan.rate is None else sample_rows(*plan.draws(), SAMPLE_SEED)
        return cls(**plan.fields(rows))

    @property
    def n_groups(self) -> int:
        """Number of groups (all of them have rows)."""
        return len(self.labels)

    @property
    def sizes(self) -> np.ndarray:
        """Rows per group in ``order`` (``totals`` unless sampled)."""
        return np.diff(self.bounds)

    def _accumulate(self, values: Column, ufunc: np.ufunc, start: float,
                    skip_nan: bool) -> np.ndarray:
        """``ufunc.at`` of every row's value into its group's slot, slice by slice, in row order
        (for ``np.add`` the very sums ``np.bincount`` adds); a slot past the groups takes the
        rows without one. ``skip_nan`` adds 0 for a NaN value."""
        out = np.full(self.n_groups + 1, start)
        skip_nan = skip_nan and not integer_array(values)  # an integer row is never NaN
        for part in chunks(self.codes.size):
            v = take(values, part)
            if skip_nan:
                nan = np.isnan(v)
                if nan.any():
                    v = np.where(nan, 0.0, v)  # a slice of a column is a view: not in place
            ufunc.at(out, self.codes[part], v)  # the compact codes (as in ``moments``)
        return out[:-1]

    def counts(self, values: Column) -> np.ndarray:
        """Non-NaN values per group."""
        if integer_array(values):  # never NaN: every row counts
            return self.totals.copy()
        nan_rows = np.zeros(self.n_groups + 1, dtype=np.int64)
        probe = nan_probe(values)
        for part in chunks(self.codes.size):
            nan = np.isnan(take(probe, part))
            if nan.any():
                np.add.at(nan_rows, self.codes[part][nan], 1)
        return self.totals - nan_rows[:-1]

    def maxima(self, values: Column, counts: np.ndarray) -> np.ndarray:
        """Largest non-NaN value per group over every row (NaN where ``counts``, the non-NaN
        values per group, is 0)."""
        top = self._accumulate(values, np.fmax, -np.inf, skip_nan=False)
        return np.where(counts > 0, top, np.nan)

    def maxima_above(self, values: Column, counts: np.ndarray, floor: np.ndarray) -> np.ndarray:
        """``maxima(values, counts)`` given ``floor``, a value of each group's own rows (its
        sample's largest), as ``moments`` finds them: only the rows above the smallest floor
        update a slot (NaN in ``floor``: every row may, the plain ``maxima``)."""
        bar = _bar(floor)
        if bar is None:
            return self.maxima(values, counts)
        top = np.full(self.n_groups + 1, -np.inf)
        for part in chunks(self.codes.size):
            v = take(values, part)
            above = np.flatnonzero(v > bar)  # (NaN is never above the bar)
            np.fmax.at(top, self.codes[part][above], v[above])
        return self._floored_maxima(top, floor, values, counts)

    def _floored_maxima(self, top: np.ndarray, floor: np.ndarray, values: Column,
                        counts: np.ndarray) -> np.ndarray:
        """The maxima from ``top``, each group's largest row above the bar (-inf: none; a
        last slot for the rows without a group), and ``floor``, a value of each group's rows.
        A zero maximum is taken from every row (``maxima``): row order decides a zero's sign,
        and a floor of the other zero's sign would not."""
        top = np.fmax(top[:-1], floor)
        if (top == 0).any():
            return self.maxima(values, counts)
        return np.where(counts > 0, top, np.nan)

    def sums(self, values: Column) -> np.ndarray:
        """Sum of each group's non-NaN values (0 when it has none), as pandas' grouped sum."""
        if self.ordered and isinstance(values, np.ndarray) and values.dtype.kind in "iu":
            exact = _run_sums(values, self.totals)
            if exact is not None:
                return exact
        return self._accumulate(values, np.add, 0.0, skip_nan=True)

    def moments(self, values: Column, floor: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``counts(values)``, ``sums(values)`` and ``maxima(values, counts)``, the same
        arrays from one pass over the rows: each slice is read, converted and tested for NaN
        once instead of once per figure.

        ``floor``: a value of each group's own rows (its sample's largest; NaN: none known).
        When every group has one, no row at or below the smallest of them is a maximum, so
        only the rows above it (a few hundred of 10M) update a slot: a comparison per row
        instead of an ``fmax.at`` update (17 ms per 10M rows). The same maxima, but for a
        zero's sign (row order decides it): a zero maximum is taken from every row."""
        if self.ordered and isinstance(values, np.ndarray) and values.dtype.kind in "iu":
            counts = self.counts(values)  # integer runs: the sums from reduceat
            return counts, self.sums(values), self.maxima(values, counts)
        probe = nan_probe(values)
        has_nan = not integer_array(values)
        nan_rows = np.zeros(self.n_groups + 1, dtype=np.int64)  # last slot: rows without
        sums = np.zeros(self.n_groups + 1)
        top = np.full(self.n_groups + 1, -np.inf)
        bar = _bar(floor)
        # Until a slice holds a NaN, each slice is added without a NaN test: a NaN would make
        # its group's sum NaN, so a sum that turns NaN has the slice added again as before
        # (from the sums before it), and so is every later slice. The very sums, without a
        # NaN mask of every row of a column without NaN (6 ms per 10M rows).
        nan_seen = False
        for part in chunks(self.codes.size):
            v = take(values, part)
            # the compact codes themselves: ufunc.at widens its indices a buffer at a time,
            # cheaper than a widened copy of the slice (int8 codes of 120 instances at 10M
            # rows: 22 ms an add, where the copy and the add took 37 ms)
            codes = self.codes[part]
            nan = None
            if has_nan and not nan_seen:
                before = sums.copy()
                np.add.at(sums, codes, v)
                if np.isnan(sums).any():  # a NaN (or inf - inf): added again, tested
                    sums[:] = before
                    nan_seen = True
            if has_nan and nan_seen:
                nan = np.isnan(v)
                if not nan.any():
                    nan = None
                np.add.at(sums, codes, v if nan is None else np.where(nan, 0.0, v))
            elif not has_nan:
                np.add.at(sums, codes, v)
            counted = nan if probe is values else np.isnan(take(probe, part))
            if counted is not None and counted.any():
                np.add.at(nan_rows, codes[counted], 1)
            if bar is None:
                np.fmax.at(top, codes, v)
            else:  # (NaN is never above the bar)
                above = np.flatnonzero(v > bar)
                np.fmax.at(top, codes[above], v[above])
        counts = self.totals - nan_rows[:-1] if has_nan else self.totals.copy()
        if bar is not None:
            assert floor is not None
            return counts, sums[:-1], self._floored_maxima(top, floor, values, counts)
        return counts, sums[:-1], np.where(counts > 0, top[:-1], np.nan)

    def gather(self, values: Column) -> np.ndarray:
        """``values`` at the rows of ``order``, group after group (a new array), read a block
        of table rows at a time (``take_grouped``) unless ``order`` is ascending already."""
        if self.ordered:
            return take(values, self.order)
        return take_grouped(values, self.order, self.bounds, self.codes.size)

    def _present(self, values: Column) -> tuple[np.ndarray, np.ndarray]:
        """Each group's non-NaN values (a new array, group after group) and their bounds."""
        v = self.gather(values)
        missing = np.isnan(v)
        bounds = self.bounds
        if missing.any():
            # the group of each missing value, from its position in group order
            where = np.searchsorted(bounds, np.flatnonzero(missing), side="right") - 1
            counts = self.sizes - np.bincount(where, minlength=self.n_groups)
            v = compacted(v, missing)
            bounds = np.zeros(self.n_groups + 1, dtype=np.int64)
            np.cumsum(counts, out=bounds[1:])
        return v, bounds

    def medians(self, values: Column) -> np.ndarray:
        """Each group's median of its non-NaN ``values`` (NaN without values): the figures of
        ``sorted(values).median()``, each group partitioned at its middle (numpy's
        single-rank partition is several times faster than a sort) and the lower middle of
        an even group the largest value left of it.

        Groups of one size are partitioned together, as the rows of one matrix
        (``group_figures.middles``): tens of thousands of (bin, instance) cells cost one numpy
        call per distinct size instead of one Python iteration per cell. The same order
        statistics, so the very figures."""
        v, bounds = self._present(values)
        n = np.diff(bounds)
        upper = np.full(self.n_groups, np.nan)
        lower = np.full(self.n_groups, np.nan)
        starts = bounds[:-1]
        for size in np.unique(n[n > 0]).tolist():
            groups = np.flatnonzero(n == size)
            # a block of groups at a time: the matrix stays within MEDIAN_BLOCK_VALUES
            step = max(1, MEDIAN_BLOCK_VALUES // size)
            for first in range(0, groups.size, step):
                block = groups[first:first + step]
                upper[block], lower[block] = middles(v, starts[block], size)
        return np.where(n % 2 == 1, upper, (upper + lower) / 2)

    def sorted(self, values: Column) -> SortedGroups:
        """Each group's non-NaN ``values`` sorted ascending (one gather, one sort per group)."""
        v, bounds = self._present(values)
        for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            if end - start > 1:
                v[start:end].sort()
        return SortedGroups(values=v, bounds=bounds, labels=self.labels)


def _bar(floor: np.ndarray | None) -> float | None:
    """The smallest of the groups' ``floor`` values (``Groups.moments``), None when a group
    has none (NaN: every row may raise a maximum)."""
    if floor is None or not floor.size or np.isnan(floor).any():
        return None
    return float(floor.min())


def _run_sums(values: np.ndarray, totals: np.ndarray) -> np.ndarray | None:
    """Integer sums of consecutive runs of ``totals`` rows (every row in one run), as float64:
    the very sums of adding the rows one by one in float64 when the values are non-negative
    and every run's sum stays below 2**53 (each partial sum a whole number held exactly), from
    one ``np.add.reduceat`` instead of a slot update per row; None otherwise."""
    if not values.size or exact_addends(values, values.size) is None:
        return None
    starts = np.concatenate(([0], np.cumsum(totals)[:-1]))
    return np.add.reduceat(values.astype(np.int64, copy=False), starts).astype(np.float64)
