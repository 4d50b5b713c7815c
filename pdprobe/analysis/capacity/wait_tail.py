"""The exponential wait tail over requests: ``P(W > s)``, and the TTFT quantile's search.

``exceed_probability`` is the inner loop of every pool-size search; ``ShareAbove`` is the
share of requests whose TTFT (wait-free TTFT + wait) exceeds ``t``, and ``falling_root`` the
bracketing search ``PrefillPool.ttft_quantile`` (``pool.py``) runs on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from pdprobe.analysis.capacity.pool import PoolWaits

# Exponents beyond this are exp(−1000) = 0 in float64: the tail of a wait that long is nil.
MAX_TAIL_EXPONENT: Final = 1e3


def exceed_probability(s: np.ndarray, p_wait: np.ndarray, tail_s: np.ndarray) -> np.ndarray:
    """``P(W > s)`` elementwise: 1 where ``s < 0``, else ``p·exp(−s/θ)`` (0 when ``θ = 0``).

    In place on one buffer (a few passes over the requests instead of a dozen): this is the
    inner loop of every pool-size search and TTFT quantile.
    """
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        z = np.divide(s, tail_s)  # 0/0 (no wait at all, zero slack) is NaN: fmin makes it 1e3
        np.fmin(z, MAX_TAIL_EXPONENT, out=z)
        np.negative(z, out=z)
        np.exp(z, out=z)  # where s < 0 this may overflow; those are set to 1 below
        np.multiply(z, p_wait, out=z)
    np.copyto(z, 1.0, where=s < 0.0)
    return z


# Once the bracket holds at most this many requests' wait-free TTFTs (or 1/16 of them), the
# search continues on the bracket alone.
NARROW_REQUESTS: Final = 4096


class ShareAbove:
    """``P(TTFT > t)`` averaged over requests, with TTFT = ``due`` (no-wait TTFT) + wait."""

    def __init__(self, due: np.ndarray, waits: PoolWaits) -> None:
        win = waits.window
        self.due = due
        self.window = win
        self.p = waits.p_wait[win]
        self.tail = waits.tail_s[win]
        self.tail_window = waits.tail_s
        self.n = len(due)

    def at(self, t: float) -> float:
        return float(np.mean(exceed_probability(t - self.due, self.p, self.tail)))

    def count_within(self, lo: float, hi: float) -> int:
        return int(np.count_nonzero((self.due > lo) & (self.due <= hi)))

    def within(self, lo: float, hi: float) -> Callable[[float], float]:
        """The same function for ``t`` in ``[lo, hi]``, costing only the requests due inside.

        A request due before ``lo`` contributes ``p·exp(−(t − due)/θ)``, which is its value at
        ``lo`` times ``exp(−(t − lo)/θ)``: per window, one sum at ``lo`` decays as a whole.
        Requests due after ``hi`` contribute 1 each. (Exact up to rounding: terms the exponent
        cap would clip are below 1e-300 either way.)
        """
        before = self.due <= lo
        at_lo = exceed_probability(lo - self.due[before], self.p[before], self.tail[before])
        decayed = np.bincount(self.window[before], weights=at_lo,
                              minlength=len(self.tail_window))
        inside = (self.due > lo) & (self.due <= hi)
        due, p, tail = self.due[inside], self.p[inside], self.tail[inside]
        after = float(np.count_nonzero(self.due > hi))
        used = decayed > 0
        decayed, theta = decayed[used], self.tail_window[used]
        n = self.n

        def share(t: float) -> float:
            # a subnormal tail overflows the quotient to inf: capped like any long wait
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                decay = np.exp(-np.fmin((t - lo) / theta, MAX_TAIL_EXPONENT))
            return (float(np.dot(decayed, decay))
                    + float(np.sum(exceed_probability(t - due, p, tail))) + after) / n

        return share


# The TTFT quantile is found to this relative precision (a picosecond on seconds).
TTFT_QUANTILE_RTOL: Final = 1e-12


def first_meeting(ok: Callable[[int], bool], miss: int, hit: int) -> int:
    """The smallest count in ``(miss, hit]`` that meets ``ok``, by bisection: ``ok(miss)`` is
    false, ``ok(hit)`` true, and ``ok`` holds from some count up (every pool search's
    assumption: misses fall as the pool grows). ``falling_root``'s integer counterpart."""
    while hit - miss > 1:
        mid = (miss + hit) // 2
        if ok(mid):
            hit = mid
        else:
            miss = mid
    return hit


def falling_root(f: Callable[[float], float], lo: float, hi: float, f_lo: float,
                 f_hi: float, stop: Callable[[float, float], bool] | None = None
                 ) -> tuple[float, float]:
    """Narrow ``(lo, hi]`` around the smallest ``t`` with ``f(t) <= 0``, ``f`` falling.

    Illinois regula falsi (the retained end's value is halved when the same end is kept twice)
    with a bisection whenever a step fails to halve the bracket: superlinear where ``f`` is
    smooth, never slower than bisection where it is a staircase. Ends at
    ``TTFT_QUANTILE_RTOL``, or as soon as ``stop(lo, hi)``.
    """
    side = 0
    while hi - lo > TTFT_QUANTILE_RTOL * max(1.0, abs(hi)) and not (stop and stop(lo, hi)):
        width = hi - lo
        t = hi - f_hi * (hi - lo) / (f_hi - f_lo) if f_lo != f_hi else 0.5 * (lo + hi)
        if not lo < t < hi:
            t = 0.5 * (lo + hi)
        f_t = f(t)
        if f_t > 0:
            lo, f_lo = t, f_t
            if side == -1:
                f_hi /= 2
            side = -1
        else:
            hi, f_hi = t, f_t
            if side == 1:
                f_lo /= 2
            side = 1
        if hi - lo > 0.5 * width:  # a weak step: bisect next
            mid = 0.5 * (lo + hi)
            if not lo < mid < hi:
                break  # adjacent floats: nothing left to narrow
            f_mid = f(mid)
            if f_mid > 0:
                lo, f_lo = mid, f_mid
            else:
                hi, f_hi = mid, f_mid
            side = 0
    return lo, hi
