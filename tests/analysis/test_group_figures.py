"""Figures of sorted groups (pdprobe/analysis/group_figures.py) equal pandas' groupby figures."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.grouped import Groups, key_codes
from tests.analysis.test_grouped import QS, _expected, _frame


@pytest.mark.parametrize("categorical", [True, False])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [0, 1, 2, 7, 500])
def test_figures_equal_pandas_groupby(seed: int, n: int, categorical: bool) -> None:
    frame = _frame(seed, n, categorical)
    groups = Groups.of(*key_codes(frame["key"]))
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
