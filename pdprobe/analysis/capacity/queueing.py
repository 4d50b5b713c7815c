"""Queueing approximations for the prefill pool: Kingman, Allen–Cunneen G/G/c, M/D/1.

The prefill pool is a multi-server queue: requests arrive at rate ``lam`` with squared
coefficient of variation ``ca2`` of inter-arrivals and need service times with mean ``s`` and
squared CV ``cs2``. Allen–Cunneen scales the M/M/c (Erlang C) waiting time by
``(ca2 + cs2) / 2``; for one server it is Kingman's formula. The waiting-time tail uses the
heavy-traffic exponential shape: ``P(W > t) ≈ C · exp(-t / theta)`` with
``theta = (ca2 + cs2) / (2 (c mu - lam))``, ``C`` the probability of waiting.

DistServe's M/D/1 (``avg TTFT = D + R D^2 / (2 (1 - R D))``) is the cross-check: it is the
Kingman mean with Poisson arrivals and deterministic service.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np

# Largest pool the search considers: far beyond any real deployment, it only stops a loop
# when the SLO is unreachable.
MAX_SERVERS: Final = 100_000


def kingman_factor(rho: float, ca2: float, cs2: float) -> float:
    """TTFT inflation over the bare service time for one server: ``1 + rho (ca2+cs2) / (2(1-rho))``.

    aiconfigurator's reference points: rho 0.9 with Poisson arrivals and deterministic service
    gives 5.5; with ``ca2`` 0.18 it gives about 1.8.
    """
    if not 0.0 <= rho < 1.0:
        return math.inf
    return 1.0 + rho * (ca2 + cs2) / (2.0 * (1.0 - rho))


def kingman_wait_s(service_s: float, rho: float, ca2: float, cs2: float) -> float:
    """Mean wait in a G/G/1 queue (Kingman): ``s · rho/(1-rho) · (ca2+cs2)/2``."""
    if not 0.0 <= rho < 1.0:
        return math.inf
    return service_s * rho / (1.0 - rho) * (ca2 + cs2) / 2.0


def md1_ttft_s(service_s: float, rate_rps: float) -> float:
    """DistServe's M/D/1 average TTFT: ``D + R D^2 / (2 (1 - R D))`` (inf when ``R D >= 1``)."""
    rho = rate_rps * service_s
    if rho >= 1.0:
        return math.inf
    return service_s + rate_rps * service_s**2 / (2.0 * (1.0 - rho))


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability an arrival waits in M/M/c with ``offered_load = lam / mu`` (1 when unstable)."""
    return float(_erlang_c_table(offered_load, servers)[servers - 1])


def _erlang_c_table(offered_load: float, max_servers: int) -> np.ndarray:
    """Erlang C for c = 1..max_servers (index c-1), by the stable Erlang-B recursion."""
    a = offered_load
    out = np.ones(max_servers)
    b = 1.0
    for k in range(1, max_servers + 1):  # loop over servers, not data rows
        b = a * b / (k + a * b)
        rho = a / k
        if rho < 1.0:
            out[k - 1] = b / (1.0 - rho * (1.0 - b))
    return out


@dataclass(frozen=True)
class WaitEstimate:
    """The waiting time before prefill starts, in a pool of ``servers`` instances."""

    servers: int
    utilization: float
    p_wait: float  # probability a request waits at all
    mean_wait_s: float
    tail_s: float  # theta: mean wait of those who wait

    def quantile_s(self, q: float) -> float:
        """The ``q``-quantile of the wait (0 when fewer than ``1-q`` of requests wait)."""
        if self.utilization >= 1.0:
            return math.inf
        if self.p_wait <= 1.0 - q:
            return 0.0
        return self.tail_s * math.log(self.p_wait / (1.0 - q))

    def exceed_probability(self, slack_s: np.ndarray) -> np.ndarray:
        """``P(W > slack)`` for each slack (1 where the slack is negative)."""
        slack = np.asarray(slack_s, dtype=np.float64)
        if self.utilization >= 1.0:
            return np.ones_like(slack)
        if self.tail_s <= 0.0:
            return np.where(slack < 0.0, 1.0, 0.0)
        with np.errstate(over="ignore"):  # a huge slack/tail ratio just means exp(-inf) = 0
            tail = self.p_wait * np.exp(-np.minimum(np.maximum(slack, 0.0) / self.tail_s, 1e3))
        return np.where(slack < 0.0, 1.0, tail)


def allen_cunneen(servers: int, rate_rps: float, service_s: float, ca2: float,
                  cs2: float) -> WaitEstimate:
    """G/G/c wait (Allen–Cunneen): Erlang-C wait of M/M/c times ``(ca2 + cs2) / 2``."""
    return _waits(rate_rps, service_s, ca2, cs2, servers)[servers - 1]


def _waits(rate_rps: float, service_s: float, ca2: float, cs2: float,
           max_servers: int) -> list[WaitEstimate]:
    a = rate_rps * service_s
    table = _erlang_c_table(a, max_servers)
    out = []
    for c in range(1, max_servers + 1):
        rho = a / c
        if rho >= 1.0:
            out.append(WaitEstimate(c, rho, 1.0, math.inf, math.inf))
            continue
        if rate_rps <= 0.0:
            out.append(WaitEstimate(c, 0.0, 0.0, 0.0, 0.0))
            continue
        slack_rate = c / service_s - rate_rps  # c mu - lam
        tail = (ca2 + cs2) / (2.0 * slack_rate)
        p_wait = float(table[c - 1])
        out.append(WaitEstimate(c, rho, p_wait, p_wait * tail, tail))
    return out


def min_servers(rate_rps: float, service_s: float, ca2: float, cs2: float,
                ok: Callable[[WaitEstimate], bool], start: int = 1) -> WaitEstimate | None:
    """The smallest pool (>= ``start``) whose wait estimate satisfies ``ok``; None if none.

    The wait falls monotonically with more servers, so the search doubles an upper bound and
    scans it; each pass computes the Erlang table once for all pool sizes.
    """
    if service_s <= 0.0 or rate_rps <= 0.0:
        est = WaitEstimate(max(start, 1), 0.0, 0.0, 0.0, 0.0)
        return est if ok(est) else None
    lo = max(start, math.floor(rate_rps * service_s) + 1, 1)
    hi = max(2 * lo, lo + 8)
    while True:
        hi = min(hi, MAX_SERVERS)
        for est in _waits(rate_rps, service_s, ca2, cs2, hi)[lo - 1:]:
            if ok(est):
                return est
        if hi >= MAX_SERVERS:
            return None
        lo, hi = hi + 1, hi * 2

