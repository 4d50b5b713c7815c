"""CSV/TSV and JSON Lines request records read in bounded pieces, each parsed in parallel.

The file is cut at line ends into pieces of ``STREAM_PIECE_BYTES`` and each piece is parsed by
pyarrow, so memory holds a few pieces of text and their columns (not the file, and the file
is read, not memory-mapped: its pages do not count in the process's memory), while both cores
parse. pyarrow's own readers cut blocks at line ends the same way (values with line breaks
inside quotes are not read by them either).

CSV types are inferred from the first block of the first piece, as the whole-file reader
infers them, and later pieces are read with those types. Only the mapped columns are
converted; instance and status columns come as dictionaries. Broken JSON lines, and malformed
CSV rows after the first piece, are skipped piece by piece when the caller passes a record
for them (``request_jsonl.SkippedLines``, ``request_skipped.MalformedRows``), worded as the
whole-file readers word them. Anything else unusual (a malformed row in the first piece, a
value of another type further down, invalid UTF-8 in a malformed row, a line longer than a
piece) raises ``Fallback`` while the batches are read: the caller then reads the file whole,
the way that words every such case (``request_formats._read_delimited``,
``request_jsonl.read_jsonl``).

The pieces after the first are parsed ahead of the consumer, ``PARSE_WORKERS`` at once, each
by one thread (``_parsed_ahead``): pyarrow's own threads within a piece cost ~10 % more CPU
than one thread per piece, and the conversion of one piece's batches (``request_assemble``,
which holds the GIL) then overlaps the parsing of the next ones.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import numpy as np

from pdprobe.collectors import request_duckdb
from pdprobe.collectors.request_columns import (
    LOW_CARDINALITY,
    STRING_COLUMNS,
    ColumnMap,
)
from pdprobe.collectors.request_formats import (
    CSV_BLOCK_BYTES,
    Batches,
    _UnraisableWatch,
    _without_unraisable,
    header_columns,
)
from pdprobe.collectors.request_jsonl import (
    JSON_BLOCK_BYTES,
    SkippedLines,
    _schema,
    parse_skipping,
)
from pdprobe.collectors.request_skipped import LinesBefore, MalformedRows, verified_rows

if TYPE_CHECKING:
    import pyarrow as pa

Item = TypeVar("Item")
Parsed = TypeVar("Parsed")

# Text parsed per piece: two CSV blocks or four JSON blocks (the first piece by pyarrow's
# threads, later ones by one thread each, ``PARSE_WORKERS`` at once); a piece, its parser's
# buffers and its columns stay near 100 MB (when this size was chosen, with pyarrow's threads
# on every piece; 1M rows: 0.9 CPU-s and 477 MB peak for CSV, against 0.8 s and 655 MB with
# 64 MB pieces).
STREAM_PIECE_BYTES: Final = 16 << 20
# Rows reserved beyond the estimate from the first piece's bytes per row: lines vary in
# length along a file, and reserving costs address space only.
CAPACITY_MARGIN: Final = 1.5
# Where a piece's last line end is looked for first (the rest only when a line is longer).
_TAIL_BYTES: Final = 1 << 20
# Pieces parsed at once, each by one pyarrow thread (``use_threads=False``): the machine's two
# cores, without pyarrow's per-block task overhead (1M rows, parse alone, alternating runs:
# JSON Lines 1.75-1.98 CPU-s against 1.99-2.26 with pyarrow's threads, CSV 0.46-0.53
# against 0.52-0.62).
PARSE_WORKERS: Final = 2
# Pieces read and handed to the workers ahead of the one being converted: the workers never
# wait for the consumer, and memory holds this many pieces of text and their columns.
PARSE_AHEAD: Final = PARSE_WORKERS + 1


class Fallback(Exception):
    """A streamed read met something only the whole-file reader handles (see the module
    docstring); raised while the batches are read."""


def _pieces(source: Any, size: int, skip: int = 0) -> Iterator[pa.Buffer]:
    """``source`` (a ``pyarrow`` random-access file) from byte ``skip`` on, in pieces of about
    ``STREAM_PIECE_BYTES`` that each end at a line end (the last one at the end of the data)."""
    pos = skip
    while pos < size:
        source.seek(pos)
        buf = source.read_buffer(min(STREAM_PIECE_BYTES, size - pos))
        if pos + len(buf) >= size:
            yield buf
            return
        arr = np.frombuffer(buf, dtype=np.uint8)
        tail = max(0, arr.size - _TAIL_BYTES)
        ends = np.flatnonzero(arr[tail:] == 0x0A)
        if ends.size == 0:
            ends = np.flatnonzero(arr[:tail] == 0x0A)
            tail = 0
        if ends.size == 0:  # one line longer than a piece: the whole-file reader takes it
            raise Fallback
        cut = tail + int(ends[-1]) + 1
        yield buf.slice(0, cut)
        pos += cut


def _header_end(data: bytes | memoryview) -> int:
    """Where the first line ends (after its line end)."""
    head = bytes(data[:1 << 16])
    nl = head.find(b"\n")
    if nl < 0:
        raise Fallback  # a header line without an end: a one-line file or a huge header
    return nl + 1


def stream_delimited(path: Path, source: Any, data: bytes | memoryview, delimiter: str,
                     want_hash_ids: bool, skipped: MalformedRows | None = None
                     ) -> tuple[Batches, ColumnMap]:
    """The mapped columns of a clean CSV/TSV file, piece by piece (module docstring).
    ``source`` is the file or the decompressed bytes as a ``pyarrow`` random-access file;
    ``data`` gives the header. With ``skipped``, malformed rows after the first piece are
    skipped into it (``MalformedRows``) instead of raising ``Fallback``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    cmap, wanted = header_columns(path, data, delimiter, want_hash_ids)
    types: dict[str, Any] = {
        cmap.sources[c]: pa.dictionary(pa.int32(), pa.string()) if c in LOW_CARDINALITY
        else pa.string() for c in STRING_COLUMNS if c in cmap.sources}
    skip = _header_end(data)
    # the column names as pyarrow reads them, for the pieces after the first (no header)
    header = _guarded(lambda: pcsv.read_csv(
        pa.py_buffer(bytes(data[:skip])),
        parse_options=pcsv.ParseOptions(delimiter=delimiter))).column_names
    size = source.size()
    malformed: list[int] = []

    def on_invalid(row: Any) -> str:  # a malformed row: the whole-file reader words it
        malformed.append(1)
        return "skip"

    def read(piece: pa.Buffer, first: bool, rows: list[tuple[int | None, str]] | None = None
             ) -> pa.Table:
        def later_invalid(row: Any) -> str:  # (line in the piece, text), from one thread
            if rows is not None:
                rows.append((row.number, row.text))
            return "skip"

        return pcsv.read_csv(
            piece,
            read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES,
                                          column_names=None if first else header,
                                          use_threads=first),  # later: one per piece
            parse_options=pcsv.ParseOptions(
                delimiter=delimiter,
                invalid_row_handler=on_invalid if rows is None else later_invalid),
            convert_options=pcsv.ConvertOptions(include_columns=wanted, column_types=types,
                                                strings_can_be_null=True, check_utf8=False))

    def read_later(item: tuple[int, pa.Buffer]
                   ) -> tuple[int, pa.Table, list[tuple[int, str]] | None]:
        start, piece = item
        if skipped is None:
            return start, read(piece, False), []
        rows: list[tuple[int | None, str]] = []
        table = read(piece, False, rows)
        return start, table, verified_rows(piece, rows) if rows else []

    first_piece = next(_pieces(source, size), None)
    if first_piece is None:
        raise Fallback
    first = _guarded(lambda: read(first_piece, True))
    if malformed:
        raise Fallback
    lines = LinesBefore(source)
    # later pieces with the types inferred from the first block, as one read would have them
    types = {f.name: f.type for f in first.schema}

    def batches() -> Iterator[Any]:
        yield from first.to_batches()
        later = _starts(_pieces(source, size, len(first_piece)), len(first_piece))
        for start, table, rows in _parsed_ahead(later, read_later):
            if malformed or rows is None or table.schema != first.schema:
                raise Fallback
            if rows and skipped is not None:
                before = _lines_before(lines, start)
                skipped.add([(before + n, text) for n, text in rows])
            yield from table.to_batches()

    return Batches(first.schema, batches(),
                   capacity=_capacity(size, len(first_piece), first.num_rows)), cmap


