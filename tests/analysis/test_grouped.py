"""Grouped figures on integer codes equal pandas' groupby figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.group_figures import GroupFigures, _blocked_order_statistics
from pdprobe.analysis.grouped import (
    Groups,
    category_mask,
    figures,
    key_codes,
    key_groups,
    stable_order,
)

QS = (0.0, 0.1, 0.25, 0.5, 0.9, 0.99, 1.0)


def _frame(seed: int, n: int, categorical: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    keys = rng.choice(np.array(["d-1", "b-2", "a-3", "c-4", "e-5"], dtype=object), n)
    keys[rng.random(n) < 0.1] = None  # rows naming no instance
    values = rng.lognormal(size=n)
    values[rng.random(n) < 0.3] = np.nan
    if seed % 2:
        values = np.round(values, 1)  # ties
    values[keys == "e-5"] = np.nan  # a group whose values are all missing
    key = pd.Series(pd.Categorical(keys, categories=["a-3", "b-2", "c-4", "d-1", "e-5",
                                                     "z-unused"])) if categorical \
        else pd.Series(keys, dtype=object)
    return pd.DataFrame({"key": key, "value": values})


def _expected(frame: pd.DataFrame) -> dict[str, pd.Series]:
    key = frame["key"] if isinstance(frame["key"].dtype, pd.CategoricalDtype) \
        else frame["key"].dropna().astype(str).astype("category")
    grouped = frame.loc[key.index, "value"].groupby(key, observed=True, sort=True)
    out = {"count": grouped.count(), "mean": grouped.mean(), "max": grouped.max(),
           "median": grouped.median()}
    out.update({f"q{q}": grouped.quantile(q) for q in QS})
    for series in out.values():
        series.index = series.index.astype(str).astype(object)
    return out


def test_unused_categories_and_missing_keys_are_not_groups() -> None:
    frame = _frame(3, 200, categorical=True)
    groups = Groups.of(*key_codes(frame["key"]))
    assert "z-unused" not in groups.labels
    assert groups.totals.sum() == frame["key"].notna().sum()
    assert (groups.codes[frame["key"].isna().to_numpy()] == -1).all()
    # e-5 has rows but no values: a group with a count of 0 and NaN figures
    figs = GroupFigures.of(groups.sorted(frame["value"].to_numpy()))
    e5 = groups.labels.index("e-5")
    assert figs.count[e5] == 0 and np.isnan(figs.p90[e5]) and np.isnan(figs.mean[e5])


def test_sums_equal_pandas_grouped_sum() -> None:
    frame = _frame(4, 300, categorical=True)
    groups = Groups.of(*key_codes(frame["key"]))
    want = frame.groupby("key", observed=True)["value"].sum()
    np.testing.assert_allclose(groups.sums(frame["value"].to_numpy()), want.to_numpy(),
                               rtol=1e-12)


@pytest.mark.parametrize("n_groups", [3, 40_000])
def test_stable_order_is_a_stable_sort(n_groups: int) -> None:
    rng = np.random.default_rng(0)
    codes = rng.integers(0, n_groups, 100_000)
    np.testing.assert_array_equal(stable_order(codes, n_groups),
                                  np.argsort(codes, kind="stable"))


def test_many_groups_cells() -> None:
    """More groups than one radix digit holds (per-bin, per-instance cells)."""
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 50_000, 200_000)
    values = rng.normal(size=codes.size)
    groups = Groups.of(codes, range(50_000))
    want = pd.Series(values).groupby(codes).median()
    np.testing.assert_array_equal(groups.ids, want.index.to_numpy())
    np.testing.assert_array_equal(groups.sorted(values).median(), want.to_numpy())


def test_figures_are_computed_once_per_table() -> None:
    frame = _frame(2, 100, categorical=True)
    first = figures(frame, "key", "value")
    assert figures(frame, "key", "value") is first
    assert key_groups(frame, "key") is key_groups(frame, "key")
    other = frame.copy()
    assert figures(other, "key", "value") is not first
    derived = frame["value"].to_numpy() * 2
    np.testing.assert_allclose(figures(frame, "key", "double", derived).p90, first.p90 * 2,
                               rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("categorical", [True, False])
def test_category_mask(categorical: bool) -> None:
    values = ["ok", None, "Error", "timeout", "ok", "error"]
    column = pd.Series(pd.Categorical(values)) if categorical else pd.Series(values,
                                                                             dtype=object)
    np.testing.assert_array_equal(category_mask(column, lambda s: s != "ok"),
                                  [False, False, True, True, False, True])
    np.testing.assert_array_equal(category_mask(column, lambda s: s.lower() == "error"),
                                  [False, False, True, False, False, True])


# --- above the threshold: quantiles from a sample, counts, sums, means and maxima exact -------

def _rank_gap(exact_sorted: np.ndarray, estimate: float, q: float) -> float:
    """How far (in share of the values) ``estimate`` sits from the exact ``q`` quantile."""
    n = exact_sorted.size
    low = np.searchsorted(exact_sorted, estimate, side="left") / n
    high = np.searchsorted(exact_sorted, estimate, side="right") / n
    return 0.0 if low <= q <= high else min(abs(low - q), abs(high - q))


def _rank_tolerance(q: float, m: int) -> float:
    """Four standard deviations of a quantile's rank read from ``m`` sampled values."""
    return 4.0 * float(np.sqrt(q * (1.0 - q) / m)) + 1.0 / m


