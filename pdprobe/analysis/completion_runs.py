"""Request completion times (``arrival_ts + e2e_s``) by runs of rows, kept per table.

The workload's completed rate counts the successful completions inside the arrival window,
and the capacity windows count them per window (``capacity.window_counts.served_counts``):
both passed over every request adding its arrival and e2e_s (20 ms a pass at 10 million
rows). Completion times are nearly sorted (arrival order, each plus its e2e_s), so a run of
``PLACE_RUN`` rows mostly falls between two window edges: ``completion_runs`` keeps each
run's earliest and latest completion and its successful requests, once per table, and both
counts place whole runs from them, reading the rows again only in runs that straddle an
edge or hold a NaN (``CompletionRuns.times``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis import sampling
from pdprobe.analysis.sample_runs import merged_ranges
from pdprobe.analysis.table_cache import table_cache
from pdprobe.analysis.table_facts import failed_mask

if TYPE_CHECKING:
    import pandas as pd

# Rows per run (the last run of each ``sampling.PASS_CHUNK`` chunk may be shorter).
PLACE_RUN: Final = 1 << 10


@dataclass(frozen=True, eq=False)
class CompletionRuns:
    """Per run of rows: its first row, earliest and latest completion time (NaN when the run
    holds a NaN: min and max propagate it) and requests not failed (a missing status is
    ``ok``). Runs lie within chunks of ``sampling.PASS_CHUNK`` rows."""

    first: np.ndarray  # int64, ascending
    lowest: np.ndarray
    highest: np.ndarray
    ok: np.ndarray  # int64
    arrival: np.ndarray  # the columns (views): rows of straddling runs are read again
    e2e: np.ndarray
    failed: np.ndarray | None

    def times(self, again: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """The completion times of the rows of the runs ``again`` marks (bool per run),
        consecutive runs together and at most ``sampling.PASS_CHUNK`` rows at a time (row
        slices: no mask of the others), and which of them failed (None: none did)."""
        ends = np.append(self.first[1:], len(self.arrival))[:len(self.first)]  # (none: none)
        for lo, hi in merged_ranges(self.first[again], ends[again], sampling.PASS_CHUNK):
            t = np.add(self.arrival[lo:hi], self.e2e[lo:hi])
            yield t, (self.failed[lo:hi] if self.failed is not None else None)


def completion_runs(req: pd.DataFrame) -> CompletionRuns | None:
    """The table's ``CompletionRuns`` (computed once, cached per table), or None without an
    ``arrival_ts`` or ``e2e_s`` column. Failed: ``table_facts.failed_mask`` where there is a
    status column (a status never given is missing throughout: none failed)."""
    if not all(c in req for c in ("arrival_ts", "e2e_s")):
        return None
    cache = table_cache(req)
    found: CompletionRuns | None = cache.get("completion_runs")
    if found is not None:
        return found
    # views of the canonical float64 columns; a table built otherwise (a caller's own frame)
    # has its columns converted once, kept with the runs
    arrival, e2e = (req[c].to_numpy(dtype=np.float64, na_value=np.nan)
                    for c in ("arrival_ts", "e2e_s"))
    failed = failed_mask(req) if "status" in req else None
    parts: list[tuple[np.ndarray, ...]] = []
    for lo in range(0, len(req), sampling.PASS_CHUNK):  # chunks: no whole-size temporaries
        hi = lo + sampling.PASS_CHUNK
        t = np.add(arrival[lo:hi], e2e[lo:hi])
        at = np.arange(0, len(t), PLACE_RUN)
        sizes = np.diff(np.append(at, len(t)))
        ok = sizes - np.add.reduceat(failed[lo:hi].view(np.uint8), at, dtype=np.int64) \
            if failed is not None else sizes
        parts.append((at + lo, np.minimum.reduceat(t, at), np.maximum.reduceat(t, at), ok))
    runs = [np.concatenate([p[i] for p in parts]) if parts else np.zeros(0)
            for i in range(4)]
    found = CompletionRuns(runs[0].astype(np.int64), runs[1], runs[2],
                           runs[3].astype(np.int64), arrival, e2e, failed)
    cache["completion_runs"] = found
    return found


def ok_within(runs: CompletionRuns, start: float, end: float) -> int:
    """Requests not failed whose completion time is in ``[start, end]`` (a NaN is not)."""
    inside = (runs.lowest >= start) & (runs.highest <= end)  # (NaN: neither in nor out)
    outside = (runs.highest < start) | (runs.lowest > end)
    count = int(runs.ok[inside].sum())
    for t, bad in runs.times(~(inside | outside)):
        ok = t >= start
        ok &= t <= end
        if bad is not None:
            ok &= ~bad
        count += int(np.count_nonzero(ok))
    return count


def ok_places(runs: CompletionRuns, edges: np.ndarray) -> np.ndarray:
    """Per place ``k = searchsorted(edges, t, "right")`` (``0..len(edges)``) the requests not
    failed completing there (a failed one of a run read again is put at place 0, which the
    callers leave out; those of whole runs are not counted). A run whose earliest and
    latest completion share a place all have it (the search is monotone)."""
    first = np.searchsorted(edges, runs.lowest, side="right")
    last = np.searchsorted(edges, runs.highest, side="right")
    whole = (first == last) & ~np.isnan(runs.lowest)
    # one addend per run, not per row (integer counts: their float sums are exact)
    places = np.bincount(first[whole], weights=runs.ok[whole],
                         minlength=len(edges) + 1).astype(np.int64)
    for t, bad in runs.times(~whole):
        k = np.searchsorted(edges, t, side="right")
        if bad is not None:
            k[bad] = 0
        places += np.bincount(k, minlength=len(edges) + 1)
    return places
