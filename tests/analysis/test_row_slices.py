"""Row slices, compact integer types, row getters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis import row_gather, row_slices
from pdprobe.analysis.row_slices import (
    chunks,
    compact_dtype,
    index_dtype,
    take,
)


def test_chunks_cover_every_row_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 4)
    assert chunks(0) == []
    parts = chunks(10)
    assert [(p.start, p.stop) for p in parts] == [(0, 4), (4, 8), (8, 10)]


@pytest.mark.parametrize(("n", "dtype"), [(0, np.int8), (126, np.int8), (127, np.int16),
                                          (32_766, np.int16), (32_767, np.int32)])


def test_compact_dtype_holds_codes_a_spare_slot_and_minus_one(n: int, dtype: type) -> None:
    assert compact_dtype(n) is dtype
    assert np.iinfo(dtype).max > n and np.iinfo(dtype).min <= -1
    assert index_dtype(10_000_000) is np.int32


def test_take_converts_only_the_rows_read() -> None:
    ints = np.arange(10, dtype=np.int64)
    part = take(ints, slice(2, 5))
    assert part.dtype == np.float64 and part.tolist() == [2.0, 3.0, 4.0]
    assert take(lambda rows: ints[rows] * 2, np.array([1, 3])).tolist() == [2.0, 6.0]


def test_has_values_is_notna_any_cached_per_table() -> None:
    import pandas as pd

    from pdprobe.analysis.row_slices import has_values

    frame = pd.DataFrame({"none": [np.nan, np.nan], "some": [np.nan, 1.0],
                          "cat": pd.Categorical([None, None], categories=["a"])})
    assert [has_values(frame, c) for c in ("none", "some", "cat")] == [False, True, False]
    other = frame.assign(none=[0.0, np.nan])  # another table: asked again
    assert has_values(other, "none") and not has_values(frame, "none")


def test_derived_nan_like_counts_without_computing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Derived column's NaN test reads ``nan_like``: the counts are those of the computed
    values, and the computation is asked only for the sampled rows' gather."""
    from pdprobe.analysis.grouped import Groups
    from pdprobe.analysis.row_slices import Derived

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 10)
    source = np.array([1.0, np.nan, 3.0, 4.0, np.nan, 6.0] * 7)
    codes = np.array([0, 1, 2] * 14, dtype=np.int8)
    asked: list[object] = []

    def halved(rows: slice | np.ndarray) -> np.ndarray:
        asked.append(rows)
        return source[rows] / 2.0

    groups = Groups.of(codes, ["a", "b", "c"])
    derived = Derived(halved, nan_like=source)
    np.testing.assert_array_equal(groups.counts(derived), groups.counts(source / 2.0))
    assert asked == []
    np.testing.assert_array_equal(groups.sorted(derived).median(),
                                  groups.sorted(source / 2.0).median())


def test_ascending_across_chunk_edges(monkeypatch) -> None:
    """A decrease exactly across a chunk edge, a NaN, and the trivial cases."""
    import numpy as np

    from pdprobe.analysis import row_slices

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 4)
    up = np.arange(10, dtype=np.float64)
    assert row_slices.ascending(up) and row_slices.ascending(up[:1])
    assert row_slices.ascending(up[:0])
    down = up.copy()
    down[4] = 2.5  # below its left neighbour, the last row of the first chunk
    assert not row_slices.ascending(down)
    nan = up.copy()
    nan[7] = np.nan
    assert not row_slices.ascending(nan)
    assert row_slices.ascending(np.array([1, 1, 1, 2], dtype=np.int16))


@pytest.mark.parametrize("categorical", [True, False])
@pytest.mark.parametrize("few", [16, 0])
def test_category_count_is_the_masks_sum(monkeypatch: pytest.MonkeyPatch,
                                         categorical: bool, few: int) -> None:
    """The counts per value, by one comparison per code (a few values) or by bincount."""
    import pandas as pd

    from pdprobe.analysis.row_slices import category_count, category_mask

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 7)
    monkeypatch.setattr(row_slices, "FEW_CODES_COUNTED", few)
    values = np.array(["ok", "error", None, "OK", "timeout", "ok", "error", "ok"] * 5,
                      dtype=object)
    column = pd.Series(pd.Categorical(values, categories=["ok", "OK", "error", "timeout",
                                                          "unused"])) if categorical \
        else pd.Series(values)
    table = pd.DataFrame({"status": column})
    for test in (lambda s: s != "ok", lambda s: s.lower() == "ok", lambda s: s == "unused",
                 lambda s: s.lower() in ("error", "timeout")):
        assert category_count(table, "status", test) == int(
            np.count_nonzero(category_mask(table["status"], test)))
    assert category_count(table, "status", lambda s: True) == 35  # missing rows never count


