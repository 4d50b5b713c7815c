"""PD401: loss or congestion on the RDMA fabric (rdma-retransmits)."""

from __future__ import annotations

from typing import Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.rules.base import Evidence, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import BaseRule, column, ev, evidence_confidence, names, whole

# Retransmission events per 1000 RDMA packets. RoCE (go-back-N) goodput falls off around a loss
# rate of 1e-4 and collapses near 1e-3; a lossless fabric shows ~0.
RETRANS_PER_1K_WARN: Final = 0.1
RETRANS_PER_1K_CRITICAL: Final = 1.0
# Counts this small are noise whatever the rate (a link flap, a few out-of-order packets).
MIN_RETRANSMITS: Final = 50
# Congestion notifications (CNPs handled/sent, ECN marks) per 1000 packets: DCQCN emits at most
# one CNP per flow per ~50 us, so a healthy busy fabric stays well under 1 %; above that the
# senders are throttled most of the time (a "CNP storm").
CNP_PER_1K_WARN: Final = 10.0
# Sustained, not one burst: retransmissions in at least this share of a node's measured bins.
SUSTAINED_BIN_SHARE: Final = 0.2
# Mooncake/ibverbs failures: any "transport retry counter exceeded" means retries were exhausted
# (a failed transfer); this many slice failures or retry exhaustions is critical.
EVENTS_CRITICAL: Final = 10
SLICE_FAILURES_MIN: Final = 5


