"""Arrival timing: how bursty arrivals are and how the arrival rate moves over time.

The capacity model sizes pools for the load each window of the trace offers
(``LoadWindows``, built by ``arrival_profile``) and for the burstiness left inside a
window (the squared CV of arrivals, ``estimate_arrival_cv2``). ``mix.py`` attaches both to
a ``WorkloadMix``; ``pool.py`` sizes per window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from pdprobe.analysis.key_search import runs_key_starts

# Below this many arrivals a squared-CV estimate is noise; Poisson (1.0) is assumed instead.
MIN_ARRIVALS_FOR_CV2: Final = 50
# The index of dispersion needs enough bins to have a variance worth the name.
MIN_DISPERSION_BINS: Final = 20
# Timestamps bucketed coarser than this many zero gaps (Mooncake's 3 s buckets give 90 %) are
# quantised: bins must then span several quanta or the buckets themselves look like bursts.
QUANTISED_ZERO_GAP_FRACTION: Final = 0.2
QUANTUM_BINS: Final = 5
# Load windows are this many TTFT objectives long: a rate swing shorter than a few objectives
# is absorbed by queueing within them (the G/G/c part, through the within-window ca²); a longer
# one builds a backlog (the fluid part). Azure code's bursts (300+ requests in 10 s at a mean of
# 2.6 req/s) are of that kind.
WINDOW_PER_TIMESCALE: Final = 5.0
# Sub-bins per window for the within-window dispersion (ca² of the G/G/c part).
SUB_BINS: Final = 4
# At most this many load windows / dispersion bins: memory follows the arrivals present, not
# the span they claim (one arrival of 1970 in a 2025 trace is 55 years of 10 s windows).
# Beyond it windows widen; 10 s windows over four weeks fit.
MAX_LOAD_WINDOWS: Final = 250_000
MAX_DISPERSION_BINS: Final = 1_000_000


@dataclass(frozen=True, eq=False)
class LoadWindows:
    """How the arrival rate moves over time: per window, its share and relative rate."""

    share: np.ndarray  # n_w / N, sums to 1
    rate_factor: np.ndarray  # window rate / mean rate
    width_s: float
    # each arrival's window, in sorted arrival order (when built from the arrivals): saves the
    # pool recomputing it for every load the same arrivals are sized at
    window_of: np.ndarray | None = None

    @property
    def peak_to_mean(self) -> float:
        return float(self.rate_factor.max())


def _sorted_finite(values: np.ndarray, ordered: bool = False) -> np.ndarray:
    """The finite values in ascending order (no sort when they already are: the usual case).

    ``ordered``: the caller knows the values ascend with no NaN among them (a population's
    arrivals, a window of them); then, when the first and last are finite, every one between
    them is, and the values are returned as they are without a pass over them."""
    v = np.asarray(values, dtype=np.float64)
    if ordered and (not len(v) or (math.isfinite(v[0]) and math.isfinite(v[-1]))):
        return v
    if not np.isfinite(v).all():
        v = v[np.isfinite(v)]
    if len(v) > 1 and not bool(np.all(v[1:] >= v[:-1])):
        v = np.sort(v)
    return v


# Passes over every arrival run in chunks of this many (temporaries stay in the CPU cache).
ARRIVAL_CHUNK: Final = 1 << 16


def _gap_counts(ts: np.ndarray) -> tuple[int, bool]:
    """Of the gaps between sorted finite arrivals: how many are zero, and whether any is
    positive. A gap between finite floats is zero exactly where the two are equal (gradual
    underflow), so neighbours are compared, not subtracted; and sorted arrivals have a
    positive gap exactly when the last exceeds the first (no pass at all)."""
    zeros = 0
    for lo in range(0, len(ts) - 1, ARRIVAL_CHUNK):  # chunks: each gap once
        hi = min(lo + ARRIVAL_CHUNK, len(ts) - 1)
        zeros += int(np.count_nonzero(ts[lo + 1:hi + 1] == ts[lo:hi]))
    return zeros, len(ts) > 1 and bool(ts[-1] > ts[0])


# Counts per window are found by searching the window boundaries among the sorted arrivals
# when there are fewer than one boundary per this many arrivals: a search costs about 20
# steps per boundary (log2 of the arrivals), a pass one step per arrival.
ARRIVALS_PER_SEARCHED_BOUNDARY: Final = 64


def _searched_counts(ts: np.ndarray, win: float, n_win: int) -> tuple[np.ndarray, np.ndarray]:
    """``arrival_counts``' arrivals per window and per sub-bin, from the positions where each
    window and sub-bin starts, without a pass over every arrival (``searched_counts`` of
    the one run)."""
    return searched_counts(ts, np.zeros(1, dtype=np.int64), np.array([len(ts)]),
                           np.array([win]), np.array([n_win]))[0]


def searched_counts(ts: np.ndarray, firsts: np.ndarray, sizes: np.ndarray, width: np.ndarray,
                    n_win: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per run ``j`` of sorted arrivals ``ts[firsts[j]:firsts[j] + sizes[j]]`` (non-empty) in
    ``n_win[j]`` load windows of ``width[j]`` seconds from its first arrival:
    ``arrival_counts``' arrivals per window and per sub-bin (int64), from the positions where
    each window and sub-bin starts (the same floor divisions, at a few positions: they are
    monotone in the sorted arrivals), every run's searches together."""
    t0 = ts[firsts]
    width = np.asarray(width, dtype=np.float64)
    n_win = np.asarray(n_win, dtype=np.int64)
    # (n_win is exact in float64: the products and quotients are the Python floats' bits)
    limit, sub_width = n_win * width, width / SUB_BINS

    def rel(j: np.ndarray, at: np.ndarray) -> np.ndarray:  # arrival ``at`` of run j, from t0
        return ts[firsts[j] + at] - t0[j]

    j_w, k_w = _targets(n_win)
    starts = runs_key_starts(lambda i, at: rel(j_w[i], at) // width[j_w[i]], k_w, sizes[j_w])
    # the arrivals before the end of the last full window are a prefix (key 1: beyond it)
    inside = runs_key_starts(lambda i, at: rel(i, at) >= limit[i], np.ones(len(t0)), sizes)
    j_s, k_s = _targets(n_win * SUB_BINS + 1)
    sub_starts = runs_key_starts(lambda i, at: rel(j_s[i], at) // sub_width[j_s[i]], k_s,
                                 inside[j_s])
    cut_w = np.cumsum(n_win)[:-1]
    cut_s = np.cumsum(n_win * SUB_BINS + 1)[:-1]
    return [(np.diff(np.append(s_w, size)).astype(np.int64), np.diff(s_s).astype(np.int64))
            for s_w, s_s, size in zip(np.split(starts, cut_w), np.split(sub_starts, cut_s),
                                      sizes.tolist(), strict=True)]


def _targets(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For runs wanting keys ``0..counts[j] - 1``: each target's run and key."""
    run = np.repeat(np.arange(len(counts)), counts)
    key = np.arange(len(run)) - np.repeat(np.cumsum(counts) - counts, counts)
    return run, key


def arrival_counts(ts: np.ndarray, win: float, n_win: int, keep: bool = True
                    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Each sorted arrival's load window (the tail joins the last; None unless ``keep``),
    arrivals per window and arrivals per ``SUB_BINS`` sub-bin of each full window (int64,
    ``n_win * SUB_BINS``)."""
    if not keep and n_win * SUB_BINS * ARRIVALS_PER_SEARCHED_BOUNDARY < len(ts):
        counts_w, counts = _searched_counts(ts, win, n_win)
        return None, counts_w, counts
    w_idx = np.empty(len(ts), dtype=np.int64) if keep else None
    m = n_win * SUB_BINS
    counts = np.zeros(m, dtype=np.int64)
    counts_w = np.zeros(n_win, dtype=np.int64)
    limit, sub_width = n_win * win, win / SUB_BINS
    for lo in range(0, len(ts), ARRIVAL_CHUNK):  # chunks: no temporaries of every arrival
        rel = ts[lo:lo + ARRIVAL_CHUNK] - ts[0]
        w = np.minimum((rel // win).astype(np.int64), n_win - 1)
        if w_idx is not None:
            w_idx[lo:lo + ARRIVAL_CHUNK] = w
        counts_w += np.bincount(w, minlength=n_win)
        # sorted: the arrivals before the end of the last full window are a prefix
        inside = rel[: int(np.searchsorted(rel, limit, side="left"))]
        counts += np.bincount((inside // sub_width).astype(np.int64), minlength=m)[:m]
    return w_idx, counts_w, counts


def window_of(load: LoadWindows, ts: np.ndarray, t0: float) -> np.ndarray:
    """The load window of arrivals ``ts`` (any of those ``load`` was measured on, the first
    of which arrived at ``t0``): what ``LoadWindows.window_of`` holds for them, computed for
    these only (a sample's, without an index of every arrival)."""
    return np.minimum(((np.asarray(ts, dtype=np.float64) - t0) // load.width_s)
                      .astype(np.int64), len(load.share) - 1)


def _zero_share(gaps: np.ndarray) -> float:
    """``mean(gaps == 0)``: the same number, counted without a float pass."""
    return np.count_nonzero(gaps == 0.0) / len(gaps) if len(gaps) else float("nan")


def estimate_arrival_cv2(arrival_ts: np.ndarray, timescale_s: float) -> tuple[float, str]:
    """Squared CV of arrivals at the time scale that matters for the TTFT queue.

    Uses the index of dispersion of counts (variance / mean of arrivals per bin), which equals
    the inter-arrival ``ca2`` of a renewal process and, unlike gap statistics, is robust to
    bucketed timestamps. Bins are ``timescale_s`` wide (the TTFT SLO: bursts shorter than it
    are absorbed within the objective), widened to several timestamp quanta when arrival times
    are bucketed.
    """
    ts = _sorted_finite(arrival_ts)
    if len(ts) < MIN_ARRIVALS_FOR_CV2:
        return 1.0, f"assumed Poisson (only {len(ts)} arrivals; {MIN_ARRIVALS_FOR_CV2} needed)"
    with np.errstate(over="ignore", invalid="ignore"):  # out-of-range times: inf, judged below
        gaps = np.diff(ts)
        span = float(ts[-1] - ts[0])
    if span <= 0.0:
        return 1.0, "assumed Poisson (all arrivals share one timestamp)"
    if not math.isfinite(span):
        return 1.0, "assumed Poisson (arrival times out of range)"
    width = max(float(timescale_s), 1e-3, span / MAX_DISPERSION_BINS)
    quantised = _zero_share(gaps) > QUANTISED_ZERO_GAP_FRACTION
    quantum = 0.0
    note = ""
    if quantised:
        quantum = float(np.median(gaps[gaps > 0.0])) if np.any(gaps > 0.0) else span
        width = max(width, QUANTUM_BINS * quantum)
        note = f", timestamps bucketed every {quantum:.3g} s"
    if span / width < MIN_DISPERSION_BINS:
        width = span / MIN_DISPERSION_BINS
        if quantised and width < QUANTUM_BINS * quantum:
            return 1.0, "assumed Poisson (trace too short for its timestamp buckets)"
    full_bins = max(int(span // width), 1)  # the last, partial bin would bias the variance
    idx = ((ts - ts[0]) / width).astype(np.int64)
    counts = np.bincount(idx, minlength=full_bins + 1)[:full_bins]
    mean = float(counts.mean())
    if mean <= 0.0:
        return 1.0, "assumed Poisson (no arrivals in bins)"
    return float(counts.var() / mean), f"index of dispersion over {width:.3g} s bins{note}"


def arrival_profile(arrival_ts: np.ndarray, timescale_s: float, keep_windows: bool = True,
                    ordered: bool = False) -> tuple[float, str, LoadWindows | None]:
    """The load over time (rate per window) and the burstiness within a window.

    Windows are ``WINDOW_PER_TIMESCALE`` × ``timescale_s`` (the TTFT objective) long, and at
    least ``SUB_BINS`` timestamp buckets: a rate swing lasting that long cannot be absorbed
    within the objective, so each window keeps its own rate (``pool.py`` carries overloaded
    windows as a fluid backlog). ``ca2`` is the index of dispersion of counts in ``SUB_BINS``
    sub-bins *around each window's own mean*, pooled over windows: the burstiness left inside
    a window, for the G/G/c part. Too short a trace gives one stationary window and the
    whole-trace dispersion (``estimate_arrival_cv2``). Without ``keep_windows`` the windows
    carry no ``window_of`` (memory: an int64 per arrival; ``window_of`` gives a sample's).
    ``ordered``: the arrivals ascend with no NaN among them (``_sorted_finite`` then need not
    check them all).
    """
    ts = _sorted_finite(arrival_ts, ordered)
    plan = profile_plan(ts, timescale_s)
    if not isinstance(plan, ProfilePlan):
        return plan
    w_idx, whole, counts = arrival_counts(ts, plan.width_s, plan.n_win, keep_windows)
    return profile_finish(plan, w_idx, whole, counts)


@dataclass(frozen=True)
class ProfilePlan:
    """``arrival_profile``'s load windows before the arrivals are counted in them: their width,
    how many, the arrivals' span and the note on how the width was chosen."""

    width_s: float
    n_win: int
    span: float
    note: str


def profile_plan(ts: np.ndarray, timescale_s: float
                 ) -> ProfilePlan | tuple[float, str, LoadWindows | None]:
    """``arrival_profile``'s windows for sorted finite arrivals ``ts`` (``_sorted_finite``'s),
    or its whole answer when they take none (too few arrivals, too short a span)."""
    if len(ts) < MIN_ARRIVALS_FOR_CV2:
        cv2, how = estimate_arrival_cv2(ts, timescale_s)
        return cv2, how, None
    with np.errstate(over="ignore", invalid="ignore"):  # out-of-range times: inf, judged below
        span = float(ts[-1] - ts[0])
    win = WINDOW_PER_TIMESCALE * max(float(timescale_s), 0.1)
    note = ""
    zeros, positive = _gap_counts(ts)
    if zeros / (len(ts) - 1) > QUANTISED_ZERO_GAP_FRACTION and positive:
        with np.errstate(over="ignore", invalid="ignore"):
            gaps = np.diff(ts)
        quantum = float(np.median(gaps[gaps > 0.0]))
        win = max(win, SUB_BINS * quantum)
        note = f", timestamps bucketed every {quantum:.3g} s"
    if not math.isfinite(span):
        cv2, how = estimate_arrival_cv2(ts, timescale_s)
        return cv2, how, None
    if span / win > MAX_LOAD_WINDOWS:
        win = span / MAX_LOAD_WINDOWS
        note += f", windows widened to {win:.3g} s (at most {MAX_LOAD_WINDOWS:,})"
    n_win = min(int(span // win), MAX_LOAD_WINDOWS)
    if n_win < MIN_DISPERSION_BINS:
        cv2, how = estimate_arrival_cv2(ts, timescale_s)
        return cv2, how, None
    return ProfilePlan(win, n_win, span, note)


def profile_finish(plan: ProfilePlan, w_idx: np.ndarray | None, whole: np.ndarray,
                   counts: np.ndarray) -> tuple[float, str, LoadWindows]:
    """``arrival_profile``'s answer from ``arrival_counts``' counts in ``plan``'s windows."""
    win, n_win, span = plan.width_s, plan.n_win, plan.span
    counts_w = whole.astype(np.float64)
    widths = np.full(n_win, win)
    widths[-1] = span - win * (n_win - 1)
    load = LoadWindows(counts_w / counts_w.sum(), (counts_w / widths) / (counts_w.sum() / span),
                       win, w_idx)
    counts = counts.reshape(n_win, SUB_BINS).astype(np.float64)
    within = float(np.sum((counts - counts.mean(axis=1, keepdims=True)) ** 2)) / (
        n_win * (SUB_BINS - 1))
    mean_count = float(counts.mean())
    cv2 = within / mean_count if mean_count > 0 else 1.0
    busiest = float(np.quantile(load.rate_factor, 0.99))
    return cv2, (f"index of dispersion within {win:.3g} s windows{plan.note}; the busiest 1 % "
                 f"of windows run at {busiest:.1f}× the mean rate"), load
