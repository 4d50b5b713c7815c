"""Read engine logs (vLLM, SGLang, Mooncake) into metric rows, events and role hints.

An unprefixed file is one instance, named by ``--instance`` or the file name; a file merged by
a log tool (``kubectl logs --prefix``, ``docker compose logs``, stern, journalctl, JSON-lines
exports) is split into one instance per stream by ``log_streams``. A file may mix line kinds
(``kubectl logs`` of a pod: stats lines, Mooncake glog lines, HTTP access logs, startup chatter):
lines are routed by one regular-expression filter over pyarrow arrays, each kind is parsed by its
family module (``vllm_log``, ``sglang_log``, ``mooncake_log``) and assembled here: timestamps
(with the year inferred where the log prints none), sub-series (engines, DP ranks, transfer-engine
threads) combined into one series per instance (per stream), per-interval counts accumulated
into counters.

Nothing in a log is fatal: lines that are not understood, carry a malformed value or no timestamp
are counted in ``SourceInfo.skipped`` and reported with their line numbers in a warning.

The family modules import the shared helpers (``log_toolkit``, ``log_time``, re-exported here);
this module imports the family modules lazily inside
``read_engine_log`` so there is no import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe import signals as S
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.io import GZIP_MAGIC, open_binary

# The family modules' toolkit and the timestamp reading live in their own modules; their names
# are re-exported here, where the family modules (vllm_log, sglang_log, ...) import them.
from pdprobe.collectors.log_time import (
    TimeParts,
    YearChoice,
    assign_years,
    extract_time_parts,
    unix_seconds,
)
from pdprobe.collectors.log_toolkit import (
    MIB,
    MIN_EVIDENCE_LINES,
    ROLE_FROM_ENGINE_FIELDS,
    STALE_AFTER_S,
    EventRows,
    FamilyOutput,
    KeyValues,
    LineKind,
    SignalSpec,
    as_lines,
    combine_subseries,
    extract,
    first_bad,
    group,
    interval_events,
    literal_route,
    matched,
    numeric,
    parse_key_values,
)
from pdprobe.collectors.roles import name_hints
from pdprobe.dataset import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    InstanceKey,
    Partial,
    RoleHint,
    SourceInfo,
    conform,
    empty_frame,
)

# Read this many (decompressed) bytes at a time so a multi-GB log never sits in memory whole;
# only the lines a route matches are kept.
CHUNK_BYTES: Final = 32 * 2**20
# ... gathered from reads this small, so a truncated gzip/zstd loses at most this much.
READ_BYTES: Final = 256 * 2**10
# Lines parsed per call: bounds the memory of the vectorised intermediates on multi-GB logs.
PARSE_BATCH_LINES: Final = 200_000
# Warnings list at most this many line numbers.
MAX_LISTED_LINES: Final = 5
# Notes name at most this many streams of a merged log.
MAX_LISTED_STREAMS: Final = 8


# --- shared pieces for the family modules ------------------------------------------------------


# --- timestamps ---------------------------------------------------------------------------------


# --- combining sub-series into instance series ---------------------------------------------------


# --- the reader ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScannedLines:
    """The lines a route matched, with their 1-based line numbers, and counts of the rest."""

    lines: pa.Array
    line_numbers: np.ndarray
    total: int
    blank: int
    truncated: str | None = None


def instance_for(path: Path, ctx: ReadContext) -> tuple[str, str]:
    """The instance name of an unprefixed log file and a note saying where it came from."""
    from pdprobe.collectors.log_streams import file_key

    key, note = file_key(path, ctx.instance)
    return key.name, note


def scan_lines(path: Path, route: str) -> ScannedLines:
    """Read ``path`` (gzip/zstd too) in chunks and keep only the lines ``route`` matches."""
    pieces: list[pa.Array] = []
    numbers: list[np.ndarray] = []
    total = blank = 0
    truncated: Exception | None = None
    carry = b""

    def scan(block: bytes) -> None:
        nonlocal total, blank
        arr = pa.array(block.decode("utf-8", errors="replace").split("\n"), type=pa.large_string())
        hit = np.asarray(pc.fill_null(pc.match_substring_regex(arr, route), False)
                         .to_numpy(zero_copy_only=False), dtype=bool)
        empty = pc.match_substring_regex(arr, r"^\s*$")
        blank += int(pc.sum(pc.cast(empty, pa.int64())).as_py() or 0)
        keep = np.flatnonzero(hit)
        if len(keep):
            pieces.append(pc.utf8_rtrim(arr.take(pa.array(keep)), characters="\r"))
            numbers.append(keep + total + 1)
        total += len(arr)

    buffered: list[bytes] = []
    size = 0
    with open_binary(path) as fh:
        while True:
            try:
                piece = fh.read(READ_BYTES)
            except Exception as exc:  # truncated gzip/zstd: keep what was intact
                if not _is_decompression_error(exc):
                    raise
                truncated = exc
                piece = b""
            if piece:
                buffered.append(piece)
                size += len(piece)
                if size < CHUNK_BYTES:
                    continue
            if not buffered:
                break
            data = carry + b"".join(buffered)
            buffered, size = [], 0
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
            else:
                carry = data[cut + 1:]
                scan(data[:cut])
            if not piece:
                break
    message = None
    if truncated is not None:
        # The last line is cut in the middle: a number in it may be cut too, so drop it.
        message = (f"{path}: compressed data ends early ({truncated}); used the {total} complete "
                   f"lines before the damage")
    elif carry:
        scan(carry)
    lines = pa.concat_arrays(pieces) if pieces else pa.array([], type=pa.large_string())
    line_numbers = np.concatenate(numbers) if numbers else np.zeros(0, dtype=np.int64)
    return ScannedLines(lines, line_numbers, total, blank, message)


def _is_decompression_error(exc: Exception) -> bool:
    import zlib

    return isinstance(exc, EOFError | zlib.error | OSError) or type(exc).__name__ == "ZstdError"


@dataclass
class _Problems:
    """Skipped lines by reason, for SourceInfo.skipped and the warnings."""

    by_reason: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def add(self, reason: str, line: int, text: str, detail: str = "") -> None:
        shown = text if len(text) <= 160 else text[:157] + "..."
        example = f"{detail} in {shown!r}" if detail else repr(shown)
        self.by_reason.setdefault(reason, []).append((line, example))

    def add_lines(self, reason: str, lines: np.ndarray) -> None:
        """More lines skipped for ``reason`` (after one ``add`` that gave the example)."""
        first = self.by_reason.setdefault(reason, [(0, "")])[0][1]
        self.by_reason[reason].extend((int(n), first) for n in lines)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.by_reason.values())

    def warnings(self, path: Path) -> list[str]:
        out = []
        for reason, items in self.by_reason.items():
            items.sort()
            shown = ", ".join(str(n) for n, _ in items[:MAX_LISTED_LINES])
            more = ", ..." if len(items) > MAX_LISTED_LINES else ""
            out.append(f"{path}: {len(items)} line(s) {reason}, skipped (line {shown}{more}); "
                       f"first: {items[0][1]}")
        return out


def read_engine_log(path: Path, ctx: ReadContext) -> Partial:
    """Read one engine log (plain, gzip or zstd) into a ``Partial``; never fatal for its lines.

    A log merged by a collector (``kubectl logs --prefix``, ``docker compose logs``, stern,
    journalctl, JSON exports) is split into streams by its prefix (``log_streams``), one instance
    each; an unprefixed log is one instance named by ``--instance`` or the file name.
    """
    from pdprobe.collectors import mooncake_log, sglang_log, vllm_log

    families = {"vllm": vllm_log, "sglang": sglang_log, "mooncake": mooncake_log}
    kinds = sorted((k for module in families.values() for k in module.LINE_KINDS),
                   key=lambda k: not k.high_volume)
    # A JSON export escapes the quotes of its log text: let a route's quote follow a backslash.
    route = "|".join(f"(?:{k.route})" for k in kinds).replace('"', r'\\?"')
    scanned = scan_lines(path, route)
    problems = _Problems()
    streams = _split(path, ctx, scanned, problems)
    lines, line_numbers = streams.message, streams.line_numbers

    # Route each candidate to the first kind whose pattern matches it (each kind only looks at
    # the lines no earlier kind took: the stats kinds come first and take most), and parse.
    remaining = np.arange(len(lines))
    parsed: dict[str, pd.DataFrame] = {}
    for kind in kinds:
        if not len(remaining):
            break
        pool = lines if len(remaining) == len(lines) else lines.take(pa.array(remaining))
        mask = np.asarray(pc.fill_null(pc.match_substring_regex(pool, kind.route), False)
                          .to_numpy(zero_copy_only=False), dtype=bool)
        positions = remaining[mask]
        remaining = remaining[~mask]
        if not len(positions):
            continue
        frame = _parse_in_batches(kind, pool.filter(pa.array(mask)))
        rows = frame["row"].to_numpy(dtype=np.int64)
        understood = np.zeros(len(positions), dtype=bool)
        understood[rows] = True
        for i in np.flatnonzero(~understood):
            problems.add(f"looking like {kind.label} lines but not understood",
                         int(line_numbers[positions[i]]), lines[int(positions[i])].as_py())
        frame = frame.assign(cand=positions[rows], line=line_numbers[positions[rows]])
        parsed[kind.name] = frame

    # Timestamps for every parsed row, in file order, so years roll over correctly; a
    # collector's stamp (UTC, with a year) stands for the line's own.
    recognised = np.zeros(len(lines), dtype=bool)
    for frame in parsed.values():
        recognised[frame["cand"].to_numpy(dtype=np.int64)] = True
    cand = np.flatnonzero(recognised)
    parts = _with_stamps(extract_time_parts(lines.take(pa.array(cand))), streams.stamp_s[cand])
    choice = assign_years(parts, line_numbers[cand], given_year=ctx.year, mtime_s=_mtime(path),
                          reference_s=ctx.reference_span_s,
                          reference_source=ctx.reference_source)
    ts_of_cand = np.full(len(lines), np.nan)
    ts_of_cand[cand] = unix_seconds(choice.year, parts.month, parts.day, parts.second_of_day)

    by_kind = {k.name: k for k in kinds}
    by_family: dict[str, dict[str, pd.DataFrame]] = {name: {} for name in families}
    for name, frame in parsed.items():
        cands = frame["cand"].to_numpy(dtype=np.int64)
        frame = frame.assign(ts=ts_of_cand[cands])
        if len(streams.keys) > 1:
            frame = frame.assign(stream=streams.stream[cands])
        errors = frame["error"].notna().to_numpy()
        for _, row in frame[errors].iterrows():  # rare: malformed lines only
            problems.add(f"of {by_kind[name].label} with a malformed value", int(row["line"]),
                         lines[int(row["cand"])].as_py(), str(row["error"]))
        no_ts = ~errors & frame["ts"].isna().to_numpy()
        for line_no, c in zip(frame["line"][no_ts], frame["cand"][no_ts], strict=True):
            problems.add("without a usable timestamp", int(line_no), lines[int(c)].as_py())
        good = frame[~errors & ~no_ts].drop(columns=["error", "cand"]).reset_index(drop=True)
        by_family[by_kind[name].family][name] = good

    # Each stream is assembled on its own: sub-series (engines, ranks, threads) combine within
    # an instance, never across instances.
    outputs: list[dict[str, FamilyOutput]] = []
    for sid in range(len(streams.keys)):
        per_stream: dict[str, FamilyOutput] = {}
        for name, frames in by_family.items():
            mine = {k: _stream_rows(f, sid, len(streams.keys)) for k, f in frames.items()}
            if any(len(f) for f in mine.values()):
                per_stream[name] = families[name].assemble(mine)
        outputs.append(per_stream)
    return _partial(path, streams, scanned, problems, choice, outputs)


@dataclass(frozen=True)
class _Streams:
    """The candidate lines left after removing the collector prefix, by stream."""

    message: pa.Array
    line_numbers: np.ndarray
    stream: np.ndarray  # index into keys
    stamp_s: np.ndarray  # collector stamp, NaN where none
    keys: tuple[InstanceKey, ...]
    notes: tuple[str, ...]
    label: str


def _split(path: Path, ctx: ReadContext, scanned: ScannedLines,
           problems: _Problems) -> _Streams:
    """Split the candidate lines by their collector prefix; malformed prefixes are skipped."""
    from pdprobe.collectors import log_streams

    default, note = log_streams.file_key(path, ctx.instance)
    raw = log_streams.strip_ansi(scanned.lines)
    fmt = log_streams.detect_format(raw)
    split = log_streams.split_streams(raw, fmt, default)
    keys, notes = split.keys, [note]
    if fmt not in ("none", "timestamps"):
        if ctx.instance and len(keys) == 1:  # one stream: the option names it
            keys = (InstanceKey(ctx.instance, keys[0].facts, "--instance"),)
        else:
            shown = ", ".join(k.name for k in keys[:MAX_LISTED_STREAMS])
            more = ", ..." if len(keys) > MAX_LISTED_STREAMS else ""
            notes = [f"lines split into {len(keys)} instance(s) by their {split.label} prefix "
                     f"({shown}{more})"]
            if ctx.instance:
                notes.append(f"--instance {ctx.instance!r} not used: the file names "
                             f"{len(keys)} instances in its prefixes")
    bad = split.stream < 0
    if bad.any():
        reason = (f"not valid {split.label} JSON objects with a log text" if fmt == "json"
                  else f"without the {split.label} prefix of the other lines")
        numbers = scanned.line_numbers[bad]
        first = int(np.flatnonzero(bad)[0])
        problems.add(reason, int(numbers[0]), str(raw[first].as_py()))
        problems.add_lines(reason, numbers[1:])
        keep = pa.array(~bad)
        return _Streams(split.message.filter(keep), scanned.line_numbers[~bad],
                        split.stream[~bad], split.stamp_s[~bad], keys, tuple(notes), split.label)
    return _Streams(split.message, scanned.line_numbers, split.stream, split.stamp_s, keys,
                    tuple(notes), split.label)


def _with_stamps(parts: TimeParts, stamp_s: np.ndarray) -> TimeParts:
    """``parts`` with the date and time of the lines that carry a collector stamp replaced by
    it (UTC, exact, with its year)."""
    has = ~np.isnan(stamp_s)
    if not has.any():
        return parts
    whole = np.floor(np.where(has, stamp_s, 0.0) / 86400.0)
    days = whole.astype(np.int64).astype("datetime64[D]")
    months = days.astype("datetime64[M]")
    year = months.astype("datetime64[Y]").astype(np.int64) + 1970.0
    month = months.astype(np.int64) % 12 + 1.0
    day = (days - months.astype("datetime64[D]")).astype(np.int64) + 1.0
    second = np.where(has, stamp_s, 0.0) - whole * 86400.0
    return TimeParts(np.where(has, year, parts.year), np.where(has, month, parts.month),
                     np.where(has, day, parts.day), np.where(has, second, parts.second_of_day))


def _stream_rows(frame: pd.DataFrame, sid: int, n_streams: int) -> pd.DataFrame:
    if n_streams == 1:  # the common case: no stream column, no copy
        return frame
    return frame[frame["stream"].to_numpy() == sid].drop(columns=["stream"]).reset_index(
        drop=True)


def _parse_in_batches(kind: LineKind, lines: pa.Array) -> pd.DataFrame:
    """``kind.parse`` over slices of ``lines``, so its intermediates stay small on huge logs."""
    if len(lines) <= PARSE_BATCH_LINES:
        return kind.parse(lines)
    frames = []
    for start in range(0, len(lines), PARSE_BATCH_LINES):
        frame = kind.parse(lines.slice(start, PARSE_BATCH_LINES))
        frames.append(frame.assign(row=frame["row"].to_numpy(dtype=np.int64) + start))
    return pd.concat(frames, ignore_index=True)


def _mtime(path: Path) -> float | None:
    """When the log was last written: the gzip header's time if set, else the file's mtime.

    ``gzip`` stores the original file's modification time, which survives copies that reset the
    file system's one.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
        if head[:2] == GZIP_MAGIC and len(head) == 8:
            stamp = int.from_bytes(head[4:8], "little")
            if stamp > 0:
                return float(stamp)
        return path.stat().st_mtime
    except OSError:
        return None


