"""Tests for pdprobe/collectors/request_stream.py: pieces read as the whole file reads."""

from __future__ import annotations

import gzip
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from pdprobe.collectors import request_stream, requests_file
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.request_stream import Fallback
from pdprobe.collectors.requests_file import read_requests
from pdprobe.errors import InputError

ROWS = 3000


def _table(rows: int = ROWS) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table({
        "request_id": [f"r{i}" for i in range(rows)],
        "arrival_ts": 1.75e9 + np.arange(rows) * 0.5,
        "input_tokens": rng.integers(1, 9000, rows),
        "output_tokens": rng.integers(1, 900, rows),
        "ttft_ms": np.round(rng.uniform(5, 900, rows), 3),
        "decode_instance": [f"d{i % 4}" for i in range(rows)],
        "status": ["ok" if i % 9 else "error" for i in range(rows)],
        "note": ["x"] * rows,  # not mapped: not converted
    })


def _write_jsonl(table: pa.Table, path: Path) -> None:
    import json

    rows = table.to_pylist()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _whole(path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """What the whole-file reader gives for ``path``."""
    with monkeypatch.context() as m:
        m.setattr(request_stream, "stream_delimited", _refuse)
        m.setattr(request_stream, "stream_jsonl", _refuse)
        m.setattr(requests_file, "stream_delimited", _refuse)
        m.setattr(requests_file, "stream_jsonl", _refuse)
        return read_requests(path, ReadContext())


def _refuse(*args: object, **kwargs: object) -> object:
    raise Fallback


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_stream, "STREAM_PIECE_BYTES", 20_000)  # ~10 pieces
    monkeypatch.setattr(request_stream, "_TAIL_BYTES", 512)


def _no_whole_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> object:
        raise AssertionError("read whole, not streamed")

    monkeypatch.setattr(requests_file, "_read_delimited", fail)
    monkeypatch.setattr(requests_file, "read_jsonl", fail)


def _streamed_and_whole(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """What the streamed reader gives for ``path`` (failing if it falls back to reading the
    file whole), and what the whole-file reader gives."""
    expect = _whole(path, monkeypatch)
    with monkeypatch.context() as m:
        _no_whole_read(m)
        return read_requests(path, ReadContext()), expect


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "csv.gz"])
def test_clean_files_stream_in_pieces_to_the_whole_file_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    path = tmp_path / f"r.{fmt}"
    if fmt == "jsonl":
        _write_jsonl(_table(), path)
    else:
        pcsv.write_csv(_table(), tmp_path / "plain.csv")
        data = (tmp_path / "plain.csv").read_bytes()
        path.write_bytes(gzip.compress(data) if fmt.endswith(".gz") else data)
    got, expect = _streamed_and_whole(path, monkeypatch)
    pd.testing.assert_frame_equal(got.requests, expect.requests)  # type: ignore[attr-defined]
    assert got.source == expect.source  # type: ignore[attr-defined]
    assert got.warnings == expect.warnings  # type: ignore[attr-defined]
    assert len(got.requests) == ROWS
    assert isinstance(got.requests["decode_instance"].dtype, pd.CategoricalDtype)


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("bad", ["malformed", "text"])
def test_a_bad_row_in_a_later_piece_is_worded_as_the_whole_read(tmp_path: Path, bad: str
                                                                ) -> None:
    path = tmp_path / "r.csv"
    pcsv.write_csv(_table(), path)
    lines = path.read_text().splitlines(keepends=True)
    lines[2500] = ("1,2\n" if bad == "malformed"
                   else lines[2500].replace(lines[2500].split(",")[2], '"many"', 1))
    path.write_text("".join(lines))
    part = read_requests(path, ReadContext())
    if bad == "malformed":
        assert any("skipped 1 malformed row" in w and "line 2501" in w for w in part.warnings)
        assert len(part.requests) == ROWS - 1
    else:
        assert any("dropped 1 row(s) whose input_tokens" in w for w in part.warnings)
        assert len(part.requests) == ROWS - 1


