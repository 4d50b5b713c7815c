"""The request-record file formats read into Arrow tables: Parquet, CSV/TSV, JSON Lines.

Only the columns ``request_columns.map_columns`` maps are read; instance and status columns
come as dictionaries. Broken JSON lines and malformed CSV rows are skipped with a warning;
only an unusable file raises ``InputError``. JSON Lines is read in ``request_jsonl``.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pdprobe.collectors.io import read_all_bytes
from pdprobe.collectors.prefetch import prefetch
from pdprobe.collectors.request_bounds import Bounds, parquet_bounds
from pdprobe.collectors.request_columns import (
    LOW_CARDINALITY,
    NUMERIC_COLUMNS,
    STRING_COLUMNS,
    ColumnMap,
    _require,
    map_columns,
)
from pdprobe.collectors.request_values import (
    QUOTE_FIRST,
)
from pdprobe.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa


# pyarrow.csv block size: types are inferred from the first block, so a bad value further down
# triggers the text fallback in _read_delimited.
CSV_BLOCK_BYTES: Final = 8 << 20

# Parquet is decoded in record batches of this many rows, whatever a writer's row-group size:
# one batch of every mapped column is ~8 MB, a decoded 1M-row group ~170 MB. Arrow's pool then
# stays near 50 MB and is reused batch after batch (at 10M rows a row group at a time kept
# ~300 MB of Arrow memory and its first touch cost ~1 CPU-s of page zeroing); smaller batches
# cost more Python per batch than they save.
PARQUET_BATCH_ROWS: Final = 1 << 16
# Column chunks are read through a buffered stream of this many bytes instead of whole (a
# compressed 1M-row group is ~50 MB); pre-buffering (whole row groups at once) is off.
PARQUET_BUFFER_BYTES: Final = 1 << 20
# Batches decoded ahead in a worker thread (``prefetch``) while the previous one is copied into
# the output columns: pyarrow's decode releases the GIL, so on two cores the decode and the
# copy overlap (10M rows: load 2.5 -> 1.75 s wall); memory holds a few ~8 MB batches more.
PARQUET_PREFETCH_BATCHES: Final = 2

# A header line longer than this is not a request-record header.
SNIFF_HEADER_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class Batches:
    """Record batches of a request file's mapped columns, as ``request_assemble`` takes them:
    their schema, the batches (an iterator: each is read when it is needed) and the number of
    rows when the file says it up front (a Parquet footer)."""

    schema: pa.Schema
    batches: Iterable[Any]
    rows: int | None = None
    capacity: int | None = None  # rows to reserve when ``rows`` is not known (an estimate)
    # the raw request_id column read again from the start (a file that can be), or None
    ids_again: Callable[[], Iterator[Any]] | None = None
    # source column -> the range of its values, from a Parquet footer (``request_bounds``)
    bounds: dict[str, Bounds] | None = None
    # the parser that read the rows: "duckdb" for request_duckdb's, noted in the source
    parser: str = "pyarrow"

    @property
    def reserve(self) -> int | None:
        """Rows each output column is allocated for up front."""
        return self.rows if self.rows is not None else self.capacity

    @classmethod
    def of_table(cls, table: pa.Table) -> Batches:
        """A table already in memory, one batch per chunk."""
        return cls(table.schema, table.to_batches(), table.num_rows)


def _read_parquet(path: Path, compression: str | None, want_hash_ids: bool
                  ) -> tuple[Batches, ColumnMap]:
    """The mapped columns of a Parquet file, one row group at a time (see ``Batches``)."""
    # pyarrow.compute imported here, before the batches: the reading loop's conversions use
    # it, and a loop that reached its first ``import`` while the analysis modules were being
    # imported in another thread (``services.diagnose.load_dataset``) waited there, the decode
    # idle.
    import pyarrow as pa
    import pyarrow.compute
    import pyarrow.parquet as pq

    try:
        # pyarrow opens paths by their UTF-8 name: a name that is not UTF-8 is read by Python
        source: Any = (path if compression is None and _utf8_name(path)
                       else pa.BufferReader(read_all_bytes(path)))
        pf = pq.ParquetFile(source)
        names = pf.schema_arrow.names
        cmap = map_columns(names)
        _require(path, cmap, names)
        wanted = list(dict.fromkeys(cmap.sources.values()))
        if want_hash_ids and cmap.hash_ids:
            wanted.append(cmap.hash_ids)
        # Instance and status columns repeat a few values: decoded as dictionaries (codes), not
        # as millions of strings.
        schema = pf.schema_arrow
        as_dictionary = [cmap.sources[c] for c in LOW_CARDINALITY if c in cmap.sources
                         and (pa.types.is_string(schema.field(cmap.sources[c]).type)
                              or pa.types.is_large_string(schema.field(cmap.sources[c]).type))]
        # options of the file object: opened again (the footer only)
        pf = pq.ParquetFile(source, read_dictionary=as_dictionary or None,
                            buffer_size=PARQUET_BUFFER_BYTES, pre_buffer=False)
        read_schema = pa.schema([pf.schema_arrow.field(n) for n in wanted])
        rows = pf.metadata.num_rows
        bounds = parquet_bounds(pf.metadata, read_schema, wanted)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({_first_line(exc)})",
                         hint="check that the file was written completely") from exc
    id_name = cmap.sources.get("request_id")
    again = None
    if isinstance(source, Path) and id_name is not None:
        def again() -> Iterator[Any]:
            try:
                pf = pq.ParquetFile(source, buffer_size=PARQUET_BUFFER_BYTES, pre_buffer=False)
            except (pa.ArrowException, OSError) as exc:
                raise InputError(f"{path}: not a readable Parquet file ({_first_line(exc)})",
                                 hint="check that the file was written completely") from exc
            return (batch.column(0) for batch in _read_ahead(path, pf, [id_name]))
    return Batches(read_schema, _read_ahead(path, pf, wanted), rows, ids_again=again,
                   bounds=bounds), cmap


def _read_ahead(path: Path, pf: Any, wanted: list[str]) -> Iterator[Any]:
    """``_row_groups`` decoded in a worker thread ``PARQUET_PREFETCH_BATCHES`` ahead."""
    return prefetch(_row_groups(path, pf, wanted), PARQUET_PREFETCH_BATCHES)


def _row_groups(path: Path, pf: Any, wanted: list[str]) -> Iterator[Any]:
    """The rows of ``pf`` in batches of ``PARQUET_BATCH_ROWS``: memory holds one batch's
    decoded columns, not a row group's or the file's."""
    import pyarrow as pa

    try:
        yield from pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=wanted)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({_first_line(exc)})",
                         hint="check that the file was written completely") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _header(data: bytes | memoryview, delimiter: str) -> list[str]:
    head = bytes(data[:SNIFF_HEADER_BYTES])
    ends = [i for i in (head.find(b"\n"), head.find(b"\r")) if i >= 0]  # bare CR ends a line too
    line = head[: min(ends) if ends else len(head)].decode("utf-8", errors="replace")
    row = next(csv.reader([line], delimiter=delimiter), [])
    return [c.strip().lstrip("\ufeff") for c in row]


def header_columns(path: Path, data: bytes | memoryview, delimiter: str, want_hash_ids: bool
                   ) -> tuple[ColumnMap, list[str]]:
    """The column map of a delimited file's header line and the source columns to read (the
    hashed id column too when ``want_hash_ids``); a missing header or required column is an
    ``InputError`` naming the file."""
    names = _header(data, delimiter)
    if not [n for n in names if n]:
        raise InputError(f"{path}: the first line is not a header",
                         hint="add a header line naming the columns")
    cmap = map_columns(names)
    _require(path, cmap, names)
    wanted = list(dict.fromkeys(cmap.sources.values()))
    if want_hash_ids and cmap.hash_ids:
        wanted.append(cmap.hash_ids)
    return cmap, wanted


def _read_delimited(path: Path, data: bytes | memoryview, delimiter: str, want_hash_ids: bool
                    ) -> tuple[pa.Table, ColumnMap, list[str], int]:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    cmap, wanted = header_columns(path, data, delimiter, want_hash_ids)
    invalid: list[str] = []
    invalid_lines: list[int | None] = []

    def on_invalid(row: Any) -> str:  # called only for malformed rows
        invalid.append(row.text)
        invalid_lines.append(row.number)  # physical line when pyarrow knows it, else None
        return "skip"

    # Instance and status columns repeat a few values: read them as dictionaries so cleaning
    # and mapping run over the distinct values only.
    strings = {cmap.sources[c]: pa.dictionary(pa.int32(), pa.string()) if c in LOW_CARDINALITY
               else pa.string() for c in STRING_COLUMNS if c in cmap.sources}

    def read(column_types: dict[str, Any]) -> pa.Table:
        invalid.clear()
        invalid_lines.clear()
        return pcsv.read_csv(
            pa.BufferReader(data),
            read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
            parse_options=pcsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_invalid),
            convert_options=pcsv.ConvertOptions(include_columns=wanted,
                                                column_types=column_types,
                                                strings_can_be_null=True,
                                                check_utf8=False),  # repaired afterwards
        )

    def read_any() -> pa.Table:
        try:
            return read(strings)
        except pa.ArrowInvalid as exc:
            if "conversion error" not in str(exc).lower():
                raise
            # A non-numeric value deep in a numeric column: read those columns as text and
            # coerce them later, counting what does not parse.
            as_text = {cmap.sources[c]: pa.string() for c in NUMERIC_COLUMNS
                       if c in cmap.sources}
            return read({**strings, **as_text})

    warnings = []
    try:
        table, undecodable = _without_unraisable(read_any)
        if undecodable:
            # pyarrow could not hand a malformed row with invalid UTF-8 to on_invalid (and
            # printed "Exception ignored"): read a copy with the bad bytes replaced instead.
            data = bytes(data).decode("utf-8", errors="replace").encode("utf-8")
            warnings.append(f"{path}: invalid UTF-8 in malformed rows; the bad bytes were "
                            "replaced (U+FFFD)")
            table, _ = _without_unraisable(read_any)
        if table is None:  # still undecodable after the repair: report it as a parse error
            raise pa.ArrowInvalid("undecodable malformed row")
    except pa.ArrowInvalid as exc:
        msg = _first_line(exc)
        if "empty" in msg.lower():
            raise InputError(f"{path}: the file is empty", hint="copy it again") from exc
        raise InputError(f"{path}: not readable as {'TSV' if delimiter == chr(9) else 'CSV'} "
                         f"({msg})", hint="check the delimiter and quoting") from exc
    if invalid:
        whole = bytes(data)  # error path only: a copy to search in
        lines = [known or _line_of(whole, text)
                 for known, text in zip(invalid_lines[:QUOTE_FIRST], invalid[:QUOTE_FIRST],
                                        strict=True)]
        where = ", ".join(str(n) for n in lines if n)
        warnings.append(f"{path}: skipped {len(invalid)} malformed row(s) with the wrong number "
                        f"of fields" + (f" (line {where}{', ...' if len(invalid) > QUOTE_FIRST else ''})"
                                        if where else ""))
    return table, cmap, warnings, len(invalid)


class _UnraisableWatch:
    """While open, "Exception ignored" reports of ``UnicodeDecodeError`` (pyarrow's CSV reader
    decoding a malformed row for the invalid-row handler, in any thread) are noted in
    ``caught`` instead of printed (``_without_unraisable``). For readers running in worker
    threads (``request_stream._parsed_ahead``) it is opened once by the consumer (a hook
    installed and restored by each of two threads at once could be left in place)."""

    def __init__(self) -> None:
        self.caught = False
        self._previous: Callable[[Any], Any] | None = None

    def __enter__(self) -> _UnraisableWatch:
        self._previous = previous = sys.unraisablehook

        def hook(unraisable: Any) -> None:
            if isinstance(unraisable.exc_value, UnicodeDecodeError):
                self.caught = True
            else:
                previous(unraisable)

        sys.unraisablehook = hook
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            sys.unraisablehook = self._previous


def _without_unraisable(read: Callable[[], pa.Table]) -> tuple[pa.Table | None, bool]:
    """Run ``read`` with "Exception ignored" reports of ``UnicodeDecodeError`` (pyarrow's CSV
    reader decoding a malformed row for the invalid-row handler) caught instead of printed.

    Returns the table (None when the read failed after such a report) and whether one came.
    """
    import pyarrow as pa

    with _UnraisableWatch() as watch:
        try:
            return read(), watch.caught
        except pa.ArrowInvalid:
            if watch.caught:
                return None, True
            raise


def _line_of(data: bytes, text: str) -> int | None:
    """The line number of the first line that is exactly ``text`` (not merely starts with it)."""
    import re

    pattern = re.compile(rb"(?:^|\n)" + re.escape(text.encode("utf-8", errors="replace"))
                         + rb"\r?(?:\n|$)")
    match = pattern.search(data)
    if match is None:
        return None
    pos = match.start() + (1 if data[match.start():match.start() + 1] == b"\n" else 0)
    return data.count(b"\n", 0, pos) + 1


def _utf8_name(path: Path) -> bool:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
