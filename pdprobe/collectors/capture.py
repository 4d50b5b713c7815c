"""pdprobe capture files: one Parquet file holding a collected dataset, read back offline.

Layout (docs/live.md): every table of the ``Partial`` (``metrics``, ``network``, ``events``,
``requests``) goes into one Parquet table as rows tagged by a dictionary-encoded ``table``
column; the columns are the union of the tables' canonical columns (a column shared by two
tables has the same meaning and type in both, e.g. ``ts``), null where a table has none. The
schema metadata key ``pdprobe.capture`` holds a JSON document with the format version, the
pdprobe version, the source, role hints, nodes, engines, warnings and the collection metadata
(window, steps, selector, every query issued with its timing). ``io.sniff`` recognises a
capture by that key. Credentials are never written: the collector never puts them in any of
these fields, and ``write_capture`` refuses a document that contains one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from pdprobe import __version__
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.io import CAPTURE_METADATA_KEY, default_file_mode
from pdprobe.dataset import (
    DEPLOYMENT_COLUMNS,
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    REQUEST_COLUMNS,
    Partial,
    RoleHint,
    SourceInfo,
    conform,
)
from pdprobe.errors import InputError, UsageError
from pdprobe.signals import Role

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

FORMAT: Final = "pdprobe-capture"
FORMAT_VERSION: Final = 1
TABLE_COLUMN: Final = "table"
TABLES: Final[Mapping[str, Mapping[str, str]]] = {
    "metrics": METRIC_COLUMNS,
    "network": NETWORK_COLUMNS,
    "events": EVENT_COLUMNS,
    "requests": REQUEST_COLUMNS,
    "deployment": DEPLOYMENT_COLUMNS,
}
# Tables only written when they have rows (added after format version 1's first release).
OPTIONAL_TABLES: Final = frozenset({"deployment"})
DEFAULT_NAME: Final = "pdprobe-capture-{stamp}.parquet"


def _union_columns() -> dict[str, str]:
    out: dict[str, str] = {}
    for columns in TABLES.values():
        for name, dtype in columns.items():
            if out.setdefault(name, dtype) != dtype:
                raise AssertionError(f"capture column {name!r} has two types")  # a code bug
    return out


def _arrow_type(dtype: str) -> pa.DataType:
    import pyarrow as pa

    return {"float64": pa.float64(), "int64": pa.int64(), "string": pa.string(),
            "category": pa.string()}[dtype]  # categoricals are written as their strings


@dataclass(frozen=True)
class CaptureInfo:
    """A capture file written by ``collect``: where, rows per table and size in bytes."""
    path: Path
    rows: dict[str, int]
    bytes: int


def capture_path(output: Path, now: datetime | None = None) -> Path:
    """``output`` itself, or a timestamped file name inside it when it is a folder."""
    if output.is_dir():
        stamp = (now or datetime.now(tz=UTC)).strftime("%Y%m%dT%H%M%SZ")
        return output / DEFAULT_NAME.format(stamp=stamp)
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{output}: folder {parent} does not exist", hint="create it first")
    return output


def write_capture(partial: Partial, output: Path, collection: Mapping[str, Any] | None = None,
                  secrets: Sequence[str] = ()) -> CaptureInfo:
    """Write ``partial`` (and the collection metadata) atomically as one Parquet file.

    The file appears only when complete: it is written to a temporary file in the target
    folder and renamed at the end.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = capture_path(output)
    union = _union_columns()
    schema = pa.schema([(TABLE_COLUMN, pa.dictionary(pa.int8(), pa.string())),
                        *((name, _arrow_type(dtype)) for name, dtype in union.items())])
    parts: list[pa.Table] = []
    rows: dict[str, int] = {}
    for table, columns in TABLES.items():
        frame = getattr(partial, table)
        if (frame is None or len(frame) == 0) and table in OPTIONAL_TABLES:
            continue  # absent from the metadata: older captures read the same way
        if frame is None or len(frame) == 0:
            rows[table] = 0
            continue
        frame = conform(frame, columns)
        n = len(frame)
        rows[table] = n
        arrays: list[pa.Array] = [pa.DictionaryArray.from_arrays(
            pa.array([0] * n, type=pa.int8()), pa.array([table]))]
        for name, dtype in union.items():
            if name in columns:
                arrays.append(_to_arrow(frame[name], dtype))
            else:
                arrays.append(pa.nulls(n, type=_arrow_type(dtype)))
        parts.append(pa.Table.from_arrays(arrays, schema=schema))
    body = (pa.concat_tables(parts, promote_options="none").unify_dictionaries()
            if parts else schema.empty_table())
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "pdprobe_version": __version__,
        "created_at": datetime.now(tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "tables": rows,
        "source": asdict(partial.source),
        "request_columns": sorted(partial.request_columns),
        "role_hints": [asdict(h) for h in partial.role_hints],
        "nodes": dict(partial.nodes),
        "engines": dict(partial.engines),
        "warnings": list(partial.warnings),
        "collection": dict(collection or {}),
    }
    text = json.dumps(doc, sort_keys=True, default=_json_default)
    for secret in secrets:
        if secret and secret in text:
            raise AssertionError("a credential reached the capture metadata")  # a code bug
    body = body.replace_schema_metadata({CAPTURE_METADATA_KEY: text.encode("utf-8")})
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(body, tmp, compression="zstd")
        os.chmod(tmp, default_file_mode())  # mkstemp makes 0600; a capture is a normal file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return CaptureInfo(path=path, rows=rows, bytes=path.stat().st_size)


