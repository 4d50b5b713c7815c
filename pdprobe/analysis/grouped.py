"""Per-group figures of request columns in one pass on integer codes.

The per-instance summaries, the evidence tables and the per-bin series all ask the same
question of millions of request rows: per instance (or per time bin, or both), how many, what
sum, what mean, which quantiles. pandas answers each ``groupby(...).quantile`` with its own
sort of the whole frame and a copy of it; here the rows are grouped once per key (a stable
radix sort of small integer codes, O(rows)), each value column is gathered in group order with
its NaNs dropped, and every group's slice is sorted in place (numpy's vectorised sort), so all
quantiles of that column in every group are read off one sorted array.

The figures reproduce pandas exactly, so reports do not move: ``quantile`` is pandas' grouped
linear interpolation (``v[i] + (v[i+1] - v[i]) * frac``), ``median`` pandas' grouped median
(the mean of the two middle values), ``mean`` the sum over the count. Sums are plain float
sums (pandas uses compensated sums: the two differ in the last bits only).

``key_groups`` and ``figures`` cache their answer per request table and column (keyed by
``id()``, dropped when the table is garbage-collected; sound because tables are never modified
in place), so the instance summaries and the evidence read one computation. The cache holds
only the grouping of each key (one integer array) and the small per-group figures, never a
sorted copy of a column.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# numpy's stable sort of 8- and 16-bit integers is a radix sort (linear in rows); codes with
# more groups than an int16 holds are sorted as two 15-bit digits, least significant first.
_RADIX_MAX: Final = 1 << 15


def stable_order(codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Positions of ``codes`` (0 <= code < n_groups) sorted by code, equal codes in row order."""
    c = np.asarray(codes)
    if n_groups <= _RADIX_MAX:
        return np.argsort(c.astype(np.int16, copy=False), kind="stable")
    if n_groups <= _RADIX_MAX * _RADIX_MAX:
        low = np.argsort((c % _RADIX_MAX).astype(np.int16), kind="stable")
        high = (c[low] // _RADIX_MAX).astype(np.int16)
        return low[np.argsort(high, kind="stable")]
    return np.argsort(c, kind="stable")


@dataclass(frozen=True)
class Groups:
    """Rows grouped by integer codes: only groups with at least one row, in code order.

    ``codes`` gives each row's group (-1: none); group ``g``'s rows are
    ``order[bounds[g]:bounds[g + 1]]``, in row order; ``labels`` names the groups and ``ids``
    gives the code each group had before the unused ones were dropped.
    """

    codes: np.ndarray
    order: np.ndarray
    bounds: np.ndarray
    labels: tuple[str, ...]
    ids: np.ndarray

    @classmethod
    def of(cls, codes: np.ndarray, labels: Any) -> Groups:
        """Group rows by ``codes`` (-1 for none) into ``labels[code]``; groups without rows are
        dropped (as a groupby with ``observed=True``)."""
        raw = np.asarray(codes, dtype=np.int64)
        names = [str(x) for x in labels]
        n = len(names)
        valid = raw >= 0
        sizes = np.bincount(raw[valid], minlength=n) if n else np.zeros(0, dtype=np.int64)
        used = sizes > 0
        ids = np.flatnonzero(used)
        if not used.all():  # renumber the used groups 0..k-1; unused and -1 rows go to -1
            lookup = np.append(np.where(used, np.cumsum(used) - 1, -1), -1)
            raw = lookup[raw]
            names = [name for name, u in zip(names, used, strict=True) if u]
            sizes = sizes[used]
        n_missing = int(raw.size - sizes.sum())
        if n_missing:
            shifted = raw + 1  # -1 rows first, then the groups
            order = stable_order(shifted, len(names) + 1)[n_missing:]
        else:
            order = stable_order(raw, len(names))
        bounds = np.zeros(len(names) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        return cls(codes=raw, order=order, bounds=bounds, labels=tuple(names), ids=ids)

    @property
    def n_groups(self) -> int:
        """Number of groups (all of them have rows)."""
        return len(self.labels)

    @property
    def sizes(self) -> np.ndarray:
        """Rows per group."""
        return np.diff(self.bounds)

    def sums(self, values: Any) -> np.ndarray:
        """Sum of each group's non-NaN values (0 when it has none), as pandas' grouped sum."""
        v = np.asarray(values, dtype=np.float64)
        # rows without a group go to a leading slot that is dropped; NaN adds nothing
        sums = np.bincount(self.codes + 1, weights=np.where(np.isnan(v), 0.0, v),
                           minlength=self.n_groups + 1)
        return sums[1:]

    def sorted(self, values: Any) -> SortedGroups:
        """Each group's non-NaN ``values`` sorted ascending (one gather, one sort per group)."""
        data = np.asarray(values, dtype=np.float64)
        v = data[self.order]
        missing = np.isnan(v)
        bounds = self.bounds
        if missing.any():
            nan_rows = np.isnan(data) & (self.codes >= 0)
            counts = self.sizes - np.bincount(self.codes[nan_rows], minlength=self.n_groups)
            v = v[~missing]
            bounds = np.zeros(self.n_groups + 1, dtype=np.int64)
            np.cumsum(counts, out=bounds[1:])
        for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            if end - start > 1:
                v[start:end].sort()
        return SortedGroups(values=v, bounds=bounds, labels=self.labels)


@dataclass(frozen=True)
class SortedGroups:
    """Each group's non-NaN values sorted: group ``g`` is ``values[bounds[g]:bounds[g + 1]]``.

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

    def quantile(self, q: float) -> np.ndarray:
        """pandas' grouped ``quantile(q)`` (linear): ``v[i] + (v[i+1] - v[i]) * frac`` with
        ``i = int(q * (n - 1))`` and ``frac = q * (n - 1) % 1``."""
        n = self.count
        pos = q * (np.maximum(n, 1) - 1).astype(np.float64)
        idx = pos.astype(np.int64)
        frac = pos % 1.0
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
class GroupFigures:
    """Figures of one value column per group (arrays aligned with ``labels``)."""

    labels: tuple[str, ...]
    count: np.ndarray  # non-NaN values
    mean: np.ndarray
    max: np.ndarray
    median: np.ndarray  # pandas' grouped median
    p50: np.ndarray  # pandas' grouped linear quantiles
    p90: np.ndarray
    p99: np.ndarray

    @classmethod
    def of(cls, groups: SortedGroups) -> GroupFigures:
        """The figures of sorted groups."""
        return cls(labels=groups.labels, count=groups.count, mean=groups.mean(),
                   max=groups.max(), median=groups.median(), p50=groups.quantile(0.5),
                   p90=groups.quantile(0.9), p99=groups.quantile(0.99))

    def series(self, stat: str) -> pd.Series:
        """One figure per group as a float series indexed by label."""
        import pandas as pd

        return pd.Series(getattr(self, stat), index=pd.Index(list(self.labels), dtype=object),
                         dtype="float64")


def column_codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes (-1 for missing) and labels of a key column: a categorical's own codes and
    categories; other columns as strings, labels sorted (as ``astype(str).astype("category")``)."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        return (np.asarray(column.cat.codes.to_numpy(), dtype=np.int64),
                [str(c) for c in column.cat.categories])
    present = column.notna().to_numpy()
    codes = np.full(len(column), -1, dtype=np.int64)
    sub_codes, uniques = pd.factorize(column[present].astype(str), sort=True)
    codes[present] = sub_codes
    return codes, [str(u) for u in uniques]


def category_mask(column: pd.Series, test: Callable[[str], bool]) -> np.ndarray:
    """``test(str(value))`` for every row (False where missing), evaluated once per distinct
    value: on a categorical's categories, else on the factorized values."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        values = list(column.cat.categories)
    else:
        codes, uniques = pd.factorize(column)
        values = list(uniques)
    lookup = np.array([bool(test(str(v))) for v in values] + [False], dtype=bool)
    return lookup[codes]  # code -1 (missing) reads the trailing False


# Per request table: {key: Groups} and {(key, column): GroupFigures}; see the module docstring.
_CACHE: dict[int, tuple[weakref.ref[pd.DataFrame], dict[Any, Any]]] = {}


def table_cache(table: pd.DataFrame) -> dict[Any, Any]:
    """A dict of figures computed from ``table``, kept as long as the table lives."""
    key = id(table)
    hit = _CACHE.get(key)
    if hit is None or hit[0]() is not table:
        hit = (weakref.ref(table, lambda _ref: _CACHE.pop(key, None)), {})
        _CACHE[key] = hit
    return hit[1]


def key_groups(table: pd.DataFrame, key: str) -> Groups:
    """The rows of ``table`` grouped by the key column ``key`` (cached per table)."""
    cache = table_cache(table)
    if ("groups", key) not in cache:
        cache[("groups", key)] = Groups.of(*column_codes(table[key]))
    found: Groups = cache[("groups", key)]
    return found


def figures(table: pd.DataFrame, key: str, column: str,
            values: np.ndarray | None = None) -> GroupFigures:
    """Count, mean, max, median and p50/p90/p99 of ``column`` per value of ``key`` (cached per
    table; ``values`` stands in for a column derived from the table under that name)."""
    cache = table_cache(table)
    if ("figures", key, column) not in cache:
        groups = key_groups(table, key)
        data = table[column].to_numpy(dtype=np.float64, na_value=np.nan) if values is None \
            else values
        cache[("figures", key, column)] = GroupFigures.of(groups.sorted(data))
    found: GroupFigures = cache[("figures", key, column)]
    return found
