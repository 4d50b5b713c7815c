"""node_exporter series per node: InfiniBand/RoCE port and hw counters, and the TCP netdev.

Bytes come from the simulation (each transfer credited to the sending and receiving node as it
moves), spread over the node's RDMA devices. Retransmission-type counters follow the configured
loss rate (Poisson draws per scrape interval, so they are noisy and monotonic), congestion
counters follow background traffic. With TCP transport there are no ``node_infiniband_*``
series at all, and the KV bytes show up in ``node_network_*_bytes_total`` of ``eth0``.

Counter signatures of RDMA loss (mlx5 semantics, docs/inputs/metrics.md): the sender sees
NAK sequence errors (``packet_seq_err``), adaptive retransmissions and ack timeouts; the
receiver sees out-of-sequence packets and duplicate requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.config import SCRAPE_INTERVAL_S
from pdprobe.sim.engine import NODE_FIELDS, SimResult
from pdprobe.sim.writers.common import (
    family_text,
    label_text,
    open_out,
    out_name,
    scrape_offsets_s,
)

if TYPE_CHECKING:
    import numpy.typing as npt

RDMA_MTU_BYTES: Final = 4096  # RoCE/IB payload per packet
ACKS_PER_PACKET: Final = 0.25  # coalesced ACKs and CNPs flowing back, per data packet
# How a lost packet shows up in each counter, per retransmitted packet (go-back-N).
OUT_OF_SEQUENCE_PER_RETX: Final = 0.5  # receiver: later packets arrive after the gap
DUPLICATE_PER_RETX: Final = 0.2  # receiver: resent packets it had already executed
SEQ_ERR_PER_RETX: Final = 0.3  # sender: NAK sequence errors received
ADP_RETRANS_PER_RETX: Final = 0.8  # sender: adaptive retransmissions (ConnectX-6 Dx+)
ADP_TIMEOUT_PER_TIMEOUT: Final = 0.5
# Congestion marking: ECN-marked packets per packet sent while background traffic shares the
# link, scaled by that share; a CNP goes back per few marked packets.
ECN_PER_PACKET_AT_FULL_SHARE: Final = 0.02
CNP_PER_ECN: Final = 0.25
BASELINE_MGMT_BYTES_PER_S: Final = 2e6  # ssh, exporters, logs on the management NIC
PORT_STATE_ACTIVE: Final = 4


def write_node_metrics(result: SimResult, out_dir: Path, compress: bool) -> Path:
    """``node_metrics.om``: node_exporter series of every node, ``# EOF`` at the end."""
    cfg = result.config
    rng = np.random.default_rng([cfg.seed, 21])
    idx = np.flatnonzero(np.isclose(np.mod(result.tick_s, SCRAPE_INTERVAL_S), 0.0))
    t_s = result.tick_s[idx]
    nodes = result.layout.nodes
    offsets = scrape_offsets_s([n.exporter_instance for n in nodes], cfg.seed + 1)
    node_ts = cfg.start_ts + t_s[None, :] + offsets[:, None]  # [node, scrape]
    state = result.node[idx]  # [scrape, node, field]
    tx = state[:, :, NODE_FIELDS.index("tx_bytes")].T  # [node, scrape]
    rx = state[:, :, NODE_FIELDS.index("rx_bytes")].T
    timeouts = state[:, :, NODE_FIELDS.index("ack_timeouts")].T
    dt = np.diff(t_s, prepend=t_s[0] - SCRAPE_INTERVAL_S if t_s.size else 0.0)
    parts: list[str] = []
    mgmt = np.cumsum(BASELINE_MGMT_BYTES_PER_S * dt[None, :]
                     * rng.uniform(0.7, 1.3, (len(nodes), t_s.size)), axis=1)
    tcp = result.eff.transport == "tcp"
    eth_labels = [label_text([("device", "eth0"), ("instance", n.exporter_instance),
                              ("job", "node")]) for n in nodes]
    parts.append(family_text(
        "node_network_transmit_bytes_total", "counter",
        "Network device statistic transmit_bytes.",
        [f"node_network_transmit_bytes_total{lab}" for lab in eth_labels],
        np.round(mgmt + (tx if tcp else 0.0)), node_ts, np.ones_like(node_ts, dtype=bool)))
    parts.append(family_text(
        "node_network_receive_bytes_total", "counter", "Network device statistic receive_bytes.",
        [f"node_network_receive_bytes_total{lab}" for lab in eth_labels],
        np.round(mgmt * 1.1 + (rx if tcp else 0.0)), node_ts, np.ones_like(node_ts, dtype=bool)))
    if not tcp:
        parts += _infiniband(result, rng, t_s, dt, node_ts, tx, rx, timeouts)
    path = out_dir / "node_metrics.om"
    with open_out(path, compress) as fh:
        for part in parts:
            fh.write(part)
        fh.write("# EOF\n")
    return out_name(path, compress)


