"""Partitioned Parquet request records read as one input: a data lake's
``date=2026-11-30/hour=13/part-0.parquet`` folders, locally or on object storage.

The files are one ``pyarrow.dataset`` with Hive partitioning. With ``--since``/``--until``
the window is pushed down twice before anything is decoded: to partitions (the time range
each partition's ``date``/``dt``/``year``/``month``/``day``/``hour``/``minute`` values name)
and to row groups (the arrival column's Parquet statistics). Only the needed columns of the
remaining row groups are read; ``collectors/time_window.py`` then cuts the exact window.
Columns are mapped as for a single file (``requests_file.partial_from_table``), so the
dataset is one source with one set of notes, whatever its number of part files.

Object storage: any URI pyarrow's filesystems open (``s3://bucket/prefix/``, ``gs://``);
credentials and endpoint come from the standard environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``)
or the URI's own query (``?endpoint_override=host:port&scheme=http``).
"""

from __future__ import annotations

import re
from calendar import monthrange
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.request_assemble import Assembled
from pdprobe.collectors.walk import DatasetRef
from pdprobe.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

    from pdprobe.collectors.request_columns import ColumnMap
    from pdprobe.dataset import Partial

# Partition keys that name time, most to least coarse (compared lower case). Partition values
# are UTC: data lakes partition by the event's UTC date and hour.
TIME_KEYS: Final = ("date", "dt", "year", "month", "day", "hour", "minute")
# `date=2026-11-30`, `dt=20261130`, `dt=2026-11-30-13` (date and hour in one value).
_DATE_VALUE: Final = re.compile(r"^(\d{4})-?(\d{2})-?(\d{2})(?:[T _-]?(\d{2}))?$")
# The row-group filter is widened by this much: the exact window is cut after reading, so a
# rounding of a scaled unit (ms, us) at the window's edge must not lose a row. Partitions
# are pruned exactly (their ranges are whole hours and days).
PUSHDOWN_MARGIN_S: Final = 0.001
# Epoch magnitudes of a numeric arrival column (as requests_file detects them from values).
EPOCH_UNIT_BOUNDS: Final = ((1e17, 1e-9), (1e14, 1e-6), (1e11, 1e-3))
# Batches decoded ahead of the one being converted: a little overlap, memory a few batches.
BATCH_READAHEAD: Final = 2
# Object names that are not data in a listed prefix (Spark/Hive markers, hidden files).
_NOT_DATA_PREFIXES: Final = ("_", ".")
# Suffixes of Parquet objects in a listing (object storage is not sniffed byte by byte).
PARQUET_SUFFIXES: Final = (".parquet", ".parq", ".pq")


@dataclass(frozen=True)
class Pushdown:
    """What the window spared: files and row groups read of those the dataset holds."""

    files: int
    files_read: int
    row_groups: int  # in the files opened
    row_groups_read: int
    rows_unread: int  # rows of the row groups skipped in the files opened
    span_ts: tuple[float, float] | None = None  # what the partition names cover (UTC)

    def note(self) -> str:
        """For the source's notes."""
        return (f"window pushed down: opened {self.files_read:,} of {self.files:,} files "
                f"(partitions), decoded {self.row_groups_read:,} of {self.row_groups:,} row groups "
                f"in them (statistics)")


@dataclass(frozen=True)
class DatasetRead:
    """A dataset read: its partial and what the window let it skip (None without one)."""

    partial: Partial
    pushdown: Pushdown | None


