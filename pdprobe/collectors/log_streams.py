"""Split a merged log into per-instance streams by the prefix its collector wrote.

``detect_format`` recognises a tool's line prefix from a sample; ``split_streams`` removes it,
vectorised over a pyarrow array, giving per line a stream id, the engine's own message and the
collector's time stamp (UTC), and per stream an ``InstanceKey``. Formats as the tools print them
(upstream source in the comments of ``PATTERNS``/``JSON_FIELDS`` and in docs/inputs/logs.md):
``kubectl logs --prefix [--timestamps]``, ``docker compose logs [-t]``, stern's default template,
``journalctl -o short-iso``, bare ``--timestamps`` stamps, and JSON-lines exports (Loki logcli,
Vector, Fluent Bit, ``journalctl -o json``, CloudWatch). Unprefixed lines are one stream named
after the file (``names.name_from_file``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe.collectors.names import facts_of, name_from_file
from pdprobe.dataset import InstanceKey

# A format is taken when at least this share of the sampled lines carry its prefix: merged
# files also hold the odd unprefixed line (a tool's own error message, a wrapped line).
DETECT_SHARE: Final = 0.5
# Lines sampled to detect the format; the candidate lines of a file are all engine lines.
DETECT_SAMPLE: Final = 2000
# ANSI SGR colour codes (docker compose and stern colour the prefix on a TTY).
ANSI: Final = r"\x1b\[[0-9;]*m"
_ESC: Final = 0x1B
# Bytes compared per step when looking for ESC: small temporaries, no page-fault storm.
_SCAN_BLOCK: Final = 8 * 2**20
# RFC 3339 time stamp with optional fraction and zone (kubectl, docker, compose, stern, and
# journalctl's %z without a colon).
_STAMP: Final = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
# A DNS label with at least one letter: pod, container and namespace names (not a date).
_LABEL: Final = r"[a-z0-9][-a-z0-9]*[a-z][-a-z0-9]*|[a-z]"
# Anchored prefix patterns; the group `msg` is the engine's own line. kubectl: kubernetes
# staging/src/k8s.io/kubectl/pkg/cmd/logs/logs.go addPrefixIfNeeded (the prefix wraps the API
# server's stamped lines, so it comes first); journald: systemd src/shared/logs-show.c; compose:
# docker/compose cmd/formatter/logs.go setPrefix (name padded to the longest + 1, then " | ");
# stern: stern/stern cmd/cmd.go generateTemplate (namespace first when several are tailed).
PATTERNS: Final = {
    "kubectl": (rf"^\[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^\]\s]*)\] "
                rf"(?:(?P<stamp>{_STAMP}) )?(?P<msg>.*)$"),
    "journald": (rf"^(?P<stamp>{_STAMP}) (?P<host>\S+) (?P<unit>[^\s\[:]+)(?:\[\d+\])?: "
                 rf"(?P<msg>.*)$"),
    "compose": (rf"^(?P<service>[A-Za-z0-9][A-Za-z0-9_.-]*) +\| "
                rf"(?:(?P<stamp>{_STAMP}) )?(?P<msg>.*)$"),
    "stern": (rf"^(?:(?P<namespace>{_LABEL}) )?(?P<pod>(?:{_LABEL})(?:\.[-a-z0-9]+)*) "
              rf"(?P<container>{_LABEL}) (?:(?P<stamp>{_STAMP}) )?(?P<msg>.*)$"),
    "timestamps": rf"^(?P<stamp>{_STAMP}) (?P<msg>.*)$",
}
# Per format: the name in messages, and the InstanceKey.origin of its streams.
LABELS: Final = {"none": "no collector prefix", "kubectl": "kubectl logs --prefix",
                 "journald": "journalctl -o short-iso", "compose": "docker compose logs",
                 "stern": "stern", "timestamps": "kubectl/docker --timestamps",
                 "json": "JSON lines export"}
ORIGINS: Final = {"kubectl": "kubectl --prefix", "journald": "journalctl prefix",
                  "compose": "docker compose prefix", "stern": "stern prefix",
                  "json": "JSON export fields"}
_SLASH: Final = pa.scalar("/", pa.large_string())
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
# Epoch numbers above these are milliseconds / microseconds (CloudWatch ms, journald µs).
_MS_ABOVE: Final = 1e11
_US_ABOVE: Final = 1e14


@dataclass(frozen=True)
class StreamSplit:
    """Lines split into streams: per line a stream id, message and collector stamp."""

    format: str  # a key of LABELS
    stream: np.ndarray  # per line: index into `keys`, -1 where the prefix is malformed
    message: pa.Array  # per line: the text with the collector's prefix removed
    stamp_s: np.ndarray  # per line: the collector's time stamp, Unix seconds UTC, NaN if none
    keys: tuple[InstanceKey, ...]

    @property
    def label(self) -> str:
        """The merged-log layout's name as notes print it (``kubectl --prefix``, ``Loki``, ...)."""
        return LABELS[self.format]


