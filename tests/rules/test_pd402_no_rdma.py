"""PD402 no-rdma: KV over TCP, missing or inactive RDMA ports."""

from __future__ import annotations

from pdprobe import signals as S
from pdprobe.dataset import InstanceInfo
from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd402_no_rdma import NoRdma
from tests.rules.builders import Cluster, make_context, make_dataset, only, scenario_context

RULE = NoRdma()


def test_kv_over_tcp_with_no_rdma_devices_is_critical() -> None:
    [f] = only(RULE.evaluate(scenario_context("tcp")), "PD402")
    assert f.cause == "no-rdma" and f.component == "network-fabric"
    assert f.severity is Severity.CRITICAL  # KV transfer is most of TTFT at 2 GB/s
    assert f.confidence >= 0.8
    assert "100.0% of the connector's KV bytes went over TCP" in f.summary
    assert set(f.instances) >= {"prefill-0", "prefill-1"}
    assert any(e.what == "RDMA series on serving nodes" and e.value == "none"
               for e in f.evidence)


def test_transport_log_lines_alone_are_strong_evidence() -> None:
    c = Cluster(duration_s=600, network=None,
                events=[(S.EV_TRANSPORT_TCP, "prefill-0", 2), (S.EV_TRANSPORT_TCP, "decode-0", 1)])
    [f] = only(RULE.evaluate(c.context(("logs",))), "PD402")
    assert f.severity is Severity.WARNING and f.confidence >= 0.75
    assert f.instances == ("decode-0", "prefill-0")
    assert "3 log lines show KV transfers over TCP" in f.summary


def test_inactive_rdma_ports() -> None:
    c = Cluster(duration_s=600, rdma_port_active=False)
    [f] = only(RULE.evaluate(c.context(("metrics", "network"))), "PD402")
    assert f.severity is Severity.WARNING
    assert "no ACTIVE RDMA port" in f.summary


def test_kv_on_netdev_while_rdma_ports_idle() -> None:
    c = Cluster(duration_s=600, kv_over_tcp=True)
    [f] = only(RULE.evaluate(c.context(("requests", "network"))), "PD402")
    assert "KV volume shows up on the TCP/IP interfaces" in f.summary


def test_single_node_needs_no_rdma() -> None:
    c = Cluster(duration_s=600, network="tcp")
    ds = c.dataset(("requests", "network"))
    one_node = tuple(InstanceInfo(i.name, i.role, "test", "node-prefill-0") for i in ds.instances)
    ds = make_dataset(ds.requests, network=[ds.network[ds.network["node"] == "node-prefill-0"]],
                      instances=one_node)
    assert RULE.evaluate(make_context(ds)) == []


def test_healthy_rdma_cluster_gets_nothing() -> None:
    assert RULE.evaluate(scenario_context("healthy")) == []
    assert RULE.evaluate(scenario_context("healthy", "metrics")) == []


def test_inconclusive_from_request_records() -> None:
    [res] = RULE.evaluate(scenario_context("tcp", "requests"))
    assert isinstance(res, Inconclusive) and "transport" in res.needs
