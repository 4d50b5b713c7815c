"""PD801 slo-miss: an SLO miss is always a finding, and its time decomposition names the cause."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdprobe import signals as S
from pdprobe.dataset import InstanceInfo
from pdprobe.report.model import status_for
from pdprobe.rules.base import Finding, Inconclusive, Severity
from pdprobe.rules.engine import rank
from pdprobe.rules.pd801_slo_miss import SloMiss
from tests.rules.builders import histogram, make_context, make_dataset, only

RULE = SloMiss()
N = 400


def _requests(*, miss_share: float, stage: str = "queue", excess_s: float = 3.0,
              tpot_s: float = 0.02, seed: int = 0, burst: bool = False) -> pd.DataFrame:
    """Requests of 0.2 s queue, 0.4 s prefill, 0.05 s transfer, 0.05 s admission; the first
    ``miss_share`` of them (or those in a burst) get ``excess_s`` more in ``stage``."""
    rng = np.random.default_rng(seed)
    arrival = rng.uniform(0, 600, N)
    if burst:  # a fifth of the requests crowd into one minute: they are the ones that miss
        arrival[: N // 5] = rng.uniform(300, 360, N // 5)
    arrival = np.sort(arrival)
    parts = {"queue": np.full(N, 0.2), "prefill": np.full(N, 0.4),
             "kv-transfer": np.full(N, 0.05), "decode-admission": np.full(N, 0.05)}
    hit = (arrival > 300) & (arrival < 360) if burst else rng.random(N) < miss_share
    parts[stage] = parts[stage] + np.where(hit, excess_s, 0.0)
    ttft = sum(parts.values())
    return pd.DataFrame({
        "arrival_ts": arrival, "prompt_tokens": 1000, "output_tokens": 100,
        "queue_s": parts["queue"], "prefill_s": parts["prefill"],
        "kv_transfer_s": parts["kv-transfer"], "ttft_s": ttft, "tpot_s": tpot_s,
        "status": "ok"})


def _ctx(req: pd.DataFrame, **kw: float):  # type: ignore[no-untyped-def]
    return make_context(make_dataset(req), slo_ttft_s=kw.get("ttft", 2.0),
                        slo_tpot_s=kw.get("tpot", 0.1))


def test_queue_excess_names_prefill_bound() -> None:
    [f] = only(RULE.evaluate(_ctx(_requests(miss_share=0.3))), "PD801")
    assert f.cause == "prefill-bound" and f.severity is Severity.WARNING
    assert "SLO missed" in f.summary and "the wait before prefill holds" in f.summary
    assert "target of 90.0%" in f.summary.replace(" %", "%")
    att = next(e for e in f.evidence if e.what.startswith("SLO attainment"))
    assert 60 < float(att.value) < 80 and att.baseline == 90
    assert f.confidence >= 0.9  # the queue holds all of the excess


def test_transfer_excess_names_kv_transfer() -> None:
    [f] = only(RULE.evaluate(_ctx(_requests(miss_share=0.3, stage="kv-transfer"))), "PD801")
    assert f.cause == "kv-transfer-bandwidth" and f.component == "kv-connector"


def _decode_short(dep_d: int = 1, ud: float = 1.48, ux: float = 0.12):  # type: ignore[no-untyped-def]
    """The capacity model at 8P:1D of the backtest's Azure conversation x5 decode-short case:
    decode at 148 % of its capacity, the links at 12 % of their usable bandwidth."""
    from dataclasses import replace

    from tests.rules.builders import capacity

    return replace(capacity(rec_p=8, rec_d=2, dep_p=8, dep_d=dep_d, binding="decode"),
                   binding_basis="deployed counts", deployed_decode_utilization=ud,
                   deployed_transfer_utilization=ux, transfer_utilization=ux / 2)


def test_transfer_excess_of_a_saturated_decode_pool_is_decode_bound() -> None:
    """KV handed to a decode pool at 148 % of its capacity waits there, so the transfer stage
    holds the excess; the links are idle: decode-bound (the backtest named it
    kv-transfer-bandwidth in two decode-short cases)."""
    req = _requests(miss_share=0.3, stage="kv-transfer")
    ctx = make_context(make_dataset(req), slo_ttft_s=2.0, slo_tpot_s=0.1,
                       capacity=_decode_short())
    [f] = only(RULE.evaluate(ctx), "PD801")
    assert f.cause == "decode-bound" and "decode runs at 148.0%" in f.summary.replace(" %", "%")
    # decode within its capacity: the transfer itself is slow
    ctx = make_context(make_dataset(req), slo_ttft_s=2.0, slo_tpot_s=0.1,
                       capacity=_decode_short(ud=0.7))
    [f] = only(RULE.evaluate(ctx), "PD801")
    assert f.cause == "kv-transfer-bandwidth"


def test_admission_excess_names_decode_bound() -> None:
    [f] = only(RULE.evaluate(_ctx(_requests(miss_share=0.3, stage="decode-admission"))),
               "PD801")
    assert f.cause == "decode-bound"


def test_tpot_miss_is_decode_bound() -> None:
    [f] = only(RULE.evaluate(_ctx(_requests(miss_share=0.0, tpot_s=0.2))), "PD801")
    assert f.cause == "decode-bound" and f.severity is Severity.CRITICAL  # nobody meets TPOT


def test_met_target_gives_nothing_and_no_data_is_not_judged() -> None:
    assert RULE.evaluate(_ctx(_requests(miss_share=0.05))) == []
    bare = _requests(miss_share=0.0).drop(columns=["ttft_s", "tpot_s"])
    [inc] = RULE.evaluate(_ctx(bare))
    assert isinstance(inc, Inconclusive)


def test_misses_in_bursts_are_said_so() -> None:
    [f] = only(RULE.evaluate(_ctx(_requests(miss_share=0.2, burst=True))), "PD801")
    assert "came in bursts" in f.summary
    [g] = only(RULE.evaluate(_ctx(_requests(miss_share=0.3))), "PD801")
    assert "bursts" not in g.summary


def test_default_objectives_are_named() -> None:
    from pdprobe.analysis.evidence.build import compute_evidence
    from pdprobe.analysis.slo import slo_attainment
    from pdprobe.rules.base import RuleContext
    from pdprobe.values import Missing

    ds = make_dataset(_requests(miss_share=0.3))
    slo = slo_attainment(ds, None, None, 0.9, defaults=True)
    assert not isinstance(slo, Missing) and slo.defaulted == ("ttft", "tpot")
    ev = compute_evidence(ds, workload=Missing("x"), slo=slo, capacity=Missing("x"))
    ctx = RuleContext(dataset=ds, workload=Missing("x"), instances=(), slo=slo,
                      capacity=Missing("x"), evidence=ev)
    [f] = only(RULE.evaluate(ctx), "PD801")
    assert "(default objectives)" in f.summary


def test_from_histograms_when_there_are_no_records() -> None:
    """vLLM's decode-side TTFT and prefill-side queue/prefill histograms (no request records)."""
    rng = np.random.default_rng(1)
    ts = np.sort(rng.uniform(0, 600, N))
    scrapes = np.arange(0, 615, 15.0)
    queue = np.where(rng.random(N) < 0.4, 4.0, 0.1)
    prefill = np.full(N, 0.3)
    frames = [histogram("p0", S.QUEUE_S, ts, queue, scrapes),
              histogram("p0", S.PREFILL_S, ts, prefill, scrapes),
              histogram("d0", S.TTFT_S, ts, queue + prefill + 0.05, scrapes)]
    inst = (InstanceInfo("p0", "prefill", "label"), InstanceInfo("d0", "decode", "label"))
    ds = make_dataset(metrics=frames, instances=inst)
    [f] = only(RULE.evaluate(make_context(ds, slo_ttft_s=2.0)), "PD801")
    assert f.cause == "prefill-bound"
    assert "of the mean TTFT" in f.summary  # histogram means, not a met/missed split
    assert any("histogram" in e.source for e in f.evidence)