def _partial(path: Path, streams: _Streams, scanned: ScannedLines, problems: _Problems,
             choice: YearChoice, outputs: Sequence[Mapping[str, FamilyOutput]]) -> Partial:
    warnings: list[str] = []
    if scanned.truncated:
        warnings.append(scanned.truncated)
    warnings.extend(problems.warnings(path))
    notes: list[str] = list(streams.notes)
    used = sum(o.lines_used for out in outputs for o in out.values())
    ignored = scanned.total - scanned.blank - len(scanned.lines)
    if used:
        if np.isnan(streams.stamp_s).all():
            notes.append("log times are read as UTC (the logs carry no time zone)")
        else:
            notes.append(f"log times taken from the {streams.label} time stamps where a line "
                         f"has one, else read as UTC")
        notes.extend(choice.notes)
    if ignored > 0:
        notes.append(f"{ignored} unrelated line(s) ignored (access logs, startup messages, ...)")

    metric_parts: list[pd.DataFrame] = []
    event_parts: list[pd.DataFrame] = []
    hints: list[RoleHint] = []
    engines: dict[str, str] = {}
    families_seen: set[str] = set()
    for key, out in zip(streams.keys, outputs, strict=True):
        instance = key.name
        families_seen.update(out)
        for output in out.values():
            notes.extend(output.notes)
            warnings.extend(output.warnings)
        metric_parts.extend(m.assign(instance=instance) for m in _stream_metrics(out, notes))
        event_parts.extend(o.events.assign(instance=instance) for o in out.values()
                           if o.events is not None and len(o.events))
        where = {"file name": "log file name", "--instance": "instance"}.get(
            key.origin, f"{streams.label} stream")
        hints.extend(name_hints([instance], where, str(path)))
        hints.extend(_engine_hints(instance, path, out, warnings))
        engine = _engine_of(instance, path, out, warnings)
        if engine:
            engines[instance] = engine

    metric_frame = (conform(pd.concat(metric_parts, ignore_index=True), METRIC_COLUMNS)
                    if metric_parts else empty_frame(METRIC_COLUMNS))
    # Sorting on the instance strings costs as much as the rest: only when there are several.
    order = ["ts", "instance", "signal", "le"] if len(streams.keys) > 1 else ["ts", "signal", "le"]
    metric_frame = metric_frame.sort_values(order, kind="stable", ignore_index=True)
    if event_parts:
        ev = pd.concat(event_parts, ignore_index=True)
        ev = ev.assign(source=[f"{path.name}:{int(n)}" for n in ev["line"].to_numpy()])
        event_frame = conform(ev.sort_values(["ts", "line"], kind="stable"), EVENT_COLUMNS)
    else:
        event_frame = empty_frame(EVENT_COLUMNS)

    formats = "+".join(f"{name}-log" for name in ("vllm", "sglang", "mooncake")
                       if name in families_seen)
    if not used:
        warnings.append(f"{path}: no vLLM, SGLang or Mooncake stats, transfer or failure lines "
                        f"found ({max(ignored, 0)} other line(s)); is this an engine log?")
    source = SourceInfo(path=str(path), kind="engine-log", format=formats or "log", rows=used,
                        skipped=problems.count, notes=tuple(dict.fromkeys(notes)))
    return Partial(
        source=source,
        metrics=metric_frame if len(metric_frame) else None,
        events=event_frame if len(event_frame) else None,
        role_hints=tuple(hints),
        engines=engines,
        warnings=tuple(dict.fromkeys(warnings)),
        keys=streams.keys,
    )


