"""KV transfers over per-node links, sharing bandwidth between concurrent transfers.

A transfer waits the link's base latency (handshake, descriptor posting), then moves its bytes
at ``min(cap_src / n_src, cap_dst / n_dst)``: processor sharing of the sender's egress and the
receiver's ingress, recomputed whenever a transfer starts or ends on either node. RDMA loss adds
ack timeouts (``timeouts * ack_timeout_s``) after the bytes, and may fail the transfer.

Bytes are credited to the nodes as they move, so node counters sampled at any tick are exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe.sim.faults import (
    BACKGROUND_FAIL_SHARE,
    SLICE_FAIL_SHARE,
    SLICE_RETRY_COUNT,
    TIMEOUT_SCALE_BYTES,
    TRANSFER_FAIL_SHARE,
    Effective,
)
from pdprobe.sim.state import EV_KV_READY, EV_XFER_BEGIN, EV_XFER_DONE

if TYPE_CHECKING:
    from pdprobe.sim.engine import Engine


class Transfer:
    """One KV transfer in flight: source and destination node, bytes left, its share of the link and
    whether it will fail."""
    __slots__ = ("delay", "dst", "fail", "last", "rate", "remaining", "rid", "src", "version")

    def __init__(self, rid: int, src: int, dst: int, nbytes: float, delay: float,
                 fail: bool) -> None:
        self.rid = rid
        self.src = src
        self.dst = dst
        self.remaining = nbytes
        self.rate = 0.0
        self.last = 0.0
        self.version = 0
        self.delay = delay  # ack-timeout stalls added after the bytes
        self.fail = fail


class Links:
    """All transfers in flight and the bytes each node has sent and received."""

    def __init__(self, node_caps: list[float], eff: Effective, rng: np.random.Generator) -> None:
        self.cap = node_caps
        self.eff = eff
        self.rng = rng
        self.active: dict[int, Transfer] = {}
        self.on_node: list[set[int]] = [set() for _ in node_caps]
        self.tx_bytes = [0.0] * len(node_caps)
        self.rx_bytes = [0.0] * len(node_caps)
        self.timeouts = [0] * len(node_caps)  # ack timeouts seen by the sender node
        self.slice_failures = [0] * len(node_caps)
        self._next = 0

    def start(self, eng: Engine, rid: int, src: int, dst: int, nbytes: float) -> None:
        """Start a request's KV transfer between two nodes (after any retransmit timeouts); the
        link's bandwidth is shared by the transfers on it."""
        eff = self.eff
        timeouts = 0
        fail = False
        delay = 0.0
        if eff.transport == "rdma" and eff.retx_rate > 0 and nbytes > 0:
            timeouts = int(self.rng.poisson(eff.retx_rate * nbytes / TIMEOUT_SCALE_BYTES))
            if timeouts:
                slice_failures = int(self.rng.binomial(timeouts, SLICE_FAIL_SHARE))
                delay = timeouts * eff.ack_timeout_s
                if slice_failures:
                    # an exhausted slice waited out every retry before being redispatched
                    delay += slice_failures * SLICE_RETRY_COUNT * eff.ack_timeout_s
                    fail = bool(self.rng.random() < 1 - (1 - TRANSFER_FAIL_SHARE) ** slice_failures)
                    self.slice_failures[src] += slice_failures
                    eng.log_event(eng.now + eff.base_latency_s, eng.prefills[eng.req.p_inst[rid]].gidx,
                                  "slice_failed", rid, slice_failures)
                self.timeouts[src] += timeouts
        eng.req.timeouts[rid] = timeouts
        if eff.xfer_fail_rate > 0 and nbytes > 0:
            fail = self._injected_failure(eng, rid, src) or fail
        tid = self._next
        self._next += 1
        self.active[tid] = Transfer(rid, src, dst, nbytes, delay, fail)
        eng.events.push(eng.now + eff.base_latency_s, EV_XFER_BEGIN, tid)

    def _injected_failure(self, eng: Engine, rid: int, src: int) -> bool:
        """kv-transfer-failures: does this transfer fail, and through which sender NIC.

        Without a NIC every transfer fails at ``rate``. With one, the first prefill instance's
        transfers through that NIC fail so that ``rate`` of all transfers fail overall (the
        other instances keep a small background), and each failure is logged with its NIC.
        """
        eff = self.eff
        p = eng.prefills[eng.req.p_inst[rid]]
        devices = max(1, eng.layout.nodes[src].devices)
        nic = int(self.rng.integers(0, devices))
        prob = eff.xfer_fail_rate
        if eff.xfer_fail_nic >= 0:
            n_prefill = max(1, len(eng.prefills))
            if p.idx == 0:
                nic = eff.xfer_fail_nic if self.rng.random() < 0.5 else nic
                prob = min(1.0, eff.xfer_fail_rate * n_prefill * 2) \
                    if nic == eff.xfer_fail_nic else 0.0
            else:
                prob = eff.xfer_fail_rate * BACKGROUND_FAIL_SHARE
        if self.rng.random() >= prob:
            return False
        eng.log_event(eng.now + eff.base_latency_s, p.gidx, "nic_failed", rid, nic)
        return True

    def on_begin(self, eng: Engine, tid: int) -> None:
        """A transfer's bytes begin to flow: stamp it and re-plan the link's rates."""
        tr = self.active[tid]
        eng.req.t_xfer[tr.rid] = eng.now
        if tr.remaining <= 0:
            self._finish(eng, tid, tr)
            return
        tr.last = eng.now
        self.on_node[tr.src].add(tid)
        self.on_node[tr.dst].add(tid)
        self._reshare(eng, tr.src, tr.dst)

    def on_done(self, eng: Engine, tid: int, version: int) -> None:
        """A transfer's planned completion: finish it unless it was re-planned since (``version``)."""
        tr = self.active.get(tid)
        if tr is None or tr.version != version:
            return
        # the rest of the bytes arrive now (exact totals, whatever the float rounding)
        self.tx_bytes[tr.src] += tr.remaining
        self.rx_bytes[tr.dst] += tr.remaining
        tr.remaining = 0.0
        tr.last = eng.now
        self.on_node[tr.src].discard(tid)
        self.on_node[tr.dst].discard(tid)
        self._reshare(eng, tr.src, tr.dst)
        self._finish(eng, tid, tr)

    def _finish(self, eng: Engine, tid: int, tr: Transfer) -> None:
        del self.active[tid]
        eng.events.push(eng.now + tr.delay, EV_KV_READY, tr.rid, 1 if tr.fail else 0)

    def _credit(self, tr: Transfer, now: float) -> None:
        moved = min(tr.remaining, tr.rate * (now - tr.last))
        if moved > 0:
            tr.remaining -= moved
            self.tx_bytes[tr.src] += moved
            self.rx_bytes[tr.dst] += moved
        tr.last = now

    def _reshare(self, eng: Engine, *nodes: int) -> None:
        now = eng.now
        touched: set[int] = set()
        for node in nodes:
            touched |= self.on_node[node]
        for tid in touched:
            tr = self.active[tid]
            self._credit(tr, now)
            rate = min(self.cap[tr.src] / len(self.on_node[tr.src]),
                       self.cap[tr.dst] / len(self.on_node[tr.dst]))
            tr.rate = rate
            tr.version += 1
            eng.events.push(now + tr.remaining / rate, EV_XFER_DONE, tid, tr.version)

    def sync(self, now: float) -> None:
        """Credit the bytes moved so far (for exact counters at a tick)."""
        for tr in self.active.values():
            if tr.rate > 0:
                self._credit(tr, now)
