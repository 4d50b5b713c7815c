"""Tests for pdprobe/collectors/request_duckdb.py: DuckDB's JSON Lines read gives pyarrow's frame."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pdprobe.collectors import request_duckdb, requests_file
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.requests_file import read_requests
from pdprobe.dataset import Partial
from pdprobe.errors import InputError

ROWS = 2000


def _records(rows: int = ROWS) -> list[dict[str, Any]]:
    rng = np.random.default_rng(11)
    out: list[dict[str, Any]] = []
    for i in range(rows):
        out.append({
            "request_id": f"r{i}",
            "arrival_ts": 1.75e9 + i * 0.37 + float(rng.uniform(0, 0.1)),
            "input_tokens": int(rng.integers(1, 9000)),
            "output_tokens": int(rng.integers(1, 900)),
            "ttft_ms": float(rng.uniform(5, 900)),
            "kv_bytes": int(rng.integers(1, 2**62)),  # beyond 2**53: rounded as pyarrow rounds
            "prefill_instance": ["préfill-α", "prefill-東京", "p\"quoted\"", "p\\back"][i % 4],
            "decode_instance": f"decode-{i % 5}",
            "status": ["ok", "error", "timeout", "aborted", "OK ", None][i % 6],
            "note": {"nested": [1, 2]},  # not mapped: not read
        })
    return out


def _write(path: Path, records: list[dict[str, Any]], eol: str = "\n", head: str = "") -> None:
    path.write_bytes((head + "".join(json.dumps(r, ensure_ascii=False) + eol
                                     for r in records)).encode("utf-8"))


def _records_with_line_1501(tmp_path: Path, line: str) -> Path:
    """A file of ``_records()`` whose line 1501 is ``line`` instead."""
    path = tmp_path / "r.jsonl"
    _write(path, _records())
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1500] = line
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _read(path: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> Partial:
    with monkeypatch.context() as m:
        m.setenv(request_duckdb.ENGINE_ENV, engine)
        return read_requests(path, ReadContext())


class _Spy:
    """Counts the batches DuckDB handed over, pyarrow's streamed reads from where DuckDB
    stopped, and the whole-file (pyarrow) re-reads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.batches = 0
        self.resumed = 0
        self.skipped = 0  # rows DuckDB had handed over when pyarrow took over
        self.whole = 0
        batches = request_duckdb._batches
        after = request_duckdb._after
        whole = requests_file.read_jsonl

        def resumed(batches: Any, skip: int, *rest: Any) -> Any:
            self.resumed += 1
            self.skipped = skip
            return after(batches, skip, *rest)

        def counted(*args: Any) -> Any:
            for batch in batches(*args):
                self.batches += 1
                yield batch

        def whole_read(*args: Any) -> Any:
            self.whole += 1
            return whole(*args)

        monkeypatch.setattr(request_duckdb, "_batches", counted)
        monkeypatch.setattr(request_duckdb, "_after", resumed)
        monkeypatch.setattr(requests_file, "read_jsonl", whole_read)


def _same(a: Partial, b: Partial) -> None:
    """The same frame, warnings and source, but for the note that DuckDB parsed the rows."""
    assert a.requests is not None and b.requests is not None
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    assert a.source is not None and b.source is not None
    assert replace(a.source, notes=_without_duckdb(a.source.notes)) == \
        replace(b.source, notes=_without_duckdb(b.source.notes))
    assert a.warnings == b.warnings
    assert a.request_columns == b.request_columns
    assert a.role_hints == b.role_hints


def _without_duckdb(notes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in notes if n != requests_file.DUCKDB_NOTE)


def _parsed_by_duckdb(p: Partial) -> bool:
    return p.source is not None and requests_file.DUCKDB_NOTE in p.source.notes


duckdb_only = pytest.mark.skipif(importlib.util.find_spec("duckdb") is None,
                                 reason="duckdb not installed (pip install 'pdprobe[duckdb]')")


@duckdb_only
@pytest.mark.parametrize("variant", ["plain", "crlf", "bom", "blank_lines", "missing_keys",
                                     "nulls", "key_order", "ints_as_floats", "no_final_eol"])
