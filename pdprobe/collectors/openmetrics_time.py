"""Sample times of a metrics file: explicit timestamps (any unit), scrape markers, or the
default scrape interval for concatenated ``/metrics`` scrapes that carry no time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.collectors.openmetrics_lexer import (
    SCRAPE_TS_MARKER,
    SHOWN_EXAMPLES,
    Comments,
    Notes,
    Samples,
    to_float,
)
from pdprobe.collectors.validate import check_times

if TYPE_CHECKING:
    pass


# Concatenated /metrics scrapes carry no time: Prometheus' default scrape_interval is 15 s.
DEFAULT_SCRAPE_INTERVAL_S: Final = 15.0


# Sample timestamps above this are milliseconds: 1e11 s is the year 5138, 1e11 ms is 1973.
MS_TIMESTAMP_THRESHOLD: Final = 1e11


# The unit of sample timestamps by the magnitude of their median (checked from the largest
# down): exporters and scripts also write microseconds and nanoseconds (time.time_ns()).
TIMESTAMP_UNIT_BOUNDS: Final = ((1e17, 1e-9, "nanoseconds"), (1e14, 1e-6, "microseconds"),
                                (MS_TIMESTAMP_THRESHOLD, 1e-3, "milliseconds"))


def most_common(names: np.ndarray) -> str:
    """``name (count), ...`` for the most frequent metric names, most frequent first."""
    uniq, cnt = np.unique(names.astype(str), return_counts=True)
    top = sorted(zip(uniq.tolist(), cnt.tolist(), strict=True), key=lambda x: -x[1])
    return ", ".join(f"{n} ({c})" for n, c in top[:SHOWN_EXAMPLES])


def sample_timestamps(path: Path, samples: Samples, comments: Comments, out: Notes) -> np.ndarray:
    """Unix seconds per sample: from the samples, from scrape markers, or assumed scrapes."""
    import pyarrow.compute as pc

    n = samples.line.size
    has_ts = ~pc.equal(pc.binary_length(samples.ts_tok), 0).to_numpy(zero_copy_only=False)
    if has_ts.any():
        ts = to_float(samples.ts_tok)
        if not has_ts.all():
            missing = int((~has_ts).sum())
            out.warnings.append(f"{path}: {missing} sample(s) without a timestamp in a file whose "
                                f"other samples have one were dropped")
            out.skipped += missing
        finite = np.isfinite(ts)
        ts = to_seconds(ts, out, path)
        ts = np.where(has_ts & finite, ts, np.nan)
        bad_ts = has_ts & ~finite
        if bad_ts.any():
            out.warnings.append(f"{path}: dropped {int(bad_ts.sum())} sample(s) whose timestamp "
                                "is not a number")
            out.skipped += int(bad_ts.sum())
        for drop in check_times(ts):
            out.warnings.append(f"{path}: dropped {drop.count} sample(s) whose timestamp is "
                                f"{drop.why}")
            out.skipped += drop.count
            ts = np.where(drop.mask, np.nan, ts)
        return ts

    if comments.marker_lines.size:
        marks = comments.marker_ts
        if marks.size and float(np.median(marks)) > MS_TIMESTAMP_THRESHOLD:
            marks = marks / 1000.0
        pos = np.searchsorted(comments.marker_lines, samples.line, side="left") - 1
        ts = np.where(pos >= 0, marks[np.maximum(pos, 0)], np.nan)
        before = int((pos < 0).sum())
        if before:
            out.warnings.append(f"{path}: {before} sample(s) before the first "
                                f"'# {SCRAPE_TS_MARKER}' line were dropped (time unknown)")
            out.skipped += before
        out.notes.append(f"no sample timestamps: scrape times taken from "
                         f"'# {SCRAPE_TS_MARKER}' lines ({comments.marker_lines.size} scrapes)")
        return ts

    scrape = scrape_index(samples.sid, samples.line, comments.eof_lines)
    n_scrapes = int(scrape.max()) + 1 if n else 0
    try:
        anchor = path.stat().st_mtime
    except OSError:
        anchor = 0.0
    first = anchor - (n_scrapes - 1) * DEFAULT_SCRAPE_INTERVAL_S
    out.notes.append(
        f"no sample timestamps: read as {n_scrapes} concatenated scrape(s) (a repeated series "
        f"starts a new scrape), assumed {DEFAULT_SCRAPE_INTERVAL_S:g} s apart and ending at the "
        f"file's modification time; add '# {SCRAPE_TS_MARKER} <unix>' lines for real times")
    return first + scrape.astype(np.float64) * DEFAULT_SCRAPE_INTERVAL_S


def to_seconds(ts: np.ndarray, out: Notes, path: Path) -> np.ndarray:
    """Sample timestamps in seconds, each unit told by magnitude: Unix seconds are ~1.7e9,
    milliseconds ~1.7e12, microseconds ~1.7e15, nanoseconds ~1.7e18 (ranges that cannot
    overlap before the year 5138), so a file mixing units is read right sample by sample."""
    factor = np.ones_like(ts)
    counts: dict[str, int] = {}
    assigned = np.zeros(ts.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        for bound, f, unit in TIMESTAMP_UNIT_BOUNDS:
            sel = (ts > bound) & ~assigned & np.isfinite(ts)
            if sel.any():
                factor[sel] = f
                assigned |= sel
                counts[unit] = int(sel.sum())
    rest = int(np.count_nonzero(np.isfinite(ts) & ~assigned))
    if rest:
        counts["seconds"] = rest
    if len(counts) <= 1:
        out.notes.append(f"sample timestamps read as {next(iter(counts), 'seconds')} "
                         "(by their magnitude)")
    else:
        shown = ", ".join(f"{n} in {u}" for u, n in counts.items())
        out.warnings.append(f"{path}: sample timestamps in mixed units ({shown}): each read by its "
                            "magnitude")
    return ts * factor


def scrape_index(sid: np.ndarray, line: np.ndarray, eof_lines: np.ndarray) -> np.ndarray:
    """Scrape number of each sample: a series seen again since the scrape began starts a new one.

    The loop runs once per scrape; each step searches forward in growing chunks, so the total
    work stays linear in the number of samples.
    """
    n = sid.size
    order = np.argsort(sid, kind="stable")
    prev = np.full(n, -1, dtype=np.int64)
    same = sid[order][1:] == sid[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    bounds = [0]
    b = 0
    width = 4096
    while b < n:
        found = -1
        lo = b + 1
        w = width
        while lo < n:
            hi = min(n, lo + w)
            hit = np.flatnonzero(prev[lo:hi] >= b)
            if hit.size:
                found = lo + int(hit[0])
                break
            lo = hi
            w *= 2
        if found < 0:
            break
        width = max(1024, 2 * (found - b))
        bounds.append(found)
        b = found
    starts = np.asarray(bounds, dtype=np.int64)
    if eof_lines.size:
        # `# EOF` ends an OpenMetrics exposition: the next sample starts a new scrape.
        after = np.searchsorted(line, eof_lines, side="left")
        starts = np.union1d(starts, after[after < n])
    return np.searchsorted(starts, np.arange(n), side="right") - 1
