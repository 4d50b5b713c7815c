"""Robust statistics the rules share: peer comparison, trend tests and change points.

Per-instance comparisons use the median and the median absolute deviation (one slow instance
must not drag the baseline it is compared with); changes over time use Mann–Kendall/Theil–Sen
trends, a hinge fit for "when did it start", and a CUSUM change point on windowed means with a
minimum segment length, so one bad scrape never makes a finding. The rank tests behind them
(``rank_tests.py``) are scipy.stats' arithmetic without importing scipy.stats (~0.8 CPU-s).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Final

import numpy as np

from pdprobe.analysis.evidence.rank_tests import (
    kendall_tau,
    mann_whitney_p,
    spearman_rho,
    theil_sen,
)

# Iglewicz & Hoaglin: |modified z| > 3.5 marks an outlier; 0.6745 makes MAD comparable to sigma.
MODIFIED_Z_SCALE: Final = 0.6745
OUTLIER_Z: Final = 3.5
# A MAD of zero (identical peers) would make any difference infinitely significant; floor the
# spread at 5 % of the median so "1.02x the peers" never counts as an outlier.
MAD_FLOOR_FRACTION: Final = 0.05
# Mann–Kendall needs this many points before its p-value means anything.
MIN_TREND_POINTS: Final = 8
# A change point must leave this many bins on each side: a single bin is a bad scrape.
MIN_SEGMENT_BINS: Final = 3
# Earlier windows a change point's pre-shift bins are cut into to measure the series' own
# variation: four windows of a quarter each (at least a few bins each in a 60-bin window).
SWING_WINDOWS: Final = 4


def robust_z(values: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """Modified z-scores of ``values`` against the median/MAD of ``reference`` (default: values)."""
    x = np.asarray(values, dtype=np.float64)
    ref = x if reference is None else np.asarray(reference, dtype=np.float64)
    ref = ref[np.isfinite(ref)]
    if ref.size == 0:
        return np.full(x.shape, np.nan)
    med = float(np.median(ref))
    mad = float(np.median(np.abs(ref - med)))
    floor = max(MAD_FLOOR_FRACTION * abs(med), 1e-12)
    return MODIFIED_Z_SCALE * (x - med) / max(mad, floor)


def peer_median(values: np.ndarray) -> np.ndarray:
    """For each element, the median of the *other* finite elements (leave-one-out baseline)."""
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n < 2:
        return np.full(n, np.nan)
    others = np.where(~np.eye(n, dtype=bool), x[None, :], np.nan)
    with warnings.catch_warnings():  # an instance whose peers are all NaN gets NaN, silently
        warnings.simplefilter("ignore", RuntimeWarning)
        out: np.ndarray = np.nanmedian(others, axis=1)
    return out


def leave_one_out_z(values: np.ndarray) -> np.ndarray:
    """Modified z of each element against the median/MAD of its peers (not itself)."""
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    out = np.full(n, np.nan)
    if n < 3:
        return out
    others = np.where(~np.eye(n, dtype=bool), x[None, :], np.nan)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(others, axis=1)
        mad = np.nanmedian(np.abs(others - med[:, None]), axis=1)
    floor = np.maximum(MAD_FLOOR_FRACTION * np.abs(med), 1e-12)
    out = MODIFIED_Z_SCALE * (x - med) / np.maximum(mad, floor)
    out[~np.isfinite(x)] = np.nan
    return out


@dataclass(frozen=True)
class Trend:
    """A monotonic trend of a regular series: Mann–Kendall test and Theil–Sen line."""

    n: int
    tau: float  # Kendall's tau between time and value
    p_value: float  # two-sided Mann–Kendall p-value
    slope_per_s: float  # Theil–Sen slope
    start_level: float  # Theil–Sen line at the first point
    end_level: float  # ... and at the last
    onset_ts: float  # where the rise (or fall) began: hinge fit
    end_ts: float
    onset_level: float  # hinge line at the onset
    hinge_end_level: float  # hinge line at the last point

    @property
    def growth(self) -> float:
        """How much the level rose since the onset (hinge fit)."""
        return self.hinge_end_level - self.onset_level

    def rising(self, alpha: float, min_tau: float, min_growth: float) -> bool:
        """Significant, clearly monotone and large enough to matter."""
        return self.p_value < alpha and self.tau >= min_tau and self.growth >= min_growth

    @property
    def rising_for_s(self) -> float:
        return self.end_ts - self.onset_ts


def trend(ts: np.ndarray, values: np.ndarray) -> Trend | None:
    """Trend of a series (NaNs dropped); None with fewer than ``MIN_TREND_POINTS`` points."""
    t = np.asarray(ts, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(t) & np.isfinite(v)
    t, v = t[ok], v[ok]
    if t.size < MIN_TREND_POINTS:
        return None
    if np.ptp(v) == 0:
        return Trend(n=int(t.size), tau=0.0, p_value=1.0, slope_per_s=0.0,
                     start_level=float(v[0]), end_level=float(v[0]), onset_ts=float(t[0]),
                     end_ts=float(t[-1]), onset_level=float(v[0]),
                     hinge_end_level=float(v[0]))
    tau, p = kendall_tau(t, v)
    slope, intercept = theil_sen(v, t)
    onset_idx, onset_level, end_level = hinge(t, v)
    return Trend(n=int(t.size), tau=tau if np.isfinite(tau) else 0.0,
                 p_value=p if np.isfinite(p) else 1.0, slope_per_s=float(slope),
                 start_level=float(intercept + slope * t[0]),
                 end_level=float(intercept + slope * t[-1]),
                 onset_ts=float(t[onset_idx]), end_ts=float(t[-1]),
                 onset_level=float(onset_level), hinge_end_level=float(end_level))


def hinge(t: np.ndarray, v: np.ndarray) -> tuple[int, float, float]:
    """Best "flat, then linear" fit: (onset index, level at onset, level at the end).

    Least squares of ``v = a + b * max(0, t - t_k)`` for every candidate onset ``k`` at once
    (an n x n basis; n is a few hundred bins at most).
    """
    n = t.size
    if n < 4:
        return 0, float(v[0]), float(v[-1])
    cands = np.arange(0, n - MIN_SEGMENT_BINS + 1)
    h = np.maximum(0.0, t[None, :] - t[cands, None])
    hm = h.mean(axis=1, keepdims=True)
    vm = v.mean()
    hc = h - hm
    var = (hc * hc).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        b = np.where(var > 0, (hc * (v - vm)[None, :]).sum(axis=1) / var, 0.0)
    a = vm - b * hm[:, 0]
    resid = v[None, :] - (a[:, None] + b[:, None] * h)
    sse = (resid * resid).sum(axis=1)
    k = int(np.argmin(sse))
    onset = int(cands[k])
    return onset, float(a[k]), float(a[k] + b[k] * (t[-1] - t[onset]))


@dataclass(frozen=True)
class ChangePoint:
    """The strongest shift in the level of a series (CUSUM on deviations from the mean)."""

    index: int  # first bin of the new level
    ts: float
    before: float  # median level before
    after: float  # median level after
    p_value: float  # Mann–Whitney between the two segments' bins
    # The statistic's own variation before the split: the largest deviation of an earlier
    # window's median (``SWING_WINDOWS`` windows of consecutive bins) from the median before,
    # in the units of the values tested (log units for the length mix). A shift no larger than
    # this is the series wandering as it did before, not a new level.
    before_swing: float = 0.0

    @property
    def relative_change(self) -> float:
        base = abs(self.before) if self.before else float("nan")
        return (self.after - self.before) / base


def change_point(ts: np.ndarray, values: np.ndarray) -> ChangePoint | None:
    """The single most likely level shift, or None for too-short series.

    The split maximises |CUSUM| of deviations from the overall mean, restricted to splits that
    leave ``MIN_SEGMENT_BINS`` on each side; medians and a rank test keep one outlying bin from
    deciding it.
    """
    t = np.asarray(ts, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(t) & np.isfinite(v)
    t, v = t[ok], v[ok]
    n = v.size
    if n < 2 * MIN_SEGMENT_BINS:
        return None
    cusum = np.cumsum(v - v.mean())[:-1]  # cusum[k-1] splits before index k
    ks = np.arange(1, n)
    # Normalise so splits near the edges are not favoured or penalised by segment size.
    weight = np.sqrt(ks * (n - ks) / n)
    score = np.abs(cusum) / np.maximum(weight, 1e-12)
    valid = (ks >= MIN_SEGMENT_BINS) & (ks <= n - MIN_SEGMENT_BINS)
    score = np.where(valid, score, -np.inf)
    k = int(ks[int(np.argmax(score))])
    before, after = v[:k], v[k:]
    p = 1.0 if np.ptp(v) == 0 else mann_whitney_p(before, after)
    return ChangePoint(index=k, ts=float(t[k]), before=float(np.median(before)),
                       after=float(np.median(after)), p_value=p,
                       before_swing=window_swing(before))


def window_swing(values: np.ndarray) -> float:
    """Largest deviation of a window median from the overall median of ``values``.

    The bins are cut into ``SWING_WINDOWS`` consecutive windows (single bins when there are
    fewer): what a level shift must exceed to be more than the series' usual wandering.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return 0.0
    parts = np.array_split(v, min(SWING_WINDOWS, v.size))
    medians = np.array([np.median(p) for p in parts])
    return float(np.max(np.abs(medians - np.median(v))))


def spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """Spearman rho, p-value and n over the pairs where both are finite (nan, 1.0 if < 5)."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    n = int(ok.sum())
    if n < 5 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return float("nan"), 1.0, n
    rho, p = spearman_rho(a[ok], b[ok])
    return rho, p, n


def significant_figures(value: float, digits: int = 4) -> float:
    """Round for display and stable output (findings must not differ in the 12th digit)."""
    if not np.isfinite(value) or value == 0:
        return float(value)
    return float(f"{value:.{digits}g}")