def test_clean_files_read_by_duckdb_give_pyarrows_frame(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str) -> None:
    records = _records()
    eol, head = "\n", ""
    if variant == "crlf":
        eol = "\r\n"
    elif variant == "bom":
        head = "\ufeff"
    elif variant == "missing_keys":
        for r in records[300::7]:
            del r["ttft_ms"], r["decode_instance"]
    elif variant == "nulls":
        for r in records[500::5]:
            r.update(ttft_ms=None, prefill_instance=None, kv_bytes=None)
    elif variant == "key_order":
        records = [dict(reversed(list(r.items()))) for r in records]
    elif variant == "ints_as_floats":
        for r in records[::3]:
            r["arrival_ts"] = int(r["arrival_ts"])
            r["ttft_ms"] = 7
    path = tmp_path / "r.jsonl"
    _write(path, records, eol, head)
    if variant == "blank_lines":
        text = path.read_text(encoding="utf-8").splitlines(keepends=True)
        text[100:100] = ["\n", "   \n"]
        path.write_text("".join(text), encoding="utf-8")
    if variant == "no_final_eol":
        path.write_bytes(path.read_bytes().rstrip(b"\n"))
    expect = _read(path, "pyarrow", monkeypatch)
    spy = _Spy(monkeypatch)
    got = _read(path, "duckdb", monkeypatch)
    assert spy.batches >= 1 and spy.resumed == 0 and spy.whole == 0  # DuckDB read it all
    _same(got, expect)
    assert got.requests is not None and len(got.requests) > 0


@duckdb_only
@pytest.mark.parametrize("bad", [
    '{"request_id": "r1", "arrival_ts": \n',  # broken JSON
    '{"request_id": 17, "arrival_ts": 1.75e9, "input_tokens": 5, "output_tokens": 6}\n',
    '{"request_id": "x", "arrival_ts": 1e400, "input_tokens": 5, "output_tokens": 6}\n',
    '{"request_id": "x", "request_id": "y", "arrival_ts": 1.75e9, "input_tokens": 5, '
    '"output_tokens": 6}\n',  # a key twice
    '{"request_id": "x", "arrival_ts": 1.75e9, "input_tokens": 5, "output_tokens": 6, '
    '"decode_instance": {"a": 1}}\n',  # an object in a text key
    '{"request_id": "x", "arrival_ts": 1.75e9, "input_tokens": 5, "output_tokens": 6, '
    '"status": true}\n',  # a boolean in a text key
    '[1, 2]\n',  # not an object
    "{'request_id': 'x'}\n",  # not JSON
])
def test_what_duckdb_refuses_pyarrow_reads_on_with_the_same_warnings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    """A line DuckDB refuses: pyarrow's pieces go on from there, skipping and wording what
    they skip as pyarrow alone does, and read the file whole only where pyarrow alone does
    (not for a broken line: a capture whose last line is cut off stays one piece)."""
    path = _records_with_line_1501(tmp_path, bad)
    alone = _Spy(monkeypatch)
    expect = _read(path, "pyarrow", monkeypatch)
    spy = _Spy(monkeypatch)
    got = _read(path, "duckdb", monkeypatch)
    assert spy.resumed == 1
    assert spy.whole == alone.whole
    if "arrival_ts\": \n" in bad:  # broken JSON: skipped piece by piece, never whole
        assert spy.whole == 0
    _same(got, expect)
    assert any("line 1501" in w for w in got.warnings)


