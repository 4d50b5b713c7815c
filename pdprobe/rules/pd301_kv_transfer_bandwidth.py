"""PD301: KV transfer demand near the link bandwidth (kv-transfer-bandwidth)."""

from __future__ import annotations

from typing import Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.base import CapacityResult
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.rules.base import Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    column,
    ev,
    evidence_confidence,
    finite,
    names,
    pct,
    rate_bytes,
    role_rows,
    secs,
    slo_collapsed,
    whole,
)
from pdprobe.rules.thresholds import DECODE_KV_PRESSURE

# Link utilisation (p90 over bins of the busier direction / active port rate): RDMA goodput
# tops out around 90 % of line rate, and queueing delay climbs steeply past ~70 %.
UTIL_WARN: Final = 0.7
UTIL_CRITICAL: Final = 0.9
# Share of TTFT spent in KV transfer (median per request) that makes transfer a bottleneck
# worth reporting on its own (0.5: half of the first-token time is moving KV).
SHARE_WARN: Final = 0.5
# ... and a share that counts as supporting evidence next to congestion or capacity.
SHARE_SUPPORT: Final = 0.3
# Transfer latency rising with transfer demand: Spearman rho and p between per-bin demand and
# median latency, and the busiest third of bins at least this much slower than the quietest.
CONGESTION_RHO: Final = 0.5
CONGESTION_P: Final = 0.01
CONGESTION_SLOWDOWN: Final = 1.5
# Achieved per-transfer bandwidth below this share of the link: the link is not what is slow
# (hand-over overhead, small descriptors, staging), though decode still waits for KV.
ACHIEVED_LOW_SHARE: Final = 0.2
# The capacity model's transfer demand at this share of the usable bandwidth counts.
CAPACITY_TRANSFER_SHARE: Final = 0.8
# Decode at or beyond its capacity at the deployed counts (the capacity model's utilisation):
# KV handed over to it waits for a slot, so transfer time and busy decode-side links are the
# decode pool's shortage showing, not the fabric's.
DECODE_OVERLOADED: Final = 1.0


def decode_explains_transfer(cap: CapacityResult | None,
                             quoted: CapacityResult | None = None) -> str | None:
    """Why slow or busy KV transfer is the decode pool being short, or None when it is not.

    Only when the capacity model puts decode at or beyond its capacity at the deployed counts,
    in two ways: the links are below ``CAPACITY_TRANSFER_SHARE`` of their usable bandwidth (KV
    waits for decode to admit it, so the measured transfer time holds that wait); or they are
    above it because every transfer converges on fewer decode than prefill instances and, at
    the recommended counts (more decode), the per-node demand falls below that share.
    Judged on ``cap`` (the model as built); the recommended count and its transfer demand
    said as ``quoted`` has them (the report's capacity section, RuleContext.quoted).
    """
    if cap is None or cap.binding_basis != "deployed counts":
        return None
    raw = (cap.deployed_decode_utilization, cap.deployed_transfer_utilization,
           cap.deployed_prefill, cap.deployed_decode, cap.recommended_decode)
    if not all(isinstance(v, (int, float)) for v in raw):
        return None
    ud, ux = float(raw[0]), float(raw[1])  # type: ignore[arg-type]
    dep_p, dep_d, rec_d = int(raw[2]), int(raw[3]), int(raw[4])  # type: ignore[arg-type]
    rec_x = cap.transfer_utilization
    if ud < DECODE_OVERLOADED:
        return None  # decode keeps up: the hand-off is the fabric's (or the connector's)
    if ux < CAPACITY_TRANSFER_SHARE:
        return (f"decode runs at {pct(ud)} of its capacity at the deployed {dep_d} instances "
                f"while the links carry {pct(ux)} of their usable bandwidth: KV waits for "
                "decode to admit it")
    if dep_d < dep_p and rec_d > dep_d and isinstance(rec_x, float) \
            and ux >= CAPACITY_TRANSFER_SHARE > rec_x:
        if quoted is not None and isinstance(quoted.recommended_decode, int) and \
                isinstance(quoted.transfer_utilization, float):
            rec_d, rec_x = quoted.recommended_decode, quoted.transfer_utilization
        return (f"every transfer converges on the {dep_d} decode instances' links; at the "
                f"recommended {rec_d} decode the per-node transfer demand falls to {pct(rec_x)} "
                "of the usable bandwidth")
    return None


