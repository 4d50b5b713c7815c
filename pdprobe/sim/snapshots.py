"""What a simulation run records: per-tick snapshots of every instance and node, and the result.

Every tick the engine brings its instances and links up to date and ``Snapshots.record`` appends
their gauges and cumulative counters (``FIELDS``, ``NODE_FIELDS``); at the end ``stacked`` turns
the rows into the arrays of ``SimResult``, which is all the writers and the summary read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.prefill import PrefillInstance

if TYPE_CHECKING:
    import numpy.typing as npt

    from pdprobe.sim.cluster import Layout
    from pdprobe.sim.config import SimConfig
    from pdprobe.sim.decode import DecodeInstance
    from pdprobe.sim.faults import Effective
    from pdprobe.sim.transfer import Links

# Per-instance snapshot fields (gauges, then cumulative counters).
FIELDS: Final = (
    "running", "waiting", "deferred", "kv_fetch_in_progress", "kv_fetch_completed",
    "kv_used_tokens", "kv_capacity_tokens", "context_tokens", "bootstrap", "inflight",
    "retracted",
    "prompt_total", "prompt_computed", "prompt_cached", "prompt_external", "gen_total",
    "prefix_queries", "prefix_hits", "ext_queries", "ext_hits", "preemptions", "fin_ok",
    "fin_err", "fin_abort", "busy_s",
)
F: Final = {name: i for i, name in enumerate(FIELDS)}
NODE_FIELDS: Final = ("tx_bytes", "rx_bytes", "ack_timeouts", "slice_failures")
PASS_COLUMNS: Final = ("t", "instance", "seqs", "new_tokens", "cached_tokens", "queue",
                       "kv_used", "bootstrap", "inflight", "pending_tokens")


@dataclass(frozen=True)
class SimResult:
    """Everything a run produced, as arrays; the writers and the summary read only this."""

    config: SimConfig
    layout: Layout
    eff: Effective
    workload_source: str
    notes: tuple[str, ...]
    requests: dict[str, npt.NDArray]  # per-request columns, see Requests
    tick_s: npt.NDArray[np.float64]  # simulated seconds of each snapshot
    inst: npt.NDArray[np.float64]  # [tick, instance, field]
    alive: npt.NDArray[np.bool_]  # [tick, instance]
    itl_buckets: npt.NDArray[np.float64]  # [tick, instance, bucket]: per bucket, cumulative in time
    itl_sum: npt.NDArray[np.float64]  # [tick, instance]
    itl_count: npt.NDArray[np.float64]
    node: npt.NDArray[np.float64]  # [tick, node, NODE_FIELDS]
    events: tuple[tuple[float, int, str, int, int], ...]  # (t, instance, kind, rid, detail)
    passes: npt.NDArray[np.float64]  # SGLang prefill passes, columns PASS_COLUMNS
    itl_bounds: tuple[float, ...]
    end_s: float
    wall_s: float

    @property
    def n_requests(self) -> int:
        """Requests in the simulated run."""
        return int(self.requests["arrival_s"].size)


class Snapshots:
    """The per-tick rows of a run: appended by ``record``, stacked into arrays by ``stacked``."""

    def __init__(self) -> None:
        self.ticks: list[float] = []
        self.inst_rows: list[list[list[float]]] = []
        self.alive_rows: list[list[bool]] = []
        self.itl_rows: list[list[list[int]]] = []
        self.itl_sum_rows: list[list[float]] = []
        self.itl_count_rows: list[list[float]] = []
        self.node_rows: list[list[list[float]]] = []

    def record(self, now: float, by_gidx: list[PrefillInstance | DecodeInstance], links: Links,
               itl_bounds: tuple[float, ...]) -> None:
        """Append one snapshot at ``now``; the links must already be synced to it (decode
        instances are synced here)."""
        rows: list[list[float]] = []
        alive: list[bool] = []
        itl: list[list[int]] = []
        itl_sum: list[float] = []
        itl_count: list[float] = []
        zeros_itl = [0] * (len(itl_bounds) + 1)
        for comp in by_gidx:
            alive.append(comp.alive)
            if isinstance(comp, PrefillInstance):
                rows.append([
                    comp.running(), comp.waiting(), 0, 0, 0, comp.allocated, comp.cap, 0,
                    comp.bootstrap_waiting, comp.inflight, 0,
                    comp.ctr_prompt, comp.ctr_computed, comp.ctr_cached, 0, comp.ctr_gen,
                    comp.ctr_queries, comp.ctr_cached, 0, 0, 0, comp.ctr_fin, comp.ctr_err,
                    comp.ctr_abort, comp.busy_until(now),
                ])
                itl.append(zeros_itl)
                itl_sum.append(0.0)
                itl_count.append(0.0)
            else:
                comp.sync(now)
                rows.append([
                    comp.B, len(comp.admit_q), comp.n_xfer + len(comp.pending), comp.n_xfer,
                    len(comp.pending), comp.used, comp.cap, comp.context_tokens(), 0, 0,
                    len(comp.preempted),
                    comp.ctr_prompt, comp.ctr_computed, comp.ctr_local_hits, comp.ctr_external,
                    comp.ctr_gen,
                    comp.ctr_queries, comp.ctr_local_hits, comp.ctr_ext_queries, comp.ctr_ext_hits,
                    comp.ctr_preempt, comp.ctr_fin, comp.ctr_err, comp.ctr_abort, comp.busy_s,
                ])
                itl.append(list(comp.itl_counts))
                itl_sum.append(comp.itl_sum)
                itl_count.append(float(comp.itl_count))
        self.ticks.append(now)
        self.inst_rows.append(rows)
        self.alive_rows.append(alive)
        self.itl_rows.append(itl)
        self.itl_sum_rows.append(itl_sum)
        self.itl_count_rows.append(itl_count)
        self.node_rows.append([[links.tx_bytes[i], links.rx_bytes[i], links.timeouts[i],
                                 links.slice_failures[i]] for i in range(len(links.cap))])

    def stacked(self, n_instances: int, n_nodes: int, itl_bounds: tuple[float, ...],
                ) -> dict[str, npt.NDArray]:
        """The rows as ``SimResult``'s arrays: ``tick_s``, ``inst``, ``alive``, ``itl_buckets``,
        ``itl_sum``, ``itl_count`` and ``node``."""
        n_ticks = len(self.ticks)
        return dict(
            tick_s=np.asarray(self.ticks, dtype=np.float64),
            inst=np.asarray(self.inst_rows, dtype=np.float64).reshape(n_ticks, n_instances, len(FIELDS)),
            alive=np.asarray(self.alive_rows, dtype=bool).reshape(n_ticks, n_instances),
            itl_buckets=np.asarray(self.itl_rows, dtype=np.float64).reshape(
                n_ticks, n_instances, len(itl_bounds) + 1),
            itl_sum=np.asarray(self.itl_sum_rows, dtype=np.float64).reshape(n_ticks, -1),
            itl_count=np.asarray(self.itl_count_rows, dtype=np.float64).reshape(n_ticks, -1),
            node=np.asarray(self.node_rows, dtype=np.float64).reshape(n_ticks, n_nodes, len(NODE_FIELDS)),
        )
