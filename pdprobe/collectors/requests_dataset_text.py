"""Partitioned CSV/TSV and JSON Lines request records read as one input: a data lake's
``date=2026-11-30/hour=13/part-0.csv`` folders (local, uncompressed members).

The members are one ``pyarrow.dataset`` with Hive partitioning. Columns are mapped, and CSV
types inferred, from the first member as for one file of it (``request_formats``,
``request_jsonl``); every member is then read with those types, only the mapped columns
converted, batch by batch into the canonical columns (``request_assemble``), so memory does
not grow with the dataset. With ``--since``/``--until`` the window is pushed down to the
partitions (the time range their ``date``/``hour``/... names say, as for Parquet): members of
other partitions are never opened; text has no statistics, so within the partitions kept
every row is parsed and ``collectors/time_window.py`` cuts the exact window.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.requests_dataset import (
    DatasetRead,
    Pushdown,
    dataset_read,
    partition_range,
)
from pdprobe.collectors.walk import DatasetRef

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

# Leading bytes of the first member read to map its columns and learn its types.
HEAD_BYTES: Final = 8 << 20
# Batches decoded ahead of the one being converted (per member, one member at a time): a
# little overlap of parsing and conversion, memory still one member's few blocks.
BATCH_READAHEAD: Final = 2


def read_text_dataset(ref: DatasetRef, ctx: ReadContext, label: str) -> DatasetRead:
    """Read a partitioned CSV/TSV or JSON Lines dataset as one ``DatasetRead``."""
    import pyarrow.dataset as ds

    from pdprobe.collectors.request_assemble import assemble

    files = list(ref.files)
    first = Path(files[0])
    with first.open("rb") as fh:
        head = fh.read(HEAD_BYTES)
    file_format, schema, cmap = _format(ref.format, first, head)
    found = ds.dataset(files, format=file_format, partitioning="hive",
                       partition_base_dir=ref.base_dir)
    # the mapped columns with the first member's types, and the partition keys
    partitions = found.partitioning.schema if found.partitioning else None
    dataset = ds.dataset(files, schema=_with(schema, partitions), format=file_format,
                         partitioning=found.partitioning, partition_base_dir=ref.base_dir)
    part_names = set(dataset.partitioning.schema.names) if dataset.partitioning else set()
    wanted = list(dict.fromkeys(cmap.sources.values()))
    fragments = list(dataset.get_fragments())
    pushdown = None
    if ctx.window is not None:
        ranges = [partition_range(ds.get_partition_keys(f.partition_expression))
                  for f in fragments]
        named = [r for r in ranges if r is not None]
        # no statistics in text: the partitions' names bound the capture's end
        end = max(r[1] for r in named) if named and ctx.window.needs_capture_end else None
        lo, hi = ctx.window.resolve(end)
        kept = [f for f, r in zip(fragments, ranges, strict=True)
                if r is None or (r[1] > lo and r[0] <= hi)]
        span = (min(r[0] for r in named), max(r[1] for r in named)) if named else None
        pushdown = Pushdown(len(fragments), len(kept), 0, 0, 0, span)
        fragments = kept
    if ref.format != "jsonl":
        _check_headers([f.path for f in fragments], wanted, "\t" if ref.format == "tsv" else ",",
                       first)
    sub = ds.FileSystemDataset(fragments, dataset.schema, dataset.format,
                               filesystem=dataset.filesystem)
    wanted_schema = _select(dataset.schema, wanted)
    batches = sub.to_batches(columns=wanted, batch_readahead=BATCH_READAHEAD,
                             fragment_readahead=1)
    assembled = assemble(_non_empty(batches), wanted_schema, cmap)
    kind = {"csv": "CSV", "tsv": "TSV", "jsonl": "JSON Lines"}[ref.format]
    notes = [f"Hive-partitioned {kind} dataset of {len(files):,} files"
             + (f" (partitions {', '.join(sorted(part_names))})" if part_names else "")]
    read = dataset_read(label, assembled, cmap, f"{ref.format}-dataset", notes, None)
    if pushdown is None:
        return read
    from dataclasses import replace

    note = (f"window pushed down: opened {pushdown.files_read:,} of {pushdown.files:,} files "
            "(partitions)")
    source = replace(read.partial.source, notes=(*read.partial.source.notes[:1], note,
                                                 *read.partial.source.notes[1:]))
    return DatasetRead(replace(read.partial, source=source), pushdown)


def _format(fmt: str, first: Path, head: bytes) -> tuple[Any, pa.Schema, Any]:
    """The dataset's file format, its schema of mapped columns and its column map, from the
    first member's leading bytes."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.dataset as ds
    import pyarrow.json as pjson

    from pdprobe.collectors.request_columns import (
        LOW_CARDINALITY,
        STRING_COLUMNS,
        _require,
        map_columns,
    )
    from pdprobe.collectors.request_formats import CSV_BLOCK_BYTES, _header
    from pdprobe.collectors.request_jsonl import JSON_BLOCK_BYTES, _schema

    if fmt == "jsonl":
        schema, cmap = _schema(first, head, False)
        return (ds.JsonFileFormat(
            read_options=pjson.ReadOptions(block_size=JSON_BLOCK_BYTES),
            parse_options=pjson.ParseOptions(explicit_schema=schema,
                                             unexpected_field_behavior="ignore")),
                schema, cmap)
    delimiter = "\t" if fmt == "tsv" else ","
    names = _header(head, delimiter)
    cmap = map_columns(names)
    _require(first, cmap, names)
    wanted = list(dict.fromkeys(cmap.sources.values()))
    strings = {cmap.sources[c]: pa.dictionary(pa.int32(), pa.string()) if c in LOW_CARDINALITY
               else pa.string() for c in STRING_COLUMNS if c in cmap.sources}
    parse = pcsv.ParseOptions(delimiter=delimiter)
    # the types of the first block of the first member, as one file of it is read
    inferred = pcsv.read_csv(
        pa.py_buffer(head[:head.rfind(b"\n") + 1] or head),
        read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES), parse_options=parse,
        convert_options=pcsv.ConvertOptions(include_columns=wanted, column_types=strings,
                                            strings_can_be_null=True, check_utf8=False))
    types = {f.name: f.type for f in inferred.schema}
    return (ds.CsvFileFormat(
        parse_options=parse,
        convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                            check_utf8=False),
        read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES)),
            inferred.schema, cmap)


