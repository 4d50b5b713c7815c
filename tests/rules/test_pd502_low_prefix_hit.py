"""PD502 routing-skew: persistently low prefix-hit instances while prefill backs up."""

from __future__ import annotations

from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd502_low_prefix_hit import LowPrefixHitRouting
from tests.rules.builders import Cluster, make_context, make_dataset, only, scenario_context

RULE = LowPrefixHitRouting()


def test_low_hit_decode_while_prefill_queues_back_up() -> None:
    [f] = only(RULE.evaluate(scenario_context("hit")), "PD502")
    assert f.cause == "routing-skew" and f.severity is Severity.WARNING
    assert f.instances == ("decode-2",)
    assert f.summary.startswith("decode-2 has a ")
    assert "against 62.0% on its decode peers while the prefill queues back up" in f.summary
    hit = next(e for e in f.evidence if e.what == "prefix-cache hit rate on decode-2")
    assert float(hit.value) < 6 and float(hit.baseline) > 58  # type: ignore[arg-type]
    assert hit.source.startswith("prefix-cache counters")


def test_request_records_see_it_through_the_wait_before_prefill() -> None:
    [f] = only(RULE.evaluate(scenario_context("hit", "requests")), "PD502")
    assert f.severity is Severity.WARNING
    assert any(e.what.startswith("median wait before prefill") for e in f.evidence)


def test_without_prefill_impact_it_is_info() -> None:
    c = Cluster(duration_s=600, hit_by_decode={"decode-2": 0.03}, hit_ratio=0.62)
    [f] = only(RULE.evaluate(c.context()), "PD502")
    assert f.severity is Severity.INFO and f.confidence <= 0.45


def test_uniformly_low_hit_rates_are_not_routing() -> None:
    c = Cluster(duration_s=600, hit_ratio=0.1, hit_by_decode={"decode-2": 0.02})
    assert RULE.evaluate(c.context()) == []  # peers at 10 %: nobody's cache helps much
    assert RULE.evaluate(scenario_context("healthy")) == []


def test_inconclusive_without_hit_data() -> None:
    req = Cluster(duration_s=300).requests().drop(columns=["cached_tokens"])
    [res] = RULE.evaluate(make_context(make_dataset(req)))
    assert isinstance(res, Inconclusive) and "prefix-cache hit rate" in res.needs
