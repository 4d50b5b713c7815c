"""The request-record file formats read into Arrow tables: Parquet, CSV/TSV, JSON Lines.

Only the columns ``request_columns.map_columns`` maps are read; instance and status columns
come as dictionaries. Broken JSON lines and malformed CSV rows are skipped with a warning;
only an unusable file raises ``InputError``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.io import read_all_bytes
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


# Lines parsed with the json module to learn the keys and value types of a JSON Lines file.
JSON_SAMPLE_LINES: Final = 200
# pyarrow.csv block size: types are inferred from the first block, so a bad value further down
# triggers the text fallback in _read_delimited.
CSV_BLOCK_BYTES: Final = 8 << 20
# pyarrow.json block size: large blocks parse faster; a single line must fit in one block.
JSON_BLOCK_BYTES: Final = 4 << 20

# A header line longer than this is not a request-record header.
SNIFF_HEADER_BYTES: Final = 64 * 1024
# JSON keys and types are learned from lines within this many leading bytes; further (up to
# JSON_SAMPLE_MAX_BYTES) when that does not hold JSON_SAMPLE_MIN_LINES whole lines.
JSON_SAMPLE_BYTES: Final = 8 << 20
JSON_SAMPLE_MIN_LINES: Final = 20
JSON_SAMPLE_MAX_BYTES: Final = 256 << 20


def _read_parquet(path: Path, compression: str | None, want_hash_ids: bool
                  ) -> tuple[pa.Table, ColumnMap]:
    import pyarrow as pa
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
        if as_dictionary:  # an option of the file object: opened again (the footer only)
            pf = pq.ParquetFile(source, read_dictionary=as_dictionary)
        table = pf.read(columns=wanted)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({_first_line(exc)})",
                         hint="check that the file was written completely") from exc
    return table, cmap


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _header(data: bytes | memoryview, delimiter: str) -> list[str]:
    head = bytes(data[:SNIFF_HEADER_BYTES])
    ends = [i for i in (head.find(b"\n"), head.find(b"\r")) if i >= 0]  # bare CR ends a line too
    line = head[: min(ends) if ends else len(head)].decode("utf-8", errors="replace")
    row = next(csv.reader([line], delimiter=delimiter), [])
    return [c.strip().lstrip("\ufeff") for c in row]


def _read_delimited(path: Path, data: bytes | memoryview, delimiter: str, want_hash_ids: bool
                    ) -> tuple[pa.Table, ColumnMap, list[str], int]:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    names = _header(data, delimiter)
    if not [n for n in names if n]:
        raise InputError(f"{path}: the first line is not a header",
                         hint="add a header line naming the columns")
    cmap = map_columns(names)
    _require(path, cmap, names)
    wanted = list(dict.fromkeys(cmap.sources.values()))
    if want_hash_ids and cmap.hash_ids:
        wanted.append(cmap.hash_ids)
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


def _without_unraisable(read: Callable[[], pa.Table]) -> tuple[pa.Table | None, bool]:
    """Run ``read`` with "Exception ignored" reports of ``UnicodeDecodeError`` (pyarrow's CSV
    reader decoding a malformed row for the invalid-row handler) caught instead of printed.

    Returns the table (None when the read failed after such a report) and whether one came.
    """
    import sys

    import pyarrow as pa

    caught: list[BaseException] = []
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, UnicodeDecodeError):
            caught.append(unraisable.exc_value)
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        try:
            return read(), bool(caught)
        except pa.ArrowInvalid:
            if caught:
                return None, True
            raise
    finally:
        sys.unraisablehook = previous


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


def _sample_end(content: bytes | memoryview) -> int:
    """Where the key/type sample ends: ``JSON_SAMPLE_BYTES``, or further when the first lines
    are longer (a 50 MB first line is a record too), up to the end of ``JSON_SAMPLE_MIN_LINES``
    lines or ``JSON_SAMPLE_MAX_BYTES``."""
    size = len(content)
    if size <= JSON_SAMPLE_BYTES:
        return size
    buf = np.frombuffer(content, dtype=np.uint8)
    if np.count_nonzero(buf[:JSON_SAMPLE_BYTES] == 0x0A) >= JSON_SAMPLE_MIN_LINES:
        return JSON_SAMPLE_BYTES
    seen, pos = 0, 0
    while pos < min(size, JSON_SAMPLE_MAX_BYTES):
        nl = np.flatnonzero(buf[pos:pos + JSON_SAMPLE_BYTES] == 0x0A)
        if seen + nl.size >= JSON_SAMPLE_MIN_LINES:
            return pos + int(nl[JSON_SAMPLE_MIN_LINES - seen - 1]) + 1
        seen += nl.size
        pos += JSON_SAMPLE_BYTES
    return min(size, JSON_SAMPLE_MAX_BYTES)


def _json_sample(content: bytes | memoryview) -> list[dict[str, Any]]:
    data = bytes(content[:_sample_end(content)])
    rows: list[dict[str, Any]] = []
    pos = 0
    tried = 0
    while len(rows) < JSON_SAMPLE_LINES and pos < len(data) and tried < 10 * JSON_SAMPLE_LINES:
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        line = data[pos:end].strip()
        pos = end + 1
        if not line:
            continue
        tried += 1
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested too deep
            continue
        if isinstance(obj, dict):
            rows.append(obj)
    return rows


def _json_type(canonical: str | None, values: list[Any]) -> pa.DataType:
    import pyarrow as pa

    seen = [v for v in values if v is not None]
    first = seen[0] if seen else None
    if canonical == "hash_ids":
        inner = next((x for v in seen if isinstance(v, list) for x in v), 0)
        return pa.list_(pa.string() if isinstance(inner, str) else pa.int64())
    if isinstance(first, bool):
        return pa.bool_()
    if isinstance(first, str):
        return pa.string()
    if isinstance(first, int) and canonical in STRING_COLUMNS:
        return pa.int64()  # ids as numbers; turned into text afterwards
    if isinstance(first, (int, float)):
        return pa.float64()
    if first is None:
        return pa.string() if canonical in STRING_COLUMNS else pa.float64()
    return pa.string()


def _read_jsonl(path: Path, data: bytes | memoryview, want_hash_ids: bool
                ) -> tuple[pa.Table, ColumnMap, list[str], int]:
    import pyarrow as pa

    sample = _json_sample(data)
    if not sample:
        raise InputError(f"{path}: no JSON object found in the first lines",
                         hint="JSON Lines input needs one {...} object per line")
    keys = list(dict.fromkeys(k for row in sample for k in row))
    cmap = map_columns(keys)
    _require(path, cmap, keys)
    fields = []
    for canonical, name in cmap.sources.items():
        fields.append(pa.field(name, _json_type(canonical, [r.get(name) for r in sample])))
    if want_hash_ids and cmap.hash_ids:
        fields.append(pa.field(cmap.hash_ids,
                               _json_type("hash_ids", [r.get(cmap.hash_ids) for r in sample])))
    schema = pa.schema(list({f.name: f for f in fields}.values()))
    try:
        return _parse_json(data, schema), cmap, [], 0
    except pa.ArrowInvalid:
        pass
    table, bad = _parse_json_skipping(data, schema)
    if table.num_rows == 0:
        raise InputError(f"{path}: none of its {bad.size} line(s) is a JSON object with usable "
                         f"values (first bad line {int(bad[0]) if bad.size else 1})",
                         hint="check the export; JSON Lines needs one {...} object per line")
    warnings = []
    if bad.size:
        shown = ", ".join(str(int(n)) for n in bad[:QUOTE_FIRST])
        more = ", ..." if bad.size > QUOTE_FIRST else ""
        warnings.append(f"{path}: skipped {bad.size} line(s) that are not valid JSON objects or "
                        f"carry values of the wrong type (line {shown}{more})")
    return table, cmap, warnings, int(bad.size)


def _parse_json(data: bytes | memoryview, schema: pa.Schema, block: int = JSON_BLOCK_BYTES
                ) -> pa.Table:
    import pyarrow as pa
    import pyarrow.json as pjson

    return pjson.read_json(
        pa.BufferReader(data),
        read_options=pjson.ReadOptions(block_size=max(1 << 20, min(block, len(data) + 1))),
        parse_options=pjson.ParseOptions(explicit_schema=schema,
                                         unexpected_field_behavior="ignore"),
    )


def _parse_json_skipping(data: bytes | memoryview, schema: pa.Schema) -> tuple[pa.Table, np.ndarray]:
    """Parse what can be parsed; return the table and the 1-based numbers of bad lines.

    Lines that cannot be a JSON object (not starting with ``{`` or not ending with ``}``) are
    found with one vectorised pass; the rest are parsed in blocks, and a block that fails is
    bisected until the offending lines are isolated (about log2(n) re-parses per bad line).
    """
    import pyarrow as pa

    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 0x0A)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [buf.size]))
    if starts[-1] >= buf.size:  # file ends with a newline: no last line
        starts, ends = starts[:-1], ends[:-1]
    line_ends = ends  # index of each line's newline (or the end of the data)
    # Drop a trailing CR (CRLF files).
    ends = ends - ((ends > starts) & (buf[np.maximum(ends - 1, 0)] == 0x0D))
    length = ends - starts
    blank = length == 0
    first = buf[np.minimum(starts, buf.size - 1)]
    last = buf[np.maximum(ends - 1, 0)]
    space = (0x20, 0x09)
    # Leading/trailing blanks are legal JSON: such lines go to the parser instead of being judged.
    shaped = ((first == 0x7B) | np.isin(first, space)) & ((last == 0x7D) | np.isin(last, space))
    bad = ~blank & ~shaped
    keep = np.flatnonzero(~blank & shaped)
    # One contiguous buffer of the candidate lines, joined between removed lines.
    removed = np.flatnonzero(blank | bad)
    if removed.size:
        pieces, pos = [], 0
        for i in removed:  # removed lines only: usually a handful
            pieces.append(data[pos:starts[i]])
            pos = int(line_ends[i]) + 1
        pieces.append(data[pos:])
        compact: bytes | memoryview = b"".join(pieces)
    else:
        compact = data
    cbuf = np.frombuffer(compact, dtype=np.uint8)
    cnl = np.flatnonzero(cbuf == 0x0A)
    cstarts = np.concatenate(([0], cnl + 1))[: keep.size]
    cends = np.concatenate((cnl, [cbuf.size]))[: keep.size]
    # Every line must fit in one block of pyarrow's reader.
    block = max(JSON_BLOCK_BYTES, int((cends - cstarts).max()) + 2) if keep.size else 0

    tables: list[pa.Table] = []
    bad_lines: list[int] = []
    stack = [(0, int(keep.size))] if keep.size else []
    while stack:
        lo, hi = stack.pop()
        chunk = compact[cstarts[lo]: cends[hi - 1]]
        try:
            tables.append(_parse_json(chunk, schema, block))
        except pa.ArrowInvalid:
            if hi - lo == 1:
                bad_lines.append(int(keep[lo]))
            else:
                mid = (lo + hi) // 2
                stack.extend([(mid, hi), (lo, mid)])  # left half first: keeps file order
    all_bad = np.sort(np.concatenate((np.flatnonzero(bad), np.asarray(bad_lines, dtype=np.int64))))
    table = (pa.concat_tables(tables) if tables
             else schema.empty_table())
    return table, all_bad + 1



def _utf8_name(path: Path) -> bool:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
