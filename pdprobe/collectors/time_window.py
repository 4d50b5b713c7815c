"""``--since``/``--until`` for captured files: the window, resolved against the capture, and
what falls outside it.

A live diagnosis asks Prometheus for the window; captured files hold whatever span they were
written over (a day of request logs, an hour of metrics), so the window is cut out after
reading: request records by ``arrival_ts``, metric, network and deployment samples and log
events by ``ts``, all to ``[since, until]`` inclusive. A relative ``--since`` (a duration) is
the window's length back from ``--until``; without ``--until`` that end is the capture's end
(the latest time any input carries), not the clock: a capture copied yesterday is still
diagnosed over its own last hour. Partitioned Parquet datasets read the window pushed down
(``collectors/requests_dataset.py``); the cut here then removes nothing more from them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports TimeWindow; numpy and pandas load only to cut
    from pdprobe.dataset import Partial


@dataclass(frozen=True)
class TimeWindow:
    """The window the user asked for, before the capture's end is known.

    Exactly one of ``since_ts`` (an absolute start) and ``length_s`` (a duration back from
    the end) may be set, or neither (from the start of the capture). ``until_ts`` is an
    absolute end; None means the capture's end.
    """

    since_ts: float | None = None
    length_s: float | None = None
    until_ts: float | None = None
    text: str = ""  # the flags as given, for the note ("--since 1h --until 2026-...")

    def resolve(self, capture_end_ts: float | None) -> tuple[float, float]:
        """``(start, end)`` Unix seconds; a missing end is the capture's end (or +inf when
        the capture holds no time at all)."""
        end = self.until_ts if self.until_ts is not None else (
            capture_end_ts if capture_end_ts is not None else float("inf"))
        if self.since_ts is not None:
            start = self.since_ts
        elif self.length_s is not None:
            start = end - self.length_s
        else:
            start = float("-inf")
        return start, end

    @property
    def needs_capture_end(self) -> bool:
        """Whether resolving the window needs the capture's end (no absolute ``--until``)."""
        return self.until_ts is None and self.length_s is not None


@dataclass(frozen=True)
class WindowCut:
    """What the window removed: counts of rows kept and dropped per table."""

    start_ts: float
    end_ts: float
    kept: dict[str, int]
    dropped: dict[str, int]

    def note(self, window: TimeWindow) -> str:
        """One line for the report: the window applied and what was outside it."""
        what = {"requests": "request records", "metrics": "metric samples",
                "network": "network samples", "events": "log events",
                "deployment": "deployment samples"}
        parts = [f"{self.dropped[k]:,} of {self.kept[k] + self.dropped[k]:,} {what[k]}"
                 for k in what if self.kept.get(k, 0) + self.dropped.get(k, 0)]
        outside = "; outside it: " + ", ".join(parts) if parts else ""
        return (f"window {iso(self.start_ts)} to {iso(self.end_ts)} ({window.text}){outside}")


def iso(ts: float) -> str:
    """Unix seconds as ISO 8601 UTC (``-inf``/``inf`` as the open end of the capture)."""
    if not math.isfinite(ts):
        return "start of capture" if ts < 0 else "end of capture"
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


# (table attribute of Partial, time column)
_TABLES = (("requests", "arrival_ts"), ("metrics", "ts"), ("network", "ts"),
           ("events", "ts"), ("deployment", "ts"))


def cut(partials: Sequence[Partial], start_ts: float, end_ts: float,
        ) -> tuple[list[Partial], WindowCut]:
    """The partials with every row outside ``[start_ts, end_ts]`` removed (a row without a
    time is outside), and the counts. ``SourceInfo.rows`` becomes the rows kept and a source
    with rows but none in the window says so in its notes."""
    import numpy as np

    kept: dict[str, int] = {}
    dropped: dict[str, int] = {}
    out = []
    for p in partials:
        changes: dict[str, Any] = {}  # table attribute -> its rows in the window
        had = now = 0
        for attr, col in _TABLES:
            frame = getattr(p, attr)
            if frame is None or not len(frame):
                continue
            values = frame[col].to_numpy(dtype=np.float64, na_value=np.nan)
            inside = (values >= start_ts) & (values <= end_ts)
            n_in = int(inside.sum())
            kept[attr] = kept.get(attr, 0) + n_in
            dropped[attr] = dropped.get(attr, 0) + len(frame) - n_in
            had += len(frame)
            now += n_in
            if n_in < len(frame):
                changes[attr] = frame.loc[inside].reset_index(drop=True)
        if not changes:
            out.append(p)
            continue
        notes = p.source.notes
        if had and not now:
            notes += ("nothing in the --since/--until window",)
        # a reader that counted its rows gets the rows kept; a log counts lines, kept as read
        rows = now if p.source.rows == had else p.source.rows
        out.append(replace(p, source=replace(p.source, rows=rows, notes=notes), **changes))
    return out, WindowCut(start_ts, end_ts, kept, dropped)


def apply_window(partials: Sequence[Partial], window: TimeWindow,
                 outside_unread: int = 0, files_unread: int = 0,
                 unread_span: tuple[float, float] | None = None) -> tuple[list[Partial], str]:
    """The partials cut to the window and the report's note about it.

    ``outside_unread`` counts request records a partitioned dataset left unread because the
    window was pushed down to its row groups; they are outside it too. ``files_unread``
    counts the dataset files its partitions' names left unopened (their rows are not known);
    ``unread_span`` is the time the datasets' partition names cover, for the message when
    nothing was in the window. A
    window that holds nothing at all ends the run (``InsufficientDataError``, exit 3) naming
    the span the capture does cover.
    """
    from pdprobe.errors import InsufficientDataError

    span = _span(partials)
    start, end = window.resolve(span[1] if span else None)
    out, counts = cut(partials, start, end)
    if span and not math.isfinite(start):
        counts = replace(counts, start_ts=span[0])  # shown as the capture's first time
    if outside_unread:
        counts.dropped["requests"] = counts.dropped.get("requests", 0) + outside_unread
        counts.kept.setdefault("requests", 0)
    if not any(counts.kept.values()):
        lo_hi = [t for t in (span, unread_span) if t is not None]
        where = "the inputs carry no times"
        if lo_hi:
            where = (f"the capture spans {iso(min(t[0] for t in lo_hi))} to "
                     f"{iso(max(t[1] for t in lo_hi))}")
        raise InsufficientDataError(
            f"nothing in the window {iso(start)} to {iso(end)} ({window.text}): {where}",
            hint="move --since/--until into the capture's span, or drop them to diagnose "
                 "the whole capture")
    note = counts.note(window)
    if files_unread:
        note += (f"; {files_unread:,} partition file{'s' if files_unread != 1 else ''} not "
                 "opened (outside it by their partition's time)")
    return out, note


def _span(partials: Sequence[Partial]) -> tuple[float, float] | None:
    """The first and last time any row of the partials carries."""
    import numpy as np

    los, his = [], []
    for p in partials:
        for attr, col in _TABLES:
            frame = getattr(p, attr)
            if frame is not None and len(frame):
                values = frame[col].to_numpy(dtype=np.float64, na_value=np.nan)
                if np.isfinite(values).any():
                    los.append(float(np.nanmin(values)))
                    his.append(float(np.nanmax(values)))
    return (min(los), max(his)) if los else None
