"""The exact overlap test of a time-block sample (``sampling.sample_intervals``): which
candidate requests overlap an observed one of their group (instance), one group at a time, and
optionally the needed requests sorted by (group, start) for a reconstruction that wants them
in that order (prefill busy periods).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# The [start, end) intervals of the requests at an index (a slice of rows or ascending
# positions). The reconstructions compute them from record columns on demand: whole start and
# end arrays would be 160 MB of fresh memory at 10 million requests, read once or twice.
Intervals = Callable[[slice | np.ndarray], tuple[np.ndarray, np.ndarray]]


def group_parts(cand: np.ndarray, group: np.ndarray | None) -> list[np.ndarray]:
    """The candidates (ascending positions) split by ``group`` code, in code order, each
    part ascending: one stable sort of the codes (a radix sort of 16-bit ones) instead of a
    comparison pass over every candidate per group."""
    if group is None or not len(cand):
        return [cand]
    codes = group[cand]
    lo, hi = int(codes.min()), int(codes.max())
    if codes.dtype.itemsize > 2 and hi - lo < 2**15:
        # numpy's stable sort of 16-bit integers is a radix sort
        codes = np.subtract(codes, lo).astype(np.int16)
        hi, lo = hi - lo, 0
    order = np.argsort(codes, kind="stable")
    # the parts' sizes are the codes' counts (no gather of the sorted codes to find where
    # they change): a table of the code range, unless it is much wider than the candidates
    if hi - lo <= len(cand):
        counts = np.bincount(codes if lo == 0 else np.subtract(codes, lo, dtype=np.intp))
        cuts = np.cumsum(counts[counts > 0])[:-1]
    else:
        codes = codes[order]
        cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    return np.split(cand[order], cuts)


# The needed rows sorted by (group, start) and, when asked for, their intervals in that order.
Kept = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]


def mark_overlapping(intervals: Intervals, cand: np.ndarray, observed: np.ndarray,
                     needed: np.ndarray, group: np.ndarray | None, closed: bool,
                     by_group: bool = False, pad_s: float | None = None) -> Kept | None:
    """Marks in ``needed`` the candidates (ascending positions ``cand``) that overlap an
    observed request of their group. One group at a time: only its intervals are computed.
    ``by_group``: returns the needed rows' positions sorted by (group, start), stably (each
    group's candidates are sorted by start for the test anyway), and with ``pad_s`` their
    intervals in that order: ``intervals`` then gives the intervals the caller keeps, and the
    test's ends are theirs plus ``pad_s`` (e.g. a tolerance), so they are computed once."""
    # needed rows are candidates: the sorted ones are written into arrays of that size
    # (no list of per-group pieces and no concatenated copy of them), allocated once the
    # split's sort order is freed; ``cand`` itself is not read past the split
    size, dtype = (len(cand) if by_group else 0), cand.dtype
    parts = group_parts(cand, group)
    del cand
    kept = np.empty(size, dtype=dtype)
    spans = (np.empty(size), np.empty(size)) if pad_s is not None and by_group else None
    at_kept = 0
    for part in parts:  # per group, not per request
        # numpy gathers with intp positions at about twice the speed of int32 ones: the
        # group's positions converted once, for the five gathers below
        rows = part.astype(np.intp)
        seen = observed[rows]
        if not seen.any():
            continue
        s_g, e_g = intervals(rows)
        if spans is not None:  # the kept ends as given, the test's padded
            kept_e, e_g = e_g, e_g + pad_s
        if by_group:  # every candidate by start; the observed ones in that order
            by_start = np.argsort(s_g, kind="stable")
            obs = by_start[seen[by_start]]
        else:
            obs = np.flatnonzero(seen)
            obs = obs[np.argsort(s_g[obs], kind="stable")]
        # the union of the observed intervals: disjoint spans, sorted, ends increasing
        reach = np.maximum.accumulate(e_g[obs])
        new = np.ones(len(obs), dtype=bool)
        new[1:] = s_g[obs][1:] > reach[:-1]
        heads = np.flatnonzero(new)
        span_lo = s_g[obs][heads]
        span_hi = reach[np.append(heads[1:] - 1, len(obs) - 1)]
        # only the candidates not observed are tested: an observed one is needed already
        # (``needed`` starts as ``observed``, and each row is in one group's candidates), and
        # under a dense sample (prefill busy periods: one block in three) they are most
        other = np.flatnonzero(~seen)
        s_o, e_o = s_g[other], e_g[other]
        # a request overlaps span i when span_lo[i] < its end and its start < span_hi[i] (or
        # <= for closed intervals); of the spans opening before its end the last reaches
        # furthest
        i = np.searchsorted(span_lo, e_o, side="right" if closed else "left") - 1
        reach_i = span_hi[np.maximum(i, 0)]
        hit = s_o <= reach_i if closed else s_o < reach_i
        hit &= i >= 0
        other = other[hit]
        needed[rows[other]] = True
        if by_group:
            seen[other] = True  # now: the group's needed candidates
            at = by_start[seen[by_start]]
            np.take(part, at, out=kept[at_kept:at_kept + len(at)])
            if spans is not None:
                np.take(s_g, at, out=spans[0][at_kept:at_kept + len(at)])
                np.take(kept_e, at, out=spans[1][at_kept:at_kept + len(at)])
            at_kept += len(at)
    if not by_group:
        return None
    # views when they fill most of the arrays, else copies (the rest freed)
    cut = (lambda a: a[:at_kept]) if 2 * at_kept >= size else (lambda a: a[:at_kept].copy())
    return cut(kept), *((cut(spans[0]), cut(spans[1])) if spans is not None else (None, None))
