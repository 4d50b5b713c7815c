"""Read per-request records (JSON Lines, CSV/TSV, Parquet; gzip/zstd too) into the canonical table.

Three layouts are recognised from the column names (see docs/inputs/requests.md):

- the canonical columns of docs/contract.md, with a small alias table (``input_tokens`` -> ``prompt_tokens``,
  ``ttft_ms`` -> ``ttft_s`` / 1000, ...);
- Azure LLM inference traces: ``TIMESTAMP, ContextTokens, GeneratedTokens`` (wall clock, UTC);
- Mooncake traces: ``timestamp`` (ms from the trace start), ``input_length``, ``output_length``,
  ``hash_ids``.

Everything is columnar (pyarrow, numpy): no Python loop runs over rows. Broken JSON lines and
malformed CSV rows are skipped with a warning; only an unusable file raises ``InputError``.

This module sniffs and dispatches; the parts are ``request_columns`` (names, aliases, layouts),
``request_formats`` (Parquet, CSV/TSV, JSON Lines into Arrow), ``request_values`` (numbers,
times, text, status) and ``request_canonical`` (the canonical frame, row checks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors import request_canonical
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.io import open_binary, read_all_bytes, sniff
from pdprobe.collectors.prefetch import imported_meanwhile, imports_held, imports_welcome
from pdprobe.collectors.request_assemble import Assembled, assemble
from pdprobe.collectors.request_blocks import distinct_in_order
from pdprobe.collectors.request_canonical import (
    _canonicalise,
    _Loaded,
)
from pdprobe.collectors.request_columns import (
    RECORDS,
    ColumnMap,
    _require,
    map_columns,
)
from pdprobe.collectors.request_formats import (
    SNIFF_HEADER_BYTES,
    Batches,
    _first_line,
    _header,
    _read_delimited,
    _read_parquet,
    _utf8_name,
)
from pdprobe.collectors.request_ids import all_ascii
from pdprobe.collectors.request_jsonl import SkippedLines, read_jsonl
from pdprobe.collectors.request_skipped import MalformedRows
from pdprobe.collectors.request_stream import Fallback, stream_delimited, stream_jsonl
from pdprobe.dataset import (
    ROLE_FROM_LABEL,
    Partial,
    RoleHint,
    SourceInfo,
)
from pdprobe.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

    from pdprobe.signals import Role


def _load(path: Path, want_hash_ids: bool = False) -> _Loaded:
    sniffed = sniff(path)
    if sniffed.kind == "empty":
        raise InputError(f"{path}: the file is empty", hint="copy it again")
    fmt = sniffed.format
    if sniffed.kind == "unknown":
        fmt = _delimited_by_header(path) or ""
    elif sniffed.kind != "requests":
        fmt = ""
    if not fmt:
        raise InputError(f"{path}: not a per-request file ({sniffed.why})",
                         hint="request records are JSON Lines, CSV/TSV or Parquet")
    assembled, cmap, repaired, warnings, skipped = _read_records(
        path, fmt, sniffed.compression, want_hash_ids)
    if repaired.invalid_utf8:
        warnings.append(f"{path}: {repaired.invalid_utf8} text value(s) are not valid UTF-8; "
                        "the bad bytes were replaced (U+FFFD)")
    label = cmap.layout if cmap.layout != RECORDS else fmt
    _release_unused()  # the batches' memory, before the row checks' temporaries
    loaded = _canonicalise(path, assembled, cmap, label, skipped, want_hash_ids)
    del assembled
    _release_unused()
    loaded.warnings[:0] = warnings
    if sniffed.compression:
        loaded.notes.insert(0, f"{sniffed.compression}-compressed {fmt}")
    if repaired.parser == "duckdb":  # it reads some lines pyarrow skips: say which one ran
        loaded.notes.insert(0, DUCKDB_NOTE)
    return loaded


# The note of a file whose rows DuckDB parsed (collectors/request_duckdb.py).
DUCKDB_NOTE: Final = ("parsed by DuckDB (a line with a number written as a string is read, not "
                      "skipped; PDPROBE_REQUEST_ENGINE=pyarrow reads with pyarrow)")

# What the canonical frame needs and the reading loop does not: imported in a thread while the
# batches of a text file are assembled (pyarrow's parsers run in threads of their own), not
# after them. (A Parquet read holds imports during its loop instead: ``_read_records``.)
CANONICAL_MODULES: Final = ("pandas",)


def _read_records(path: Path, fmt: str, compression: str | None, want_hash_ids: bool
                  ) -> tuple[Assembled, ColumnMap, _Repaired, list[str], int]:
    """A request file's records read and assembled (``request_assemble``), with the batches'
    UTF-8 repairs, the reader's warnings and how many rows it skipped."""
    skipped = 0
    warnings: list[str] = []
    if fmt == "parquet":
        # The loop holds the GIL between its many short calls: modules imported in a thread
        # meanwhile (the analysis modules, ``services.diagnose``) wait until it ends and are
        # imported beside the row checks (whole-column numpy work) instead; pandas is left to
        # that thread or to ``_canonicalise``, which imports it where it builds the frame.
        # (At 10M rows the read with the imports beside its loop took 1.81-2.01 s, no less than
        # the imports and then the read: 0.39 + 1.35 s; the cores idled while they took turns.)
        try:  # (a footer that fails to read welcomes the imports too)
            batches, cmap = _read_parquet(path, compression, want_hash_ids)
            repaired = _Repaired(batches.batches)
            # many ids (released once checked): hashed as they are read instead of held
            many = batches.rows is not None and \
                batches.rows > request_canonical.KEEP_REQUEST_IDS_MAX_ROWS
            with imports_held():
                assembled = assemble(repaired, batches.schema, cmap, batches.rows,
                                     want_hash_ids,
                                     ids_again=_repaired_ids(batches.ids_again) if many else None,
                                     prefault=True, bounds=batches.bounds)  # the footer's row count: every row is written
        finally:
            imports_welcome()  # the row checks next are whole-column numpy work
    else:
        data = _content(path, compression)
        if _is_blank(data):
            raise InputError(f"{path}: the file is empty", hint="copy it again")
        delimiter = "\t" if fmt == "tsv" else ","
        try:  # streamed: memory holds one block of text at a time
            with _stream_source(path, compression, data) as source:
                lines: SkippedLines | MalformedRows  # broken lines/rows, piece by piece
                if fmt == "jsonl":
                    lines = SkippedLines(path)
                    batches, cmap = stream_jsonl(path, source, data, want_hash_ids, lines)
                else:
                    lines = MalformedRows(path)
                    batches, cmap = stream_delimited(path, source, data, delimiter,
                                                     want_hash_ids, lines)
                repaired = _Repaired(batches.batches, batches.parser)
                with imported_meanwhile(*CANONICAL_MODULES):
                    assembled = assemble(repaired, batches.schema, cmap, batches.reserve,
                                         want_hash_ids)
                warnings, skipped = lines.outcome()
        except Fallback:  # a broken line or an odd value: read whole, every case worded
            if fmt == "jsonl":
                table, cmap, warnings, skipped = read_jsonl(path, data, want_hash_ids)
            else:
                table, cmap, warnings, skipped = _read_delimited(path, data, delimiter,
                                                                 want_hash_ids)
            batches = Batches.of_table(table)
            del table
            repaired = _Repaired(batches.batches)
            assembled = assemble(repaired, batches.schema, cmap, batches.rows, want_hash_ids)
    return assembled, cmap, repaired, warnings, skipped


