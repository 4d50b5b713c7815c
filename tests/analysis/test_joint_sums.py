"""Sums of a whole-number column under several groupings from one pass over the rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis import row_slices
from pdprobe.analysis.grouped import Groups, group_sums
from pdprobe.analysis.joint_sums import group_sums_columns, joint_sums_columns


def joint_sums(groupings: list[Groups], values: np.ndarray) -> list[np.ndarray] | None:
    """One column's joint sums (``joint_sums_columns`` of that column alone)."""
    return joint_sums_columns(groupings, [values])[0]


def group_sums_each(table: pd.DataFrame, keys: list[str], column: str) -> list[np.ndarray]:
    """One column's sums per key (``group_sums_columns`` of that column alone)."""
    return group_sums_columns(table, keys, [column])[0]


def _groupings(rng: np.random.Generator, n: int) -> list[Groups]:
    return [Groups.of(rng.integers(0, k, n).astype(np.int8), range(k)) for k in (5, 3, 2)]


@pytest.mark.parametrize("chunk", [64, 1 << 20])
def test_joint_sums_are_each_groupings_sums(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """The very floats of a pass per grouping: integers, unsigned, whole floats with zeros of
    both signs, two and three groupings, one slice or many, a single group."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(chunk)
    n = 1_001
    groupings = _groupings(rng, n)
    ints = rng.integers(0, 50_000, n)
    whole = ints.astype(np.float64)
    whole[::7] = -0.0
    for values in (ints, ints.astype(np.uint64), ints.astype(np.int32), whole):
        for chosen in (groupings[:2], groupings, [groupings[0], Groups.of(np.zeros(n, np.int8),
                                                                          ["one"])]):
            got = joint_sums(chosen, values)
            assert got is not None
            for g, sums in zip(chosen, got, strict=True):
                want = g.sums(values)
                assert sums.dtype == np.float64
                np.testing.assert_array_equal(sums, want)
                np.testing.assert_array_equal(np.signbit(sums), np.signbit(want))


def test_joint_sums_decline_what_order_could_change() -> None:
    """None (a pass per grouping) for NaN, infinite, negative or fractional values, sums that
    could reach 2**53, a row without a group, one grouping, no rows, too many cells."""
    rng = np.random.default_rng(2)
    n = 500
    groupings = _groupings(rng, n)
    base = rng.integers(0, 100, n).astype(np.float64)
    for bad in (np.nan, np.inf, -1.0, 0.5):
        values = base.copy()
        values[n // 2] = bad
        assert joint_sums(groupings, values) is None
    assert joint_sums(groupings, np.full(n, 2 ** 53 // n + 1, dtype=np.int64)) is None
    largest = np.full(n, 2 ** 53 // n, dtype=np.int64)  # every sum still below 2**53
    got = joint_sums(groupings, largest)
    assert got is not None
    for g, sums in zip(groupings, got, strict=True):
        np.testing.assert_array_equal(sums, g.sums(largest))
    assert joint_sums(groupings, np.full(n, 2 ** 62, dtype=np.int64)) is None  # no overflow
    codes = groupings[0].codes.copy()
    codes[3] = -1
    assert joint_sums([Groups.of(codes, range(5)), groupings[1]], base) is None
    assert joint_sums(groupings[:1], base) is None
    empty = [Groups.of(np.zeros(0, np.int8), ["a"])] * 2
    assert joint_sums(empty, np.zeros(0)) is None
    big = [Groups.of(np.arange(n) % 250, range(250)), Groups.of(np.arange(n) % 200, range(200))]
    assert joint_sums(big, base) is None


def test_group_sums_each_caches_the_sums_group_sums_gives() -> None:
    """Every key's sums land in the table's cache, the same floats ``group_sums`` computes on
    its own; a column they decline is summed key by key."""
    rng = np.random.default_rng(3)
    n = 2_000
    table = pd.DataFrame({"p": pd.Categorical(rng.choice(["a", "b", "c"], n)),
                          "d": pd.Categorical(rng.choice(["x", "y"], n)),
                          "tokens": rng.integers(0, 9_000, n),
                          "cached": np.where(rng.random(n) < 0.1, np.nan,
                                             rng.integers(0, 900, n).astype(np.float64))})
    fresh = table.copy()
    for column in ("tokens", "cached"):
        got = group_sums_each(table, ["p", "d"], column)
        for key, sums in zip(["p", "d"], got, strict=True):
            np.testing.assert_array_equal(sums, group_sums(fresh, key, column))
            assert group_sums(table, key, column) is sums


def test_a_joint_pass_records_the_column_as_whole() -> None:
    """A column the joint pass sums is known whole (``table_facts.known_whole``); one it
    declines (NaN, a fraction) is not, and neither is a column no joint pass read."""
    from pdprobe.analysis.table_facts import known_whole

    rng = np.random.default_rng(4)
    n = 500
    table = pd.DataFrame({"p": pd.Categorical(rng.choice(["a", "b"], n)),
                          "d": pd.Categorical(rng.choice(["x", "y", "z"], n)),
                          "tokens": rng.integers(0, 9_000, n).astype(np.float64),
                          "gaps": np.where(np.arange(n) == 3, np.nan, 1.0),
                          "halves": np.full(n, 0.5)})
    for column in ("tokens", "gaps", "halves"):
        group_sums_each(table, ["p", "d"], column)
    assert known_whole(table, "tokens")
    assert not known_whole(table, "gaps") and not known_whole(table, "halves")
    assert not known_whole(table, "p")


@pytest.mark.parametrize("chunk", [64, 1 << 20])
def test_group_sums_columns_are_each_columns_sums(monkeypatch: pytest.MonkeyPatch,
                                                  chunk: int) -> None:
    """Several columns in one pass (the cells computed once): each column's sums are those of
    its own pass, a column declined in a later slice (a NaN, a fraction) summed key by key
    while the others stay joint, a key already cached kept."""
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(chunk + 5)
    n = 1_500
    table = pd.DataFrame({"p": pd.Categorical(rng.choice(["a", "b", "c"], n)),
                          "d": pd.Categorical(rng.choice(["x", "y"], n)),
                          "tokens": rng.integers(0, 9_000, n),
                          "cached": rng.integers(0, 900, n).astype(np.float64),
                          "late_nan": np.where(np.arange(n) == n - 3, np.nan, 2.0),
                          "late_half": np.where(np.arange(n) == n - 2, 0.5, 1.0)})
    columns = ["tokens", "cached", "late_nan", "late_half"]
    fresh = table.copy()
    early = group_sums(table, "d", "tokens")  # cached before: kept
    got = group_sums_columns(table, ["p", "d"], columns)
    assert got[0][1] is early
    for column, sums in zip(columns, got, strict=True):
        for key, key_sums in zip(["p", "d"], sums, strict=True):
            np.testing.assert_array_equal(key_sums, group_sums(fresh, key, column))
            assert group_sums(table, key, column) is key_sums
    groupings = [Groups.of(np.asarray(table[k].array.codes), range(3)) for k in ("p", "d")]
    joint = joint_sums_columns(groupings, [table[c].to_numpy() for c in columns])
    assert joint[2] is None and joint[3] is None and joint[0] is not None
    assert joint_sums_columns(groupings[:1], [table["tokens"].to_numpy()]) == [None]


def test_the_joint_pass_reads_only_the_keys_still_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key whose sums are all cached is left out of the joint pass (its sums kept); the
    keys still missing are summed jointly when two or more remain, else alone."""
    from pdprobe.analysis import joint_sums as module

    rng = np.random.default_rng(6)
    n = 900
    table = pd.DataFrame({"p": pd.Categorical(rng.choice(["a", "b", "c"], n)),
                          "d": pd.Categorical(rng.choice(["x", "y"], n)),
                          "e": pd.Categorical(rng.choice(["u", "v", "w", "z"], n)),
                          "tokens": rng.integers(0, 9_000, n)})
    fresh = table.copy()
    seen: list[int] = []
    real = module.joint_sums_columns

    def spy(groupings: list[Groups], columns: list[np.ndarray]) -> list[list[np.ndarray] | None]:
        seen.append(len(groupings))
        return real(groupings, columns)

    monkeypatch.setattr(module, "joint_sums_columns", spy)
    early = group_sums(table, "d", "tokens")
    got = group_sums_columns(table, ["p", "d", "e"], ["tokens"])[0]
    assert seen == [2]  # p and e, not d
    assert got[1] is early
    for key, sums in zip(["p", "d", "e"], got, strict=True):
        np.testing.assert_array_equal(sums, group_sums(fresh, key, "tokens"))
    seen.clear()
    group_sums(table, "p", "tokens")
    other = table.assign(more=table["tokens"] + 1)
    group_sums(other, "p", "more")
    group_sums(other, "d", "more")
    group_sums_columns(other, ["p", "d", "e"], ["more"])
    assert seen == []  # one key missing: summed alone