def test_sampled_figures_on_a_million_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """1M synthetic rows, 16 instances and one small one: above the threshold the quantiles of
    a group larger than GROUP_SAMPLE_MAX come from a sample, within the stated rank error; the
    small group and every count, mean and max stay exact."""
    from pdprobe.analysis import grouped

    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", 500_000)  # 1M rows: sampled
    rng = np.random.default_rng(11)
    n = 1_000_000
    codes = rng.integers(0, 16, n)
    codes[:300] = 16  # a small instance: every row read
    # round-robin-like periodic slowness must not alias the sample
    values = rng.lognormal(mean=-1.0 + 0.05 * codes + 0.3 * (np.arange(n) % 5 == 0), sigma=0.6)
    values[rng.random(n) < 0.02] = np.nan
    names = [f"decode-{i}" for i in range(17)]
    frame = pd.DataFrame({"key": pd.Categorical.from_codes(codes, categories=names),
                          "value": values})
    lean = figures(frame, "key", "value", moments=False)  # quantiles only: no mean, no max
    assert np.isnan(lean.mean).all() and np.isnan(lean.max).all()
    got = figures(frame, "key", "value")  # measured again, with them
    assert got is not lean and got.moments
    assert figures(frame, "key", "value", moments=False) is got
    np.testing.assert_array_equal(got.p90, lean.p90)
    assert key_groups(frame, "key").sampled
    exact_groups = Groups.of(codes, names)
    exact = GroupFigures.of(exact_groups.sorted(values))
    np.testing.assert_array_equal(got.count, exact.count)
    np.testing.assert_array_equal(got.max, exact.max)
    np.testing.assert_allclose(got.mean, exact.mean, rtol=1e-12)
    ordered = exact_groups.sorted(values)
    for g in range(17):
        part = ordered.values[ordered.bounds[g]:ordered.bounds[g + 1]]
        m = min(part.size, grouped.GROUP_SAMPLE_MAX)
        for q, stat in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            estimate = getattr(got, stat)[g]
            assert _rank_gap(part, estimate, q) <= _rank_tolerance(q, m), (g, stat)
        if g == 16:  # below GROUP_SAMPLE_MAX: exact
            assert got.p90[g] == exact.p90[g] and got.median[g] == exact.median[g]


def test_sampled_cells_and_rows_are_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdprobe.analysis import grouped

    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", 1_000)
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 100, 300_000)  # 3,000 rows a cell
    values = rng.normal(size=codes.size)
    cap = grouped.sample_max(codes.size, grouped.CELL_SAMPLE_MAX)
    a = Groups.of(codes, range(100), sample_max=cap)
    b = Groups.of(codes, range(100), sample_max=cap)
    np.testing.assert_array_equal(a.order, b.order)
    assert a.sampled and a.sizes.max() < 1.5 * grouped.CELL_SAMPLE_MAX
    np.testing.assert_array_equal(a.totals, np.bincount(codes, minlength=100))
    exact = Groups.of(codes, range(100)).sorted(values)
    medians = a.sorted(values).median()
    for g in range(0, 100, 7):
        part = exact.values[exact.bounds[g]:exact.bounds[g + 1]]
        m = min(part.size, grouped.CELL_SAMPLE_MAX)
        assert _rank_gap(part, medians[g], 0.5) <= _rank_tolerance(0.5, m)
    frame = pd.DataFrame({"v": values})
    rows = grouped.quantile_rows(frame)
    assert rows is not None and rows is grouped.quantile_rows(frame)
    expected = grouped.COLUMN_SAMPLE_ROWS * 1.0 if codes.size > grouped.COLUMN_SAMPLE_ROWS \
        else codes.size
    assert abs(rows.size - expected) <= 5 * np.sqrt(expected) + 1
    small = pd.DataFrame({"v": values[:500]})
    assert grouped.quantile_rows(small) is None
    column = small["v"]
    assert grouped.for_quantiles(small, column) is column


