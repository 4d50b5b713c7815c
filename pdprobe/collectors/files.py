"""Offline collection: expand the paths given to ``diagnose``, sniff and read each file."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.base import ReadContext, reader_for
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.identity import AliasMap
from pdprobe.collectors.io import Sniffed, sniff
from pdprobe.collectors.prefetch import imports_welcome
from pdprobe.collectors.roles import RoleOptions
from pdprobe.collectors.validate import checked_partial
from pdprobe.collectors.walk import (  # noqa: F401  (expand_paths, walk_paths: public here)
    Found,
    excluded_note,
    expand_paths,
    walk_paths,
)
from pdprobe.dataset import Dataset, Partial
from pdprobe.errors import InputError, InsufficientDataError

if TYPE_CHECKING:
    from pdprobe.collectors.requests_dataset import Pushdown

IGNORED_NAMES = {"scenario.toml", "truth.toml", "readme.md", "readme.txt", ".ds_store"}
# The note a log reader leaves when it took the year of year-less lines from the file's
# modification time: such a log is read again once the capture's other inputs give the span.
MTIME_YEAR_NOTE = "modification time"
# ... and the note of a log whose year came from the other inputs' span (no reference itself).
REFERENCE_YEAR_NOTE = "other inputs of the capture"


# pdprobe's own reports (diagnose -o into the capture folder), told by their first bytes:
# JSON, Markdown, HTML, Prometheus textfile and the text view.
_OWN_REPORT = re.compile(
    r'\A\s*(?:\{\s*"schema_version"\s*:\s*\d+\s*,\s*"status"\s*:'
    r"|# pdprobe report"
    r"|# (?:HELP|TYPE) pdprobe_"
    r"|(?:OK|WARNING|CRITICAL|UNKNOWN) {2}.*\n(?:.*\n){0,3}window {3,})"
    r'|<meta name="generator" content="pdprobe ')
OWN_REPORT_HEAD_BYTES: Final = 4096


def own_report(path: Path) -> bool:
    """Whether ``path`` is a report pdprobe wrote (JSON, Markdown, HTML, textfile, text)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False  # a FIFO would block the open; sniff refuses it
        with path.open("rb") as fh:
            head = fh.read(OWN_REPORT_HEAD_BYTES)
    except OSError:
        return False
    return bool(_OWN_REPORT.search(head.decode("utf-8", errors="replace")))


# Errors a reader may raise on a broken file that end that file, not the run (a bug in a
# reader still surfaces as an internal error).
_FILE_ERRORS: Final = (InputError, OSError, UnicodeError, RecursionError)