@pytest.mark.usefixtures("small_pieces")
def test_a_broken_json_line_in_a_later_piece_is_skipped_and_named(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _write_jsonl(_table(), path)
    lines = path.read_text().splitlines(keepends=True)
    lines[2800] = '{"request_id": "r2800", "arrival_ts": \n'
    path.write_text("".join(lines))
    part = read_requests(path, ReadContext())
    assert len(part.requests) == ROWS - 1
    assert any("skipped 1 line(s)" in w and "line 2801" in w for w in part.warnings)


def test_pieces_end_at_line_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_stream, "STREAM_PIECE_BYTES", 64)
    monkeypatch.setattr(request_stream, "_TAIL_BYTES", 8)
    data = b"".join(b"line %d %s\n" % (i, b"x" * (i % 13)) for i in range(200))
    pieces = list(request_stream._pieces(pa.BufferReader(data), len(data)))
    assert b"".join(p.to_pybytes() for p in pieces) == data
    assert all(p.to_pybytes().endswith(b"\n") for p in pieces)
    long_line = b"y" * 500 + b"\nshort\n"
    with pytest.raises(Fallback):
        list(request_stream._pieces(pa.BufferReader(long_line), len(long_line)))


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("trace", ["AzureLLMInferenceTrace_conv.csv",
                                   "mooncake_conversation_trace.jsonl"])
def test_public_traces_stream_in_pieces_to_the_whole_file_result(
        traces_dir: Path, monkeypatch: pytest.MonkeyPatch, trace: str) -> None:
    """Real producers' files, read in place with their own column names (Azure LLM inference
    2023: ``TIMESTAMP,ContextTokens,GeneratedTokens``; Mooncake: ``timestamp`` in ms,
    ``input_length``, ``output_length``, ``hash_ids``), cut into ~20 kB pieces: the same frame,
    source and warnings as the whole-file reader."""
    path = traces_dir / trace
    got, expect = _streamed_and_whole(path, monkeypatch)
    assert path.stat().st_size > 10 * 20_000  # many pieces, not one
    pd.testing.assert_frame_equal(got.requests, expect.requests)  # type: ignore[attr-defined]
    assert got.source == expect.source  # type: ignore[attr-defined]
    assert got.warnings == expect.warnings  # type: ignore[attr-defined]
    assert len(got.requests) > 1000


@pytest.mark.usefixtures("small_pieces")
def test_invalid_utf8_in_a_malformed_row_of_a_later_piece_is_worded_as_the_whole_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pyarrow's CSV reader cannot hand such a row to the invalid-row handler and reports it as
    unraisable from the parsing thread: the streamed read notes it (not printed), reads the
    file whole, and leaves the process's hook as it found it."""
    path = tmp_path / "r.csv"
    pcsv.write_csv(_table(), path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2500] = b'"r2499",\xff\xfe,3\n'  # the wrong number of fields, and not UTF-8
    path.write_bytes(b"".join(lines))
    reported: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)  # what would be printed
    part = read_requests(path, ReadContext())
    assert sys.unraisablehook == reported.append
    assert reported == []
    expect = _whole(path, monkeypatch)
    err = capsys.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err
    assert any("skipped 1 malformed row" in w for w in part.warnings)
    assert part.warnings == expect.warnings  # type: ignore[attr-defined]
    pd.testing.assert_frame_equal(part.requests, expect.requests)  # type: ignore[attr-defined]


def _numbered(n: int) -> Iterator[pa.Buffer]:
    return (pa.py_buffer(b"%d" % i) for i in range(n))


def test_pieces_parsed_ahead_come_in_order_whatever_finishes_first() -> None:
    second_done = threading.Event()

    def parse(piece: pa.Buffer) -> pa.Table:
        i = int(piece.to_pybytes())
        if i == 0:  # the first piece finishes after the second
            assert second_done.wait(10)
        if i == 1:
            second_done.set()
        return pa.table({"i": [i]})

    got = [t.column("i")[0].as_py() for t in request_stream._parsed_ahead(_numbered(9), parse)]
    assert got == list(range(9))


def test_a_piece_that_fails_raises_fallback_after_the_pieces_before_it() -> None:
    def parse(piece: pa.Buffer) -> pa.Table:
        i = int(piece.to_pybytes())
        if i == 4:
            raise pa.ArrowInvalid("JSON parse error")
        return pa.table({"i": [i]})

    got: list[int] = []
    with pytest.raises(Fallback):
        for t in request_stream._parsed_ahead(_numbered(9), parse):
            got.append(t.column("i")[0].as_py())
    assert got == [0, 1, 2, 3]


