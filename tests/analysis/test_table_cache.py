"""Tests for pdprobe/analysis/table_cache.py: one dict per live table, dropped with it."""

from __future__ import annotations

import gc

import pandas as pd

from pdprobe.analysis import table_cache as tc


def test_one_dict_per_table_kept_while_it_lives_and_dropped_with_it() -> None:
    a, b = pd.DataFrame({"x": [1, 2]}), pd.DataFrame({"x": [1, 2]})
    tc.table_cache(a)["k"] = 1
    assert tc.table_cache(a) == {"k": 1}
    assert tc.table_cache(b) == {}  # equal content, another table
    key = id(a)
    del a
    gc.collect()
    assert key not in tc._CACHE