# --- compact codes, slices and row getters: the same figures with less memory ---------------

@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
@pytest.mark.parametrize("seed", range(3))
def test_sliced_passes_equal_one_pass(monkeypatch: pytest.MonkeyPatch, chunk: int,
                                      seed: int) -> None:
    """Counts, sums and maxima taken slice by slice (odd slice sizes, int8 codes with -1, NaN,
    a group without values) are pandas' grouped count/sum/max, the sums to the last bit of
    one bincount."""
    from pdprobe.analysis import row_slices

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    frame = _frame(seed, 501, categorical=True)
    codes, labels = key_codes(frame["key"])
    assert codes.dtype == np.int8  # the categorical's own codes, not an int64 copy
    groups = Groups.of(codes, labels)
    assert groups.order.dtype == np.int32
    values = frame["value"].to_numpy()
    want = _expected(frame)
    np.testing.assert_array_equal(groups.counts(values), want["count"].to_numpy())
    one_pass = np.bincount(groups.codes[groups.codes >= 0].astype(np.int64),
                           weights=np.nan_to_num(values[groups.codes >= 0]),
                           minlength=groups.n_groups)
    np.testing.assert_array_equal(groups.sums(values), one_pass)
    top = groups.maxima(values, groups.counts(values))
    np.testing.assert_array_equal(top, want["max"].to_numpy(dtype=np.float64))


def test_row_getter_equals_the_array(monkeypatch: pytest.MonkeyPatch) -> None:
    """A derived column given as a row getter gives the figures of the materialised column,
    and the getter is only ever asked for slices and for the grouping's rows."""
    from pdprobe.analysis import row_slices

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 100)
    frame = _frame(5, 450, categorical=True)
    groups = Groups.of(*key_codes(frame["key"]))
    values = frame["value"].to_numpy() * 3.0
    asked: list[int] = []

    def getter(rows: slice | np.ndarray) -> np.ndarray:
        part = values[rows]
        asked.append(part.size)
        return part.copy()

    a = GroupFigures.measure(groups, values)
    b = GroupFigures.measure(groups, getter)
    for stat in ("count", "mean", "max", "median", "p90", "p99"):
        np.testing.assert_array_equal(getattr(a, stat), getattr(b, stat), err_msg=stat)
    assert max(asked) <= max(100, groups.order.size)


def test_sampled_grouping_with_slices_is_the_one_pass_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample's draws taken slice by slice are those of one draw: the same rows."""
    from pdprobe.analysis import grouped, row_slices

    rng = np.random.default_rng(3)
    codes = rng.integers(-1, 5, 20_001).astype(np.int16)
    whole = Groups.of(codes, range(5), sample_max=700)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 999)
    sliced = Groups.of(codes, range(5), sample_max=700)
    assert whole.sampled and sliced.sampled
    np.testing.assert_array_equal(whole.order, sliced.order)
    np.testing.assert_array_equal(whole.bounds, sliced.bounds)
    n = 20_001
    uniform = np.random.default_rng(grouped.SAMPLE_SEED).random(n, dtype=np.float32)
    rate = np.minimum(1.0, 700 / np.bincount(codes[codes >= 0], minlength=5)).astype(np.float32)
    expected = np.flatnonzero(uniform < np.append(rate, np.float32(0.0))[codes])
    np.testing.assert_array_equal(np.sort(sliced.order), expected)


