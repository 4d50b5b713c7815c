"""The test that makes a sum of whole numbers order-free: each partial sum held exactly.

Whole numbers from 0 up whose sums stay below 2**53 are held exactly in float64, and so is
every partial sum of them: such a column's sums are the very same floats in any order of
adding, so one pass may add its rows into the cells of several groupings at once
(``joint_sums``, ``evidence.cell_sums``) instead of a pass per grouping.
"""

from __future__ import annotations

from typing import Final

import numpy as np

# Whole numbers below this are exact in float64, and so is every sum of them below it.
EXACT: Final = 1 << 53


def exact_addends(v: np.ndarray, n: int, nan_as_zero: bool = False) -> np.ndarray | None:
    """``v`` (a slice of a column of ``n`` values, its own dtype) when each value is a whole
    number from 0 up and ``n`` of the largest stay below 2**53 (every partial sum of the
    column exact), else None. ``nan_as_zero``: a NaN counts as 0 (and is 0 in the answer),
    else it fails the test."""
    if nan_as_zero and v.dtype.kind == "f":
        nan = np.isnan(v)
        if nan.any():
            v = np.where(nan, 0.0, v)
    low, high = v.min(), v.max()  # (NaN: both NaN, so the test below fails)
    integer = v.dtype.kind in "iu"
    # every value at most the largest, so every partial sum below 2**53 (Python ints: no
    # overflow; a float product rounds to 2**53 or above when the true one is)
    top = int(high) if integer else float(high)
    if not (low >= 0 and top * n < EXACT):
        return None
    if not integer and not np.array_equal(v, np.floor(v)):
        return None
    return v
