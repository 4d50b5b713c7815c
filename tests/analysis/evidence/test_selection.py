"""Sorted groups and sorted copies: the figures of ``Groups.sorted``, ``figures`` and numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis import grouped
from pdprobe.analysis.evidence import selection
from pdprobe.analysis.evidence.selection import quantile_figures


@pytest.mark.parametrize("exact_rows", [1_000_000, 1_000])
@pytest.mark.parametrize("chunk_rows", [1 << 20, 150])
def test_quantile_figures_are_the_figures_of_grouped(monkeypatch: pytest.MonkeyPatch,
                                                     exact_rows: int, chunk_rows: int) -> None:
    """On a sampled grouping (above ``QUANTILE_EXACT_ROWS``), sorted in one block or a block
    of groups at a time, and on every row: the counts, medians and p90s ``grouped.figures``
    gives, cached per table."""
    from pdprobe.analysis import row_slices

    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", exact_rows)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk_rows)
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
