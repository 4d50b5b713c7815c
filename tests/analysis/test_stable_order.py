"""Stable orders of integer codes by slices: the positions of one stable argsort."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_gather, row_slices, stable_order


@pytest.mark.parametrize("n_groups", [1, 3, 20, 200, 40_000])
def test_stable_order_by_slices_is_one_stable_sort_in_int32(monkeypatch: pytest.MonkeyPatch,
                                                            n_groups: int) -> None:
    # slices of 1,000 rows (11 slices) and at most 64 (slice, group) copies: 3 groups copy
    # block by block, 20 scatter, 200 and 40,000 (a count table beyond CHUNK_ROWS) sort at
    # once; every one the positions of numpy's stable argsort
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 1_000)
    monkeypatch.setattr(stable_order, "_SLICE_COPIES_MAX", 64)
    rng = np.random.default_rng(3)
    codes = rng.integers(0, n_groups, 10_500).astype(np.int32)
    codes[:2_000] = 0  # a run of one code across a slice edge
    got = stable_order.stable_order(codes, n_groups)
    assert got.dtype == np.int32  # not numpy's int64: half the memory of the answer
    assert np.array_equal(got, np.argsort(codes, kind="stable"))
    if n_groups <= 127:  # a key's own int8 codes: sorted as unsigned bytes, the same order
        assert np.array_equal(stable_order.stable_order(codes.astype(np.int8), n_groups), got)


@pytest.mark.parametrize("n_groups", [1, 5, 127, 128, 40_000])
def test_stable_take_is_the_values_in_stable_order(monkeypatch: pytest.MonkeyPatch,
                                                   n_groups: int) -> None:
    """``stable_take_counted`` gathers each slice's values within the slice: ``values[stable_order]``,
    and ``code_counts`` a slice at a time is one bincount (int8 codes: the 8-bit radix sort)."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 1_000)
    rng = np.random.default_rng(n_groups)
    codes = rng.integers(0, n_groups, 10_500)
    if n_groups <= 127:
        codes = codes.astype(np.int8)
    values = np.sort(rng.integers(0, 1 << 30, codes.size)).astype(np.int32)
    got = stable_order.stable_take_counted(codes, n_groups, values)[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, values[np.argsort(codes, kind="stable")])
    np.testing.assert_array_equal(row_gather.code_counts(codes, n_groups),
                                  np.bincount(codes, minlength=n_groups))
    one = stable_order.stable_take_counted(codes[:900], n_groups, values[:900])[0]  # one slice
    np.testing.assert_array_equal(one, values[:900][np.argsort(codes[:900], kind="stable")])
    # the counted variant: the same order and the rows per code it counted on the way
    # (several slices: by group copies or by scatter; one slice; none)
    for n in (10_500, 900, 0):
        taken, sizes = stable_order.stable_take_counted(codes[:n], n_groups, values[:n])
        np.testing.assert_array_equal(taken,
                                      values[:n][np.argsort(codes[:n], kind="stable")])
        np.testing.assert_array_equal(sizes, np.bincount(codes[:n], minlength=n_groups))


def test_stable_take_of_many_rows_of_a_few_groups_by_short_slices() -> None:
    """Above ``CHUNK_ROWS`` rows of a few groups the slices are ``_STABLE_SLICE_ROWS`` long:
    the same stable order and counts (several slices, a partial last one)."""
    rng = np.random.default_rng(9)
    n = row_slices.CHUNK_ROWS + 3 * stable_order._STABLE_SLICE_ROWS + 17
    codes = rng.integers(0, 7, n).astype(np.int8)
    values = np.arange(n, dtype=np.int32)
    taken, sizes = stable_order.stable_take_counted(codes, 7, values)
    np.testing.assert_array_equal(taken, np.argsort(codes, kind="stable"))
    np.testing.assert_array_equal(sizes, np.bincount(codes, minlength=7))
    np.testing.assert_array_equal(stable_order.stable_order(codes, 7),
                                  np.argsort(codes, kind="stable"))
