"""Tests for pdprobe/dataset.py: the canonical categorical and the codes it keeps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe import dataset
from pdprobe.dataset import canonical_category, used_codes


def test_used_codes_is_bincount_of_the_present_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dataset, "USED_CODES_BLOCK_ROWS", 5)  # many blocks, a ragged last one
    rng = np.random.default_rng(2)
    for dtype in (np.int8, np.int16, np.int32):
        codes = rng.integers(-1, 9, 23).astype(dtype)
        codes[codes == 4] = -1  # category 4 unused; 9 and 10 never drawn
        expect = np.bincount(codes[codes >= 0], minlength=11) > 0
        assert used_codes(codes, 11).tolist() == expect.tolist()
    assert used_codes(np.full(7, -1, np.int8), 3).tolist() == [False] * 3
    assert used_codes(np.zeros(0, np.int8), 2).tolist() == [False, False]


def test_canonical_category_drops_unused_and_sorts_with_the_fixed_ones() -> None:
    column = pd.Series(pd.Categorical.from_codes(np.array([2, -1, 0, 2], np.int8),
                                                 categories=pd.Index(["z", "b", "a"])))
    got = canonical_category(column, ("ok",))
    assert list(got.cat.categories) == ["a", "ok", "z"]  # "b" unused, "ok" always there
    assert got.tolist()[::2] == ["a", "z"] and got.isna().tolist() == [False, True, False, False]
    canonical = pd.Series(pd.Categorical(["a", "b", None]))
    assert canonical_category(canonical) is canonical  # already canonical: no copy
