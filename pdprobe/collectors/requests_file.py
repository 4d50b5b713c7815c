"""Read per-request records (JSON Lines, CSV/TSV, Parquet; gzip/zstd too) into the canonical table.

Three layouts are recognised from the column names (see docs/inputs/requests.md):

- the canonical columns of docs/contract.md, with a small alias table (``input_tokens`` -> ``prompt_tokens``,
  ``ttft_ms`` -> ``ttft_s`` / 1000, ...);
- Azure LLM inference traces: ``TIMESTAMP, ContextTokens, GeneratedTokens`` (wall clock, UTC);
- Mooncake traces: ``timestamp`` (ms from the trace start), ``input_length``, ``output_length``,
  ``hash_ids``.

Everything is columnar (pyarrow, numpy): no Python loop runs over rows. Broken JSON lines and
malformed CSV rows are skipped with a warning; only an unusable file raises ``InputError``.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.io import open_binary, read_all_bytes, sniff
from pdprobe.collectors.validate import (
    MAX_DURATION_S,
    MAX_KV_BYTES,
    MAX_KV_BYTES_PER_TOKEN,
    MAX_TOKENS,
    check_times,
    implausible,
)
from pdprobe.dataset import (
    REQUEST_COLUMNS,
    ROLE_FROM_LABEL,
    Partial,
    RoleHint,
    SourceInfo,
)
from pdprobe.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from pdprobe.signals import Role

# --- column aliases ---------------------------------------------------------------------------
# Names are compared after normalisation: lower case, spaces and hyphens turned into "_".
# The first name present wins, so the canonical name always beats an alias.
ALIASES: Final[Mapping[str, tuple[str, ...]]] = {
    "arrival_ts": ("arrival_ts", "arrival_time", "arrival", "arrived_at", "timestamp", "ts",
                   "time", "start_ts", "start_time", "created_at", "request_time"),
    "prompt_tokens": ("prompt_tokens", "input_tokens", "input_length", "contexttokens",
                      "context_tokens", "prompt_len", "prompt_length", "input_len",
                      "num_prefill_tokens", "request_tokens", "isl"),
    "output_tokens": ("output_tokens", "output_length", "generatedtokens", "generated_tokens",
                      "completion_tokens", "output_len", "num_decode_tokens", "response_tokens",
                      "osl"),
    "request_id": ("request_id", "req_id", "requestid", "id"),
    "cached_tokens": ("cached_tokens", "cached_prompt_tokens", "prefix_hit_tokens",
                      "cache_hit_tokens", "num_cached_tokens"),
    "prefill_instance": ("prefill_instance", "prefill_worker", "prefill_host", "prefill_node"),
    "decode_instance": ("decode_instance", "decode_worker", "decode_host", "decode_node"),
    "kv_bytes": ("kv_bytes", "kv_transfer_bytes", "kv_size_bytes"),
    "status": ("status", "finish_status", "outcome", "result", "finish_reason"),
}
# Timing columns: base names, each accepted with a unit suffix (``ttft_ms``) or bare (seconds).
TIMING_BASES: Final[Mapping[str, tuple[str, ...]]] = {
    "queue_s": ("queue", "queue_time", "queue_delay", "waiting_time"),
    "prefill_s": ("prefill", "prefill_time", "prefill_latency"),
    "kv_transfer_s": ("kv_transfer", "kv_transfer_time", "kv_transfer_latency", "transfer_time"),
    "ttft_s": ("ttft", "time_to_first_token"),
    "tpot_s": ("tpot", "time_per_output_token", "mean_itl"),
    "e2e_s": ("e2e", "e2e_latency", "e2el", "latency", "request_latency"),
}
# A bare base name (no unit suffix) is read as seconds only when it plainly names a duration:
# a column called "prefill" or "queue" may just as well hold an instance name or a flag.
TIMING_BARE_OK: Final = frozenset({"ttft", "tpot", "time_to_first_token", "time_per_output_token",
                                   "mean_itl", "e2el", "e2e_latency", "latency",
                                   "request_latency", "queue_time", "queue_delay", "waiting_time",
                                   "prefill_time", "prefill_latency", "kv_transfer_time",
                                   "kv_transfer_latency", "transfer_time"})
# Suffix -> factor to seconds. Checked in this order so "_ms" is not read as "_s".
TIME_SUFFIXES: Final = (("_ms", 1e-3), ("_us", 1e-6), ("_ns", 1e-9), ("_seconds", 1.0),
                        ("_sec", 1.0), ("_s", 1.0), ("", 1.0))
# An arrival column named with one of these suffixes says its own unit.
ARRIVAL_UNIT_SUFFIXES: Final = (("_ms", 1e-3), ("_us", 1e-6), ("_ns", 1e-9))

NUMERIC_COLUMNS: Final = ("prompt_tokens", "output_tokens", "cached_tokens", "kv_bytes",
                          *TIMING_BASES)
STRING_COLUMNS: Final = ("request_id", "prefill_instance", "decode_instance", "status")
LOW_CARDINALITY: Final = frozenset({"prefill_instance", "decode_instance", "status"})

# Epoch timestamps are told apart by magnitude: 1e11 s is the year 5138, while 1e11 ms is 1973,
# so a median above these bounds means ms, µs or ns (checked from the largest down).
EPOCH_UNIT_BOUNDS: Final = ((1e17, 1e-9, "nanoseconds"), (1e14, 1e-6, "microseconds"),
                            (1e11, 1e-3, "milliseconds"))
MAGNITUDE_SAMPLE: Final = 100_000
# Arrival times below this (2001-09-09 as Unix seconds) are offsets from a trace start, not
# wall-clock time: real captures are recent, and relative traces count from 0.
RELATIVE_BELOW_TS: Final = 1e9

# Status values -> canonical status (compared lower case, stripped). See docs/inputs/requests.md.
STATUS_MAP: Final[Mapping[str, str]] = {
    **dict.fromkeys(("ok", "success", "succeeded", "successful", "completed", "complete",
                     "finished", "done", "stop", "length", "eos", "true"), "ok"),
    **dict.fromkeys(("error", "failed", "failure", "fail", "exception", "internal", "false",
                     "rejected", "overload", "unavailable"), "error"),
    **dict.fromkeys(("timeout", "timed_out", "timedout", "time_out", "deadline_exceeded",
                     "response_timeout"), "timeout"),
    **dict.fromkeys(("aborted", "abort", "cancelled", "canceled", "cancel",
                     "client_disconnected", "disconnected"), "aborted"),
}
# HTTP status codes: 408 Request Timeout and 504 Gateway Timeout are timeouts; 499 (nginx:
# client closed the request) is an abort; other 4xx/5xx are errors; 2xx is ok.
HTTP_TIMEOUT_CODES: Final = frozenset({408, 504})
HTTP_ABORT_CODES: Final = frozenset({499})

# How many line/row numbers a warning quotes; more would drown the message.
QUOTE_FIRST: Final = 5
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

# Layout names (also SourceInfo.format for the public traces).
AZURE: Final = "azure-trace"
MOONCAKE: Final = "mooncake-trace"
RECORDS: Final = "records"


@dataclass(frozen=True)
class ColumnMap:
    """Which source column feeds which canonical column, and at what scale."""

    sources: Mapping[str, str]  # canonical -> original column name
    scales: Mapping[str, float]  # canonical timing/arrival column -> factor to seconds
    layout: str
    ignored: tuple[str, ...]
    hash_ids: str | None = None  # original name of a Mooncake hash_ids column


@dataclass
class _Loaded:
    frame: pd.DataFrame
    request_columns: frozenset[str]
    format: str
    rows: int
    skipped: int
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hash_ids: pa.ListArray | None = None


def _normalise(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip().lstrip("\ufeff").strip().lower())


def _timing_names(canonical: str) -> list[tuple[str, float]]:
    names = [(canonical, 1.0)]
    for base in TIMING_BASES[canonical]:
        names.extend((base + suffix, factor) for suffix, factor in TIME_SUFFIXES
                     if suffix or base in TIMING_BARE_OK)
    return names


def map_columns(names: Sequence[str]) -> ColumnMap:
    """Decide the layout and the canonical meaning of each source column."""
    by_norm: dict[str, str] = {}
    for name in names:
        by_norm.setdefault(_normalise(name), name)
    sources: dict[str, str] = {}
    scales: dict[str, float] = {}
    norms = set(by_norm)
    if {"timestamp", "contexttokens", "generatedtokens"} <= norms:
        layout = AZURE
    elif {"timestamp", "input_length", "output_length"} <= norms and "arrival_ts" not in norms:
        layout = MOONCAKE
    else:
        layout = RECORDS
    for canonical, aliases in ALIASES.items():
        for alias in aliases:
            if alias in by_norm:
                sources[canonical] = by_norm[alias]
                break
    if "arrival_ts" not in sources:
        for alias in ALIASES["arrival_ts"]:
            hit = next(((alias + sfx, f) for sfx, f in ARRIVAL_UNIT_SUFFIXES
                        if alias + sfx in by_norm), None)
            if hit:
                sources["arrival_ts"] = by_norm[hit[0]]
                scales["arrival_ts"] = hit[1]
                break
    elif layout == MOONCAKE:
        scales["arrival_ts"] = 1e-3  # Mooncake timestamps are integer milliseconds
    for canonical in TIMING_BASES:
        for alias, factor in _timing_names(canonical):
            if alias in by_norm:
                sources[canonical] = by_norm[alias]
                scales[canonical] = factor
                break
    hash_ids = by_norm.get("hash_ids")
    used = set(sources.values()) | ({hash_ids} if hash_ids else set())
    ignored = tuple(n for n in names if n not in used)
    return ColumnMap(sources, scales, layout, ignored, hash_ids)


def _require(path: Path, cmap: ColumnMap, found: Sequence[str]) -> None:
    missing = [c for c in ("arrival_ts", "prompt_tokens", "output_tokens") if c not in cmap.sources]
    if not missing:
        return
    what = "; ".join(f"{c} (accepted: {', '.join(ALIASES[c][:6])}, ...)" for c in missing)
    shown = ", ".join(list(found)[:20]) or "none"
    raise InputError(
        f"{path}: no column for {what}; found columns: {shown}",
        hint="rename the columns or see docs/inputs/requests.md for the accepted names",
    )


# --- format readers ---------------------------------------------------------------------------


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


# --- conversion to canonical columns ----------------------------------------------------------


def _to_float(arr: pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """Numbers as float64 (NaN for null); also how many non-null values were not numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        # safe=False: int64 beyond 2**53 (epoch nanoseconds) rounds instead of failing
        return np.asarray(pc.cast(arr, pa.float64(), safe=False).to_numpy(zero_copy_only=False),
                          dtype=np.float64), 0
    if pa.types.is_null(t):
        return np.full(len(arr), np.nan), 0
    if pa.types.is_boolean(t) or pa.types.is_timestamp(t) or pa.types.is_nested(t):
        return np.full(len(arr), np.nan), len(arr) - arr.null_count
    text = arr if pa.types.is_string(t) or pa.types.is_large_string(t) else pc.cast(arr, pa.string())
    try:
        return np.asarray(pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False),
                          dtype=np.float64), 0
    except pa.ArrowInvalid:
        import pandas as pd

        series = pd.Series(text.to_numpy(zero_copy_only=False), dtype="object")
        values = pd.to_numeric(series.str.strip(), errors="coerce").to_numpy(dtype=np.float64)
        present = ~pd.isna(series).to_numpy() & (series.astype(str).str.strip() != "").to_numpy()
        return values, int(np.count_nonzero(present & np.isnan(values)))


