"""node_exporter series: counter signatures of RDMA loss and congestion, monotonic counters."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pdprobe import signals as S
from pdprobe.collectors.files import read_paths
from pdprobe.sim.config import SimConfig, parse_fault
from pdprobe.sim.model import run_to_dir


def _last_by_signal(path: Path) -> pd.Series:
    ds = read_paths([path])
    net = ds.network.sort_values("ts")
    return net.groupby(["node", "device", "signal"])["value"].last().groupby("signal").sum()


def test_loss_and_congestion_have_distinct_signatures(tmp_path: Path) -> None:
    base = SimConfig(prefill=2, decode=2, duration_s=90.0, rate_rps=6.0, seed=12)
    healthy = _last_by_signal(_write(tmp_path / "h", base))
    lossy = _last_by_signal(_write(tmp_path / "l", SimConfig(
        prefill=2, decode=2, duration_s=90.0, rate_rps=6.0, seed=12,
        faults=(parse_fault("rdma-retransmits:rate=0.1"),))))
    busy = _last_by_signal(_write(tmp_path / "c", SimConfig(
        prefill=2, decode=2, duration_s=90.0, rate_rps=6.0, seed=12,
        faults=(parse_fault("contended-link:share=0.5"),))))
    for signal in (S.RDMA_OUT_OF_SEQUENCE_TOTAL, S.RDMA_PACKET_SEQ_ERRORS_TOTAL,
                   S.RDMA_ADP_RETRANS_TOTAL, S.RDMA_DUPLICATE_REQUESTS_TOTAL):
        assert lossy[signal] > 1000 * max(healthy[signal], 1.0)
    assert lossy[S.RDMA_LOCAL_ACK_TIMEOUTS_TOTAL] > 0
    # congestion marks ECN/CNP but retransmits nothing; its background traffic fills the ports
    assert busy[S.RDMA_ECN_MARKED_TOTAL] > 1000 and healthy[S.RDMA_ECN_MARKED_TOTAL] == 0
    assert busy[S.RDMA_CNP_HANDLED_TOTAL] > 0
    assert busy[S.RDMA_OUT_OF_SEQUENCE_TOTAL] < 1000
    assert busy[S.RDMA_TX_BYTES_TOTAL] > 3 * healthy[S.RDMA_TX_BYTES_TOTAL]


def test_counters_never_decrease(tmp_path: Path) -> None:
    path = _write(tmp_path / "m", SimConfig(prefill=2, decode=2, duration_s=60.0, rate_rps=5.0,
                                            faults=(parse_fault("rdma-retransmits:rate=0.2"),)))
    net = read_paths([path]).network
    counters = net[net["kind"] == S.COUNTER].sort_values("ts")
    steps = counters.groupby(["node", "device", "signal"])["value"].diff().dropna()
    assert (steps >= 0).all() and len(steps) > 1000


def _write(out: Path, config: SimConfig) -> Path:
    run_to_dir(config, out)
    return out / "node_metrics.om"
