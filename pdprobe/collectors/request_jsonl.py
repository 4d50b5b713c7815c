"""Request records from JSON Lines: keys and types learned from a sample, then pyarrow's reader.

The key/type sample is the first ``JSON_SAMPLE_LINES`` objects; the whole file is then parsed
with that schema in large blocks. Broken lines are isolated by bisecting the blocks that fail
and skipped with one warning. ``pdprobe.collectors.request_formats`` reads the other formats.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.request_columns import STRING_COLUMNS, ColumnMap, _require, map_columns
from pdprobe.collectors.request_values import QUOTE_FIRST
from pdprobe.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

# Lines parsed with the json module to learn the keys and value types of a JSON Lines file.
JSON_SAMPLE_LINES: Final = 200
# pyarrow.json block size: large blocks parse faster; a single line must fit in one block.
JSON_BLOCK_BYTES: Final = 4 << 20
# JSON keys and types are learned from lines within this many leading bytes; further (up to
# JSON_SAMPLE_MAX_BYTES) when that does not hold JSON_SAMPLE_MIN_LINES whole lines.
JSON_SAMPLE_BYTES: Final = 8 << 20
JSON_SAMPLE_MIN_LINES: Final = 20
JSON_SAMPLE_MAX_BYTES: Final = 256 << 20


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


def _schema(path: Path, data: bytes | memoryview, want_hash_ids: bool
            ) -> tuple[pa.Schema, ColumnMap]:
    """The explicit schema of the mapped keys, learned from the first lines."""
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
    return pa.schema(list({f.name: f for f in fields}.values())), cmap


def read_jsonl(path: Path, data: bytes | memoryview, want_hash_ids: bool
               ) -> tuple[pa.Table, ColumnMap, list[str], int]:
    """Read request records from JSON Lines ``data`` whole: the table, its column map,
    warnings and the number of lines skipped (broken lines found by bisection)."""
    import pyarrow as pa

    schema, cmap = _schema(path, data, want_hash_ids)
    try:
        return _parse_json(data, schema), cmap, [], 0
    except pa.ArrowInvalid:
        pass
    table, bad = parse_skipping(data, schema)
    if table.num_rows == 0:
        raise _none_usable(path, bad)
    return table, cmap, _skipped_warnings(path, bad), int(bad.size)


def _none_usable(path: Path, bad: np.ndarray) -> InputError:
    return InputError(f"{path}: none of its {bad.size} line(s) is a JSON object with usable "
                      f"values (first bad line {int(bad[0]) if bad.size else 1})",
                      hint="check the export; JSON Lines needs one {...} object per line")


def _skipped_warnings(path: Path, bad: np.ndarray) -> list[str]:
    if not bad.size:
        return []
    shown = ", ".join(str(int(n)) for n in bad[:QUOTE_FIRST])
    more = ", ..." if bad.size > QUOTE_FIRST else ""
    return [f"{path}: skipped {bad.size} line(s) that are not valid JSON objects or carry "
            f"values of the wrong type (line {shown}{more})"]


class SkippedLines:
    """The broken lines of a JSON Lines file read in pieces (``request_stream``), numbered in
    the file: each piece pyarrow refuses is parsed line by line as ``read_jsonl`` parses the
    whole file (``parse_skipping``), so the warning, the count and the error when no line is
    usable are ``read_jsonl``'s, while memory holds one piece and the rest is parsed once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: list[np.ndarray] = []

    def add(self, lines: np.ndarray) -> None:
        """Bad lines of one piece (1-based, in the file), pieces in file order."""
        self._lines.append(lines)

    @property
    def lines(self) -> np.ndarray:
        return (np.concatenate(self._lines) if self._lines
                else np.zeros(0, dtype=np.int64))

    def check_rows(self, rows: int) -> None:
        """At the end of the file: ``read_jsonl``'s ``InputError`` when no line was usable."""
        if self._lines and rows == 0:  # some piece was parsed line by line
            raise _none_usable(self.path, self.lines)

    def outcome(self) -> tuple[list[str], int]:
        """The warnings and the number of lines skipped, as ``read_jsonl`` returns them."""
        bad = self.lines
        return _skipped_warnings(self.path, bad), int(bad.size)


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


def parse_skipping(data: bytes | memoryview, schema: pa.Schema) -> tuple[pa.Table, np.ndarray]:
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