def test_take_calls_a_getter_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row getter asked for more than CHUNK_ROWS positions is called on slices of at most
    CHUNK_ROWS of them, and the values are those of one call at every position."""
    import pdprobe.analysis.row_slices as rs

    monkeypatch.setattr(rs, "CHUNK_ROWS", 7)
    base = np.arange(100, dtype=np.int64)
    sizes: list[int] = []

    def getter(rows: rs.Rows) -> np.ndarray:
        sizes.append(len(base[rows]))
        return base[rows] / 3.0

    rows = np.random.default_rng(0).permutation(100)[:50]
    got = rs.take(getter, rows)
    np.testing.assert_array_equal(got, base[rows] / 3.0)
    assert max(sizes) <= 7 and sum(sizes) == 50


def test_blocked_medians_are_the_medians_a_block_at_a_time(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    import tracemalloc

    from pdprobe.analysis.grouped import Groups

    rng = np.random.default_rng(4)
    n = 400_000
    codes = rng.integers(0, 300, n).astype(np.int16)
    values = rng.normal(size=n)
    values[rng.random(n) < 0.1] = np.nan
    groups = Groups.of(codes, range(300))
    whole = groups.medians(values)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 1 << 14)
    assert [b for b in row_slices.group_blocks(np.array([0, 5, 5, 9, 30]), rows=6)] == \
        [(0, 2), (2, 3), (3, 4)]
    tracemalloc.start()
    try:
        blocked = row_slices.blocked_medians(groups, values)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(blocked, whole, equal_nan=True)
    assert peak < n * 8 / 4  # the gathered values of one block, not of every row (3.2 MB)


def test_key_codes_of_a_categorical_are_its_own_codes() -> None:
    import pandas as pd

    from pdprobe.analysis.row_slices import key_codes

    column = pd.Series(pd.Categorical.from_codes(np.array([1, 0, -1, 1], dtype=np.int8),
                                                 categories=["a", "b"]))
    codes, labels = key_codes(column)
    assert codes.tolist() == [1, 0, -1, 1] and labels == ["a", "b"]
    # no copy: a cached grouping holds the column's own codes (10 MB per 10M rows otherwise)
    assert np.shares_memory(codes, column.array.codes)


def test_distinct_codes_and_renamed_values_read_a_categorical_without_a_copy() -> None:
    """``distinct_codes`` hands out the column's own codes (``.cat.codes`` copies all of them:
    10 MB and ~2 ms per call at 10M rows), and the dataset's renaming reads them the same way:
    the same codes, masks and names as before."""
    import pandas as pd

    from pdprobe.analysis.row_slices import category_mask, distinct_codes
    from pdprobe.dataset import renamed_values

    column = pd.Series(pd.Categorical.from_codes(np.array([1, 0, -1, 2, 1], dtype=np.int8),
                                                 categories=["a", "b", "c"]))
    codes, values = distinct_codes(column)
    assert codes.tolist() == [1, 0, -1, 2, 1] and values == ["a", "b", "c"]
    assert np.shares_memory(codes, column.array.codes)
    assert category_mask(column, lambda v: v != "b").tolist() == [False, True, False, True,
                                                                  False]
    renamed = renamed_values(column, {"a": "x", "c": "x"})
    assert renamed.tolist()[:2] == ["b", "x"] and pd.isna(renamed.iloc[2])
    assert list(renamed.cat.categories) == ["b", "x"]


def _grouped_positions(rng: np.random.Generator, n_rows: int, n_groups: int,
                       keep: float) -> tuple[np.ndarray, np.ndarray]:
    """Positions of a sample of ``n_rows`` rows grouped by a random code (ascending within each
    group, as a grouping's ``order``) and the groups' bounds; some groups without rows."""
    codes = rng.integers(0, n_groups, n_rows)
    codes[codes == 1] = 0  # group 1: no rows
    rows = np.flatnonzero(rng.random(n_rows) < keep)
    order = rows[np.argsort(codes[rows], kind="stable")].astype(np.int32)
    bounds = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(codes[rows], minlength=n_groups), out=bounds[1:])
    return order, bounds


@pytest.mark.parametrize("n_groups", [1, 2, 7, 300])
@pytest.mark.parametrize("keep", [1.0, 0.3])
def test_take_grouped_is_take(monkeypatch: pytest.MonkeyPatch, n_groups: int,
                              keep: float) -> None:
    """A gather block of rows by block of rows is ``take`` at every position: float, integer
    and float32 columns, NaN, a row getter (called a block at a time), empty groups, one group,
    more groups than the pieces allow (one block); a getter over a block's rows, then picked."""
    monkeypatch.setattr(row_gather, "GATHER_BLOCK_ROWS", 64)
    monkeypatch.setattr(row_gather, "_GATHER_PIECES_MAX", 512)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 100)
    rng = np.random.default_rng(n_groups)
    n = 5_000
    order, bounds = _grouped_positions(rng, n, n_groups, keep)
    values = rng.normal(size=n)
    values[::7] = np.nan
    asked: list[int] = []

    def getter(rows: row_slices.Rows) -> np.ndarray:
        asked.append(len(values[rows]))
        return values[rows] * 2.0

    for column in (values, rng.integers(-50, 50, n), values.astype(np.float32)):
        got = row_gather.take_grouped(column, order, bounds, n)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, take(column, order))
    np.testing.assert_array_equal(row_gather.take_grouped(getter, order, bounds, n),
                                  values[order] * 2.0)
    # a getter is computed over a block of rows at a time (or a slice of positions at a time)
    assert max(asked) <= max(100, 64, -(-n * n_groups // 512))
    # rows in the first and last blocks only: the blocks between have no pieces
    ends = (order < 100) | (order >= n - 100)
    kept = np.zeros(n_groups + 1, dtype=np.int64)
    group_of = np.repeat(np.arange(n_groups), np.diff(bounds))
    np.cumsum(np.bincount(group_of[ends], minlength=n_groups), out=kept[1:])
    for column in (values, getter, rng.integers(0, 9, n)):
        np.testing.assert_array_equal(row_gather.take_grouped(column, order[ends], kept, n),
                                      take(column, order[ends]))
    empty = row_gather.take_grouped(values, order[:0], np.zeros(n_groups + 1, np.int64), n)
    assert empty.size == 0 and empty.dtype == np.float64


def test_take_of_many_positions_is_indexing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above CHUNK_ROWS positions ``take`` and ``take_rows`` gather a slice of positions at a
    time: the values of one indexing, negative positions read from the end."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 64)
    rng = np.random.default_rng(8)
    rows = rng.integers(-300, 300, 1_000).astype(np.int32)
    for column in (rng.normal(size=300), rng.integers(0, 9, 300).astype(np.int8)):
        np.testing.assert_array_equal(row_slices.take_rows(column, rows), column[rows])
        assert row_slices.take_rows(column, rows).dtype == column.dtype
        np.testing.assert_array_equal(take(column, rows), column[rows].astype(np.float64))
    assert row_slices.take_rows(np.arange(5.0), rows[:0]).size == 0


@pytest.mark.parametrize("n", [0, 1, 5, 2_500])
def test_any_value_is_notna_any(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """``has_values``' slice-by-slice test with an early stop is ``notna().any()``: categorical
    codes, floats (NaN missing, inf a value), values only in a later slice, all missing, no
    rows, integer, object and Arrow-backed columns."""
    import pandas as pd

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 1_000)
    floats = np.full(n, np.nan)
    late = floats.copy()
    if n:
        late[-1] = np.inf
    columns = [pd.Series(floats), pd.Series(late), pd.Series(np.arange(n)),
               pd.Series(pd.Categorical([None] * n, categories=["a"])),
               pd.Series(pd.Categorical(["a" if i == n - 1 else None for i in range(n)])),
               pd.Series([None] * n, dtype=object),
               pd.Series(late, dtype="float64[pyarrow]"),
               pd.Series(np.arange(n, dtype=np.float32))]
    for column in columns:
        assert row_slices._any_value(column) == bool(column.notna().any()), column.dtype


@pytest.mark.parametrize("categorical", [True, False])
@pytest.mark.parametrize("passing", [set(), {"ok"}, {"error", "aborted"},
                                     {"ok", "error", "aborted", "x", "y"}])


def test_category_mask_is_the_test_of_every_row(categorical: bool, passing: set[str]) -> None:
    """Compared code by code (a few passing values) or looked up (more): ``test`` of every
    row's value, False where the value is missing."""
    from pdprobe.analysis.row_slices import category_mask

    rng = np.random.default_rng(1)
    values = np.array(["ok", "error", "aborted", "x", "y", "z"], dtype=object)[
        rng.integers(0, 6, 500)]
    values[::9] = None
    column = pd.Series(values, dtype="category" if categorical else object)
    got = category_mask(column, lambda s: s in passing)
    assert got.dtype == bool
    want = np.array([v is not None and v in passing for v in values], dtype=bool)
    assert np.array_equal(got, want)


def test_failed_mask_is_the_status_mask_cached_read_only() -> None:
    import pandas as pd

    from pdprobe.analysis.table_facts import failed_mask

    table = pd.DataFrame({"status": pd.Categorical(["ok", "error", None, "timeout", "ok"])})
    got = failed_mask(table)
    assert got.tolist() == [False, True, False, True, False]  # (no status: not failed)
    assert failed_mask(table) is got and not got.flags.writeable


def test_column_ascending_is_ascending_cached_under_the_evidence_key() -> None:
    import pandas as pd

    from pdprobe.analysis.evidence.columns import arrivals_in_order
    from pdprobe.analysis.table_cache import table_cache
    from pdprobe.analysis.table_facts import column_ascending

    for ts, want in (([1.0, 2.0, 2.0, 5.0], True), ([1.0, np.nan, 3.0], False),
                     ([3.0, 1.0], False)):
        table = pd.DataFrame({"arrival_ts": ts})
        assert column_ascending(table, "arrival_ts") is want
        assert table_cache(table)[("ascending", "arrival_ts")] is want

        class _Ds:  # the evidence reads the very entry
            requests = table
        assert arrivals_in_order(_Ds()) is want  # type: ignore[arg-type]
