"""Charted transfer-path series: network rates per node from per-port counters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.analysis.series import RDMA_RETRANSMITS, RDMA_TX_BANDWIDTH, _network_rates
from pdprobe.dataset import NETWORK_COLUMNS, conform


class _Net:
    def __init__(self, network: pd.DataFrame) -> None:
        self.network = network


def _port(node: str, port: str, signal: str, start: float, values: list[float]) -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame({"ts": start + 7.0 + 15.0 * np.arange(n), "node": node, "device": "mlx5_0",
                         "port": port, "signal": signal, "kind": "counter",
                         "value": np.asarray(values, dtype=float)})


def test_two_ports_and_a_reset_never_give_a_negative_rate() -> None:
    """Two ports of one node in the same scrapes (node_exporter's infiniband collector exports
    one series per device and port; the collectors already undo counter resets per series):
    taking the node as the series interleaved the ports' samples, so the rate between a bin
    edge's two neighbours jumped between counters and went negative."""
    n = 80
    big = list(1e9 + 1e6 * np.arange(n))
    small = list(10.0 + 2 * np.arange(n))
    retx = list(np.arange(n) * 3.0)
    frames = [_port("node-a", "1", S.RDMA_TX_BYTES_TOTAL, 0.0, big),
              _port("node-a", "2", S.RDMA_TX_BYTES_TOTAL, 0.0, small),
              _port("node-a", "1", S.RDMA_OUT_OF_SEQUENCE_TOTAL, 0.0, retx),
              _port("node-a", "2", S.RDMA_OUT_OF_SEQUENCE_TOTAL, 0.0, [5.0] * n)]
    net = conform(pd.concat(frames, ignore_index=True), NETWORK_COLUMNS)
    edges = tuple(float(60 * i) for i in range(19))
    made = _network_rates(_Net(net), 0.0, 60.0, len(edges), edges)  # type: ignore[arg-type]
    series = {s.name: s for s in made}
    tx = np.array(series[RDMA_TX_BANDWIDTH].series.values, dtype=float)
    rates = np.array(series[RDMA_RETRANSMITS].series.values, dtype=float)
    assert np.nanmin(tx) >= 0 and np.nanmin(rates) >= 0
    # port 1 grows 1e6 per 15 s: ~66.7 kB/s; port 2 adds a fraction of a byte per second
    assert np.nanmedian(tx) == pytest.approx(1e6 / 15, rel=0.01)
    assert np.nanmedian(rates) == pytest.approx(3 / 15, rel=0.01)


def test_missing_instance_names_fill_a_categorical_in_name_order() -> None:
    import pandas as pd

    from pdprobe.analysis.series import _filled

    col = pd.Series(pd.Categorical(["d1", None, "b0"], categories=["b0", "d1"]))
    out = _filled(col, "all")
    assert out.tolist() == ["d1", "all", "b0"]
    assert list(out.cat.categories) == ["all", "b0", "d1"]
    assert _filled(pd.Series(["x", None], dtype="string"), "all").tolist() == ["x", "all"]
