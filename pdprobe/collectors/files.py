"""Offline collection: expand the paths given to ``diagnose``, sniff and read each file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pdprobe.collectors.base import ReadContext, reader_for
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.io import sniff
from pdprobe.collectors.roles import RoleOptions
from pdprobe.dataset import Dataset, Partial
from pdprobe.errors import InputError, InsufficientDataError, UsageError

IGNORED_NAMES = {"scenario.toml", "readme.md", "readme.txt", ".ds_store"}


def expand_paths(paths: Sequence[Path]) -> list[tuple[Path, bool]]:
    """Files to read, each with whether the user named it directly (vs found in a folder)."""
    out: list[tuple[Path, bool]] = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or folder", hint="check the path")
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            out.extend((p, False) for p in found)
        else:
            out.append((path, True))
    return out


def read_paths(
    paths: Sequence[Path],
    ctx: ReadContext | None = None,
    roles: RoleOptions | None = None,
) -> Dataset:
    """Read every input under ``paths`` and fuse them into one dataset."""
    ctx = ctx or ReadContext()
    files = expand_paths(paths)
    partials: list[Partial] = []
    skipped_files: list[str] = []
    total = sum(_size(p) for p, _ in files) or 1
    done = 0
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
        ctx.report(f"reading {path.name}", done / total)
        partials.append(reader_for(kind.kind)(path, ctx))
        done += _size(path)
    ctx.report("read all inputs", 1.0)
    if not partials:
        where = ", ".join(str(p) for p in paths)
        raise InsufficientDataError(
            f"{where}: no readable request records, metrics or engine logs found",
            hint="point pdprobe at per-request files (JSONL/CSV/Parquet), OpenMetrics dumps or "
                 "vLLM/SGLang logs",
        )
    dataset = fuse(partials, roles)
    if dataset.is_empty and dataset.events.empty:
        raise InsufficientDataError(
            "the inputs hold no usable rows, samples or stats lines",
            hint="see the warnings above for what was skipped",
        )
    if skipped_files:
        from dataclasses import replace

        dataset = replace(dataset, warnings=dataset.warnings + tuple(skipped_files))
    return dataset


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
