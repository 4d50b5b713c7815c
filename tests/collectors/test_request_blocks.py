"""Tests for pdprobe/collectors/request_blocks.py: block-wise passes answer as numpy does."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pdprobe.collectors import request_blocks
from pdprobe.collectors.request_blocks import (
    above_per_row,
    any_at_least,
    any_finite,
    compact,
    count_backwards,
    count_backwards_kept,
    null_strings,
    remap_codes,
)


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_blocks, "BLOCK_ROWS", 7)  # many blocks, a ragged last one


def test_any_finite_and_any_at_least_find_a_value_in_any_block() -> None:
    values = np.full(50, np.nan)
    assert not any_finite(values) and not any_at_least(values, 0.0)
    values[-1] = np.inf
    assert not any_finite(values) and any_at_least(values, 0.0)
    values[33] = -1.0
    assert any_finite(values) and not any_at_least(values[:40], 0.0)
    assert not any_finite(np.zeros(0)) and not any_at_least(np.zeros(0), 0.0)


def test_count_backwards_counts_across_block_edges() -> None:
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 7, 8, 15, 61):
        values = rng.uniform(0, 10, n)
        assert count_backwards(values) == int(np.count_nonzero(np.diff(values) < 0))
    edge = np.arange(16.0)
    edge[7] = -1.0  # a step down exactly at a block edge (6 -> 7) and up after it
    assert count_backwards(edge) == 1


def test_above_per_row_is_the_whole_array_expression() -> None:
    rng = np.random.default_rng(5)
    kv = rng.uniform(0, 300, 40)
    kv[[2, 9]] = np.nan
    per = rng.uniform(-1, 3, 40)  # below 1: the bound uses 1
    per[11] = np.nan
    with np.errstate(invalid="ignore"):
        expect = kv > 100.0 * np.maximum(per, 1.0)
    got = above_per_row(kv, per, 100.0)
    assert got.dtype == bool and got.tolist() == expect.tolist() and expect.any()


def test_remap_codes_in_place_and_minus_one_takes_the_last_slot() -> None:
    codes = np.array([0, 2, -1, 1, 1, 0, 2, -1, 2, 0], dtype=np.int8)
    remap = np.array([2, 0, 1, -1], dtype=np.int8)
    expect = remap[codes]
    got = remap_codes(codes, remap)
    assert got is codes and got.tolist() == expect.tolist()
    base = np.arange(20, dtype=np.int32) % 3
    view = base[::2]  # not contiguous: gathered into a copy, the input left alone
    expect = remap[view]
    assert remap_codes(view, remap.astype(np.int32)).tolist() == expect.tolist()
    assert base.tolist() == (np.arange(20) % 3).tolist()


def test_null_strings_are_what_pa_nulls_gives_pandas() -> None:
    got = null_strings(1000)
    assert got.null_count == 1000 and got.type == pa.large_string()
    got.validate(full=True)
    strings = {pa.string(): pd.StringDtype(), pa.large_string(): pd.StringDtype()}.get
    a = pa.table({"x": got}).to_pandas(types_mapper=strings)["x"]
    b = pa.table({"x": pa.nulls(1000, pa.string())}).to_pandas(types_mapper=strings)["x"]
    pd.testing.assert_series_equal(a, b)


def test_kept_rows_compacted_in_place_and_counted_backwards_as_a_copy_would() -> None:
    rng = np.random.default_rng(11)
    for n in (0, 1, 6, 7, 30, 64):
        values = rng.uniform(0, 10, n)
        for kept in (rng.random(n) < 0.8, np.zeros(n, bool), np.ones(n, bool)):
            expect = values[kept]
            assert count_backwards_kept(values, kept) == count_backwards(expect)
            work = values.copy()
            got = compact(work, kept)
            assert got.base is work and got.tolist() == expect.tolist()
    codes = np.array([3, -1, 2, 2, 0, 1, -1, 3, 0], dtype=np.int8)
    kept = np.array([1, 0, 1, 1, 1, 0, 1, 1, 0], dtype=bool)
    assert compact(codes.copy(), kept).tolist() == codes[kept].tolist()


def _unique(column: pd.Series) -> list[object]:
    return list(column.dropna().unique())


@pytest.mark.parametrize("case", ["late", "unused", "missing", "text", "empty"])
def test_distinct_in_order_is_pandas_unique(case: str) -> None:
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 3, 100).astype(np.int8)
    codes[57] = 4  # first seen in a later block: still in its place
    codes[[0, 9, 80]] = -1
    names = ["e", "b", "d", "a", "c"] + (["unused"] if case == "unused" else [])
    column = pd.Series(pd.Categorical.from_codes(codes, names))
    if case == "missing":
        column = pd.Series(pd.Categorical.from_codes(np.full(10, -1, np.int8), names))
    elif case == "text":
        column = column.astype(object)
    elif case == "empty":
        column = column.iloc[:0]
    got = request_blocks.distinct_in_order(column)
    assert got == _unique(column)
    assert all(isinstance(v, str) for v in got)
