"""Tests for pdprobe/collectors/request_skipped.py: skipped rows placed and worded."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from pdprobe.collectors import request_skipped
from pdprobe.collectors.request_skipped import LinesBefore, MalformedRows, verified_rows
from pdprobe.collectors.request_values import QUOTE_FIRST


def test_line_ends_before_offsets_are_counted_across_reads(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(request_skipped, "COUNT_BYTES", 7)
    data = b"".join(b"row %d %s\n" % (i, b"x" * (i % 5)) for i in range(100))
    lines = LinesBefore(pa.BufferReader(data))
    for offset in (0, 3, 40, 40, 500, len(data)):
        assert lines.before(offset) == data[:offset].count(b"\n")


def test_rows_are_verified_against_their_lines_bytes() -> None:
    piece = pa.py_buffer(b"a,b,c\r\n1,2\r\nx,y,z\n3,4")  # the last line has no end
    assert verified_rows(piece, [(2, "1,2"), (4, "3,4")]) == [(2, "1,2"), (4, "3,4")]
    assert verified_rows(piece, [(2, "1,3")]) is None  # not that line's text
    assert verified_rows(piece, [(None, "1,2")]) is None  # line not known
    assert verified_rows(piece, [(5, "1,2")]) is None  # beyond the piece


def test_malformed_rows_are_worded_with_the_first_line_of_each_text() -> None:
    rows = MalformedRows(Path("r.csv"))
    assert rows.outcome() == ([], 0)
    rows.add([(12, "1,2"), (30, "3,4")])
    rows.add([(55, "1,2")] + [(100 + i, f"{i}") for i in range(QUOTE_FIRST)])
    warnings, count = rows.outcome()
    assert count == 3 + QUOTE_FIRST
    shown = ", ".join(["12", "30", "12"] + [str(100 + i) for i in range(QUOTE_FIRST - 3)])
    assert warnings == [f"r.csv: skipped {count} malformed row(s) with the wrong number of "
                        f"fields (line {shown}, ...)"]