def test_stopping_early_leaves_no_parsing_thread_and_restores_the_hook() -> None:
    hook = sys.unraisablehook
    ahead = request_stream._parsed_ahead(_numbered(50), lambda p: pa.table({"b": [p.size]}))
    next(ahead)
    assert sys.unraisablehook is not hook  # watching while open
    ahead.close()
    assert sys.unraisablehook is hook
    assert not [t for t in threading.enumerate() if t.name.startswith("pdprobe-parse")]


def _broken_jsonl(path: Path, breaks: dict[int, str], crlf: bool = False) -> None:
    """The test table as JSON Lines with the lines at ``breaks`` (0-based) replaced."""
    import json

    lines = [json.dumps(r) for r in _table().to_pylist()]
    for i, text in breaks.items():
        lines[i] = text
    end = "\r\n" if crlf else "\n"
    path.write_text(end.join(lines) + ("" if len(lines) - 1 in breaks else end))


BROKEN = {
    0: '{"request_id": "r0", "arrival_ts": ',  # in the first piece
    7: "",  # blank: not a bad line
    1200: '["not", "an", "object"]',  # the wrong shape
    1201: '{"request_id": "r1201", "arrival_ts": "soon", "input_tokens": 3}',  # wrong type
    1202: '  {"request_id": "r1202", "arrival_ts": 1.75e9, "input_tokens": 3,}  ',
    ROWS - 1: '{"request_id": "r2999", "arrival_ts": 1750001',  # truncated last line, no end
}


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("crlf", [False, True])
def test_broken_json_lines_are_skipped_piece_by_piece_as_the_whole_read_skips_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crlf: bool) -> None:
    path = tmp_path / "r.jsonl"
    _broken_jsonl(path, BROKEN, crlf)
    got, expect = _streamed_and_whole(path, monkeypatch)
    pd.testing.assert_frame_equal(got.requests, expect.requests)  # type: ignore[attr-defined]
    assert got.source == expect.source  # type: ignore[attr-defined]
    assert got.warnings == expect.warnings  # type: ignore[attr-defined]
    assert got.source.skipped == 5
    assert any("skipped 5 line(s)" in w and "(line 1, 1201, 1202, 1203, 3000)" in w
               for w in got.warnings)
    assert len(got.requests) == ROWS - 6


@pytest.mark.usefixtures("small_pieces")
def test_many_broken_lines_across_pieces_are_worded_as_the_whole_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.jsonl"
    _broken_jsonl(path, {i: "{nope" for i in range(5, ROWS, 97)})
    got, expect = _streamed_and_whole(path, monkeypatch)
    assert got.warnings == expect.warnings  # type: ignore[attr-defined]
    assert got.source == expect.source  # type: ignore[attr-defined]
    assert any(", ...)" in w for w in got.warnings)
    pd.testing.assert_frame_equal(got.requests, expect.requests)  # type: ignore[attr-defined]


@pytest.mark.usefixtures("small_pieces")
def test_a_file_of_broken_json_lines_is_the_whole_read_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.jsonl"
    # JSON objects to the json module (the last "output_tokens" wins), refused by pyarrow
    line = ('{"request_id": "r", "arrival_ts": 1.75e9, "input_tokens": 3, "output_tokens": 2, '
            '"output_tokens": "x"}\n')
    path.write_text(line * 2000)
    with pytest.raises(InputError) as whole:
        _whole(path, monkeypatch)
    with monkeypatch.context() as m:
        _no_whole_read(m)
        with pytest.raises(InputError) as got:
            read_requests(path, ReadContext())
    assert str(got.value) == str(whole.value)
    assert "none of its 2000 line(s)" in str(got.value)


