"""Source values to canonical ones: numbers, arrival times (units, ISO dates), text, status.

Columnar (pyarrow, numpy); string cleaning and status mapping run over a dictionary's distinct
values, never per row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.request_columns import (
    MOONCAKE,
    ColumnMap,
)
from pdprobe.collectors.validate import (
    MAX_DURATION_S,
    MAX_KV_BYTES,
    MAX_TOKENS,
)
from pdprobe.dataset import REQUEST_STATUSES

if TYPE_CHECKING:
    import pyarrow as pa

    from pdprobe.collectors.request_bounds import Bounds


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
    out, notes, _ = numeric_arrival_bounded(values, cmap, name, notes, None)
    return out, notes, 0


def numeric_arrival_bounded(values: np.ndarray, cmap: ColumnMap, name: str, notes: list[str],
                            bounds: Bounds | None) -> tuple[np.ndarray, list[str],
                                                            Bounds | None]:
    """Numeric arrival times in seconds (the unit from the column map or the magnitude),
    scaled in place when ``values`` is writable, and the notes saying how they were read.
    ``bounds``, the range of ``values`` when known (a Parquet footer), spares the pass for the
    largest time; it is returned scaled as the times were."""
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
    out = values
    if scale != 1.0 and values.flags.writeable:
        out *= scale  # in place (no caller keeps its unscaled times): no second column
    elif scale != 1.0:
        out = values * scale
    if bounds is not None and scale != 1.0:
        bounds = bounds.scaled(scale)  # scales > 0: the largest time stays the largest
    if finite.size and (bounds.high if bounds is not None
                        else float(np.nanmax(out))) < RELATIVE_BELOW_TS:
        notes.append(f"relative timestamps: {name} counts seconds from the trace start, "
                     "not wall-clock time")
    return out, notes, bounds


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
    from pdprobe.collectors.request_ids import plain_ids

    if isinstance(arr, pa.ChunkedArray) and arr.num_chunks and all(
            plain_ids(chunk) for chunk in arr.chunks):
        return arr  # nothing to trim, nothing empty: cleaning would copy it unchanged
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
    # "empty" from the byte length and the null from an array: a Python value as an argument
    # (``""``, ``pa.scalar(None)``) makes pyarrow import pandas (see ``_dictionary_codes``)
    empty = pc.invert(pc.cast(pc.binary_length(trimmed), pa.bool_()))
    return pc.if_else(empty, pa.nulls(1, pa.string())[0], trimmed)


def _category_codes(arr: pa.ChunkedArray, status: bool = False
                    ) -> tuple[np.ndarray, list[str], dict[str, int]]:
    """A low-cardinality text column (instances, status) as categorical codes: ``(codes, names,
    unknown)`` with int32 ``codes`` (-1 for missing) into the sorted ``names``.

    Cleaning (trim, empty -> missing) and, for ``status``, the mapping to ok/error/timeout/
    aborted run over the distinct values only; unknown statuses become missing and are counted
    in ``unknown``. One numpy gather maps the row codes: no string is made per row.
    """
    import pyarrow.compute as pc

    encoded = _as_dictionary(arr)
    remap, names, unknown_entries = _dictionary_codes(encoded.dictionary, status)
    row = pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy(zero_copy_only=False)
    return remap[row], names, _unknown_counts(row, len(encoded.dictionary), unknown_entries)


def _dictionary_codes(dictionary: pa.Array, status: bool
                      ) -> tuple[np.ndarray, list[str], list[tuple[str, int]]]:
    """What ``_category_codes`` decides per distinct value: each dictionary entry's code into
    the sorted ``names`` (int32, -1 for missing, plus a last slot of -1 for null rows), the
    names, and the unknown statuses as ``(cleaned value, dictionary index)``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cleaned = _clean_text(dictionary)
    unknown: list[tuple[str, int]] = []
    if status:
        values = cleaned.to_pylist()
        mapped = [_status_of(value) for value in values]  # the distinct values only
        unknown = [(str(v), i) for i, (v, m) in enumerate(zip(values, mapped, strict=True))
                   if m is None and v is not None]
        names = sorted(REQUEST_STATUSES)
        code = {name: i for i, name in enumerate(names)}
        found = np.array([code.get(m, -1) if m is not None else -1 for m in mapped], np.int32)
    else:
        # the distinct names sorted by Arrow: UTF-8 byte order is Python's code point order
        distinct = pc.unique(cleaned.drop_null())
        ordered = distinct.take(pc.array_sort_indices(distinct))
        names = ordered.to_pylist()
        index = pc.index_in(cleaned, value_set=ordered)  # null where the entry is null
        valid = values_view(pc.cast(pc.is_valid(index), pa.int8()))
        found = np.where(valid == 1, _int32_values(index), np.int32(-1))
    # dictionary entry -> category code, with one extra slot (-1) for missing row codes.
    # Built without pyarrow's Python-value conversions and ``to_numpy``, which import pandas
    # the first time: this runs in the reading loop, while the analysis modules are imported
    # in another thread, and a reader blocked on that import stalled the decode.
    remap = np.append(found, np.int32(-1)).astype(np.int32)
    return remap, names, unknown


def _int32_values(arr: pa.Array) -> np.ndarray:
    """An int32 array's values, whatever they hold at its null slots."""
    if not len(arr):
        return np.empty(0, np.int32)
    return np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr), offset=arr.offset * 4)


# numpy's dtype of each Arrow fixed-width number type whose values are laid out as numpy's
_NUMPY_NUMBERS: Final = {"int8": np.int8, "int16": np.int16, "int32": np.int32,
                         "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16,
                         "uint32": np.uint32, "uint64": np.uint64, "float": np.float32,
                         "double": np.float64}


def values_view(arr: pa.Array) -> np.ndarray | None:
    """A null-free array of fixed-width numbers as a read-only numpy view of its values (what
    ``to_numpy()`` gives), or None for any other array.

    Read from the buffer because pyarrow's ``to_numpy`` imports pandas the first time it
    runs (its pandas-conversion setup): in the reading loop that import waited for the
    analysis modules' imports in another thread (``services.diagnose.load_dataset``)."""
    dtype = _NUMPY_NUMBERS.get(str(arr.type))
    if dtype is None or arr.null_count:
        return None
    if not len(arr):
        view = np.empty(0, dtype)
    else:
        size = np.dtype(dtype).itemsize
        view = np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr),
                             offset=arr.offset * size)
    view.flags.writeable = False  # Arrow's memory (a mutable buffer gives a writable view)
    return view


def _unknown_counts(row: np.ndarray, size: int, unknown: list[tuple[str, int]]
                    ) -> dict[str, int]:
    """How many rows (dictionary indices ``row``, ``size`` for null) hold each unknown status."""
    if not unknown:
        return {}
    counts = np.bincount(row, minlength=size + 1)
    return {value: int(counts[i]) for value, i in unknown}


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


def upper_bound(canonical: str) -> float:
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
