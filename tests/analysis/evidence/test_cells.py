"""Request rows by (bin, instance) cell a block of bins at a time: the figures of Groups.of."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_slices, stable_order
from pdprobe.analysis.evidence.cells import BinCells, WholeCells, cell_groups, medians_of
from pdprobe.analysis.grouped import Groups


def _same_as_groups(cells: object, whole: Groups, values: np.ndarray,
                    ints: np.ndarray | None = None) -> None:
    """``cells`` (a ``BinCells``) gives the cells, counts, medians (of a column and of a row
    getter) and sums ``Groups.of`` gives over the same codes, to the bit."""
    assert isinstance(cells, BinCells)
    assert cells.n_groups == whole.n_groups
    assert np.array_equal(cells.ids, whole.ids) and np.array_equal(cells.totals, whole.totals)
    assert np.array_equal(cells.medians(values), whole.medians(values), equal_nan=True)
    assert np.array_equal(cells.medians(lambda rows: values[rows] * 2),
                          whole.medians(lambda rows: values[rows] * 2), equal_nan=True)
    columns = (values,) if ints is None else (values, ints)
    for got, column in zip(cells.sums_of(columns), columns, strict=True):
        assert np.array_equal(got, whole.sums(column))  # the same floats


def _rows(seed: int, n: int, n_bins: int, n_keys: int) -> tuple[np.ndarray, Groups]:
    rng = np.random.default_rng(seed)
    bins = np.sort(rng.integers(0, n_bins, n)).astype(np.int16)
    bins[bins == 3] = 4  # a bin without rows
    keys = rng.integers(-1, n_keys, n).astype(np.int8)  # -1: no instance
    keys[(bins == 5) & (keys == 2)] = 0  # a cell without rows in a bin with rows
    codes = np.where(keys >= 0, bins.astype(np.int64) * n_keys + keys, -1)
    return bins, Groups.of(keys, range(n_keys)), codes


@pytest.mark.parametrize("sample_max", [None, 40, 1_000_000])
def test_bin_cells_give_the_figures_of_one_grouping(monkeypatch: pytest.MonkeyPatch,
                                                    sample_max: int | None) -> None:
    # slices of 500 rows: blocks of bins, the sample's draws across slice edges
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    n_bins, n_keys = 12, 7
    bins, keys, codes = _rows(1, 6_000, n_bins, n_keys)
    rng = np.random.default_rng(2)
    values = rng.exponential(1.0, bins.size)
    values[::13] = np.nan
    ints = rng.integers(0, 1000, bins.size)
    cells = cell_groups(bins, keys, n_bins, sample_max)
    _same_as_groups(cells, Groups.of(codes, range(n_bins * n_keys), sample_max=sample_max),
                    values, ints)


def test_bins_out_of_order_group_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    bins, keys, codes = _rows(3, 3_000, 6, 4)
    bins = bins[::-1].copy()
    cells = cell_groups(bins, keys, 6, 40)
    assert isinstance(cells, WholeCells)
    codes = np.where(keys.codes >= 0, bins.astype(np.int64) * 4 + keys.codes, -1)
    whole = Groups.of(codes, range(24), sample_max=40)
    assert np.array_equal(cells.groups.order, whole.order)


@pytest.mark.parametrize("sample_max", [None, 40])
def test_bin_cells_with_every_key_and_every_cell(monkeypatch: pytest.MonkeyPatch,
                                                 sample_max: int | None) -> None:
    """Every row has a key and every cell has rows (the usual capture): the cells are their
    own groups, and unsampled blocks are read as runs of rows; the same figures."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    n_bins, n_keys = 10, 6
    rng = np.random.default_rng(5)
    bins = np.sort(rng.integers(0, n_bins, 6_000)).astype(np.int16)
    keys_codes = (np.arange(bins.size) % n_keys).astype(np.int8)  # round robin: every cell
    keys = Groups.of(keys_codes, range(n_keys))
    assert keys.complete
    codes = bins.astype(np.int64) * n_keys + keys_codes
    values = rng.exponential(1.0, bins.size)
    values[::17] = np.nan
    ints = rng.integers(0, 1000, bins.size)
    cells = cell_groups(bins, keys, n_bins, sample_max)
    whole = Groups.of(codes, range(n_bins * n_keys), sample_max=sample_max)
    assert whole.n_groups == n_bins * n_keys
    _same_as_groups(cells, whole, values, ints)


