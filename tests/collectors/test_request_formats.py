"""Parquet batches decoded ahead in a worker thread: same rows, a broken page is still an
``InputError`` naming the file, and no worker outlives the read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdprobe.collectors import request_formats
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.requests_file import read_requests
from pdprobe.errors import InputError
from tests.collectors.test_prefetch import _workers

ROWS = 3_000
GROUP_ROWS = 1_000


def _write(path: Path) -> pa.Table:
    i = np.arange(ROWS)
    table = pa.table({"arrival_ts": 1.7e9 + i * 0.01, "prompt_tokens": i % 100 + 1,
                      "output_tokens": i % 50 + 1})
    pq.write_table(table, path, row_group_size=GROUP_ROWS, compression="none")
    return table


def test_batches_read_ahead_are_the_file_in_order(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_formats, "PARQUET_BATCH_ROWS", 128)  # many batches per group
    path = tmp_path / "r.parquet"
    table = _write(path)
    batches, _ = request_formats._read_parquet(path, None, False)
    got = pa.Table.from_batches(list(batches.batches))
    assert got.column("arrival_ts").to_pylist() == table.column("arrival_ts").to_pylist()
    assert got.column("prompt_tokens").to_pylist() == table.column("prompt_tokens").to_pylist()
    assert not _workers()


def test_a_broken_page_after_good_ones_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.parquet"
    _write(path)
    # the last row group's page header overwritten: the footer reads, the decode fails there
    offset = pq.ParquetFile(path).metadata.row_group(2).column(1).data_page_offset
    raw = bytearray(path.read_bytes())
    raw[offset:offset + 12] = b"\xff" * 12
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError) as err:
        read_requests(path, ReadContext())
    assert "broken.parquet: not a readable Parquet file" in err.value.one_line()
    assert not _workers()