def stream_jsonl(path: Path, source: Any, data: bytes | memoryview, want_hash_ids: bool,
                 skipped: SkippedLines | None = None) -> tuple[Batches, ColumnMap]:
    """The mapped columns of a JSON Lines file, piece by piece (module docstring), with the
    schema learned from the first lines (``request_jsonl._schema``); read by DuckDB where it
    applies (``request_duckdb``), and by these pieces from the row where DuckDB stops.

    With ``skipped``, a piece pyarrow refuses has its broken lines left out and noted there
    (``SkippedLines``: ``read_jsonl``'s warning, count and error) instead of raising
    ``Fallback``: a file with a truncated last line is parsed once, in pieces, not again whole
    (at 1M rows 9.2 CPU-s and 1.99 GB peak for one broken line, against ~2.7 s and ~0.4 GB)."""
    schema, cmap = _schema(path, data, want_hash_ids)
    size = source.size()
    request_duckdb.engine()  # a wrong PDPROBE_REQUEST_ENGINE is an error whatever the file
    if request_duckdb.applies(path, source, schema) and request_duckdb.wanted(size):
        head = np.frombuffer(data[:STREAM_PIECE_BYTES], dtype=np.uint8)
        return request_duckdb.read_jsonl(
            path, schema, size, head.size, int(np.count_nonzero(head == 0x0A)),
            resume=lambda: _jsonl_pieces(source, size, schema, skipped)[2]), cmap
    import pyarrow as pa

    # instance and status columns as dictionaries, as CSV and Parquet give them (pyarrow's
    # JSON reader cannot): encoded in the parsing threads, one dictionary per piece
    codes = list(dict.fromkeys(
        cmap.sources[c] for c in LOW_CARDINALITY if c in cmap.sources
        and pa.types.is_string(schema.field(cmap.sources[c]).type)))
    piece_bytes, piece_rows, batches = _jsonl_pieces(source, size, schema, skipped, codes)
    out = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in codes else f
                     for f in schema])
    return Batches(out, batches, capacity=_capacity(size, piece_bytes, piece_rows)), cmap


