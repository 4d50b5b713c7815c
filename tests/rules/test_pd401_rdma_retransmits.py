"""PD401 rdma-retransmits: retransmissions per packet, CNP storms, transfer-engine failures."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe import signals as S
from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd401_rdma_retransmits import RdmaRetransmits
from tests.rules.builders import (
    T0,
    Cluster,
    make_context,
    make_dataset,
    net,
    only,
    scenario_context,
)

RULE = RdmaRetransmits()


def test_retransmits_above_one_per_thousand_are_critical() -> None:
    [f] = only(RULE.evaluate(scenario_context("rdma")), "PD401")
    assert f.cause == "rdma-retransmits" and f.component == "network-fabric"
    assert f.severity is Severity.CRITICAL
    assert f.instances == ("prefill-0",)
    rate = next(e for e in f.evidence if e.what.startswith("retransmissions per 1000"))
    assert float(rate.value) == pytest.approx(2.0 / 1.01, rel=0.1)
    assert "rdma_out_of_sequence_total" in rate.source
    per_gb = next(e for e in f.evidence if e.what.startswith("retransmissions per GB"))
    assert float(per_gb.value) == pytest.approx(2.0 / 4096 * 1e6, rel=0.1)  # ~488 per GB
    # Transfer latency on the affected instance against its peers is shown too.
    assert any(e.what == "KV-transfer latency p50 on affected instances" for e in f.evidence)
    assert "node-prefill-0" in f.summary


def test_moderate_loss_is_a_warning() -> None:
    c = Cluster(duration_s=600, retrans_per_1k={"node-decode-1": 0.3})
    [f] = only(RULE.evaluate(c.context(("metrics", "network"))), "PD401")
    assert f.severity is Severity.WARNING and f.instances == ("decode-1",)


def test_a_single_burst_is_info() -> None:
    ts = T0 + np.arange(0.0, 601.0, 15.0)
    bytes_ = np.arange(ts.size) * 15 * 1e9
    retrans = np.where(np.arange(ts.size) >= 20, 200_000.0, 0.0)  # one jump, then flat
    frames = [net("n1", S.RDMA_TX_BYTES_TOTAL, ts, bytes_),
              net("n1", S.RDMA_OUT_OF_SEQUENCE_TOTAL, ts, retrans)]
    [f] = only(RULE.evaluate(make_context(make_dataset(network=frames))), "PD401")
    assert f.severity is Severity.INFO and "not sustained" in f.summary


def test_congestion_notification_storm() -> None:
    c = Cluster(duration_s=600, cnp_per_1k={"node-decode-0": 40.0})
    [f] = only(RULE.evaluate(c.context(("metrics", "network"))), "PD401")
    assert f.severity is Severity.WARNING
    assert "congestion-notification storms on node-decode-0" in f.summary


def test_transfer_engine_retry_exhaustion_from_logs() -> None:
    c = Cluster(duration_s=600, events=[(S.EV_RDMA_RETRY_EXCEEDED, "prefill-1", 3),
                                        (S.EV_RDMA_SLICE_FAILED, "prefill-1", 6)])
    [f] = only(RULE.evaluate(c.context(("logs",))), "PD401")
    assert f.severity is Severity.WARNING and f.instances == ("prefill-1",)
    assert "3 transfers exhausted their retries" in f.summary
    c = c.with_(events=[(S.EV_RDMA_RETRY_EXCEEDED, "prefill-1", 12)])
    [f] = only(RULE.evaluate(c.context(("logs",))), "PD401")
    assert f.severity is Severity.CRITICAL


def test_few_events_are_noise() -> None:
    # 0.02 out-of-sequence per scrape on a healthy fabric: far under MIN_RETRANSMITS.
    assert RULE.evaluate(scenario_context("healthy")) == []
    assert RULE.evaluate(scenario_context("healthy", "metrics")) == []


def test_inconclusive_without_counters_or_logs() -> None:
    [res] = RULE.evaluate(scenario_context("rdma", "requests"))
    assert isinstance(res, Inconclusive) and "retransmission" in res.needs
