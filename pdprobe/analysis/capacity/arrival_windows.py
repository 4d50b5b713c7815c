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
    searched_counts,
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
        width = np.array([p.width_s for _, p in plans], dtype=np.float64)
        n_win_of = np.array([p.n_win for _, p in plans], dtype=np.int64)
        for (w, plan), (whole, counts) in zip(
                plans, searched_counts(ts, firsts, sizes, width, n_win_of), strict=True):
            out[w] = profile_finish(plan, None, whole, counts)
    return out
