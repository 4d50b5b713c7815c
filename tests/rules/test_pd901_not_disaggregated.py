"""PD901 not-disaggregated: decode prefills itself, recomputes failed loads, workers in the
wrong role, or no KV crosses while requests complete.

The recompute lines are tests/fixtures/logs/failures/vllm_v0_redo.log (vLLM V0
simple_connector.py "redo model forwarding") and vllm_decode_failures.log (vLLM V1
vllm/v1/core/sched/scheduler.py "Recovered from KV load failure").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdprobe import signals as S
from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd901_not_disaggregated import NotDisaggregated
from tests.rules.builders import (
    T0,
    Cluster,
    counter,
    gauge,
    make_context,
    make_dataset,
    only,
    scenario_context,
)

RULE = NotDisaggregated()
FAILURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "failures"
TS = T0 + np.arange(0.0, 601.0, 15.0)


@pytest.mark.parametrize("mix", ["all", "requests", "metrics", "logs"])
@pytest.mark.parametrize("scenario", ["healthy", "healthy-sglang", "tcp"])
def test_a_working_pd_deployment_is_disaggregated(scenario: str, mix: str) -> None:
    assert only(RULE.evaluate(scenario_context(scenario, mix)), "PD901") == []


def test_nothing_to_read_is_inconclusive() -> None:
    [res] = RULE.evaluate(make_context(make_dataset()))
    assert isinstance(res, Inconclusive)


def test_decode_prompt_throughput_is_local_prefill() -> None:
    c = Cluster(duration_s=600)
    frames = [gauge(p, S.PROMPT_THROUGHPUT_TPS, TS, np.full(TS.size, 200.0)) for p in c.prefill]
    frames += [gauge(d, S.PROMPT_THROUGHPUT_TPS, TS, np.full(TS.size, 900.0)) for d in c.decode]
    ds = make_dataset(metrics=frames, instances=c.instances())
    [f] = only(RULE.evaluate(make_context(ds)), "PD901")
    assert f.severity is Severity.CRITICAL  # 3600 of 4000 tokens/s on decode
    assert set(f.instances) == set(c.decode)
    assert "decode instances compute prompts themselves" in f.summary


def test_a_little_prompt_work_on_decode_is_not_enough() -> None:
    c = Cluster(duration_s=600)
    frames = [gauge(p, S.PROMPT_THROUGHPUT_TPS, TS, np.full(TS.size, 2000.0)) for p in c.prefill]
    frames += [gauge(d, S.PROMPT_THROUGHPUT_TPS, TS, np.full(TS.size, 20.0)) for d in c.decode]
    ds = make_dataset(metrics=frames, instances=c.instances())
    assert only(RULE.evaluate(make_context(ds)), "PD901") == []


@pytest.mark.parametrize("name", ["vllm_v0_redo.log", "vllm_decode_failures.log"])
def test_recompute_lines_through_diagnose(name: str) -> None:
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose

    report = diagnose(DiagnoseRequest(paths=(FAILURES / name,)))
    assert report.status == "warning"
    [f] = [f for f in report.findings if f.cause == "not-disaggregated"]
    assert f.severity is Severity.WARNING and "recomputed" in f.summary
    # the failed loads are the root: disaggregation is off for those requests as a consequence
    assert not f.is_root_cause and report.findings[0].cause == "kv-transfer-failures"


def test_connector_counters_flat_while_requests_finish() -> None:
    frames = []
    for inst in ("prefill-0", "decode-0"):
        frames += [counter(inst, S.KV_TX_BYTES_TOTAL, TS, np.zeros(TS.size)),
                   counter(inst, S.KV_RX_BYTES_TOTAL, TS, np.zeros(TS.size))]
    frames.append(counter("decode-0", S.REQUESTS_FINISHED_TOTAL, TS, np.arange(TS.size) * 5.0))
    [f] = only(RULE.evaluate(make_context(make_dataset(metrics=frames))), "PD901")
    assert f.severity is Severity.CRITICAL and "moved no bytes" in f.summary
    # the same counters moving bytes: disaggregated
    frames[0] = counter("prefill-0", S.KV_TX_BYTES_TOTAL, TS, np.arange(TS.size) * 1e9)
    assert only(RULE.evaluate(make_context(make_dataset(metrics=frames))), "PD901") == []


def test_decode_received_no_prompt_tokens() -> None:
    frames = [counter("decode-0", S.PROMPT_TOKENS_TOTAL, TS, np.arange(TS.size) * 3e4),
              counter("decode-0", S.KV_RECEIVED_TOKENS_TOTAL, TS, np.zeros(TS.size)),
              counter("decode-0", S.GENERATION_TOKENS_TOTAL, TS, np.arange(TS.size) * 4e3)]
    c = Cluster(duration_s=600, n_prefill=1, n_decode=1)
    ds = make_dataset(metrics=frames, instances=c.instances())
    [f] = only(RULE.evaluate(make_context(ds)), "PD901")
    assert "received almost no prompt KV" in f.summary and f.instances == ("decode-0",)


def test_records_without_kv_bytes() -> None:
    req = Cluster(duration_s=600).requests()
    req["kv_bytes"] = 0.0
    [f] = only(RULE.evaluate(make_context(make_dataset(req))), "PD901")
    assert f.severity is Severity.CRITICAL and "moved no KV bytes" in f.summary


def test_prefill_instance_generating_whole_answers_is_in_the_wrong_role() -> None:
    c = Cluster(duration_s=600, n_prefill=3, n_decode=2)
    frames = []
    for p, per in (("prefill-0", 1.0), ("prefill-1", 150.0), ("prefill-2", 1.0)):
        frames += [counter(p, S.REQUESTS_FINISHED_TOTAL, TS, np.arange(TS.size) * 4.0),
                   counter(p, S.GENERATION_TOKENS_TOTAL, TS, np.arange(TS.size) * 4.0 * per)]
    ds = make_dataset(metrics=frames, instances=c.instances())
    [f] = only(RULE.evaluate(make_context(ds)), "PD901")
    assert f.instances == ("prefill-1",) and "registered as prefill" in f.summary
    assert f.severity is Severity.WARNING  # a third of the prefill instances' requests
