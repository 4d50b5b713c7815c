"""The evidence window: bins of timestamps, in a compact type, slice by slice."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.evidence.model import Window


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_bin_of_equals_the_whole_column_formula(monkeypatch: pytest.MonkeyPatch,
                                                chunk: int) -> None:
    from pdprobe.analysis import row_slices

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    window = Window(100.0, 1000.0, 15.0)
    rng = np.random.default_rng(2)
    ts = rng.uniform(50.0, 1100.0, 103)
    ts[::9] = np.nan  # NaN goes to bin 0
    ts[[4, 5]] = np.inf, -np.inf  # the last bin and the first
    got = window.bin_of(ts)
    assert got.dtype == np.int8  # 60 bins
    want = np.clip(np.nan_to_num(np.floor((ts - 100.0) / 15.0), nan=0.0), 0,
                   window.n_bins - 1).astype(np.int64)
    np.testing.assert_array_equal(got, want)


def test_bin_of_many_bins_is_wide_enough() -> None:
    window = Window(0.0, 1_000_000.0, 15.0)  # 66,667 bins: more than int16 holds
    got = window.bin_of(np.array([0.0, 999_999.0]))
    assert got.dtype == np.int32
    assert got.tolist() == [0, window.n_bins - 1]