def _jsonl_pieces(source: Any, size: int, schema: pa.Schema, skipped: SkippedLines | None,
                  codes: list[str] | None = None) -> tuple[int, int, Iterator[Any]]:
    """pyarrow's reading of ``source`` in pieces with ``schema``: the first piece's bytes and
    rows (read now: a failure raises ``Fallback`` here) and every piece's batches; broken
    lines are skipped into ``skipped`` when it is given (``stream_jsonl``), and the string
    columns ``codes`` come dictionary-encoded (``_encoded``)."""
    import pyarrow as pa
    import pyarrow.json as pjson

    def read(item: tuple[int, pa.Buffer], threads: bool = True
             ) -> tuple[int, pa.Table, np.ndarray | None]:
        start, piece = item
        try:
            return start, _encoded(pjson.read_json(
                piece, read_options=pjson.ReadOptions(block_size=JSON_BLOCK_BYTES,
                                                      use_threads=threads),
                parse_options=pjson.ParseOptions(explicit_schema=schema,
                                                 unexpected_field_behavior="ignore")),
                codes), None
        except pa.ArrowInvalid:
            if skipped is None:
                raise
        table, bad = parse_skipping(memoryview(piece), schema)  # 1-based lines of the piece
        return start, _encoded(table, codes), bad

    lines = LinesBefore(source)

    def kept(parsed: tuple[int, pa.Table, np.ndarray | None]) -> pa.Table:
        start, table, bad = parsed
        if bad is not None and skipped is not None:
            skipped.add(bad + _lines_before(lines, start))
        return table

    pieces = _starts(_pieces(source, size), 0)
    first_item = next(pieces, None)
    if first_item is None:
        raise Fallback
    first = kept(_parsed(read, first_item))

    def batches() -> Iterator[Any]:
        rows = first.num_rows
        yield from first.to_batches()
        for parsed in _parsed_ahead(pieces, partial(read, threads=False)):
            table = kept(parsed)
            rows += table.num_rows
            yield from table.to_batches()
        if skipped is not None:
            skipped.check_rows(rows)

    return len(first_item[1]), first.num_rows, batches()


