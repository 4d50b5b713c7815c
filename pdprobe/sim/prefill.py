"""A prefill instance: FCFS queue, token-budget batches with chunked long prompts.

One forward pass takes uncached prompt chunks from the head of the queue until
``prefill_max_batch_tokens`` is used (a prompt longer than the budget is split across passes,
as vLLM's chunked prefill does). Its time is ``a + b * sum(l) + c * sum(q)`` where a chunk
covering prompt positions ``[s, e)`` contributes ``l = e - s`` and ``q = e**2 - s**2``: the
attention term of a chunk grows with all the context before it, so the chunks of one prompt
add up to the unchunked ``l**2``.

A request's KV stays on the instance from its first chunk until the decode side has pulled it;
when that would exceed the KV capacity the queue waits (decode back-pressure reaches prefill).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from pdprobe.sim.state import EV_PREFILL_DONE, PrefixCache

if TYPE_CHECKING:
    from pdprobe.profiles import Profile
    from pdprobe.sim.engine import Engine


class PrefillInstance:
    """One simulated prefill engine: chunked-prefill passes over a queue, a prefix cache, and the
    counters its metrics and logs report."""
    __slots__ = (
        "a",
        "active",
        "alive",
        "allocated",
        "b",
        "batch",
        "bootstrap_waiting",
        "budget",
        "busy_s",
        "c",
        "cache",
        "cap",
        "ctr_abort",
        "ctr_cached",
        "ctr_computed",
        "ctr_err",
        "ctr_fin",
        "ctr_gen",
        "ctr_prompt",
        "ctr_queries",
        "draining",
        "factor",
        "gidx",
        "idx",
        "inflight",
        "node",
        "outstanding",
        "pass_start",
        "progress",
        "queue",
        "started",
        "stop_s",
    )

    def __init__(self, idx: int, gidx: int, node: int, profile: Profile, factor: float, cap_tokens: int,
                 cache: PrefixCache | None) -> None:
        self.idx = idx  # within its role
        self.gidx = gidx  # in the run's instance list
        self.node = node
        self.a = profile.prefill_a_s * factor
        self.b = profile.prefill_b_s_per_token * factor
        self.c = profile.prefill_c_s_per_token2 * factor
        self.factor = factor
        self.budget = profile.prefill_max_batch_tokens
        self.cap = cap_tokens
        self.cache = cache
        self.queue: deque[int] = deque()
        self.progress: dict[int, int] = {}  # rid -> prompt tokens computed so far (beyond cache)
        self.started: set[int] = set()
        self.batch: list[tuple[int, int]] = []  # (rid, tokens) of the pass in flight
        self.pass_start = 0.0
        self.allocated = 0  # KV tokens held: started prompts and finished ones not yet pulled
        self.inflight = 0  # prefilled requests whose KV is being (or waiting to be) sent
        self.bootstrap_waiting = 0  # SGLang: routed here, waiting for decode pre-allocation
        self.outstanding = 0  # uncached prompt tokens queued or in flight (router's view)
        self.busy_s = 0.0
        self.active = False  # accepts new requests
        self.alive = False  # exists (joined and not yet left)
        self.draining = False
        self.stop_s = float("inf")
        # cumulative counters
        self.ctr_prompt = 0  # all prompt tokens of prefilled requests
        self.ctr_computed = 0  # computed here (uncached)
        self.ctr_cached = 0  # prefix-cache hits, tokens
        self.ctr_queries = 0  # prefix-cache queries, tokens
        self.ctr_gen = 0  # the one token a prefill instance emits per request
        self.ctr_fin = 0
        self.ctr_err = 0
        self.ctr_abort = 0

    # --- queue ---
    def enqueue(self, eng: Engine, rid: int) -> None:
        """Queue a request for prefill (its cached prefix skipped) and start a pass when idle."""
        req = eng.req
        prompt = req.prompt[rid]
        cached = 0
        if self.cache is not None and eng.blocks is not None:
            ids = eng.blocks_of(rid)
            hit_blocks = self.cache.overlap(ids)
            cached = min(hit_blocks * eng.block_tokens, prompt - 1)
        req.cached_p[rid] = cached
        self.ctr_queries += prompt
        self.progress[rid] = 0
        self.outstanding += prompt - cached
        self.queue.append(rid)
        if not self.batch:
            self.try_start(eng)

    def try_start(self, eng: Engine) -> None:
        """Start the next pass if idle and something can run."""
        if self.batch or not self.queue:
            return
        req = eng.req
        budget = self.budget
        tokens = 0
        squares = 0.0
        batch = []
        now = eng.now
        new_cached = 0
        for rid in self.queue:
            if rid not in self.started:
                need_mem = req.prompt[rid]
                if self.allocated > 0 and self.allocated + need_mem > self.cap:
                    break  # FCFS: the head waits for KV memory, nothing overtakes it
                self.allocated += need_mem
                self.started.add(rid)
                req.t_pstart[rid] = now
                new_cached += req.cached_p[rid]
            done = self.progress[rid]
            cached = req.cached_p[rid]
            remaining = req.prompt[rid] - cached - done
            take = remaining if remaining < budget else budget
            start = cached + done
            end = start + take
            squares += float(end * end - start * start)
            tokens += take
            batch.append((rid, take))
            budget -= take
            if budget <= 0:
                break
        if not batch:
            return
        self.batch = batch
        self.pass_start = now
        duration = self.a + self.b * tokens + self.c * squares
        eng.events.push(now + duration, EV_PREFILL_DONE, self.idx)
        if eng.pass_log is not None:  # SGLang prints one "Prefill batch" line per pass
            eng.pass_log.append((now, self.gidx, len(batch), tokens, new_cached,
                                 len(self.queue) - len(batch), self.allocated,
                                 self.bootstrap_waiting, self.inflight,
                                 self.outstanding - tokens))

    def on_pass_done(self, eng: Engine) -> None:
        """A prefill pass ended: account busy time, hand finished requests on and start the next
        pass."""
        req = eng.req
        now = eng.now
        self.busy_s += now - self.pass_start
        finished = []
        for rid, take in self.batch:
            self.progress[rid] += take
            self.outstanding -= take
            self.ctr_computed += take
            if self.progress[rid] >= req.prompt[rid] - req.cached_p[rid]:
                finished.append(rid)
        self.batch = []
        for rid in finished:
            # a batch is a prefix of the queue and only its last entry can be a partial
            # chunk, so the finished requests are exactly the leading ones
            self.queue.popleft()
            del self.progress[rid]
            self.started.discard(rid)
            req.t_pend[rid] = now
            self.ctr_prompt += req.prompt[rid]
            self.ctr_cached += req.cached_p[rid]
            self.ctr_gen += 1
            self.ctr_fin += 1
            self.inflight += 1
            if self.cache is not None and eng.blocks is not None:
                self.cache.insert(eng.blocks_of(rid))
        for rid in finished:
            eng.on_prefilled(rid)
        self.try_start(eng)

    def release(self, eng: Engine, rid: int) -> None:
        """The decode side has pulled (or given up on) this request's KV."""
        self.allocated -= eng.req.prompt[rid]
        self.inflight -= 1
        if not self.batch:
            self.try_start(eng)

    # --- views for ticks ---
    def running(self) -> int:
        """Requests in the current pass."""
        return len(self.batch)

    def waiting(self) -> int:
        """Requests queued behind the current pass."""
        return len(self.queue) - len(self.batch)

    def busy_until(self, now: float) -> float:
        """Busy seconds so far, the running pass included."""
        return self.busy_s + (now - self.pass_start if self.batch else 0.0)

    def is_empty(self) -> bool:
        """True when nothing is queued, in flight or waiting to bootstrap (a stopped instance may
        then leave)."""
        return not self.queue and self.inflight == 0 and self.bootstrap_waiting == 0
