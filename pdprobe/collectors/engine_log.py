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

The family modules import the shared helpers from ``log_toolkit`` and ``log_time``, where they
are defined; this module imports the family modules lazily inside ``read_engine_log``. Splitting
the lines into streams, the tally of skipped lines and the assembly into a ``Partial`` live in
``log_assembly``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.io import GZIP_MAGIC, open_binary
from pdprobe.collectors.log_assembly import ScannedLines, _partial, _Problems, _split, _with_stamps
from pdprobe.collectors.log_time import assign_years, extract_time_parts, unix_seconds
from pdprobe.collectors.log_toolkit import FamilyOutput, LineKind
from pdprobe.dataset import Partial

# Read this many (decompressed) bytes at a time so a multi-GB log never sits in memory whole;
# only the lines a route matches are kept.
CHUNK_BYTES: Final = 32 * 2**20
# ... gathered from reads this small, so a truncated gzip/zstd loses at most this much.
READ_BYTES: Final = 256 * 2**10
# Lines parsed per call: bounds the memory of the vectorised intermediates on multi-GB logs.
PARSE_BATCH_LINES: Final = 200_000


# --- the reader ----------------------------------------------------------------------------------


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
