"""Timestamps of engine log lines: ISO, glog and vLLM's year-less prefixes, read vectorised,
and the year of year-less lines (``--year``, the file's times, a Dec -> Jan rollover).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe.collectors.log_toolkit import as_lines, extract, group, matched, numeric

# Lines whose timestamps are extracted per call (bounds the 19-group match structs).
TIME_BATCH_LINES: Final = 200_000
# A line cannot postdate the file's last write; one day of slack covers clock skew and the log
# being in local time (up to UTC+14) while the modification time is UTC.
MTIME_SLACK_S: Final = 86400.0
# Notes list at most this many line numbers.
MAX_LISTED_LINES: Final = 5
# Month-of-year jumping back by at least this much between consecutive year-less lines means the
# log crossed a new year (Dec -> Jan); jumping forward as much is a late line from the old year.
ROLLOVER_MONTHS: Final = 6


# The timestamp sits in the prefix: search this many leading characters first (a long
# VLLM_LOGGING_PREFIX or Ray prefix still fits; lines without a match are searched whole).
TIMESTAMP_HEAD_CHARS: Final = 160


# One leftmost match finds the line's timestamp wherever the prefix puts it: ISO date with year
# (SGLang, kubectl --timestamps, custom formats), glog ``Lmmdd``/``Lyyyymmdd`` (Mooncake), or the
# year-less ``mm-dd HH:MM:SS`` of vLLM.
_TIMESTAMP: Final = (
    r"(?P<iy>\d{4})-(?P<imo>\d\d)-(?P<id>\d\d)[ T](?P<iH>\d\d):(?P<iM>\d\d):(?P<iS>\d\d)"
    r"(?:[.,](?P<if>\d{1,9}))?"
    r"|\b[IWEF](?P<gy>\d{4})?(?P<gmo>\d\d)(?P<gd>\d\d) (?P<gH>\d\d):(?P<gM>\d\d):(?P<gS>\d\d)"
    r"\.(?P<gf>\d{1,9})"
    r"|\b(?P<vmo>\d\d)-(?P<vd>\d\d) (?P<vH>\d\d):(?P<vM>\d\d):(?P<vS>\d\d)"
)


@dataclass(frozen=True)
class TimeParts:
    """Timestamp fields found in each line; NaN where absent (``year`` alone for year-less logs)."""

    year: np.ndarray
    month: np.ndarray
    day: np.ndarray
    second_of_day: np.ndarray  # with the fraction

    @property
    def found(self) -> np.ndarray:
        return ~np.isnan(self.month)


def extract_time_parts(lines: Sequence[str] | pa.Array) -> TimeParts:
    """The leftmost timestamp of each line (ISO with year, glog, or vLLM ``mm-dd HH:MM:SS``).

    The prefix carrying it is short, so the regex first runs over the lines' heads; only lines
    without a timestamp there (SGLang 0.4.9's trailing ``timestamp:`` field) are searched whole.
    """
    arr = as_lines(lines)
    if len(arr) > TIME_BATCH_LINES:  # keep the 19-group match structs small
        batches = [extract_time_parts(arr.slice(i, TIME_BATCH_LINES))
                   for i in range(0, len(arr), TIME_BATCH_LINES)]
        return TimeParts(*(np.concatenate([getattr(b, f) for b in batches])
                           for f in ("year", "month", "day", "second_of_day")))
    m = extract(pc.utf8_slice_codeunits(arr, 0, TIMESTAMP_HEAD_CHARS), _TIMESTAMP)
    ok = matched(m)
    if len(arr) and not ok.all():
        retry = np.flatnonzero(~ok)
        again = extract(arr.take(pa.array(retry)), _TIMESTAMP)
        order = np.concatenate([np.flatnonzero(ok), retry])
        merged = pa.concat_arrays([m.filter(pa.array(ok)), again])
        m = merged.take(pa.array(np.argsort(order, kind="stable")))

    def num(*names: str) -> np.ndarray:
        out = np.full(len(arr), np.nan)
        for name in names:
            values, _ = numeric(group(m, name))
            out = np.where(np.isnan(out), values, out)
        return out

    frac = pc.binary_join_element_wise(group(m, "if"), group(m, "gf"),
                                       pa.scalar("", pa.large_string()))
    frac = pc.utf8_slice_codeunits(pc.utf8_rpad(frac, 9, "0"), 0, 9)
    fraction = np.asarray(pc.cast(frac, pa.int64()).to_numpy(zero_copy_only=False)) / 1e9
    hour, minute, sec = num("iH", "gH", "vH"), num("iM", "gM", "vM"), num("iS", "gS", "vS")
    valid = (hour < 24) & (minute < 60) & (sec < 61)
    month = np.where(valid, num("imo", "gmo", "vmo"), np.nan)
    return TimeParts(
        year=np.where(valid, num("iy", "gy"), np.nan),
        month=month,
        day=np.where(valid, num("id", "gd", "vd"), np.nan),
        second_of_day=np.where(valid, hour * 3600 + minute * 60 + sec + fraction, np.nan),
    )


def unix_seconds(year: np.ndarray, month: np.ndarray, day: np.ndarray,
                 second_of_day: np.ndarray) -> np.ndarray:
    """UTC Unix seconds; NaN for missing parts or impossible dates (Feb 30, Feb 29 of 2025)."""
    year = np.asarray(year, dtype=float)
    ok = ~(np.isnan(year) | np.isnan(month) | np.isnan(day) | np.isnan(second_of_day))
    ok &= (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31)
    out = np.full(len(year), np.nan)
    if not ok.any():
        return out
    months = ((year[ok] - 1970) * 12 + month[ok] - 1).astype(np.int64).astype("datetime64[M]")
    days = months.astype("datetime64[D]") + (day[ok].astype(np.int64) - 1)
    same_month = days.astype("datetime64[M]") == months
    seconds = days.astype(np.int64) * 86400.0 + second_of_day[ok]
    out[ok] = np.where(same_month, seconds, np.nan)
    return out


@dataclass(frozen=True)
class YearChoice:
    """The year of every line and what was assumed to get it."""

    year: np.ndarray
    notes: tuple[str, ...] = ()


def assign_years(parts: TimeParts, line_numbers: np.ndarray, *, given_year: int | None,
                 mtime_s: float | None, reference_s: tuple[float, float] | None = None,
                 reference_source: str = "") -> YearChoice:
    """Years for year-less lines (vLLM, old glog), in file order, across Dec -> Jan rollovers.

    The base year comes from, in order: ``--year`` (the year of the first year-less line);
    lines of the same file that carry a year (a collector's RFC 3339 stamp included); the
    capture's other inputs (``reference_s``, their time span: the year that puts the year-less
    lines inside or nearest it); the file's modification time (the last year-less line is
    taken to be no later than the last write).
    """
    year = parts.year.copy()
    undated = np.flatnonzero(np.isnan(year) & parts.found)
    if not len(undated):
        return YearChoice(year)
    month = parts.month[undated]
    step = np.zeros(len(undated), dtype=np.int64)
    jump = np.diff(month)
    step[1:] = (jump <= -ROLLOVER_MONTHS).astype(np.int64) - (jump >= ROLLOVER_MONTHS)
    offset = np.cumsum(step)
    notes: list[str] = []
    dated = np.flatnonzero(~np.isnan(year) & parts.found)
    spanned = (_year_in_span(parts, undated, offset, reference_s)
               if reference_s is not None and given_year is None and not len(dated) else None)
    if given_year is not None:
        base = int(given_year)
        notes.append(f"year {base} for log lines without one taken from --year")
    elif len(dated):
        anchor = int(dated[0])
        before = undated[undated < anchor]
        pos = len(before) - 1 if len(before) else 0
        gap = month[pos] - parts.month[anchor]
        guess = int(year[anchor]) - (gap >= ROLLOVER_MONTHS) + (gap <= -ROLLOVER_MONTHS)
        base = guess - int(offset[pos])
        notes.append(f"year {base} for log lines without one taken from dated lines in the same "
                     f"file (line {int(line_numbers[anchor])}); pass --year to override")
    elif spanned is not None:
        base = spanned
        notes.append(f"year {base} taken from the other inputs of the capture "
                     f"({reference_source or 'their time span'}); pass --year to override")
    else:
        mtime = mtime_s if mtime_s is not None else datetime.now(UTC).timestamp()
        last_year = datetime.fromtimestamp(mtime, UTC).year
        last = int(undated[-1])
        end = unix_seconds(np.array([float(last_year)]), parts.month[[last]], parts.day[[last]],
                           parts.second_of_day[[last]])[0]
        if not np.isnan(end) and end > mtime + MTIME_SLACK_S:
            last_year -= 1
        base = last_year - int(offset[-1])
        notes.append(f"year {base} taken from the file's modification time; pass --year")
    year[undated] = base + offset
    # Only a first entry into a later year is a crossing (not the return after a late line).
    reached = np.maximum.accumulate(np.concatenate([[0], offset[:-1]]))
    crossings = np.flatnonzero(offset > reached)
    if len(crossings):
        where = ", ".join(str(int(line_numbers[undated[i]])) for i in crossings[:MAX_LISTED_LINES])
        notes.append(f"timestamps cross into a new year at line {where}")
    return YearChoice(year, tuple(notes))


def _year_in_span(parts: TimeParts, undated: np.ndarray, offset: np.ndarray,
                  span: tuple[float, float]) -> int | None:
    """The base year that puts the year-less lines inside ``span`` or, failing that, nearest
    to it (most overlap first, then smallest gap); None if no candidate gives a valid date."""
    lo, hi = float(min(span)), float(max(span))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    first = datetime.fromtimestamp(lo, UTC).year - int(offset.max()) - 1
    last = datetime.fromtimestamp(hi, UTC).year - int(offset.min()) + 1
    best: tuple[float, float, int] | None = None
    for base in range(first, last + 1):  # a handful of candidate years
        ts = unix_seconds((base + offset).astype(float), parts.month[undated], parts.day[undated],
                          parts.second_of_day[undated])
        if np.isnan(ts).all():
            continue
        start, end = float(np.nanmin(ts)), float(np.nanmax(ts))
        overlap = max(0.0, min(end, hi) - max(start, lo))
        gap = max(0.0, lo - end, start - hi)
        rank = (-overlap, gap, base)
        if best is None or rank < best:
            best = rank
    return None if best is None else best[2]
