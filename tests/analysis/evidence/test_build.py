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


def test_sampled_evidence_agrees_with_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced far below its threshold, the sampled evidence (grouped quantiles, per-bin medians,
    cluster p90s) agrees with the exact one: counts and shares identical, quantiles within the
    stated rank tolerance (here a few percent: samples of 2,000 per instance), and the same
    findings."""
    from pdprobe.analysis import grouped
    from pdprobe.rules.engine import run_rules

    cluster = Cluster(duration_s=1200, rate_rps=60.0, decode_shares=[0.41, 0.2, 0.2, 0.19],
                      tpot_factor={"decode-0": 1.5}, seed=3)
    full = cluster.context()
    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", 10_000)
    monkeypatch.setattr(grouped, "GROUP_SAMPLE_MAX", 2_000)
    monkeypatch.setattr(grouped, "CELL_SAMPLE_MAX", 200)
    monkeypatch.setattr(grouped, "COLUMN_SAMPLE_ROWS", 8_000)
    sampled = cluster.context()
    assert len(sampled.dataset.requests) > 60_000
    a, b = full.evidence.instances, sampled.evidence.instances
    for col in ("req_count", "req_share", "req_tpot_mean", "req_hit_ratio"):
        np.testing.assert_allclose(b[col], a[col], rtol=1e-12, equal_nan=True, err_msg=col)
    for col in ("req_ttft_p50", "req_ttft_p90", "req_tpot_p50", "req_tpot_p90",
                "req_kv_transfer_p50"):
        np.testing.assert_allclose(b[col], a[col], rtol=0.05, equal_nan=True, err_msg=col)
    assert b.loc["decode-0", "req_tpot_p50"] > 1.3 * b.loc["decode-1", "req_tpot_p50"]
    assert sampled.evidence.slo.ttft_p90_s == pytest.approx(full.evidence.slo.ttft_p90_s,
                                                            rel=0.05)
    assert sampled.evidence.transfer.transfers == full.evidence.transfer.transfers
    bins_a, bins_b = full.evidence.bins["req_tpot"], sampled.evidence.bins["req_tpot"]
    assert (bins_a.notna() == bins_b.notna()).all().all()
    np.testing.assert_allclose(bins_b.to_numpy(), bins_a.to_numpy(), rtol=0.1, equal_nan=True)
    found_full, _ = run_rules(full)
    found_sampled, _ = run_rules(sampled)
    assert [(f.code, f.severity) for f in found_sampled] == \
        [(f.code, f.severity) for f in found_full]


def test_per_bin_medians_only_for_the_role_a_rule_compares_in_them(cluster: Cluster) -> None:
    """PD601 compares decode instances in ``req_tpot`` and prefill instances in
    ``req_prefill_per_token``: the other role column's frame is not computed, the read one is
    each (bin, instance) cell's median."""
    ctx = cluster.context()
    f = ctx.evidence
    tpot, per_token = f.bin("req_tpot"), f.bin("req_prefill_per_token")
    assert tpot is not None and per_token is not None
    assert sorted(tpot.columns) == sorted(f.names("decode"))
    assert sorted(per_token.columns) == sorted(f.names("prefill"))
    req = ctx.dataset.requests
    mine = req[(req["decode_instance"] == "decode-0").to_numpy()]
    expect = mine.groupby(f.window.bin_of(mine["arrival_ts"].to_numpy()))["tpot_s"].median()
    np.testing.assert_array_equal(tpot["decode-0"].dropna().to_numpy(), expect.to_numpy())


def test_prefill_time_per_token_only_for_the_instances_pd601_compares(cluster: Cluster) -> None:
    """Prefill time per uncached token is summarised per prefill instance (from the prefill
    column); the decode column is not summarised for it (no rule reads it there)."""
    ctx = cluster.context()
    f = ctx.evidence
    per_token = f.instances["req_prefill_per_token_p50"]
    assert per_token.reindex(list(f.names("decode"))).isna().all()
    req = ctx.dataset.requests
    uncached = (req["prompt_tokens"] - req["cached_tokens"].fillna(0.0)).clip(lower=1.0)
    want = (req["prefill_s"] / uncached).groupby(req["prefill_instance"].astype(str)).median()
    prefill = list(f.names("prefill"))
    np.testing.assert_allclose(per_token.reindex(prefill).to_numpy(),
                               want.reindex(prefill).to_numpy(), rtol=1e-12)


def test_achieved_bandwidth_from_records_is_the_clusters_not_per_instance(
        cluster: Cluster) -> None:
    """With request records the achieved KV bandwidth is the records' bytes over seconds; no
    per-instance median of it is computed (nothing would read it)."""
    ctx = cluster.context(("requests",))
    f = ctx.evidence
    assert f.transfer.achieved_source == "kv_bytes / kv_transfer_s in request records"
    req = ctx.dataset.requests
    both = (req["kv_transfer_s"] > 0) & req["kv_bytes"].notna()
    assert f.transfer.achieved_bytes_per_s == pytest.approx(
        req.loc[both, "kv_bytes"].sum() / req.loc[both, "kv_transfer_s"].sum(), rel=1e-12)
    assert "xfer_bytes_per_s" not in f.instances.columns or \
        f.instances["xfer_bytes_per_s"].isna().all()


def test_tpot_and_queue_wait_only_for_the_role_whose_rows_rules_read(cluster: Cluster) -> None:
    """TPOT is summarised per decode instance only (every reader of tpot_p50/p90/mean reads
    decode rows) and the wait before prefill per prefill instance only: the prefill column's
    TPOT and the decode column's wait are not computed (no rule reads them)."""
    ctx = cluster.context()
    f = ctx.evidence
    decode, prefill = list(f.names("decode")), list(f.names("prefill"))
    for col in ("req_tpot_p50", "req_tpot_p90", "req_tpot_mean"):
        assert f.instances[col].reindex(prefill).isna().all(), col
        assert f.instances[col].reindex(decode).notna().all(), col
    for col in ("req_queue_p50", "req_queue_p90"):
        assert f.instances[col].reindex(decode).isna().all(), col
        assert f.instances[col].reindex(prefill).notna().all(), col
    req = ctx.dataset.requests
    want = req.groupby(req["decode_instance"].astype(str))["tpot_s"].median()
    np.testing.assert_allclose(f.instances["req_tpot_p50"].reindex(decode).to_numpy(),
                               want.reindex(decode).to_numpy(), rtol=1e-12)