def partition_range(keys: dict[str, Any]) -> tuple[float, float] | None:
    """The UTC time range ``[start, end)`` a partition's keys name, or None when they name
    none (no date, or values that are not times). ``{"date": "2026-11-30", "hour": 13}`` ->
    13:00 to 14:00 of that day."""
    lower = {k.lower(): str(v) for k, v in keys.items() if v is not None}
    try:
        hour = int(lower["hour"]) if "hour" in lower and lower["hour"].isdigit() else None
        minute = int(lower["minute"]) if "minute" in lower and lower["minute"].isdigit() else None
        day_hour: int | None = None
        text = lower.get("date") or lower.get("dt")
        if text is not None:
            m = _DATE_VALUE.match(text)
            if not m:
                return None
            y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
            day_hour = int(m.group(4)) if m.group(4) else None
        elif "year" in lower and lower["year"].isdigit():
            y = int(lower["year"])
            mo = int(lower["month"]) if lower.get("month", "").isdigit() else 0
            d = int(lower["day"]) if mo and lower.get("day", "").isdigit() else 0
        else:
            return None
        if not mo:
            start = datetime(y, 1, 1, tzinfo=UTC).timestamp()
            return start, datetime(y + 1, 1, 1, tzinfo=UTC).timestamp()
        if not d:
            start = datetime(y, mo, 1, tzinfo=UTC).timestamp()
            return start, start + monthrange(y, mo)[1] * 86400.0
        start = datetime(y, mo, d, tzinfo=UTC).timestamp()
    except (ValueError, OverflowError):
        return None
    hour = day_hour if day_hour is not None else hour
    if hour is None or not 0 <= hour < 24:
        return start, start + 86400.0
    start += hour * 3600.0
    if minute is None or not 0 <= minute < 60:
        return start, start + 3600.0
    start += minute * 60.0
    return start, start + 60.0


def display_uri(uri: str) -> str:
    """A URI as reports show it: no user info, no query (it may carry keys)."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{parts.path}"


def _open(ref: DatasetRef) -> tuple[Any, list[str], str]:
    """(filesystem, member paths, partition base) of a dataset reference."""
    import pyarrow.fs as pafs

    if not ref.uri:
        return pafs.LocalFileSystem(), list(ref.files), ref.base_dir
    fs, prefix = pafs.FileSystem.from_uri(ref.root)
    prefix = prefix.rstrip("/")
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    files = sorted(
        i.path for i in infos
        if i.type == pafs.FileType.File
        and not any(part.startswith(_NOT_DATA_PREFIXES)
                    for part in i.path[len(prefix):].split("/") if part)
        and (i.path.lower().endswith(PARQUET_SUFFIXES) or "." not in i.base_name))
    if not files:
        raise InputError(f"{display_uri(ref.root)}: no Parquet files under this prefix",
                         hint="check the bucket and prefix (request records are Parquet "
                              "there, e.g. date=2026-11-30/hour=13/part-0.parquet)")
    return fs, files, prefix


def read_dataset(ref: DatasetRef, ctx: ReadContext) -> DatasetRead:
    """Read a partitioned Parquet dataset of request records as one ``Partial``, with the
    window of ``ctx`` pushed down to partitions and row groups."""
    import pyarrow as pa

    label = display_uri(ref.root) if ref.uri else ref.root
    ctx.report(f"reading {Path(label).name or label}", 0.0)
    try:
        return _read(ref, ctx, label)
    except (pa.ArrowException, OSError) as exc:
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not ref.uri:
            hint = "check the path and that every part file is complete Parquet"
        elif ref.root.startswith(("s3:", "s3a:")):
            hint = ("check the URI and the credentials (AWS_ACCESS_KEY_ID, "
                    "AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL for an "
                    "S3-compatible server)")
        else:
            hint = ("check the URI, the credentials, and that this pyarrow build reads "
                    "that filesystem (s3:// is tested)")
        kind = {"parquet": "Parquet", "jsonl": "JSON Lines"}.get(ref.format,
                                                                 ref.format.upper())
        if ref.format != "parquet":
            hint = ("a part file holds a malformed row or a value of another type than the "
                    "first file's: read that file on its own to see which line")
        raise InputError(f"{label}: cannot read the {kind} dataset ({what[:300]})",
                         hint=hint) from exc


def _read(ref: DatasetRef, ctx: ReadContext, label: str) -> DatasetRead:
    import pyarrow as pa
    import pyarrow.dataset as ds

    from pdprobe.collectors.request_assemble import assemble
    from pdprobe.collectors.request_columns import LOW_CARDINALITY
    from pdprobe.collectors.requests_file import map_columns, require_columns

    if ref.format != "parquet":
        from pdprobe.collectors.requests_dataset_text import read_text_dataset

        return read_text_dataset(ref, ctx, label)
    fs, files, base = _open(ref)
    dataset = ds.dataset(files, format="parquet", filesystem=fs, partitioning="hive",
                         partition_base_dir=base)
    part_names = set(dataset.partitioning.schema.names) if dataset.partitioning else set()
    names = [n for n in dataset.schema.names if n not in part_names]
    cmap = map_columns(names)
    require_columns(Path(label), cmap, names)
    wanted = list(dict.fromkeys(cmap.sources.values()))
    # instance and status columns decoded as dictionaries (codes), as for one file
    as_dictionary = [cmap.sources[c] for c in LOW_CARDINALITY if c in cmap.sources
                     and _is_text(dataset.schema.field(cmap.sources[c]).type)]
    if as_dictionary:
        dataset = ds.dataset(files, filesystem=fs, partitioning="hive", partition_base_dir=base,
                             format=ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(
                                 dictionary_columns=as_dictionary)))
    arrival = cmap.sources["arrival_ts"]
    pushdown = None
    if ctx.window is None:
        scanned: ds.Dataset = dataset
        reserve = None
    else:
        scanned, reserve, pushdown = _windowed(dataset, fs, arrival,
                                               cmap.scales.get("arrival_ts"), ctx)
    # batch by batch into the canonical columns: memory holds them once, not the dataset
    schema = pa.schema([dataset.schema.field(n) for n in wanted])
    batches = scanned.to_batches(columns=wanted, batch_readahead=BATCH_READAHEAD,
                                 fragment_readahead=1)
    assembled = assemble((b for b in batches if b.num_rows), schema, cmap, reserve)
    notes = [f"Hive-partitioned Parquet dataset of {len(files):,} files"
             + (f" (partitions {', '.join(sorted(part_names))})" if part_names else "")]
    return dataset_read(label, assembled, cmap, "parquet-dataset", notes, pushdown)


def _is_text(t: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def dataset_read(label: str, table: pa.Table | Assembled, cmap: ColumnMap, fmt: str,
                 notes: list[str], pushdown: Pushdown | None) -> DatasetRead:
    """The ``DatasetRead`` of the rows read from a dataset (a table, or assembled batches):
    one source labelled ``label`` with the dataset's ``notes`` first."""
    from pdprobe.collectors.requests_file import partial_from_table

    if pushdown is not None:
        notes = [*notes, pushdown.note()]
    rows = table.rows if isinstance(table, Assembled) else table.num_rows
    if rows == 0:
        from pdprobe.dataset import Partial, SourceInfo

        source = SourceInfo(path=label, kind="requests", format=fmt, rows=0,
                            notes=(*notes, "nothing in the --since/--until window"))
        return DatasetRead(Partial(source=source), pushdown)
    partial = partial_from_table(Path(label), table, cmap, fmt)
    from dataclasses import replace

    # a URI is no Path (it would lose a "/"): the source and its hints carry the label
    source = replace(partial.source, path=label, notes=(*notes, *partial.source.notes))
    hints = tuple(replace(h, source=label) for h in partial.role_hints)
    return DatasetRead(replace(partial, source=source, role_hints=hints), pushdown)


