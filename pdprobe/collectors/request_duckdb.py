"""JSON Lines request records read by DuckDB: about half pyarrow's cost on a big file.

When DuckDB is installed (``pip install 'pdprobe[duckdb]'``), a plain JSON Lines file of
``AUTO_MIN_BYTES`` or more is parsed by DuckDB in C++ on every core, which hands the mapped
keys over as Arrow record batches of the schema pyarrow's reader would use; they go into
``request_assemble.assemble`` like pyarrow's. On well-formed files the frame is identical
(docs/inputs/requests.md). ``PDPROBE_REQUEST_ENGINE`` chooses otherwise: ``pyarrow`` always
pyarrow, ``duckdb`` DuckDB whatever the size (an error when it is not installed), ``auto``
(the default) as above. At 10M rows (4.1 GB) a whole ``diagnose`` took 11.1 s with DuckDB
against 15.8 s with pyarrow, alternated (docs/performance.md); below ``AUTO_MIN_BYTES`` the two cost
about the same and pyarrow's stricter reading is kept.

The engines differ only where DuckDB's JSON reader accepts a line pyarrow's refuses (pyarrow
skips it with a warning, DuckDB reads it): a number written as a string
(``"2.5"``) or a boolean in a number key (read as 2.5, 1.0), a trailing comma (``{"a": 1,}``),
and ``nan``/``inf``/``1e999`` in keys pdprobe does not read. Checking each number's JSON type
in SQL makes the read as expensive as pyarrow's (measured in docs/performance.md), so only the
cheap checks are made: a text key must hold a JSON string, a number must be finite (DuckDB
reads ``1e400`` as inf). Where DuckDB refuses a line or a check fails, pyarrow's streamed
reader takes over from the row DuckDB stopped at (both skip the same blank lines), skipping
and noting broken lines piece by piece as it does without DuckDB (a capture whose last line
is cut off costs one more parse, not a whole-file read); the file is read whole
(``request_stream.Fallback``) only where pyarrow's streamed reader would be, or where it
skipped a line before that row that DuckDB had read. Warnings, line numbers and exit codes
as with pyarrow alone, memory one piece. Compressed files, ids written as numbers,
booleans and Mooncake ``hash_ids`` keep pyarrow; so do CSV/TSV (DuckDB's ``read_csv`` into
Arrow is hardly cheaper than pyarrow's reader, and it reads ``1.5``, ``1e3``, ``+7``,
``1_000`` into integer columns).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pdprobe.collectors.request_formats import Batches, _utf8_name
from pdprobe.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

# The switch: "auto" (or unset) reads a big file with DuckDB when it is installed, "pyarrow"
# always with pyarrow, "duckdb" with DuckDB wherever it applies.
ENGINE_ENV: Final = "PDPROBE_REQUEST_ENGINE"
ENGINES: Final = ("auto", "pyarrow", "duckdb")
# The size from which "auto" reads with DuckDB. Measured (docs/performance.md, eighth
# session): at 16 MB both read in ~0.58 s with their imports, at 64 MB DuckDB 0.64-0.71 s
# against 0.75-0.96 s, at 4.1 GB 6.8 s against 11-12 s; below it nothing is gained and
# pyarrow's stricter reading (module docstring) is kept.
AUTO_MIN_BYTES: Final = 32 << 20
# Rows per Arrow batch handed to assemble: ~15 MB of columns at a time (DuckDB's own
# buffers, ~150 MB whatever the file's size, hold the parsing ahead of it).
DUCKDB_BATCH_ROWS: Final = 1 << 17
# Rows reserved beyond the estimate from the leading bytes' line count, as request_stream
# reserves them (reserved rows never written cost no memory).
CAPACITY_MARGIN: Final = 1.5
# DuckDB reads a path holding these as a glob or a URL: such a file keeps pyarrow.
_GLOB_CHARS: Final = frozenset("*?[]{}")
# Rows DuckDB handed over last that pyarrow's rows before the seam must equal (``_after``):
# several, so that a shift between identical consecutive records is still seen.
SEAM_ROWS: Final = 64
# ASCII code of '"': a raw JSON value starting with it is a JSON string.
_QUOTE: Final = 34


def engine() -> str:
    """The request-reading engine ``PDPROBE_REQUEST_ENGINE`` asks for (``auto`` when unset)."""
    value = os.environ.get(ENGINE_ENV, "").strip().lower() or "auto"
    if value not in ENGINES:
        raise InputError(f"{ENGINE_ENV}={value!r} is not one of {', '.join(ENGINES)}",
                         hint=f"unset {ENGINE_ENV} to have pdprobe choose the reader")
    return value


def wanted(size: int) -> bool:
    """Whether DuckDB is to read a request file of ``size`` bytes: asked for (and then
    installed, else an ``InputError`` saying how to install it), or left to ``auto`` with
    the file at least ``AUTO_MIN_BYTES`` and DuckDB installed."""
    chosen = engine()
    if chosen == "pyarrow" or (chosen == "auto" and size < AUTO_MIN_BYTES):
        return False
    try:
        import duckdb  # noqa: F401
    except Exception as exc:  # not installed, or an install that fails to load
        if chosen == "auto":
            return False
        raise InputError(f"{ENGINE_ENV}=duckdb but DuckDB is not installed or fails to load",
                         hint="pip install 'pdprobe[duckdb]', or unset "
                              f"{ENGINE_ENV}") from exc
    return True


def applies(path: Path, source: Any, schema: pa.Schema) -> bool:
    """Whether DuckDB can read ``path`` with ``schema``: a plain file (not decompressed into
    memory; a name DuckDB opens as itself) whose columns are float64 or string."""
    import pyarrow as pa

    if isinstance(source, pa.BufferReader) or not _utf8_name(path):
        return False
    name = str(path.resolve())
    if _GLOB_CHARS & set(name) or "://" in name:
        return False
    return all(pa.types.is_float64(f.type) or pa.types.is_string(f.type) for f in schema)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _query(path: Path, schema: pa.Schema) -> str:
    """The SQL reading ``schema``'s keys of ``path``: numbers as DOUBLE, text keys as raw JSON
    kept only when the value is a JSON string (module docstring)."""
    import pyarrow as pa

    columns = []
    parts = []
    for f in schema:
        col = _ident(f.name)
        if pa.types.is_float64(f.type):
            columns.append(f"{_literal(f.name)}: 'DOUBLE'")
            parts.append(col)
        else:
            columns.append(f"{_literal(f.name)}: 'JSON'")
            parts.append(f"CASE WHEN {col} IS NULL THEN NULL WHEN ascii({col}::VARCHAR) = "
                         f"{_QUOTE} THEN {col}->>'$' ELSE error('not a string') END AS {col}")
    return (f"SELECT {', '.join(parts)} FROM read_json({_literal(str(path.resolve()))}, "
            f"columns={{{', '.join(columns)}}}, format='newline_delimited', "
            f"compression='none', auto_detect=false)")


def read_jsonl(path: Path, schema: pa.Schema, size: int, head_bytes: int, head_lines: int,
               resume: Callable[[], Iterator[Any]]) -> Batches:
    """The mapped keys of JSON Lines ``path`` as ``Batches`` of ``schema`` (module docstring).
    Where DuckDB stops (a line it refuses, a check that fails), the rest comes from
    ``resume()``, pyarrow's streamed batches of the whole file with its broken lines skipped
    and noted, from that row on (``_after`` checks the seam); memory stays one piece. ``head_lines`` line ends in the leading ``head_bytes`` size the row estimate."""
    capacity = (int(size / head_bytes * head_lines * CAPACITY_MARGIN) + head_lines + 1024
                if head_bytes > 0 else None)
    return Batches(schema, _batches(path, schema, resume), capacity=capacity, parser="duckdb")


class _Refused(Exception):
    """A DuckDB batch that pyarrow's reader would not have given."""


