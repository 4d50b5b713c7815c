"""KV transfers: processor sharing of node links, exact byte accounting, RDMA loss and TCP."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pdprobe.sim.config import SimConfig, parse_fault
from pdprobe.sim.faults import effective
from pdprobe.sim.model import run_simulation
from pdprobe.sim.state import EV_KV_READY, EV_XFER_BEGIN, EV_XFER_DONE, EventQueue, Requests
from pdprobe.sim.transfer import Links

CAP = 1e9  # bytes/s of each node link in the unit tests
BASE = 0.004  # s


class _Engine:
    """The few engine pieces ``Links`` uses."""

    def __init__(self, n: int) -> None:
        self.events = EventQueue()
        self.now = 0.0
        self.req = Requests([0.0] * n, [100] * n, [10] * n)
        self.ready: dict[int, float] = {}

    def log_event(self, *args: object) -> None:
        raise AssertionError("no slice failures on a healthy link")

    def run(self, links: Links, starts: list[tuple[float, int, int, int, float]]) -> None:
        pending = sorted(starts)
        while pending or self.events:
            if pending and (not self.events or pending[0][0] <= self.events._heap[0][0]):
                t, rid, src, dst, nbytes = pending.pop(0)
                self.now = t
                links.start(self, rid, src, dst, nbytes)  # type: ignore[arg-type]
                continue
            t, _, kind, a, b = self.events.pop()
            self.now = t
            if kind == EV_XFER_BEGIN:
                links.on_begin(self, a)  # type: ignore[arg-type]
            elif kind == EV_XFER_DONE:
                links.on_done(self, a, b)  # type: ignore[arg-type]
            elif kind == EV_KV_READY:
                assert b == 0
                self.ready[a] = t


def _links(nodes: int = 3) -> Links:
    eff = replace(effective(SimConfig()), retx_rate=0.0, base_latency_s=BASE)
    return Links([CAP] * nodes, eff, np.random.default_rng(0))


def test_concurrent_transfers_share_the_link() -> None:
    eng = _Engine(2)
    links = _links()
    eng.run(links, [(0.0, 0, 0, 2, 1e9), (0.0, 1, 1, 2, 1e9)])
    # two 1 GB transfers into the same 1 GB/s node: both take 2 s after the setup latency
    assert eng.ready[0] == pytest.approx(BASE + 2.0)
    assert eng.ready[1] == pytest.approx(BASE + 2.0)
    assert links.rx_bytes[2] == pytest.approx(2e9)
    assert links.tx_bytes[0] == pytest.approx(1e9) and links.tx_bytes[1] == pytest.approx(1e9)


def test_a_late_transfer_slows_the_one_in_flight() -> None:
    eng = _Engine(2)
    links = _links()
    # the second starts when the first is half done: the first finishes its last 0.5 GB at half
    # speed (1 s), the second then runs alone for its remaining 0.5 GB (0.5 s)
    eng.run(links, [(0.0, 0, 0, 2, 1e9), (0.5, 1, 1, 2, 1e9)])
    assert eng.ready[0] == pytest.approx(BASE + 0.5 + 1.0)
    assert eng.ready[1] == pytest.approx(BASE + 0.5 + 1.0 + 0.5)


def test_disjoint_paths_do_not_interfere() -> None:
    eng = _Engine(2)
    links = _links(4)
    eng.run(links, [(0.0, 0, 0, 2, 1e9), (0.0, 1, 1, 3, 1e9)])
    assert eng.ready[0] == pytest.approx(BASE + 1.0)
    assert eng.ready[1] == pytest.approx(BASE + 1.0)


def test_thin_links_and_tcp_slow_transfers(small_config: SimConfig) -> None:
    def p50_transfer(config: SimConfig) -> float:
        r = run_simulation(config).requests
        return float(np.nanmedian(r["t_kv"] - r["t_xfer"]))

    healthy = p50_transfer(small_config)
    thin = p50_transfer(replace(small_config, faults=(parse_fault("thin-link:fraction=0.1"),)))
    tcp = p50_transfer(replace(small_config, faults=(parse_fault("no-rdma"),)))
    # ~650 MB of KV per request: a 10x thinner link takes ~10x longer; TCP (2 x 25 GbE) far more
    assert thin == pytest.approx(10 * healthy, rel=0.25)
    assert tcp > 20 * healthy
    eff = effective(replace(small_config, faults=(parse_fault("no-rdma"),)))
    assert eff.transport == "tcp" and eff.retx_rate == 0.0


def test_rdma_loss_makes_transfers_slow_and_jittery(small_config: SimConfig) -> None:
    lossy = replace(small_config, duration_s=300.0,
                    faults=(parse_fault("rdma-retransmits:rate=0.1"),))
    res = run_simulation(lossy)
    r = res.requests
    xfer = r["t_kv"] - r["t_xfer"]
    assert r["timeouts"].sum() > 0
    slow = np.nanpercentile(xfer, 99) / np.nanpercentile(xfer, 50)
    base = run_simulation(replace(lossy, faults=())).requests
    base_xfer = base["t_kv"] - base["t_xfer"]
    assert slow > 5 * (np.nanpercentile(base_xfer, 99) / np.nanpercentile(base_xfer, 50))
    kinds = {e[2] for e in res.events}
    assert "slice_failed" in kinds
    # node counters: every successful transfer's bytes reached a decode node
    dec_nodes = [n.index for n in res.layout.nodes if n.role == "decode"]
    sent = r["kv_bytes"][np.isfinite(r["t_kv"])].sum() + r["kv_bytes"][r["status"] == 1].sum()
    assert res.node[-1, dec_nodes, 1].sum() == pytest.approx(sent, rel=1e-9)


def test_contended_links_slow_transfers_by_the_background_share(small_config: SimConfig) -> None:
    base = run_simulation(small_config).requests
    busy = run_simulation(replace(small_config, faults=(parse_fault("contended-link:share=0.6"),)))
    assert busy.eff.background_share == 0.6
    r = busy.requests
    # 40 % of the link left: bandwidth-bound transfers take ~2.5x as long
    ratio = np.nanmedian(r["t_kv"] - r["t_xfer"]) / np.nanmedian(base["t_kv"] - base["t_xfer"])
    assert ratio == pytest.approx(2.5, rel=0.25)
