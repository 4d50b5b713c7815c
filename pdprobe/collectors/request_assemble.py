"""Request-record columns assembled batch by batch: each source column converted once, held once.

A reader hands over record batches (a Parquet row group, a block of CSV or JSON Lines); each
batch's numeric columns are converted to float64 straight into one output array per column,
its instance and status columns to categorical codes (cleaned and mapped over each batch's
distinct values only), and the batch is dropped. Memory therefore holds the canonical columns
once plus one batch, whatever the number of rows, and no column is ever materialised as
strings per row.

Columns whose conversion depends on the whole column (text in a numeric column, ISO date-times,
ids or instance names written as floats) keep their Arrow chunks and are converted at the end
exactly as a whole-table read converts them, so the result never depends on where batches
were cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.prefault import Prefault
from pdprobe.collectors.request_blocks import remap_codes
from pdprobe.collectors.request_bounds import Bounds
from pdprobe.collectors.request_columns import (
    LOW_CARDINALITY,
    NUMERIC_COLUMNS,
    STRING_COLUMNS,
    ColumnMap,
)
from pdprobe.collectors.request_id_hashes import IdHashes, cleaned_ids
from pdprobe.collectors.request_outputs import (
    Floats,
    Ints,
    OutputColumn,
    owned,
)
from pdprobe.collectors.request_values import (
    _arrival_seconds,
    _category_codes,
    _dictionary_codes,
    _to_float,
    _to_text,
    _unknown_counts,
    numeric_arrival_bounded,
    upper_bound,
    values_view,
)
from pdprobe.dataset import REQUEST_STATUSES

if TYPE_CHECKING:

    import pyarrow as pa


@dataclass
class Assembled:
    """The source columns of a request file, converted (see the module docstring).

    ``numeric`` maps a canonical numeric column to its float64 values (NaN for null, unscaled)
    and how many non-null values were not numbers (int64 values instead for a token column of
    integers the footer's ``bounds`` show null-free and in range: ``_whole_tokens``);
    ``categories`` a low-cardinality column to ``(codes, sorted names, unknown statuses)``
    (int8 or int32 codes, -1 for missing); ``text`` the cleaned ``request_id``.
    """

    rows: int
    types: dict[str, pa.DataType]  # source column name -> its Arrow type (for messages)
    arrival: np.ndarray
    arrival_notes: list[str]
    numeric: dict[str, tuple[np.ndarray, int]] = field(default_factory=dict)
    categories: dict[str, tuple[np.ndarray, list[str], dict[str, int]]] = field(
        default_factory=dict)
    text: dict[str, pa.ChunkedArray] = field(default_factory=dict)
    hash_ids: pa.ChunkedArray | None = None
    # request ids hashed as they were read instead of held (``assemble``'s ``ids_again``):
    # one hash per row (0 for null; None when an id could not be hashed) and the cleaned id
    # chunks read again, in row order
    id_hashes: np.ndarray | None = None
    ids_again: Callable[[], Iterator[pa.Array]] | None = None
    # canonical numeric column (``arrival_ts`` too) -> the range of its values as converted
    # here (unscaled), known from a Parquet footer (``request_bounds``)
    bounds: dict[str, Bounds] = field(default_factory=dict)


def _plain_number(t: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def _is_text(t: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


# Token columns whose whole numbers ``request_canonical`` keeps as int64.
_TOKEN_COLUMNS: Final = ("prompt_tokens", "output_tokens")


def _whole_tokens(canonical: str, t: pa.DataType, cmap: ColumnMap,
                  known: Bounds | None) -> bool:
    """Whether a token column can be read as int64 as it stands: integers, unscaled, with a
    footer range showing no null and nothing ``request_canonical`` would drop (then it neither
    drops nor rounds a row of it, and makes it int64)."""
    import pyarrow as pa

    return (canonical in _TOKEN_COLUMNS and pa.types.is_integer(t) and known is not None
            and not known.may_be_nan and cmap.scales.get(canonical, 1.0) == 1.0
            and known.within(0.0, upper_bound(canonical)))


def _trusted(known: Bounds | None, sink: Floats | Ints) -> Bounds | None:
    """A footer's ``known`` bounds of a column, or None when the column held a null the footer
    did not announce: its "no NaN" is wrong (and nothing else of it is trusted either)."""
    return None if known is None or (sink.nulls and not known.may_be_nan) else known


# Codes are held as int8 while a column has at most this many distinct values (pandas holds a
# categorical of fewer than 127 categories as int8 too): 10 MB per 10M rows instead of 40 MB.
INT8_CODES_MAX: Final = 127


class _Codes:
    """A text column of few distinct values (instances, status) as categorical codes,
    batch by batch: each batch's distinct values are cleaned (and, for ``status``, mapped)
    and appended to one first-seen list; the row codes are one numpy gather per batch, held
    as int8 until a column has more than ``INT8_CODES_MAX`` values (then int32)."""

    def __init__(self, rows: int | None, status: bool) -> None:
        self.status = status
        self.rows = rows
        self.names: list[str] = sorted(REQUEST_STATUSES) if status else []
        self.index: dict[str, int] = {v: i for i, v in enumerate(self.names)}
        self.codes = OutputColumn(rows, np.int8)
        self.unknown: dict[str, int] = {}
        # the last batch's dictionary and what it maps to: the batches of a Parquet row group
        # (and often of a whole file) share one dictionary, decided once
        self._dictionary: pa.Array | None = None
        self._remap = np.zeros(0, np.int32)
        self._unknown_entries: list[tuple[str, int]] = []

    def _widen(self) -> None:
        """Codes so far copied to int32 (more distinct values than int8 holds)."""
        held = self.codes.collected()
        self.codes = OutputColumn(self.rows, np.int32)
        self.codes.put(held)

    def add(self, arr: pa.Array) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        if not pa.types.is_dictionary(arr.type):
            codes, names, unknown = _category_codes(pa.chunked_array([arr], arr.type),
                                                    self.status)
            self._count(unknown)
            self.codes.put(self._held(names)[codes])  # -1 stays -1 (the extra slot)
            return
        dictionary = arr.dictionary
        if self._dictionary is None or not (dictionary is self._dictionary
                                            or dictionary.equals(self._dictionary)):
            remap, names, self._unknown_entries = _dictionary_codes(dictionary, self.status)
            self._remap = self._held(names)[remap]  # dictionary entry -> held code
            self._dictionary = dictionary
        row = values_view(arr.indices)  # no copy
        if row is None:  # null rows: the extra slot after the dictionary's entries
            row = pc.fill_null(arr.indices, len(dictionary)).to_numpy(zero_copy_only=False)
        self._count(_unknown_counts(row, len(dictionary), self._unknown_entries))
        if self._remap.dtype != self.codes.dtype:  # held codes fit the held dtype
            self._remap = self._remap.astype(self.codes.dtype)
        slot = self.codes.slot(row.size)
        if slot is None:
            self.codes.put(self._remap[row])
        else:  # gathered straight into the column ("clip": every index is in range)
            np.take(self._remap, row, out=slot, mode="clip")

    def _held(self, names: list[str]) -> np.ndarray:
        """Batch code (into the sorted ``names``; -1 last) -> held code (first seen order)."""
        if self.status:  # the names are the statuses, always in this order
            return np.append(np.arange(len(names), dtype=np.int32), np.int32(-1))
        held = np.array([self.index.setdefault(v, len(self.index)) for v in names] + [-1],
                        dtype=np.int32)
        if len(self.index) > INT8_CODES_MAX and self.codes.dtype == np.int8:
            self._widen()
        return held

    def _count(self, unknown: dict[str, int]) -> None:
        for value, count in unknown.items():
            self.unknown[value] = self.unknown.get(value, 0) + count

    def finish(self) -> tuple[np.ndarray, list[str], dict[str, int]]:
        codes = self.codes.collected()
        if self.status:
            return codes, self.names, self.unknown
        seen = list(self.index)
        names = sorted(seen)
        order = {v: i for i, v in enumerate(names)}
        if seen == names:  # first seen in sorted order already: the codes are final
            return codes, names, self.unknown
        remap = np.array([order[v] for v in seen] + [-1], dtype=codes.dtype)
        return remap_codes(codes, remap), names, self.unknown


class _Chunks:
    """Arrow chunks kept as they come, converted at the end as one column."""

    def __init__(self) -> None:
        self.chunks: list[pa.Array] = []

    def add(self, arr: pa.Array) -> None:
        self.chunks.append(arr)

    def column(self, t: pa.DataType) -> pa.ChunkedArray:
        import pyarrow as pa

        chunks, self.chunks = self.chunks, []
        if any(c.type != t for c in chunks):  # a batch repaired for bad UTF-8 lost its dictionary
            t = t.value_type if pa.types.is_dictionary(t) else t
            chunks = [c.cast(t) for c in chunks]
        return pa.chunked_array(chunks, t)


def assemble(batches: Iterable[Any], schema: pa.Schema, cmap: ColumnMap,
             rows: int | None = None, want_hash_ids: bool = False,
             ids_again: Callable[[], Iterable[pa.Array]] | None = None,
             prefault: bool = False, bounds: Mapping[str, Bounds] | None = None
             ) -> Assembled:
    """Convert the record ``batches`` (of ``schema``'s columns, the ones ``cmap`` maps) as
    described in the module docstring. ``rows`` (known from a Parquet footer, or an estimate)
    lets each output array be allocated once: a batch's values are copied into it and the
    batch released, rows beyond it are appended, and reserved rows never written cost no
    memory (``np.empty`` pages are committed when first written).

    ``ids_again``, when the source can be read again, yields the raw ``request_id`` column
    again in row order: a string id column is then hashed as it is read, not held, and read
    again only where needed (``request_ids.count_hashed``).

    ``prefault`` when ``rows`` is exact (every reserved row will be written): the reserved
    arrays' pages are committed by another thread ahead of the copies (``prefault.Prefault``).

    ``bounds`` (source column -> range, from a Parquet footer describing exactly these rows)
    is handed on for the numeric columns converted as plain numbers.
    """
    import pyarrow as pa

    types = {f.name: f.type for f in schema}
    arrival_name = cmap.sources["arrival_ts"]
    arrival_type = types[arrival_name]
    arrival_plain = _plain_number(arrival_type)
    arrival_ts = pa.types.is_timestamp(arrival_type)
    arrival_sink: Floats | _Chunks = (Floats(rows) if arrival_plain or arrival_ts
                                       else _Chunks())
    numeric: dict[str, Floats | Ints | _Chunks] = {}
    for canonical in NUMERIC_COLUMNS:
        name = cmap.sources.get(canonical)
        if name is None:
            continue
        if _whole_tokens(canonical, types[name], cmap, bounds.get(name) if bounds else None):
            numeric[canonical] = Ints(rows)
        else:
            numeric[canonical] = Floats(rows) if _plain_number(types[name]) else _Chunks()
    codes: dict[str, _Codes | _Chunks] = {}
    text: dict[str, _Chunks] = {}
    id_sink: IdHashes | None = None
    for canonical in STRING_COLUMNS:
        name = cmap.sources.get(canonical)
        if name is None:
            continue
        if canonical in LOW_CARDINALITY and _is_text(types[name]):
            codes[canonical] = _Codes(rows, canonical == "status")
        elif canonical in LOW_CARDINALITY:
            codes[canonical] = _Chunks()  # numbers as names: cleaned over the whole column
        elif canonical == "request_id" and ids_again is not None and (
                pa.types.is_string(types[name]) or pa.types.is_large_string(types[name])):
            id_sink = IdHashes(rows)
        else:
            text[canonical] = _Chunks()
    hash_sink = _Chunks() if want_hash_ids and cmap.hash_ids in types else None

    n = 0
    reserved = [sink.out for sink in (arrival_sink, *numeric.values())
                if isinstance(sink, Floats | Ints) and sink.out is not None]
    reserved += [sink.codes.out for sink in codes.values()
                 if isinstance(sink, _Codes) and sink.codes.out is not None]
    if id_sink is not None and id_sink.hashes is not None and id_sink.hashes.out is not None:
        reserved.append(id_sink.hashes.out)
    committing = Prefault(reserved if prefault and rows is not None else [])
    try:
        for batch in batches:
            n += batch.num_rows
            if id_sink is not None:  # first: hashed while the other columns are converted
                id_sink.add(batch.column(cmap.sources["request_id"]))
            col = batch.column(arrival_name)
            if isinstance(arrival_sink, Floats):
                if arrival_ts:
                    import pyarrow.compute as pc

                    factor = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[arrival_type.unit]
                    ints = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
                    arrival_sink.put(np.asarray(ints, dtype=np.float64) * factor)
                else:
                    arrival_sink.add(col)
            else:
                arrival_sink.add(col)
            for canonical, sink in numeric.items():
                sink.add(batch.column(cmap.sources[canonical]))
            for canonical, csink in codes.items():
                csink.add(batch.column(cmap.sources[canonical]))
            for canonical, tsink in text.items():
                tsink.add(batch.column(cmap.sources[canonical]))
            if hash_sink is not None:
                hash_sink.add(batch.column(cmap.hash_ids))
        if id_sink is not None:
            id_sink.settle()  # the last batch's hashes, before the thread is closed
    finally:
        committing.close()
        if id_sink is not None:
            id_sink.close()  # no hashing thread outlives the read, on error too

    notes: list[str] = []
    arrival_bounds: Bounds | None = None
    if isinstance(arrival_sink, Floats):
        values = arrival_sink.finish()
        if arrival_ts:
            if arrival_type.tz is None:
                notes.append(f"{arrival_name} has no time zone: assumed UTC")
            arrival = values
        else:
            arrival, notes, arrival_bounds = numeric_arrival_bounded(
                values, cmap, arrival_name, notes,
                _trusted(bounds.get(arrival_name) if bounds else None, arrival_sink))
    else:
        arrival, notes, _ = _arrival_seconds(arrival_sink.column(arrival_type), cmap,
                                             arrival_name)
    out = Assembled(rows=n, types=types, arrival=arrival, arrival_notes=notes)
    if bounds:
        if arrival_bounds is not None:
            out.bounds["arrival_ts"] = arrival_bounds  # scaled as the times were
        for canonical, sink in numeric.items():
            known = (_trusted(bounds.get(cmap.sources[canonical]), sink)
                     if isinstance(sink, Floats | Ints) else None)
            if known is not None:
                out.bounds[canonical] = known
    for canonical, sink in numeric.items():
        name = cmap.sources[canonical]
        if isinstance(sink, Floats | Ints):
            out.numeric[canonical] = (sink.finish(), 0)
        else:
            values, non_numeric = _to_float(sink.column(types[name]))
            out.numeric[canonical] = (owned(values), non_numeric)
    for canonical, csink in codes.items():
        name = cmap.sources[canonical]
        out.categories[canonical] = (csink.finish() if isinstance(csink, _Codes)
                                     else _category_codes(csink.column(types[name]),
                                                          canonical == "status"))
    for canonical, tsink in text.items():
        out.text[canonical] = _to_text(tsink.column(types[cmap.sources[canonical]]))
    if id_sink is not None and ids_again is not None:
        again = ids_again
        out.id_hashes = id_sink.finish()
        out.ids_again = lambda: (chunk for raw in again() for chunk in cleaned_ids(raw))
    if hash_sink is not None and cmap.hash_ids is not None:
        out.hash_ids = hash_sink.column(types[cmap.hash_ids])
    return out


def table_batches(table: pa.Table) -> list[Any]:
    """A whole table as the batches ``assemble`` takes (one per chunk, no copy)."""
    return list(table.to_batches())