def _windowed(dataset: ds.FileSystemDataset, fs: Any, arrival: str, scale: float | None,
              ctx: ReadContext) -> tuple[ds.Dataset, int, Pushdown]:
    """The partitions' row groups that can hold the window (a dataset to scan), how many
    rows they hold, and what the window spared."""
    import pyarrow.dataset as ds

    assert ctx.window is not None
    fragments = list(dataset.get_fragments())
    ranges = [partition_range(ds.get_partition_keys(f.partition_expression))
              for f in fragments]
    time_type = dataset.schema.field(arrival).type
    end = None
    if ctx.window.needs_capture_end:
        end = _latest(fragments, ranges, arrival, time_type, scale)
    lo, hi = ctx.window.resolve(end)
    keep = [f for f, r in zip(fragments, ranges, strict=True)
            if r is None or (r[1] > lo and r[0] <= hi)]
    expr = _time_filter(arrival, time_type, scale, lo - PUSHDOWN_MARGIN_S,
                        hi + PUSHDOWN_MARGIN_S, keep)
    groups = read = unread = 0
    pieces: list[Any] = []
    for frag in keep:
        frag.ensure_complete_metadata()
        meta = frag.metadata
        groups += meta.num_row_groups
        chosen = frag.split_by_row_group(expr) if expr is not None else [frag]
        chosen_ids = {rg.id for f in chosen for rg in f.row_groups} if expr is not None else None
        read += len(chosen_ids) if chosen_ids is not None else meta.num_row_groups
        if chosen_ids is not None:
            unread += sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups)
                          if i not in chosen_ids)
        pieces.extend(chosen)
    # whole row groups: the exact cut (time_window.py) then counts what was outside
    sub = ds.FileSystemDataset(pieces, dataset.schema, dataset.format, filesystem=fs)
    rows = sum(rg.num_rows for f in pieces for rg in f.row_groups)
    named = [r for r in ranges if r is not None]
    span = (min(r[0] for r in named), max(r[1] for r in named)) if named else None
    return sub, rows, Pushdown(len(fragments), len(keep), groups, read, unread, span)


