"""The request router: picks a prefill and a decode instance for each arriving request.

Policies (``--router``):

- ``least-tokens`` (default): the prefill instance with the fewest uncached prompt tokens queued,
  the decode instance with the fewest prompt tokens assigned and unfinished;
- ``round-robin``: each role in turn;
- ``kv-aware``: like least-tokens but a cached prefix counts against the cost (Dynamo's KV
  router idea): cost = queued tokens + tokens still to compute (prefill), assigned tokens -
  cached tokens (decode).

The ``routing-skew`` fault sends a share of requests to the first decode instances whatever the
policy says; ``ignore-kv-hits`` makes the KV-aware router blind to cached prefixes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe.sim.faults import Effective

if TYPE_CHECKING:
    from pdprobe.sim.decode import DecodeInstance
    from pdprobe.sim.engine import Engine
    from pdprobe.sim.prefill import PrefillInstance


class Router:
    """The simulated router: picks a prefill and a decode instance per request by policy
    (least-tokens, round-robin or kv-aware), skewed when the routing-skew fault is injected."""
    def __init__(self, policy: str, eff: Effective, rng: np.random.Generator,
                 prefills: list[PrefillInstance], decodes: list[DecodeInstance]) -> None:
        self.policy = policy
        self.eff = eff
        self.rng = rng
        self.prefills = prefills
        self.decodes = decodes
        self.d_load = [0] * len(decodes)  # prompt tokens assigned and not yet finished
        self._rr_p = 0
        self._rr_d = 0
        self.use_hits = policy == "kv-aware" and not eff.ignore_kv_hits

    def route(self, eng: Engine, rid: int) -> tuple[PrefillInstance, DecodeInstance]:
        """Choose the prefill and decode instance for a request and book its prompt on the decode's
        load."""
        prompt = eng.req.prompt[rid]
        ids = eng.blocks_of(rid) if (self.use_hits and eng.blocks is not None) else None
        p = self._pick_prefill(eng, prompt, ids)
        d = self._pick_decode(eng, prompt, ids)
        self.d_load[d.idx] += prompt
        return p, d

    def release(self, d_idx: int, prompt: int) -> None:
        """Take a finished request's prompt off its decode instance's load."""
        self.d_load[d_idx] -= prompt

    def _pick_prefill(self, eng: Engine, prompt: int, ids: list[int] | None) -> PrefillInstance:
        eligible = [p for p in self.prefills if p.active]
        n = len(eligible)
        self._rr_p += 1
        if self.policy == "round-robin":
            return eligible[self._rr_p % n]
        best = eligible[0]
        best_cost = None
        for k in range(n):
            # rotate the start so ties do not always favour the first instance
            p = eligible[(k + self._rr_p) % n]
            cost = p.outstanding + p.bootstrap_waiting * prompt
            if ids is not None and p.cache is not None:
                hit = min(p.cache.peek(ids) * eng.block_tokens, prompt - 1)
                cost += prompt - hit
            if best_cost is None or cost < best_cost:
                best, best_cost = p, cost
        return best

    def _pick_decode(self, eng: Engine, prompt: int, ids: list[int] | None) -> DecodeInstance:
        eligible = [d for d in self.decodes if d.active]
        n = len(eligible)
        self._rr_d += 1
        eff = self.eff
        if eff.skew_share > 0 and self.rng.random() < eff.skew_share:
            targets = eligible[:min(eff.skew_targets, n)]
            return targets[int(self.rng.integers(len(targets)))]
        if self.policy == "round-robin":
            return eligible[self._rr_d % n]
        best = eligible[0]
        best_cost = None
        for k in range(n):
            d = eligible[(k + self._rr_d) % n]
            cost = self.d_load[d.idx]
            if ids is not None and d.cache is not None:
                cost -= min(d.cache.peek(ids) * eng.block_tokens, prompt - 1)
            if best_cost is None or cost < best_cost:
                best, best_cost = d, cost
        return best
