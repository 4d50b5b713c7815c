"""The event loop: arrivals, prefill passes, transfers, decode boundaries, ticks, scaling.

A heapq of per-request and per-instance events drives the components; every ``TICK_S`` the
engine brings all instances and transfers up to date and snapshots their gauges and cumulative
counters into arrays (``pdprobe.sim.snapshots``, where ``SimResult`` lives and is re-exported
from here), from which the writers produce 15 s scrapes and 10 s log lines.

Request flow (vLLM): arrive -> router -> prefill queue -> prefill -> decode admission (KV memory)
-> transfer -> join the decode batch -> finish. SGLang pre-allocates decode memory first
(bootstrap), then prefills and transfers: ``admit -> prefill -> transfer``.
"""

from __future__ import annotations

import time
from typing import Final

import numpy as np

from pdprobe.sim.cluster import build_layout
from pdprobe.sim.config import HASH_BLOCK_TOKENS, LOG_INTERVAL_S, SCRAPE_INTERVAL_S, SimConfig
from pdprobe.sim.decode import DecodeInstance
from pdprobe.sim.faults import Effective, effective
from pdprobe.sim.prefill import PrefillInstance
from pdprobe.sim.router import Router
from pdprobe.sim.snapshots import FIELDS as FIELDS
from pdprobe.sim.snapshots import NODE_FIELDS as NODE_FIELDS
from pdprobe.sim.snapshots import PASS_COLUMNS, SimResult, Snapshots
from pdprobe.sim.snapshots import F as F
from pdprobe.sim.state import (
    EV_ARRIVAL,
    EV_DECODE_WAKE,
    EV_KV_READY,
    EV_PREFILL_DONE,
    EV_SCALE,
    EV_TICK,
    EV_XFER_BEGIN,
    EV_XFER_DONE,
    ST_ERROR,
    ST_TIMEOUT,
    EventQueue,
    PrefixCache,
    Requests,
)
from pdprobe.sim.transfer import Links
from pdprobe.sim.workload import Workload, build_workload

TICK_S: Final = 5.0  # divides both the 15 s scrape and the 10 s log interval
# The run ends on a tick that is a multiple of both intervals, so the last scrape and the last
# log line see every completion.
END_ALIGN_S: Final = 30.0
assert SCRAPE_INTERVAL_S % TICK_S == 0 and LOG_INTERVAL_S % TICK_S == 0


