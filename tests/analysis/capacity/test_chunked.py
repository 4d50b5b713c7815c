"""Tests for pdprobe/analysis/capacity/chunked.py: chunked sums equal numpy's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import sampling
from pdprobe.analysis.capacity import chunked
from pdprobe.analysis.capacity.chunked import run_sums, tree_cv, tree_sum, tree_sums


@pytest.mark.parametrize("chunk", [1, 100, 1000, 4099, 1 << 16])
def test_tree_sum_and_cv_are_numpys_to_the_bit(monkeypatch: pytest.MonkeyPatch,
                                              chunk: int) -> None:
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    rng = np.random.default_rng(1)
    for n in (1, 7, 8, 127, 128, 129, 1000, 12_345, 300_001):
        x = rng.lognormal(0.0, 3.0, n)  # wide range: any other order of additions shows
        asked: list[int] = []

        def values(lo: int, hi: int, x: np.ndarray = x, asked: list[int] = asked
                   ) -> np.ndarray:
            asked.append(hi - lo)
            return x[lo:hi].copy()

        assert tree_sum(values, n) == float(np.sum(x))
        assert max(asked) <= max(chunk, 128)
        if n > 1:
            assert tree_cv(values, n) == float(np.std(x) / np.mean(x))
    assert tree_sum(lambda lo, hi: np.zeros(hi - lo), 0) == 0.0


@pytest.mark.parametrize("chunk", [1, 1000, 1 << 16])
def test_tree_sums_are_each_arrays_tree_sum_to_the_bit(monkeypatch: pytest.MonkeyPatch,
                                                       chunk: int) -> None:
    """Several arrays summed in one visit of the leaves: each is numpy's sum of it."""
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    rng = np.random.default_rng(3)
    for n in (0, 1, 129, 12_345, 300_001):
        x, y = rng.lognormal(0.0, 3.0, n), rng.normal(0.0, 1e6, n)
        got = tree_sums(lambda lo, hi, x=x, y=y: (x[lo:hi], y[lo:hi] * 2.0), n)
        assert got == [float(np.sum(x)), float(np.sum(y * 2.0))]


def test_run_sums_are_bincounts_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampling, "PASS_CHUNK", 37)
    rng = np.random.default_rng(2)
    x = rng.lognormal(0.0, 3.0, 5000)
    bounds = np.array([0, 0, 1, 999, 4000, 5000])
    window = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    want = np.bincount(window, weights=x, minlength=len(bounds) - 1)
    assert run_sums(x, bounds).tolist() == want.tolist()


def test_integer_run_sums_are_the_sequential_float_sums() -> None:
    """Integers (token counts) whose every partial sum is exact in float64 are summed as
    integers, negative ones included: the bits of adding them one by one in float64; beyond
    2^53 the sequential float addition is kept (it rounds)."""
    rng = np.random.default_rng(4)
    bounds = np.array([0, 0, 3, 1500, 1500, 4000])
    for ints in (rng.integers(1, 200_000, 4000), rng.integers(-9000, 9000, 4000),
                 rng.integers(0, 9000, 4000).astype(np.uint32)):
        assert chunked._exact_in_float(ints)
        window = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
        want = np.bincount(window, weights=ints, minlength=len(bounds) - 1)
        assert run_sums(ints, bounds).tolist() == want.tolist()
    big = np.array([2**52 + 1, 3, 2**52 + 1, 1], dtype=np.int64)
    assert not chunked._exact_in_float(big)
    assert not chunked._exact_in_float(np.array([0.5, 1.0]))  # floats: added in order
    got = run_sums(big, np.array([0, 4]))
    assert got.tolist() == np.bincount(np.zeros(4, dtype=np.intp), weights=big).tolist()


@pytest.mark.parametrize("chunk", [1, 1000, 1 << 16])
def test_leaf_sums_added_up_are_tree_sums(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """A caller summing ``leaf_ranges``' leaves in its own pass gets ``tree_sums``' figures
    (numpy's sums) from ``sums_of_leaves``; the leaves cover the rows in order."""
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    rng = np.random.default_rng(5)
    for n in (0, 1, 8, 129, 12_345, 300_001):
        x = rng.lognormal(0.0, 3.0, n)
        leaves = chunked.leaf_ranges(n)
        assert [lo for lo, _ in leaves] == [0, *[hi for _, hi in leaves[:-1]]]
        assert leaves[-1][1] == n and max(hi - lo for lo, hi in leaves) <= max(chunk, 128)
        sums = [chunked.leaf_sums((x[lo:hi], -x[lo:hi])) for lo, hi in leaves]
        assert chunked.sums_of_leaves(sums, n) == [float(np.sum(x)), float(np.sum(-x))]