def _encoded(table: pa.Table, names: list[str] | None) -> pa.Table:
    """``table`` with its string columns ``names`` dictionary-encoded, the chunks of each
    sharing one dictionary (first-seen order over the table): ``request_assemble`` then maps
    one dictionary per piece instead of encoding every batch, and codes, names and unknown
    statuses come out the same (they depend on the values only, and the first-seen order of
    the piece is the batches' order)."""
    import pyarrow.compute as pc

    if not names:
        return table
    for name in names:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.dictionary_encode(table.column(i)))
    return table.unify_dictionaries()


def _starts(pieces: Iterator[pa.Buffer], start: int) -> Iterator[tuple[int, pa.Buffer]]:
    """Each piece with the offset it starts at (the pieces are consecutive from ``start``)."""
    for piece in pieces:
        yield start, piece
        start += len(piece)


def _parsed_ahead(pieces: Iterator[Item], parse: Callable[[Item], Parsed]
                  ) -> Iterator[Parsed]:
    """``parse(piece)`` of each piece, in order, parsed by ``PARSE_WORKERS`` threads up to
    ``PARSE_AHEAD`` pieces ahead of the consumer; any failure (``_guarded``'s cases) raises
    ``Fallback`` where that piece's table would have come. The pieces are read here, in the
    consumer's thread. Stopping early (an exception, ``close()``) cancels the pieces not
    started and waits for the ones being parsed: no thread outlives the iteration."""
    with _UnraisableWatch() as watch, ThreadPoolExecutor(
            PARSE_WORKERS, thread_name_prefix="pdprobe-parse") as pool:
        pending: deque[Future[Parsed]] = deque()
        try:
            while True:
                while len(pending) < PARSE_AHEAD:
                    piece = next(pieces, None)
                    if piece is None:
                        break
                    pending.append(pool.submit(_parsed, parse, piece))
                    del piece  # the worker holds it until parsed, not this frame
                if not pending:
                    return
                table = pending.popleft().result()
                if watch.caught:
                    raise Fallback
                yield table
                del table  # the consumer holds it, not this frame
        finally:
            for future in pending:
                future.cancel()


def _lines_before(lines: LinesBefore, offset: int) -> int:
    """``lines.before(offset)``, a failed read of the file raised as ``Fallback`` (the
    whole-file reader then words it) instead of escaping as a traceback."""
    import pyarrow as pa

    try:
        return lines.before(offset)
    except (pa.ArrowException, OSError) as exc:
        raise Fallback from exc


def _parsed(parse: Callable[[Item], Parsed], piece: Item) -> Parsed:
    """``parse(piece)`` in a worker thread, its failures raised as ``Fallback``."""
    import pyarrow as pa

    try:
        return parse(piece)
    except (pa.ArrowException, OSError, UnicodeError) as exc:
        raise Fallback from exc


def _capacity(size: int, piece_bytes: int, piece_rows: int) -> int:
    """Rows to reserve for a file of ``size`` bytes whose first piece held ``piece_rows`` rows
    in ``piece_bytes``: generous, since only the rows written take memory (the rest of an
    ``np.empty`` array is never touched), and a file longer than that still reads (the rest
    is appended)."""
    if piece_bytes <= 0:
        return piece_rows
    return int(size / piece_bytes * piece_rows * CAPACITY_MARGIN) + piece_rows + 1024


def _guarded(call: Callable[[], Any]) -> Any:
    """``call()`` with every way it can fail turned into ``Fallback``."""
    import pyarrow as pa

    try:
        table, undecodable = _without_unraisable(call)
    except (pa.ArrowException, OSError, UnicodeError, Fallback) as exc:
        raise Fallback from exc
    if undecodable or table is None:
        raise Fallback
    return table
