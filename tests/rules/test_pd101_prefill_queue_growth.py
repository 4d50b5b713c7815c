"""PD101 prefill-bound: growing prefill queues, from gauges, request records or the model."""

from __future__ import annotations

import pytest

from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd101_prefill_queue_growth import PrefillQueueGrowth
from tests.rules.builders import T0, capacity, only, scenario_context

RULE = PrefillQueueGrowth()


def test_fires_on_growing_prefill_queues_with_the_numbers() -> None:
    [f] = only(RULE.evaluate(scenario_context("prefill")), "PD101")
    assert f.cause == "prefill-bound" and f.component == "instance-manager"
    assert f.severity is Severity.WARNING
    assert f.confidence >= 0.8
    assert f.instances == ("prefill-0", "prefill-1")
    depth = next(e for e in f.evidence if e.what == "prefill queue depth per instance")
    assert depth.value > 25 and depth.baseline is not None and float(depth.baseline) < 3
    # The ramp starts at 30 % of the 600 s window; the onset is found within two bins.
    assert depth.window_start_ts == pytest.approx(T0 + 180, abs=30)
    assert "grew for 6m45s" in f.summary
    assert "decode KV usage stayed under 45.0%" in f.summary
    assert "the length mix did not change" in f.summary


def test_capacity_model_gives_short_by_and_the_recommended_ratio() -> None:
    cap = capacity(rec_p=4, rec_d=4, dep_p=2, dep_d=4)
    [f] = only(RULE.evaluate(scenario_context("prefill", capacity=cap)), "PD101")
    assert f.summary.startswith("Prefill is short by 2 instances")
    assert f.summary.endswith("recommended 4P:4D")
    assert any("4P:4D" in s for s in f.next_steps)
    rec = next(e for e in f.evidence if e.what.startswith("prefill instances recommended"))
    assert (rec.value, rec.baseline) == (4, 2)


def test_capacity_alone_is_info_with_low_confidence() -> None:
    cap = capacity(rec_p=3, rec_d=4, dep_p=2, dep_d=4)
    [f] = only(RULE.evaluate(scenario_context("healthy", capacity=cap)), "PD101")
    assert f.severity is Severity.INFO and f.confidence <= 0.4
    assert "no growing prefill queue was observed" in f.summary


def test_request_records_alone_say_less_with_lower_confidence() -> None:
    [full] = only(RULE.evaluate(scenario_context("prefill")), "PD101")
    [req] = only(RULE.evaluate(scenario_context("prefill", "requests")), "PD101")
    assert req.confidence < full.confidence
    assert "the wait before prefill grew" in req.summary
    assert all("requests_waiting" not in e.source for e in req.evidence)


def test_critical_when_the_ttft_slo_collapses() -> None:
    [f] = only(RULE.evaluate(scenario_context("prefill", slo_ttft_s=0.15)), "PD101")
    assert f.severity is Severity.CRITICAL
    slo = next(e for e in f.evidence if e.what == "requests within the TTFT SLO")
    assert float(slo.value) < 50


@pytest.mark.parametrize("mix", ["all", "requests", "metrics", "logs"])
def test_healthy_cluster_gets_nothing(mix: str) -> None:
    assert RULE.evaluate(scenario_context("healthy", mix)) == []


def test_decode_backpressure_lowers_confidence() -> None:
    [f] = only(RULE.evaluate(scenario_context("starve")), "PD101")
    [clean] = only(RULE.evaluate(scenario_context("prefill")), "PD101")
    assert f.confidence < clean.confidence - 0.3
    assert any("decode admission" in e.what for e in f.evidence)


def test_inconclusive_without_queue_wait_or_capacity() -> None:
    from tests.rules.builders import SCENARIOS, make_context, make_dataset

    c = SCENARIOS["prefill"]
    ctx = make_context(make_dataset(network=c.network_frames(), instances=c.instances()))
    [res] = RULE.evaluate(ctx)
    assert isinstance(res, Inconclusive) and res.code == "PD101"
    assert "prefill queue depth" in res.needs


def test_judged_on_the_model_quoted_from_the_checked_section() -> None:
    """The service's checked capacity (RuleContext.quoted_capacity): the finding is the
    model's (severity, confidence, evidence) and its counts are the section's; headroom
    (needed 5, recommended 6) is no shortage: short by needed - deployed."""
    from dataclasses import replace

    cap = capacity(rec_p=4, rec_d=4, dep_p=2, dep_d=4)
    checked = replace(cap, recommended_prefill=6, recommended_decode=5, needed_prefill=5,
                      needed_decode=4)
    ctx = scenario_context("prefill", capacity=cap)
    [model] = only(RULE.evaluate(ctx), "PD101")
    [f] = only(RULE.evaluate(replace(ctx, quoted_capacity=checked)), "PD101")
    assert (f.severity, f.confidence, f.instances) == \
        (model.severity, model.confidence, model.instances)
    assert f.summary.startswith("Prefill is short by 3 instances")
    assert f.summary.endswith("recommended 6P:5D")
    assert f.next_steps[0].startswith("Scale prefill to 6 instances (6P:5D recommended")
    rec = next(e for e in f.evidence if e.what.startswith("prefill instances recommended"))
    assert (rec.value, rec.baseline) == (6, 2)


def test_headroom_alone_does_not_make_prefill_short() -> None:
    """A capacity meeting the objective at the deployed count, recommended one more for
    headroom: no capacity-only finding."""
    from dataclasses import replace

    cap = replace(capacity(rec_p=3, rec_d=4, dep_p=2, dep_d=4), needed_prefill=2)
    assert only(RULE.evaluate(scenario_context("healthy", capacity=cap)), "PD101") == []
