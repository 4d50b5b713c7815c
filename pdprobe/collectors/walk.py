"""Walking the paths given to ``diagnose``: the files in folders, what is not read and why,
and what ``--exclude`` leaves out."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pdprobe.errors import UsageError


@dataclass(frozen=True)
class DatasetRef:
    """A partitioned dataset of request records to read as one input
    (``collectors/requests_dataset.py``): a local folder with ``key=value`` partition folders
    (Parquet, CSV/TSV or JSON Lines members), or an object-storage URI (Parquet)."""

    root: str  # the folder or URI as shown in the report
    files: tuple[str, ...] = ()  # local member files; empty for a URI (listed when read)
    base_dir: str = ""  # where partition folders start (local); "" for a URI
    uri: bool = False
    format: str = "parquet"  # parquet | csv | tsv | jsonl (local text datasets: by suffix)


@dataclass(frozen=True)
class Found:
    """The files under the paths given, and what could not be listed."""

    files: list[tuple[Path, bool]]  # (file, named directly)
    warnings: list[str]  # unreadable folders, FIFOs, dangling links, links to folders
    excluded: list[Path] = field(default_factory=list)  # folder members matching --exclude
    datasets: list[DatasetRef] = field(default_factory=list)  # partitioned Parquet, one input each


# A Hive partition folder: `date=2026-11-30`, `hour=13` (key: an identifier; value: no `=`).
HIVE_SEGMENT: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[^=]+$")
# What starts every Parquet file (and ends it): members without the `.parquet` suffix (Hive's
# `000000_0`) are told by it.
PARQUET_MAGIC: Final = b"PAR1"
# Partition-folder members read as one text dataset, by suffix (uncompressed only: a
# compressed member stays a plain input, read and windowed on its own).
TEXT_MEMBER_SUFFIXES: Final = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl",
                               ".ndjson": "jsonl"}
# A URI scheme pyarrow's filesystems open (`s3://bucket/prefix`); a Path keeps it as `s3:`.
URI_SCHEME: Final = re.compile(r"^([a-z][a-z0-9+.-]*):$")


# How many excluded files the grouped note names before it says "and N more".
EXCLUDED_NAMED: Final = 5


def expand_paths(paths: Sequence[Path], exclude: Sequence[str] = ()) -> list[tuple[Path, bool]]:
    """Files to read, each with whether the user named it directly (vs found in a folder).

    ``exclude`` holds glob patterns (``fnmatch`` semantics: ``*``, ``?``, ``[seq]``; ``*``
    also crosses ``/``) matched against each folder member's path relative to the folder
    given and against its file name: ``--exclude '*.log'``, ``--exclude 'old/*'``. A file
    named directly on the command line is never excluded.
    """
    return walk_paths(paths, exclude).files


def excluded(relative: str, name: str, patterns: Sequence[str]) -> bool:
    """Whether a folder member (its path relative to the folder given, and its name)
    matches one of the ``--exclude`` patterns."""
    return any(fnmatch.fnmatch(relative, pat) or fnmatch.fnmatch(name, pat)
               for pat in patterns)


def excluded_note(found: Found, patterns: Sequence[str]) -> str | None:
    """One grouped note for the files ``--exclude`` left out (None when it left out none)."""
    if not found.excluded:
        return None
    n = len(found.excluded)
    shown = ", ".join(str(p) for p in found.excluded[:EXCLUDED_NAMED])
    more = f" and {n - EXCLUDED_NAMED} more" if n > EXCLUDED_NAMED else ""
    pats = ", ".join(repr(p) for p in patterns)
    return (f"left out {n} file{'s' if n != 1 else ''} matching --exclude {pats}: "
            f"{shown}{more}")


def walk_paths(paths: Sequence[Path], exclude: Sequence[str] = ()) -> Found:
    """Files to read, each with whether the user named it directly (vs found in a folder),
    and a warning for each folder member that is not read (unreadable subfolder, FIFO,
    device, socket, dangling link, link to a folder). Hidden members are skipped quietly;
    folder members matching an ``exclude`` pattern (see ``expand_paths``) are listed in
    ``Found.excluded``.

    A file is listed once however often it is reached (``diagnose f f``, ``diagnose dir
    dir/f``, a symlink to it): the same device and inode is the same file.
    """
    out: list[tuple[Path, bool]] = []
    warnings: list[str] = []
    left_out: list[Path] = []
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

    datasets: list[DatasetRef] = []
    for path in paths:
        uri = uri_of(path)
        if uri is not None:
            datasets.append(DatasetRef(root=uri, uri=True))
            continue
        if not path.exists() and not path.is_symlink():
            raise UsageError(f"{path}: no such file or folder", hint="check the path")
        if path.is_dir():
            found, problems = _walk_folder(path)
            warnings.extend(problems)
            found, parts = partitioned(path, found, exclude)
            datasets.extend(parts)
            for p in found:
                if exclude and excluded(p.relative_to(path).as_posix(), p.name, exclude):
                    left_out.append(p)
                else:
                    add(p, False)
        else:
            add(path, True)
    # a file also named directly, or reached through another folder unexcluded, is read
    kept = {p for p, _ in out}
    return Found(out, warnings, [p for p in dict.fromkeys(left_out) if p not in kept],
                 list({d.root: d for d in datasets}.values()))


def uri_of(path: Path) -> str | None:
    """The URI a path argument stands for (``s3://bucket/prefix``), or None for a local path.

    ``Path("s3://b/p")`` keeps ``s3:`` as its first part and drops a ``/``; an existing
    local file or folder of that name is still local."""
    parts = path.parts
    if len(parts) < 2 or not URI_SCHEME.match(parts[0]) or path.exists():
        return None
    return f"{parts[0]}//{'/'.join(parts[1:])}"


def partitioned(top: Path, files: list[Path], exclude: Sequence[str] = ()
                ) -> tuple[list[Path], list[DatasetRef]]:
    """Split a folder's files into plain files and Hive-partitioned datasets.

    A dataset's root is the folder above the first ``key=value`` folder (``top`` itself when
    ``top`` is a partition folder: its own ``key=value`` names above count as partitions);
    its members are the Parquet files under partition folders or, in a dataset without
    Parquet files, the uncompressed CSV/TSV/JSON Lines files (one dataset per format). Other
    files there (Spark's ``_SUCCESS``, ``_committed_*``, a CSV beside Parquet parts) stay
    plain inputs, except ``_``-names, which Hive and Spark write as markers and are skipped
    quietly. Excluded members stay out.
    """
    base = top
    while HIVE_SEGMENT.match(base.name) and base.parent != base:
        base = base.parent
    members: dict[tuple[Path, str], list[str]] = {}
    plain: list[Path] = []
    for p in files:
        rel = p.relative_to(top).parts
        first = next((i for i, seg in enumerate(rel[:-1]) if HIVE_SEGMENT.match(seg)), None)
        if first is None and base == top:
            plain.append(p)
            continue
        root = top / Path(*rel[:first]) if first else top
        if p.name.startswith("_"):
            continue  # _SUCCESS, _committed_..., _metadata: markers, not data
        if exclude and excluded(p.relative_to(top).as_posix(), p.name, exclude):
            plain.append(p)  # the caller leaves it out with the other excluded files
        elif (fmt := _member_format(p)) is not None:
            members.setdefault((root, fmt), []).append(str(p))
        else:
            plain.append(p)
    parquet_roots = {root for root, fmt in members if fmt == "parquet"}
    for root, fmt in [k for k in members if k[1] != "parquet" and k[0] in parquet_roots]:
        plain.extend(Path(name) for name in members.pop((root, fmt)))  # beside Parquet parts
    plain.sort()
    roots = {root for root, _ in members}
    # markers beside the partition folders (Spark's _SUCCESS at the table's root)
    plain = [p for p in plain if not (p.name.startswith("_") and p.parent in roots)]
    refs = [DatasetRef(root=str(root), files=tuple(names),
                       base_dir=str(base if root == top else root), format=fmt)
            for (root, fmt), names in members.items()]
    return plain, refs


def _member_format(p: Path) -> str | None:
    """The format of a partition folder's member: Parquet by its magic bytes, uncompressed
    CSV/TSV/JSON Lines by their suffix (``collectors/requests_dataset_text.py``)."""
    if _is_parquet(p):
        return "parquet"
    return TEXT_MEMBER_SUFFIXES.get(p.suffix.lower())


def _is_parquet(p: Path) -> bool:
    try:
        with p.open("rb") as fh:
            return fh.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
    except OSError:
        return False


def _walk_folder(top: Path) -> tuple[list[Path], list[str]]:
    """Regular files under ``top`` (sorted, hidden names left out) and why others were not."""
    files: list[Path] = []
    problems: list[str] = []

    def unreadable(err: OSError) -> None:
        where = err.filename or top
        problems.append(f"skipped folder {where}: cannot read it ({err.strerror or err})")

    for folder, dirs, names in os.walk(top, onerror=unreadable, followlinks=False):
        base = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:
            if (base / d).is_symlink():
                problems.append(f"skipped {base / d}: a symbolic link to a folder (not "
                                "followed; name the folder itself to read it)")
        for name in sorted(names):
            if name.startswith("."):
                continue
            p = base / name
            why = _not_regular(p)
            if why:
                problems.append(f"skipped {p}: {why}")
            else:
                files.append(p)
    return sorted(files), problems


def _not_regular(p: Path) -> str | None:
    """Why ``p`` is not a regular file to read (None when it is one)."""
    try:
        mode = p.stat().st_mode
    except OSError as exc:
        if p.is_symlink():
            return "a symbolic link to nothing (dangling)"
        return f"cannot read it ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
    return f"{kind}, not a regular file (a capture is files)"
