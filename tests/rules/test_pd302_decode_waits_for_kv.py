"""PD302 kv-transfer-bandwidth: decode waits for remote KV while prefill idles."""

from __future__ import annotations

import pytest

from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd302_decode_waits_for_kv import DecodeWaitsForKv
from tests.rules.builders import only, scenario_context

RULE = DecodeWaitsForKv()


def test_decode_waiting_for_kv_with_prefill_idle() -> None:
    [f] = only(RULE.evaluate(scenario_context("xfer-wait")), "PD302")
    assert f.cause == "kv-transfer-bandwidth" and f.severity is Severity.WARNING
    assert "while prefill idles" in f.summary and "KV hand-off" in f.summary
    wait = f.evidence[0]
    assert wait.what == "requests waiting for remote KV per decode instance"
    assert 3 < float(wait.value) < 8
    assert any(e.what == "remote-KV wait per decode instance" for e in f.evidence)  # rising
    assert f.confidence >= 0.8


def test_sglang_transfer_queue_counts_too() -> None:
    from tests.rules.builders import SCENARIOS

    c = SCENARIOS["xfer-wait"].with_(engine="sglang")
    [f] = only(RULE.evaluate(c.context(("metrics",))), "PD302")
    assert "decode_transfer_queue" in f.evidence[0].source


def test_logs_without_breakdown_give_a_weaker_finding() -> None:
    [full] = only(RULE.evaluate(scenario_context("xfer-wait")), "PD302")
    [logs] = only(RULE.evaluate(scenario_context("xfer-wait", "logs")), "PD302")
    assert logs.confidence < full.confidence
    assert "no breakdown" in logs.evidence[0].what


def test_full_decode_memory_is_not_a_transfer_problem() -> None:
    assert RULE.evaluate(scenario_context("starve-vllm")) == []


@pytest.mark.parametrize("mix", ["all", "metrics", "logs"])
def test_healthy_cluster_gets_nothing(mix: str) -> None:
    assert RULE.evaluate(scenario_context("healthy", mix)) == []


def test_inconclusive_from_request_records() -> None:
    [res] = RULE.evaluate(scenario_context("xfer-wait", "requests"))
    assert isinstance(res, Inconclusive) and "kv_fetch" in res.needs
