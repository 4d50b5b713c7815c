"""PD201 decode-bound: KV full, preemptions, slow tokens, decode admission queue."""

from __future__ import annotations

import pytest

from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd201_decode_saturation import DecodeSaturation
from tests.rules.builders import capacity, only, scenario_context

RULE = DecodeSaturation()


def test_fires_critical_with_kv_preemptions_and_tpot() -> None:
    [f] = only(RULE.evaluate(scenario_context("decode")), "PD201")
    assert f.cause == "decode-bound" and f.component == "instance-manager"
    # 0.4 preemptions/s per decode over 600 s against ~1200 requests each: ~20 %.
    assert f.severity is Severity.CRITICAL
    assert f.instances == ("decode-0", "decode-1", "decode-2", "decode-3")
    kv = next(e for e in f.evidence if e.what.startswith("decode instances with KV usage"))
    assert kv.value == 4
    pre = next(e for e in f.evidence if e.what == "preemptions/retractions on decode")
    assert pre.value == pytest.approx(4 * 240, abs=8)
    assert "KV cache near full" in f.summary and "preempted" in f.summary
    assert f.confidence >= 0.8


def test_capacity_adds_short_by_and_scale_step() -> None:
    cap = capacity(rec_p=2, rec_d=6, dep_p=2, dep_d=4, binding="decode")
    [f] = only(RULE.evaluate(scenario_context("decode", capacity=cap)), "PD201")
    assert f.summary.startswith("Decode is short by 2 instances")
    assert f.next_steps[0].startswith("Scale decode to 6 instances (2P:6D")


def test_full_kv_alone_is_info() -> None:
    [f] = only(RULE.evaluate(scenario_context("kv-full-only")), "PD201")
    assert f.severity is Severity.INFO and f.confidence <= 0.4
    assert "no preemptions, queueing or slow tokens" in f.summary


def test_tpot_slo_miss_from_request_records_alone() -> None:
    # TPOT ramps from 30 to 90 ms after 20 % of the window: ~60 % of requests meet 60 ms.
    [f] = only(RULE.evaluate(scenario_context("decode", "requests", slo_tpot_s=0.06)), "PD201")
    assert f.severity is Severity.WARNING
    slo = next(e for e in f.evidence if e.what == "requests within the TPOT SLO")
    assert 50 < float(slo.value) < 70
    assert f.confidence < 0.8  # one channel of the possible ones


@pytest.mark.parametrize("mix", ["all", "requests", "metrics", "logs"])
def test_healthy_cluster_gets_nothing(mix: str) -> None:
    assert RULE.evaluate(scenario_context("healthy", mix)) == []


def test_logs_waiting_without_breakdown_is_not_decode_capacity() -> None:
    # vLLM logs' single "Waiting" count rises while decode KV is 40 % used: that may be the
    # KV hand-off (PD302), so PD201 stays silent.
    assert only(RULE.evaluate(scenario_context("xfer-wait", "logs")), "PD201") == []


def test_inconclusive_with_network_counters_only() -> None:
    from tests.rules.builders import SCENARIOS, make_context, make_dataset

    c = SCENARIOS["decode"]
    [res] = RULE.evaluate(make_context(make_dataset(network=c.network_frames())))
    assert isinstance(res, Inconclusive) and "decode KV usage" in res.needs


def test_judged_on_the_model_quoted_from_the_checked_section() -> None:
    """The decode finding's counts are those of the service's checked capacity
    (RuleContext.quoted_capacity), its judgement the model's."""
    from dataclasses import replace

    cap = capacity(rec_p=2, rec_d=6, dep_p=2, dep_d=4, binding="decode")
    checked = replace(cap, recommended_prefill=3, recommended_decode=7, needed_prefill=2,
                      needed_decode=6)
    ctx = scenario_context("decode", capacity=cap)
    [model] = only(RULE.evaluate(ctx), "PD201")
    [f] = only(RULE.evaluate(replace(ctx, quoted_capacity=checked)), "PD201")
    assert (f.severity, f.confidence) == (model.severity, model.confidence)
    assert f.summary.startswith("Decode is short by 2 instances")
    assert any("Scale decode to 7 instances (3P:7D recommended" in s for s in f.next_steps)
    rec = next(e for e in f.evidence if e.what.startswith("decode instances recommended"))
    assert rec.value == 7
