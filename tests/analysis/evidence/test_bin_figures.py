"""Request rows grouped by arrival bin: the fields and figures of ``Groups``."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import row_slices
from pdprobe.analysis.evidence.bin_figures import bin_groups, sorted_figures, transfer_medians
from pdprobe.analysis.grouped import Groups


def _same_groups(got: Groups, want: Groups) -> None:
    for field in ("codes", "order", "bounds", "ids", "totals"):
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    assert (got.labels, got.sampled, got.complete, got.ordered) == \
        (want.labels, want.sampled, want.complete, want.ordered)


@pytest.mark.parametrize("sample_max", [None, 40, 100_000])
@pytest.mark.parametrize("case", ["every bin", "empty bins", "one bin", "unordered", "empty"])
def test_bin_groups_are_groups_of_the_bins(monkeypatch: pytest.MonkeyPatch,
                                           sample_max: int | None, case: str) -> None:
    """Bins in time order grouped run by run: the very fields of ``Groups.of`` (the same
    sampled rows, drawn across slice edges), bins without rows, one bin, no rows; bins out of
    order go to ``Groups.of`` itself."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    n_bins = 12
    rng = np.random.default_rng(11)
    bins = np.sort(rng.integers(0, n_bins, 6_000)).astype(np.int16)
    if case == "empty bins":
        bins[(bins == 0) | (bins == 3)] = 4
        bins[bins == 11] = 10
    elif case == "one bin":
        bins[:] = 5
    elif case == "unordered":
        bins = bins[::-1].copy()
    elif case == "empty":
        bins = bins[:0]
    _same_groups(bin_groups(bins, n_bins, sample_max),
                 Groups.of(bins, range(n_bins), sample_max=sample_max))


def test_sorted_figures_by_blocks_of_bins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bins sorted a block of grouped rows at a time: the medians and quantiles of every bin
    sorted at once (NaN values, a bin without values)."""
    rng = np.random.default_rng(13)
    bins = np.sort(rng.integers(0, 12, 2_000)).astype(np.int16)
    values = np.where(rng.random(bins.size) < 0.5, 0.0, rng.exponential(1.0, bins.size))
    values[::7] = np.nan
    values[bins == 3] = np.nan
    groups = Groups.of(bins, range(12))
    ranked = groups.sorted(values)  # every bin sorted at once
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 300)  # blocks of a bin or two
    median, p90 = sorted_figures(groups, values, 0.9)
    assert np.array_equal(median, ranked.median(), equal_nan=True)
    assert np.array_equal(p90, ranked.quantile(0.9), equal_nan=True)
    assert np.isnan(sorted_figures(groups, values)[1]).all()


@pytest.mark.parametrize("sample_max", [None, 40])
def test_transfer_medians_are_the_medians_of_each_figure(monkeypatch: pytest.MonkeyPatch,
                                                         sample_max: int | None) -> None:
    """The transfer time's and the time per GB's medians from one gather of each column a
    block at a time: ``Groups.medians`` of the time and of 1e9 * time / bytes (NaN where the
    bytes are not above 0), NaN times, integer bytes, no bytes."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 300)
    rng = np.random.default_rng(14)
    bins = np.sort(rng.integers(0, 10, 3_000)).astype(np.int16)
    seconds = rng.exponential(0.05, bins.size)
    seconds[::9] = np.nan
    kv = rng.integers(-5, 1_000_000, bins.size)
    kv[::4] = 0
    groups = bin_groups(bins, 10, sample_max)
    want = groups.medians(seconds)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = 1e9 * seconds / np.where(kv > 0, kv, np.nan)
    median, per_gb = transfer_medians(groups, seconds, kv)
    assert np.array_equal(median, want, equal_nan=True)
    assert per_gb is not None
    assert np.array_equal(per_gb, groups.medians(ratio), equal_nan=True)
    kv_float = kv.astype(np.float64)
    kv_float[::7] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = 1e9 * seconds / np.where(kv_float > 0, kv_float, np.nan)
    assert np.array_equal(transfer_medians(groups, seconds, kv_float)[1],
                          groups.medians(ratio), equal_nan=True)
    alone = transfer_medians(groups, seconds, None)
    assert alone[1] is None and np.array_equal(alone[0], want, equal_nan=True)


@pytest.mark.parametrize("sample_max", [None, 50])
def test_run_counts_and_sums_are_the_groupings(sample_max: int | None) -> None:
    """Runs of rows: each run's non-NaN values counted and added in row order, the very
    floats of ``Groups.sums`` (signed zeros, infinities and NaN included)."""
    from pdprobe.analysis.evidence.bin_figures import run_counts_and_sums

    rng = np.random.default_rng(11)
    for trial in range(20):
        n = int(rng.integers(1, 4_000))
        bins = np.sort(rng.integers(0, 25, n)).astype(np.int16)
        groups = bin_groups(bins, 25, sample_max)
        assert groups.ordered
        v = rng.choice([0.0, -0.0, 1.5, 1e300, np.nan, 3.25e-7, -2.0, np.inf], n) * rng.random(n)
        if trial % 4 == 0:
            v = rng.choice([0.0, -0.0, np.nan], n)
        counts, sums = run_counts_and_sums(groups, v)
        assert np.array_equal(counts, groups.counts(v))
        assert np.array_equal(sums, groups.sums(v), equal_nan=True)
        assert np.array_equal(np.signbit(sums), np.signbit(groups.sums(v)))
        # no_nan (a finite sum of the column: no NaN, no infinity): no NaN test, the same
        finite = np.where(np.isfinite(v), v, 2.5)
        counts, sums = run_counts_and_sums(groups, finite, no_nan=True)
        assert np.array_equal(counts, groups.counts(finite))
        assert np.array_equal(sums, groups.sums(finite))
        assert np.array_equal(np.signbit(sums), np.signbit(groups.sums(finite)))


def test_bin_sample_drawn_beside_the_cells_is_bin_groups_own(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """The arrival bins' sample drawn from a role column's cell sample's draws (the same
    seeded stream, one float32 per row) is the sample ``bin_groups`` draws itself."""
    from pdprobe.analysis.evidence.bin_figures import BinSample
    from pdprobe.analysis.evidence.cells import BinCells, cell_groups

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 500)
    rng = np.random.default_rng(12)
    bins = np.sort(rng.integers(0, 9, 6_000)).astype(np.int8)
    bins[bins == 3] = 4  # a bin without rows
    keys = Groups.of(rng.integers(0, 5, bins.size).astype(np.int8), range(5))
    sample = BinSample(bins, 9, 300)
    cells = cell_groups(bins, keys, 9, 40, beside=sample)  # cells sampled bin by bin
    assert isinstance(cells, BinCells) and sample.complete
    _same_groups(bin_groups(bins, 9, 300, drawn=sample), bin_groups(bins, 9, 300))
    # the cells' own sample is unchanged by it
    values = rng.random(bins.size)
    assert np.array_equal(cells.medians(values), cell_groups(bins, keys, 9, 40).medians(values))