def file_key(path: Path | str, instance: str | None = None) -> tuple[InstanceKey, str]:
    """The key of an unprefixed file (``--instance`` or the file name) and a note on it."""
    if instance:
        return (InstanceKey(instance, facts_of(instance), "--instance"),
                f"instance name {instance!r} taken from --instance")
    name, how = name_from_file(path)
    key = InstanceKey(name, facts_of(name), "file name")
    if how != "file name":
        return key, (f"instance name {name!r} taken from the file name (host_port read as "
                     f"host:port, the Prometheus instance label); pass --instance to set it")
    return key, f"instance name {name!r} taken from the file name; pass --instance to set it"


def strip_ansi(lines: pa.Array) -> pa.Array:
    """``lines`` without ANSI colour codes (one cheap scan when there are none)."""
    if not len(lines):
        return lines
    data = lines.buffers()[-1]  # all the characters, searched in place for ESC (no regex)
    if data is None:
        return lines
    chars = np.frombuffer(data, dtype=np.uint8)
    if not any((chars[i:i + _SCAN_BLOCK] == _ESC).any()
               for i in range(0, len(chars), _SCAN_BLOCK)):
        return lines
    return pc.replace_substring_regex(lines, ANSI, "")


def detect_format(lines: pa.Array) -> str:
    """The collector format most of a sample of ``lines`` carry, or ``none``."""
    sample = lines.slice(0, DETECT_SAMPLE)
    if not len(sample):
        return "none"
    need = max(1, int(np.ceil(DETECT_SHARE * len(sample))))
    trimmed = pc.utf8_trim_whitespace(sample)
    is_json = pc.and_(pc.starts_with(trimmed, "{"), pc.ends_with(trimmed, "}"))
    if _count(is_json) >= need:
        return "json"
    best, best_n = "none", 0
    for fmt, pattern in PATTERNS.items():
        n = _count(pc.match_substring_regex(sample, pattern))
        if n > best_n:
            best, best_n = fmt, n
    return best if best_n >= need else "none"


def split_streams(lines: pa.Array, fmt: str, default: InstanceKey) -> StreamSplit:
    """Split ``lines`` (ANSI-free) by format ``fmt``; ``default`` names unprefixed lines."""
    n = len(lines)
    if fmt == "none":
        return StreamSplit(fmt, np.zeros(n, dtype=np.int64), lines, np.full(n, np.nan),
                           (default,))
    if fmt == "json":
        return _split_json(lines, default)
    m = pc.extract_regex(lines, PATTERNS[fmt])
    ok = _mask(m.is_valid())
    fields = {f.name: pc.fill_null(pc.struct_field(m, f.name), "") for f in m.type}
    message = pc.if_else(pa.array(ok), fields["msg"], lines)
    stamp = _stamp_seconds(fields["stamp"]) if "stamp" in fields else np.full(n, np.nan)
    if fmt == "timestamps":
        return StreamSplit(fmt, np.where(ok, 0, -1), message, stamp, (default,))
    if fmt == "journald":
        names = pc.binary_join_element_wise(fields["host"], fields["unit"], _SLASH)
        facts = {"host": fields["host"], "unit": fields["unit"]}
    elif fmt == "compose":
        names, facts = fields["service"], {"service": fields["service"]}
    else:  # kubectl, stern
        names = fields["pod"]
        facts = {k: fields[k] for k in ("pod", "container", "namespace") if k in fields}
    stream, keys = _keys(names, ok, facts, ORIGINS[fmt])
    return StreamSplit(fmt, stream, message, stamp, keys)


def _mask(values: pa.Array) -> np.ndarray:
    """A boolean pyarrow array as numpy, null as False."""
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


def _count(mask: pa.Array) -> int:
    return int(_mask(mask).sum())


def _keys(names: pa.Array, ok: np.ndarray, facts: dict[str, pa.Array],
          origin: str) -> tuple[np.ndarray, tuple[InstanceKey, ...]]:
    """Stream ids by distinct name (first seen first) and one key per stream, with the facts
    of its first line."""
    ok = ok & _mask(pc.not_equal(names, ""))
    stream = np.full(len(names), -1, dtype=np.int64)
    if not ok.any():
        return stream, ()
    good = np.flatnonzero(ok)
    encoded = pc.dictionary_encode(names.take(pa.array(good)))
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    _, first = np.unique(codes, return_index=True)  # per dictionary entry
    order = np.argsort(first, kind="stable")  # dictionary entries in order of appearance
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    stream[good] = rank[codes]
    keys = []
    for entry in order:  # one iteration per stream
        row = int(good[first[entry]])
        name = str(names[row].as_py())
        pairs = tuple((kind, str(v)) for kind, arr in facts.items() if (v := arr[row].as_py()))
        keys.append(InstanceKey(name, pairs, origin))
    return stream, tuple(keys)