def _batches(path: Path, schema: pa.Schema, resume: Callable[[], Iterator[Any]]
             ) -> Iterator[Any]:
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc

    floats = [f.name for f in schema if pa.types.is_float64(f.type)]
    texts = [i for i, f in enumerate(schema) if pa.types.is_string(f.type)]
    done = 0  # rows handed over: both readers skip the same blank lines, so row i is line i's
    last = None  # the last rows handed over (a table), to check the seam with (``_after``)
    con = duckdb.connect(config={"preserve_insertion_order": True})  # rows in file order
    try:
        # DuckDB draws a progress bar on a terminal's stderr after 2 s; pdprobe's output is
        # its own (a session setting: a connection's config refuses it)
        con.execute("SET enable_progress_bar = false")
        relation = con.sql(_query(path, schema))
        # duckdb 2 names it to_arrow_reader, 1.x fetch_arrow_reader
        reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
        for batch in reader(DUCKDB_BATCH_ROWS):
            if not batch.schema.equals(schema):
                raise _Refused
            # pyarrow's reader refuses a number beyond float64 (1e400); DuckDB gives inf
            if any(pc.any(pc.is_inf(batch.column(n))).as_py() for n in floats):
                raise _Refused
            owned = _owned_text(batch, texts)
            last = _tail([] if last is None else last.to_batches(), owned)
            yield owned
            done += batch.num_rows
        return
    # (AttributeError: a DuckDB release without the Arrow reader this calls; pyarrow reads)
    except (duckdb.Error, pa.ArrowException, OSError, UnicodeError, AttributeError, _Refused):
        pass
    finally:
        con.close()  # DuckDB's buffers go before pyarrow reads on
    yield from _after(resume(), done, last)