def test_string_keys_get_compact_codes() -> None:
    column = pd.Series(["b", None, "a", "b"], dtype=object)
    codes, labels = key_codes(column)
    assert codes.dtype == np.int8 and labels == ["a", "b"]
    np.testing.assert_array_equal(codes, [1, -1, 0, 1])




def test_integer_column_counts_are_the_group_totals() -> None:
    """An integer column (never NaN) counts every row of its group, rows without a group left
    out, as the count of the same values as floats."""
    rng = np.random.default_rng(12)
    n = 203
    codes = rng.integers(-1, 4, n).astype(np.int8)
    groups = Groups.of(codes, ["a", "b", "c", "d"])
    tokens = rng.integers(0, 50_000, n)
    np.testing.assert_array_equal(groups.counts(tokens), np.bincount(codes[codes >= 0]))
    np.testing.assert_array_equal(groups.counts(tokens), groups.counts(tokens.astype(float)))


@pytest.mark.parametrize("seed", range(4))
def test_medians_by_partition_are_the_sorted_medians(seed: int) -> None:
    """Medians from a partition at each group's middle are, to the bit, the sorted groups'
    medians and pandas' grouped median: odd and even groups, one- and two-value groups, ties,
    NaN rows and a group without values."""
    rng = np.random.default_rng(seed)
    n = 400
    codes = rng.integers(-1, 7, n).astype(np.int8)
    codes[:2] = 5  # group 5: exactly two values ...
    codes[codes == 5] = 4
    codes[:2] = 5
    codes[2] = 6  # ... group 6: one value
    codes[codes == 6] = 3
    codes[2] = 6
    values = np.round(rng.lognormal(size=n), 1)  # ties
    values[codes == 2] = np.nan  # a group without values
    values[::9] = np.nan
    values[2] = 1.5
    groups = Groups.of(codes, range(7))
    got = groups.medians(values)
    np.testing.assert_array_equal(got, groups.sorted(values).median())
    keep = codes >= 0
    want = pd.Series(values[keep]).groupby(codes[keep]).median()
    np.testing.assert_array_equal(got, want.reindex(range(7)).to_numpy())
    assert np.isnan(got[2]) and got[6] == 1.5


@pytest.mark.parametrize("chunk", [300, 1 << 20])
def test_sampled_figures_are_the_sorted_samples_figures(monkeypatch: pytest.MonkeyPatch,
                                                        chunk: int) -> None:
    """A sampled grouping's quantiles come from ``selected`` (a block of groups at a time with
    small slices) and equal the sorted sample's figures; its count, mean and max (one pass,
    ``moments``) those of ``counts``, ``sums`` and ``maxima`` over every row."""
    from pdprobe.analysis import row_slices

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(5)
    n = 20_000
    codes = rng.integers(-1, 4, n).astype(np.int8)
    values = rng.lognormal(size=n)
    values[rng.random(n) < 0.1] = np.nan
    groups = Groups.of(codes, range(4), sample_max=500)
    assert groups.sampled
    ordered = groups.sorted(values)
    got = GroupFigures.measure(groups, values)
    np.testing.assert_array_equal(got.median, ordered.median())
    for q, field in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
        np.testing.assert_array_equal(getattr(got, field), ordered.quantile(q))
    count = groups.counts(values)
    np.testing.assert_array_equal(got.count, count)
    np.testing.assert_array_equal(got.mean, groups.sums(values) / count)
    np.testing.assert_array_equal(got.max, groups.maxima(values, count))


