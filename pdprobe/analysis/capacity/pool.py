"""The prefill pool over time: partial batching, fluid backlog of bursts, G/G/c waits.

Service: a request's busy time lies between its *batched* share (forwards packed to the token
budget, fixed cost amortised) and running *alone* (it pays the fixed cost of every forward it
needs). Which one it gets depends on whether there is a queue to batch with; with ``x`` the
utilisation under full batching, the model takes ``s = batched + (alone − batched) / (1 + x)``:
``alone`` when idle, ``batched`` at saturation, and total busy time ``λ·s`` still rises with
load (it would not with a linear blend).

Wait of a request = fluid backlog + stochastic wait, over three time scales (``LoadWindows``):

- fluid: a window of length ``d`` at utilisation ``ρ_w`` adds ``d·(ρ_w − 1)`` seconds of work
  per instance; the backlog follows Lindley's recursion ``B_w = max(0, B_{w−1} + d·(ρ_w − 1))``
  (a cumulative sum minus its running minimum) and a request waits the backlog it finds (mid
  window). This carries bursts and overloaded minutes, which stationary formulas miss (the
  pointwise-stationary fluid approximation);
- stochastic: Allen–Cunneen's G/G/c at its window's rate (Erlang C × ``(ca² + cs²)/2``,
  Kingman for one server) with ``ca²`` the burstiness within a window, and the exponential
  tail ``P(W > t) = C·exp(−t/θ)``. With a fluid part, utilisation is capped at
  ``FLUID_HANDOFF_UTILIZATION``: beyond it the fluid backlog carries the overload.

A request ``i`` with bare TTFT ``D_i`` misses when its wait exceeds ``slack_i = SLO − D_i``.
Without arrival times the pool is stationary (one window, no fluid part).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.capacity.arrivals import LoadWindows
from pdprobe.analysis.capacity.queueing import MAX_SERVERS
from pdprobe.analysis.capacity.wait_tail import (
    NARROW_REQUESTS,
    ShareAbove,
    exceed_probability,
    falling_root,
    first_meeting,
)

if TYPE_CHECKING:
    from collections.abc import Callable

# Beyond this utilisation in a window the stochastic wait stops growing: an overloaded window's
# queue is the fluid backlog's to carry (and Allen–Cunneen is meaningless at or above 1).
FLUID_HANDOFF_UTILIZATION: Final = 0.95


@dataclass(frozen=True)
class ServiceMoments:
    """First and second moments of the alone and batched service times."""

    alone_mean: float
    batched_mean: float
    alone_sq: float
    batched_sq: float
    cross: float  # E[alone · batched]

    @classmethod
    def of(cls, alone: np.ndarray, batched: np.ndarray) -> ServiceMoments:
        a = np.asarray(alone, dtype=np.float64)
        b = np.asarray(batched, dtype=np.float64)
        return cls(float(a.mean()), float(b.mean()), float(np.mean(a * a)),
                   float(np.mean(b * b)), float(np.mean(a * b)))

    def at(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and squared CV of the effective service at full-batching utilisation ``x``."""
        w = 1.0 / (1.0 + np.asarray(x, dtype=np.float64))
        mean = self.batched_mean + w * (self.alone_mean - self.batched_mean)
        second = ((1 - w) ** 2 * self.batched_sq + 2 * w * (1 - w) * self.cross
                  + w**2 * self.alone_sq)
        cs2 = np.maximum(second / np.maximum(mean, 1e-300) ** 2 - 1.0, 0.0)
        return mean, cs2


# Pools up to this size use the exact Erlang-B recursion (one vectorised step per server);
# larger ones the closed form through the regularised incomplete gamma function, whose cost
# does not grow with the pool (a huge KV size once asked for 1e5 servers, in a loop).
ERLANG_RECURSION_MAX_SERVERS: Final = 256


