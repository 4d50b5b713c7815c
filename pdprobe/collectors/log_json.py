"""Read JSON-lines log exports into columns: the log text and the facts naming its stream.

Loki logcli, Vector, Fluent Bit, ``journalctl -o json`` and CloudWatch each keep the text and
the pod/container/host under their own field names (``JSON_TEXT``, ``JSON_FIELDS``, upstream
sources in the comments and in docs/inputs/logs.md). ``read_json`` reads all lines at once with
pyarrow; ``read_json_python`` is the line-by-line fallback. ``log_streams`` turns the columns
into streams.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe.collectors.log_columns import stamp_seconds

# Where JSON exports keep the log text, first present wins: Vector / CloudWatch `message`,
# Fluent Bit / Docker `log`, Loki logcli `line`, journald `MESSAGE`.
JSON_TEXT: Final = ("message", "log", "line", "MESSAGE")
# Fact -> JSON paths, first present wins. Fluent Bit's kubernetes filter: kubernetes.pod_name,
# namespace_name, container_name, host; Vector kubernetes_logs: kubernetes.pod_name,
# pod_namespace, container_name, pod_node_name, pod_ip; Loki/Promtail labels: pod, container,
# namespace, node_name; journald: _HOSTNAME, _SYSTEMD_UNIT / SYSLOG_IDENTIFIER; CloudWatch:
# logStreamName; Docker's fluentd driver: container_name.
JSON_FIELDS: Final = {
    "pod": ("kubernetes.pod_name", "labels.pod", "labels.pod_name"),
    "container": ("kubernetes.container_name", "labels.container", "labels.container_name"),
    "namespace": ("kubernetes.namespace_name", "kubernetes.pod_namespace", "labels.namespace"),
    "node": ("kubernetes.host", "kubernetes.pod_node_name", "labels.node_name", "labels.node"),
    "pod_ip": ("kubernetes.pod_ip",),
    "host": ("_HOSTNAME",),
    "unit": ("_SYSTEMD_UNIT", "SYSLOG_IDENTIFIER"),
    "service": ("container_name",),
    "stream": ("logStreamName",),
    "stamp": ("timestamp", "@timestamp", "time", "date", "__REALTIME_TIMESTAMP"),
}


def read_json(lines: pa.Array) -> tuple[dict[str, pa.Array], np.ndarray]:
    """Per line the text and fact columns ('' where absent) and whether the line parsed.

    pyarrow reads the lines at once with a schema of just the needed fields (types of the
    time-stamp fields taken from the first lines); a file it rejects (a malformed line, a
    field changing type) is read line by line with ``json``.
    """
    import pyarrow.json as pj

    sample = [_loads(str(x)) for x in lines.slice(0, 20).to_pylist()]
    schema = _schema([s for s in sample if s is not None])
    if schema is not None and len(lines):
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()),
                                                         lines.cast(pa.string())), "\n")
        try:
            options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
            table = pj.read_json(io.BytesIO(str(joined[0].as_py()).encode("utf-8")),
                                 parse_options=options)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = None
        if table is not None and table.num_rows == len(lines):
            return _columns(table), np.ones(len(lines), dtype=bool)
    return read_json_python(lines)


def _loads(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else None


def _schema(sample: Sequence[dict[str, Any]]) -> pa.Schema | None:
    """Only the fields pdprobe reads, typed as in the sample (None if they disagree)."""
    paths = list(JSON_TEXT) + [p for ps in JSON_FIELDS.values() for p in ps]
    top: dict[str, Any] = {}
    for path in paths:
        head, _, sub = path.partition(".")
        kinds = {float if type(v) is int else type(v)
                 for obj in sample if (v := _get(obj, path)) is not None}
        if len(kinds) > 1 or not kinds <= {str, float}:
            return None
        typ = pa.float64() if kinds == {float} else pa.string()
        if sub:
            top.setdefault(head, {})[sub] = typ
        else:
            top[head] = typ
    fields = [pa.field(k, pa.struct(list(v.items())) if isinstance(v, dict) else v)
              for k, v in top.items()]
    return pa.schema(fields)


def _get(obj: dict[str, Any], path: str) -> Any:
    head, _, sub = path.partition(".")
    value = obj.get(head)
    return (value.get(sub) if isinstance(value, dict) else None) if sub else value


def _field(table: pa.Table, path: str) -> pa.Array:
    head, _, sub = path.partition(".")
    col = table.column(head).combine_chunks()
    return pc.struct_field(col, sub) if sub else col


def _first_present(arrays: Sequence[pa.Array]) -> pa.Array:
    """Per row the first non-empty string of ``arrays``."""
    out = pc.cast(arrays[0], pa.large_string())
    for arr in arrays[1:]:
        empty = pc.fill_null(pc.equal(out, ""), True)
        out = pc.if_else(empty, pc.cast(arr, pa.large_string()), out)
    return out


def _columns(table: pa.Table) -> dict[str, pa.Array]:
    out = {"text": pc.fill_null(_first_present([_field(table, p) for p in JSON_TEXT]), "")}
    for fact, paths in JSON_FIELDS.items():
        if fact == "stamp":  # strings or numbers per field: converted field by field
            seconds = np.full(table.num_rows, np.nan)
            for path in paths:
                seconds = np.where(np.isnan(seconds), stamp_seconds(_field(table, path)),
                                   seconds)
            out[fact] = pa.array(seconds)
        else:
            out[fact] = pc.fill_null(_first_present([_field(table, p) for p in paths]), "")
    return out


def read_json_python(lines: pa.Array) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The slow path, one ``json.loads`` per line: malformed lines come out not ok."""
    keys = ["text", *JSON_FIELDS]
    values: dict[str, list[str]] = {k: [] for k in keys}
    ok = np.zeros(len(lines), dtype=bool)
    for i, line in enumerate(lines.to_pylist()):
        obj = _loads(str(line)) if line else None
        ok[i] = obj is not None
        for key in keys:
            found = [v for p in (JSON_TEXT if key == "text" else JSON_FIELDS[key])
                     if obj is not None and (v := _get(obj, p)) not in (None, "")]
            values[key].append("" if not found else found[0] if isinstance(found[0], str)
                               else json.dumps(found[0]))
    return {k: pa.array(v, type=pa.large_string()) for k, v in values.items()}, ok