def _tail(earlier: list[Any], batch: Any) -> Any:
    """The last ``SEAM_ROWS`` rows of ``earlier`` batches then ``batch``, as a table."""
    import pyarrow as pa

    table = pa.Table.from_batches([*earlier, batch], schema=batch.schema)
    return table.slice(max(0, table.num_rows - SEAM_ROWS))


def _after(batches: Iterator[Any], skip: int, last: Any = None) -> Iterator[Any]:
    """``batches`` without their first ``skip`` rows, the rows DuckDB handed over.

    ``batches`` (pyarrow's reading of the whole file in pieces) skip the broken lines they
    word; pyarrow's rows before row ``skip`` must then end with ``last``, the last rows DuckDB
    gave (a table). They do not when pyarrow skipped a line before the seam that DuckDB read
    (a number written as a string, ...): the rows would be shifted, so
    ``request_stream.Fallback`` is raised and the file is read whole, every line worded."""
    from pdprobe.collectors.request_stream import Fallback  # (it imports this module)

    recent: Any = None  # pyarrow's last rows skipped so far (``_tail``)
    for batch in batches:
        if skip and last is not None and skip <= batch.num_rows:
            seen = _tail([] if recent is None else recent.to_batches(), batch.slice(0, skip))
            if seen.num_rows < last.num_rows or \
                    not seen.slice(seen.num_rows - last.num_rows).equals(last):
                raise Fallback
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            if last is not None:
                recent = _tail([] if recent is None else recent.to_batches(), batch)
            continue
        yield batch.slice(skip) if skip else batch
        skip = 0
    if skip:  # pyarrow gave fewer rows than DuckDB had: it skipped lines DuckDB read
        raise Fallback


def _owned_text(batch: pa.RecordBatch, texts: list[int]) -> pa.RecordBatch:
    """``batch`` with its text columns copied into pyarrow's memory: a column DuckDB exported
    keeps the whole batch alive, and assemble keeps ``request_id``'s chunks to the end (1.3 GB
    of batches held at 10M rows, against ~130 MB of ids)."""
    import pyarrow as pa

    if not texts:
        return batch
    columns = list(batch.columns)
    for i in texts:
        columns[i] = pa.concat_arrays([columns[i]])  # a copy, even of one array
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