def _scale(time_type: pa.DataType, scale: float | None, sample_max: float | None) -> float | None:
    """Seconds per unit of a numeric arrival column (None: not numeric, no pushdown)."""
    import pyarrow as pa

    if not (pa.types.is_integer(time_type) or pa.types.is_floating(time_type)):
        return None
    if scale is not None:
        return scale
    if sample_max is not None:
        for bound, factor in EPOCH_UNIT_BOUNDS:
            if abs(sample_max) > bound:
                return factor
    return 1.0


def _stat_max(frag: ds.ParquetFileFragment, column: str) -> Any:
    """The largest statistic of ``column`` in a fragment's row groups (None without any)."""
    frag.ensure_complete_metadata()
    meta = frag.metadata
    idx = meta.schema.to_arrow_schema().get_field_index(column)
    best = None
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(idx).statistics if idx >= 0 else None
        if stats is None or not stats.has_min_max:
            return None  # a row group without statistics could hold anything
        best = stats.max if best is None else max(best, stats.max)
    return best


def _seconds(value: Any, time_type: pa.DataType, scale: float | None) -> float | None:
    """A statistic of the arrival column as Unix seconds (None when it cannot be)."""
    import pyarrow as pa

    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        factor = _scale(time_type, scale, float(value))
        return float(value) * factor if factor is not None else None
    if pa.types.is_timestamp(time_type) and hasattr(value, "timestamp"):
        return float(value.timestamp())
    return None


def _latest(fragments: list[Any], ranges: list[tuple[float, float] | None], arrival: str,
            time_type: pa.DataType, scale: float | None) -> float | None:
    """The dataset's last arrival from the statistics of its latest partitions (all of them
    when partitions name no time); None when a file lacks statistics."""
    known = [r[1] for r in ranges if r is not None]
    last_start = max((r[0] for r in ranges if r is not None), default=None)
    candidates = [f for f, r in zip(fragments, ranges, strict=True)
                  if r is None or last_start is None or r[1] > last_start]
    ends = []
    for frag in candidates:
        value = _stat_max(frag, arrival)
        seconds = _seconds(value, time_type, scale) if value is not None else None
        if seconds is None:
            return max(known) if known else None  # partition names still bound the end
        ends.append(seconds)
    return max(ends) if ends else None


def _time_filter(arrival: str, time_type: pa.DataType, scale: float | None, lo: float,
                 hi: float, fragments: list[Any]) -> ds.Expression | None:
    """``lo <= arrival <= hi`` in the column's own type and unit (None when the column is
    text or a date: then only partitions are pruned)."""
    import math

    import pyarrow as pa
    import pyarrow.dataset as ds

    field = ds.field(arrival)
    bounds = []
    if pa.types.is_timestamp(time_type):
        per_s = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[time_type.unit]
        for value, op in ((lo, "ge"), (hi, "le")):
            if math.isfinite(value):
                bounds.append((op, pa.scalar(int(value * per_s), type=time_type)))
    else:
        sample = None
        if scale is None and fragments:
            sample = _stat_max(fragments[0], arrival)
        factor = _scale(time_type, scale,
                        float(sample) if isinstance(sample, int | float) else None)
        if factor is None:
            return None
        for value, op in ((lo, "ge"), (hi, "le")):
            if math.isfinite(value):
                bounds.append((op, pa.scalar(value / factor, type=pa.float64())))
    expr = None
    for op, scalar in bounds:
        term = field >= scalar if op == "ge" else field <= scalar
        expr = term if expr is None else expr & term
    return expr
