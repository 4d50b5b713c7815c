"""PD401: loss or congestion on the RDMA fabric (rdma-retransmits)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import BaseRule, column, ev, evidence_confidence, names, whole
from pdprobe.rules.thresholds import CONFIDENCE_UNOBSERVED

if TYPE_CHECKING:
    import pandas as pd

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
        """Measure retransmissions and congestion per node and the transfer engine's failures;
        decide sustained loss; explain it."""
        f = ctx.evidence
        has_counters = f.has_node_column("retransmits") or f.has_node_column("cnp")
        retry_exceeded = f.event_count(S.EV_RDMA_RETRY_EXCEEDED)
        slice_failed = f.event_count(S.EV_RDMA_SLICE_FAILED)
        # A Mooncake log without failure lines is evidence too: failures log at ERROR level.
        has_logs = bool(retry_exceeded or slice_failed or any(
            "mooncake" in s.format for s in ctx.dataset.sources))
        if not has_counters and not has_logs:
            return [self.inconclusive()]
        m = _Fabric(nodes=_judge_nodes(f) if has_counters and len(f.nodes) else None,
                    retry_exceeded=retry_exceeded, slice_failed=slice_failed,
                    available=int(has_counters) * 2 + int(has_logs))
        if not (m.bad or m.congested or m.logs_bad or m.burst):
            return []
        return [self._explain(f, m)]

    def _explain(self, f: ClusterEvidence, m: _Fabric) -> Finding:
        """The finding: per-node rates, log failures, transfer latency; severity and words."""
        evidence = self._node_evidence(f, m.nodes) + self._log_evidence(f, m)
        if m.bad or m.congested or m.logs_bad:
            severity = Severity.WARNING
            if m.worst_rate >= RETRANS_PER_1K_CRITICAL or \
                    m.retry_exceeded + m.slice_failed >= EVENTS_CRITICAL:
                severity = Severity.CRITICAL
        else:
            severity = Severity.INFO
        agree = sum(bool(x) for x in (m.bad, m.congested, m.logs_bad))
        confidence = evidence_confidence(max(agree, 1), max(m.available, 1))
        if severity is Severity.INFO:
            confidence = min(confidence, CONFIDENCE_UNOBSERVED)
        affected_nodes = sorted(set(m.bad) | set(m.congested) | set(m.burst))
        instances = sorted(set(f.instances_on(affected_nodes))
                           | set(f.event_instances(S.EV_RDMA_RETRY_EXCEEDED))
                           | set(f.event_instances(S.EV_RDMA_SLICE_FAILED)))
        self._transfer_evidence(f, instances, evidence)
        return self.finding(severity, confidence,
                            self._summary(m.bad, m.burst, m.congested, m.worst_rate,
                                          m.retry_exceeded, m.slice_failed),
                            instances=instances, evidence=evidence, next_steps=(
            "Check PFC/ECN end to end: RoCE traffic in a lossless class with matching "
            "DSCP/priority on NICs and switches.",
            "On the named nodes look for a bad cable or transceiver (symbol errors, link "
            "downed, port receive errors) and for switch buffer drops or pause storms.",
            "Tune DCQCN and reduce incast (spread decode instances over more leaf switches).",
        ))

    @staticmethod
    def _node_evidence(f: ClusterEvidence, nodes: pd.DataFrame | None) -> list[Evidence]:
        """Per flagged node: retransmission rate (per packet, per GB, share of bins), CNPs."""
        out: list[Evidence] = []
        if nodes is None:
            return out
        top = f.nodes["retransmit_top_signal"] if f.has_node_column("retransmit_top_signal") \
            else None
        sub = nodes[nodes["flagged"] | nodes["congested"]]
        for node, row in zip(sub.index.tolist(), sub.to_dict("records"), strict=True):
            if row["flagged"]:
                measured = bool(f.nodes.loc[node, "rdma_packets_measured"])
                out.append(ev(f"retransmissions per 1000 RDMA packets on {node}",
                              float(row["per_1k"]), "per 1k packets",
                              instances=f.instances_on([str(node)]), window=whole(f),
                              baseline=RETRANS_PER_1K_WARN,
                              source=f"{int(row['retrans'])} events, mostly "
                                     f"{top[node] if top is not None else ''}"
                                     + ("" if measured else "; packets estimated from bytes")))
                if np.isfinite(row["per_gb"]):
                    out.append(ev(f"retransmissions per GB on {node}", float(row["per_gb"]),
                                  "per GB", window=whole(f),
                                  source="retransmissions / RDMA bytes"))
                if np.isfinite(row["share"]):
                    out.append(ev(f"bins with retransmissions on {node}", 100 * row["share"],
                                  "%", window=whole(f), baseline=100 * SUSTAINED_BIN_SHARE))
            if row["congested"]:
                out.append(ev(f"congestion notifications per 1000 packets on {node}",
                              float(row["cnp_1k"]), "per 1k packets", window=whole(f),
                              baseline=CNP_PER_1K_WARN,
                              source="CNPs handled/sent + ECN-marked packets"))
        return out

    @staticmethod
    def _log_evidence(f: ClusterEvidence, m: _Fabric) -> list[Evidence]:
        """Retry exhaustion and failed slices from the transfer engine's logs."""
        out: list[Evidence] = []
        if m.retry_exceeded:
            out.append(ev("transport retry counter exceeded (log lines)", m.retry_exceeded,
                          "events", instances=f.event_instances(S.EV_RDMA_RETRY_EXCEEDED),
                          window=whole(f), source="Mooncake transfer engine / ibverbs"))
        if m.slice_failed:
            out.append(ev("failed RDMA transfer slices (log lines)", m.slice_failed, "events",
                          instances=f.event_instances(S.EV_RDMA_SLICE_FAILED), window=whole(f),
                          source="Mooncake worker_pool"))
        return out

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


