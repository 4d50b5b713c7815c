"""Grouped figures on integer codes equal pandas' groupby figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.grouped import (
    GroupFigures,
    Groups,
    category_mask,
    column_codes,
    figures,
    key_groups,
    stable_order,
)

QS = (0.0, 0.1, 0.25, 0.5, 0.9, 0.99, 1.0)


def _frame(seed: int, n: int, categorical: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    keys = rng.choice(np.array(["d-1", "b-2", "a-3", "c-4", "e-5"], dtype=object), n)
    keys[rng.random(n) < 0.1] = None  # rows naming no instance
    values = rng.lognormal(size=n)
    values[rng.random(n) < 0.3] = np.nan
    if seed % 2:
        values = np.round(values, 1)  # ties
    values[keys == "e-5"] = np.nan  # a group whose values are all missing
    key = pd.Series(pd.Categorical(keys, categories=["a-3", "b-2", "c-4", "d-1", "e-5",
                                                     "z-unused"])) if categorical \
        else pd.Series(keys, dtype=object)
    return pd.DataFrame({"key": key, "value": values})


def _expected(frame: pd.DataFrame) -> dict[str, pd.Series]:
    key = frame["key"] if isinstance(frame["key"].dtype, pd.CategoricalDtype) \
        else frame["key"].dropna().astype(str).astype("category")
    grouped = frame.loc[key.index, "value"].groupby(key, observed=True, sort=True)
    out = {"count": grouped.count(), "mean": grouped.mean(), "max": grouped.max(),
           "median": grouped.median()}
    out.update({f"q{q}": grouped.quantile(q) for q in QS})
    for series in out.values():
        series.index = series.index.astype(str).astype(object)
    return out


@pytest.mark.parametrize("categorical", [True, False])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [0, 1, 2, 7, 500])
def test_figures_equal_pandas_groupby(seed: int, n: int, categorical: bool) -> None:
    frame = _frame(seed, n, categorical)
    groups = Groups.of(*column_codes(frame["key"]))
    ordered = groups.sorted(frame["value"].to_numpy())
    got = {"count": ordered.count, "mean": ordered.mean(), "max": ordered.max(),
           "median": ordered.median()}
    got.update({f"q{q}": ordered.quantile(q) for q in QS})
    expected = _expected(frame)
    for name, want in expected.items():
        assert list(groups.labels) == list(want.index), name
        np.testing.assert_allclose(got[name], want.to_numpy(dtype=np.float64), rtol=1e-12,
                                   atol=0, equal_nan=True, err_msg=name)
        if name != "mean":  # order statistics are the very same floats
            same = (got[name] == want.to_numpy(dtype=np.float64)) | (
                np.isnan(got[name]) & want.isna().to_numpy())
            assert same.all(), name


def test_unused_categories_and_missing_keys_are_not_groups() -> None:
    frame = _frame(3, 200, categorical=True)
    groups = Groups.of(*column_codes(frame["key"]))
    assert "z-unused" not in groups.labels
    assert groups.sizes.sum() == frame["key"].notna().sum()
    assert (groups.codes[frame["key"].isna().to_numpy()] == -1).all()
    # e-5 has rows but no values: a group with a count of 0 and NaN figures
    figs = GroupFigures.of(groups.sorted(frame["value"].to_numpy()))
    e5 = groups.labels.index("e-5")
    assert figs.count[e5] == 0 and np.isnan(figs.p90[e5]) and np.isnan(figs.mean[e5])


def test_sums_equal_pandas_grouped_sum() -> None:
    frame = _frame(4, 300, categorical=True)
    groups = Groups.of(*column_codes(frame["key"]))
    want = frame.groupby("key", observed=True)["value"].sum()
    np.testing.assert_allclose(groups.sums(frame["value"].to_numpy()), want.to_numpy(),
                               rtol=1e-12)


@pytest.mark.parametrize("n_groups", [3, 40_000])
def test_stable_order_is_a_stable_sort(n_groups: int) -> None:
    rng = np.random.default_rng(0)
    codes = rng.integers(0, n_groups, 100_000)
    np.testing.assert_array_equal(stable_order(codes, n_groups),
                                  np.argsort(codes, kind="stable"))


def test_many_groups_cells() -> None:
    """More groups than one radix digit holds (per-bin, per-instance cells)."""
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 50_000, 200_000)
    values = rng.normal(size=codes.size)
    groups = Groups.of(codes, range(50_000))
    want = pd.Series(values).groupby(codes).median()
    np.testing.assert_array_equal(groups.ids, want.index.to_numpy())
    np.testing.assert_array_equal(groups.sorted(values).median(), want.to_numpy())


def test_figures_are_computed_once_per_table() -> None:
    frame = _frame(2, 100, categorical=True)
    first = figures(frame, "key", "value")
    assert figures(frame, "key", "value") is first
    assert key_groups(frame, "key") is key_groups(frame, "key")
    other = frame.copy()
    assert figures(other, "key", "value") is not first
    derived = frame["value"].to_numpy() * 2
    np.testing.assert_allclose(figures(frame, "key", "double", derived).p90, first.p90 * 2,
                               rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("categorical", [True, False])
def test_category_mask(categorical: bool) -> None:
    values = ["ok", None, "Error", "timeout", "ok", "error"]
    column = pd.Series(pd.Categorical(values)) if categorical else pd.Series(values,
                                                                             dtype=object)
    np.testing.assert_array_equal(category_mask(column, lambda s: s != "ok"),
                                  [False, False, True, True, False, True])
    np.testing.assert_array_equal(category_mask(column, lambda s: s.lower() == "error"),
                                  [False, False, True, False, False, True])