def _release_unused() -> None:
    """Hand the memory pyarrow's allocator keeps for reuse (the decoded batches and pieces,
    the ids once checked) back to the system: the analyses allocate with numpy."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _repaired_ids(again: Callable[[], Iterable[Any]] | None
                  ) -> Callable[[], Iterator[Any]] | None:
    """The id column read again (``Batches.ids_again``) with invalid UTF-8 repaired as the
    first read repaired it."""
    if again is None:
        return None
    read_again = again

    def ids() -> Iterator[Any]:
        import pyarrow as pa

        for chunk in read_again():
            table, _ = _repair_utf8(pa.table({"id": chunk}))
            yield from table.column(0).chunks
    return ids


class _Repaired:
    """The batches with invalid UTF-8 repaired (``_repair_utf8``), counting the bad values."""

    def __init__(self, batches: Iterable[Any], parser: str = "pyarrow") -> None:
        self.batches = batches
        self.invalid_utf8 = 0
        self.parser = parser  # ``Batches.parser``

    def __iter__(self) -> Iterator[Any]:
        import pyarrow as pa

        for batch in self.batches:
            if _valid_utf8(batch):  # the usual case: nothing to repair, no table built
                yield batch
                continue
            table, bad = _repair_utf8(pa.Table.from_batches([batch]))
            if bad:
                self.invalid_utf8 += bad
                yield from table.combine_chunks().to_batches()
            else:
                yield batch


def _valid_utf8(batch: Any) -> bool:
    """Whether every text column of ``batch`` is valid UTF-8: a dictionary column's dictionary
    (its values; the decoders check the indices), a column of ASCII bytes by one ``max``,
    any other by Arrow's full validation."""
    import pyarrow as pa

    for column in batch.columns:
        arr = column.dictionary if pa.types.is_dictionary(column.type) else column
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            continue
        if all_ascii(arr):
            continue
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            return False
    return True


def _repair_utf8(table: pa.Table) -> tuple[pa.Table, int]:
    """String columns with invalid UTF-8 (the JSON reader and the CSV reader with
    ``check_utf8=False`` pass the bytes through) re-decoded with U+FFFD for the bad bytes;
    how many values needed it. Valid columns cost one validation pass."""
    import pyarrow as pa

    bad_total = 0
    for i, fld in enumerate(table.schema):
        t = fld.type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            continue
        col = table.column(i)
        try:
            col.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        if pa.types.is_dictionary(col.type):
            col = col.cast(t)
        raw = col.cast(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())
        values = raw.to_pylist()  # error path only: a file with broken text
        fixed: list[str | None] = []
        bad = 0
        for v in values:
            if v is None:
                fixed.append(None)
                continue
            try:
                fixed.append(v.decode("utf-8"))
            except UnicodeDecodeError:
                fixed.append(v.decode("utf-8", errors="replace"))
                bad += 1
        bad_total += bad
        table = table.set_column(i, fld.name, pa.array(fixed, t))
    return table, bad_total


