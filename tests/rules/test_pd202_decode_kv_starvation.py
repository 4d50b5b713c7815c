"""PD202 decode-bound: decode KV starvation that back-pressures prefill."""

from __future__ import annotations

from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd202_decode_kv_starvation import DecodeKvStarvation
from tests.rules.builders import only, scenario_context

RULE = DecodeKvStarvation()


def test_sglang_preallocation_queue_blocks_prefill() -> None:
    [f] = only(RULE.evaluate(scenario_context("starve")), "PD202")
    assert f.cause == "decode-bound"
    assert f.severity is Severity.CRITICAL  # the prefill side is visibly blocked
    assert "blocking prefill" in f.summary and "not a prefill shortage" in f.summary
    pre = next(e for e in f.evidence if e.source == "decode_prealloc_queue")
    assert 6 < float(pre.value) < 10
    assert any(e.source == "prefill_bootstrap_queue" for e in f.evidence)
    assert any("misleading symptom" in e.what for e in f.evidence)
    assert any("Do not add prefill" in s for s in f.next_steps)


def test_vllm_admission_wait_with_full_kv() -> None:
    [f] = only(RULE.evaluate(scenario_context("starve-vllm")), "PD202")
    wait = next(e for e in f.evidence if e.what.startswith("requests waiting for decode admission"))
    assert 5 < float(wait.value) < 7
    kv = next(e for e in f.evidence if e.what.startswith("decode KV usage p90"))
    assert float(kv.value) > 90


def test_vllm_waiting_with_free_kv_is_not_starvation() -> None:
    # Waiting on decode while KV is 40 % used: not memory starvation (PD302 looks at it).
    assert RULE.evaluate(scenario_context("xfer-wait")) == []
    assert RULE.evaluate(scenario_context("healthy")) == []
    assert RULE.evaluate(scenario_context("healthy-sglang")) == []


def test_logs_carry_the_same_story() -> None:
    [f] = only(RULE.evaluate(scenario_context("starve", "logs")), "PD202")
    assert f.severity is Severity.CRITICAL


def test_request_records_cannot_see_decode_admission() -> None:
    [res] = RULE.evaluate(scenario_context("starve", "requests"))
    assert isinstance(res, Inconclusive)
    assert "decode_prealloc" in res.needs