def _to_arrow(series: pd.Series, dtype: str) -> pa.Array:
    import pyarrow as pa

    if dtype in ("string", "category"):
        values = series.astype(object).where(series.notna(), None).tolist()
        return pa.array(values, type=pa.string())
    if dtype == "int64":
        return pa.array(series.to_numpy(dtype="int64"), type=pa.int64())
    return pa.array(series.to_numpy(dtype="float64"), type=pa.float64())


def _json_default(value: object) -> object:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(cast(Any, value))
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    if isinstance(value, Path):
        return str(value)
    try:
        return float(cast(Any, value))
    except (TypeError, ValueError):
        return str(value)


def read_metadata(path: Path) -> dict[str, Any]:
    """The ``pdprobe.capture`` document of a capture file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({_short(exc)})",
                         hint="copy the capture again; it may be truncated") from None
    raw = (schema.metadata or {}).get(CAPTURE_METADATA_KEY)
    if raw is None:
        raise InputError(f"{path}: Parquet file without pdprobe capture metadata",
                         hint="only files written by 'pdprobe collect' are captures")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: the capture metadata is not valid JSON ({_short(exc)})",
                         hint="copy the capture again") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"{path}: metadata key {CAPTURE_METADATA_KEY.decode()} does not describe "
                         f"a pdprobe capture", hint="only files written by 'pdprobe collect' are captures")
    version = doc.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise InputError(f"{path}: capture format version {version!r} is newer than this "
                         f"pdprobe reads ({FORMAT_VERSION})",
                         hint=f"upgrade pdprobe (written by pdprobe {doc.get('pdprobe_version')})")
    return doc


def read_capture(path: Path, ctx: ReadContext) -> Partial:
    """A capture file back as the ``Partial`` it was written from."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    doc = read_metadata(path)
    ctx.report(f"reading {path.name}", 0.0)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: the capture's data cannot be read ({_short(exc)})",
                         hint="copy the capture again; it may be truncated") from None
    if TABLE_COLUMN not in table.column_names:
        raise InputError(f"{path}: capture without a {TABLE_COLUMN!r} column",
                         hint="the file was changed after 'pdprobe collect' wrote it")
    tag = table.column(TABLE_COLUMN).cast(pa.string())
    frames: dict[str, pd.DataFrame | None] = {}
    for name, columns in TABLES.items():
        mask = pc.equal(tag, name)
        part = table.filter(mask)
        if part.num_rows == 0:
            frames[name] = None
            continue
        missing = [c for c in columns if c not in part.column_names]
        if missing:
            raise InputError(f"{path}: capture table {name!r} lacks column {missing[0]!r}",
                             hint="the file was changed after 'pdprobe collect' wrote it")
        frames[name] = conform(part.select(list(columns)).to_pandas(), columns)
        ctx.report(f"reading {path.name}", 0.8)
    expected = doc.get("tables") or {}
    for name, n in expected.items():
        got = 0 if frames.get(name) is None else len(cast("pd.DataFrame", frames[name]))
        if isinstance(n, int) and got != n:
            raise InputError(f"{path}: capture table {name!r} holds {got} rows, its metadata "
                             f"says {n}", hint="copy the capture again; it may be truncated")
    src = doc.get("source") or {}
    collection = doc.get("collection") or {}
    origin = (f"captured from {src.get('path', '?')} at {doc.get('created_at', '?')} by pdprobe "
              f"{doc.get('pdprobe_version', '?')}")
    window = collection.get("window") or {}
    if window:
        origin += (f" (window {window.get('start', '?')} to {window.get('end', '?')}, "
                   f"{len(collection.get('queries') or [])} queries)")
    rows = sum(0 if f is None else len(f) for f in frames.values())
    source = SourceInfo(path=str(path), kind="capture", format="parquet", rows=rows,
                        skipped=int(src.get("skipped", 0) or 0),
                        notes=(origin, *[str(n) for n in src.get("notes") or ()]))
    hints = tuple(_hint(h) for h in doc.get("role_hints") or ())
    ctx.report(f"read {path.name}", 1.0)
    return Partial(
        source=source,
        requests=frames["requests"],
        metrics=frames["metrics"],
        network=frames["network"],
        events=frames["events"],
        deployment=frames.get("deployment"),
        request_columns=frozenset(str(c) for c in doc.get("request_columns") or ()),
        role_hints=hints,
        nodes={str(k): str(v) for k, v in (doc.get("nodes") or {}).items()},
        engines={str(k): str(v) for k, v in (doc.get("engines") or {}).items()},
        warnings=tuple(str(w) for w in doc.get("warnings") or ()),
    )


def _hint(raw: Mapping[str, Any]) -> RoleHint:
    role = str(raw.get("role", "unknown"))
    if role not in ("prefill", "decode", "frontend", "unknown"):
        role = "unknown"
    return RoleHint(instance=str(raw.get("instance", "")), role=cast(Role, role),
                    how=str(raw.get("how", "")), strength=int(raw.get("strength", 0)),
                    source=str(raw.get("source", "")))


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:160]