def _arrival_seconds(arr: pa.ChunkedArray, cmap: ColumnMap, name: str
                     ) -> tuple[np.ndarray, list[str], int]:
    """Arrival times as float Unix (or relative) seconds, notes on assumptions, unparsed count."""
    import pyarrow as pa
    import pyarrow.compute as pc

    notes: list[str] = []
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = pc.cast(arr, t.value_type)
        t = arr.type
    if pa.types.is_date(t):
        arr = pc.cast(arr, pa.timestamp("s"))
        t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:
            values = np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False),
                                dtype=np.float64)
            return _numeric_arrival(values, cmap, name, notes)
        except pa.ArrowInvalid:
            pass
        values, not_numbers = _to_float(arr)
        if np.count_nonzero(np.isfinite(values)) > not_numbers:
            # numbers with some junk among them: the junk is unreadable, not a date format
            out, notes, _ = _numeric_arrival(values, cmap, name, notes)
            return out, notes, not_numbers
        parsed, unparsed, note = _parse_iso(arr)
        notes.append(f"{name} parsed as ISO 8601 date-times{note}")
        return parsed, notes, unparsed
    if pa.types.is_timestamp(t):
        factor = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[t.unit]
        ints = pc.cast(arr, pa.int64()).to_numpy(zero_copy_only=False)
        values = np.asarray(ints, dtype=np.float64) * factor
        if t.tz is None:
            notes.append(f"{name} has no time zone: assumed UTC")
        return values, notes, 0
    values, bad = _to_float(arr)
    values, notes2, _ = _numeric_arrival(values, cmap, name, notes)
    return values, notes2, bad


