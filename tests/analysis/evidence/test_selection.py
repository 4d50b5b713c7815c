"""Sorted groups and sorted copies: the figures of ``Groups.sorted``, ``figures`` and numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis import grouped, row_slices
from pdprobe.analysis.evidence import selection
from pdprobe.analysis.evidence.selection import (
    gather,
    present,
    quantile_figures,
    selected,
)
from pdprobe.analysis.grouped import Groups


def _groups(seed: int, n: int, n_keys: int, sample_max: int | None) -> tuple[Groups, np.ndarray]:
    rng = np.random.default_rng(seed)
    codes = rng.integers(-1, n_keys, n).astype(np.int8)
    codes[codes == 3] = 2  # a key without rows
    codes[:1] = 4
    codes[codes == 4] = 5
    codes[0] = 4  # a group of one row
    values = np.round(rng.exponential(1.0, n), 2)  # ties
    values[::11] = np.nan
    values[codes == 1] = np.nan  # a group without values
    return Groups.of(codes, range(n_keys), sample_max=sample_max), values


@pytest.mark.parametrize("sample_max", [None, 50])
@pytest.mark.parametrize("quantiles", [(0.9,), (0.5, 0.9, 0.99)])
def test_selected_gives_the_figures_of_groups_sorted(sample_max: int | None,
                                                     quantiles: tuple[float, ...]) -> None:
    groups, values = _groups(1, 3_000, 7, sample_max)
    ours, theirs = selected(groups, values), groups.sorted(values)
    assert np.array_equal(ours.bounds, theirs.bounds)
    assert np.array_equal(ours.median(), theirs.median(), equal_nan=True)
    for q in quantiles:
        assert np.array_equal(ours.quantile(q), theirs.quantile(q), equal_nan=True)
    getter = selected(groups, lambda rows: values[rows] * 2)
    assert np.array_equal(getter.median(), theirs.median() * 2, equal_nan=True)


def test_present_drops_nans_group_by_group() -> None:
    groups, values = _groups(2, 2_000, 7, None)
    v, bounds = present(groups, values)
    for g in range(groups.n_groups):
        rows = groups.order[groups.bounds[g]:groups.bounds[g + 1]]
        want = values[rows]
        assert np.array_equal(v[bounds[g]:bounds[g + 1]], want[~np.isnan(want)])
    full = Groups.of(np.zeros(10, dtype=np.int8), range(1))
    v, bounds = present(full, np.arange(10.0))  # no NaN: the gathered values as they are
    assert np.array_equal(v, np.arange(10.0)) and bounds is full.bounds


@pytest.mark.parametrize("exact_rows", [1_000_000, 1_000])
def test_quantile_figures_are_the_figures_of_grouped(monkeypatch: pytest.MonkeyPatch,
                                                     exact_rows: int) -> None:
    """On a sampled grouping (above ``QUANTILE_EXACT_ROWS``) and on every row: the counts,
    medians and p90s ``grouped.figures`` gives, cached per table."""
    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", exact_rows)
    monkeypatch.setattr(grouped, "GROUP_SAMPLE_MAX", 100)
    rng = np.random.default_rng(3)
    n = 5_000
    inst = pd.Categorical.from_codes(rng.integers(0, 4, n), ["a", "b", "c", "d"])
    x = np.round(rng.exponential(1.0, n), 3)
    x[::9] = np.nan
    table = pd.DataFrame({"inst": inst, "x": x})
    ours = quantile_figures(table, "inst", "x", x)
    assert grouped.key_groups(table, "inst").sampled == (exact_rows < n)
    theirs = grouped.figures(pd.DataFrame({"inst": inst, "x": x}), "inst", "x", moments=False)
    assert np.array_equal(ours["count"], theirs.count)
    assert np.array_equal(ours["median"], theirs.median, equal_nan=True)
    assert np.array_equal(ours["p90"], theirs.p90, equal_nan=True)
    assert quantile_figures(table, "inst", "x", x) is ours  # cached


@pytest.mark.parametrize("sample_max", [None, 60])
def test_gather_by_slices_is_the_groups_gather(monkeypatch: pytest.MonkeyPatch,
                                               sample_max: int | None) -> None:
    """Read a slice of rows at a time (groups without rows in some slices, a derived column),
    the very values ``Groups.gather`` gives; too many (slice, group) pairs: ``Groups.gather``
    itself."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 300)
    groups, values = _groups(4, 2_000, 7, sample_max)
    groups = Groups.of(np.where(np.arange(2_000) < 900, groups.codes % 2, groups.codes),
                       range(7), sample_max=sample_max)  # groups 2.. only after row 900
    assert np.array_equal(gather(groups, values), groups.gather(values), equal_nan=True)

    def derived(rows: row_slices.Rows) -> np.ndarray:
        return values[rows] * 2 + 1

    assert np.array_equal(gather(groups, derived), groups.gather(derived), equal_nan=True)
    # blocks of 70 rows inside each slice (the last one short), and a column of integers
    from pdprobe.analysis import row_gather

    monkeypatch.setattr(row_gather, "GATHER_BLOCK_ROWS", 70)
    assert np.array_equal(gather(groups, derived), groups.gather(derived), equal_nan=True)
    ints = np.arange(2_000, dtype=np.int64) * 3
    assert np.array_equal(gather(groups, ints), groups.gather(ints))
    monkeypatch.setattr(selection, "_SLICE_GROUPS_MAX", 4)
    assert np.array_equal(gather(groups, values), groups.gather(values), equal_nan=True)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 1 << 20)  # one slice
    assert np.array_equal(gather(groups, values), groups.gather(values), equal_nan=True)


