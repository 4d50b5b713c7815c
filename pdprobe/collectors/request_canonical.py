"""An Arrow table of source columns to the canonical request frame (``REQUEST_COLUMNS``).

Rows without a usable arrival time or length are dropped with a warning naming the rows;
impossible values of optional columns become unknown; rows are sorted by arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.request_assemble import Assembled, assemble
from pdprobe.collectors.request_blocks import (
    above_per_row,
    any_at_least,
    any_finite,
    compact,
    count_backwards,
    count_backwards_kept,
    null_strings,
)
from pdprobe.collectors.request_columns import (
    AZURE,
    LOW_CARDINALITY,
    MOONCAKE,
    NUMERIC_COLUMNS,
    RECORDS,
    STRING_COLUMNS,
    ColumnMap,
)
from pdprobe.collectors.request_ids import count_duplicates, count_hashed
from pdprobe.collectors.request_values import (
    QUOTE_FIRST,
    _rows_hint,
    upper_bound,
)
from pdprobe.collectors.validate import (
    MAX_KV_BYTES_PER_TOKEN,
    check_times,
    implausible,
)
from pdprobe.dataset import (
    REQUEST_COLUMNS,
    canonical_category,
    category_always,
)
from pdprobe.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


# Above this many rows the request_id values are checked for duplicates and then released:
# no analysis reads them, and 10M distinct ids hold about 200 MB (the column stays declared,
# every value unknown).
KEEP_REQUEST_IDS_MAX_ROWS: Final = 1_000_000
# When at most this share of the rows is dropped (and the rest is in order), each column is
# compacted over its own memory: the dropped rows' memory stays unused (at most 5 % of the
# frame) instead of a fresh copy of every column plus an 8-byte index per row.
COMPACT_MAX_DROPPED: Final = 0.05


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


def _canonicalise(path: Path, table: pa.Table | Assembled, cmap: ColumnMap, fmt: str,
                  skipped: int, want_hash_ids: bool) -> _Loaded:
    """The canonical frame of a source ``table`` (or of its columns already assembled batch by
    batch, ``request_assemble.assemble``): rows checked, dropped or sorted, warnings and notes.
    Every column is held once: values are fixed in place and copied only to drop rows."""
    import pyarrow as pa

    if not isinstance(table, Assembled):
        table = assemble(table.to_batches(), table.schema, cmap, table.num_rows, want_hash_ids)
    src = table
    del table
    label = str(path)
    n = src.rows
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
    arrival = src.arrival
    notes.extend(src.arrival_notes)
    valid = np.isfinite(arrival)
    no_arrival = ~valid
    if no_arrival.any():
        warnings.append(f"{label}: dropped {int(no_arrival.sum())} row(s) with a missing or "
                        f"unreadable {arrival_name} ({_rows_hint(no_arrival)})")
    known = src.bounds.get("arrival_ts")
    for drop in check_times(arrival, span=None if known is None else (known.low, known.high)):
        warnings.append(f"{label}: dropped {drop.count} row(s) whose {arrival_name} is "
                        f"{drop.why} ({_rows_hint(drop.mask)})")
        valid &= ~drop.mask

    numeric: dict[str, np.ndarray] = {}
    # required columns with no usable value at all, for a precise fatal message
    useless: list[str] = []
    if no_arrival.all():
        useless.append(f"{arrival_name!r} ({src.types[arrival_name]})")
    for canonical in NUMERIC_COLUMNS:
        name = cmap.sources.get(canonical)
        if name is None:
            continue
        values, non_numeric = src.numeric.pop(canonical)
        if canonical in ("prompt_tokens", "output_tokens") and not any_at_least(values, 0.0):
            useless.append(f"{name!r} ({src.types[name]}"
                           + (f", {non_numeric} non-numeric" if non_numeric else "") + ")")
        scale = cmap.scales.get(canonical, 1.0)
        if scale != 1.0:
            values *= scale  # in place: the column is held once
        # the footer's range, when it has one and it is in range, answers the range check
        known = src.bounds.get(canonical)
        if known is not None and known.within(0.0, upper_bound(canonical), scale):
            # the footer shows nothing out of range: no scan (implausible's empty mask)
            out_of_range, why = np.broadcast_to(np.False_, values.shape), ""
        else:
            out_of_range, why = implausible(values, 0.0, upper_bound(canonical))
        if canonical in ("prompt_tokens", "output_tokens"):
            # integers with no null and nothing out of range: no row is unusable, and every
            # value is whole already (rint would change nothing)
            whole = scale == 1.0 and pa.types.is_integer(src.types[name])
            if not (whole and known is not None and not known.may_be_nan and not why):
                _drop_unusable(values, out_of_range, why, valid, non_numeric, canonical,
                               f"{label}: dropped", name, warnings)
            if not whole:
                np.rint(values, out=values)
        else:
            if why:  # something out of range
                warnings.append(f"{label}: {int(out_of_range.sum())} negative or too large {name} value(s) "
                                f"treated as unknown ({why}; {_rows_hint(out_of_range)})")
                values[out_of_range] = np.nan
            if non_numeric:
                warnings.append(f"{label}: {non_numeric} non-numeric {name} value(s) treated as "
                                "unknown")
        numeric[canonical] = values

    if "kv_bytes" in numeric:
        heavy = above_per_row(numeric["kv_bytes"], numeric["prompt_tokens"],
                              MAX_KV_BYTES_PER_TOKEN)
        if heavy.any():
            warnings.append(f"{label}: {int(heavy.sum())} kv_bytes value(s) above "
                            f"{MAX_KV_BYTES_PER_TOKEN:g} bytes per prompt token treated as "
                            f"unknown ({_rows_hint(heavy)})")
            numeric["kv_bytes"][heavy] = np.nan
    if "cached_tokens" in numeric:
        over = numeric["cached_tokens"] > numeric["prompt_tokens"]
        if over.any():
            warnings.append(f"{label}: {int(over.sum())} row(s) with cached_tokens above "
                            "prompt_tokens: capped at prompt_tokens")
            numeric["cached_tokens"][over] = numeric["prompt_tokens"][over]

    all_valid = bool(valid.all())
    n_kept = n if all_valid else int(np.count_nonzero(valid))
    if n_kept == 0:
        what = ("column " + " and ".join(useless) + " holds no usable value"
                if useless else f"all {n} rows lack a usable arrival time, prompt length or "
                                "output length")
        raise InputError(f"{path}: no valid rows: {what}",
                         hint="see docs/inputs/requests.md for the expected columns and units")
    backwards = (count_backwards(arrival) if all_valid
                 else count_backwards_kept(arrival, valid))
    keep: np.ndarray | None = None  # the kept rows in their new order, made when needed
    if backwards:
        rows = None if all_valid else np.flatnonzero(valid)
        order = np.argsort(arrival if rows is None else arrival[rows], kind="stable")
        keep = order if rows is None else rows[order]
        del rows, order
        warnings.append(f"{label}: arrivals out of order at {backwards} place(s); rows sorted by "
                        "arrival time")
    all_rows = all_valid and not backwards
    # a few rows dropped, order kept: each column compacted over its own memory (no index
    # of the kept rows, no second copy of each column)
    in_place = not all_rows and not backwards and n - n_kept <= n * COMPACT_MAX_DROPPED

    def kept_rows() -> np.ndarray:
        nonlocal keep
        if keep is None:
            keep = np.flatnonzero(valid)
        return keep

    def pick(values: np.ndarray) -> np.ndarray:
        if all_rows:
            return values
        if in_place and values.flags.writeable and values.flags.c_contiguous:
            return compact(values, valid)
        return values[kept_rows()]

    # Build an Arrow table of exactly REQUEST_COLUMNS and convert it in one go: split blocks
    # avoid pandas consolidating ten float columns into one 2-D copy (seconds at 10M rows).
    arrays: dict[str, Any] = {"arrival_ts": pick(arrival)}
    del arrival, src.arrival
    for canonical in list(numeric):
        picked = pick(numeric.pop(canonical))  # the unpicked column is released here
        arrays[canonical] = _as_int64(picked) if canonical in (
            "prompt_tokens", "output_tokens") else picked
        del picked
    present = {"arrival_ts", *(c for c in arrays if c != "arrival_ts")}
    empty = [c for c in arrays if c not in ("arrival_ts", "prompt_tokens", "output_tokens")
             and not any_finite(arrays[c])]
    categories: dict[str, tuple[np.ndarray, list[str]]] = {}
    hashed: tuple[int, int] | None = None  # (duplicates, ids) of ids hashed while read
    for canonical in STRING_COLUMNS:
        name = cmap.sources.get(canonical)
        if name is None:
            continue
        present.add(canonical)
        if canonical in LOW_CARDINALITY:
            codes, names, unknown = src.categories.pop(canonical)
            if unknown:
                listed = ", ".join(f"{v!r} ({c})" for v, c in list(unknown.items())[:QUOTE_FIRST])
                warnings.append(f"{label}: status values not understood, treated as unknown: "
                                f"{listed}")
            codes = pick(codes)
            categories[canonical] = (codes, names)
            if not any_at_least(codes, 0):
                empty.append(canonical)
            continue
        if canonical == "request_id" and src.ids_again is not None:  # hashed while read
            if src.id_hashes is not None and n_kept > KEEP_REQUEST_IDS_MAX_ROWS:
                hashed = count_hashed(src.id_hashes, None if all_valid else valid,
                                      src.ids_again)
                src.id_hashes = None
                if not hashed[1]:
                    empty.append(canonical)
                continue
            # the ids go into the frame (few rows kept) or could not be hashed: read again
            src.text[canonical] = pa.chunked_array(list(src.ids_again()))
        text = src.text.pop(canonical)
        if not all_rows:
            text = text.take(pa.array(kept_rows()))
        arrays[canonical] = text
        if text.null_count == len(text):
            empty.append(canonical)
        del text  # held by ``arrays`` only: released there once checked
    if empty:
        notes.append("columns with no values: " + ", ".join(sorted(empty)))
        present -= set(empty)
    if "request_id" in present:
        dup = (hashed[0] if hashed is not None  # hashes sorted; collisions compared
               else count_duplicates(arrays["request_id"]))
        if dup:
            warnings.append(f"{label}: {dup} duplicate request_id value(s); rows kept")
        if hashed is not None:
            notes.append(f"request_id values checked for duplicates, not kept in memory (more "
                         f"than {KEEP_REQUEST_IDS_MAX_ROWS:,} rows; no analysis reads them)")
        elif len(arrays["request_id"]) > KEEP_REQUEST_IDS_MAX_ROWS:
            del arrays["request_id"]  # checked; no analysis reads the values
            # Arrow's allocator (mimalloc, or jemalloc under the CLI) keeps freed memory for
            # reuse: the ids' ~150 MB at 10M rows would stay in the process while the frame is
            # built and analysed
            pa.default_memory_pool().release_unused()
            notes.append(f"request_id values checked for duplicates, not kept in memory (more "
                         f"than {KEEP_REQUEST_IDS_MAX_ROWS:,} rows; no analysis reads them)")
    # One Series per column, put together without a copy: numeric columns are the arrays
    # above, categorical ones built from their codes (no string per row).
    # imported here, not above: the checks above are numpy work that may run while another
    # thread imports pandas (``requests_file._read_records``)
    import pandas as pd

    strings = {pa.string(): pd.StringDtype(), pa.large_string(): pd.StringDtype()}.get
    series: dict[str, Any] = {}
    for canonical, dtype in REQUEST_COLUMNS.items():
        if dtype == "category":
            got = categories.get(canonical)  # an absent column: every row missing (-1)
            codes, names = got if got is not None else (np.full(n_kept, -1, np.int32), [])
            series[canonical] = canonical_category(pd.Series(
                pd.Categorical.from_codes(codes, categories=pd.Index(names))),
                category_always(canonical))
        elif dtype == "string":
            text = arrays.pop(canonical, None)
            if text is None:
                text = null_strings(n_kept)
            series[canonical] = pa.table({canonical: text}).to_pandas(
                types_mapper=strings, self_destruct=True)[canonical]
        elif canonical in arrays:
            series[canonical] = pd.Series(arrays.pop(canonical), copy=False)
        else:
            series[canonical] = pd.Series(np.full(n_kept, np.nan), copy=False)
    frame = pd.DataFrame(series, copy=False)
    del series

    hash_ids = None
    if want_hash_ids and src.hash_ids is not None:
        col = src.hash_ids
        if not all_rows:
            col = col.take(pa.array(kept_rows()))
        hash_ids = col.combine_chunks()
    dropped = n - n_kept
    return _Loaded(frame=frame, request_columns=frozenset(present), format=fmt,
                   rows=n_kept, skipped=skipped + int(dropped), warnings=warnings,
                   notes=notes, hash_ids=hash_ids)


def _drop_unusable(values: np.ndarray, out_of_range: np.ndarray, why: str, valid: np.ndarray,
                   non_numeric: int, canonical: str, dropped: str, name: str,
                   warnings: list[str]) -> None:
    """Rows of a required length column that are missing, not a number or out of range
    (``out_of_range``, read only when ``why`` says something is) taken out of ``valid``, with
    a warning (``dropped``: its start) for those still valid."""
    unusable = np.isnan(values)  # missing, not a number, or impossible
    if why:  # (an empty reason: nothing out of range, the mask need not be read)
        unusable |= out_of_range
    newly = unusable & valid
    if newly.any():
        bad = implausible(np.where(valid, values, np.nan), 0.0, upper_bound(canonical))[1]
        parts = [p for p in (bad, f"{non_numeric} not numeric" if non_numeric else "") if p]
        warnings.append(
            f"{dropped} {int(newly.sum())} row(s) whose {name} is missing, not a "
            f"number, negative or too large ({', '.join([*parts, _rows_hint(newly)])})")
    valid &= ~unusable


# Rows converted per step when whole-number floats become int64 in their own memory: a
# temporary this small stays in cache instead of costing a fresh 80 MB array at 10M rows.
INT_BLOCK_ROWS: Final = 1 << 16


def _as_int64(values: np.ndarray) -> np.ndarray:
    """``values`` (float64 whole numbers, owned) as int64 in the same memory: the canonical
    token columns without a second copy of each. int64 already (read so: ``assemble``) is
    kept as it is."""
    if values.dtype == np.int64:
        return values
    if not values.flags.writeable or not values.flags.c_contiguous:
        return values.astype(np.int64)
    out = values.view(np.int64)
    for start in range(0, values.size, INT_BLOCK_ROWS):
        end = start + INT_BLOCK_ROWS
        out[start:end] = values[start:end].astype(np.int64)
    return out
