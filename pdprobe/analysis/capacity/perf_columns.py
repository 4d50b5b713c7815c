"""Request columns as the capacity fits read them: floats, ok statuses, instance codes, and
the stable sort by (instance, value) the reconstructions share."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def float_column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Column ``name`` as float64 (NaN where missing; all NaN when the column is absent)."""
    if name not in frame:
        return np.full(len(frame), np.nan)
    return frame[name].to_numpy(dtype=np.float64, na_value=np.nan)


def status_ok(frame: pd.DataFrame) -> np.ndarray:
    """Whether each request finished ``ok`` (no status counts as ok)."""
    status = frame["status"]
    ok = (status == "ok").fillna(False).to_numpy(dtype=bool)  # on categorical codes
    return ok | status.isna().to_numpy()


def instance_codes(column: pd.Series) -> tuple[np.ndarray, int]:
    """Integer codes of an instance column in name order (-1 where missing) and how many.

    A canonical categorical column (``dataset.canonical_category``: sorted categories) gives
    its codes as they are; anything else is factorized with its names sorted.
    """
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype) and \
            column.cat.categories.is_monotonic_increasing:
        return column.cat.codes.to_numpy().astype(np.int64), len(column.cat.categories)
    codes, names = pd.factorize(column.astype("string"), sort=True)
    return np.asarray(codes, dtype=np.int64), len(names)


# Up to this many groups ``sort_by_group`` radix-sorts by group first and sorts each group's
# values on its own (one pass of gathers instead of two; values within an instance are nearly
# in order already, which the stable sort exploits); beyond it, one sort by value first.
FEW_GROUPS: Final = 256


def sort_by_group(codes: np.ndarray, n_groups: int, values: np.ndarray) -> np.ndarray:
    """Permutation sorting by (group code, value), stable (ties keep their order): a radix
    sort by the (small integer) codes and a sort of each group's values, or for many groups a
    sort by value then a radix sort by the codes (the same permutation)."""
    if n_groups < 2**15:
        codes = codes.astype(np.int16)  # numpy's stable sort of 16-bit integers is a radix sort
    if n_groups > FEW_GROUPS:
        order = np.argsort(values, kind="stable")
        return order[np.argsort(codes[order], kind="stable")]
    by_group = np.argsort(codes, kind="stable")
    grouped = values[by_group]
    sorted_codes = codes[by_group]
    cuts = np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1
    for lo, hi in itertools.pairwise([0, *cuts.tolist(), len(by_group)]):  # per group
        part = grouped[lo:hi]
        if len(part) > 1 and not bool(np.all(part[1:] >= part[:-1])):
            by_group[lo:hi] = by_group[lo:hi][np.argsort(part, kind="stable")]
    return by_group