def _stamp_seconds(values: pa.Array) -> np.ndarray:
    """Unix seconds (UTC) from RFC 3339 strings or epoch numbers; NaN where absent."""
    n = len(values)
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
        return _epoch(np.asarray(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False),
                                 dtype=float))
    values = pc.cast(values, pa.large_string())
    m = pc.extract_regex(values, r"^\s*(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<H>\d\d):"
                                 r"(?P<M>\d\d):(?P<S>\d\d)(?:[.,](?P<f>\d{1,9}))?\s*"
                                 r"(?:Z|(?P<sign>[+-])(?P<oh>\d\d):?(?P<om>\d\d))?\s*$")

    def num(name: str) -> np.ndarray:
        text = pc.if_else(pc.equal(pc.fill_null(pc.struct_field(m, name), ""), ""), "0",
                          pc.fill_null(pc.struct_field(m, name), "0"))
        return np.asarray(pc.cast(text, pa.int64()).to_numpy(zero_copy_only=False), dtype=float)

    ok = _mask(m.is_valid())
    out = np.full(n, np.nan)
    if ok.any():
        y, mo, d = num("y"), num("mo"), num("d")
        good = ok & (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= 31)
        months = ((np.where(good, y, 1970) - 1970) * 12 + np.where(good, mo, 1) - 1)
        days = (months.astype(np.int64).astype("datetime64[M]").astype("datetime64[D]")
                + (np.where(good, d, 1).astype(np.int64) - 1)).astype(np.int64)
        frac_text = pc.utf8_rpad(pc.fill_null(pc.struct_field(m, "f"), ""), 9, "0")
        frac = np.asarray(pc.cast(frac_text, pa.int64()).to_numpy(zero_copy_only=False)) / 1e9
        sign = np.where(_mask(pc.equal(pc.struct_field(m, "sign"), "-")), -1.0, 1.0)
        offset = sign * (num("oh") * 3600 + num("om") * 60)
        seconds = days * 86400.0 + num("H") * 3600 + num("M") * 60 + num("S") + frac - offset
        out = np.where(good, seconds, np.nan)
    digits = pc.fill_null(pc.match_substring_regex(values, r"^\d+(\.\d+)?$"), False)
    if _count(digits):  # epoch numbers written as strings (journald's µs)
        as_num = pc.cast(pc.if_else(digits, values, pa.scalar(None, values.type)), pa.float64())
        epoch = _epoch(np.asarray(as_num.to_numpy(zero_copy_only=False), dtype=float))
        out = np.where(np.isnan(out), epoch, out)
    return out


def _epoch(values: np.ndarray) -> np.ndarray:
    return values * np.where(values > _US_ABOVE, 1e-6, np.where(values > _MS_ABOVE, 1e-3, 1.0))


def _split_json(lines: pa.Array, default: InstanceKey) -> StreamSplit:
    """JSON objects: the log text and the stream's facts from the tools' field names."""
    columns, ok = _read_json(lines)
    n = len(lines)
    text = columns.pop("text")
    ok &= _mask(pc.not_equal(text, ""))
    # CloudWatch Container Insights ships Fluent Bit's record as the event's message: a JSON
    # object in a string. Rare lines: decoded one by one (the event's own time stamp is kept).
    nested = np.flatnonzero(ok & _mask(pc.starts_with(text, "{")))
    if len(nested):
        inner, inner_ok = _read_json_python(text.take(pa.array(nested)))
        columns["text"] = text
        for field, values in inner.items():
            filled = _mask(pc.not_equal(values, "")) & inner_ok
            if not filled.any() or field == "stamp":
                continue
            mask = pa.array(np.isin(np.arange(n), nested[filled]))
            columns[field] = pc.replace_with_mask(columns[field], mask,
                                                  values.filter(pa.array(filled)))
        text = columns.pop("text")
    stamp = np.where(ok, _stamp_seconds(columns.pop("stamp")), np.nan)
    facts = {k: v for k, v in columns.items() if k != "stream"}
    for prefer in ("pod", "service", "stream"):
        if _count(pc.not_equal(columns[prefer], "")):
            names = columns[prefer]
            break
    else:
        if _count(pc.not_equal(columns["host"], "")):
            names = pc.binary_join_element_wise(columns["host"], columns["unit"], _SLASH)
        else:
            return StreamSplit("json", np.where(ok, 0, -1), text, stamp, (default,))
    names = pc.utf8_ltrim(names, characters="/")  # Docker's container_name is "/name"
    if "service" in facts:
        facts["service"] = pc.utf8_ltrim(facts["service"], characters="/")
    stream, keys = _keys(names, ok, facts, ORIGINS["json"])
    return StreamSplit("json", stream, text, stamp, keys)


def _read_json(lines: pa.Array) -> tuple[dict[str, pa.Array], np.ndarray]:
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
    return _read_json_python(lines)


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
                seconds = np.where(np.isnan(seconds), _stamp_seconds(_field(table, path)),
                                   seconds)
            out[fact] = pa.array(seconds)
        else:
            out[fact] = pc.fill_null(_first_present([_field(table, p) for p in paths]), "")
    return out


def _read_json_python(lines: pa.Array) -> tuple[dict[str, pa.Array], np.ndarray]:
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


__all__ = ["LABELS", "PATTERNS", "StreamSplit", "detect_format", "file_key", "split_streams",
           "strip_ansi"]
