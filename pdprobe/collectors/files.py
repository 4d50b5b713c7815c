"""Offline collection: expand the paths given to ``diagnose``, sniff and read each file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pdprobe.collectors.base import ReadContext, reader_for
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.identity import AliasMap
from pdprobe.collectors.io import Sniffed, sniff
from pdprobe.collectors.roles import RoleOptions
from pdprobe.dataset import Dataset, Partial
from pdprobe.errors import InputError, InsufficientDataError, UsageError

IGNORED_NAMES = {"scenario.toml", "truth.toml", "readme.md", "readme.txt", ".ds_store"}
# The note a log reader leaves when it took the year of year-less lines from the file's
# modification time: such a log is read again once the capture's other inputs give the span.
MTIME_YEAR_NOTE = "modification time"
# ... and the note of a log whose year came from the other inputs' span (no reference itself).
REFERENCE_YEAR_NOTE = "other inputs of the capture"


def expand_paths(paths: Sequence[Path]) -> list[tuple[Path, bool]]:
    """Files to read, each with whether the user named it directly (vs found in a folder).

    A file is listed once however often it is reached (``diagnose f f``, ``diagnose dir
    dir/f``, a symlink to it): the same device and inode is the same file.
    """
    out: list[tuple[Path, bool]] = []
    seen: dict[tuple[int, int], int] = {}

    def add(p: Path, named: bool) -> None:
        try:
            st = p.stat()
            ident = (st.st_dev, st.st_ino)
        except OSError:
            out.append((p, named))
            return
        if ident in seen:
            if named:  # named directly counts as named, wherever it was found first
                out[seen[ident]] = (out[seen[ident]][0], True)
            return
        seen[ident] = len(out)
        out.append((p, named))

    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or folder", hint="check the path")
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            for p in found:
                add(p, False)
        else:
            add(path, True)
    return out


def read_paths(
    paths: Sequence[Path],
    ctx: ReadContext | None = None,
    roles: RoleOptions | None = None,
    aliases: AliasMap | None = None,
) -> Dataset:
    """Read every input under ``paths`` and fuse them into one dataset.

    Engine logs are read last, with the time span of the other inputs in
    ``ReadContext.reference_span_s``: a vLLM log prints no year, and a copy of a capture made
    today must not move its lines to this year.
    """
    ctx = ctx or ReadContext()
    files = expand_paths(paths)
    planned: list[tuple[Path, Sniffed]] = []
    skipped_files: list[str] = []
    for path, named in files:
        if path.name.lower() in IGNORED_NAMES and not named:
            continue
        kind = sniff(path)
        if kind.kind in ("empty", "binary", "unknown"):
            message = f"{path}: {kind.why}"
            if named:
                raise InputError(message, hint=_hint_for(kind.kind))
            skipped_files.append(f"skipped {message}")
            continue
        planned.append((path, kind))
    # Logs last: their year may come from the others' time span. The partials keep the order
    # of the inputs, so reports list sources as given.
    order = sorted(range(len(planned)), key=lambda i: planned[i][1].kind == "engine-log")
    total = sum(_size(p) for p, _ in planned) or 1
    done = 0
    read: dict[int, Partial] = {}
    for i in order:
        path, kind = planned[i]
        ctx.report(f"reading {path.name}", done / total)
        read_ctx = ctx
        if kind.kind == "engine-log" and ctx.year is None:
            read_ctx = _with_reference(ctx, list(read.values()))
        read[i] = reader_for(kind.kind)(path, read_ctx)
        done += _size(path)
    partials = _reread_undated_logs(planned, [read[i] for i in range(len(planned))], ctx)
    ctx.report("read all inputs", 1.0)
    if not partials:
        where = ", ".join(str(p) for p in paths)
        raise InsufficientDataError(
            f"{where}: no readable request records, metrics or engine logs found",
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
    if skipped_files:
        from dataclasses import replace

        dataset = replace(dataset, warnings=dataset.warnings + tuple(skipped_files))
    return dataset


def _with_reference(ctx: ReadContext, partials: Sequence[Partial]) -> ReadContext:
    """``ctx`` with the time span of the partials read so far whose times are certain (request
    records, metrics, logs whose year was not guessed from the file's modification time)."""
    from dataclasses import replace

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
            out[i] = reader_for(kind.kind)(path, reference)
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