def erlang_b(servers: int, offered: np.ndarray) -> np.ndarray:
    """Erlang B blocking probability for ``servers`` and each offered load (erlangs).

    ``B(c, a) = P(N = c) / P(N <= c)`` for ``N ~ Poisson(a)``: the recursion for small pools,
    the same ratio in log space (``gammaincc``) for large ones.
    """
    a = np.asarray(offered, dtype=np.float64)
    c = max(int(servers), 1)
    if c <= ERLANG_RECURSION_MAX_SERVERS:
        b = np.ones_like(a)
        ab = np.empty_like(a)
        for k in range(1, c + 1):  # loop over servers, vectorised over windows
            # b = a·b / (k + a·b): the product once, in place (the same bits, three passes
            # instead of four temporaries)
            np.multiply(a, b, out=ab)
            np.add(ab, k, out=b)
            np.divide(ab, b, out=b)
        return b
    from scipy.special import gammaincc, gammaln

    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        log_pmf = c * np.log(a) - a - gammaln(c + 1.0)
        b = np.exp(log_pmf) / gammaincc(c + 1.0, a)
    return np.where(a > 0, np.nan_to_num(b, nan=1.0, posinf=1.0), 0.0)


@dataclass(frozen=True)
class PoolWaits:
    """Waits in a pool of ``servers``: per window (stochastic and fluid), and each request's window."""

    servers: int
    utilization: np.ndarray  # per window, uncapped (>= 1: overloaded)
    p_wait: np.ndarray  # per window
    tail_s: np.ndarray  # per window
    fluid_window_s: np.ndarray  # per window: backlog a request arriving in it finds
    window: np.ndarray  # per request: its window

    @property
    def fluid_s(self) -> np.ndarray:
        """Per request: the backlog found on arrival."""
        return self.fluid_window_s[self.window]

    def exceed(self, slack: np.ndarray) -> np.ndarray:
        """``P(wait > slack_i)`` per request."""
        win = self.window
        s = np.asarray(slack, dtype=np.float64)
        if self.fluid_window_s.any():  # (no backlog anywhere, the usual pool: s - 0 is s)
            s = s - self.fluid_window_s[win]
        return exceed_probability(s, self.p_wait[win], self.tail_s[win])

    def exceed_share(self, slack: np.ndarray) -> float:
        """Mean of ``exceed(slack)``: the share of requests whose wait exceeds their slack."""
        return float(np.mean(self.exceed(slack)))


