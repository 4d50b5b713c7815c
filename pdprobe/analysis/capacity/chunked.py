"""Sums over every request computed a chunk at a time, with numpy's whole-array results bit
for bit.

Memory: a derived per-request array (a ratio, a difference) is 80 MB of fresh pages at 10
million requests, about a quarter CPU-second of page faults before any arithmetic. These
helpers compute such values ``sampling.PASS_CHUNK`` at a time and add them in the order
numpy would have added the whole array, so the figures in the report do not move:
``np.sum`` of a contiguous float64 array is a pairwise sum (halves, rounded down to
multiples of 8, down to blocks of at most 128 added eight ways), and every subtree of that
recursion is what ``np.sum`` gives for the same slice on its own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Final

import numpy as np

from pdprobe.analysis import sampling

# Values of the requests ``lo..hi-1`` (float64, ``hi - lo`` of them).
Values = Callable[[int, int], np.ndarray]
# numpy's pairwise summation adds a block of up to this many values without halving it
# (``PW_BLOCKSIZE`` in numpy's loops_utils).
PAIRWISE_BLOCK: Final = 128


def tree_sum(values: Values, n: int) -> float:
    """``float(np.sum(a))`` of the ``n`` values ``a[lo:hi] = values(lo, hi)``, computing at
    most ``sampling.PASS_CHUNK`` of them at a time."""
    return tree_sums(lambda lo, hi: (values(lo, hi),), n)[0]


def _first_half(n: int) -> int:
    """Where numpy's pairwise recursion splits ``n`` values: the first half a multiple of 8."""
    half = n // 2
    return half - half % 8


# Several value arrays of the requests ``lo..hi-1``, computed together (they share reads).
ValueSets = Callable[[int, int], tuple[np.ndarray, ...]]


def tree_sums(values: ValueSets, n: int) -> list[float]:
    """``[tree_sum(v, n) for each v]`` of the arrays ``values(lo, hi)`` gives together, each
    leaf visited once: each sum's additions are ``tree_sum``'s, in the same order."""
    return sums_of_leaves([leaf_sums(values(lo, hi)) for lo, hi in leaf_ranges(n)], n)


def leaf_ranges(n: int) -> list[tuple[int, int]]:
    """The row ranges whose values ``tree_sums(values, n)`` asks for, in its order (each at
    most ``sampling.PASS_CHUNK`` rows; one empty range when ``n`` is 0): a caller passing over
    the rows anyway can sum its values leaf by leaf (``leaf_sums``) and add them up with
    ``sums_of_leaves``, instead of a second pass for ``tree_sums``."""
    out: list[tuple[int, int]] = []
    # numpy adds blocks of up to 128 without splitting them: leaves hold at least that many
    _leaves(out, 0, n, max(sampling.PASS_CHUNK, PAIRWISE_BLOCK))
    return out


def _leaves(out: list[tuple[int, int]], lo: int, n: int, leaf: int) -> None:
    if n <= leaf:
        out.append((lo, lo + n))
        return
    half = _first_half(n)
    _leaves(out, lo, half, leaf)
    _leaves(out, lo + half, n - half, leaf)


def leaf_sums(arrays: tuple[np.ndarray, ...]) -> list[float]:
    """The sums of one leaf's arrays: a subtree of numpy's pairwise recursion, so ``np.sum``
    of the slice alone is its value."""
    return [float(np.add.reduce(v, initial=0.0)) for v in arrays]


def sums_of_leaves(sums: list[list[float]], n: int) -> list[float]:
    """``tree_sums`` of ``n`` values from the sums of each of ``leaf_ranges(n)`` (in order):
    the leaves added up along numpy's pairwise recursion."""
    return _subtrees(iter(sums), n, max(sampling.PASS_CHUNK, PAIRWISE_BLOCK))


def _subtrees(sums: Iterator[list[float]], n: int, leaf: int) -> list[float]:
    if n <= leaf:
        return next(sums)
    half = _first_half(n)
    first = _subtrees(sums, half, leaf)  # (the left subtree's leaves come first)
    return [a + b for a, b in zip(first, _subtrees(sums, n - half, leaf), strict=True)]