@pytest.mark.parametrize("sample_max", [None, 40])
def test_cell_order_is_the_stable_order_of_the_cells(monkeypatch: pytest.MonkeyPatch,
                                                     sample_max: int | None) -> None:
    """Each block's values sorted by key bin by bin are its values in the stable order of
    their cells (rows without a key, bins and cells without rows included)."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    n_bins, n_keys = 12, 7
    bins, keys, _codes = _rows(4, 6_000, n_bins, n_keys)
    cells = cell_groups(bins, keys, n_bins, sample_max)
    assert isinstance(cells, BinCells)
    for first, end in row_slices.group_blocks(cells._bin_picked):
        lo, hi = int(cells._bin_picked[first]), int(cells._bin_picked[end])
        rows = cells._rows[lo:hi] if cells._rows is not None else \
            np.flatnonzero(keys.codes[lo:hi] >= 0) + lo
        block = np.arange(rows.size, dtype=np.float64)  # each value its position in the block
        got, per_cell = cells._in_cell_order(block, rows, first, end, lo)
        want = stable_order.stable_order(cells._codes(rows).astype(np.int64), cells.n_groups)
        assert np.array_equal(got, want)
        # and the rows of every cell of the block's bins, used or not
        cell_of = bins[rows].astype(np.int64) * n_keys + keys.codes[rows] - first * n_keys
        assert np.array_equal(per_cell, np.bincount(cell_of, minlength=(end - first) * n_keys))
    complete = cell_groups(bins, Groups.of(np.abs(keys.codes), range(n_keys)), n_bins, None)
    assert isinstance(complete, BinCells)
    end = int(complete._bin_start[2])  # a run of rows: the first two bins'
    got, _per_cell = complete._in_cell_order(np.arange(end, dtype=np.float64), slice(0, end),
                                             0, 2, 0)
    assert np.array_equal(got, stable_order.stable_order(
        complete._codes(slice(0, end)).astype(np.int64), complete.n_groups))


def test_cell_sums_of_a_grouping_are_its_sums() -> None:
    bins, keys, codes = _rows(6, 900, 5, 3)
    cells = cell_groups(bins, keys, 5, None)  # one slice: ``Groups.of`` itself
    assert isinstance(cells, WholeCells)
    values = np.linspace(0.0, 1.0, bins.size)
    values[::7] = np.nan
    whole = Groups.of(codes, range(15))
    got = cells.sums_of((values,))
    assert np.array_equal(got[0], whole.sums(values))
    assert cells.sums_of(()) == []
    assert cells.n_groups == whole.n_groups and np.array_equal(cells.ids, whole.ids)
    assert np.array_equal(cells.medians(values), whole.medians(values), equal_nan=True)


@pytest.mark.parametrize("sample_max", [None, 40])
def test_bin_cells_with_every_key_and_empty_cells(monkeypatch: pytest.MonkeyPatch,
                                                  sample_max: int | None) -> None:
    """Every row has a key, some bins and cells have no rows: counted bin by bin, the same
    cells, counts, medians and sums as ``Groups.of``."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    n_bins, n_keys = 12, 7
    bins, keys, _codes = _rows(7, 6_000, n_bins, n_keys)
    every = Groups.of(np.abs(keys.codes), range(n_keys))  # the missing keys made key 1
    assert every.complete
    codes = bins.astype(np.int64) * n_keys + every.codes
    cells = cell_groups(bins, every, n_bins, sample_max)
    assert isinstance(cells, BinCells)
    whole = Groups.of(codes, range(n_bins * n_keys), sample_max=sample_max)
    assert whole.n_groups < n_bins * n_keys  # bin 3 and a cell of bin 5 have no rows
    values = np.random.default_rng(8).exponential(1.0, bins.size)
    _same_as_groups(cells, whole, values)
    if sample_max is not None:  # drawn bin by bin: the rows of the draws against each cell
        from pdprobe.analysis.grouped import SAMPLE_SEED
        from pdprobe.analysis.row_sample import sample_rows

        rate = np.minimum(1.0, sample_max / cells.totals).astype(np.float32)
        want = sample_rows(cells._codes, rate, SAMPLE_SEED, n_rows=bins.size)
        assert cells._rows is not None and cells._rows.dtype == want.dtype
        assert np.array_equal(cells._rows, want)