class PrefillPool:
    """A pool of identical prefill instances facing one workload's arrivals.

    With ``load`` and ``arrival_ts`` (sorted, one per request) slacks are per request in that
    order; otherwise the pool is stationary at ``rate_rps`` and callers pass any sample of
    slacks (e.g. quantiles of the bare TTFT). ``observed_rps`` is the rate the arrival times
    were recorded at when ``arrival_ts`` is a sample of them (``load.window_of`` then names
    the sampled arrivals' windows); by default it is measured on ``arrival_ts``.
    """

    def __init__(self, rate_rps: float, ca2: float, moments: ServiceMoments,
                 load: LoadWindows | None = None,
                 arrival_ts: np.ndarray | None = None,
                 observed_rps: float | None = None) -> None:
        self.rate = float(rate_rps)
        self.ca2 = float(ca2)
        self.moments = moments
        # Waits (fluid and stochastic) multiplied by this: 1 is the model; a recalibration
        # against the window's measured waits sets another (``calibrate.py``).
        self.wait_scale = 1.0
        # Each instance its own queue (a router that does not look at load: round-robin,
        # random): c G/G/1 queues at rate/c each instead of one G/G/c (``per_instance``).
        self.separate = False
        self.fluid = load is not None and arrival_ts is not None and len(arrival_ts) > 1
        if not self.fluid or load is None or arrival_ts is None:
            self.share = np.ones(1)
            self.factor = np.ones(1)
            self.window_of: np.ndarray | None = None
            self.window_s = 0.0
            return
        self.share = np.asarray(load.share, dtype=np.float64)
        self.factor = np.asarray(load.rate_factor, dtype=np.float64)
        ts = np.asarray(arrival_ts, dtype=np.float64)
        rel = ts - ts[0]
        span = float(rel[-1])
        observed = (len(ts) - 1) / span if span > 0 else self.rate
        if observed_rps is not None:  # a sample of the arrivals: the rate of all of them
            observed = observed_rps if observed_rps > 0 else self.rate
        # the same arrival pattern replayed at rate_rps: time shrinks by observed / rate
        compress = observed / self.rate if self.rate > 0 else 1.0
        if load.window_of is not None and len(load.window_of) == len(ts):
            self.window_of = load.window_of  # the same arrivals, already binned
        else:
            self.window_of = np.minimum((rel // load.width_s).astype(np.int64),
                                        len(self.share) - 1)
        self.window_s = load.width_s * compress

    def scaled(self, factor: float) -> PrefillPool:
        """The same pool with every wait multiplied by ``factor`` (a burst scale)."""
        other = copy.copy(self)
        other.wait_scale = float(factor)
        return other

    def per_instance(self) -> PrefillPool:
        """The same pool with a queue per instance: a request waits whenever its own instance
        is busy (``P(wait) = ρ``, Kingman's G/G/1 tail at ``rate/c``), however idle the
        others are."""
        other = copy.copy(self)
        other.separate = True
        return other

    def waits(self, servers: int, n: int = 1) -> PoolWaits:
        """Waits in a pool of ``servers``; ``n`` sizes the request arrays when stationary."""
        c = max(int(servers), 1)
        lam = self.rate * self.factor
        x = lam * self.moments.batched_mean / c
        service, cs2 = self.moments.at(x)
        util = lam * service / c
        if not self.fluid and float(util.max()) >= 1.0:
            # stationary and overloaded: the queue grows without bound
            return PoolWaits(c, util, np.ones(1), np.full(1, np.inf), np.full(1, np.inf),
                             np.zeros(max(n, 1), dtype=np.int64))
        # with a fluid part, overload beyond the hand-off is the backlog's to carry
        capped = np.minimum(util, FLUID_HANDOFF_UTILIZATION) if self.fluid else util
        if self.separate:  # c single-server queues: Erlang C of one server is ρ
            p_wait = capped  # (clipped into a new array below)
            tail = (self.ca2 + cs2) * service / (2.0 * (1.0 - capped))
        else:
            b = erlang_b(c, capped * c)  # the offered load
            p_wait = b / (1.0 - capped * (1.0 - b))
            tail = (self.ca2 + cs2) * service / (2.0 * c * (1.0 - capped))
        p_wait = np.where(lam > 0, np.clip(p_wait, 0.0, 1.0), 0.0)
        tail = np.where(lam > 0, tail, 0.0)
        if self.wait_scale != 1.0:
            tail = tail * self.wait_scale
        if self.fluid and self.window_of is not None:
            net = self.window_s * (util - 1.0)  # backlog growth (s of work per instance)
            level = np.cumsum(net)
            backlog = level - np.minimum.accumulate(np.minimum(level, 0.0))  # Lindley
            before = np.concatenate([[0.0], backlog[:-1]])
            found = np.maximum(before + net / 2.0, 0.0)  # mid-window: half its growth
            if self.wait_scale != 1.0:
                found = found * self.wait_scale
            return PoolWaits(c, util, p_wait, tail, found, self.window_of)
        return PoolWaits(c, util, p_wait, tail, np.zeros(1), np.zeros(n, dtype=np.int64))

    def miss_share(self, servers: int, slack: np.ndarray) -> float:
        """Share of requests whose wait exceeds their slack."""
        return self.waits(servers, len(slack)).exceed_share(slack)

    def smallest(self, slack: np.ndarray, budget: float, at_least: int = 1,
                 guess: int | None = None) -> int:
        """The smallest pool of at least ``at_least`` whose miss share is within ``budget``.

        Misses fall with size, so this is ``max(at_least, smallest pool)``. A caller that only
        needs to know whether the objective asks for more than ``k`` instances passes
        ``at_least=k``: when ``k`` already meets it, that is one evaluation, not a search.
        ``guess``: where the answer probably is (``_from_guess``: the same answer, in a few
        evaluations when the guess is near it).
        """
        def ok(c: int) -> bool:
            return self.miss_share(c, slack) <= budget

        floor = max(int(at_least), 1)
        if self.rate <= 0:
            return floor
        # below half the busy instances of full batching nearly everything is overloaded
        lo = max(floor, math.floor(0.5 * self.rate * self.moments.batched_mean))
        found = _from_guess(ok, lo, guess) if guess is not None and guess > lo else None
        if found is not None:
            return found
        if ok(lo):
            while lo > floor and ok(lo - 1):
                lo -= 1
            return lo
        # gallop up from lo (known to miss): 1, 2, 4, ... past it, then bisect the last step
        step = 1
        hi = lo + step
        while not ok(hi):
            lo = hi
            step *= 2
            hi = lo + step
            if hi > MAX_SERVERS:
                raise ValueError("no prefill pool size meets the TTFT criterion")
        return first_meeting(ok, lo, hi)

    def overloaded_share(self, servers: int) -> float:
        """Share of requests arriving in windows whose rate exceeds the pool's capacity."""
        util = self.waits(servers).utilization
        return float(np.dot(self.share, util >= 1.0))

    def mean_wait_s(self, servers: int, n: int) -> float:
        """Mean wait over requests (fluid + stochastic)."""
        w = self.waits(servers, n)
        per_window = w.fluid_window_s + w.p_wait * w.tail_s
        counts = np.bincount(w.window, minlength=len(per_window))
        used = counts > 0  # an unused window's inf (or nan) must not reach the sum
        return float(np.dot(counts[used], per_window[used]) / len(w.window))

    def ttft_quantile(self, servers: int, bare: np.ndarray, q: float) -> float:
        """The ``q``-quantile of TTFT = wait + bare TTFT over the requests.

        The share of requests above ``t`` falls with ``t``; its crossing of ``1 − q`` is
        bracketed by doubling, narrowed by regula falsi over all requests, and finished on
        the bracket alone (``ShareAbove.within``), to ``TTFT_QUANTILE_RTOL``.
        """
        w = self.waits(servers, len(bare))
        share = ShareAbove(np.asarray(bare, dtype=np.float64) + w.fluid_s, w)
        target = 1.0 - q

        def excess(t: float) -> float:
            return share.at(t) - target

        lo = float(np.quantile(bare, q))
        f_lo = excess(lo)
        if f_lo <= 0:
            return lo
        base = lo
        hi = base + 1.0
        f_hi = excess(hi)
        while f_hi > 0:  # double the distance from the bare quantile; lo follows
            lo, f_lo = hi, f_hi
            hi = base + 2 * (hi - base)
            if hi - base > 1e7:
                return math.inf
            f_hi = excess(hi)
        few = max(NARROW_REQUESTS, len(bare) // 16)
        lo, hi = falling_root(excess, lo, hi, f_lo, f_hi,
                               stop=lambda a, b: share.count_within(a, b) <= few)
        within = share.within(lo, hi)

        def excess_within(t: float) -> float:
            return within(t) - target

        lo, hi = falling_root(excess_within, lo, hi, excess_within(lo), excess_within(hi))
        return hi


def _from_guess(ok: Callable[[int], bool], lo: int, guess: int) -> int | None:
    """``PrefillPool.smallest``'s answer when it is above ``lo`` (the search's start), found
    from ``guess`` (> ``lo``): gallop from the guess down to a miss or up to a size that
    meets the objective, then bisect the last step. Misses fall with size, so that is the
    size the search from ``lo`` finds (its gallop from ``lo`` and bisection end at the one
    size that meets the objective with the size below missing), and the search's error is
    raised where its gallop from ``lo`` would have passed ``MAX_SERVERS`` before reaching
    that size. None when the answer may be ``lo`` or below (the guess and every size
    galloped down to meet the objective) or lies beyond ``MAX_SERVERS``: the search from
    ``lo`` decides then."""
    if ok(guess):
        hi, step = guess, 1
        while True:  # down from the guess to a size that misses
            miss = hi - step
            if miss <= lo:
                return None
            if not ok(miss):
                break
            hi, step = miss, 2 * step
    else:
        miss, step = guess, 1
        hi = miss + step
        while not ok(hi):
            miss, step = hi, 2 * step
            hi = miss + step
            if hi > MAX_SERVERS:
                return None
    hi = first_meeting(ok, miss, hi)
    # the search from lo gallops to lo + 1, lo + 3, lo + 7, ... (checking each but the first
    # against MAX_SERVERS) and stops at the first of them that meets the objective
    probe, step = lo + 1, 1
    while probe < hi:
        step *= 2
        probe += step
        if probe > MAX_SERVERS:
            raise ValueError("no prefill pool size meets the TTFT criterion")
    return hi
