"""Split a merged log into per-instance streams by the prefix its collector wrote.

``detect_format`` recognises a tool's line prefix from a sample; ``split_streams`` removes it,
vectorised over a pyarrow array, giving per line a stream id, the engine's own message and the
collector's time stamp (UTC), and per stream an ``InstanceKey``. Formats as the tools print them
(upstream source in the comments of ``PATTERNS`` and ``log_json.JSON_FIELDS`` and in
docs/inputs/logs.md): ``kubectl logs --prefix [--timestamps]``, ``docker compose logs [-t]``,
stern's default template, ``journalctl -o short-iso``, bare ``--timestamps`` stamps, and
JSON-lines exports (Loki logcli, Vector, Fluent Bit, ``journalctl -o json``, CloudWatch; read by
``log_json``). Unprefixed lines are one stream named after the file (``names.name_from_file``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe.collectors.log_columns import bool_mask, count_true, stamp_seconds
from pdprobe.collectors.log_json import read_json, read_json_python
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
    if count_true(is_json) >= need:
        return "json"
    best, best_n = "none", 0
    for fmt, pattern in PATTERNS.items():
        n = count_true(pc.match_substring_regex(sample, pattern))
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
    ok = bool_mask(m.is_valid())
    fields = {f.name: pc.fill_null(pc.struct_field(m, f.name), "") for f in m.type}
    message = pc.if_else(pa.array(ok), fields["msg"], lines)
    stamp = stamp_seconds(fields["stamp"]) if "stamp" in fields else np.full(n, np.nan)
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


def _keys(names: pa.Array, ok: np.ndarray, facts: dict[str, pa.Array],
          origin: str) -> tuple[np.ndarray, tuple[InstanceKey, ...]]:
    """Stream ids by distinct name (first seen first) and one key per stream, with the facts
    of its first line."""
    ok = ok & bool_mask(pc.not_equal(names, ""))
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


def _split_json(lines: pa.Array, default: InstanceKey) -> StreamSplit:
    """JSON objects: the log text and the stream's facts from the tools' field names."""
    columns, ok = read_json(lines)
    n = len(lines)
    text = columns.pop("text")
    ok &= bool_mask(pc.not_equal(text, ""))
    # CloudWatch Container Insights ships Fluent Bit's record as the event's message: a JSON
    # object in a string. Rare lines: decoded one by one (the event's own time stamp is kept).
    nested = np.flatnonzero(ok & bool_mask(pc.starts_with(text, "{")))
    if len(nested):
        inner, inner_ok = read_json_python(text.take(pa.array(nested)))
        columns["text"] = text
        for field, values in inner.items():
            filled = bool_mask(pc.not_equal(values, "")) & inner_ok
            if not filled.any() or field == "stamp":
                continue
            mask = pa.array(np.isin(np.arange(n), nested[filled]))
            columns[field] = pc.replace_with_mask(columns[field], mask,
                                                  values.filter(pa.array(filled)))
        text = columns.pop("text")
    stamp = np.where(ok, stamp_seconds(columns.pop("stamp")), np.nan)
    facts = {k: v for k, v in columns.items() if k != "stream"}
    for prefer in ("pod", "service", "stream"):
        if count_true(pc.not_equal(columns[prefer], "")):
            names = columns[prefer]
            break
    else:
        if count_true(pc.not_equal(columns["host"], "")):
            names = pc.binary_join_element_wise(columns["host"], columns["unit"], _SLASH)
        else:
            return StreamSplit("json", np.where(ok, 0, -1), text, stamp, (default,))
    names = pc.utf8_ltrim(names, characters="/")  # Docker's container_name is "/name"
    if "service" in facts:
        facts["service"] = pc.utf8_ltrim(facts["service"], characters="/")
    stream, keys = _keys(names, ok, facts, ORIGINS["json"])
    return StreamSplit("json", stream, text, stamp, keys)


__all__ = ["LABELS", "PATTERNS", "StreamSplit", "detect_format", "file_key", "split_streams",
           "strip_ansi"]