def _check_headers(paths: list[str], wanted: list[str], delimiter: str, first: Path) -> None:
    """Every member to be read names the mapped columns in its header line: pyarrow would read
    a member without one as nulls (its rows then dropped as unreadable, the file unnamed), so
    such a member is an ``InputError`` naming it. One line per member is read."""
    from pdprobe.collectors.request_formats import _header
    from pdprobe.errors import InputError

    for path in paths:
        with open(path, "rb") as fh:
            names = set(_header(fh.readline(HEAD_BYTES), delimiter))
        missing = [c for c in wanted if c not in names]
        if missing:
            raise InputError(
                f"{path}: the header has no column {', '.join(missing)}, which the dataset's "
                f"first member {first} has",
                hint="give every file of a partitioned dataset the same header, or pass the odd "
                     "file as an input of its own")


def _with(schema: pa.Schema, partitions: pa.Schema | None) -> pa.Schema:
    import pyarrow as pa

    if partitions is None:
        return schema
    return pa.schema([*schema, *(f for f in partitions if f.name not in schema.names)])


def _select(schema: pa.Schema, names: list[str]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([schema.field(n) for n in names])


def _non_empty(batches: Iterator[Any]) -> Iterator[Any]:
    """The scanner's batches without the empty ones it yields between members."""
    for batch in batches:
        if batch.num_rows:
            yield batch
