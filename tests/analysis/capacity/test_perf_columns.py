"""Tests for pdprobe/analysis/capacity/perf_columns.py: columns read at chosen rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity.perf_columns import (
    FloatColumns,
    float_column,
    instance_code_view,
    instance_codes,
    status_ok,
)


def _frame() -> pd.DataFrame:
    return pd.DataFrame({
        "ints": np.arange(10, dtype=np.int64) * 3,
        "floats": np.where(np.arange(10) % 3 == 0, np.nan, np.arange(10) / 7.0),
        "nullable": pd.array([1, None, 3, 4, None, 6, 7, 8, 9, 10], dtype="Int64"),
        "f32": np.arange(10, dtype=np.float32) / 3,
        "status": pd.Categorical(["ok", "error", None, "ok", "timeout", "ok", None, "error",
                                  "ok", "ok"]),
        "status_str": ["ok", "error", None, "ok", "timeout", "ok", None, "error", "ok", "ok"],
    })


@pytest.mark.parametrize("rows", [slice(0, 4), slice(3, 100), np.array([0, 2, 5, 9]),
                                  np.array([], dtype=np.int64)])
def test_float_columns_at_rows_are_float_column_at_rows(rows: slice | np.ndarray) -> None:
    frame = _frame()
    cols = FloatColumns(frame, ("ints", "floats", "nullable", "f32", "absent"))
    for name in ("ints", "floats", "nullable", "f32", "absent"):
        got = cols(name, rows)
        want = float_column(frame, name)[rows]
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows", [slice(0, 4), slice(3, 100), slice(0, 10, 2),
                                  np.array([0, 2, 5, 9])])
def test_float_columns_read_gives_the_same_values_viewing_contiguous_float64(
        rows: slice | np.ndarray) -> None:
    """``read`` is ``cols(name, rows)``'s values; a contiguous slice of a float64 column is
    the column's own memory (no copy), anything else (integers, positions, a strided slice)
    a contiguous array of its own."""
    frame = _frame()
    cols = FloatColumns(frame, ("ints", "floats", "nullable", "absent"))
    for name in ("ints", "floats", "nullable", "absent"):
        got = cols.read(name, rows)
        assert got.dtype == np.float64 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, cols(name, rows))
        view = name == "floats" and isinstance(rows, slice) and rows.step is None
        assert np.shares_memory(got, frame["floats"].to_numpy()) == view


def test_float_columns_keep_plain_columns_as_views() -> None:
    """A plain integer column is not converted whole (no 80 MB copy per 10M rows)."""
    frame = _frame()
    cols = FloatColumns(frame, ("ints", "nullable"))
    assert np.shares_memory(cols._values["ints"], frame["ints"].to_numpy())
    assert cols._values["nullable"] is not None
    assert cols._values["nullable"].dtype == np.float64  # an extension dtype: converted once


@pytest.mark.parametrize("column", ["status", "status_str"])
def test_status_ok_at_rows_is_status_ok_of_those_rows(column: str) -> None:
    frame = _frame().assign(status=lambda f: f[column])
    whole = status_ok(frame)
    assert whole.tolist() == [True, False, True, True, False, True, True, False, True, True]
    rows = np.array([1, 2, 4, 8])
    assert status_ok(frame, rows).tolist() == whole[rows].tolist()


def test_status_ok_without_an_ok_category() -> None:
    frame = pd.DataFrame({"status": pd.Categorical(["error", None])})
    assert status_ok(frame).tolist() == [False, True]
    assert status_ok(frame, np.array([1])).tolist() == [True]


def test_instance_code_view_is_the_categorical_codes_without_a_copy() -> None:
    column = pd.Series(pd.Categorical(["b", None, "a", "b"], categories=["a", "b"]))
    codes, n = instance_code_view(column)
    assert n == 2 and codes.tolist() == [1, -1, 0, 1]
    assert codes.dtype == np.int8  # the column's own codes
    assert instance_codes(column)[0].dtype == np.int64
    strings = pd.Series(["b", None, "a", "b"])
    assert instance_code_view(strings)[0].tolist() == [1, -1, 0, 1]


def test_float_columns_are_arrays_of_their_own() -> None:
    """Values may be computed in place: a slice of a float64 column is copied, never a view
    of the frame (which is read-only, and shared with every other analysis)."""
    frame = _frame()
    cols = FloatColumns(frame, ("floats", "ints"))
    for rows in (slice(2, 6), np.array([1, 3])):
        for name in ("floats", "ints"):
            got = cols(name, rows)
            got += 1.0
    np.testing.assert_array_equal(frame["floats"].to_numpy()[2:6], _frame()["floats"][2:6])


def test_float_columns_integer_is_only_a_plain_integer_column() -> None:
    """``integer``: the columns whose float values can hold no NaN (numpy integers); a
    nullable integer column (converted with NaN where missing), floats and an absent column
    can."""
    cols = FloatColumns(_frame(), ("ints", "floats", "nullable", "f32", "absent"))
    assert [name for name in ("ints", "floats", "nullable", "f32", "absent")
            if cols.integer(name)] == ["ints"]
    assert np.isfinite(cols("ints", slice(0, 10))).all()
    assert not np.isfinite(cols("nullable", slice(0, 10))).all()


def test_category_codes_are_the_columns_own_without_a_copy() -> None:
    """A categorical column's codes as ``.cat.codes`` gives them (-1 where missing), but its
    own array (read-only), not pandas' copy of every code."""
    from pdprobe.analysis.capacity.perf_columns import category_codes

    column = pd.Series(pd.Categorical(["ok", None, "error", "ok"], categories=["error", "ok"]))
    codes = category_codes(column)
    np.testing.assert_array_equal(codes, column.cat.codes.to_numpy())
    assert np.shares_memory(codes, column.array.codes)
    assert not codes.flags.writeable