def _stream_metrics(outputs: Mapping[str, FamilyOutput], notes: list[str]) -> list[pd.DataFrame]:
    """One stream's metric frames, with Mooncake's KV throughput preferred over vLLM's."""
    metrics = [o.metrics for o in outputs.values() if o.metrics is not None and len(o.metrics)]
    if "mooncake" in outputs and "vllm" in outputs:
        # Mooncake's TE throughput is wall-clock aggregate; vLLM's is per transfer and
        # under-reports with concurrency (vllm issue 48224): keep the better one only.
        te_out, vllm_out = outputs["mooncake"].metrics, outputs["vllm"].metrics
        if (te_out is not None and vllm_out is not None
                and (te_out["signal"] == S.KV_TRANSFER_THROUGHPUT_LOG).any()
                and (vllm_out["signal"] == S.KV_TRANSFER_THROUGHPUT_LOG).any()):
            notes.append("KV transfer throughput taken from the Mooncake transfer engine lines "
                         "rather than vLLM's per-transfer 'Throughput (MB/s)'")
            metrics = [m for m in metrics if m is not vllm_out]
            metrics.append(vllm_out[vllm_out["signal"] != S.KV_TRANSFER_THROUGHPUT_LOG])
    return metrics


def _engine_of(instance: str, path: Path, outputs: Mapping[str, FamilyOutput],
               warnings: list[str]) -> str | None:
    engines = [name for name in ("vllm", "sglang") if name in outputs]
    if len(engines) > 1:
        engines.sort(key=lambda name: -outputs[name].lines_used)
        warnings.append(f"{path}: {instance!r} holds both vLLM and SGLang stats lines; taking "
                        f"the engine to be {engines[0]} (more lines); split the file per "
                        f"instance")
    return engines[0] if engines else ("mooncake" if "mooncake" in outputs else None)