def _content(path: Path, compression: str | None) -> bytes | memoryview:
    """The decompressed bytes; an uncompressed file is memory-mapped instead of copied."""
    if compression is not None or not _utf8_name(path):
        return read_all_bytes(path)  # pyarrow cannot open a name that is not UTF-8
    import pyarrow as pa

    try:
        return memoryview(pa.memory_map(str(path)).read_buffer())
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot read ({_first_line(exc)})",
                         hint="check the path and permissions") from exc



@contextmanager
def _stream_source(path: Path, compression: str | None, data: bytes | memoryview
                   ) -> Iterator[Any]:
    """What a streamed read reads: the file itself, read block by block (not memory-mapped,
    so the file's pages do not count in the process's memory), or the decompressed bytes."""
    import pyarrow as pa

    if compression is not None or not _utf8_name(path):
        yield pa.BufferReader(data)
        return
    try:
        source = pa.OSFile(str(path))
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot read ({_first_line(exc)})",
                         hint="check the path and permissions") from exc
    try:
        yield source
    finally:
        source.close()


def _is_blank(data: bytes | memoryview) -> bool:
    if bytes(data[:SNIFF_HEADER_BYTES]).strip():
        return False
    arr = np.frombuffer(data, dtype=np.uint8)
    return not np.isin(arr, np.frombuffer(b" \t\r\n\x0b\x0c", dtype=np.uint8), invert=True).any()


def required_columns_named(line: str, delimiter: str) -> int:
    """How many of the three required columns a CSV/TSV header line names (aliases too)."""
    if delimiter not in line:
        return 0
    cmap = map_columns(_header(line.encode("utf-8", errors="replace"), delimiter))
    return sum(c in cmap.sources for c in ("arrival_ts", "prompt_tokens", "output_tokens"))


def is_request_header(line: str, delimiter: str) -> bool:
    """Whether ``line`` is a CSV/TSV header naming the three required columns (aliases too).

    A header such as ``id,arrival_time,input_tokens,output_length`` holds request records
    even though it has none of the canonical names.
    """
    return required_columns_named(line, delimiter) == 3


def _delimited_by_header(path: Path) -> str | None:
    """"csv"/"tsv" when the first line is a request-record header."""
    with open_binary(path) as fh:
        first = fh.readline(SNIFF_HEADER_BYTES).decode("utf-8", errors="replace")
    for fmt, delimiter in (("csv", ","), ("tsv", "\t")):
        if is_request_header(first, delimiter):
            return fmt
    return None


def read_requests(path: Path, ctx: ReadContext) -> Partial:
    """Read one per-request file into a ``Partial`` with the canonical request table."""
    ctx.report(f"reading {path.name}", 0.0)
    return _as_partial(path, _load(path))


# --- hooks for collectors/requests_dataset*.py (partitioned datasets read as one input) ----
require_columns = _require


def partial_from_table(path: Path, table: pa.Table | Assembled, cmap: ColumnMap,
                       fmt: str) -> Partial:
    """A ``Partial`` from request records already read into one Arrow table, or assembled
    from batches (``request_assemble.assemble``; the columns ``cmap`` maps), with the same
    checks, notes and canonical table as ``read_requests``."""
    loaded = _canonicalise(path, table, cmap, fmt, 0, False)
    return _as_partial(path, loaded)


def _as_partial(path: Path, loaded: _Loaded) -> Partial:
    hints: list[RoleHint] = []
    roles: tuple[tuple[str, Role], ...] = (("prefill_instance", "prefill"),
                                           ("decode_instance", "decode"))
    for column, role in roles:
        if column in loaded.request_columns:
            names = distinct_in_order(loaded.frame[column])
            hints.extend(RoleHint(instance=str(name), role=role, strength=ROLE_FROM_LABEL,
                                  how=f"{column} column in {path.name}", source=str(path))
                         for name in names)  # one per distinct instance, not per row
    source = SourceInfo(path=str(path), kind="requests", format=loaded.format, rows=loaded.rows,
                        skipped=loaded.skipped, notes=tuple(loaded.notes))
    return Partial(source=source, requests=loaded.frame, request_columns=loaded.request_columns,
                   role_hints=tuple(hints), warnings=tuple(loaded.warnings))


def load_hash_ids(path: Path) -> pa.ListArray | None:
    """Mooncake ``hash_ids`` (prefix-block ids) aligned row for row with ``read_requests``.

    The same rows are dropped and the same sort applied, so element ``i`` belongs to row ``i``
    of ``read_requests(path, ctx).requests``. None when the file has no ``hash_ids`` column.
    """
    loaded = _load(path, want_hash_ids=True)
    return loaded.hash_ids