def _judge_nodes(f: ClusterEvidence) -> pd.DataFrame:
    """Per node: retransmissions and CNPs per 1000 packets, per GB, the share of bins with
    retransmissions, and the verdicts ``flagged`` (over the rate and count), ``sustained``
    (in enough bins; unknown counts as sustained) and ``congested``."""
    import pandas as pd

    nodes = f.nodes
    packets = column(nodes, "rdma_packets", "nodes")
    rdma_bytes = column(nodes, "rdma_bytes", "nodes")
    retrans = column(nodes, "retransmits", "nodes")
    measured = column(nodes, "measured_bins", "nodes")
    with np.errstate(all="ignore"):
        per_1k = 1000.0 * retrans / packets.where(packets > 0)
        share = column(nodes, "retransmit_bins", "nodes") / measured.where(measured != 0)
        out = pd.DataFrame({
            "retrans": retrans, "per_1k": per_1k, "share": share,
            "cnp_1k": 1000.0 * column(nodes, "cnp", "nodes") / packets.where(packets > 0),
            "per_gb": retrans / (rdma_bytes / 1e9).where(rdma_bytes > 0)})
    out["flagged"] = np.isfinite(per_1k) & (per_1k >= RETRANS_PER_1K_WARN) & (
        retrans >= MIN_RETRANSMITS)
    out["sustained"] = ~np.isfinite(share) | (share >= SUSTAINED_BIN_SHARE)
    out["congested"] = np.isfinite(out["cnp_1k"]) & (out["cnp_1k"] >= CNP_PER_1K_WARN)
    return out


@dataclass(frozen=True)
class _Fabric:
    """What PD401 measures: per-node verdicts and the transfer engine's failure lines."""

    nodes: pd.DataFrame | None  # ``_judge_nodes``, None without node counters
    retry_exceeded: int
    slice_failed: int
    available: int  # evidence channels the inputs carried (counters count twice)

    def _nodes_where(self, mask: str, sustained: bool | None = None) -> list[str]:
        if self.nodes is None:
            return []
        keep = self.nodes[mask]
        if sustained is not None:
            keep = keep & (self.nodes["sustained"] == sustained)
        return [str(n) for n in self.nodes.index[keep.to_numpy(dtype=bool)]]

    @property
    def bad(self) -> list[str]:
        """Nodes with sustained retransmissions over the warning rate."""
        return self._nodes_where("flagged", sustained=True)

    @property
    def burst(self) -> list[str]:
        """Nodes over the rate in one burst only."""
        return self._nodes_where("flagged", sustained=False)

    @property
    def congested(self) -> list[str]:
        return self._nodes_where("congested")

    @property
    def worst_rate(self) -> float:
        if self.nodes is None or not self.bad:
            return 0.0
        return max(0.0, float(self.nodes.loc[self.nodes.index.isin(self.bad), "per_1k"].max()))

    @property
    def logs_bad(self) -> bool:
        return self.retry_exceeded >= 1 or self.slice_failed >= SLICE_FAILURES_MIN
