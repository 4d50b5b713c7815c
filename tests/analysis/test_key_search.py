"""``analysis/key_search.py``: the first row of each key by binary search."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.key_search import key_starts, runs_key_starts


@pytest.mark.parametrize("n_keys", [1, 2, 7, 40])
def test_key_starts_is_searchsorted_of_every_key(n_keys: int) -> None:
    keys = np.sort(np.random.default_rng(n_keys).integers(0, 30, 1_000))
    calls: list[int] = []

    def key_at(rows: np.ndarray) -> np.ndarray:
        calls.append(rows.size)
        return keys[rows]

    got = key_starts(key_at, n_keys, keys.size)
    np.testing.assert_array_equal(got, np.searchsorted(keys, np.arange(n_keys), side="left"))
    assert sum(calls) <= n_keys * 12  # about log2(1000) rows per key, not every row
    assert key_starts(key_at, 3, 0).tolist() == [0, 0, 0]


def test_runs_key_starts_is_searchsorted_in_each_run() -> None:
    rng = np.random.default_rng(3)
    runs = [np.sort(rng.integers(0, 20, n)) for n in (0, 1, 5, 300, 1000)]
    targets = np.array([3, 0, 7, 10, 25])
    got = runs_key_starts(lambda i, at: np.array([runs[j][p] for j, p in zip(i, at, strict=True)]),
                          targets, np.array([len(r) for r in runs]))
    want = [np.searchsorted(r, t, side="left") for r, t in zip(runs, targets, strict=True)]
    assert got.tolist() == want
