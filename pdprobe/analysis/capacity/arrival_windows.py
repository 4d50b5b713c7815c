"""Every capacity window's arrival profile at once (``window_profiles``): what
``arrival_profile`` gives for each window's run of sorted arrivals, with the binary searches
for its load windows' and sub-bins' first arrivals run for all windows together.

A sampled mix sizes each capacity window (90 at 10 million requests) with the burstiness of
all its arrivals; one window's searches are ~17 halving steps over a few hundred keys, so per
window they were Python overhead (~0.5 ms), not arithmetic. Together they are the same ~17
steps over every window's keys. Each key is computed exactly as ``arrival_profile`` computes
it (the same float64 subtraction and floor division), and a binary search for the first key
reaching a target finds the same position whatever order it is run in, so the counts (and
every figure made of them) are the per-window ones to the bit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pdprobe.analysis.capacity.arrivals import (
    ARRIVALS_PER_SEARCHED_BOUNDARY,
    SUB_BINS,
    LoadWindows,
    ProfilePlan,
    arrival_counts,
    arrival_profile,
    profile_finish,
    profile_plan,
)

Profile = tuple[float, str, LoadWindows | None]


def window_profiles(ts: np.ndarray, bounds: np.ndarray, timescale_s: float,
                    wanted: np.ndarray | None = None) -> list[Profile | None]:
    """Per window ``w``: ``arrival_profile(ts[bounds[w]:bounds[w + 1]], timescale_s,
    keep_windows=False, ordered=True)`` (``ts`` ascending, without NaN: a population's
    arrivals); None for the windows ``wanted`` (a mask) leaves out."""
    n_win = len(bounds) - 1
    out: list[Profile | None] = [None] * n_win
    plans: list[tuple[int, ProfilePlan]] = []  # the windows whose counts are searched
    for w in range(n_win):  # per window: its plan (a few scalars), not per arrival
        if wanted is not None and not wanted[w]:
            continue
        lo, hi = int(bounds[w]), int(bounds[w + 1])
        part = ts[lo:hi]
        # (an infinite end: ``arrival_profile``'s own filtering, window by window)
        finite = not len(part) or bool(np.isfinite(part[[0, -1]]).all())
        plan = profile_plan(part, timescale_s) if finite else None
        if plan is None:
            out[w] = arrival_profile(part, timescale_s, keep_windows=False, ordered=True)
        elif not isinstance(plan, ProfilePlan):
            out[w] = plan
        elif plan.n_win * SUB_BINS * ARRIVALS_PER_SEARCHED_BOUNDARY < len(part):
            plans.append((w, plan))
        else:  # few arrivals per boundary: counted by a pass, as ``arrival_counts`` does
            _, whole, counts = arrival_counts(part, plan.width_s, plan.n_win, keep=False)
            out[w] = profile_finish(plan, None, whole, counts)
    if plans:
        firsts = np.array([int(bounds[w]) for w, _ in plans], dtype=np.int64)
        sizes = np.array([int(bounds[w + 1]) - int(bounds[w]) for w, _ in plans],
                         dtype=np.int64)
        for (w, plan), (whole, counts) in zip(
                plans, _searched_counts_many(ts, firsts, sizes, [p for _, p in plans]),
                strict=True):
            out[w] = profile_finish(plan, None, whole, counts)
    return out


def _searched_counts_many(ts: np.ndarray, firsts: np.ndarray, sizes: np.ndarray,
                          plans: list[ProfilePlan]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``arrivals._searched_counts`` of each run ``ts[firsts[j]:firsts[j] + sizes[j]]`` in
    ``plans[j]``'s windows: (arrivals per window, arrivals per sub-bin), int64."""
    t0 = ts[firsts]
    # the same Python arithmetic as ``_searched_counts``, one window at a time
    width = np.array([p.width_s for p in plans], dtype=np.float64)
    limit = np.array([p.n_win * p.width_s for p in plans], dtype=np.float64)
    sub_width = np.array([p.width_s / SUB_BINS for p in plans], dtype=np.float64)
    n_win = np.array([p.n_win for p in plans], dtype=np.int64)

    def rel(j: np.ndarray, at: np.ndarray) -> np.ndarray:  # arrival ``at`` of run j, from t0
        return ts[firsts[j] + at] - t0[j]

    j_w, k_w = _targets(n_win)
    starts = _first_reaching(lambda i, at: rel(j_w[i], at) // width[j_w[i]], k_w,
                             sizes[j_w])
    # the arrivals before the end of the last full window are a prefix
    every = np.arange(len(plans))
    inside = _first_reaching(lambda i, at: rel(i, at) >= limit[i], np.ones(len(plans)), sizes)
    j_s, k_s = _targets(n_win * SUB_BINS + 1)
    sub_starts = _first_reaching(lambda i, at: rel(j_s[i], at) // sub_width[j_s[i]], k_s,
                                 inside[j_s])
    out = []
    cut_w = np.cumsum(n_win)[:-1]
    cut_s = np.cumsum(n_win * SUB_BINS + 1)[:-1]
    for j, (s_w, s_s) in zip(every, zip(np.split(starts, cut_w), np.split(sub_starts, cut_s),
                                         strict=True), strict=True):
        out.append((np.diff(np.append(s_w, sizes[j])).astype(np.int64),
                    np.diff(s_s).astype(np.int64)))
    return out


def _targets(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For runs wanting keys ``0..counts[j] - 1``: each target's run and key."""
    run = np.repeat(np.arange(len(counts)), counts)
    key = np.arange(len(run)) - np.repeat(np.cumsum(counts) - counts, counts)
    return run, key


def _first_reaching(key_at: Callable[[np.ndarray, np.ndarray], np.ndarray],
                    targets: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per target ``i``: the first position ``p`` in ``0..n[i] - 1`` whose key
    ``key_at(i, p)`` (non-decreasing in ``p``) is at least ``targets[i]``, else ``n[i]``:
    ``row_slices.key_starts`` for many runs at once (one halving step for every open
    target per round)."""
    lo = np.zeros(len(targets), dtype=np.int64)
    hi = np.asarray(n, dtype=np.int64).copy()
    open_ = np.flatnonzero(lo < hi)
    while len(open_):
        mid = (lo[open_] + hi[open_]) // 2
        reached = key_at(open_, mid) >= targets[open_]
        hi[open_[reached]] = mid[reached]
        lo[open_[~reached]] = mid[~reached] + 1
        open_ = open_[lo[open_] < hi[open_]]
    return lo
