"""PD301 kv-transfer-bandwidth: link utilisation, transfer share of TTFT, congestion."""

from __future__ import annotations

import pytest

from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd301_kv_transfer_bandwidth import KvTransferBandwidth
from tests.rules.builders import Cluster, capacity, only, ramp, scenario_context

RULE = KvTransferBandwidth()


def test_link_near_line_rate_is_critical() -> None:
    # ~0.96 GB/s of KV per prefill node on average (8 req/s x 1.5k tokens x 160 kB / 2
    # nodes), more in the busier bins, on 1.1 GB/s links.
    ctx = Cluster(duration_s=600, link_bytes_per_s=1.1e9).context()
    [f] = only(RULE.evaluate(ctx), "PD301")
    assert f.cause == "kv-transfer-bandwidth" and f.component == "kv-connector"
    util = next(e for e in f.evidence if e.what.startswith("KV link utilisation"))
    assert float(util.value) > 90
    assert f.severity is Severity.CRITICAL
    assert set(f.instances) >= {"prefill-0", "prefill-1"}
    assert "of line rate" in f.summary


def test_transfer_time_rising_with_demand() -> None:
    # Demand ramps up 3x and every byte takes longer as it does: congestion.
    c = Cluster(duration_s=600, rate_scale=ramp(0.5, 1.5), transfer_scale=ramp(1.0, 30.0),
                link_bytes_per_s=400e9)
    [f] = only(RULE.evaluate(c.context(("requests",))), "PD301")
    assert f.severity is Severity.WARNING
    cong = next(e for e in f.evidence if "busiest third" in e.what)
    assert "per GB" in cong.what
    assert float(cong.value) > 3 * float(cong.baseline)  # type: ignore[arg-type]
    assert "transfer latency rises with transfer volume" in f.summary


def test_slow_transfers_on_an_idle_link_blame_the_hand_over() -> None:
    c = Cluster(duration_s=600, transfer_bytes_per_s=0.5e9)  # 50 GB/s links, 0.5 GB/s achieved
    [f] = only(RULE.evaluate(c.context()), "PD301")
    assert "hand-over overhead" in f.summary
    assert f.next_steps[0].startswith("Compare the hand-over time")


def test_decode_memory_pressure_discounts_transfer_times() -> None:
    c = Cluster(duration_s=600, transfer_bytes_per_s=0.5e9, decode_kv=0.96)
    assert RULE.evaluate(c.context()) == []


def test_capacity_model_alone_is_info() -> None:
    cap = capacity(rec_p=2, rec_d=4, dep_p=2, dep_d=4, binding="transfer",
                   transfer_required=45e9, transfer_capacity=50e9)
    [f] = only(RULE.evaluate(scenario_context("healthy", "requests", capacity=cap)), "PD301")
    assert f.severity is Severity.INFO and f.confidence <= 0.4
    share = next(e for e in f.evidence if e.what.startswith("transfer demand"))
    assert float(share.value) == pytest.approx(90.0)


@pytest.mark.parametrize("mix", ["all", "requests", "metrics"])
def test_healthy_cluster_gets_nothing(mix: str) -> None:
    assert RULE.evaluate(scenario_context("healthy", mix)) == []


def test_inconclusive_from_logs_without_transfer_lines() -> None:
    [res] = RULE.evaluate(scenario_context("healthy", "logs"))
    assert isinstance(res, Inconclusive) and "kv_transfer_s" in res.needs


def test_links_busy_for_lack_of_decode_instances_are_info() -> None:
    """8P:1D, decode at 120 % of its capacity: every transfer converges on one decode
    instance's links (90 % busy); at the recommended 2 decode the per-node demand halves to
    45 %: decode-bound's finding, PD301 only informs and says why. A decode pool that keeps up
    (the kv-transfer-bandwidth scenario: 16 %) leaves the links the fabric's problem."""
    from dataclasses import replace

    from pdprobe.rules.pd301_kv_transfer_bandwidth import decode_explains_transfer
    from tests.rules.builders import capacity

    cap = replace(capacity(rec_p=8, rec_d=2, dep_p=8, dep_d=1, binding="transfer"),
                  binding_basis="deployed counts", deployed_decode_utilization=1.2,
                  deployed_transfer_utilization=0.9, transfer_utilization=0.45)
    assert "converges on the 1 decode" in (decode_explains_transfer(cap) or "")
    assert decode_explains_transfer(replace(cap, deployed_decode_utilization=0.16)) is None
    # as many decode as prefill instances: the links are the fabric's problem
    assert decode_explains_transfer(replace(cap, deployed_decode=8, recommended_decode=9)) is None
    # decode saturated, links idle: KV waits for decode
    idle = replace(cap, binding="decode", deployed_decode_utilization=1.5,
                   deployed_transfer_utilization=0.1)
    assert "KV waits for decode" in (decode_explains_transfer(idle) or "")
    assert decode_explains_transfer(replace(cap, binding_basis="recommended counts")) is None