@pytest.mark.parametrize("n", [0, 1, 2, 9_999, 10_000, 10_001, 50_000])
def test_median_is_numpys(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Bit for bit ``np.median``: odd and even sizes, ties, negative values and zeros of
    both signs; an array with a NaN, another dtype or one below the threshold goes to numpy."""
    import warnings

    from pdprobe.analysis.evidence.selection import median

    rng = np.random.default_rng(n)
    values = np.round(rng.normal(0.0, 1.0, n), 2)  # ties
    values[::97] = -0.0
    values[1::89] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the empty array's mean
        want = float(np.median(values))
        assert str(median(values)) == str(want)  # NaN alike, the sign of a zero too
    if n:
        monkeypatch.setattr(selection, "_MEDIAN_SELECT_MIN", 1)
        assert str(median(values)) == str(float(np.median(values)))
        tied = np.full(n, -0.0)
        assert str(median(tied)) == str(float(np.median(tied)))
        with_nan = values.copy()
        with_nan[n // 2] = np.nan
        assert np.isnan(median(with_nan))
        ints = rng.integers(0, 100, n)
        assert median(ints) == float(np.median(ints))


@pytest.mark.parametrize("kind", ["normal", "ties", "integers", "tiny", "nan", "inf"])
def test_quantile_is_numpys_and_pandas(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Bit for bit ``np.quantile`` (linear) of the non-NaN values, as ``Series.quantile``
    gives it: sizes from 1, quantiles at and between ranks, at 0 and 1, either side of a
    fraction of 0.5; NaN dropped; an infinity goes to numpy."""
    from pdprobe.analysis.evidence.selection import quantile

    monkeypatch.setattr(selection, "_MEDIAN_SELECT_MIN", 1)
    rng = np.random.default_rng(len(kind))
    for n in (1, 2, 3, 10, 11, 100, 257):
        x = {"normal": rng.normal(0.0, 1.0, n), "ties": np.round(rng.exponential(1.0, n), 1),
             "integers": rng.integers(-5, 5, n).astype(np.float64),
             "tiny": rng.random(n) * 1e-3, "nan": rng.normal(0.0, 1.0, n),
             "inf": rng.normal(0.0, 1.0, n)}[kind]
        if kind == "nan":
            x[::3] = np.nan
        if kind == "inf":
            x[0] = np.inf
        for q in (0.0, 0.1, 0.25, 1 / 3, 0.5, 0.9, 0.95, 0.99, 1.0):
            with np.errstate(invalid="ignore"):  # numpy's inf - inf, for the infinity
                want = float(pd.Series(x).quantile(q))
                assert str(quantile(x, q)) == str(want), (n, q)
                if kind != "nan":
                    assert str(quantile(x, q)) == str(float(np.quantile(x, q))), (n, q)
    assert np.isnan(quantile(np.array([np.nan, np.nan]), 0.9))


def test_median_and_quantile_from_one_sort() -> None:
    """The median and a quantile read off one sorted copy: ``median`` and ``quantile`` each
    alone, bit for bit (ties, odd and even sizes); small arrays, NaN and infinities go to
    them as they are."""
    import warnings

    from pdprobe.analysis.evidence.selection import median, median_and_quantile, quantile

    rng = np.random.default_rng(15)
    for values in (rng.lognormal(0.0, 1.0, 20_001), rng.lognormal(0.0, 1.0, 20_000),
                   np.where(rng.random(30_000) < 0.6, 0.0, rng.random(30_000)),
                   rng.random(50), np.append(rng.random(20_000), np.inf),
                   np.append(rng.random(20_000), np.nan), np.array([])):
        for q in (0.9, 0.5, 0.99):
            with warnings.catch_warnings():  # numpy's median of no values: NaN, and a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                want = (median(values), quantile(values, q))
                got = median_and_quantile(values, q)
            assert np.array_equal(np.array(got), np.array(want), equal_nan=True)
            if values.size and not np.isnan(values).any():  # and numpy's, independently
                assert str(got) == str((float(np.median(values)),
                                        float(np.quantile(values, q)))), (values.size, q)