def _engine_hints(instance: str, path: Path, outputs: Mapping[str, FamilyOutput],
                  warnings: list[str]) -> list[RoleHint]:
    """Role hints from the log's content; contradictory hints of one strength cancel out."""
    raw = [h for o in outputs.values() for h in o.hints]
    out = []
    for strength in sorted({s for _, _, s in raw}, reverse=True):
        same = [(role, how) for role, how, s in raw if s == strength]
        roles = {role for role, _ in same}
        if len(roles) > 1:
            detail = "; ".join(f"{role}: {how}" for role, how in same)
            warnings.append(f"{path}: the log shows both prefill and decode behaviour ({detail}); "
                            f"not using it for the role")
            continue
        role, how = same[0]
        out.append(RoleHint(instance, role, how, strength, str(path)))
    return out


__all__ = [
    "MIB",
    "MIN_EVIDENCE_LINES",
    "ROLE_FROM_ENGINE_FIELDS",
    "STALE_AFTER_S",
    "EventRows",
    "FamilyOutput",
    "KeyValues",
    "LineKind",
    "SignalSpec",
    "TimeParts",
    "YearChoice",
    "as_lines",
    "assign_years",
    "combine_subseries",
    "extract",
    "extract_time_parts",
    "first_bad",
    "group",
    "instance_for",
    "interval_events",
    "literal_route",
    "matched",
    "numeric",
    "parse_key_values",
    "read_engine_log",
    "scan_lines",
    "unix_seconds",
]
