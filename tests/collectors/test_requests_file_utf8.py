"""requests_file's UTF-8 check of each batch: ASCII by one max, a dictionary by its values,
anything else by Arrow's validation; a Parquet file with bad bytes is repaired with a warning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.request_ids import all_ascii
from pdprobe.collectors.requests_file import _valid_utf8, read_requests


def _unchecked(raw: list[bytes]) -> pa.Array:
    """A string array holding ``raw`` as is (pyarrow does not validate from_buffers)."""
    offsets = np.cumsum([0] + [len(r) for r in raw]).astype(np.int32)
    return pa.StringArray.from_buffers(len(raw), pa.py_buffer(offsets.tobytes()),
                                       pa.py_buffer(b"".join(raw)))


def _batch(column: pa.Array) -> pa.RecordBatch:
    n = len(column)
    return pa.record_batch({"text": column, "n": pa.array(np.arange(n, dtype=np.float64))})


@pytest.mark.parametrize(("raw", "ascii_", "valid"), [
    ([b"req-1", b"req-2"], True, True),
    ([b"r\xc3\xa9q", b"x"], False, True),  # "réq": not ASCII, valid UTF-8
    ([b"r1", b"\xffx"], False, False),
    ([b"", b""], True, True),
])
def test_text_columns(raw: list[bytes], ascii_: bool, valid: bool) -> None:
    arr = _unchecked(raw)
    assert all_ascii(arr) is ascii_
    assert _valid_utf8(_batch(arr)) is valid


def test_a_slice_is_checked_over_its_own_values() -> None:
    arr = _unchecked([b"\xff", b"ok", b"fine"])
    assert not all_ascii(arr) and all_ascii(arr.slice(1))
    assert _valid_utf8(_batch(arr.slice(1)))


def test_a_dictionary_column_is_checked_by_its_values() -> None:
    good = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()),
                                          _unchecked([b"p\xc3\xa9", b"a"]))
    bad = pa.DictionaryArray.from_arrays(pa.array([0, 0, 0], pa.int32()),
                                         _unchecked([b"a", b"\xfe"]))  # unused, still bad
    assert _valid_utf8(_batch(good))
    assert not _valid_utf8(_batch(bad))


def test_nulls_and_non_text_columns() -> None:
    assert _valid_utf8(_batch(pa.array([None, None], pa.string())))
    assert _valid_utf8(pa.record_batch({"x": pa.array([1.0, 2.0])}))


def test_parquet_with_invalid_utf8_ids_is_repaired_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({
        "request_id": _unchecked([b"r1", b"\xffx", b"r3"]),
        "arrival_ts": [1.7e9, 1.7e9 + 1, 1.7e9 + 2], "prompt_tokens": [1, 2, 3],
        "output_tokens": [1, 2, 3], "prefill_instance": ["p\u00e9", "a", "a"]}), path)
    part = read_requests(path, ReadContext())
    assert any("1 text value(s) are not valid UTF-8" in w for w in part.warnings)
    assert part.requests["request_id"].tolist() == ["r1", "\ufffdx", "r3"]
    assert part.requests["prefill_instance"].tolist() == ["p\u00e9", "a", "a"]