def _infiniband(result: SimResult, rng: np.random.Generator, t_s: npt.NDArray[np.float64],
                dt: npt.NDArray[np.float64], node_ts: npt.NDArray[np.float64],
                tx: npt.NDArray[np.float64], rx: npt.NDArray[np.float64],
                timeouts: npt.NDArray[np.float64]) -> list[str]:
    cfg = result.config
    eff = result.eff
    nodes = result.layout.nodes
    # one row per (node, device)
    dev_node = np.concatenate([np.full(n.devices, i) for i, n in enumerate(nodes)])
    dev_name = np.concatenate([np.arange(n.devices) for n in nodes])
    n_dev = np.array([n.devices for n in nodes])[dev_node]
    # KV traffic spreads over a node's NICs, not perfectly evenly (QP-to-NIC hashing)
    weights = rng.uniform(0.85, 1.15, dev_node.size)
    norm = np.bincount(dev_node, weights=weights)[dev_node]
    share = (weights / norm)[:, None]
    line = np.array([n.line_rate_bytes_per_s for n in nodes])[dev_node]
    ts = node_ts[dev_node]
    n_t = t_s.size
    background = eff.background_share
    bg_rate = background * line * 0.8  # other tenants' traffic on a contended link
    bg = np.cumsum(bg_rate[:, None] * dt[None, :] * rng.uniform(0.8, 1.2, (dev_node.size, n_t)),
                   axis=1)
    dev_tx = tx[dev_node] * share + bg
    dev_rx = rx[dev_node] * share + bg * 0.9
    pkts_tx = dev_tx / RDMA_MTU_BYTES
    pkts_rx = dev_rx / RDMA_MTU_BYTES

    def noisy(expected_cum: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """A counter whose increments are Poisson around the expected ones."""
        inc = np.diff(expected_cum, axis=1, prepend=0.0)
        return np.cumsum(rng.poisson(np.clip(inc, 0, None)), axis=1).astype(np.float64)

    retx_tx = pkts_tx * eff.retx_rate
    retx_rx = pkts_rx * eff.retx_rate
    dev_timeouts = timeouts[dev_node] * share
    ecn = pkts_rx * ECN_PER_PACKET_AT_FULL_SHARE * background
    hw = {
        "out_of_sequence_packets_received_total": noisy(retx_rx * OUT_OF_SEQUENCE_PER_RETX),
        "duplicate_requests_packets_total": noisy(retx_rx * DUPLICATE_PER_RETX),
        "packet_sequence_errors_total": noisy(retx_tx * SEQ_ERR_PER_RETX),
        "implied_nak_seq_errors_total": noisy(retx_tx * (SEQ_ERR_PER_RETX if cfg.kv_connector == "nixl" else 0.0)),
        "local_ack_timeout_errors_total": noisy(dev_timeouts),
        "roce_adp_retransmits_total": noisy(retx_tx * ADP_RETRANS_PER_RETX),
        "roce_adp_retransmits_timeout_total": noisy(dev_timeouts * ADP_TIMEOUT_PER_TIMEOUT),
        "rnr_nak_retry_packets_received_total": np.zeros_like(dev_tx),
        "out_of_buffer_drops_total": np.zeros_like(dev_tx),
        "np_ecn_marked_roce_packets_received_total": noisy(ecn),
        "np_cnp_packets_sent_total": noisy(ecn * CNP_PER_ECN),
        "rp_cnp_packets_handled_total": noisy(pkts_tx * ECN_PER_PACKET_AT_FULL_SHARE * background * CNP_PER_ECN),
        "port_transmit_wait_total": noisy(pkts_tx * background * 0.05),
        "link_downed_total": np.zeros_like(dev_tx),
        "port_errors_received_total": np.zeros_like(dev_tx),
    }
    labels = [label_text([("device", f"mlx5_{d}"), ("instance", nodes[i].exporter_instance),
                          ("job", "node"), ("port", "1")]) for i, d in zip(dev_node, dev_name, strict=True)]
    mask = np.ones((dev_node.size, n_t), dtype=bool)

    def fam(name: str, kind: str, help_text: str, values: npt.NDArray[np.float64]) -> str:
        full = f"node_infiniband_{name}"
        return family_text(full, kind, help_text, [f"{full}{lab}" for lab in labels],
                           values, ts, mask)

    parts = [
        fam("rate_bytes_per_second", "gauge", "Maximum signal transfer rate",
            np.repeat(line[:, None], n_t, axis=1)),
        fam("state_id", "gauge", "State of the InfiniBand port (0: no change, 1: down, 2: init, "
            "3: armed, 4: active, 5: act defer)", np.full((dev_node.size, n_t), PORT_STATE_ACTIVE)),
        fam("port_data_transmitted_bytes_total", "counter",
            "Number of data octets transmitted on all links", np.round(dev_tx)),
        fam("port_data_received_bytes_total", "counter",
            "Number of data octets received on all links", np.round(dev_rx)),
        fam("port_packets_transmitted_total", "counter",
            "Number of packets transmitted on all VLs by this port (including errors)",
            np.round(pkts_tx + pkts_rx * ACKS_PER_PACKET)),
        fam("port_packets_received_total", "counter",
            "Number of packets received on all VLs by this port (including errors)",
            np.round(pkts_rx + pkts_tx * ACKS_PER_PACKET)),
    ]
    parts += [fam(name, "counter", f"InfiniBand hw counter {name.removesuffix('_total')}", values)
              for name, values in hw.items()]
    del n_dev
    return parts
