"""The engine-log reader's steps around parsing: streams, skipped lines, and the ``Partial``.

``_split`` divides the candidate lines of a log merged by a collector into streams by their
prefix (one instance each) and ``_with_stamps`` lets a collector's stamp stand for a line's own
time; ``_Problems`` tallies the skipped lines for ``SourceInfo.skipped`` and the warnings;
``_partial`` assembles each stream's family outputs (metrics, events, role hints, engine) into
one ``Partial``. Used by ``engine_log.read_engine_log``, which scans and parses in between.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa

from pdprobe import signals as S
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.log_time import TimeParts, YearChoice
from pdprobe.collectors.log_toolkit import FamilyOutput
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

# Warnings list at most this many line numbers.
MAX_LISTED_LINES: Final = 5
# Notes name at most this many streams of a merged log.
MAX_LISTED_STREAMS: Final = 8



@dataclass(frozen=True)
class ScannedLines:
    """The lines a route matched, with their 1-based line numbers, and counts of the rest."""

    lines: pa.Array
    line_numbers: np.ndarray
    total: int
    blank: int
    truncated: str | None = None



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
