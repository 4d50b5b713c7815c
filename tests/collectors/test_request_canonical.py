"""Tests for pdprobe/collectors/request_canonical.py: categorical columns, released ids."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdprobe.collectors import request_canonical, request_formats
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.requests_file import read_requests
from pdprobe.dataset import REQUEST_STATUSES


def _write(tmp_path: Path, n: int = 40) -> Path:
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({
        "request_id": [f"req-{i % (n - 1)}" for i in range(n)],  # one duplicate
        "arrival_ts": [1.75e9 + i for i in range(n)],
        "prompt_tokens": [100 + i for i in range(n)],
        "output_tokens": [10] * n,
        "decode_instance": [f" d{(7 * i) % 3} " for i in range(n)],  # untrimmed, unsorted
        "prefill_instance": ["p1" if i % 2 else "" for i in range(n)],  # "" is missing
        "status": ["200" if i % 5 else "ERROR" for i in range(n)],
    }), path)
    return path


def test_instance_and_status_columns_are_sorted_categoricals(tmp_path: Path) -> None:
    req = read_requests(_write(tmp_path), ReadContext()).requests
    for col in ("prefill_instance", "decode_instance", "status"):
        assert isinstance(req[col].dtype, pd.CategoricalDtype)
    assert list(req["decode_instance"].cat.categories) == ["d0", "d1", "d2"]
    assert req["decode_instance"].tolist()[:4] == ["d0", "d1", "d2", "d0"]
    assert list(req["prefill_instance"].cat.categories) == ["p1"]
    assert req["prefill_instance"].isna().sum() == 20
    # every status is a category, so filling in "ok" never needs a new one
    assert sorted(req["status"].cat.categories) == sorted(REQUEST_STATUSES)
    assert (req["status"] == "error").sum() == 8
    assert req["status"].fillna("ok").notna().all()


def test_request_ids_of_big_files_are_checked_then_released(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path)
    kept = read_requests(path, ReadContext())
    assert kept.requests["request_id"].notna().all()
    monkeypatch.setattr(request_canonical, "KEEP_REQUEST_IDS_MAX_ROWS", 10)
    part = read_requests(path, ReadContext())
    assert part.requests["request_id"].isna().all()
    assert "request_id" in part.request_columns
    assert any("1 duplicate request_id" in w for w in part.warnings)
    assert any("not kept in memory" in note for note in part.source.notes)


def _ids_file(tmp_path: Path, ids: list[str | None], bad_rows: set[int]) -> Path:
    n = len(ids)
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({
        "request_id": ids,
        "arrival_ts": [1.75e9 + i for i in range(n)],
        "prompt_tokens": [-5 if i in bad_rows else 100 for i in range(n)],  # -5: row dropped
        "output_tokens": [10] * n,
    }), path, row_group_size=23)
    return path


@pytest.mark.parametrize("prefix", ["req-", "réq-"])  # réq: not hashed, read again whole
def test_ids_hashed_while_read_count_as_held_ids(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    ids: list[str | None] = [f"{prefix}{i % 37}" for i in range(60)]  # 23 repeats
    ids[3], ids[4], ids[41] = None, "  ", f" {prefix}5 "  # missing, blank, untrimmed repeat
    bad = {40, 45, 50}  # dropped rows: their ids (repeats) are not counted
    path = _ids_file(tmp_path, ids, bad)
    held = read_requests(path, ReadContext())  # 57 rows kept, ids kept and counted
    kept = [v.strip() for i, v in enumerate(ids) if i not in bad and v and v.strip()]
    dup = len(kept) - len(set(kept))
    assert any(f"{dup} duplicate request_id" in w for w in held.warnings)
    monkeypatch.setattr(request_canonical, "KEEP_REQUEST_IDS_MAX_ROWS", 20)
    monkeypatch.setattr(request_formats, "PARQUET_BATCH_ROWS", 7)
    hashed = read_requests(path, ReadContext())
    assert hashed.warnings == held.warnings
    assert hashed.requests["request_id"].isna().all() and "request_id" in hashed.request_columns
    assert any("not kept in memory" in note for note in hashed.source.notes)
    pd.testing.assert_frame_equal(hashed.requests.drop(columns="request_id"),
                                  held.requests.drop(columns="request_id"))


def test_few_rows_kept_of_many_read_keep_their_ids(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids: list[str | None] = [f"r{i % 9}" for i in range(50)]
    path = _ids_file(tmp_path, ids, set(range(10, 50)))  # 10 rows kept of 50
    held = read_requests(path, ReadContext())
    monkeypatch.setattr(request_canonical, "KEEP_REQUEST_IDS_MAX_ROWS", 20)  # 50 read > 20
    again = read_requests(path, ReadContext())
    pd.testing.assert_frame_equal(again.requests, held.requests)
    assert again.warnings == held.warnings and again.source == held.source
    assert again.requests["request_id"].tolist()[-2:] == ["r8", "r0"]


@pytest.mark.parametrize("shuffled", [False, True])
def test_columns_compacted_in_place_equal_the_copied_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shuffled: bool) -> None:
    n = 400
    arrival = [1.75e9 + i for i in range(n)]
    if shuffled:
        arrival[10], arrival[300] = arrival[300], arrival[10]
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({
        "request_id": [f"q{i}" for i in range(n)],
        "arrival_ts": arrival,
        "prompt_tokens": [-1 if i in (5, 77, 399) else 10 + i for i in range(n)],  # 3 dropped
        "output_tokens": [5] * n,
        "ttft_s": [0.1 + i / 1000 for i in range(n)],
        "decode_instance": [f"d{i % 4}" for i in range(n)],
        "status": ["ok" if i % 9 else "error" for i in range(n)],
    }), path)
    in_place = read_requests(path, ReadContext())
    monkeypatch.setattr(request_canonical, "COMPACT_MAX_DROPPED", 0.0)  # copies
    copied = read_requests(path, ReadContext())
    pd.testing.assert_frame_equal(in_place.requests, copied.requests)
    assert in_place.warnings == copied.warnings and len(in_place.requests) == n - 3
    assert in_place.requests["prompt_tokens"].iloc[5] == 16  # row 5 dropped
    assert in_place.requests["arrival_ts"].is_monotonic_increasing
