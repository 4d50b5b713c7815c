"""A decode instance: continuous batching, KV memory in tokens, admission and preemption.

The running batch changes only at step boundaries; between two changes the instance jumps
analytically (``DecodeSteps`` in ``pdprobe.sim.decode_steps``: step timing and the ITL histogram).

Changes: a sequence finishes; KV arrives for a new one (it joins at the next boundary); memory
runs out (with ``preemption`` the newest sequence is preempted, frees its KV, and later
recomputes its context locally, as vLLM does; without it, admission reserves prompt + output so
memory never runs out). Requests wait for admission (KV memory for their prompt) in FCFS order.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Final

from pdprobe.sim.decode_steps import DecodeSteps
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


class DecodeInstance(DecodeSteps):
    """One simulated decode engine: admits requests whose KV has arrived, runs continuous-batching
    steps, preempts under KV pressure and keeps the counters its metrics and logs report."""
    __slots__ = (
        "active",
        "admit_q",
        "alive",
        "cache",
        "cap",
        "ctr_abort",
        "ctr_computed",
        "ctr_err",
        "ctr_ext_hits",
        "ctr_ext_queries",
        "ctr_external",
        "ctr_fin",
        "ctr_local_hits",
        "ctr_preempt",
        "ctr_prompt",
        "ctr_queries",
        "draining",
        "factor",
        "gidx",
        "heap",
        "idx",
        "join",
        "local",
        "max_batch",
        "n_xfer",
        "node",
        "pending",
        "preempted",
        "recompute_b",
        "recompute_c",
        "stop_s",
        "token",
        "version",
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
