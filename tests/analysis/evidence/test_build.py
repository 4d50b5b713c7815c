"""The evidence: computed once per diagnosis, from whatever inputs exist, never invented."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe import signals as S
from tests.rules.builders import Cluster, make_context, make_dataset, net, ramp


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster(duration_s=600, decode_shares=[0.41, 0.2, 0.2, 0.19],
                   hit_by_decode={"decode-2": 0.05}, retrans_per_1k={"node-prefill-0": 2.0},
                   prefill_queue=ramp(0.3, 30, begin=0.4))


@pytest.fixture(scope="module")
def full(cluster: Cluster):  # type: ignore[no-untyped-def]
    return cluster.context().evidence


def test_instance_table_has_shares_hit_rates_and_latencies(full) -> None:  # type: ignore[no-untyped-def]
    inst = full.instances
    decode = full.role("decode")
    assert list(decode.index) == ["decode-0", "decode-1", "decode-2", "decode-3"]
    assert decode["traffic_share_source"].iloc[0] == "request records"
    assert decode.loc["decode-0", "traffic_share"] == pytest.approx(0.41, abs=0.03)
    assert decode["traffic_share"].sum() == pytest.approx(1.0)
    assert decode.loc["decode-2", "hit_ratio"] == pytest.approx(0.05, abs=0.03)
    assert decode.loc["decode-1", "hit_ratio"] == pytest.approx(0.5, abs=0.03)
    assert inst.loc["decode-1", "hit_ratio_source"] == "prefix-cache counters"
    assert decode["tpot_p50"].between(0.027, 0.033).all()
    assert (full.role("prefill")["g_waiting_mean"] > 3).all()
    # KV usage from gauges; decode role defaults to 40 %.
    assert decode["g_kv_usage_p90"].between(0.4, 0.5).all()


def test_role_series_and_nodes(full) -> None:  # type: ignore[no-untyped-def]
    queue = full.role_series("prefill_queue")
    assert queue is not None
    assert queue.iloc[:8].mean() < 1.5 and queue.iloc[-3:].mean() > 20
    nodes = full.nodes
    bad = nodes.loc["node-prefill-0"]
    per_1k = 1000 * bad["retransmits"] / bad["rdma_packets"]
    assert per_1k == pytest.approx(2.0 / 1.01, rel=0.1)  # RX packets counted too (1 %)
    assert bad["retransmit_bins"] >= 0.8 * bad["measured_bins"]
    good = nodes.loc["node-prefill-1"]
    assert 1000 * good["retransmits"] / good["rdma_packets"] < 0.01
    assert (nodes["link_bytes_per_s"] == 50e9).all()
    assert S.RDMA_OUT_OF_SEQUENCE_TOTAL in full.rdma_signals


def test_transfer_and_mix(full) -> None:  # type: ignore[no-untyped-def]
    t = full.transfer
    assert t.latency_source == "request records"
    # 1500 tokens x 160 kB at 20 GB/s + 5 ms, times the lognormal length spread.
    assert t.latency_p50_s == pytest.approx(0.015, rel=0.2)
    assert t.achieved_bytes_per_s == pytest.approx(14e9, rel=0.15)
    assert full.mix.prompt is not None
    assert abs(full.mix.prompt.relative_change) < 0.2  # a stable mix


def test_requests_only_has_no_gauges_and_no_network(cluster: Cluster) -> None:
    f = cluster.context(("requests",)).evidence
    assert "g_waiting_mean" not in f.instances.columns
    assert f.nodes.empty and not f.has_network and not f.rdma_signals
    assert f.role_series("prefill_queue") is None
    assert f.role_series("queue_s_p50") is not None
    assert f.instances.loc["decode-2", "hit_ratio_source"] == "cached_tokens in request records"


def test_logs_only_estimates_tpot_by_littles_law() -> None:
    c = Cluster(duration_s=600, tpot_factor={"decode-1": 2.0})
    f = c.context(("logs",)).evidence
    decode = f.role("decode")
    assert decode["tpot_p50_source"].iloc[0] == "running / generation throughput (Little's law)"
    ratio = decode.loc["decode-1", "tpot_p50"] / decode.drop(index="decode-1")["tpot_p50"].median()
    assert ratio == pytest.approx(2.0, rel=0.2)
    assert decode["traffic_share_source"].iloc[0] == "throughput in logs"


def test_empty_dataset_gives_empty_features() -> None:
    f = make_context(make_dataset()).evidence
    assert f.instances.empty and f.nodes.empty and f.n_requests == 0
    assert f.transfer.latency_p50_s is None and f.mix.prompt is None


def test_counter_reset_inside_a_bin_counts_from_zero() -> None:
    ts = 1000.0 + np.arange(0, 600, 15.0)
    values = np.arange(ts.size) * 100.0
    values[20:] = (np.arange(ts.size - 20)) * 100.0  # restart: back to 0
    frames = [net("n1", S.RDMA_OUT_OF_SEQUENCE_TOTAL, ts, values),
              net("n1", S.RDMA_TX_BYTES_TOTAL, ts, np.arange(ts.size) * 1e9)]
    f = make_context(make_dataset(network=frames)).evidence
    # 19 steps before the restart, then 19 steps after it starting from 0.
    assert f.nodes.loc["n1", "retransmit_bins"] >= 37


def test_a_single_sample_of_rdma_counters_gives_no_rates_and_no_error() -> None:
    """One scrape of a node's counters: nothing can be binned, the node is still listed."""
    frames = [net("n1", S.RDMA_TX_BYTES_TOTAL, np.array([1000.0]), np.array([5e9])),
              net("n1", S.PORT_STATE, np.array([1000.0]), np.array([4.0]), kind=S.GAUGE)]
    f = make_context(make_dataset(network=frames)).evidence
    assert list(f.nodes.index) == ["n1"]
    peak = f.nodes.get("rdma_tx_p90_bytes_per_s")
    assert peak is None or peak.isna().all()
    assert f.has_network
