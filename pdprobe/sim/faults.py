"""Turn the configured faults into the effective parameters the engine runs with.

Each fault changes model parameters only; the symptoms (queues, counters, log lines) then
emerge from the simulation, so a capture with a fault looks like a real cluster with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from pdprobe.sim.config import SimConfig

# Go-back-N: one lost packet makes the sender resend the packets in flight after it; with a
# window of a few packets the goodput falls roughly as 1 / (1 + 4 * loss rate).
RETX_AMPLIFICATION: Final = 4.0
# Ack timeouts happen when the tail of a burst is lost (no later packet triggers a NAK): about
# one per 256 MiB sent at a 100 % loss-rate equivalent, scaled by the actual rate.
TIMEOUT_SCALE_BYTES: Final = 256.0 * 2**20
# A timed-out slice that also exhausts its retry budget: Mooncake logs "Process failed for
# slice ... transport retry counter exceeded" and redispatches it.
SLICE_FAIL_SHARE: Final = 0.05
SLICE_RETRY_COUNT: Final = 7  # ibverbs retry_cnt (the maximum), each waiting one ack timeout
# Of those slice failures, the share whose redispatch also fails: the whole KV transfer fails.
TRANSFER_FAIL_SHARE: Final = 0.2
# A healthy fabric still shows a trickle of retransmissions (link flaps, rare drops).
HEALTHY_RETX_RATE: Final = 2e-7
TCP_BASE_LATENCY_FACTOR: Final = 3.0  # TCP handshakes and kernel copies add setup time
# kv-transfer-failures with a bad NIC: transfers of the other prefill instances still fail at
# this fraction of the bad instance's rate (background: a real fabric is never spotless), so
# the bad NIC stands out among several instead of being the only one named.
BACKGROUND_FAIL_SHARE: Final = 0.05


@dataclass(frozen=True)
class Effective:
    """Model parameters after applying every fault."""

    transport: str  # rdma | tcp
    decode_kv_tokens: int
    prefill_kv_tokens: int
    link_factor: float  # multiplies every node's usable KV bandwidth
    background_share: float  # of each link taken by other traffic (contended-link)
    retx_rate: float  # share of RDMA packets retransmitted
    ack_timeout_s: float
    base_latency_s: float
    stragglers: dict[tuple[str, int], float] = field(default_factory=dict)
    skew_share: float = 0.0
    skew_targets: int = 0
    ignore_kv_hits: bool = False
    xfer_fail_rate: float = 0.0  # kv-transfer-failures: share of transfers that fail
    xfer_fail_nic: int = -1  # the bad NIC (mlx5_N) of the first prefill instance, -1 = none
    local_prefill_share: float = 0.0  # not-disaggregated: requests decode prefills itself

    def speed_factor(self, role: str, role_index: int) -> float:
        """How much slower one instance runs (1.0 unless the straggler fault names it)."""
        return self.stragglers.get((role, role_index), 1.0)


def effective(config: SimConfig) -> Effective:
    """The configured faults resolved into the numbers the engine uses (KV capacity, link bandwidth,
    retransmit rate, routing skew, stragglers)."""
    p = config.profile
    small = config.fault("small-kv")
    contended = config.fault("contended-link")
    retx = config.fault("rdma-retransmits")
    skew = config.fault("routing-skew")
    failures = config.fault("kv-transfer-failures")
    local = config.fault("not-disaggregated")
    transport = config.transport
    link_factor = 1.0  # thin-link lowers the nodes' line rate itself (cluster.build_layout)
    background = float(contended.get("share")) if contended else 0.0
    retx_rate = float(retx.get("rate")) if retx else (HEALTHY_RETX_RATE if transport == "rdma" else 0.0)
    if transport == "rdma":
        link_factor /= 1.0 + RETX_AMPLIFICATION * retx_rate
    else:
        link_factor *= p.tcp_bytes_per_s / p.link_bytes_per_s
    base = p.link_base_latency_s * (TCP_BASE_LATENCY_FACTOR if transport == "tcp" else 1.0)
    return Effective(
        transport=transport,
        decode_kv_tokens=int(p.kv_capacity_tokens * (float(small.get("fraction")) if small else 1.0)),
        prefill_kv_tokens=p.kv_capacity_tokens,
        link_factor=link_factor,
        background_share=background,
        retx_rate=retx_rate,
        ack_timeout_s=float(retx.get("ack_timeout_s")) if retx else 0.134,
        base_latency_s=base,
        stragglers={(str(f.get("role")), int(f.get("index"))): float(f.get("factor"))
                    for f in config.faults_of("straggler")},
        skew_share=float(skew.get("share")) if skew else 0.0,
        skew_targets=int(skew.get("targets")) if skew else 0,
        ignore_kv_hits=config.fault("ignore-kv-hits") is not None,
        xfer_fail_rate=float(failures.get("rate")) if failures else 0.0,
        xfer_fail_nic=_nic_index(str(failures.get("nic"))) if failures else -1,
        local_prefill_share=float(local.get("share")) if local else 0.0,
    )


def _nic_index(name: str) -> int:
    """``mlx5_3`` -> 3; "" (no NIC given) -> -1."""
    digits = name.rsplit("_", 1)[-1]
    return int(digits) if name and digits.isdigit() else -1
