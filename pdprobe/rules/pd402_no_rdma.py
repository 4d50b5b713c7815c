"""PD402: KV transfer without RDMA (no-rdma)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import BaseRule, column, ev, names, pct, role_rows, slo_collapsed, whole

# Share of the connector's KV bytes that went over TCP (Mooncake TENT transport=tcp) for KV to
# count as "travelling over TCP".
TCP_KV_SHARE: Final = 0.5
# RDMA bytes under this share of the KV volume: RDMA ports exist but KV does not use them.
RDMA_UNUSED_SHARE: Final = 0.01
# Ordinary (netdev) bytes on the serving nodes at least this share of the KV volume: the KV
# volume is visible on the TCP/IP path.
TCP_CARRIES_SHARE: Final = 0.5
# TTFT share in transfer from which the TCP path is a critical problem, not only a warning.
TRANSFER_SHARE_CRITICAL: Final = 0.3
# Confidence by the strength of the signs: a log line or byte counter naming TCP is direct
# (0.75, +0.1 per further sign up to two); missing or inactive RDMA ports only make TCP likely
# (0.5, +0.1 per further sign); no RDMA device without a transfer seen is a hint (0.3).
CONFIDENCE_STRONG: Final = 0.75
CONFIDENCE_MEDIUM: Final = 0.5
CONFIDENCE_WEAK: Final = 0.3
CONFIDENCE_STEP: Final = 0.1


class NoRdma(BaseRule):
    """KV cache travels without RDMA: TCP fallback or no InfiniBand/RoCE at all

    What it means: the KV connector moves KV cache over TCP (Mooncake/NIXL TCP transport,
    a fallback after RDMA setup failed), or the serving nodes have no active RDMA port.

    Why it matters in a disaggregated deployment: TCP moves a few GB/s per stream with CPU
    copies and kernel overhead, an order of magnitude below GPU-direct RDMA. With realistic
    prompt lengths the KV hand-off then costs more than the prefill it saves, and
    disaggregation cannot pay off: fix the fabric or fall back to colocated (aggregated)
    serving. Everything downstream looks slow: TTFT (transfer is in it), decode (waits for
    KV), even prefill (blocked sending).

    Evidence it uses, strongest first: log lines saying the transfer uses TCP; connector
    byte counters by transport with >= 50 % of KV bytes on TCP (Mooncake TENT
    transport="tcp"); RDMA ports present but none ACTIVE on a serving node, or RDMA bytes
    under 1 % of the KV volume while netdev (TCP) bytes carry >= 50 % of it; node_exporter
    network counters with no InfiniBand/RoCE series at all on the serving nodes (the
    infiniband collector is enabled by default, so its absence means no RDMA device), which
    is a warning only when KV transfers are seen and info otherwise. Critical when strong
    evidence meets a TTFT with >= 30 % in transfer or a collapsed TTFT SLO.

    What to do: check that the RDMA devices are visible in the containers (device plugin,
    /dev/infiniband, IPC_LOCK / memlock limits), that the connector is configured for RDMA
    (Mooncake protocol "rdma" and device names, NIXL UCX_TLS with rc/ud and GPU-direct), and
    that the ports are ACTIVE; if the cluster has no RDMA fabric, serve colocated
    (prefill and decode on the same instances) instead.
    """

    code = "PD402"
    name = "no-rdma"
    cause = "no-rdma"
    component = "network-fabric"
    inputs = Inputs(
        needs=(
        "KV-connector transport evidence (engine/transfer-engine logs, Mooncake TENT byte "
        "counters by transport)",
        "node network counters (node_exporter infiniband and netdev collectors)",
        ),
        evidence=("instances.c_kv_tcp_bytes", "instances.c_kv_rdma_bytes", "nodes.ports", "nodes.ports_active",
                  "nodes.rdma_bytes", "nodes.tcp_bytes", "events", "transfer", "slo"),
        live=(Live("KV transport byte counters (Mooncake TENT)", (S.KV_RDMA_BYTES_TOTAL,
                                                                 S.KV_TCP_BYTES_TOTAL)),
              Live("node network counters", (S.RDMA_TX_BYTES_TOTAL, S.NODE_TCP_TX_BYTES_TOTAL))),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Measure each sign of KV over TCP (logs, connector bytes, node ports and bytes);
        decide by the strongest; explain it."""
        f = ctx.evidence
        tcp_events = f.event_count(S.EV_TRANSPORT_TCP)
        has_connector = column(f.instances, "c_kv_tcp_bytes").notna().any() or \
            column(f.instances, "c_kv_rdma_bytes").notna().any()
        if not (tcp_events or has_connector or f.has_network):
            return [self.inconclusive()]
        proof = _Proof()
        self._log_lines(f, tcp_events, proof)
        if has_connector:
            self._connector_bytes(f, proof)
        serving = self._serving_nodes(f)
        if f.has_network and serving:
            if f.rdma_signals:
                self._rdma_ports(f, serving, proof)
                self._rdma_bytes(f, serving, proof)
            elif f.tcp_signals and len(serving) > 1:
                # One node: KV moves over NVLink / shared memory and needs no RDMA.
                self._no_rdma_device(f, serving, proof)
        if not (proof.strong or proof.medium or proof.weak):
            return []
        return [self._explain(f, proof)]

    def _explain(self, f: ClusterEvidence, p: _Proof) -> Finding:
        """The finding: the signs found, the TTFT share in transfer; severity by strength."""
        xfer_share = f.transfer.share_of_ttft_p50
        if xfer_share is not None:
            p.evidence.append(ev("median share of TTFT spent in KV transfer", 100 * xfer_share,
                                 "%", window=whole(f), source="kv_transfer_s / ttft_s"))
        severity, confidence = self._decide(f, p, xfer_share)
        reasons = p.strong + p.medium + p.weak
        summary = ("KV cache travels without RDMA: " + "; ".join(reasons[:2])
                   + "; disaggregation cannot pay off until the fabric is fixed")
        if not p.strong and not p.medium:
            summary = ("No RDMA device is visible on the serving nodes; if KV moves between "
                       "them it goes over TCP")
        return self.finding(severity, confidence, summary,
                            instances=sorted(p.instances) or self._all_serving(f),
                            evidence=p.evidence, next_steps=(
            "Check that RDMA devices reach the containers (device plugin, /dev/infiniband, "
            "IPC_LOCK and memlock limits) and that the ports are ACTIVE.",
            "Configure the connector for RDMA: Mooncake protocol 'rdma' with the right "
            "device names; NIXL/UCX with rc transports and GPU-direct.",
            "Without an RDMA fabric, serve colocated (prefill and decode on the same "
            "instances): the KV hand-off over TCP costs more than it saves.",
        ))

    @staticmethod
    def _decide(f: ClusterEvidence, p: _Proof, xfer_share: float | None,
                ) -> tuple[Severity, float]:
        """Strong signs warn (critical when transfer dominates TTFT or the SLO collapsed) and
        are surest; medium ones warn; weak ones (no RDMA device, no transfer seen) inform."""
        if p.strong:
            critical = (xfer_share is not None and xfer_share >= TRANSFER_SHARE_CRITICAL) or \
                slo_collapsed(f.slo.ttft_attainment)
            return (Severity.CRITICAL if critical else Severity.WARNING,
                    CONFIDENCE_STRONG + CONFIDENCE_STEP * min(len(p.strong) - 1 + len(p.medium), 2))
        if p.medium:
            return Severity.WARNING, CONFIDENCE_MEDIUM + CONFIDENCE_STEP * min(len(p.medium) - 1, 2)
        return Severity.INFO, CONFIDENCE_WEAK

    def _log_lines(self, f: ClusterEvidence, tcp_events: int, p: _Proof) -> None:
        """Strong: log lines saying the KV transfer uses TCP."""
        if not tcp_events:
            return
        insts = self._event_instances(f)
        p.instances.update(insts)
        p.strong.append(f"{tcp_events} log lines show KV transfers over TCP")
        p.evidence.append(ev("log lines with KV transfer over TCP", tcp_events, "lines",
                             instances=insts, window=whole(f), source="engine logs"))

    @staticmethod
    def _connector_bytes(f: ClusterEvidence, p: _Proof) -> None:
        """Strong: the connector's byte counters put most KV bytes on TCP."""
        tcp_kv = column(f.instances, "c_kv_tcp_bytes")
        rdma_kv = column(f.instances, "c_kv_rdma_bytes")
        tcp_sum = float(tcp_kv.sum()) if tcp_kv.notna().any() else 0.0
        total = tcp_sum + (float(rdma_kv.sum()) if rdma_kv.notna().any() else 0.0)
        if total <= 0:
            return
        share = tcp_sum / total
        senders = tcp_kv[tcp_kv > 0].index.astype(str).tolist()
        p.evidence.append(ev("KV bytes sent over TCP by the connector", 100 * share, "%",
                             instances=senders, window=whole(f), baseline=100 * TCP_KV_SHARE,
                             source="tent_*_bytes_total by transport"))
        if share >= TCP_KV_SHARE:
            p.strong.append(f"{pct(share)} of the connector's KV bytes went over TCP")
            p.instances.update(senders)

    def _rdma_ports(self, f: ClusterEvidence, serving: list[str], p: _Proof) -> None:
        """Medium: RDMA ports present on a serving node, none of them ACTIVE."""
        nodes = f.nodes.reindex(serving)
        ports = column(nodes, "ports", "nodes")
        active = column(nodes, "ports_active", "nodes")
        dead = [str(n) for n in nodes.index[(np.isfinite(ports) & (ports > 0)
                                             & (active == 0)).to_numpy(dtype=bool)]]
        if not dead:
            return
        p.medium.append(f"no ACTIVE RDMA port on {names(dead)}")
        p.instances.update(self._instances_on(f, dead))
        p.evidence.append(ev("serving nodes with no ACTIVE RDMA port", len(dead), "nodes",
                             instances=self._instances_on(f, dead), window=whole(f),
                             baseline=len(serving), source="port_state"))

    def _rdma_bytes(self, f: ClusterEvidence, serving: list[str], p: _Proof) -> None:
        """Strong: RDMA bytes a sliver of the KV volume while TCP bytes carry it."""
        nodes = f.nodes.reindex(serving)
        kv_bytes = f.transfer.bytes_total
        rdma_bytes = column(nodes, "rdma_bytes", "nodes")
        tcp_bytes = column(nodes, "tcp_bytes", "nodes")
        if not (kv_bytes and kv_bytes > 0 and rdma_bytes.notna().any()):
            return
        rdma_share = float(rdma_bytes.sum()) / kv_bytes
        tcp_share = float(tcp_bytes.sum()) / kv_bytes if tcp_bytes.notna().any() else None
        p.evidence.append(ev("RDMA bytes on serving nodes / KV bytes moved", 100 * rdma_share,
                             "%", window=whole(f), baseline=100 * RDMA_UNUSED_SHARE,
                             source=f"RDMA port counters vs {f.transfer.bytes_source}"))
        if rdma_share < RDMA_UNUSED_SHARE and tcp_share is not None and \
                tcp_share >= TCP_CARRIES_SHARE:
            p.strong.append("KV volume shows up on the TCP/IP interfaces, not on the RDMA ports")
            p.instances.update(self._instances_on(f, serving))

    def _no_rdma_device(self, f: ClusterEvidence, serving: list[str], p: _Proof) -> None:
        """Medium (weak without KV transfers seen): network counters but no RDMA series."""
        tcp_bytes = column(f.nodes.reindex(serving), "tcp_bytes", "nodes")
        kv_bytes = f.transfer.bytes_total
        p.evidence.append(ev("RDMA series on serving nodes", "none", "",
                             instances=self._instances_on(f, serving), window=whole(f),
                             source="node_exporter network counters present, no "
                                    "node_infiniband_* series"))
        carries = bool(kv_bytes and tcp_bytes.notna().any()
                       and float(tcp_bytes.sum()) >= TCP_CARRIES_SHARE * kv_bytes)
        if carries and kv_bytes:
            p.evidence.append(ev("TCP bytes on serving nodes / KV bytes moved",
                                 100 * float(tcp_bytes.sum()) / kv_bytes, "%", window=whole(f),
                                 baseline=100 * TCP_CARRIES_SHARE, source="netdev counters"))
            p.medium.append("the serving nodes have no RDMA device and their TCP traffic "
                            "carries the KV volume")
        elif self._transfers_seen(f):
            p.medium.append("the serving nodes expose no RDMA device while KV transfers run")
        else:
            p.weak.append("the serving nodes expose no RDMA device")
        p.instances.update(self._instances_on(f, serving))

    @staticmethod
    def _event_instances(f: ClusterEvidence) -> list[str]:
        ev_ = f.events
        sub = ev_[(ev_["event"] == S.EV_TRANSPORT_TCP) & (ev_["instance"] != "")]
        return sorted(sub["instance"].astype(str).unique())

    @staticmethod
    def _serving_nodes(f: ClusterEvidence) -> list[str]:
        inst = f.instances
        serving = inst[inst["role"].isin(["prefill", "decode"])]
        nodes = set(serving["node"].dropna().astype(str)) & set(f.nodes.index.astype(str))
        return sorted(nodes)

    @staticmethod
    def _instances_on(f: ClusterEvidence, nodes: list[str]) -> list[str]:
        inst = f.instances
        return sorted(inst.index[inst["node"].isin(nodes)
                                 & inst["role"].isin(["prefill", "decode"])].astype(str))

    @staticmethod
    def _all_serving(f: ClusterEvidence) -> list[str]:
        inst = f.instances
        return sorted(inst.index[inst["role"].isin(["prefill", "decode"])].astype(str))

    @staticmethod
    def _transfers_seen(f: ClusterEvidence) -> bool:
        t = f.transfer
        return bool((t.bytes_total or 0) > 0 or (t.transfers or 0) > 0
                    or (len(role_rows(f, "prefill")) and len(role_rows(f, "decode"))))


@dataclass
class _Proof:
    """Signs that KV travels without RDMA, by strength, with their evidence and instances."""

    strong: list[str] = field(default_factory=list)  # summary fragments
    medium: list[str] = field(default_factory=list)
    weak: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    instances: set[str] = field(default_factory=set)
