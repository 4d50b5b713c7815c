"""The step arithmetic of a decode instance's continuous batch, analytic between changes.

The running batch changes only at step boundaries. Between two changes every step has the
same batch size ``B`` while the context ``K`` grows by ``B`` per step, so step ``j`` lasts
``alpha + beta * j`` (``alpha = a + c*B + b*K0``, ``beta = b*B``) and ``n`` steps take
``n*alpha + beta*n*(n-1)/2``: the instance jumps from one change to the next analytically (no
per-token objects), and the inter-token-latency histogram is filled per run of steps.
``DecodeInstance`` (``pdprobe.sim.decode``) holds the state and adds admission and boundaries.
"""

from __future__ import annotations

import math
from bisect import bisect_left


class DecodeSteps:
    """Continuous-batching time keeping: how many steps fit before a time, and running them
    (time, generated tokens, KV growth, ITL samples). The subclass initialises these slots."""

    __slots__ = (
        "B",
        "J",
        "P",
        "a",
        "b",
        "busy_s",
        "c",
        "ctr_gen",
        "extra",
        "itl_bounds",
        "itl_count",
        "itl_counts",
        "itl_sum",
        "new_next",
        "preemption",
        "step",
        "t",
        "used",
        "wake_steps",
    )
    a: float  # step time: fixed part
    b: float  # per context token
    c: float  # per sequence in the batch
    B: int  # batch size
    P: int  # sum of prompts in the batch
    J: int  # sum of join steps in the batch: K = P + step*B - J
    step: int
    t: float  # time of the current step boundary
    extra: float  # added to the next step (local recompute after a preemption)
    new_next: int  # sequences whose next token is their first (not an ITL sample)
    wake_steps: int  # steps to the scheduled wake boundary; -1 = none
    itl_bounds: tuple[float, ...]
    itl_counts: list[int]
    itl_sum: float
    itl_count: int
    busy_s: float
    ctr_gen: int
    preemption: bool
    used: int

    def _alpha_beta(self) -> tuple[float, float]:
        k0 = self.P + self.step * self.B - self.J
        return self.a + self.c * self.B + self.b * k0, self.b * self.B

    def _span(self, n: int, alpha: float, beta: float) -> float:
        return n * alpha + beta * n * (n - 1) / 2 + (self.extra if n > 0 else 0.0)

    def _steps_by(self, now: float) -> int:
        """Whole steps completed between the current boundary and ``now``."""
        if self.B == 0:
            return 0
        alpha, beta = self._alpha_beta()
        dt = now - self.t
        if dt < alpha + self.extra:
            return 0
        if beta <= 0:
            n = int((dt - self.extra) / alpha)
        else:
            qa, qb, qc = beta / 2, alpha - beta / 2, self.extra - dt
            n = int((-qb + math.sqrt(max(qb * qb - 4 * qa * qc, 0.0))) / (2 * qa))
        while self._span(n + 1, alpha, beta) <= dt:
            n += 1
        while n > 0 and self._span(n, alpha, beta) > dt:
            n -= 1
        return n

    def _advance(self, n: int) -> None:
        """Run ``n`` steps of the current batch: time, tokens, KV growth, ITL samples."""
        if n <= 0 or self.B == 0:
            return
        alpha, beta = self._alpha_beta()
        span = self._span(n, alpha, beta)
        B = self.B
        bounds = self.itl_bounds
        counts = self.itl_counts
        first = alpha + self.extra
        k0 = B - self.new_next
        if k0 > 0:
            counts[bisect_left(bounds, first)] += k0
            self.itl_sum += k0 * first
            self.itl_count += k0
        if n > 1:
            lo = alpha + beta
            hi = alpha + beta * (n - 1)
            i_lo = bisect_left(bounds, lo)
            i_hi = bisect_left(bounds, hi)
            if i_lo == i_hi:
                counts[i_lo] += (n - 1) * B
            else:
                counted = 0  # steps j = 1 .. n-1 with duration <= bounds[i]
                for i in range(i_lo, i_hi):
                    jmax = min(n - 1, int((bounds[i] - alpha) / beta))
                    cnt = max(0, jmax - counted)
                    counts[i] += cnt * B
                    counted += cnt
                counts[i_hi] += (n - 1 - counted) * B
            self.itl_sum += B * ((n - 1) * alpha + beta * (n - 1) * n / 2)
            self.itl_count += (n - 1) * B
        self.t += span
        self.step += n
        self.busy_s += span
        self.ctr_gen += n * B
        if self.preemption:
            self.used += n * B
        self.extra = 0.0
        self.new_next = 0

    def sync(self, now: float) -> None:
        """Move to the last step boundary at or before ``now`` (never past a scheduled wake)."""
        if self.B == 0:
            if now > self.t:
                self.t = now
            return
        n = self._steps_by(now)
        if self.wake_steps >= 0:
            n = min(n, self.wake_steps)
            self.wake_steps -= n
        self._advance(n)