@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_medians_of_many_same_size_groups(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Thousands of small groups (the evidence's (bin, instance) cells), partitioned a size
    at a time in blocks of any size, give pandas' grouped medians to the bit."""
    import pdprobe.analysis.groups as groups_module

    monkeypatch.setattr(groups_module, "MEDIAN_BLOCK_VALUES", block)
    rng = np.random.default_rng(3)
    n_groups, n = 3_000, 40_000
    codes = rng.integers(-1, n_groups, n).astype(np.int32)
    values = np.round(rng.lognormal(size=n), 2)
    values[rng.random(n) < 0.1] = np.nan
    got = Groups.of(codes, range(n_groups)).medians(values)
    keep = codes >= 0
    want = pd.Series(values[keep]).groupby(codes[keep]).median().reindex(range(n_groups))
    np.testing.assert_array_equal(got, want.to_numpy())


@pytest.mark.parametrize("sample", [None, 40])
def test_ordered_codes_group_without_a_sort(monkeypatch: pytest.MonkeyPatch,
                                            sample: int | None) -> None:
    """Codes that never decrease (time bins of arrivals in time order): the grouping is the
    sorted one, and integer sums are run sums equal to adding row by row in float64."""
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.groups import _run_sums

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 64)
    rng = np.random.default_rng(5)
    codes = np.sort(rng.integers(0, 9, 1_000)).astype(np.int8)
    codes[codes == 3] = 4  # an unused code
    tokens = rng.integers(0, 20_000, codes.size)
    groups = Groups.of(codes, range(9), sample_max=sample)
    assert groups.ordered and groups.sampled == (sample is not None)
    shuffled = Groups.of(codes[::-1].copy(), range(9), sample_max=sample)
    assert not shuffled.ordered
    if sample is None:
        np.testing.assert_array_equal(groups.order, stable_order(codes, 9)[:groups.order.size])
    else:
        assert np.all(np.diff(groups.order) > 0)
        np.testing.assert_array_equal(codes[groups.order], np.sort(codes[groups.order]))
    slow = groups._accumulate(tokens, np.add, 0.0, skip_nan=True)  # row by row
    np.testing.assert_array_equal(groups.sums(tokens), slow)
    assert _run_sums(tokens, groups.totals) is not None
    negative = tokens.copy()
    negative[3] = -7
    assert _run_sums(negative, groups.totals) is None  # added row by row
    np.testing.assert_array_equal(groups.sums(negative),
                                  groups._accumulate(negative, np.add, 0.0, skip_nan=True))
    assert _run_sums(np.full(4, 2 ** 52), np.array([4])) is None  # past 2**53


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
def test_compacted_is_the_masked_copy(chunk: int) -> None:
    """Values kept by a mask, compacted over the array's own front in chunks of any size,
    are the masked copy."""
    from pdprobe.analysis.row_gather import compacted

    rng = np.random.default_rng(5)
    v = rng.random(1_000)
    drop = rng.random(1_000) < 0.3
    want = v[~drop].copy()
    np.testing.assert_array_equal(compacted(v, drop, chunk), want)


@pytest.mark.parametrize("chunk", [50, 1 << 20])
def test_moments_in_one_pass_are_counts_sums_and_maxima(monkeypatch: pytest.MonkeyPatch,
                                                        chunk: int) -> None:
    """``moments`` is, to the bit, ``counts``, ``sums`` and ``maxima``: NaN in some slices and
    not others, rows without a group, a group without values, zeros of both signs, integer
    columns (ordered codes: the run sums), a derived column with a ``nan_like`` column."""
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.row_slices import Derived

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(chunk)
    n = 1_003
    codes = rng.integers(-1, 6, n).astype(np.int8)
    values = rng.normal(size=n)
    zero = rng.random(n) < 0.3
    values[zero] = rng.choice([0.0, -0.0], int(zero.sum()))
    values[200:260] = np.nan  # NaN in some slices only
    values[codes == 5] = np.nan  # group 5: no values
    integers = rng.integers(0, 1_000, n)
    for groups in (Groups.of(codes, range(6)), Groups.of(np.sort(codes[codes >= 0]), range(6))):
        size = groups.codes.size
        derived = Derived(lambda rows: values[rows] * 3.0, nan_like=values[:size])
        for column in (values[:size], integers[:size], derived):
            count, total, top = groups.moments(column)
            want = groups.counts(column)
            np.testing.assert_array_equal(count, want)
            np.testing.assert_array_equal(total, groups.sums(column))
            np.testing.assert_array_equal(top, groups.maxima(column, want))
            np.testing.assert_array_equal(np.signbit(top), np.signbit(groups.maxima(column,
                                                                                     want)))
    assert groups.ordered  # the sorted codes: integer sums per run


def test_moments_of_infinities_of_both_signs_are_counts_sums_and_maxima(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sum that turns NaN without a NaN value (inf - inf) in an early slice, NaN in a later
    one: ``moments`` adds the slices again as tested, to the bit ``counts``, ``sums`` and
    ``maxima``."""
    from pdprobe.analysis import row_slices

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 40)
    rng = np.random.default_rng(31)
    n = 400
    codes = rng.integers(0, 4, n).astype(np.int8)
    values = rng.normal(size=n)
    values[[3, 5]] = [np.inf, -np.inf]
    codes[[3, 5]] = 1
    values[300] = np.nan
    groups = Groups.of(codes, range(4))
    for column in (values, np.where(np.isnan(values), 1.0, values)):
        with np.errstate(invalid="ignore"):  # inf - inf
            count, total, top = groups.moments(column)
            want_total = groups.sums(column)
        want = groups.counts(column)
        np.testing.assert_array_equal(count, want)
        np.testing.assert_array_equal(total, want_total)
        np.testing.assert_array_equal(top, groups.maxima(column, want))
    clean = rng.normal(size=n)
    clean[250] = np.nan  # NaN in a later slice only
    count, total, _top = groups.moments(clean)
    np.testing.assert_array_equal(total, groups.sums(clean))
    np.testing.assert_array_equal(count, groups.counts(clean))


def test_known_code_counts_and_one_rate_draws_give_the_same_grouping(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A grouping given its rows per code (``know_code_counts``) is the one that counts them,
    and one whose groups share a sampling rate draws the same rows with that one rate;
    counts that miss rows (a row without a key) are not taken."""
    from pdprobe.analysis import grouped, row_slices
    from pdprobe.analysis.group_plan import GroupPlan

    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", 1_000)
    monkeypatch.setattr(grouped, "GROUP_SAMPLE_MAX", 300)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 777)
    n = 4_000
    frame = pd.DataFrame({"rr": pd.Categorical.from_codes(np.arange(n) % 8,
                                                          categories=list("abcdefgh")),
                          "gap": pd.Categorical.from_codes(np.where(np.arange(n) % 9 == 0, -1,
                                                                    np.arange(n) % 4),
                                                           categories=list("wxyz"))})
    plan = GroupPlan.of(*grouped.table_key_codes(frame, "rr"), sample_max=300)
    assert isinstance(plan.draws()[0], int)  # one rate: no codes read
    gap_plan = GroupPlan.of(*grouped.table_key_codes(frame, "gap"), sample_max=300)
    assert not isinstance(gap_plan.draws()[0], int)  # rows without a key: never drawn
    told = frame.copy()
    known = np.bincount(np.arange(n) % 8)
    grouped.know_code_counts(told, "rr", known)
    gap_codes = grouped.table_key_codes(frame, "gap")[0]
    # the true rows per code miss the rows without a key: not taken
    grouped.know_code_counts(told, "gap", np.bincount(gap_codes[gap_codes >= 0], minlength=4))
    from pdprobe.analysis import group_plan

    for key in ("rr", "gap"):
        want = Groups.of(*grouped.table_key_codes(frame, key), sample_max=300,
                         counts=None)
        with monkeypatch.context() as m:
            if key == "rr":  # the counts taken: the counting pass (its slices) never runs
                m.setattr(group_plan, "chunks", lambda n: pytest.fail("rows counted again"))
            from_counts = grouped.key_groupings(told, [key])[0]
        for got in (from_counts, grouped.key_groups(frame, key)):
            for field in ("order", "bounds", "totals", "ids", "codes"):
                np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
        # the grouping's totals are its own: not the array the cache and the caller hold
        assert not np.shares_memory(from_counts.totals, known)
    # the sample drawn with one rate is the one drawn with each row's rate
    from pdprobe.analysis.row_sample import sample_rows

    assert plan.rate is not None
    np.testing.assert_array_equal(sample_rows(*plan.draws(), grouped.SAMPLE_SEED),
                                  sample_rows(plan.raw, plan.rate, grouped.SAMPLE_SEED))


def test_groupings_drawn_together_are_each_drawn_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several keys' sampled groupings and the whole-column sample drawn from one stream are,
    to the row, those drawn one by one (slices, rows without a key, an unsampled key)."""
    from pdprobe.analysis import grouped, row_slices

    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", 1_000)
    monkeypatch.setattr(grouped, "GROUP_SAMPLE_MAX", 300)
    monkeypatch.setattr(grouped, "COLUMN_SAMPLE_ROWS", 500)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 777)
    rng = np.random.default_rng(12)
    n = 5_000
    frame = pd.DataFrame({
        "a": pd.Categorical.from_codes(rng.integers(-1, 4, n), categories=list("wxyz")),
        "b": pd.Categorical.from_codes(rng.integers(0, 10, n), categories=[f"i{k}" for k in
                                                                           range(10)]),
        "c": pd.Categorical.from_codes(rng.integers(0, 30, n), categories=[f"j{k}" for k in
                                                                           range(30)])})
    together = grouped.key_groupings(frame, ["a", "b", "c", "a"])
    assert together[0] is together[3] is key_groups(frame, "a")
    alone = frame.copy()  # a new table: nothing cached
    for key, got in zip("abc", together[:3], strict=True):
        want = key_groups(alone, key)
        assert got.sampled == want.sampled
        for field in ("order", "bounds", "totals", "ids", "codes"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    # "a" and "b" sampled together (with the column sample), "c" not (30 groups of ~167 rows)
    assert together[0].sampled and together[1].sampled and not together[2].sampled
    np.testing.assert_array_equal(grouped.quantile_rows(frame), grouped.quantile_rows(alone))
    with_rows = pd.DataFrame({"a": frame["a"]})
    grouped.quantile_rows(with_rows)  # already drawn: not drawn again
    assert grouped.key_groupings(with_rows, ["a"])[0].sampled
    assert grouped.key_groupings(frame, []) == []


@pytest.mark.parametrize("chunk", [50, 1 << 20])
def test_moments_with_a_floor_are_the_moments_without(monkeypatch: pytest.MonkeyPatch,
                                                      chunk: int) -> None:
    """A floor of each group's maximum (its sample's largest value) only skips rows that
    cannot raise one: the same counts, sums and maxima bit for bit, with a group whose
    largest values tie, zero maxima of either sign, NaN rows, a floor without a value for a
    group (every row compared), rows without a group, a derived column, one group, no rows."""
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.row_slices import Derived

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(chunk + 1)
    n = 1_003
    codes = rng.integers(-1, 6, n).astype(np.int8)
    values = rng.normal(size=n)
    values[200:260] = np.nan
    values[codes == 2] = np.round(values[codes == 2])  # ties at the top
    at_zero = values.copy()
    at_zero[codes == 3] = -np.abs(at_zero[codes == 3])
    at_zero[np.flatnonzero(codes == 3)[::2]] = rng.choice([0.0, -0.0], 1)  # max is a zero
    for column in (values, at_zero):
        groups = Groups.of(codes, range(6), sample_max=40)
        _median, _p50, _p90, _p99, sample_max = _blocked_order_statistics(groups, column)
        assert not np.isnan(sample_max).any()
        for floor in (sample_max, np.where(np.arange(6) == 4, np.nan, sample_max)):
            derived = Derived(lambda rows, c=column: c[rows] * 3.0, nan_like=column)
            for col, fl in ((column, floor), (derived, floor * 3.0)):
                got = groups.moments(col, floor=fl)
                want = groups.moments(col)
                for a, b in zip(got, want, strict=True):
                    np.testing.assert_array_equal(a, b)
                    np.testing.assert_array_equal(np.signbit(a), np.signbit(b))
    one = Groups.of(np.zeros(50, dtype=np.int8), ["a"], sample_max=10)
    column = rng.normal(size=50)
    floor = _blocked_order_statistics(one, column)[-1]
    np.testing.assert_array_equal(one.moments(column, floor=floor)[2], [column.max()])
    empty = Groups.of(np.zeros(0, dtype=np.int8), ["a"])
    assert [x.size for x in empty.moments(np.zeros(0), floor=np.zeros(0))] == [0, 0, 0]


@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_a_zero_maximum_has_the_sign_of_every_rows_maximum(monkeypatch: pytest.MonkeyPatch,
                                                           chunk: int) -> None:
    """A group whose largest value is a zero of both signs (0.0 and -0.0 among its rows, and
    NaN): row order decides its maximum's sign (which of two equal zeros ``fmax.at`` keeps),
    which no floor knows. ``maxima_above`` and ``moments`` with a finite floor of the other
    zero's sign give the sign of ``maxima`` over every row (``assert_array_equal`` holds
    -0.0 == 0.0: the signs are compared with ``np.signbit``)."""
    from pdprobe.analysis import row_slices

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    codes = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, -1, 0, 1], dtype=np.int8)
    values = np.array([-1.0, -2.0, 1.5, 0.0, np.nan, 2.5, np.nan, -0.0, 0.5, 9.0, -0.0, 0.0])
    # group 0: -1, 0.0, NaN, -0.0; group 1: -2, NaN, -0.0, 0.0 (the zeros in either order)
    groups = Groups.of(codes, ["a", "b", "c"])
    count = groups.counts(values)
    want = groups.maxima(values, count)
    np.testing.assert_array_equal(want, [0.0, 0.0, 2.5])
    assert np.signbit(want[0]) != np.signbit(want[1])
    # each floor a value of its group's rows: a zero maximum's other zero, finite everywhere
    floor = np.where(want == 0, np.where(np.signbit(want), 0.0, -0.0), want)
    assert (np.signbit(floor[:2]) != np.signbit(want[:2])).all()
    above = groups.maxima_above(values, count, floor)
    np.testing.assert_array_equal(above, want)
    np.testing.assert_array_equal(np.signbit(above), np.signbit(want))
    got = groups.moments(values, floor=floor)
    for a, b in zip(got, groups.moments(values), strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(np.signbit(a), np.signbit(b))
    np.testing.assert_array_equal(np.signbit(got[2]), np.signbit(want))


def test_sampled_figures_keep_every_rows_maximum() -> None:
    """A sampled grouping's max is over every row, the sample's largest only a floor."""
    codes = np.repeat(np.arange(3, dtype=np.int8), 400)
    values = np.random.default_rng(5).normal(size=codes.size)
    groups = Groups.of(codes, ["a", "b", "c"], sample_max=30)
    got = GroupFigures.measure(groups, values)
    np.testing.assert_array_equal(got.max, values.reshape(3, 400).max(axis=1))


def test_a_string_key_is_factorized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``table_key_codes`` caches ``key_codes`` per table: the key's grouping and the instance
    summaries' series read one factorization (the same codes and labels)."""
    from pdprobe.analysis import grouped

    frame = pd.DataFrame({"inst": np.array(["b", "a", None, "c", "a"], dtype=object),
                          "cat": pd.Categorical(["x", "y", "x", None, "y"])})
    calls: list[str] = []
    plain = grouped.key_codes

    def counted(column: pd.Series) -> tuple[np.ndarray, list[str]]:
        calls.append(str(column.name))
        return plain(column)

    monkeypatch.setattr(grouped, "key_codes", counted)
    for key in ("inst", "cat"):
        codes, labels = grouped.table_key_codes(frame, key)
        want_codes, want_labels = plain(frame[key])
        np.testing.assert_array_equal(codes, want_codes)
        assert labels == want_labels and not codes.flags.writeable
    grouped.key_groupings(frame, ["inst", "cat"])
    again = grouped.table_key_codes(frame, "inst")
    assert again[0] is grouped.table_key_codes(frame, "inst")[0]
    assert calls == ["inst", "cat"]
    np.testing.assert_array_equal(grouped.key_groups(frame, "inst").codes, [1, 0, -1, 2, 0])


def test_figures_with_known_sums_are_the_measured_figures(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A sampled grouping's figures given each group's count and sum from another pass
    (``known``): the measured ones (the mean to 1e-12), the maxima from the rows above the
    samples' smallest maximum those of every row, zeros and NaN included."""
    from pdprobe.analysis import row_slices

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 97)
    rng = np.random.default_rng(21)
    n = 3_001
    codes = rng.integers(-1, 6, n).astype(np.int8)
    for values in (rng.lognormal(size=n), np.where(rng.random(n) < 0.1, np.nan,
                                                    rng.integers(0, 3, n) * 1.0)):
        groups = Groups.of(codes, range(6), sample_max=40)
        assert groups.sampled
        want = GroupFigures.measure(groups, values)
        count, total, _top = groups.moments(values)
        got = GroupFigures.measure(groups, values, known=(count, total))
        np.testing.assert_array_equal(got.count, want.count)
        np.testing.assert_allclose(got.mean, want.mean, rtol=1e-12)
        for name in ("max", "median", "p50", "p90", "p99"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        floor = np.full(groups.n_groups, np.nan)
        np.testing.assert_array_equal(groups.maxima_above(values, count, floor),
                                      groups.maxima(values, count))
