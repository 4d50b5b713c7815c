"""Tests for pdprobe/analysis/overlaps.py: the time-block sample's exact overlap test, split by
group, and the needed rows sorted by (group, start)."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis import sampling
from pdprobe.analysis.overlaps import group_parts


@pytest.mark.parametrize(("dtype", "scale", "n"), [
    (np.int8, 1, 50_000), (np.int16, 1, 50_000), (np.int32, 1, 50_000),
    (np.int32, 10**6, 50_000), (np.int64, 10**9, 50_000),
    (np.int64, 5_000, 200_000),  # a code range wider than int16, narrower than the candidates
    (np.int8, 0, 50_000)])  # one code
def test_group_parts_are_each_codes_candidates_in_code_order(dtype: type, scale: int,
                                                             n: int) -> None:
    """One part per code present (missing-name -1 first), ascending positions in each: what a
    comparison per code gives, for small and wide codes (the parts' sizes counted in a table
    of the code range, or found where the sorted codes change)."""
    rng = np.random.default_rng(5)
    group = (rng.integers(-1, 7, n) * scale).astype(dtype)
    group[group == 3 * scale] = 4 * scale  # a code with no candidate
    cand = np.flatnonzero(rng.random(n) < 0.4).astype(np.int32)
    parts = group_parts(cand, group)
    codes = sorted(set(group[cand].tolist()))
    assert len(parts) == len(codes)
    for part, code in zip(parts, codes, strict=True):
        np.testing.assert_array_equal(part, cand[group[cand] == code])
    assert len(group_parts(cand, None)) == 1 and group_parts(cand, None)[0] is cand


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
@pytest.mark.parametrize("closed", [False, True])
def test_by_group_is_the_needed_rows_stably_sorted_by_group_and_start(
        dtype: type, closed: bool) -> None:
    """``by_group`` gives the needed rows in (group, start) order, ties in row order: what a
    stable sort by group then start of ``needed`` gives (tied starts, a missing-name code -1
    and wide codes included). The masks are unchanged."""
    rng = np.random.default_rng(9)
    n = 20_000
    start = np.round(1.7e9 + rng.uniform(0, 7200, n), -1)  # unordered, many tied starts
    end = start + np.round(rng.exponential(6.0, n), 1)
    group = rng.integers(-1, 7, n).astype(dtype) * (1 if dtype == np.int8 else 10**9)

    def spans(rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return start[rows], end[rows]

    plain = sampling.sample_intervals(spans, n, None, group, max_requests=4_000,
                                      closed=closed)
    got = sampling.sample_intervals(spans, n, None, group, max_requests=4_000,
                                    closed=closed, by_group=True)
    assert plain is not None and got is not None and got.by_group is not None
    assert plain.by_group is None
    assert np.array_equal(got.needed, plain.needed)
    assert np.array_equal(got.observed, plain.observed)
    keep = np.flatnonzero(got.needed)
    order = np.lexsort((start[keep], group[keep]))  # stable: ties keep row order
    assert len(np.unique(start[keep])) < len(keep)  # ties are exercised
    np.testing.assert_array_equal(got.by_group, keep[order])


@pytest.mark.parametrize("closed", [False, True])
def test_dense_sample_marks_what_a_brute_force_overlap_test_marks(closed: bool) -> None:
    """With most candidates observed (one block in three, as prefill busy periods are
    sampled) only the others are tested; ``needed`` is still every observed request and every
    request of its group overlapping one, and each group's intervals are computed once, at
    intp positions (numpy gathers int32 positions at half the speed)."""
    rng = np.random.default_rng(11)
    n = 12_000
    start = np.round(1.7e9 + rng.uniform(0, 3600, n), 1)
    end = start + np.round(rng.exponential(20.0, n), 1)
    group = rng.integers(0, 5, n).astype(np.int8)
    asked: list[np.dtype] = []

    def spans(rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(rows, np.ndarray):
            asked.append(rows.dtype)
        return start[rows], end[rows]

    got = sampling.sample_intervals(spans, n, None, group, max_requests=n // 3 + 1,
                                    closed=closed, by_group=True)
    assert got is not None and got.every == 3
    assert asked and all(d == np.intp for d in asked) and len(asked) <= 5
    obs = np.flatnonzero(got.observed)
    want = got.observed.copy()
    for j in range(n):  # brute force: every observed request of the same group
        o = obs[group[obs] == group[j]]
        hit = (start[o] <= end[j]) & (start[j] <= end[o]) if closed else \
            (start[o] < end[j]) & (start[j] < end[o])
        want[j] |= bool(hit.any())
    np.testing.assert_array_equal(got.needed, want)
    assert got.needed.sum() > got.observed.sum()  # some requests are needed for an overlap


def test_padded_overlap_test_keeps_the_raw_intervals_of_the_needed_rows() -> None:
    """With ``raw`` and ``pad_s`` the overlap test reads the raw intervals once and tests
    their ends plus the pad: the same masks and order as testing the padded intervals, and
    ``by_group_spans`` are the raw intervals of the needed rows in that order."""
    rng = np.random.default_rng(13)
    n = 15_000
    start = np.round(1.7e9 + rng.uniform(0, 3600, n), 3)
    end = start + np.round(rng.exponential(2.0, n), 3)
    group = rng.integers(0, 6, n).astype(np.int8)
    pad = 1e-3

    def raw(rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return start[rows].copy(), end[rows].copy()

    def padded(rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, e = raw(rows)
        e += pad
        return s, e

    plain = sampling.sample_intervals(padded, n, None, group, max_requests=n // 3 + 1,
                                      closed=True, by_group=True)
    got = sampling.sample_intervals(padded, n, None, group, max_requests=n // 3 + 1,
                                    closed=True, by_group=True, raw=raw, pad_s=pad)
    assert plain is not None and got is not None
    assert plain.by_group is not None and got.by_group is not None
    assert plain.by_group_spans is None and got.by_group_spans is not None
    assert np.array_equal(got.needed, plain.needed)
    assert np.array_equal(got.by_group, plain.by_group)
    np.testing.assert_array_equal(got.by_group_spans[0], start[got.by_group])
    np.testing.assert_array_equal(got.by_group_spans[1], end[got.by_group])