class RdmaRetransmits(BaseRule):
    """Loss or congestion on the RDMA fabric makes KV transfer slow and jittery

    What it means: the NICs carrying KV cache see retransmissions (out-of-sequence packets,
    duplicate requests, NAK sequence errors, local ACK timeouts, adaptive retransmissions) or
    are throttled by congestion control (CNPs, ECN marks) far more than a lossless RoCE /
    InfiniBand fabric should; the transfer engine may report failed slices or exhausted
    retries.

    Why it matters in a disaggregated deployment: every request's KV crosses this fabric
    between its prefill and decode instance. RoCE recovers from loss with go-back-N, so a
    loss rate of 1e-4 already costs a large share of goodput and 1e-3 collapses it; ACK
    timeouts add milliseconds per event. The result looks like a bandwidth problem (PD301)
    or slow instances (PD601) on the affected nodes, and adding instances does not help.

    Evidence it uses: per node, retransmission counters summed and divided by the RDMA
    packets moved (packets estimated from bytes with a 4 KiB MTU when no packet counter
    exists): >= RETRANS_PER_1K_WARN = 0.1 per 1000 packets is a warning, >= 1 critical, with
    at least MIN_RETRANSMITS = 50 events and retransmissions in >= 20 % of the node's bins
    (one burst is reported as info); congestion notifications >= 10 per 1000 packets; from
    logs, any "transport retry counter exceeded" or >= 5 failed transfer slices (critical
    from 10). Retransmits per GB are reported next to the per-packet rate.

    What to do: check PFC/ECN configuration end to end (lossless class for RoCE, matching
    DSCP/priority on NICs and switches); look for a bad cable/transceiver on the named nodes
    (symbol errors, link downed); check switch buffer drops and pause storms; tune DCQCN;
    reduce incast by spreading decode instances over more leaf switches.
    """

    code = "PD401"
    name = "rdma-retransmits"
    cause = "rdma-retransmits"
    component = "network-fabric"
    inputs = Inputs(
        needs=(
        "RDMA retransmission/congestion counters with traffic counters (node_exporter "
        "infiniband hw_counters, an RDMA exporter)",
        "Mooncake transfer-engine logs (slice failures, retry exhaustion)",
        ),
        evidence=("nodes.retransmits", "nodes.cnp", "nodes.rdma_packets", "nodes.rdma_bytes",
                  "nodes.retransmit_bins", "nodes.measured_bins", "nodes.retransmit_top_signal",
                  "nodes.rdma_packets_measured", "instances.xfer_s_p50", "events", "sources"),
        live=(Live("RDMA retransmission counters", S.RETRANSMIT_SIGNALS),
              Live("RDMA congestion counters", S.CONGESTION_SIGNALS),
              Live("RDMA traffic counters", (S.RDMA_TX_PACKETS_TOTAL, S.RDMA_TX_BYTES_TOTAL))),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        f = ctx.evidence
        nodes = f.nodes
        has_counters = f.has_node_column("retransmits") or f.has_node_column("cnp")
        retry_exceeded = f.event_count(S.EV_RDMA_RETRY_EXCEEDED)
        slice_failed = f.event_count(S.EV_RDMA_SLICE_FAILED)
        # A Mooncake log without failure lines is evidence too: failures log at ERROR level.
        has_logs = bool(retry_exceeded or slice_failed or any(
            "mooncake" in s.format for s in ctx.dataset.sources))
        if not has_counters and not has_logs:
            return [self.inconclusive()]
        evidence: list[Evidence] = []
        bad_nodes: list[str] = []
        burst_nodes: list[str] = []
        congested_nodes: list[str] = []
        worst_rate = 0.0
        if has_counters and len(nodes):
            packets = column(nodes, "rdma_packets", "nodes")
            retrans = column(nodes, "retransmits", "nodes")
            cnp = column(nodes, "cnp", "nodes")
            with np.errstate(all="ignore"):
                per_1k = 1000.0 * retrans / packets.where(packets > 0)
                cnp_1k = 1000.0 * cnp / packets.where(packets > 0)
                per_gb = retrans / (column(nodes, "rdma_bytes", "nodes") / 1e9).where(
                    column(nodes, "rdma_bytes", "nodes") > 0)
            bins = column(nodes, "retransmit_bins", "nodes")
            measured = column(nodes, "measured_bins", "nodes")
            for node in nodes.index:
                rate = per_1k.get(node, np.nan)
                count = retrans.get(node, np.nan)
                if np.isfinite(rate) and rate >= RETRANS_PER_1K_WARN and count >= MIN_RETRANSMITS:
                    share = bins.get(node, np.nan) / measured.get(node, np.nan) \
                        if measured.get(node, 0) else np.nan
                    sustained = not np.isfinite(share) or share >= SUSTAINED_BIN_SHARE
                    (bad_nodes if sustained else burst_nodes).append(str(node))
                    worst_rate = max(worst_rate, float(rate)) if sustained else worst_rate
                    top = nodes.loc[node, "retransmit_top_signal"] if \
                        f.has_node_column("retransmit_top_signal") else ""
                    evidence.append(ev(f"retransmissions per 1000 RDMA packets on {node}",
                                       float(rate), "per 1k packets",
                                       instances=self._instances_on(f, [str(node)]),
                                       window=whole(f), baseline=RETRANS_PER_1K_WARN,
                                       source=f"{int(count)} events, mostly {top}"
                                       + ("" if bool(nodes.loc[node, "rdma_packets_measured"])
                                          else "; packets estimated from bytes")))
                    if np.isfinite(per_gb.get(node, np.nan)):
                        evidence.append(ev(f"retransmissions per GB on {node}",
                                           float(per_gb[node]), "per GB", window=whole(f),
                                           source="retransmissions / RDMA bytes"))
                    if np.isfinite(share):
                        evidence.append(ev(f"bins with retransmissions on {node}", 100 * share,
                                           "%", window=whole(f),
                                           baseline=100 * SUSTAINED_BIN_SHARE))
                c = cnp_1k.get(node, np.nan)
                if np.isfinite(c) and c >= CNP_PER_1K_WARN:
                    congested_nodes.append(str(node))
                    evidence.append(ev(f"congestion notifications per 1000 packets on {node}",
                                       float(c), "per 1k packets", window=whole(f),
                                       baseline=CNP_PER_1K_WARN,
                                       source="CNPs handled/sent + ECN-marked packets"))
        if retry_exceeded:
            evidence.append(ev("transport retry counter exceeded (log lines)", retry_exceeded,
                               "events", instances=self._event_instances(
                                   f, S.EV_RDMA_RETRY_EXCEEDED), window=whole(f),
                               source="Mooncake transfer engine / ibverbs"))
        if slice_failed:
            evidence.append(ev("failed RDMA transfer slices (log lines)", slice_failed,
                               "events", instances=self._event_instances(
                                   f, S.EV_RDMA_SLICE_FAILED), window=whole(f),
                               source="Mooncake worker_pool"))
        logs_bad = retry_exceeded >= 1 or slice_failed >= SLICE_FAILURES_MIN
        if not (bad_nodes or congested_nodes or logs_bad or burst_nodes):
            return []
        if bad_nodes or congested_nodes or logs_bad:
            severity = Severity.WARNING
            if worst_rate >= RETRANS_PER_1K_CRITICAL or \
                    retry_exceeded + slice_failed >= EVENTS_CRITICAL:
                severity = Severity.CRITICAL
        else:
            severity = Severity.INFO
        agree = sum(bool(x) for x in (bad_nodes, congested_nodes, logs_bad))
        available = int(has_counters) * 2 + int(bool(has_logs))
        confidence = evidence_confidence(max(agree, 1), max(available, 1))
        if severity is Severity.INFO:
            confidence = min(confidence, 0.4)
        affected_nodes = sorted(set(bad_nodes) | set(congested_nodes) | set(burst_nodes))
        instances = sorted(set(self._instances_on(f, affected_nodes))
                           | set(self._event_instances(f, S.EV_RDMA_RETRY_EXCEEDED))
                           | set(self._event_instances(f, S.EV_RDMA_SLICE_FAILED)))
        self._transfer_evidence(f, instances, evidence)
        return [self.finding(severity, confidence,
                             self._summary(bad_nodes, burst_nodes, congested_nodes,
                                           worst_rate, retry_exceeded, slice_failed),
                             instances=instances, evidence=evidence, next_steps=(
            "Check PFC/ECN end to end: RoCE traffic in a lossless class with matching "
            "DSCP/priority on NICs and switches.",
            "On the named nodes look for a bad cable or transceiver (symbol errors, link "
            "downed, port receive errors) and for switch buffer drops or pause storms.",
            "Tune DCQCN and reduce incast (spread decode instances over more leaf switches).",
        ))]

    @staticmethod
    def _instances_on(f: ClusterEvidence, nodes: list[str]) -> list[str]:
        inst = f.instances
        return sorted(inst.index[inst["node"].isin(nodes)].astype(str))

    @staticmethod
    def _event_instances(f: ClusterEvidence, event: str) -> list[str]:
        if f.events.empty:
            return []
        sub = f.events[(f.events["event"] == event) & (f.events["instance"] != "")]
        return sorted(sub["instance"].astype(str).unique())

    @staticmethod
    def _transfer_evidence(f: ClusterEvidence, instances: list[str], evidence: list[Evidence]) -> None:
        """KV-transfer latency on the affected instances against their peers, when known."""
        lat = column(f.instances, "xfer_s_p50")
        if not instances or not lat.notna().any():
            return
        mine = lat.reindex(instances).dropna()
        peers = lat.drop(index=[i for i in instances if i in lat.index]).dropna()
        if len(mine) and len(peers):
            evidence.append(ev("KV-transfer latency p50 on affected instances",
                               float(mine.median()), "s", instances=list(mine.index),
                               window=whole(f), baseline=float(peers.median()),
                               source="peer median as baseline"))

    @staticmethod
    def _summary(bad: list[str], burst: list[str], congested: list[str], worst: float,
                 retry_exceeded: int, slice_failed: int) -> str:
        parts = []
        if bad:
            parts.append(f"sustained RDMA retransmissions on {names(bad)} "
                         f"(up to {worst:.2g} per 1000 packets)")
        if congested:
            parts.append(f"congestion-notification storms on {names(congested)}")
        if retry_exceeded:
            parts.append(f"{retry_exceeded} transfers exhausted their retries")
        if slice_failed:
            parts.append(f"{slice_failed} transfer slices failed")
        if not parts and burst:
            return (f"A burst of RDMA retransmissions on {names(burst)}; not sustained over the "
                    f"window")
        return "Loss or congestion on the RDMA fabric: " + ", ".join(parts) + \
            "; KV transfer is slowed by recovery, not by load"
