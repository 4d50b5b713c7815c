"""Fixed-seed row samples drawn slice by slice."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_slices
from pdprobe.analysis.row_sample import sample_rows
from pdprobe.analysis.row_slices import chunks


def test_sample_rows_from_slices_is_one_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    codes = np.random.default_rng(1).integers(-1, 3, 5_001).astype(np.int8)
    rate = np.array([0.5, 0.1, 1.0], dtype=np.float32)
    whole = sample_rows(codes, rate, 9)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 333)
    np.testing.assert_array_equal(sample_rows(codes, rate, 9), whole)
    uniform = np.random.default_rng(9).random(codes.size, dtype=np.float32)
    np.testing.assert_array_equal(
        whole, np.flatnonzero(uniform < np.append(rate, np.float32(0.0))[codes]))
    assert not np.isin(np.flatnonzero(codes == -1), whole).any()  # code -1: never
    assert whole.dtype == np.int32


def test_sample_rows_of_one_rate_is_the_draw_of_code_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sample_rows(n, ...)``: the rows of ``n`` zero codes, without an array of them."""
    rate = np.array([0.3], dtype=np.float32)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 333)
    rows = sample_rows(2_000, rate, 5)
    np.testing.assert_array_equal(rows, sample_rows(np.zeros(2_000, dtype=np.int8), rate, 5))
    uniform = np.random.default_rng(5).random(2_000, dtype=np.float32)
    np.testing.assert_array_equal(rows, np.flatnonzero(uniform < rate[0]))


def test_sample_rows_holds_only_the_rows_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # the same rows as the pieces concatenated, written into one array (no second copy)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 1_000)
    codes = np.repeat(np.arange(3, dtype=np.int8), 2_500)
    rate = np.array([1.0, 0.5, 0.0], dtype=np.float32)
    rows = sample_rows(codes, rate, seed=5)
    rng = np.random.default_rng(5)
    want = np.concatenate([np.flatnonzero(rng.random(p.stop - p.start, dtype=np.float32)
                                          < np.append(rate, 0)[codes[p]]) + p.start
                           for p in chunks(codes.size)])
    assert rows.dtype == np.int32 and np.array_equal(rows, want)


def test_sample_rows_of_close_rates_is_the_lookup_of_every_row(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rates a hair apart (a round-robin router's instances): the draws between the extremes
    compared with their own row's rate, the same rows as a lookup of every row's rate; a
    slice with a row without a code looks every rate up (code -1 is never kept)."""
    from pdprobe.analysis import row_sample

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 997)
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 7, 20_000).astype(np.int8)
    rate = np.float32(0.6) + np.arange(7, dtype=np.float32) * np.float32(1e-3)
    assert row_sample._band(rate) is not None
    uniform = np.random.default_rng(4).random(codes.size, dtype=np.float32)
    keep = np.append(rate, np.float32(0.0))
    np.testing.assert_array_equal(sample_rows(codes, rate, 4),
                                  np.flatnonzero(uniform < keep[codes]))
    codes[5_000] = -1
    np.testing.assert_array_equal(sample_rows(codes, rate, 4),
                                  np.flatnonzero(uniform < keep[codes]))
    assert 5_000 not in sample_rows(codes, rate, 4)
    # every draw between the extremes is compared with its row's own rate
    hit = row_sample._kept_in_band(uniform[:997], codes[:997], keep, rate.min(), rate.max())
    assert hit is not None
    np.testing.assert_array_equal(hit, np.flatnonzero(uniform[:997] < keep[codes[:997]]))
    assert row_sample._band(np.array([0.1, 0.5], dtype=np.float32)) is None
