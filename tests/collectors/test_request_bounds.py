"""Tests for pdprobe/collectors/request_bounds.py: Parquet footer ranges, and reads that use
them giving exactly what the scans give."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdprobe.collectors import request_bounds, request_canonical, request_formats, validate
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.request_bounds import Bounds, parquet_bounds
from pdprobe.collectors.requests_file import read_requests


def _bounds(table: pa.Table, tmp_path: Path, **write: Any) -> dict[str, Bounds]:
    path = tmp_path / "b.parquet"
    pq.write_table(table, path, **write)
    pf = pq.ParquetFile(path)
    return parquet_bounds(pf.metadata, pf.schema_arrow, pf.schema_arrow.names)


def test_bounds_span_the_row_groups_and_say_where_nan_may_be(tmp_path: Path) -> None:
    t = pa.table({"i": pa.array([5, 1, 9, None], pa.int64()),
                  "j": pa.array([3, 4, 5, 6], pa.int32()),
                  "f": pa.array([0.5, float("nan"), -2.0, 7.0]),
                  "s": ["a", "b", "c", "d"]})
    got = _bounds(t, tmp_path, row_group_size=2)
    assert got["i"] == Bounds(1.0, 9.0, True)  # a null
    assert got["j"] == Bounds(3.0, 6.0, False)  # integers without null: never NaN
    assert got["f"] == Bounds(-2.0, 7.0, True)  # NaN is not in the statistics
    assert "s" not in got


def test_columns_without_statistics_or_with_only_nulls(tmp_path: Path) -> None:
    t = pa.table({"i": pa.array([1, 2, None, None], pa.int64()),
                  "n": pa.array([None] * 4, pa.float64()),
                  "nan": pa.array([float("nan")] * 4)})
    got = _bounds(t, tmp_path, row_group_size=2)
    assert got["i"] == Bounds(1.0, 2.0, True)  # the second row group holds only nulls
    assert "n" not in got and "nan" not in got  # nothing to bound: the scans decide
    assert _bounds(t, tmp_path, write_statistics=False) == {}


def test_too_many_row_groups_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    t = pa.table({"i": pa.array(range(10), pa.int64())})
    monkeypatch.setattr(request_bounds, "MAX_ROW_GROUPS", 4)
    assert _bounds(t, tmp_path, row_group_size=2) == {}
    assert _bounds(t, tmp_path, row_group_size=3)["i"] == Bounds(0.0, 9.0, False)


def test_within_and_scaled() -> None:
    b = Bounds(0.0, 1e4, False)
    assert b.within(0.0, 1e4) and not b.within(0.0, 9e3)
    assert b.within(0.0, 10.0, 1e-3) and b.scaled(1e-3) == Bounds(0.0, 10.0, False)
    assert not Bounds(-1.0, 1.0, True).within(0.0, 2.0)
    assert not Bounds(0.0, math.inf, True).within(0.0, 1e300)


# --- reads with the footer's ranges give what the scans give --------------------------------

def _write_duckdb(table: pa.Table, path: Path) -> None:
    """The table as DuckDB's Parquet writer writes it: another producer's statistics (DuckDB
    orders NaN above every number and writes its own min/max and null counts)."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.register("t", table)
    con.execute(f"COPY t TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 16)")
    con.close()


def _files(tmp_path: Path, writer: str = "pyarrow") -> dict[str, Path]:
    n = 50
    base = {
        "request_id": [f"r{i}" for i in range(n)],
        "arrival_ts": [1.75e9 + i for i in range(n)],
        "prompt_tokens": pa.array([100 + i for i in range(n)], pa.int64()),
        "output_tokens": pa.array([10 + i % 7 for i in range(n)], pa.int32()),
        "ttft_ms": [50.0 + i for i in range(n)],
        "queue_s": [0.01 * i for i in range(n)],
        "kv_bytes": [1e6] * n,
    }
    cases: dict[str, dict[str, Any]] = {
        "in_range": {},
        "out_of_range": {"queue_s": [1e9] + [0.1] * (n - 1),
                         "prompt_tokens": pa.array([-5] + [100] * (n - 1), pa.int64()),
                         "ttft_ms": [float("inf")] + [1.0] * (n - 1)},
        "nulls_and_nan": {"prompt_tokens": pa.array([None] + [100] * (n - 1), pa.int64()),
                          "output_tokens": [float("nan"), 2.5] + [3.0] * (n - 2),
                          "queue_s": [float("nan")] * n},
        "ms_arrival": {"arrival_ts": [1.75e12 + 1000 * i for i in range(n)]},
        "relative": {"arrival_ts": [float(i) for i in range(n)]},
        "bad_times": {"arrival_ts": [-1.0, 1e12] + [1.75e9 + i for i in range(n - 2)]},
        "far_times": {"arrival_ts": [1.0e9] + [1.75e9 + i for i in range(n - 1)]},
        "unsorted": {"arrival_ts": [1.75e9 + (i * 7) % n for i in range(n)]},
    }
    out = {}
    for name, change in cases.items():
        path = tmp_path / f"{name}.parquet"
        table = pa.table({**base, **change})
        if writer == "duckdb":
            _write_duckdb(table, path)
        else:
            pq.write_table(table, path, row_group_size=16)
        out[name] = path
    return out


def _read(path: Path) -> tuple[pd.DataFrame, tuple[str, ...], tuple[str, ...]]:
    got = read_requests(path, ReadContext())
    return got.requests, got.warnings, got.source.notes


@pytest.mark.parametrize("writer", ["pyarrow", "duckdb"])
@pytest.mark.parametrize("case", ["in_range", "out_of_range", "nulls_and_nan", "ms_arrival",
                                  "relative", "bad_times", "far_times", "unsorted"])
def test_reads_with_and_without_footer_ranges_agree(tmp_path: Path, case: str, writer: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rows whether the footer's ranges or the scans decide, for files written by
    pyarrow and by DuckDB (whose statistics put NaN above every number)."""
    path = _files(tmp_path, writer)[case]
    fast = _read(path)
    monkeypatch.setattr(request_formats, "parquet_bounds", lambda *a: {})
    plain = _read(path)
    pd.testing.assert_frame_equal(fast[0], plain[0])
    assert fast[1:] == plain[1:]


def test_footer_ranges_spare_the_scans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In range: neither the range checks nor the search for the largest time read a column,
    and the integer lengths are not searched for NaN."""
    path = _files(tmp_path)["in_range"]
    scans: list[int] = []
    real = validate.implausible

    def counted(values: np.ndarray, low: float, high: float) -> tuple[np.ndarray, str]:
        scans.append(values.size)
        return real(values, low, high)

    monkeypatch.setattr(request_canonical, "implausible", counted)
    monkeypatch.setattr(validate, "implausible", counted)
    monkeypatch.setattr(request_canonical, "_drop_unusable",
                        lambda *a: pytest.fail("integer lengths in range need no NaN search"))
    monkeypatch.setattr(np, "nanmax", lambda *a, **k: pytest.fail("the footer has the largest"))
    frame, _, _ = _read(path)
    assert scans == []
    assert len(frame) == 50
