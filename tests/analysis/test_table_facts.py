"""Facts of the request table cached per table: a column's sum and whether it is finite."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.table_facts import column_finite, column_sum


@pytest.mark.parametrize("bad", [None, np.nan, np.inf, -np.inf])
def test_column_sum_is_numpys_sum_and_finite_only_without_nan_or_inf(bad: float | None) -> None:
    """numpy's float64 sum of the column (cached: the same float again), finite exactly when
    no value is NaN or infinite."""
    values = np.arange(10, dtype=np.float64)
    if bad is not None:
        values[4] = bad
    table = pd.DataFrame({"kv": values})
    got = column_sum(table, "kv")
    np.testing.assert_array_equal(got, values.sum())
    assert column_sum(table, "kv") is got
    assert column_finite(table, "kv") == (bad is None)