class Engine:
    """The discrete-event loop: arrivals, routing, prefill passes, KV transfers and decode steps of
    one simulated cluster, with the scrapes and log events its writers turn into captures."""
    def __init__(self, config: SimConfig, itl_bounds: tuple[float, ...]) -> None:
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.eff = effective(config)
        self.layout = build_layout(config)
        self.workload: Workload = build_workload(config, np.random.default_rng([config.seed, 1]))
        wl = self.workload
        self.req = Requests(wl.arrival_s.tolist(), wl.prompt.tolist(), wl.output.tolist())
        self.blocks = wl.block_ids
        self._block_off = wl.block_off
        self._block_lists: dict[int, list[int]] = {}
        self.block_tokens = HASH_BLOCK_TOKENS
        self.kv_bytes_per_token = config.profile.kv_bytes_per_token
        self.events = EventQueue()
        self.now = 0.0
        self._token = 0
        self.sglang = config.engine == "sglang"
        self.itl_bounds = itl_bounds
        self.log: list[tuple[float, int, str, int, int]] = []
        # (t, instance, seqs, new tokens, cached tokens, queue, KV used, bootstrap, inflight,
        #  pending tokens)
        self.pass_log: list[tuple[float, int, int, int, int, int, int, int, int, int]] | None = \
            [] if self.sglang else None
        use_cache = self.blocks is not None
        pcache_tokens = config.prefix_cache_tokens or config.profile.kv_capacity_tokens
        self.prefills: list[PrefillInstance] = []
        self.decodes: list[DecodeInstance] = []
        for spec in self.layout.instances:
            factor = self.eff.speed_factor(spec.role, spec.role_index)
            if spec.role == "prefill":
                self.prefills.append(PrefillInstance(
                    len(self.prefills), spec.index, spec.node, config.profile, factor,
                    self.eff.prefill_kv_tokens,
                    PrefixCache(pcache_tokens // HASH_BLOCK_TOKENS) if use_cache else None))
            else:
                self.decodes.append(DecodeInstance(
                    len(self.decodes), spec.index, spec.node, config.profile, factor,
                    self.eff.decode_kv_tokens, config.preemption,
                    PrefixCache(self.eff.decode_kv_tokens // HASH_BLOCK_TOKENS) if use_cache else None,
                    itl_bounds))
        comps: list[PrefillInstance | DecodeInstance] = [*self.prefills, *self.decodes]
        self.by_gidx: list[PrefillInstance | DecodeInstance] = sorted(comps, key=lambda c: c.gidx)
        caps = []
        for node in self.layout.nodes:
            caps.append(node.devices * node.line_rate_bytes_per_s * _usable(self.eff))
        self.links = Links(caps, self.eff, np.random.default_rng([config.seed, 2]))
        self.local_rng = np.random.default_rng([config.seed, 5])  # not-disaggregated
        self.router = Router(config.router, self.eff, np.random.default_rng([config.seed, 3]),
                             self.prefills, self.decodes)
        self.scale_events = sorted({float(f.get("at_s")) for f in config.faults_of("scale")})
        self.scale_targets = {
            float(f.get("at_s")): (int(f.get("prefill")), int(f.get("decode")))
            for f in config.faults_of("scale")
        }
        self.snapshots = Snapshots()

    # --- helpers the components call ---
    def next_token(self) -> int:
        """A fresh token for invalidating scheduled events (a newer plan supersedes an older one)."""
        self._token += 1
        return self._token

    def blocks_of(self, rid: int) -> list[int]:
        """A request's prefix-cache block ids (cached per request; the trace stores them flat)."""
        lst = self._block_lists.get(rid)
        if lst is None:
            assert self.blocks is not None and self._block_off is not None
            lst = self.blocks[self._block_off[rid]:self._block_off[rid + 1]].tolist()
            self._block_lists[rid] = lst
        return lst

    def log_event(self, t: float, gidx: int, kind: str, rid: int, detail: int = 0) -> None:
        """Record one engine-log event (time, instance, kind, request, detail) for the log writers."""
        self.log.append((t, gidx, kind, rid, detail))

    def on_prefilled(self, rid: int) -> None:
        """A prefill pass finished a request: hand it to its decode instance (SGLang transfers
        first, vLLM admits first)."""
        d = self.decodes[self.req.d_inst[rid]]
        if self.sglang:
            self._start_transfer(rid, d)
        else:
            d.enqueue(self, rid)

    def on_decode_admitted(self, rid: int, d: DecodeInstance) -> None:
        """A decode instance admitted a request: stamp the admission, count the prefix-cache hit and
        start its KV transfer."""
        req = self.req
        req.t_admit[rid] = self.now
        prompt = req.prompt[rid]
        cached = 0
        if d.cache is not None and self.blocks is not None:
            ids = self.blocks_of(rid)
            cached = min(d.cache.overlap(ids) * self.block_tokens, prompt - 1)
            d.cache.insert(ids)
        req.cached_d[rid] = cached
        d.ctr_queries += prompt
        d.ctr_local_hits += cached
        d.ctr_ext_queries += prompt - cached
        if self.sglang:
            p = self.prefills[req.p_inst[rid]]
            p.bootstrap_waiting -= 1
            p.enqueue(self, rid)
        else:
            self._start_transfer(rid, d)

    def _start_transfer(self, rid: int, d: DecodeInstance) -> None:
        req = self.req
        p = self.prefills[req.p_inst[rid]]
        nbytes = float((req.prompt[rid] - req.cached_d[rid]) * self.kv_bytes_per_token)
        req.kv_bytes[rid] = nbytes
        self.links.start(self, rid, p.node, d.node, nbytes)

    def on_finished(self, rid: int) -> None:
        """A request produced its last token: release its routing load and drop its block list."""
        self.router.release(self.req.d_inst[rid], self.req.prompt[rid])
        self.req.done += 1
        self._block_lists.pop(rid, None)

    def stop_instance(self, inst: PrefillInstance | DecodeInstance) -> None:
        """Take an instance out of service (scale-in or a crash fault) at the current time."""
        inst.alive = False
        inst.stop_s = self.now

    # --- event handlers ---
    def _arrive(self, rid: int) -> None:
        req = self.req
        p, d = self.router.route(self, rid)
        req.p_inst[rid] = p.idx
        req.d_inst[rid] = d.idx
        share = self.eff.local_prefill_share
        if share > 0 and (share >= 1 or self.local_rng.random() < share):
            # not-disaggregated: the request goes straight to decode, which prefills it itself
            req.p_inst[rid] = -1
            d.local.add(rid)
            d.enqueue(self, rid)
        elif self.sglang:
            p.bootstrap_waiting += 1
            d.enqueue(self, rid)
        else:
            p.enqueue(self, rid)
        if rid + 1 < req.n:
            self.events.push(req.arrival[rid + 1], EV_ARRIVAL, rid + 1)

    def _kv_ready(self, rid: int, failed: int) -> None:
        req = self.req
        p = self.prefills[req.p_inst[rid]]
        d = self.decodes[req.d_inst[rid]]
        p.release(self, rid)
        if failed:
            req.status[rid] = ST_ERROR
            p.ctr_err += 1
            self.log_event(self.now, p.gidx, "transfer_failed", rid)
            self.log_event(self.now, d.gidx, "transfer_failed", rid)
            d.on_kv_failed(self, rid)
            self.router.release(d.idx, req.prompt[rid])
            req.done += 1
            self._block_lists.pop(rid, None)
        else:
            req.t_kv[rid] = self.now
            d.on_kv_ready(self, rid)
        self._check_prefill_drained(p)

    def _check_prefill_drained(self, p: PrefillInstance) -> None:
        if p.draining and p.alive and p.is_empty():
            self.stop_instance(p)

    def _scale(self, at: float) -> None:
        targets = self.scale_targets[at]
        for role, target, comps in (("prefill", targets[0], self.prefills),
                                    ("decode", targets[1], self.decodes)):
            if target < 0:
                continue
            for comp in comps:
                spec = self.layout.instances[comp.gidx]
                if spec.start_s == at:
                    comp.active = comp.alive = True
            active = [c for c in comps if c.active]
            for comp in sorted(active, key=lambda c: c.idx, reverse=True)[:max(0, len(active) - target)]:
                comp.active = False
                comp.draining = True
                if isinstance(comp, PrefillInstance):
                    self._check_prefill_drained(comp)
                else:
                    comp.sync(self.now)
                    comp._check_drained(self)
            del role

    # --- ticks ---
    def _snapshot(self) -> None:
        self.links.sync(self.now)
        self.snapshots.record(self.now, self.by_gidx, self.links, self.itl_bounds)

    def _cutoff(self) -> None:
        """Requests still in flight when the drain time runs out: timeouts, aborted on the
        instance that holds them."""
        req = self.req
        for d in self.decodes:
            d.sync(self.now)
        for rid in range(req.n):
            if req.status[rid] != 0 or not np.isnan(req.t_finish[rid]) or req.arrival[rid] > self.now:
                continue
            req.status[rid] = ST_TIMEOUT
            if req.d_inst[rid] >= 0 and not np.isnan(req.t_admit[rid]):
                holder = self.decodes[req.d_inst[rid]]
                req.generated[rid] = holder.generated_of(rid)
                holder.ctr_abort += 1
            elif req.p_inst[rid] >= 0:
                self.prefills[req.p_inst[rid]].ctr_abort += 1
            req.done += 1

    def run(self) -> SimResult:
        """Run every event to the end of the configured duration and return the requests, scrapes
        and logs."""
        started = time.perf_counter()
        cfg = self.config
        req = self.req
        for comp in self.by_gidx:
            if self.layout.instances[comp.gidx].start_s == 0:
                comp.active = comp.alive = True
        if req.n:
            self.events.push(req.arrival[0], EV_ARRIVAL, 0)
        for k, at in enumerate(self.scale_events):
            self.events.push(at, EV_SCALE, k)
        self.events.push(0.0, EV_TICK)
        limit = cfg.duration_s + cfg.drain_s
        end = 0.0
        pop = self.events.pop
        while self.events:
            t, _, kind, a, b = pop()
            self.now = t
            if kind == EV_DECODE_WAKE:
                self.decodes[a].on_wake(self, b)
            elif kind == EV_PREFILL_DONE:
                self.prefills[a].on_pass_done(self)
            elif kind == EV_XFER_DONE:
                self.links.on_done(self, a, b)
            elif kind == EV_XFER_BEGIN:
                self.links.on_begin(self, a)
            elif kind == EV_KV_READY:
                self._kv_ready(a, b)
            elif kind == EV_ARRIVAL:
                self._arrive(a)
            elif kind == EV_TICK:
                all_done = req.done >= req.n and t >= cfg.duration_s
                over = t >= limit and t % END_ALIGN_S == 0
                if over and not all_done:
                    self._cutoff()
                    all_done = True
                self._snapshot()
                if all_done and t % END_ALIGN_S == 0:
                    end = t
                    break
                self.events.push(t + TICK_S, EV_TICK)
            elif kind == EV_SCALE:
                self._scale(self.scale_events[a])
        return self._result(end, time.perf_counter() - started)

    def _result(self, end: float, wall_s: float) -> SimResult:
        req = self.req
        arr = {
            "arrival_s": np.asarray(req.arrival, dtype=np.float64),
            "prompt": np.asarray(req.prompt, dtype=np.int64),
            "output": np.asarray(req.output, dtype=np.int64),
            "generated": np.asarray(req.generated, dtype=np.int64),
            "p_inst": np.asarray([self.prefills[i].gidx if i >= 0 else -1 for i in req.p_inst],
                                 dtype=np.int64),
            "d_inst": np.asarray([self.decodes[i].gidx if i >= 0 else -1 for i in req.d_inst],
                                 dtype=np.int64),
            "cached_p": np.asarray(req.cached_p, dtype=np.int64),
            "cached_d": np.asarray(req.cached_d, dtype=np.int64),
            "kv_bytes": np.asarray(req.kv_bytes, dtype=np.float64),
            "status": np.asarray(req.status, dtype=np.int64),
            "preemptions": np.asarray(req.preemptions, dtype=np.int64),
            "timeouts": np.asarray(req.timeouts, dtype=np.int64),
        }
        for name in ("t_pstart", "t_pend", "t_admit", "t_xfer", "t_kv", "t_join", "t_first",
                     "t_finish"):
            arr[name] = np.asarray(getattr(req, name), dtype=np.float64)
        return SimResult(
            config=self.config,
            layout=self.layout,
            eff=self.eff,
            workload_source=self.workload.source,
            notes=self.workload.notes,
            requests=arr,
            **self.snapshots.stacked(len(self.by_gidx), len(self.layout.nodes), self.itl_bounds),
            events=tuple(sorted(self.log)),
            passes=np.asarray(self.pass_log or [], dtype=np.float64).reshape(-1, len(PASS_COLUMNS)),
            itl_bounds=self.itl_bounds,
            end_s=end,
            wall_s=wall_s,
        )


def _usable(eff: Effective) -> float:
    """Share of a node's line rate KV transfers get: efficiency, faults and background."""
    from pdprobe.sim.cluster import LINK_EFFICIENCY

    return LINK_EFFICIENCY * eff.link_factor * (1.0 - eff.background_share)


def simulate(config: SimConfig) -> SimResult:
    """Run ``config`` once (deterministic for its seed)."""
    from pdprobe.sim.writers.buckets import itl_bounds

    return Engine(config, itl_bounds(config.engine)).run()