@duckdb_only
@pytest.mark.usefixtures("small_batches")
def test_a_cut_off_last_line_costs_no_whole_read(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A capture still being written: DuckDB reads every row but the last, pyarrow's pieces
    word the cut-off line; the file is not read whole (at 10M rows that would be GBs)."""
    path = tmp_path / "r.jsonl"
    _write(path, _records())
    with path.open("ab") as f:
        f.write(b'{"request_id": "late", "arrival_ts": 1.75')
    expect = _read(path, "pyarrow", monkeypatch)
    spy = _Spy(monkeypatch)
    got = _read(path, "duckdb", monkeypatch)
    assert spy.resumed == 1 and spy.whole == 0  # (DuckDB may stop before handing a row)
    _same(got, expect)
    assert any(f"line {ROWS + 1}" in w for w in got.warnings)


@duckdb_only
@pytest.mark.usefixtures("small_batches")
def test_a_line_only_duckdb_read_before_where_it_stops_reads_the_file_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pyarrow skips a line DuckDB read (a number written as a string) before the row where
    DuckDB stops (its check refuses an infinite number in DuckDB's 6th batch, after 5 were
    handed over): pyarrow's rows are shifted at the seam, so the file is read whole (the seam
    check), and the rows are pyarrow's own."""
    path = tmp_path / "r.jsonl"
    records = _records()
    records[300]["ttft_ms"] = "2.5"
    records[1500]["ttft_ms"] = float("inf")  # written as Infinity
    _write(path, records)
    expect = _read(path, "pyarrow", monkeypatch)
    spy = _Spy(monkeypatch)
    got = _read(path, "duckdb", monkeypatch)
    assert spy.resumed == 1 and spy.skipped == 5 * 256 and spy.whole == 1
    _same(got, expect)
    assert not _parsed_by_duckdb(got)  # every row pyarrow's
    assert any("line 301" in w for w in got.warnings)


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB batches of 256 rows and pyarrow pieces of ~20 kB: a stop falls mid-file."""
    from pdprobe.collectors import request_stream

    monkeypatch.setattr(request_duckdb, "DUCKDB_BATCH_ROWS", 256)
    monkeypatch.setattr(request_stream, "STREAM_PIECE_BYTES", 20_000)
    monkeypatch.setattr(request_stream, "_TAIL_BYTES", 512)


@duckdb_only
@pytest.mark.usefixtures("small_batches")
@pytest.mark.parametrize("odd", [
    '{"request_id": "x", "arrival_ts": 1.75e9, "input_tokens": 5, "output_tokens": 6, '
    '"ttft_ms": Infinity}\n',  # pyarrow reads inf, DuckDB's check stops
    '{"request_id": "x", "arrival_ts": 1.75e9, "input_tokens": 5, "output_tokens": 6}'
    '{"request_id": "y", "arrival_ts": 1.75e9, "input_tokens": 5, "output_tokens": 6}\n',
    '{"request_id": "x", "arrival_ts": 1.75e9, "input_tokens": 5, "output_tokens": 6}\r'
    '{"request_id": "y", "arrival_ts": 1.75e9, "input_tokens": 5, "output_tokens": 6}\n',
])
def test_where_duckdb_stops_pyarrow_streams_on_from_that_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str) -> None:
    """Lines pyarrow reads and DuckDB refuses (two objects on a line, a bare CR ending one):
    pyarrow's pieces take over from the row DuckDB stopped at, not a whole-file read."""
    path = _records_with_line_1501(tmp_path, odd)
    expect = _read(path, "pyarrow", monkeypatch)
    spy = _Spy(monkeypatch)
    got = _read(path, "duckdb", monkeypatch)
    assert spy.resumed == 1 and spy.whole == 0
    if "Infinity" in odd:  # caught in DuckDB's 6th batch: the 5 before were kept, not re-read
        assert spy.skipped == 5 * 256
    _same(got, expect)
    assert got.warnings == expect.warnings


@duckdb_only
def test_known_difference_a_number_written_as_a_string_is_read_not_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the readers differ (module docstring): pyarrow skips the line, DuckDB reads 2.5."""
    path = tmp_path / "r.jsonl"
    records = _records()
    records[1500]["ttft_ms"] = "2.5"
    _write(path, records)
    expect = _read(path, "pyarrow", monkeypatch)
    got = _read(path, "duckdb", monkeypatch)
    assert expect.requests is not None and got.requests is not None
    assert len(expect.requests) == ROWS - 1
    assert any("line 1501" in w for w in expect.warnings)
    assert len(got.requests) == ROWS
    assert not any("line 1501" in w for w in got.warnings)
    row = got.requests[got.requests["request_id"] == "r1500"]
    assert row["ttft_s"].tolist() == [pytest.approx(2.5e-3)]


@duckdb_only
@pytest.mark.parametrize("name", ["r.jsonl.gz", "r[1].jsonl", "it's.jsonl"])
def test_compressed_and_glob_named_files_keep_pyarrow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    path = tmp_path / name
    _write(tmp_path / "plain.jsonl", _records(300))
    data = (tmp_path / "plain.jsonl").read_bytes()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    expect = _read(path, "pyarrow", monkeypatch)
    spy = _Spy(monkeypatch)
    got = _read(path, "duckdb", monkeypatch)
    assert spy.batches == (1 if name == "it's.jsonl" else 0)  # a quote in a name is escaped
    _same(got, expect)


def test_after_drops_the_rows_already_handed_over() -> None:
    import pyarrow as pa

    from pdprobe.collectors.request_stream import Fallback

    batches = [pa.record_batch({"a": list(range(i, i + 4))}) for i in (0, 4, 8)]
    for skip in (0, 3, 4, 9, 12):
        last = pa.table({"a": list(range(max(0, skip - 6), skip))})  # (across batches too)
        for seam in (None, last):
            got = [v for b in request_duckdb._after(iter(batches), skip, seam)
                   for v in b["a"].to_pylist()]
            assert got == list(range(skip, 12))
    for skip, seam in ((20, None), (3, pa.table({"a": [7]})), (4, pa.table({"a": [2]})),
                       (2, pa.table({"a": [-1, 0, 1]}))):
        with pytest.raises(Fallback):  # fewer rows than DuckDB gave, or a shifted seam
            list(request_duckdb._after(iter(batches), skip, seam))
    # DuckDB read 0, 9, 1, 1 where pyarrow skipped the 9: pyarrow's row 3 is a 1 too, so
    # only the rows before it show the shift
    shifted = [pa.record_batch({"a": [0, 1, 1, 1]}), pa.record_batch({"a": [2, 3]})]
    with pytest.raises(Fallback):
        list(request_duckdb._after(iter(shifted), 4, pa.table({"a": [0, 9, 1, 1]})))


def test_the_seam_is_the_last_rows_duckdb_handed_over() -> None:
    import pyarrow as pa

    a, b = pa.record_batch({"a": list(range(100))}), pa.record_batch({"a": [100, 101]})
    last = request_duckdb._tail([a], b)
    assert last["a"].to_pylist() == list(range(102 - request_duckdb.SEAM_ROWS, 102))


def test_the_engine_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    big = request_duckdb.AUTO_MIN_BYTES
    monkeypatch.delenv(request_duckdb.ENGINE_ENV, raising=False)
    assert request_duckdb.engine() == "auto"
    assert not request_duckdb.wanted(big - 1)  # small: pyarrow, DuckDB not even imported
    monkeypatch.setenv(request_duckdb.ENGINE_ENV, "pyarrow")
    assert not request_duckdb.wanted(big)
    monkeypatch.setenv(request_duckdb.ENGINE_ENV, " DuckDB ")
    assert request_duckdb.engine() == "duckdb"
    monkeypatch.setenv(request_duckdb.ENGINE_ENV, "polars")
    with pytest.raises(InputError, match="PDPROBE_REQUEST_ENGINE='polars' is not one of"):
        request_duckdb.engine()


def test_asking_for_duckdb_without_it_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(request_duckdb.ENGINE_ENV, "duckdb")
    monkeypatch.setitem(sys.modules, "duckdb", None)  # import fails
    with pytest.raises(InputError, match="not installed") as info:
        request_duckdb.wanted(0)
    assert "pdprobe[duckdb]" in (info.value.hint or "")


@duckdb_only
def test_auto_and_duckdb_want_duckdb_where_it_is_installed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    big = request_duckdb.AUTO_MIN_BYTES
    monkeypatch.delenv(request_duckdb.ENGINE_ENV, raising=False)
    assert request_duckdb.wanted(big) and not request_duckdb.wanted(big - 1)
    monkeypatch.setenv(request_duckdb.ENGINE_ENV, "duckdb")
    assert request_duckdb.wanted(big - 1) and request_duckdb.wanted(0)


@pytest.mark.parametrize("broken", [None, RuntimeError("a broken install")])
def test_auto_without_duckdb_reads_with_pyarrow_without_a_word(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: Exception | None) -> None:
    path = tmp_path / "r.jsonl"
    _write(path, _records(300))
    expect = _read(path, "pyarrow", monkeypatch)
    monkeypatch.delenv(request_duckdb.ENGINE_ENV, raising=False)
    monkeypatch.setattr(request_duckdb, "AUTO_MIN_BYTES", 1)  # the file counts as big
    if broken is None:
        monkeypatch.setitem(sys.modules, "duckdb", None)  # import fails: not installed
    else:
        def fails(name: str, *args: Any, **kwargs: Any) -> Any:
            if name == "duckdb":
                raise broken
            return real(name, *args, **kwargs)

        import builtins
        real = builtins.__import__
        monkeypatch.setattr(builtins, "__import__", fails)
    assert not request_duckdb.wanted(path.stat().st_size)
    got = read_requests(path, ReadContext())
    _same(got, expect)


@duckdb_only
def test_auto_reads_a_big_file_with_duckdb_and_a_small_one_with_pyarrow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.jsonl"
    _write(path, _records())
    size = path.stat().st_size
    monkeypatch.delenv(request_duckdb.ENGINE_ENV, raising=False)
    spy = _Spy(monkeypatch)
    small = read_requests(path, ReadContext())
    assert spy.batches == 0
    monkeypatch.setattr(request_duckdb, "AUTO_MIN_BYTES", size)
    big = read_requests(path, ReadContext())
    assert spy.batches > 0 and spy.resumed == 0 and spy.whole == 0
    _same(big, small)
    assert _parsed_by_duckdb(big) and not _parsed_by_duckdb(small)  # the source says which


def test_the_query_quotes_names_and_paths() -> None:
    import pyarrow as pa

    schema = pa.schema([("it's", pa.float64()), ('a"b', pa.string())])
    sql = request_duckdb._query(Path("/tmp/o'k.jsonl"), schema)
    assert "'/tmp/o''k.jsonl'" in sql
    assert "'it''s': 'DOUBLE'" in sql and "'a\"b': 'JSON'" in sql
    assert '"a""b"' in sql
