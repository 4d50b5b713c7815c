"""Shared rule helpers: the medians rules take of a few values equal pandas' to the bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.rules.common import median, row_medians


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 40, 160, 601])
def test_median_equals_the_series_median(n: int) -> None:
    rng = np.random.default_rng(n)
    for values in (rng.lognormal(size=n), np.round(rng.lognormal(size=n), 1),
                   np.where(rng.random(n) < 0.3, np.nan, rng.lognormal(size=n))):
        want = pd.Series(values).median()
        got = median(pd.Series(values))
        assert got == want or (np.isnan(got) and np.isnan(want))
    assert np.isnan(median(np.array([np.nan, np.nan])))


def test_row_medians_equal_the_frame_median_per_row() -> None:
    rng = np.random.default_rng(2)
    for m, k in ((1, 1), (5, 2), (91, 39), (91, 159), (30, 600)):
        values = rng.lognormal(size=(m, k))
        values[rng.random((m, k)) < 0.3] = np.nan
        values[0] = np.nan  # a bin no instance reports
        for v in (values, np.round(values, 1)):
            want = pd.DataFrame(v).median(axis=1).to_numpy()
            assert np.array_equal(row_medians(v), want, equal_nan=True)