def test_single_scrape_reads_histograms_since_start() -> None:
    rng = np.random.default_rng(2)
    ts = np.sort(rng.uniform(0, 600, N))
    ttft = np.where(rng.random(N) < 0.5, 5.0, 0.5)
    frame = histogram("d0", S.TTFT_S, ts, ttft, np.array([600.0]))
    ds = make_dataset(metrics=[frame], instances=(InstanceInfo("d0", "decode", "label"),))
    [f] = only(RULE.evaluate(make_context(ds, slo_ttft_s=2.0)), "PD801")
    assert "since engine start" in f.summary


def test_a_straggler_explains_the_miss() -> None:
    slo = Finding(code="PD801", cause="prefill-bound", severity=Severity.WARNING,
                  confidence=0.9, summary="SLO missed")
    strag = Finding(code="PD601", cause="straggler", severity=Severity.WARNING, confidence=0.7,
                    summary="p1 is slow", instances=("p1",))
    ranked = rank([slo, strag])
    assert ranked[0].code == "PD601" and ranked[0].consequences == ("PD801",)
    assert not ranked[1].is_root_cause and "consequence of PD601" in ranked[1].summary


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(miss=st.floats(0.0, 0.6), target=st.floats(0.5, 0.99),
       stage=st.sampled_from(["queue", "prefill", "kv-transfer", "decode-admission"]))
def test_observed_attainment_below_target_is_never_ok(miss: float, target: float,
                                                       stage: str) -> None:
    from dataclasses import replace

    ctx = _ctx(_requests(miss_share=miss, stage=stage, seed=3))
    ctx = replace(ctx, evidence=replace(ctx.evidence,
                                        slo=replace(ctx.evidence.slo, target=target)))
    results = RULE.evaluate(ctx)
    findings = tuple(r for r in results if isinstance(r, Finding))
    status = status_for(rank(findings), judged=True)
    observed = ctx.evidence.slo.observed
    assert observed is not None
    if observed < target:
        assert status != "ok"
    else:
        assert findings == ()


def test_verify_below_target_is_a_warning_even_when_the_window_met_it() -> None:
    """--verify simulated the recommendation at 60 % (TTFT the lower): a warning naming it,
    exit 1 rather than 0; with an observed miss too, the one finding says both."""
    from dataclasses import replace

    from pdprobe.analysis.base import SloAttainment
    from tests.rules.builders import capacity

    ver = SloAttainment(ttft_slo_s=2.0, tpot_slo_s=0.1, ttft=0.6, tpot=0.99, both=0.6,
                        method="simulation of 400 requests on 2P:2D")
    cap = replace(capacity(rec_p=2, rec_d=2, dep_p=2, dep_d=2), verified=ver)
    ctx = make_context(make_dataset(_requests(miss_share=0.05)), slo_ttft_s=2.0,
                       slo_tpot_s=0.1, capacity=cap)
    [f] = only(RULE.evaluate(ctx), "PD801")
    assert f.severity is Severity.WARNING and f.cause == "prefill-bound"
    assert "The recommended 2P:2D meets the objectives for only 60" in f.summary
    assert status_for((f,)) == "warning"
    ctx = make_context(make_dataset(_requests(miss_share=0.3)), slo_ttft_s=2.0,
                       slo_tpot_s=0.1, capacity=cap)
    [f] = only(RULE.evaluate(ctx), "PD801")
    assert f.summary.startswith("SLO missed") and "the recommended 2P:2D meets" in f.summary
