"""An Arrow table of source columns to the canonical request frame (``REQUEST_COLUMNS``).

Rows without a usable arrival time or length are dropped with a warning naming the rows;
impossible values of optional columns become unknown; rows are sorted by arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.request_columns import (
    AZURE,
    LOW_CARDINALITY,
    MOONCAKE,
    NUMERIC_COLUMNS,
    RECORDS,
    STRING_COLUMNS,
    ColumnMap,
)
from pdprobe.collectors.request_values import (
    QUOTE_FIRST,
    _arrival_seconds,
    _category_codes,
    _rows_hint,
    _to_float,
    _to_text,
    _upper_bound,
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
    categories: dict[str, tuple[np.ndarray, list[str]]] = {}
    for canonical in STRING_COLUMNS:
        name = cmap.sources.get(canonical)
        if name is None:
            continue
        present.add(canonical)
        if canonical in LOW_CARDINALITY:
            codes, names, unknown = _category_codes(table.column(name), canonical == "status")
            if unknown:
                listed = ", ".join(f"{v!r} ({c})" for v, c in list(unknown.items())[:QUOTE_FIRST])
                warnings.append(f"{label}: status values not understood, treated as unknown: "
                                f"{listed}")
            codes = pick(codes)
            categories[canonical] = (codes, names)
            if not (codes >= 0).any():
                empty.append(canonical)
            continue
        text = _to_text(table.column(name))
        if take_idx is not None:
            text = text.take(take_idx)
        arrays[canonical] = text
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
        if len(arrays["request_id"]) > KEEP_REQUEST_IDS_MAX_ROWS:
            del arrays["request_id"]  # checked; no analysis reads the values
            notes.append(f"request_id values checked for duplicates, not kept in memory (more "
                         f"than {KEEP_REQUEST_IDS_MAX_ROWS:,} rows; no analysis reads them)")
    n_kept = int(keep.size)
    columns = []
    for canonical, dtype in REQUEST_COLUMNS.items():
        if canonical in arrays:
            columns.append(arrays[canonical])
        elif dtype in ("string", "category"):
            columns.append(pa.nulls(n_kept, pa.string()))
        else:
            columns.append(np.full(n_kept, np.nan))
    frame = pa.table(columns, names=list(REQUEST_COLUMNS)).to_pandas(
        split_blocks=True, self_destruct=True,
        types_mapper={pa.string(): pd.StringDtype(), pa.large_string(): pd.StringDtype()}.get)
    for canonical, dtype in REQUEST_COLUMNS.items():
        if dtype != "category":
            continue
        codes, names = categories.get(canonical, (np.full(n_kept, -1, np.int32), []))
        frame[canonical] = canonical_category(pd.Series(
            pd.Categorical.from_codes(codes, categories=pd.Index(names))), category_always(canonical))

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