def read_paths(
    paths: Sequence[Path],
    ctx: ReadContext | None = None,
    roles: RoleOptions | None = None,
    aliases: AliasMap | None = None,
    exclude: Sequence[str] = (),
) -> Dataset:
    """Read every input under ``paths`` and fuse them into one dataset.

    Engine logs are read last, with the time span of the other inputs in
    ``ReadContext.reference_span_s``: a vLLM log prints no year, and a copy of a capture made
    today must not move its lines to this year.

    Every input that cannot be used (unreadable, unrecognised, broken) is a warning naming
    it, in a folder and on the command line alike, as long as another input is usable; when
    none is, the run ends with ``InputError`` (the input's own error when there was one).
    pdprobe's own reports are left out with a note, and so are folder members matching an
    ``exclude`` pattern (one grouped note; see ``expand_paths``).
    """
    ctx = ctx or ReadContext()
    found = walk_paths(paths, exclude)
    planned: list[tuple[Path, Sniffed]] = []
    skipped_files: list[str] = list(found.warnings)
    errors: list[InputError] = []
    notes: list[str] = []
    left_out = excluded_note(found, exclude)
    if left_out:
        notes.append(left_out)
    for path, named in found.files:
        if path.name.lower() in IGNORED_NAMES and not named:
            continue
        if own_report(path):
            notes.append(f"left out {path}: a pdprobe report, not a capture")
            continue
        try:
            kind = sniff(path)
        except _FILE_ERRORS as exc:
            err = _as_input_error(path, exc)
            errors.append(err)
            skipped_files.append(f"skipped {err.one_line()}")
            continue
        if kind.kind in ("empty", "binary", "unknown"):
            message = f"{path}: {kind.why}"
            errors.append(InputError(message, hint=_hint_for(kind.kind)))
            skipped_files.append(f"skipped {message}")
            continue
        planned.append((path, kind))
    # Logs last: their year may come from the others' time span. The partials keep the order
    # of the inputs, so reports list sources as given.
    order = sorted(range(len(planned)), key=lambda i: planned[i][1].kind == "engine-log")
    if found.datasets or not order or not _parquet_requests(planned[order[0]][1]):
        imports_welcome()  # nothing holds the GIL first: imports meanwhile may start now
    datasets, pushdowns = _read_datasets(found, ctx, errors, skipped_files)
    total = sum(_size(p) for p, _ in planned) or 1
    done = 0
    read: dict[int, Partial] = {}
    for i in order:
        path, kind = planned[i]
        ctx.report(f"reading {path.name}", done / total)
        read_ctx = ctx
        if kind.kind == "engine-log" and ctx.year is None:
            read_ctx = _with_reference(ctx, [*datasets, *read.values()])
        try:
            read[i] = _printable(path, checked_partial(reader_for(kind.kind)(path, read_ctx)))
        except _FILE_ERRORS as exc:
            err = _as_input_error(path, exc)
            errors.append(err)
            skipped_files.append(f"skipped {err.one_line()}")
        done += _size(path)
    kept = [i for i in range(len(planned)) if i in read]
    partials = [*datasets, *_reread_undated_logs([planned[i] for i in kept],
                                                 [read[i] for i in kept], ctx)]
    ctx.report("read all inputs", 1.0)
    if partials and ctx.window is not None:
        from pdprobe.collectors.time_window import apply_window

        partials, window_note = apply_window(
            partials, ctx.window, outside_unread=sum(p.rows_unread for p in pushdowns),
            files_unread=sum(p.files - p.files_read for p in pushdowns),
            unread_span=_span_of(p.span_ts for p in pushdowns))
        notes.append(window_note)
    if not partials:
        if len(errors) == 1 and not found.warnings:
            raise errors[0]  # one input, unusable: its own error says it best
        where = ", ".join(str(p) for p in paths)
        problems = [*skipped_files, *notes]
        why = f"; {len(problems)} problem(s), first: {problems[0]}" if problems else ""
        raise InsufficientDataError(
            f"{where}: no readable request records, metrics or engine logs found{why}",
            hint="point pdprobe at per-request files (JSONL/CSV/Parquet), OpenMetrics dumps or "
                 "vLLM/SGLang logs",
        )
    dataset = fuse(partials, roles, aliases)
    if dataset.is_empty and dataset.events.empty:
        # Nothing is printed before this error: say here what was skipped, in one line.
        skipped = [*skipped_files, *dataset.warnings]
        why = (f"; {len(skipped)} problem(s), first: {skipped[0]}" if skipped
               else "; every input was read but none has a request, sample or stats line")
        raise InsufficientDataError(
            f"the inputs hold no usable rows, samples or stats lines{why}",
            hint="check that the files are request records, metric dumps or engine logs",
        )
    extra = [_escape(w) for w in (*skipped_files, *_zero_span_warning(dataset))]
    notes = [_escape(n) for n in notes]
    if extra:
        dataset = replace(dataset, warnings=dataset.warnings + tuple(extra))
    if notes:
        dataset = dataset.with_notes(*notes)
    return dataset


def _parquet_requests(kind: Sniffed) -> bool:
    """Whether a file sniffed as ``kind`` is read by the Parquet request loop, which holds the
    GIL most of its time and lets imports meanwhile start once it ends
    (``requests_file._read_records``)."""
    return kind.kind == "requests" and kind.format == "parquet"


def _read_datasets(found: Found, ctx: ReadContext, errors: list[InputError],
                   skipped_files: list[str]) -> tuple[list[Partial], list[Pushdown]]:
    """Each partitioned Parquet dataset (a folder of ``key=value`` folders, an object-storage
    URI) read as one input, with the window pushed down; what the window spared."""
    if not found.datasets:
        return [], []
    from pdprobe.collectors.requests_dataset import read_dataset

    partials, pushdowns = [], []
    for ref in found.datasets:
        try:
            done = read_dataset(ref, ctx)
        except _FILE_ERRORS as exc:
            err = _as_input_error(Path(ref.root), exc)
            errors.append(err)
            skipped_files.append(f"skipped {err.one_line()}")
            continue
        partials.append(checked_partial(done.partial))
        if done.pushdown is not None:
            pushdowns.append(done.pushdown)
    return partials, pushdowns


def _span_of(spans: Iterable[tuple[float, float] | None]) -> tuple[float, float] | None:
    known = [s for s in spans if s is not None]
    return (min(s[0] for s in known), max(s[1] for s in known)) if known else None


def _as_input_error(path: Path, exc: BaseException) -> InputError:
    if isinstance(exc, InputError):
        return exc
    if isinstance(exc, RecursionError):
        return InputError(f"{path}: nested too deeply to read", hint="check the export")
    if isinstance(exc, OSError):
        return InputError(f"{path}: cannot read ({exc.strerror or exc})",
                          hint="check the path and permissions")
    return InputError(f"{path}: cannot read ({type(exc).__name__}: {exc})",
                      hint="check the file's encoding")


def _printable(path: Path, partial: Partial) -> Partial:
    """The partial of a file whose name is not valid UTF-8 with every string that carries
    the name (source path, warnings, instance names taken from it) shown with the bad bytes
    escaped (``\\xff``): such strings cannot be written as UTF-8 (JSON, HTML) at all."""
    if not _undecodable(str(path)):
        return partial
    fixed: Partial = _escape_deep(partial)
    return fixed