def _malformed_csv(path: Path, breaks: dict[int, bytes], crlf: bool = False) -> None:
    """The test table as CSV with the data rows at ``breaks`` (0-based) replaced."""
    pcsv.write_csv(_table(), path)
    lines = path.read_bytes().splitlines()
    for i, text in breaks.items():
        lines[i + 1] = text
    end = b"\r\n" if crlf else b"\n"
    path.write_bytes(end.join(lines) + (b"" if ROWS - 1 in breaks else end))


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("breaks", [
    {ROWS - 1: b'"r2999",1750001000.5,12'},  # a truncated last line, no line end
    {900: b"1,2", 1500: b"1,2,3,4,5,6,7,8,9,10", 2100: b"1,2", 2950: b'"x"'},  # "1,2" twice
    {i: b"%d,%d" % (i, i) for i in range(700, ROWS, 41)},  # more than are named: "..."
])
def test_malformed_rows_after_the_first_piece_are_skipped_as_the_whole_read_skips_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breaks: dict[int, bytes],
        crlf: bool) -> None:
    path = tmp_path / "r.csv"
    _malformed_csv(path, breaks, crlf)
    got, expect = _streamed_and_whole(path, monkeypatch)
    pd.testing.assert_frame_equal(got.requests, expect.requests)  # type: ignore[attr-defined]
    assert got.source == expect.source  # type: ignore[attr-defined]
    assert got.warnings == expect.warnings  # type: ignore[attr-defined]
    assert got.source.skipped == len(breaks)
    assert any(f"skipped {len(breaks)} malformed row(s)" in w for w in got.warnings)


@pytest.mark.usefixtures("small_pieces")
def test_repeated_malformed_rows_are_named_by_their_first_line_as_the_whole_read_names_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.csv"
    _malformed_csv(path, {1000: b"1,2", 1700: b"3,4", 2400: b"1,2"})
    with monkeypatch.context() as m:
        _no_whole_read(m)
        got = read_requests(path, ReadContext())
    assert any("skipped 3 malformed row(s)" in w and "(line 1002, 1702, 1002)" in w
               for w in got.warnings)


@pytest.mark.usefixtures("small_pieces")
def test_a_malformed_row_in_the_first_piece_still_reads_the_file_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.csv"
    _malformed_csv(path, {3: b"1,2"})
    whole = []
    read_delimited = requests_file._read_delimited

    def counted(*args: object, **kwargs: object) -> object:
        whole.append(1)
        return read_delimited(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(requests_file, "_read_delimited", counted)
    got = read_requests(path, ReadContext())
    assert whole == [1]
    assert any("skipped 1 malformed row(s)" in w and "(line 5)" in w for w in got.warnings)


@pytest.mark.usefixtures("small_pieces")
def test_json_instance_and_status_values_read_as_dictionaries_come_out_as_the_whole_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dictionaries of several batches per piece (small JSON blocks), values that clean to the
    same name or to missing, and unknown statuses first seen in a different order in
    different pieces: the frame and the unknown-status warning are the whole-file reader's."""
    import json

    monkeypatch.setattr(request_stream, "JSON_BLOCK_BYTES", 4096)
    statuses = ["ok", " OK ", "weird-b", "", None, "500", "weird-a", "timeout", "499"]
    names = ["d1", " d1", "d2 ", "", None, "d3"]
    rng = np.random.default_rng(3)
    rows = [{"request_id": f"r{i}", "arrival_ts": 1.75e9 + i, "input_tokens": 10 + i % 7,
             "output_tokens": 3, "decode_instance": names[int(rng.integers(len(names)))],
             "status": statuses[int(rng.integers(len(statuses)))] if i > 100 else "ok"}
            for i in range(ROWS)]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got, expect = _streamed_and_whole(path, monkeypatch)
    pd.testing.assert_frame_equal(got.requests, expect.requests)  # type: ignore[attr-defined]
    assert got.warnings == expect.warnings  # type: ignore[attr-defined]
    assert any("status values not understood" in w for w in got.warnings)


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_failed_line_count_falls_back_to_the_whole_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """Counting the lines before a piece with broken lines reads the file again: when that
    read fails, the stream falls back to the whole-file reader (its words), not a traceback."""
    from pdprobe.collectors.request_skipped import LinesBefore

    path = tmp_path / f"r.{fmt}"
    if fmt == "jsonl":
        _broken_jsonl(path, {1201: "{nope"})
    else:
        _malformed_csv(path, {1500: b"1,2"})
    expect = _whole(path, monkeypatch)

    def fail(self: LinesBefore, offset: int) -> int:
        raise OSError("read failed")

    monkeypatch.setattr(LinesBefore, "before", fail)
    got = read_requests(path, ReadContext())
    pd.testing.assert_frame_equal(got.requests, expect.requests)  # type: ignore[attr-defined]
    assert got.warnings == expect.warnings  # type: ignore[attr-defined]
