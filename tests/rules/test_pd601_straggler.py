"""PD601 straggler: one instance markedly slower than its peers, not explained by load."""

from __future__ import annotations

import pytest

from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd601_straggler import Straggler
from tests.rules.builders import Cluster, make_context, make_dataset, only, scenario_context

RULE = Straggler()


def test_slow_decode_instance() -> None:
    [f] = only(RULE.evaluate(scenario_context("straggler")), "PD601")
    assert f.cause == "straggler" and f.component == "resource-monitor"
    assert f.severity is Severity.WARNING and f.instances == ("decode-1",)
    assert f.summary.startswith("decode-1 has a median TPOT of 66 ms against 30 ms")
    tpot = next(e for e in f.evidence if e.what == "median TPOT on decode-1")
    assert float(tpot.value) == pytest.approx(0.066, rel=0.05)
    z = next(e for e in f.evidence if e.what.startswith("modified z-score"))
    assert float(z.value) > 3.5
    assert f.confidence >= 0.7  # persistent over the time bins


def test_three_times_slower_is_critical_and_logs_see_it_too() -> None:
    c = Cluster(duration_s=600, tpot_factor={"decode-3": 3.5})
    [f] = only(RULE.evaluate(c.context()), "PD601")
    assert f.severity is Severity.CRITICAL
    [logs] = only(RULE.evaluate(c.context(("logs",))), "PD601")
    assert logs.instances == ("decode-3",)
    assert "Little's law" in next(e.source for e in logs.evidence if e.what.startswith("median"))


def test_slow_prefill_instance_per_uncached_token() -> None:
    c = Cluster(duration_s=600, n_prefill=4, prefill_speed={"prefill-2": 2.0})
    [f] = only(RULE.evaluate(c.context(("requests",))), "PD601")
    assert f.instances == ("prefill-2",)
    assert "has a prefill time per uncached token of" in f.summary


def test_two_instances_need_a_twofold_gap() -> None:
    slow = Cluster(duration_s=600, n_decode=2, tpot_factor={"decode-1": 2.5})
    [f] = only(RULE.evaluate(slow.context(("requests",))), "PD601")
    assert f.instances == ("decode-1",)
    mild = Cluster(duration_s=600, n_decode=2, tpot_factor={"decode-1": 1.6})
    assert RULE.evaluate(mild.context(("requests",))) == []


def test_an_overloaded_instance_is_not_a_straggler() -> None:
    c = Cluster(duration_s=600, decode_shares=[0.55, 0.15, 0.15, 0.15],
                tpot_factor={"decode-0": 2.0})
    assert RULE.evaluate(c.context(("requests",))) == []


@pytest.mark.parametrize("mix", ["all", "requests", "metrics", "logs"])
def test_healthy_cluster_gets_nothing(mix: str) -> None:
    assert RULE.evaluate(scenario_context("healthy", mix)) == []


def test_inconclusive_without_per_instance_latency() -> None:
    req = Cluster(duration_s=300).requests().drop(columns=["prefill_instance", "decode_instance"])
    [res] = RULE.evaluate(make_context(make_dataset(req)))
    assert isinstance(res, Inconclusive) and "per-instance latency" in res.needs


@pytest.mark.parametrize("factor,severity", [(3.0, Severity.WARNING), (4.0, Severity.CRITICAL)])
def test_records_histograms_and_logs_give_one_severity(factor: float, severity: Severity) -> None:
    """A 3x straggler (45 vs 15 ms) was critical from records and a warning from the TPOT
    histogram, whose 25-50 ms and 10-25 ms buckets (vLLM's time_per_output_token buckets)
    blur the medians. Severity compares exact means with a margin: one answer."""
    c = Cluster(duration_s=600, tpot_s=0.015, tpot_factor={"decode-3": factor})
    found = {}
    for parts in (("requests",), ("metrics",), ("logs",)):
        [f] = only(RULE.evaluate(c.context(parts)), "PD601")
        found[parts[0]] = f
    assert {f.severity for f in found.values()} == {severity}
    hist = found["metrics"]
    assert "from histogram bucket estimates; the exact means are" in hist.summary
    mean = next(e for e in hist.evidence if e.what.startswith("mean TPOT on decode-3"))
    assert mean.source.startswith("TPOT histogram sum/count")
    assert float(mean.value) / float(mean.baseline) == pytest.approx(factor, rel=0.05)  # type: ignore[arg-type]
    assert "bucket" not in found["requests"].summary