def _undecodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _escape(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _escape_deep(obj: Any) -> Any:
    """``obj`` with every string that holds lone surrogates escaped (frozen dataclasses,
    containers and the string columns of data frames)."""
    import dataclasses

    import pandas as pd

    if isinstance(obj, str):
        return _escape(obj) if _undecodable(obj) else obj
    if isinstance(obj, tuple):
        return tuple(_escape_deep(v) for v in obj)
    if isinstance(obj, list):
        return [_escape_deep(v) for v in obj]
    if isinstance(obj, frozenset | set):
        return type(obj)(_escape_deep(v) for v in obj)
    if isinstance(obj, dict):
        return {_escape_deep(k): _escape_deep(v) for k, v in obj.items()}
    if isinstance(obj, pd.DataFrame):
        out = obj.copy()
        for col in out.columns:
            if out[col].dtype == object or isinstance(out[col].dtype, pd.StringDtype):
                out[col] = out[col].map(lambda v: _escape_deep(v) if isinstance(v, str) else v)
                out[col] = out[col].astype(obj[col].dtype)
        return out
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _escape_deep(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                   if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def _zero_span_warning(dataset: Dataset) -> list[str]:
    """A warning when every time in the dataset is the same instant: rates, throughput and
    anything measured over the window cannot be judged from a 0 s window."""
    los, his = [], []
    for frame in (dataset.requests, dataset.metrics, dataset.network, dataset.events):
        if frame is not None and len(frame):
            col = "arrival_ts" if frame is dataset.requests else "ts"
            span = _sorted_span(frame[col].to_numpy(dtype=np.float64, na_value=np.nan))
            if span is not None:
                los.append(span[0])
                his.append(span[1])
    if not los or max(his) > min(los):
        return []
    return ["all timestamps in the inputs are the same instant (a 0 s window): rates, "
            "throughput and anything measured over time are not judged; only what one "
            "instant shows (lengths, gauges, counters since start) is"]


def _sorted_span(values: np.ndarray) -> tuple[float, float] | None:
    """``(nanmin, nanmax)`` of times sorted ascending with NaN last (``fuse`` sorts every
    frame by time so), or None when none is finite: three binary searches instead of three
    passes over the column (10M request rows: ~15 ms)."""
    known = int(np.searchsorted(values, np.nan))  # numpy sorts and searches NaN last
    first = int(np.searchsorted(values[:known], -np.inf, side="right"))
    if first >= int(np.searchsorted(values[:known], np.inf, side="left")):
        return None  # no finite time (an infinity is no time to compare)
    return float(values[0]), float(values[known - 1])


def _with_reference(ctx: ReadContext, partials: Sequence[Partial]) -> ReadContext:
    """``ctx`` with the time span of the partials read so far whose times are certain (request
    records, metrics, logs whose year was not guessed from the file's modification time)."""
    from pdprobe.collectors.fuse import time_span

    los, his, names = [], [], []
    for p in partials:
        if p.source.kind == "engine-log" and (_year_from_mtime(p) or _year_from_others(p)):
            continue  # a guessed year is no reference for the next log
        lo, hi = time_span(p)
        if lo is not None and hi is not None:
            los.append(lo)
            his.append(hi)
            names.append(Path(p.source.path).name)
    if not los:
        return ctx
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return replace(ctx, reference_span_s=(min(los), max(his)), reference_source=shown)


def _year_from_mtime(p: Partial) -> bool:
    return any(MTIME_YEAR_NOTE in n for n in p.source.notes)


def _year_from_others(p: Partial) -> bool:
    return any(REFERENCE_YEAR_NOTE in n for n in p.source.notes)


def _reread_undated_logs(planned: Sequence[tuple[Path, Sniffed]], partials: list[Partial],
                         ctx: ReadContext) -> list[Partial]:
    """Logs whose year came from their file's modification time, read again with the span of
    the logs that carry dated lines (a capture of logs only, some of them SGLang or
    ``kubectl --timestamps`` output)."""
    if ctx.year is not None or not any(_year_from_mtime(p) for p in partials):
        return partials
    reference = _with_reference(ctx, partials)
    if reference.reference_span_s is None:
        return partials
    out = list(partials)
    for i, ((path, kind), partial) in enumerate(zip(planned, partials, strict=True)):
        if kind.kind == "engine-log" and _year_from_mtime(partial):
            out[i] = _printable(path, checked_partial(reader_for(kind.kind)(path, reference)))
    return out


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _hint_for(kind: str) -> str:
    return {
        "empty": "the capture is empty; copy it again",
        "binary": "pdprobe reads JSONL/CSV/Parquet request records, OpenMetrics text and engine logs",
        "unknown": "pdprobe reads JSONL/CSV/Parquet request records, OpenMetrics text and engine "
                   "logs; convert the file or leave it out",
    }[kind]