def test_medians_of_consecutive_groups_are_those_of_groups() -> None:
    """``_medians`` (one partition per group, in place) gives ``Groups.medians``' figures:
    odd and even groups, groups of one and of none, NaN values, ties, all-NaN groups."""
    from pdprobe.analysis.evidence.cells import medians_of

    rng = np.random.default_rng(9)
    sizes = np.array([0, 1, 2, 3, 4, 0, 7, 10, 1, 5, 6], dtype=np.int64)
    codes = np.repeat(np.arange(sizes.size), sizes)
    values = rng.integers(0, 4, codes.size).astype(np.float64)  # many ties
    values[[1, 5, 9]] = np.nan
    values[codes == 8] = np.nan  # a group of one NaN: no value
    want = Groups.of(codes, range(sizes.size)).medians(values)
    full = np.full(sizes.size, np.nan)
    full[np.flatnonzero(sizes)] = want
    assert np.array_equal(medians_of(values.copy(), sizes), full, equal_nan=True)
    assert medians_of(np.array([]), np.array([], dtype=np.int64)).size == 0
    assert np.array_equal(medians_of(np.array([]), np.zeros(3, dtype=np.int64)),
                          np.full(3, np.nan), equal_nan=True)


def test_medians_of_values_known_without_nan_are_the_tested_ones() -> None:
    """``no_nan`` skips the NaN test only: values without NaN give the same medians."""
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 9, 40)
    values = rng.choice([0.0, 1.0, 2.5, -3.0, np.inf], int(sizes.sum()))
    want = medians_of(values.copy(), sizes)
    assert np.array_equal(medians_of(values.copy(), sizes, no_nan=True), want, equal_nan=True)


@pytest.mark.parametrize("with_nan", [True, False])
def test_request_figures_bin_medians_are_pandas_groupby_medians(
        monkeypatch: pytest.MonkeyPatch, with_nan: bool) -> None:
    """The per-(bin, instance) medians ``request_figures`` writes (TPOT per decode instance,
    prefill time per token per prefill instance) by blocks of bins (``CHUNK_ROWS`` patched
    small), with one NaN per column (the cells' medians then test for NaN: ``_no_nan``) or
    none (they skip the test): a pandas groupby's medians of the same rows."""
    import pandas as pd

    from pdprobe.analysis.evidence.columns import InstanceColumns
    from pdprobe.analysis.evidence.frame_bins import FrameBins
    from pdprobe.analysis.evidence.model import Window
    from pdprobe.analysis.evidence.per_instance import request_figures
    from tests.rules.builders import make_dataset

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 300)
    rng = np.random.default_rng(21)
    n = 3_000
    arrival = np.sort(rng.uniform(0.0, 600.0, n))
    prefill_at = rng.choice(["p0", "p1", "p2"], n)
    decode_at = rng.choice(["d0", "d1"], n)
    tpot = rng.exponential(0.02, n)
    prefill = rng.exponential(0.3, n)
    prompt = rng.integers(1, 4_000, n)
    if with_nan:
        tpot[1_234] = np.nan
        prefill[2_001] = np.nan
    requests = pd.DataFrame({"arrival_ts": arrival, "prompt_tokens": prompt,
                             "output_tokens": 50, "prefill_s": prefill, "tpot_s": tpot,
                             "ttft_s": prefill + 0.1, "prefill_instance": prefill_at,
                             "decode_instance": decode_at})
    ds = make_dataset(requests)
    window = Window(0.0, 600.0, 15.0)
    bins = FrameBins()
    cols = InstanceColumns(pd.Index(["p0", "p1", "p2", "d0", "d1"]))
    cols.set_text("role", ["prefill"] * 3 + ["decode"] * 2)
    request_figures(ds, window, cols, bins)
    frame = pd.DataFrame({"bin": window.bin_ts[window.bin_of(arrival)], "tpot": tpot,
                          "per_token": prefill / np.maximum(prompt, 1),
                          "prefill_at": prefill_at, "decode_at": decode_at})
    for name, value, key in (("req_tpot", "tpot", "decode_at"),
                             ("req_prefill_per_token", "per_token", "prefill_at")):
        want = frame.groupby(["bin", key])[value].median().unstack(key)
        got = bins[name][want.columns].reindex(want.index)
        assert got.notna().all().all()
        np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