def _numeric_arrival(values: np.ndarray, cmap: ColumnMap, name: str, notes: list[str]
                     ) -> tuple[np.ndarray, list[str], int]:
    # A strided sample is plenty to tell seconds from milliseconds (and 20x cheaper at 10M rows).
    sample = values[:: max(1, values.size // MAGNITUDE_SAMPLE)]
    finite = sample[np.isfinite(sample)]
    scale = cmap.scales.get("arrival_ts")
    if scale is not None:
        unit = {1e-3: "milliseconds", 1e-6: "microseconds", 1e-9: "nanoseconds"}.get(scale)
        how = "Mooncake trace layout" if cmap.layout == MOONCAKE else "column name"
        if unit:
            notes.append(f"{name} read as {unit} ({how})")
    else:
        scale = 1.0
        if finite.size:
            median = float(np.median(np.abs(finite)))
            for bound, factor, unit in EPOCH_UNIT_BOUNDS:
                if median > bound:
                    scale = factor
                    notes.append(f"{name} read as epoch {unit} (detected by magnitude)")
                    break
    out = values * scale if scale != 1.0 else values
    if finite.size and float(np.nanmax(out)) < RELATIVE_BELOW_TS:
        notes.append(f"relative timestamps: {name} counts seconds from the trace start, "
                     "not wall-clock time")
    return out, notes, 0


def _parse_iso(arr: pa.ChunkedArray) -> tuple[np.ndarray, int, str]:
    import pyarrow as pa
    import pyarrow.compute as pc

    for tz, note in ((None, "; no time zone given: assumed UTC"), ("UTC", "")):
        try:
            ts = pc.cast(arr, pa.timestamp("ns", tz))
        except pa.ArrowInvalid:
            continue
        ints = pc.cast(ts, pa.int64()).to_numpy(zero_copy_only=False)
        return np.asarray(ints, dtype=np.float64) * 1e-9, 0, note
    # Mixed or unusual forms: pandas' ISO 8601 parser, value by value but vectorised in C.
    import pandas as pd

    series = pd.Series(arr.to_numpy(zero_copy_only=False), dtype="object")
    parsed = pd.to_datetime(series, format="ISO8601", utc=True, errors="coerce")
    values = np.full(len(series), np.nan)
    ok = parsed.notna().to_numpy()
    # microseconds: the range of nanoseconds ends in 1677 and 2262 ("-820" is a year too)
    values[ok] = parsed[ok].dt.as_unit("us").astype("int64").to_numpy() * 1e-6
    present = series.notna().to_numpy()
    return values, int(np.count_nonzero(present & ~ok)), "; values without a zone assumed UTC"


def _to_text(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    """Strings, trimmed, with empty strings as null (ids written as numbers become text)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(arr.type):
        # Clean the few distinct values, then expand: instance names repeat millions of times.
        combined = _as_dictionary(arr)
        values = _clean_text(combined.dictionary)
        return pa.chunked_array([pc.take(values, combined.indices)])
    return _clean_text(arr)


def _as_dictionary(arr: pa.ChunkedArray) -> pa.DictionaryArray:
    """One dictionary array (chunks read in parallel each carry their own dictionary)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(arr.type):
        return pc.dictionary_encode(arr).combine_chunks()
    return arr.combine_chunks()  # unifies the chunks' dictionaries


def _clean_text(arr: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_floating(t):
        # 17.0 -> "17": ids written as floats by a CSV round trip
        as_int = pc.cast(arr, pa.int64(), safe=False)
        if pc.all(pc.equal(pc.cast(as_int, pa.float64()), arr)).as_py() is not False:
            arr = as_int
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = pc.cast(arr, pa.string())
    trimmed = pc.utf8_trim_whitespace(arr)
    return pc.if_else(pc.equal(trimmed, ""), pa.scalar(None, pa.string()), trimmed)


def _status_column(arr: pa.ChunkedArray) -> tuple[pa.ChunkedArray, dict[str, int]]:
    """Status values mapped to ok/error/timeout/aborted; unknown values become null.

    The mapping runs over the distinct values only (a handful), then one ``take`` expands it.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = _as_dictionary(arr)
    dictionary = _clean_text(encoded.dictionary).to_pylist()
    mapped: list[str | None] = []
    unknown_idx: list[int] = []
    for i, value in enumerate(dictionary):
        status = _status_of(value)
        mapped.append(status)
        if status is None and value is not None:
            unknown_idx.append(i)
    result = pc.take(pa.array(mapped, pa.string()), encoded.indices)
    unknown: dict[str, int] = {}
    if unknown_idx:
        indices = encoded.indices
        valid = indices.is_valid().to_numpy(zero_copy_only=False)
        counts = np.bincount(indices.to_numpy(zero_copy_only=False)[valid].astype(np.int64),
                             minlength=len(dictionary))
        unknown = {str(dictionary[i]): int(counts[i]) for i in unknown_idx}
    return pa.chunked_array([result]), unknown


def _status_of(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip().lower()
    if v in STATUS_MAP:
        return STATUS_MAP[v]
    if v.isdigit() and len(v) == 3:
        code = int(v)
        if 200 <= code < 300:
            return "ok"
        if code in HTTP_TIMEOUT_CODES:
            return "timeout"
        if code in HTTP_ABORT_CODES:
            return "aborted"
        if 400 <= code < 600:
            return "error"
    return None


def _upper_bound(canonical: str) -> float:
    """The largest value of a canonical numeric column a real request can have."""
    if canonical.endswith("_tokens"):
        return MAX_TOKENS
    if canonical == "kv_bytes":
        return MAX_KV_BYTES
    return MAX_DURATION_S


def _rows_hint(mask: np.ndarray) -> str:
    rows = np.flatnonzero(mask)[:QUOTE_FIRST] + 1
    more = ", ..." if np.count_nonzero(mask) > QUOTE_FIRST else ""
    return f"data row {', '.join(str(int(r)) for r in rows)}{more}"


def _canonicalise(path: Path, table: pa.Table, cmap: ColumnMap, fmt: str, skipped: int,
                  want_hash_ids: bool) -> _Loaded:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    label = str(path)
    n = table.num_rows
    if n == 0:
        raise InputError(f"{path}: no data rows (only a header, or nothing but blank lines)",
                         hint="check that the export finished")
    warnings: list[str] = []
    notes: list[str] = []
    if cmap.layout == AZURE:
        notes.append("Azure LLM inference trace layout (TIMESTAMP, ContextTokens, GeneratedTokens)")
    elif cmap.layout == MOONCAKE:
        notes.append("Mooncake trace layout (timestamp in ms, input_length, output_length)")
    renamed = sorted(f"{src}->{can}" for can, src in cmap.sources.items() if src != can)
    if renamed and cmap.layout == RECORDS:
        notes.append("columns read by alias: " + ", ".join(renamed))
    if cmap.ignored:
        notes.append("ignored columns: " + ", ".join(cmap.ignored[:10])
                     + (", ..." if len(cmap.ignored) > 10 else ""))

    arrival_name = cmap.sources["arrival_ts"]
    arrival, arrival_notes, _ = _arrival_seconds(table.column(arrival_name), cmap, arrival_name)
    notes.extend(arrival_notes)
    valid = np.isfinite(arrival)
    no_arrival = ~valid
    if no_arrival.any():
        warnings.append(f"{label}: dropped {int(no_arrival.sum())} row(s) with a missing or "
                        f"unreadable {arrival_name} ({_rows_hint(no_arrival)})")
    for drop in check_times(arrival):
        warnings.append(f"{label}: dropped {drop.count} row(s) whose {arrival_name} is "
                        f"{drop.why} ({_rows_hint(drop.mask)})")
        valid &= ~drop.mask

    numeric: dict[str, np.ndarray] = {}
    # required columns with no usable value at all, for a precise fatal message
    useless: list[str] = []
    if no_arrival.all():
        useless.append(f"{arrival_name!r} ({table.schema.field(arrival_name).type})")
    for canonical in NUMERIC_COLUMNS:
        name = cmap.sources.get(canonical)
        if name is None:
            continue
        values, non_numeric = _to_float(table.column(name))
        if canonical in ("prompt_tokens", "output_tokens") and not (values >= 0).any():
            useless.append(f"{name!r} ({table.schema.field(name).type}"
                           + (f", {non_numeric} non-numeric" if non_numeric else "") + ")")
        if canonical in cmap.scales and cmap.scales[canonical] != 1.0:
            values = values * cmap.scales[canonical]
        out_of_range, why = implausible(values, 0.0, _upper_bound(canonical))
        if canonical in ("prompt_tokens", "output_tokens"):
            unusable = out_of_range | np.isnan(values)  # missing, not a number, or impossible
            newly = unusable & valid
            if newly.any():
                bad = implausible(np.where(valid, values, np.nan), 0.0,
                                  _upper_bound(canonical))[1]
                parts = [p for p in (bad, f"{non_numeric} not numeric" if non_numeric else "")
                         if p]
                warnings.append(
                    f"{label}: dropped {int(newly.sum())} row(s) whose {name} is missing, not a "
                    f"number, negative or too large ({', '.join([*parts, _rows_hint(newly)])})")
            valid &= ~unusable
            values = np.rint(values)
        else:
            if out_of_range.any():
                warnings.append(f"{label}: {int(out_of_range.sum())} negative or too large {name} value(s) "
                                f"treated as unknown ({why}; {_rows_hint(out_of_range)})")
                values = np.where(out_of_range, np.nan, values)
            if non_numeric:
                warnings.append(f"{label}: {non_numeric} non-numeric {name} value(s) treated as "
                                "unknown")
        numeric[canonical] = values

    if "kv_bytes" in numeric:
        with np.errstate(invalid="ignore", over="ignore"):
            heavy = numeric["kv_bytes"] > MAX_KV_BYTES_PER_TOKEN * np.maximum(
                numeric["prompt_tokens"], 1.0)
        if heavy.any():
            warnings.append(f"{label}: {int(heavy.sum())} kv_bytes value(s) above "
                            f"{MAX_KV_BYTES_PER_TOKEN:g} bytes per prompt token treated as "
                            f"unknown ({_rows_hint(heavy)})")
            numeric["kv_bytes"] = np.where(heavy, np.nan, numeric["kv_bytes"])
    if "cached_tokens" in numeric:
        over = numeric["cached_tokens"] > numeric["prompt_tokens"]
        if over.any():
            warnings.append(f"{label}: {int(over.sum())} row(s) with cached_tokens above "
                            "prompt_tokens: capped at prompt_tokens")
            numeric["cached_tokens"] = np.where(over, numeric["prompt_tokens"],
                                                numeric["cached_tokens"])

    keep = np.flatnonzero(valid)
    if keep.size == 0:
        what = ("column " + " and ".join(useless) + " holds no usable value"
                if useless else f"all {n} rows lack a usable arrival time, prompt length or "
                                "output length")
        raise InputError(f"{path}: no valid rows: {what}",
                         hint="see docs/inputs/requests.md for the expected columns and units")
    kept_arrival = arrival[keep]
    backwards = int(np.count_nonzero(np.diff(kept_arrival) < 0))
    if backwards:
        order = np.argsort(kept_arrival, kind="stable")
        keep = keep[order]
        warnings.append(f"{label}: arrivals out of order at {backwards} place(s); rows sorted by "
                        "arrival time")
    all_rows = keep.size == n and not backwards
    take_idx = None if all_rows else pa.array(keep)

    def pick(values: np.ndarray) -> np.ndarray:
        return values if all_rows else values[keep]

    # Build an Arrow table of exactly REQUEST_COLUMNS and convert it in one go: split blocks
    # avoid pandas consolidating ten float columns into one 2-D copy (seconds at 10M rows).
    arrays: dict[str, Any] = {"arrival_ts": pick(arrival)}
    for canonical, values in numeric.items():
        picked = pick(values)
        arrays[canonical] = picked.astype(np.int64) if canonical in (
            "prompt_tokens", "output_tokens") else picked
    present = {"arrival_ts", *numeric}
    empty = [c for c in numeric if c not in ("prompt_tokens", "output_tokens")
             and not np.isfinite(arrays[c]).any()]
    for canonical in STRING_COLUMNS:
        name = cmap.sources.get(canonical)
        if name is None:
            continue
        if canonical == "status":
            text, unknown = _status_column(table.column(name))
            if unknown:
                listed = ", ".join(f"{v!r} ({c})" for v, c in list(unknown.items())[:QUOTE_FIRST])
                warnings.append(f"{label}: status values not understood, treated as unknown: "
                                f"{listed}")
        else:
            text = _to_text(table.column(name))
        if take_idx is not None:
            text = text.take(take_idx)
        arrays[canonical] = text
        present.add(canonical)
        if text.null_count == len(text):
            empty.append(canonical)
    if empty:
        notes.append("columns with no values: " + ", ".join(sorted(empty)))
        present -= set(empty)
    if "request_id" in present:
        ids = arrays["request_id"]
        if ids.null_count:
            ids = ids.drop_null()
        dup = len(ids) - len(pc.unique(ids))  # hash-based; a third faster than pandas here
        if dup:
            warnings.append(f"{label}: {dup} duplicate request_id value(s); rows kept")
    n_kept = int(keep.size)
    columns = []
    for canonical, dtype in REQUEST_COLUMNS.items():
        if canonical in arrays:
            columns.append(arrays[canonical])
        elif dtype == "string":
            columns.append(pa.nulls(n_kept, pa.string()))
        else:
            columns.append(np.full(n_kept, np.nan))
    frame = pa.table(columns, names=list(REQUEST_COLUMNS)).to_pandas(
        split_blocks=True, self_destruct=True,
        types_mapper={pa.string(): pd.StringDtype(), pa.large_string(): pd.StringDtype()}.get)

    hash_ids = None
    if want_hash_ids and cmap.hash_ids and cmap.hash_ids in table.column_names:
        col = table.column(cmap.hash_ids)
        if take_idx is not None:
            col = col.take(take_idx)
        hash_ids = col.combine_chunks()
    dropped = n - keep.size
    return _Loaded(frame=frame, request_columns=frozenset(present), format=fmt,
                   rows=int(keep.size), skipped=skipped + int(dropped), warnings=warnings,
                   notes=notes, hash_ids=hash_ids)


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
    skipped = 0
    warnings: list[str] = []
    if fmt == "parquet":
        table, cmap = _read_parquet(path, sniffed.compression, want_hash_ids)
    else:
        data = _content(path, sniffed.compression)
        if _is_blank(data):
            raise InputError(f"{path}: the file is empty", hint="copy it again")
        if fmt == "jsonl":
            table, cmap, warnings, skipped = _read_jsonl(path, data, want_hash_ids)
        else:
            table, cmap, warnings, skipped = _read_delimited(
                path, data, "\t" if fmt == "tsv" else ",", want_hash_ids)
    table, invalid_utf8 = _repair_utf8(table)
    if invalid_utf8:
        warnings.append(f"{path}: {invalid_utf8} text value(s) are not valid UTF-8; the bad "
                        "bytes were replaced (U+FFFD)")
    label = cmap.layout if cmap.layout != RECORDS else fmt
    loaded = _canonicalise(path, table, cmap, label, skipped, want_hash_ids)
    loaded.warnings[:0] = warnings
    if sniffed.compression:
        loaded.notes.insert(0, f"{sniffed.compression}-compressed {fmt}")
    return loaded



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


def _utf8_name(path: Path) -> bool:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


# --- hook for collectors/requests_dataset.py (partitioned Parquet read as one table) ----------
require_columns = _require


def partial_from_table(path: Path, table: pa.Table, cmap: ColumnMap, fmt: str) -> Partial:
    """A ``Partial`` from request records already read into one Arrow table (the columns
    ``cmap`` maps), with the same checks, notes and canonical table as ``read_requests``."""
    loaded = _canonicalise(path, table, cmap, fmt, 0, False)
    return _as_partial(path, loaded)


def _as_partial(path: Path, loaded: _Loaded) -> Partial:
    hints: list[RoleHint] = []
    roles: tuple[tuple[str, Role], ...] = (("prefill_instance", "prefill"),
                                           ("decode_instance", "decode"))
    for column, role in roles:
        if column in loaded.request_columns:
            names = loaded.frame[column].dropna().unique()
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