def tree_cv(values: Values, n: int) -> float:
    """``float(np.std(a) / np.mean(a))`` of the ``n`` values (two chunked passes)."""
    mean = tree_sum(values, n) / n

    def squares(lo: int, hi: int) -> np.ndarray:
        dev = values(lo, hi) - mean
        return np.multiply(dev, dev, out=dev)

    return math.sqrt(tree_sum(squares, n) / n) / mean


def run_sums(values: np.ndarray, bounds: np.ndarray,
             chunk_sums: tuple[int, np.ndarray] | None = None) -> np.ndarray:
    """The sum of each run ``values[bounds[w]:bounds[w + 1]]`` as float64, added one value at a
    time from 0.0 in order, as ``np.bincount(window, weights=values)`` adds them (the same
    bits), a chunk at a time. ``chunk_sums``: ``(rows, sums)``, the sums of non-negative
    integer ``values`` per run of ``rows`` rows from row 0 (``population.ChunkSums``): then
    only the rows between each bound and the nearer end of its run are read."""
    out = np.zeros(len(bounds) - 1)
    if chunk_sums is not None and values.dtype.kind in "iu" and \
            int(np.sum(chunk_sums[1], dtype=object)) < FLOAT_EXACT_INTEGER:
        # non-negative integers summing below 2^53: every partial sum in any order is exact,
        # so the integer sums are the in-order float64 ones (no pass for the max either)
        before = _sums_before(values, bounds, *chunk_sums)
        return np.diff(before).astype(np.float64)
    if _exact_in_float(values):  # integers (token counts): every order gives the same sum
        for w in range(len(out)):  # loop over runs (windows), not values
            out[w] = float(np.add.reduce(values[int(bounds[w]):int(bounds[w + 1])]))
        return out
    for w in range(len(out)):  # loop over runs (windows) and chunks, not values
        total = 0.0
        for lo in range(int(bounds[w]), int(bounds[w + 1]), sampling.PASS_CHUNK):
            hi = min(lo + sampling.PASS_CHUNK, int(bounds[w + 1]))
            part = np.empty(hi - lo + 1)
            part[0] = total
            part[1:] = values[lo:hi]
            total = float(np.cumsum(part)[-1])  # a cumulative sum adds in order
        out[w] = total
    return out


def _sums_before(values: np.ndarray, bounds: np.ndarray, rows: int,
                 sums: np.ndarray) -> np.ndarray:
    """The integer sum of ``values[:b]`` for each bound ``b`` (object integers: exact), from
    the sums per run of ``rows`` rows and the rows between ``b`` and the nearer end of its
    run."""
    upto = [0, *itertools.accumulate(int(x) for x in sums)]  # before each run, exact
    out = []
    for b in (int(x) for x in bounds):  # loop over bounds (windows), not values
        run = min(b // rows, len(sums) - 1) if len(sums) else 0
        lo, hi = run * rows, min((run + 1) * rows, len(values))
        if b - lo <= hi - b:
            out.append(upto[run] + int(np.add.reduce(values[lo:b])))
        else:
            out.append(upto[run + 1] - int(np.add.reduce(values[b:hi])))
    return np.array(out, dtype=object)


# Integers up to this magnitude are exact in float64 (2^53), and so is every partial sum of
# float64 additions that stays within it.
FLOAT_EXACT_INTEGER: Final = 2**53


def _exact_in_float(values: np.ndarray) -> bool:
    """Whether ``values`` are integers whose float64 partial sums, in any order and over any
    run of them, are exact: then adding them one at a time in float64 gives their integer sum
    (an integer sum, pairwise and vectorised, is five times faster than the sequential
    addition). Holds when ``len · max |v| < 2^53`` (which also keeps the sum from
    overflowing int64)."""
    if values.dtype.kind not in "iu" or not len(values):
        return False
    top = max(abs(int(values.min())), abs(int(values.max())))
    return top * len(values) < FLOAT_EXACT_INTEGER
