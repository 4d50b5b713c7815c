"""Request columns as the capacity fits read them: floats, ok statuses, instance codes, and
the stable sort by (instance, value) the reconstructions share.

Memory: a float64 copy of a 10-million-row integer column is 80 MB of fresh pages (about a
quarter CPU-second of page faults on its own, and pandas' copy for the NaN fill doubles it);
``FloatColumns`` reads values at chosen rows or chunk by chunk instead, and
``instance_code_view`` gives a categorical column's own small-integer codes.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Final, cast

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def float_column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Column ``name`` as float64 (NaN where missing; all NaN when the column is absent)."""
    if name not in frame:
        return np.full(len(frame), np.nan)
    return frame[name].to_numpy(dtype=np.float64, na_value=np.nan)


class FloatColumns:
    """Request columns read as float64 at chosen rows (a slice or ascending positions), the
    same values ``float_column(frame, name)[rows]`` gives, without a float copy of the whole
    column: a plain numpy column is kept as its own array (a view) and only the rows asked
    for are converted. Other dtypes (nullable, Arrow) are converted once, whole."""

    def __init__(self, frame: pd.DataFrame, names: tuple[str, ...]) -> None:
        self._n = len(frame)
        self._values: dict[str, np.ndarray | None] = {}
        for name in names:
            if name not in frame:
                self._values[name] = None
                continue
            column = frame[name]
            if isinstance(column.dtype, np.dtype) and column.dtype.kind in "iuf":
                self._values[name] = column.to_numpy()  # no copy, no NaN fill to make
            else:
                self._values[name] = float_column(frame, name)

    def __call__(self, name: str, rows: slice | np.ndarray) -> np.ndarray:
        """Column ``name`` at ``rows`` as float64 (all NaN when the column is absent): an
        array of its own, free to be written into."""
        values = self._values[name]
        if values is None:
            size = len(range(*rows.indices(self._n))) if isinstance(rows, slice) else len(rows)
            return np.full(size, np.nan)
        out = np.asarray(values[rows], dtype=np.float64)
        return out.copy() if np.may_share_memory(out, values) else out

    def less(self, name: str, rows: slice | np.ndarray, amount: float) -> np.ndarray:
        """``self(name, rows) - amount`` (an array of its own): the conversion to float64
        and the subtraction in one pass (numpy converts each value as ``self`` does)."""
        values = self._values[name]
        if values is None or values.dtype.kind not in "iu":
            out = self(name, rows)
            return np.subtract(out, amount, out=out)
        return np.subtract(values[rows], float(amount), dtype=np.float64)

    def integer(self, name: str) -> bool:
        """Whether column ``name`` is held as numpy integers (no NaN or infinity in it)."""
        values = self._values[name]
        return values is not None and values.dtype.kind in "iu"

    def read(self, name: str, rows: slice | np.ndarray) -> np.ndarray:
        """``self(name, rows)`` for reading only (never write into it): the column's own
        values where they are float64 and contiguous at ``rows`` (a view, no copy), else
        the same array ``self(name, rows)`` gives. (Contiguous: numpy sums a strided view in
        another order, so a sum of it could differ in the last bits.)"""
        values = self._values[name]
        if values is None or values.dtype != np.float64 or not isinstance(rows, slice):
            return self(name, rows)
        out = values[rows]
        return out if out.flags.c_contiguous else out.copy()


def category_codes(column: pd.Series) -> np.ndarray:
    """A categorical column's own codes, read-only (never write into them): pandas'
    ``.cat.codes`` copies every code (at 10 million rows 10 MB and about 2 ms a call, and
    the status is read per chunk)."""
    return cast("pd.Categorical", column.array).codes


def status_ok(frame: pd.DataFrame, rows: np.ndarray | slice | None = None) -> np.ndarray:
    """Whether each request (of ``rows``, positions or a slice, when given) finished ``ok``
    (no status counts as ok). A categorical column is read through its codes: no copy of
    the frame."""
    import pandas as pd

    status = frame["status"]
    if isinstance(status.dtype, pd.CategoricalDtype):
        codes = category_codes(status)
        if rows is not None:
            codes = codes[rows]
        cats = status.cat.categories
        ok = codes == cats.get_loc("ok") if "ok" in cats else np.zeros(len(codes), dtype=bool)
        return ok | (codes < 0)
    if rows is not None:
        status = status.iloc[rows]
    ok = (status == "ok").fillna(False).to_numpy(dtype=bool)
    return ok | status.isna().to_numpy()


def instance_code_view(column: pd.Series) -> tuple[np.ndarray, int]:
    """Integer codes of an instance column in name order (-1 where missing) and how many, in
    whatever integer dtype they come: a canonical categorical column
    (``dataset.canonical_category``: sorted categories) gives its own codes (int8 or int16, no
    copy, read-only); anything else is factorized with its names sorted."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype) and \
            column.cat.categories.is_monotonic_increasing:
        return category_codes(column), len(column.cat.categories)
    codes, names = pd.factorize(column.astype("string"), sort=True)
    return np.asarray(codes), len(names)


def instance_codes(column: pd.Series) -> tuple[np.ndarray, int]:
    """``instance_code_view`` as int64."""
    codes, n = instance_code_view(column)
    return codes.astype(np.int64), n


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