class KvTransferBandwidth(BaseRule):
    """KV cache transfer is near the usable link bandwidth: decode waits for KV to arrive

    What it means: moving prefilled KV cache from prefill to decode instances takes a large
    part of the time to first token, and that time grows with the transfer volume: the
    network path between the pools (RDMA NICs, NVLink, PCIe staging) is close to saturation.

    Why it matters in a disaggregated deployment: disaggregation pays for itself only if the
    KV hand-off is cheap compared with a prefill. KV volume grows with prompt length times
    KV bytes per token (layers x KV heads x head size, replicated when tensor parallelism
    exceeds the KV heads), so long prompts or a large model can saturate even 400 Gb/s links.
    More prefill or decode instances do not help; placement, link count and KV size do.

    Evidence it uses: link utilisation (p90 over bins of the RDMA bytes rate in the busier
    direction over the active ports' rate) >= UTIL_WARN = 70 % (critical at 90 %); the median
    request spending >= SHARE_WARN = 50 % of its TTFT in KV transfer; transfer time per GB
    (per transfer when bytes are unknown) rising with demand (Spearman rho >= 0.5, p < 0.01,
    busiest third of bins >= 1.5x slower than the quietest); the capacity model's transfer demand >= 80 % of the usable bandwidth. When the
    transfer is slow but the achieved per-transfer bandwidth is under 20 % of the link, the
    finding says so: then hand-over overhead (small blocks, staging, per-request setup), not
    the link, is the bottleneck. When decode KV usage (p90) is at 85 % or more, measured
    transfer times include waiting for decode memory, so only link utilisation counts; with
    neither the link rate nor decode KV usage known, a long hand-off alone is info. When the
    capacity model explains it by too few decode instances (decode at or beyond its capacity,
    with the links under 80 % of their usable bandwidth, or busier only because every transfer
    converges on fewer decode than prefill instances and the recommended decode count brings
    the per-node demand under 80 %), the finding is info and says so:
    decode-bound leads. Retransmissions (PD401) and TCP fallback (PD402) are
    checked separately and, when present, are reported as the root of this symptom.

    What to do: place prefill and decode instances so KV stays on NVLink or the fastest rail;
    use all NICs (one NIC per GPU, rail-optimised); shrink KV (FP8 KV cache, MLA models);
    raise the KV block size (16-token blocks fragment transfers into small descriptors); with
    SGLang/Mooncake check the transfer thread count; with vLLM NIXL check the side-channel
    hand-over time against the transfer time.
    """

    code = "PD301"
    name = "kv-transfer-bandwidth"
    cause = "kv-transfer-bandwidth"
    component = "kv-connector"
    inputs = Inputs(
        needs=(
        "RDMA port byte counters with the link rate (node_exporter infiniband collector)",
        "per-request kv_transfer_s (with ttft_s / kv_bytes), or KV-transfer histograms / "
        "KV transfer log lines",
        "a capacity estimate of transfer demand and bandwidth",
        ),
        evidence=("nodes.link_bytes_per_s", "nodes.rdma_tx_p90_bytes_per_s", "nodes.rdma_rx_p90_bytes_per_s",
                  "cluster.kv_bytes_per_s", "instances.g_kv_usage_p90", "transfer", "capacity",
                  "slo"),
        live=(Live("RDMA port byte counters", (S.RDMA_TX_BYTES_TOTAL, S.RDMA_RX_BYTES_TOTAL)),
              Live("link rate", (S.LINK_RATE_BYTES_PER_S,)),
              Live("KV-transfer histograms", (S.KV_TRANSFER_S, S.KV_TRANSFER_BYTES,
                                              S.KV_TRANSFER_BYTES_PER_S,
                                              S.KV_TRANSFER_LATENCY_S_GAUGE))),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        f = ctx.evidence
        t = f.transfer
        util, util_nodes, link = self._utilisation(f)
        cap = f.capacity
        cap_share = None
        if cap is not None and isinstance(cap.transfer_required_bytes_per_s, float) and \
                isinstance(cap.transfer_capacity_bytes_per_s, float) and \
                cap.transfer_capacity_bytes_per_s > 0:
            cap_share = cap.transfer_required_bytes_per_s / cap.transfer_capacity_bytes_per_s
        congestion_known = t.demand_vs_latency_rho is not None
        if util is None and t.share_of_ttft_p50 is None and t.latency_p50_s is None and \
                cap_share is None and not congestion_known:
            return [self.inconclusive()]
        available = sum(x is not None for x in (util, t.share_of_ttft_p50, cap_share,
                                                t.demand_vs_latency_rho))
        evidence = []
        agree = 0
        util_high = util is not None and util >= UTIL_WARN
        if util is not None:
            evidence.append(ev("KV link utilisation p90 (busiest node)", 100 * util, "%",
                               instances=self._instances_on(f, util_nodes), window=whole(f),
                               baseline=100 * UTIL_WARN,
                               source="RDMA port bytes / active link rate"))
            if util_high:
                agree += 1
        share = t.share_of_ttft_p50
        share_high = share is not None and share >= SHARE_WARN
        share_support = share is not None and share >= SHARE_SUPPORT
        if share is not None:
            evidence.append(ev("median share of TTFT spent in KV transfer", 100 * share, "%",
                               window=whole(f), baseline=100 * SHARE_SUPPORT,
                               source="kv_transfer_s / ttft_s in request records"))
        congested = bool(
            congestion_known and t.demand_vs_latency_rho is not None
            and t.demand_vs_latency_rho >= CONGESTION_RHO
            and (t.demand_vs_latency_p or 1.0) < CONGESTION_P
            and t.latency_low_demand_s and t.latency_high_demand_s
            and t.latency_high_demand_s >= CONGESTION_SLOWDOWN * t.latency_low_demand_s)
        if congested:
            agree += 1
            evidence.append(ev("median KV-transfer time" + (" per GB" if t.latency_per_gb
                                                             else "")
                               + " in the busiest third of bins",
                               t.latency_high_demand_s or 0.0, "s", window=whole(f),
                               baseline=t.latency_low_demand_s,
                               source="kv_transfer_s vs kv_bytes per bin (Spearman rho "
                                      f"{t.demand_vs_latency_rho:.2f})"))
        cap_high = cap_share is not None and cap_share >= CAPACITY_TRANSFER_SHARE
        if cap_share is not None and cap is not None:
            evidence.append(ev("transfer demand / usable bandwidth (capacity model)",
                               100 * cap_share, "%", window=whole(f),
                               baseline=100 * CAPACITY_TRANSFER_SHARE,
                               source=f"capacity model ({cap.model_source})"))
            if cap_high:
                agree += 1
        if cap is not None and cap.binding == "transfer":
            cap_high = True
        if share_support and (util_high or congested or cap_high):
            agree += 1
        if t.latency_p50_s is not None:
            evidence.append(ev("KV-transfer latency p50", t.latency_p50_s, "s", window=whole(f),
                               baseline=None if t.latency_p90_s is None
                               else f"p90 {secs(t.latency_p90_s)}",
                               source=t.latency_source))
        achieved_share = None
        if t.achieved_bytes_per_s is not None:
            evidence.append(ev("achieved bandwidth per transfer", t.achieved_bytes_per_s / 1e9,
                               "GB/s", window=whole(f),
                               baseline=None if link is None else link / 1e9,
                               source=t.achieved_source))
            if link:
                achieved_share = t.achieved_bytes_per_s / link

        decode_pressure = self._decode_pressure(f)
        if decode_pressure:
            # KV waiting for decode memory inflates the measured transfer time: only the link
            # itself (utilisation) is evidence then; decode starvation is PD202's finding.
            evidence.append(ev("decode KV usage p90 (transfer times include waiting for decode "
                               "memory)", 100 * decode_pressure, "%", window=whole(f),
                               baseline=100 * DECODE_KV_PRESSURE,
                               source="kv_usage_ratio on decode instances"))
            share_high = share_support = congested = False
        strong = util_high or (share_support and (congested or cap_high)) or \
            (congested and cap_high) or share_high
        # A large transfer share alone (< SHARE_WARN) is normal for long prompts: not a finding.
        weak = (cap_high or congested) and not strong
        if not strong and not weak:
            return []
        severity = Severity.WARNING if strong else Severity.INFO
        att = f.slo.ttft_attainment
        if (util is not None and util >= UTIL_CRITICAL) or (share_high and slo_collapsed(att)):
            severity = Severity.CRITICAL
        confidence = evidence_confidence(max(agree, 1), max(available, 1))
        if not strong:
            confidence = min(confidence, 0.4)
        decode_short = decode_explains_transfer(cap, ctx.quoted)
        if decode_short:
            # The links are busy (or the hand-off slow) because decode is short: that is
            # decode-bound's finding; say what was seen, as information.
            severity, confidence = Severity.INFO, min(confidence, 0.4)
        overhead = achieved_share is not None and achieved_share < ACHIEVED_LOW_SHARE and \
            not util_high and not decode_pressure
        # Without the link rate and without decode KV usage, a long hand-off may be the link or
        # KV waiting for decode memory: say so, and be less sure.
        blind = link is None and not column(role_rows(f, "decode"), "g_kv_usage_p90").notna().any()
        if blind:
            confidence = min(confidence, 0.45)
            if not (util_high or congested or cap_high):
                severity = Severity.INFO  # a long hand-off, cause undetermined: say less
        instances = self._instances_on(f, util_nodes) if util_nodes else \
            list(role_rows(f, "prefill").index.astype(str)) + list(role_rows(f, "decode").index.astype(str))
        summary = self._summary(util, util_nodes, share, congested, overhead,
                                t.achieved_bytes_per_s, link, blind)
        steps = self._next_steps(overhead)
        if decode_short:
            summary += f"; explained by too few decode instances: {decode_short} (decode-bound)"
            steps.insert(0, "Add decode instances first (see the recommendation): the KV "
                            "hand-off waits for decode, not for the links.")
        return [self.finding(severity, confidence, summary, instances=instances,
                             evidence=evidence, next_steps=steps)]

    @staticmethod
    def _decode_pressure(f: ClusterEvidence) -> float:
        """Decode KV usage p90 (median over decode instances) when at DECODE_KV_PRESSURE or
        above, else 0."""
        kv = column(role_rows(f, "decode"), "g_kv_usage_p90")
        if not kv.notna().any():
            return 0.0
        level = float(kv.median())
        return level if level >= DECODE_KV_PRESSURE else 0.0

    @staticmethod
    def _utilisation(f: ClusterEvidence) -> tuple[float | None, list[str], float | None]:
        """Peak link utilisation, the nodes at or above UTIL_WARN, and the per-node link rate."""
        nodes = f.nodes
        link_col = column(nodes, "link_bytes_per_s", "nodes")
        link = float(link_col[link_col > 0].median()) if (link_col > 0).any() else None
        cap = f.capacity
        if link is None and cap is not None and isinstance(cap.transfer_capacity_bytes_per_s,
                                                              float):
            link = cap.transfer_capacity_bytes_per_s
        if not len(nodes) or link is None:
            # Request records: cluster demand over the prefill nodes' links.
            demand = f.role_series("kv_bytes_per_s")
            n_nodes = len(set(role_rows(f, "prefill")["node"].dropna())) or None
            if demand is None or link is None or not n_nodes:
                return None, [], link
            p90 = float(np.nanquantile(demand.to_numpy(dtype="float64"), 0.9))
            return p90 / (n_nodes * link), [], link
        tx = column(nodes, "rdma_tx_p90_bytes_per_s", "nodes")
        rx = column(nodes, "rdma_rx_p90_bytes_per_s", "nodes")
        peak = np.fmax(tx.to_numpy(), rx.to_numpy())
        rate = link_col.where(link_col > 0).to_numpy()
        with np.errstate(all="ignore"):
            util = peak / rate
        if not np.isfinite(util).any():
            return None, [], link
        busy = [str(n) for n, u in zip(nodes.index, util, strict=True)
                if finite(u) and u >= UTIL_WARN]
        return float(np.nanmax(util)), busy, link

    @staticmethod
    def _instances_on(f: ClusterEvidence, nodes: list[str]) -> list[str]:
        inst = f.instances
        return sorted(inst.index[inst["node"].isin(nodes)].astype(str))

    @staticmethod
    def _summary(util: float | None, nodes: list[str], share: float | None, congested: bool,
                 overhead: bool, achieved: float | None, link: float | None,
                 blind: bool) -> str:
        if overhead and achieved is not None and link is not None:
            return (f"KV transfer is slow although the link is not busy: transfers achieve "
                    f"{rate_bytes(achieved)} of {rate_bytes(link)}"
                    + (f" and take {pct(share)} of TTFT" if share is not None else "")
                    + "; hand-over overhead or fragmentation, not bandwidth, holds decode back")
        parts = []
        if util is not None and util >= UTIL_WARN:
            parts.append(f"the KV links run at {pct(util)} of line rate"
                         + (f" on {names(nodes)}" if nodes else ""))
        if share is not None and share >= SHARE_SUPPORT:
            parts.append(f"KV transfer takes {pct(share)} of the time to first token")
        if congested:
            parts.append("transfer latency rises with transfer volume")
        detail = " and ".join(parts) if parts else "the capacity model puts transfer demand " \
                                                    "near the usable bandwidth"
        if blind:
            return (f"The KV hand-off holds decode back: {detail}; without link-rate or decode "
                    f"KV-usage metrics this cannot be split into link bandwidth and KV waiting "
                    f"for decode memory")
        return f"KV transfer is near the usable bandwidth: {detail}; decode waits for KV"

    @staticmethod
    def _next_steps(overhead: bool) -> list[str]:
        steps = []
        if overhead:
            steps.append("Compare the hand-over time with the wire time: raise the KV block "
                         "size (16-token blocks fragment transfers), check connector staging "
                         "and per-request setup (vLLM NIXL side channel, Mooncake batch size).")
        steps += [
            "Keep KV on the fastest path: co-locate prefill/decode pairs on one NVLink domain "
            "or rail, and use every NIC (one per GPU, rail-optimised).",
            "Shrink the KV volume: FP8 KV cache, or a model with MLA / fewer KV heads; avoid "
            "tensor parallelism above the KV-head count, which replicates KV.",
            "Check the fabric for retransmissions and TCP fallback (PD401, PD402).",
        ]
        return steps
