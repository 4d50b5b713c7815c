"""A decode instance: continuous batching, KV memory in tokens, admission and preemption.

The running batch changes only at step boundaries. Between two changes every step has the
same batch size ``B`` while the context ``K`` grows by ``B`` per step, so step ``j`` lasts
``alpha + beta * j`` (``alpha = a + c*B + b*K0``, ``beta = b*B``) and ``n`` steps take
``n*alpha + beta*n*(n-1)/2``: the instance jumps from one change to the next analytically (no
per-token objects), and the inter-token-latency histogram is filled per run of steps.

Changes: a sequence finishes; KV arrives for a new one (it joins at the next boundary); memory
runs out (with ``preemption`` the newest sequence is preempted, frees its KV, and later
recomputes its context locally, as vLLM does; without it, admission reserves prompt + output so
memory never runs out). Requests wait for admission (KV memory for their prompt) in FCFS order.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING, Final

from pdprobe.sim.state import EV_DECODE_WAKE, PrefixCache

if TYPE_CHECKING:
    from pdprobe.profiles import Profile
    from pdprobe.sim.engine import Engine

# vLLM keeps 1 % of the KV blocks free when admitting (the block manager's watermark), so a
# newly admitted request does not immediately force a preemption.
ADMIT_WATERMARK: Final = 0.01
# A preempted sequence resumes only when it could then run this many steps without another
# preemption; otherwise it would bounce in and out of the batch on every step.
RESUME_STEPS: Final = 32


class DecodeInstance:
    """One simulated decode engine: admits requests whose KV has arrived, runs continuous-batching
    steps, preempts under KV pressure and keeps the counters its metrics and logs report."""
    __slots__ = (
        "B",
        "J",
        "P",
        "a",
        "active",
        "admit_q",
        "alive",
        "b",
        "busy_s",
        "c",
        "cache",
        "cap",
        "ctr_abort",
        "ctr_computed",
        "ctr_err",
        "ctr_ext_hits",
        "ctr_ext_queries",
        "ctr_external",
        "ctr_fin",
        "ctr_gen",
        "ctr_local_hits",
        "ctr_preempt",
        "ctr_prompt",
        "ctr_queries",
        "draining",
        "extra",
        "factor",
        "gidx",
        "heap",
        "idx",
        "itl_bounds",
        "itl_count",
        "itl_counts",
        "itl_sum",
        "join",
        "local",
        "max_batch",
        "n_xfer",
        "new_next",
        "node",
        "pending",
        "preempted",
        "preemption",
        "recompute_b",
        "recompute_c",
        "step",
        "stop_s",
        "t",
        "token",
        "used",
        "version",
        "wake_steps",
        "watermark",
    )

    def __init__(self, idx: int, gidx: int, node: int, profile: Profile, factor: float, cap_tokens: int,
                 preemption: bool, cache: PrefixCache | None, itl_bounds: tuple[float, ...]) -> None:
        self.idx = idx  # within its role
        self.gidx = gidx  # in the run's instance list
        self.node = node
        self.factor = factor
        self.a = profile.decode_a_s * factor
        self.b = profile.decode_b_s_per_ctx_token * factor
        self.c = profile.decode_c_s_per_seq * factor
        self.recompute_b = profile.prefill_b_s_per_token * factor
        self.recompute_c = profile.prefill_c_s_per_token2 * factor
        self.max_batch = profile.decode_max_batch
        self.cap = cap_tokens
        self.watermark = int(cap_tokens * ADMIT_WATERMARK)
        self.preemption = preemption
        self.cache = cache
        self.used = 0
        self.admit_q: deque[int] = deque()
        self.n_xfer = 0  # admitted (memory allocated), KV not yet here
        self.pending: list[int] = []  # KV here, joining at the next step boundary
        self.heap: list[tuple[int, int, int]] = []  # (finish step, token, rid)
        self.join: dict[int, int] = {}  # running rid -> join step (insertion = join order)
        self.token: dict[int, int] = {}  # running rid -> heap token (lazy deletion)
        self.preempted: dict[int, int] = {}  # rid -> tokens generated before its preemption
        self.B = 0  # batch size
        self.P = 0  # sum of prompts in the batch
        self.J = 0  # sum of join steps in the batch: K = P + step*B - J
        self.step = 0
        self.t = 0.0  # time of the current step boundary
        self.extra = 0.0  # added to the next step (local recompute after a preemption)
        self.new_next = 0  # sequences whose next token is their first (not an ITL sample)
        self.wake_steps = -1  # steps to the scheduled wake boundary; -1 = none
        self.version = 0
        self.itl_bounds = itl_bounds
        self.itl_counts = [0] * (len(itl_bounds) + 1)
        self.itl_sum = 0.0
        self.itl_count = 0
        self.busy_s = 0.0
        self.active = False
        self.alive = False
        self.draining = False
        self.stop_s = float("inf")
        self.ctr_gen = 0
        self.ctr_prompt = 0
        self.ctr_computed = 0  # prompt tokens computed here (not-disaggregated: local prefill)
        self.local: set[int] = set()  # requests this instance prefills itself
        self.ctr_queries = 0  # local prefix-cache lookups, tokens
        self.ctr_local_hits = 0
        self.ctr_ext_queries = 0  # tokens expected over KV transfer
        self.ctr_ext_hits = 0
        self.ctr_external = 0  # tokens received over KV transfer
        self.ctr_preempt = 0
        self.ctr_fin = 0
        self.ctr_err = 0
        self.ctr_abort = 0

    # --- step arithmetic ---
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

    # --- admission ---
    def _need(self, eng: Engine, rid: int) -> int:
        req = eng.req
        if not self.preemption:
            return req.prompt[rid] + req.output[rid]
        return req.prompt[rid] + self.preempted.get(rid, 0)

    def enqueue(self, eng: Engine, rid: int) -> None:
        """Queue a request for admission and admit what fits now."""
        self.admit_q.append(rid)
        self.sync(eng.now)
        self.try_admit(eng)

    def occupancy(self) -> int:
        """Sequences holding KV here: running, being transferred in, and arrived but not yet
        batched."""
        return self.B + self.n_xfer + len(self.pending)

    def try_admit(self, eng: Engine) -> None:
        """Admit queued requests in order while the batch has room and their KV fits under the
        watermark (a preempted one only with room to run); remote-KV admissions start their
        transfer, local and resumed ones rejoin the batch."""
        rejoined = False
        while self.admit_q:
            rid = self.admit_q[0]
            need = self._need(eng, rid)
            busy = self.occupancy()
            if busy >= self.max_batch:
                break
            if busy > 0 and self.used + need > self.cap - self.watermark:
                break
            if rid in self.preempted and busy > 0 and \
                    self.used + need + (busy + 1) * RESUME_STEPS > self.cap:
                break
            self.admit_q.popleft()
            self.used += need
            if rid in self.preempted or rid in self.local:
                self.pending.append(rid)  # computes the prompt locally: no transfer
                rejoined = True
            else:
                self.n_xfer += 1
                eng.on_decode_admitted(rid, self)
        if rejoined:
            self._schedule_join(eng)

    def on_kv_ready(self, eng: Engine, rid: int) -> None:
        """A request's KV has arrived: count the externally computed tokens and queue it to join the
        batch."""
        self.n_xfer -= 1
        req = eng.req
        self.ctr_external += req.prompt[rid] - req.cached_d[rid]
        self.ctr_ext_hits += req.prompt[rid] - req.cached_d[rid]
        self.pending.append(rid)
        self._schedule_join(eng)

    def on_kv_failed(self, eng: Engine, rid: int) -> None:
        """A KV transfer failed: free its reservation, count the error and admit the next request."""
        self.n_xfer -= 1
        self.used -= self._need(eng, rid)
        self.ctr_err += 1
        self.sync(eng.now)
        self.try_admit(eng)
        self._check_drained(eng)

    def _schedule_join(self, eng: Engine) -> None:
        now = eng.now
        if self.B == 0:
            if now > self.t:
                self.t = now
            self.process_boundary(eng)
            return
        self.sync(now)
        if self.t >= now:
            self.process_boundary(eng)
        elif self.wake_steps < 0 or self.wake_steps > 1:
            self._set_wake(eng, 1)

    # --- boundaries ---
    def on_wake(self, eng: Engine, version: int) -> None:
        """A scheduled wake-up: advance the batch by the steps planned, unless the plan was
        superseded (``version``)."""
        if version != self.version:
            return
        n = self.wake_steps
        self.wake_steps = -1
        self._advance(n)
        self.process_boundary(eng)

    def process_boundary(self, eng: Engine) -> None:
        """At a step boundary: finish the sequences whose last token is due, admit and join the
        pending ones, preempt the newest on KV pressure and plan the next wake-up."""
        req = eng.req
        heap = self.heap
        while heap and heap[0][0] <= self.step:
            _, token, rid = heapq.heappop(heap)
            if self.token.get(rid) == token:
                self._finish(eng, rid)
        self.try_admit(eng)
        fresh = []
        if self.pending:
            for rid in self.pending:
                g = self.preempted.pop(rid, -1)
                if g >= 0:  # back after a preemption: recompute prompt + generated locally
                    ctx = req.prompt[rid] + g
                    self.extra += self.recompute_b * ctx + self.recompute_c * ctx * ctx
                    join = self.step - g
                else:
                    if rid in self.local:  # prefills here: the pass lengthens this step
                        self.local.discard(rid)
                        ctx = req.prompt[rid]
                        self.extra += self.recompute_b * ctx + self.recompute_c * ctx * ctx
                        self.ctr_computed += ctx
                        req.t_admit[rid] = self.t
                    g = 0
                    join = self.step
                    fresh.append(rid)
                    req.t_join[rid] = self.t
                    self.ctr_prompt += req.prompt[rid]
                self.join[rid] = join
                tok = eng.next_token()
                self.token[rid] = tok
                heapq.heappush(heap, (join + req.output[rid], tok, rid))
                self.B += 1
                self.P += req.prompt[rid]
                self.J += join
            self.new_next += len(fresh)
            self.pending = []
        if self.preemption:
            while self.B > 1 and self.used + self.B > self.cap:
                self._preempt(eng, next(reversed(self.join)))
        if fresh:
            alpha, _ = self._alpha_beta()
            first = self.t + alpha + self.extra
            for rid in fresh:
                if rid in self.join:
                    req.t_first[rid] = first
        self._plan_wake(eng)
        self._check_drained(eng)

    def _finish(self, eng: Engine, rid: int) -> None:
        req = eng.req
        join = self.join.pop(rid)
        del self.token[rid]
        self.B -= 1
        self.P -= req.prompt[rid]
        self.J -= join
        self.used -= req.prompt[rid] + req.output[rid]
        self.ctr_fin += 1
        req.generated[rid] = req.output[rid]
        req.t_finish[rid] = self.t
        if self.cache is not None and eng.blocks is not None:
            self.cache.insert(eng.blocks_of(rid))
        eng.on_finished(rid)

    def _preempt(self, eng: Engine, rid: int) -> None:
        req = eng.req
        join = self.join.pop(rid)
        del self.token[rid]
        g = self.step - join
        self.B -= 1
        self.P -= req.prompt[rid]
        self.J -= join
        self.used -= req.prompt[rid] + g
        self.preempted[rid] = g
        self.admit_q.appendleft(rid)
        self.ctr_preempt += 1
        req.preemptions[rid] += 1
        eng.log_event(self.t, self.gidx, "preemption", rid)

    def _plan_wake(self, eng: Engine) -> None:
        heap = self.heap
        while heap and self.token.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)
        if self.B == 0:
            self.wake_steps = -1
            self.version += 1
            return
        n = heap[0][0] - self.step
        if self.preemption and self.B > 1:
            n_mem = (self.cap - self.used) // self.B
            n = min(n, max(1, n_mem))
        self._set_wake(eng, max(1, n))

    def _set_wake(self, eng: Engine, n: int) -> None:
        alpha, beta = self._alpha_beta()
        self.wake_steps = n
        self.version += 1
        eng.events.push(self.t + self._span(n, alpha, beta), EV_DECODE_WAKE, self.idx, self.version)

    def _check_drained(self, eng: Engine) -> None:
        if self.draining and self.alive and self.B == 0 and not self.admit_q \
                and not self.pending and self.n_xfer == 0:
            eng.stop_instance(self)

    # --- views for ticks ---
    def context_tokens(self) -> int:
        """Tokens of context held by the running batch now (prompt plus generated)."""
        return self.P + self.step * self.B - self.J

    def busy_until(self, now: float) -> float:
        """Busy seconds accumulated so far (for utilisation)."""
        return self.busy_s

    def generated_of(self, rid: int) -> int:
        """Tokens generated so far for a request (kept across a preemption)."""
        if rid in self.join:
            return self.step - self.join[rid]
        return self.preempted.get(rid, 0)
