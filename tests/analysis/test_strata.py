"""Tests for pdprobe/analysis/strata.py: the capacity mix's stratified sample
(``stratified_sample``) and the length strata it is drawn over (``octaves``, ``length_strata``,
the chunks' counts ``StrataCodes`` keeps)."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import sampling
from pdprobe.analysis import strata as stratamod


def _requests(n: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.uniform(0, 3600, n))
    prompt = np.maximum(np.round(rng.lognormal(7.0, 1.2, n)), 1.0)
    output = np.maximum(np.round(rng.lognormal(5.0, 1.0, n)), 1.0)
    return ts, prompt, output


def test_inputs_at_or_below_the_size_are_not_sampled() -> None:
    _, prompt, output = _requests(5000)
    strata = stratamod.length_strata(prompt, output)
    assert stratamod.stratified_sample(strata, 5000) is None
    assert stratamod.stratified_sample(strata, 10_000) is None


def test_stratified_sample_holds_every_window_and_length_bin_in_proportion() -> None:
    """Each (10 s window, prompt octave, output octave) stratum holds its proportional share
    to within one request, the total is exact, and the same input gives the same sample."""
    n, size = 200_000, 20_000
    ts, prompt, output = _requests(n)
    strata = stratamod.length_strata(prompt, output)
    keep = stratamod.stratified_sample(strata, size)
    assert keep is not None and len(keep) == size
    assert np.all(np.diff(keep) > 0)  # ascending positions: arrival order kept
    again = stratamod.stratified_sample(stratamod.length_strata(prompt, output), size)
    assert again is not None and np.array_equal(keep, again)
    window = (ts // 10.0).astype(np.int64)
    cell = window * 4096 + strata
    uniq, count = np.unique(cell, return_counts=True)
    taken = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(taken, np.searchsorted(uniq, cell[keep]), 1)
    expected = count * (size / n)
    assert np.all(np.abs(taken - expected) < 1.0)
    # the octaves: every length bin with at least a few expected requests is represented
    bins, per_bin = np.unique(strata, return_counts=True)
    held = np.isin(bins, strata[keep])
    assert held[per_bin * size / n >= 1.0].all()


def test_octaves_are_frexp_exponents_clipped() -> None:
    """The exponent field read as bits is ``np.frexp``'s exponent, clipped: integers, floats
    of every magnitude and sign, zeros, subnormals, NaN and infinities."""
    rng = np.random.default_rng(9)
    floats = np.concatenate([
        rng.uniform(-1e6, 1e6, 1000), 2.0 ** rng.integers(-1074, 1024, 1000),
        np.array([0.0, -0.0, 5e-324, np.nan, np.inf, -np.inf, 1.0, 2.0, 2.0**63, 0.5, 1e308])])
    ints = np.concatenate([rng.integers(-10, 2**62, 1000), [0, 1, 2, 3, 2**53 + 1, -(2**62)]])
    with np.errstate(over="ignore"):  # (float32: the largest floats become infinities)
        small = floats.astype(np.float32)
    for values in (floats, ints, (ints % 2**31).astype(np.int32), small):
        expected = np.clip(np.frexp(np.asarray(values, dtype=np.float64))[1], 0, 63)
        assert np.array_equal(stratamod.octaves(values), expected)


def test_length_strata_are_octaves_of_prompt_and_output() -> None:
    codes = stratamod.length_strata(np.array([1.0, 2.0, 3.0, 1024.0]),
                                    np.array([1.0, 1.0, 7.0, 8.0]))
    # prompt 1 -> octave 1, 2-3 -> 2, 1024 -> 11; output 1 -> 1, 7 -> 3, 8 -> 4
    assert codes.tolist() == [1 * 64 + 1, 2 * 64 + 1, 2 * 64 + 3, 11 * 64 + 4]


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint16, np.uint64])
def test_integer_lengths_coded_by_the_octave_table_are_the_bit_operations(dtype: type) -> None:
    """Integer lengths below ``OCTAVE_TABLE_SIZE`` are coded from a table of octaves (their
    largest found, or known from the caller: ``peak``); longer or negative ones by the bit
    operations: the same codes either way."""
    rng = np.random.default_rng(3)
    prompt = rng.integers(0, 60_000, 5_000).astype(dtype)
    output = rng.integers(0, 5_000, 5_000).astype(dtype)
    want = stratamod.octaves(prompt) * 64 + stratamod.octaves(output)
    for peak in (None, int(max(prompt.max(), output.max()))):
        codes = stratamod.StrataCodes(len(prompt), 2)
        codes.add(0, prompt, output, peak=peak)
        assert codes.code.tolist() == want.tolist()
    if np.dtype(dtype).kind == "i":
        long = prompt.astype(np.int64)
        long[[5, 9, 11, 12]] = [-3, 65_535, 65_536, 70_000]  # beyond the table: the bit operations
        # the table's last length (65,535) and the first beyond it (65,536, the largest found
        # or known): the bit operations, not the table's last entry clipped to
        edge = prompt.astype(np.int64)
        edge[[11, 12]] = [65_535, 65_536]
        for values, peak in ((long, None), (edge, None), (edge, 65_536)):
            codes = stratamod.StrataCodes(len(values), 2)
            codes.add(0, values, output, peak=peak)
            assert codes.code.tolist() == (stratamod.octaves(values) * 64
                                           + stratamod.octaves(output)).tolist()


@pytest.mark.parametrize(("n", "size", "chunk"), [(200_000, 20_000, 4099), (10_007, 9_999, 7),
                                                  (5_000, 1, 1 << 16), (33_333, 3_000, 100)])
@pytest.mark.parametrize("table_cells", [0, 1 << 20])
def test_stratified_sample_by_chunks_is_the_stable_sort_selection(
        monkeypatch: pytest.MonkeyPatch, n: int, size: int, chunk: int,
        table_cells: int) -> None:
    """Ranked within strata a chunk at a time (small codes), the sample is the one the stable
    sort of every code selects (codes too large for the counting table take that path), the
    chunks' counts kept from the first pass or counted again."""
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    monkeypatch.setattr(stratamod, "STRATA_TABLE_CELLS", table_cells)
    _, prompt, output = _requests(n, seed=n)
    strata = stratamod.length_strata(prompt, output)
    assert strata.dtype == np.int16
    keep = stratamod.stratified_sample(strata, size)
    k = np.arange(size, dtype=np.int64)
    pos = ((2 * k + 1) * n + 2 * size - 1) // (2 * size) - 1
    expected = np.sort(np.argsort(strata, kind="stable")[pos])
    assert keep is not None and np.array_equal(keep, expected)
    large = stratamod.stratified_sample(strata.astype(np.int64) + 2**40, size)
    assert large is not None and np.array_equal(large, expected)
    # counted while the strata were made (the mix's way): the same sample, no counting pass;
    # tables beyond STRATA_TABLE_CELLS are not kept (then counted in the sample's passes)
    counted: list[np.ndarray] = []
    again = stratamod.length_strata(prompt, output, counts=counted)
    n_chunks = len(range(0, n, chunk))
    kept = n_chunks * stratamod.LENGTH_OCTAVES ** 2 <= table_cells
    assert np.array_equal(again, strata) and len(counted) == (n_chunks if kept else 0)
    if kept:
        monkeypatch.setattr(np, "bincount", lambda *a, **k: pytest.fail("counted again"))
    assert np.array_equal(stratamod.stratified_sample(strata, size, counted), expected)
