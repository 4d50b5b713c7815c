"""The time grid of a live collection: the window, its fine and coarse steps, and the pieces a
long range query is split into (Prometheus' 11,000 points per series).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from pdprobe.errors import UsageError

# The most common scrape interval: a finer step only repeats the same samples.
MIN_STEP_S: Final = 15.0


# Points per gauge/counter series over the window: enough for distributions and trends (the
# analyses bin by minutes), small enough that 500 instances answer in a few MB.
TARGET_POINTS: Final = 120


# Points per engine counter and histogram series: one per ~5 min of a 1 h window. Raw cumulative
# values lose nothing between points (increases stay exact), only the time resolution of rates;
# histogram buckets are ~20 series per instance and family and dominate the answers' size
# (Prometheus spends ~2.5 us per returned point).
COARSE_TARGET_POINTS: Final = 12


# Prometheus refuses range queries with more points per series than this
# (web/api/v1: "exceeded maximum resolution of 11,000 points per timeseries").
MAX_POINTS_PER_SERIES: Final = 11_000


@dataclass(frozen=True)
class Window:
    """The evaluation grid: ``start_ts + k * step_s`` for ``k = 0..points-1`` ends at ``end_ts``."""

    start_ts: float
    end_ts: float
    step_s: float
    coarse_step_s: float

    @property
    def span_s(self) -> float:
        return self.end_ts - self.start_ts

    @property
    def points(self) -> int:
        return round(self.span_s / self.step_s) + 1

    @property
    def coarse_points(self) -> int:
        return round(self.span_s / self.coarse_step_s) + 1


def choose_window(since_s: float, until_ts: float, step_s: float | None = None) -> Window:
    """The grid for a window of ``since_s`` ending at ``until_ts``.

    Without ``step_s`` the step is ``since_s / TARGET_POINTS`` but at least ``MIN_STEP_S``,
    adjusted so that the window is a whole number of steps (both ends are evaluated, so a
    counter's increase over the window is exact). With ``step_s`` the step is kept and the
    window shortened by less than one step to fit. The coarse step (engine counters and
    histograms) is a whole multiple of the step, giving about ``COARSE_TARGET_POINTS`` points.
    """
    if since_s <= 0:
        raise UsageError(f"--since {since_s:g} s must be positive", hint="use e.g. 30m")
    if step_s is not None:
        if step_s <= 0:
            raise UsageError(f"--step {step_s:g} s must be positive", hint="use e.g. 15s")
        n = max(1, math.floor(since_s / step_s + 1e-9))
        step = step_s
    else:
        wanted = max(MIN_STEP_S, since_s / TARGET_POINTS)
        n = max(1, math.floor(since_s / wanted + 1e-9))
        step = since_s / n
    k = 1
    if n > COARSE_TARGET_POINTS:
        # The largest divisor of n that still leaves at least COARSE_TARGET_POINTS intervals.
        k = max(d for d in range(1, n // COARSE_TARGET_POINTS + 1) if n % d == 0)
    return Window(start_ts=until_ts - n * step, end_ts=until_ts, step_s=step,
                  coarse_step_s=step * k)


def chunk_ranges(start_ts: float, end_ts: float, step_s: float,
                 max_points: int = MAX_POINTS_PER_SERIES) -> list[tuple[float, float]]:
    """Split ``[start, end]`` on the step grid into pieces of at most ``max_points`` points."""
    n = round((end_ts - start_ts) / step_s) + 1
    if n <= max_points:
        return [(start_ts, end_ts)]
    out = []
    k = 0
    while k < n:
        last = min(n - 1, k + max_points - 1)
        out.append((start_ts + k * step_s, start_ts + last * step_s))
        k = last + 1
    return out
