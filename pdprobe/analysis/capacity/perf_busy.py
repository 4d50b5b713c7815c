"""Prefill busy periods: each instance's prefill intervals grouped into periods of overlapping
(or touching, within ``BUSY_GAP_TOLERANCE_S``) ones, the requests that ran alone and segments
of busy time (``busy_periods``, ``isolated_rows``, ``busy_segments``). Above
``sampling.BUSY_SAMPLE_MAX_REQUESTS`` they are reconstructed around a time-block sample.
Vectorised: no Python loop over requests.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis import sampling
from pdprobe.analysis.capacity.perf_columns import (
    FloatColumns,
    instance_code_view,
    sort_by_group,
)
from pdprobe.analysis.capacity.perf_models import attention_tokens2
from pdprobe.analysis.row_slices import index_dtype
from pdprobe.analysis.sample_runs import RunRangesBuilder
from pdprobe.analysis.sampling import PASS_CHUNK, TimeSample, positions, sample_intervals

if TYPE_CHECKING:
    import pandas as pd

# Busy periods of prefill instances are cut into segments this long (by when their requests
# finish): many forwards each, so a forward straddling a boundary is a small error.
BUSY_SEGMENT_S: Final = 10.0
# A prefill starting at most this long after its instance's previous prefills ended joins
# their busy period. Starts and ends are rebuilt from absolute timestamps (float64 epoch
# seconds: ~2.4e-7 s apart near 1.7e9, and each of arrival, queue and prefill is rounded), so
# a queued prefill starting exactly as the one before it ends can seem to start up to ~5e-7 s
# after it (or before); timestamps captured to the millisecond are off by up to that. 1 ms is
# shorter than any forward (a batch's fixed cost alone is ~10-20 ms), so an idle gap that
# short cannot be told from back-to-back prefills, and counting it as idle would call a
# queued request "alone".
BUSY_GAP_TOLERANCE_S: Final = 1e-3


@dataclass(frozen=True, eq=False)
class BusyPeriods:
    """Prefill intervals sorted by instance and start, each with its busy period.

    Above ``sampling.BUSY_SAMPLE_MAX_REQUESTS`` prefills the periods are reconstructed around a
    time-block sample (``sample``): ``observed`` marks the sampled requests, the others are
    there because they overlap (or touch) one. An observed request's period neighbours are
    all present, so whether it ran alone is exact; a period's ends beyond the sample are not.
    """

    # memory: positions and ids are int32 and codes int8/int16 where they fit (millions of rows)
    row: np.ndarray  # request position
    start: np.ndarray
    end: np.ndarray
    period: np.ndarray  # integer id from 1, consecutive along the sort order
    group: np.ndarray | None = None  # instance code, non-decreasing
    observed: np.ndarray | None = None  # in the sample (None: not sampled, all are)
    sample: TimeSample | None = None

    def __len__(self) -> int:
        return len(self.row)


def busy_periods(requests: pd.DataFrame, sample: bool = True) -> BusyPeriods:
    """Prefill intervals grouped into busy periods per instance (overlapping ones merge).

    Sorted by instance (name order) and start; requests without a start, end or instance are
    left out. Above ``sampling.BUSY_SAMPLE_MAX_REQUESTS`` prefills (unless ``sample`` is
    false) the periods are those around a time-block sample (``BusyPeriods.sample``).

    Memory: the intervals are computed chunk by chunk to find the valid rows and draw the
    sample, then only at the rows kept; no whole-size start and end arrays (160 MB of fresh
    pages at 10 million requests) and no int64 copy of the instance codes.
    """
    cols = FloatColumns(requests, ("arrival_ts", "queue_s", "prefill_s"))
    codes, n_names = instance_code_view(requests["prefill_instance"])
    n = len(requests)

    def starts(rows: slice | np.ndarray) -> np.ndarray:
        if isinstance(rows, slice):  # the columns' own values, added into a new array
            return np.add(cols.read("arrival_ts", rows), cols.read("queue_s", rows))
        s = cols("arrival_ts", rows)  # (gathered: an array of its own)
        return np.add(s, cols.read("queue_s", rows), out=s)  # in place: one temporary

    def spans(rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = starts(rows)
        if isinstance(rows, slice):  # no copy of the column to add into
            return s, np.add(s, cols.read("prefill_s", rows))
        e = cols("prefill_s", rows)
        return s, np.add(s, e, out=e)  # (IEEE addition commutes: s + prefill to the bit)

    valid = np.empty(n, dtype=bool)
    # the valid prefills' start and reach ranges per run of rows: the sample's start range,
    # and the runs its sampling pass can skip
    runs = RunRangesBuilder()
    for lo in range(0, n, PASS_CHUNK):  # chunks: no temporaries the size of the table
        chunk = slice(lo, lo + PASS_CHUNK)
        s, e = spans(chunk)
        ok = valid[chunk]
        # an end is finite only where its start is too (a start that is not makes the sum
        # infinite or NaN): one test for both
        np.isfinite(e, out=ok)
        ok &= codes[chunk] >= 0
        e += BUSY_GAP_TOLERANCE_S  # (as ``reaching`` gives them: the sample's intervals)
        runs.add(lo, s, e, ok)
    if n:  # (the loop ran: an empty table binds none of them)
        del ok, s, e  # memory: ``ok``, a view of the mask, would keep it alive once freed
    if not valid.any():
        empty = np.zeros(0)
        return BusyPeriods(np.zeros(0, dtype=np.int64), empty, empty,
                           np.zeros(0, dtype=np.int64))

    def reaching(rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, e = spans(rows)
        e += BUSY_GAP_TOLERANCE_S  # in place: the ends as far as a period reaches
        return s, e

    # touching prefills (one starts as the other ends, within the tolerance) share a period:
    # closed overlaps of the intervals reaching the tolerance further
    # memory: an all-true mask is not kept (one byte per request) while the sample is drawn
    some = None if valid.all() else valid
    del valid
    taken = sample_intervals(reaching, n, some, codes, closed=True,
                             max_requests=sampling.BUSY_SAMPLE_MAX_REQUESTS,
                             size=sampling.BUSY_SAMPLE_REQUESTS,
                             runs=runs.done(), by_group=True, raw=spans,
                             pad_s=BUSY_GAP_TOLERANCE_S) if sample else None
    observed = None
    if taken is not None and taken.by_group is not None and taken.by_group_spans is not None:
        # the sample's overlap test sorted its rows by (instance, start) already and kept
        # their intervals (it computed them: ``reaching``'s ends are these plus the tolerance)
        rows = taken.by_group
        s, e = taken.by_group_spans
        observed, taken = taken.observed[rows], taken.released()  # kept without the masks
        del some
    else:
        rows = positions(some) if some is not None else \
            np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)  # (positions of all)
        del some
        # sorted, then the intervals computed again at the sorted rows: no gathered copies
        order = sort_by_group(codes[rows], n_names, starts(rows))
        rows = rows[order]
        del order
        s, e = spans(rows)
    g = codes[rows]  # a categorical column's own int8/int16 codes: kept as they come
    if g.dtype not in (np.int8, np.int16):  # (pandas: int8 below 127 names: a code + 1 fits)
        g = g.astype(np.int16 if n_names < 2**15 else np.int64)
    new_period = np.ones(len(rows), dtype=bool)  # the first of each instance opens a period
    new_period[1:] = g[1:] != g[:-1]
    bounds = np.append(np.flatnonzero(new_period), len(rows))
    for lo, hi in itertools.pairwise(bounds):  # per instance, not per request
        reach = np.maximum.accumulate(e[lo:hi])
        reach += BUSY_GAP_TOLERANCE_S
        # starts after everything before it (on its instance) has ended, by more than rounding
        new_period[lo + 1:hi] |= s[lo + 1:hi] > reach[:-1]
    period = np.cumsum(new_period, dtype=np.int32 if len(rows) < 2**31 else np.int64)
    return BusyPeriods(rows, s, e, period, g, observed, taken)


def isolated_rows(requests: pd.DataFrame, periods: BusyPeriods | None = None) -> np.ndarray:
    """Positions (ascending; ``row_slices.index_dtype`` integers, int32 where they fit) of the
    requests whose prefill overlapped no other prefill on its instance (of the sample's
    observed ones, when the periods are sampled: only their neighbours are all known). From
    the busy periods' rows: no mask of every request (10 MB of fresh pages at 10 million
    requests for a few hundred thousand positions)."""
    busy = periods if periods is not None else busy_periods(requests)
    dtype = index_dtype(len(requests))
    if not len(busy):
        return np.zeros(0, dtype=dtype)
    # periods are consecutive runs: alone where a period starts and the next one starts
    # right after (no count per period and gather of it per row)
    opens = np.empty(len(busy) + 1, dtype=bool)
    opens[0] = opens[-1] = True
    np.not_equal(busy.period[1:], busy.period[:-1], out=opens[1:-1])
    alone = opens[:-1] & opens[1:]
    if busy.observed is not None:  # sampled: only the sample's neighbours are all known
        alone &= busy.observed
    rows = np.sort(busy.row[alone])  # (each request is in at most one busy period)
    return rows.astype(dtype, copy=False)


def busy_segments(requests: pd.DataFrame, periods: BusyPeriods | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(computed tokens, attention tokens², busy seconds) per segment of prefill busy time.

    Each busy period is cut into ``BUSY_SEGMENT_S`` segments by when requests finish prefill;
    a segment's busy time runs from the previous segment's last finish (or the period start)
    to its own last finish, and is charged to the requests finishing in it. ``periods`` is
    ``busy_periods(requests)`` when the caller has it already.
    """
    busy = periods if periods is not None else busy_periods(requests)
    if not len(busy):
        return None
    rows, period = busy.row, busy.period
    cols = FloatColumns(requests, ("prompt_tokens", "cached_tokens"))  # at rows only
    prompt = cols("prompt_tokens", rows)
    cached = np.nan_to_num(cols("cached_tokens", rows), nan=0.0)
    u = np.maximum(prompt - cached, 1.0)
    attn = attention_tokens2(u, cached)
    # periods are consecutive runs sorted by start: a period's first row has its earliest start
    opens = np.flatnonzero(np.diff(period, prepend=0))
    period_start = busy.start[opens][period - 1]
    seg = ((busy.end - period_start) // BUSY_SEGMENT_S).astype(np.int64)
    seg -= seg.min()  # (a negative prefill_s would end before its period starts)
    # (period, segment) as one sortable integer (int64: period ids may be int32)
    key = period.astype(np.int64) * (int(seg.max()) + 1) + seg
    order = np.argsort(key, kind="stable")
    key = key[order]
    heads = np.flatnonzero(np.diff(key, prepend=-1))
    seg_u = np.add.reduceat(u[order], heads)
    seg_attn = np.add.reduceat(attn[order], heads)
    last = np.maximum.reduceat(busy.end[order], heads)
    seg_period = period[order][heads]
    begin = np.empty(len(heads))
    begin[1:] = last[:-1]
    new = np.ones(len(heads), dtype=bool)
    new[1:] = seg_period[1:] != seg_period[:-1]
    begin[new] = period_start[order][heads][new]  # a period's first segment starts with it
    duration = last - begin
    ok = duration > 0
    if busy.observed is not None and busy.group is not None:
        ok &= _complete(busy, seg_period, begin, last)
    return seg_u[ok], seg_attn[ok], duration[ok]


def _complete(busy: BusyPeriods, seg_period: np.ndarray, begin: np.ndarray,
              last: np.ndarray) -> np.ndarray:
    """Per segment of a sampled reconstruction: whether it is the full data's.

    A segment ``[begin, last]`` whose overlapping prefills are all observed has every prefill
    finishing in it present (a missing one would overlap an observed one, so it would have
    been kept), and its instance was busy throughout: its busy time and tokens are exact.
    Segments overlapping a request kept only for its overlap are dropped.
    """
    assert busy.observed is not None and busy.group is not None
    seg_group = busy.group[np.flatnonzero(np.diff(busy.period, prepend=0))][seg_period - 1]
    ok = np.ones(len(begin), dtype=bool)
    margin = ~busy.observed
    cut = np.flatnonzero(np.diff(busy.group)) + 1
    for lo, hi in itertools.pairwise(np.concatenate([[0], cut, [len(busy)]])):  # per instance
        m = np.flatnonzero(margin[lo:hi]) + lo
        if not len(m):
            continue
        # the margin prefills' union (they are in start order): disjoint spans
        reach = np.maximum.accumulate(busy.end[m])
        new = np.ones(len(m), dtype=bool)
        new[1:] = busy.start[m][1:] > reach[:-1]
        heads = np.flatnonzero(new)
        span_lo = busy.start[m][heads]
        span_hi = reach[np.append(heads[1:] - 1, len(m) - 1)]
        g = busy.group[lo]
        a, b = np.searchsorted(seg_group, [g, g + 1])
        i = np.searchsorted(span_lo, last[a:b], side="right") - 1
        ok[a:b] &= ~((i >= 0) & (span_hi[np.maximum(i, 0)] >= begin[a:b]))
    return ok
