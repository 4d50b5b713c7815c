"""PD701 ratio-lag: a length-mix shift the deployed P/D ratio did not follow."""

from __future__ import annotations

import pytest

from pdprobe.analysis.base import RatioWindow
from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd701_ratio_lag import RatioLag
from tests.rules.builders import T0, Cluster, capacity, only, ramp, scenario_context, step

RULE = RatioLag()


def test_prompt_shift_with_prefill_pressure_and_no_scaling() -> None:
    [f] = only(RULE.evaluate(scenario_context("ratio")), "PD701")
    assert f.cause == "ratio-lag" and f.component == "scheduler/predictor"
    assert f.severity is Severity.WARNING
    assert f.summary.startswith("The prompt lengths rose by")
    assert "the deployed ratio did not follow for the remaining 5m00s" in f.summary
    assert "prefill pressure rose after the shift" in f.summary
    shift = f.evidence[0]
    assert shift.what == "mean prompt length after the shift"
    assert float(shift.value) == pytest.approx(3000, rel=0.1)
    assert float(shift.baseline) == pytest.approx(800, rel=0.1)  # type: ignore[arg-type]
    assert shift.window_start_ts == pytest.approx(T0 + 300, abs=15)
    deployed = next(e for e in f.evidence if e.what.startswith("deployed prefill/decode"))
    assert (deployed.value, deployed.baseline) == ("2P:4D", "2P:4D")
    assert f.instances == ("prefill-0", "prefill-1")


def test_deployment_that_follows_promptly_is_fine() -> None:
    c = Cluster(duration_s=600, n_prefill=4, prompt_mean=step(800, 3000, at=0.5),
                deployed_prefill=step(2, 4, at=0.5))
    assert RULE.evaluate(c.context()) == []


def test_deployment_that_follows_late_is_reported() -> None:
    c = Cluster(duration_s=600, n_prefill=4, prompt_mean=step(800, 3000, at=0.4),
                deployed_prefill=step(2, 4, at=0.85),
                prefill_queue=step(0.3, 25, at=0.45))
    [f] = only(RULE.evaluate(c.context()), "PD701")
    assert "the deployed ratio followed only after 4m30s" in f.summary


def test_output_shift_moves_the_need_towards_decode() -> None:
    c = Cluster(duration_s=600, output_mean=step(150, 600, at=0.5),
                tpot_s=step(0.03, 0.06, at=0.5))
    [f] = only(RULE.evaluate(c.context(("requests",))), "PD701")
    assert f.summary.startswith("The output lengths rose")
    assert "decode pressure rose after the shift" in f.summary
    assert f.instances == ("decode-0", "decode-1", "decode-2", "decode-3")


def test_capacity_windows_give_the_needed_ratio() -> None:
    windows = tuple(
        RatioWindow(start_ts=T0 + s, end_ts=T0 + s + 100, theoretical_ratio=r,
                    recommended_prefill=p, recommended_decode=4, deployed_prefill=2,
                    deployed_decode=4, arrival_rate_rps=8.0, mean_prompt_tokens=0.0,
                    mean_output_tokens=0.0)
        for s, r, p in ((0, 0.5, 2), (100, 0.5, 2), (200, 0.5, 2), (300, 1.4, 6),
                        (400, 1.4, 6), (500, 1.4, 6)))
    cap = capacity(rec_p=6, rec_d=4, dep_p=2, dep_d=4, windows=windows)
    [f] = only(RULE.evaluate(scenario_context("ratio", capacity=cap)), "PD701")
    need = next(e for e in f.evidence if e.what == "theoretical P/D ratio after the shift")
    assert (need.value, need.baseline) == (1.4, 0.5)
    mism = next(e for e in f.evidence if e.what.startswith("capacity windows after the shift"))
    assert mism.value == 3 and "recommended 6P:4D, deployed 2P:4D" in mism.source
    assert f.next_steps[0].startswith("Set 6P:4D")


def test_gradual_drift_and_noise_are_not_shifts() -> None:
    assert RULE.evaluate(scenario_context("healthy")) == []
    c = Cluster(duration_s=600, prompt_mean=ramp(1400, 1600))
    assert RULE.evaluate(c.context(("requests",))) == []


def test_engine_logs_show_the_shift_through_throughput() -> None:
    [f] = only(RULE.evaluate(scenario_context("ratio", "logs")), "PD701")
    assert f.summary.startswith("The prompt-to-output token mix rose by")
    work = f.evidence[0]
    assert work.what == "prompt tokens per output token after the shift"
    # 800 -> 3000 prompt tokens over 200 output tokens (the lognormal mean of both is kept).
    assert float(work.value) / float(work.baseline) == pytest.approx(3.75, rel=0.2)  # type: ignore[arg-type]
    assert "engine throughput" in work.source


def test_inconclusive_without_lengths_over_time() -> None:
    from tests.rules.builders import SCENARIOS, make_context, make_dataset

    c = SCENARIOS["ratio"]
    [res] = RULE.evaluate(make_context(make_dataset(network=c.network_frames())))
    assert isinstance(res, Inconclusive) and "prompt/output lengths" in res.needs


def test_a_shift_within_the_series_own_wandering_is_not_a_shift() -> None:
    """A mean length that swings by half from quarter to quarter before the split: a further
    swing of the same size is the series wandering, not a new level."""
    def wander(x):  # type: ignore[no-untyped-def]
        import numpy as np
        return np.where(x < 0.5, np.where((x * 8).astype(int) % 2 == 0, 900.0, 1500.0), 1500.0)

    c = Cluster(duration_s=600, n_prefill=2, prompt_mean=wander,
                prefill_queue=step(0.3, 25, at=0.5))
    assert only(RULE.evaluate(c.context(("requests",))), "PD701") == []


def test_a_move_within_one_instance_is_not_ratio_lag() -> None:
    """Outputs 33 % longer at 2P:2D: the decode pool needs 0.7 of an instance more, within
    one instance's worth of the deployed split, even with decode pressure after it."""
    c = Cluster(duration_s=600, n_prefill=2, n_decode=2, output_mean=step(150, 200, at=0.5),
                tpot_s=step(0.03, 0.06, at=0.5))
    assert only(RULE.evaluate(c.context(("requests",))), "PD701") == []


def test_a_shift_nothing_suffered_from_is_not_ratio_lag() -> None:
    """Prompts triple and the ratio stays, but no pool shows pressure: no finding (before,
    a needed-ratio move of 50 % alone gave a warning)."""
    c = Cluster(duration_s=600, n_prefill=4, prompt_mean=step(800, 3000, at=0.5))
    assert only(RULE.evaluate(c.context(("requests",))), "PD701") == []


def test_a_shift_the_objective_still_held_through_is_not_ratio_lag() -> None:
    """Outputs quadruple and TPOT doubles after the shift (decode pressure), but every request
    still meets a 0.1 s TPOT objective: the counts absorbed the new mix (the backtest's Azure
    conversation x5 at its adequate 8P:2D, where the prefill queue rose 1.5x at 100 %
    attainment). Against a 0.05 s objective the same shift is a finding, with the
    after-shift attainment as evidence."""
    c = Cluster(duration_s=600, output_mean=step(150, 600, at=0.5),
                tpot_s=step(0.03, 0.06, at=0.5))
    assert only(RULE.evaluate(c.context(("requests",), slo_tpot_s=0.1)), "PD701") == []
    [f] = only(RULE.evaluate(c.context(("requests",), slo_tpot_s=0.05)), "PD701")
    after = next(e for e in f.evidence
                 if e.what == "requests within the TPOT objective after the shift")
    assert float(after.value) < 50 and after.baseline == 90


def test_falling_outputs_do_not_explain_prefill_pressure_with_nothing_to_move() -> None:
    """Outputs fall by a third at 4P:2D while the prefill queue grows: the decode pool could
    give up 0.7 of an instance, so the prefill pressure is not the mix's doing (the backtest's
    Azure conversation x5 at one prefill short, whose arrivals rose 31 % at the same time).
    With 4 decode instances there is more than one to move across: ratio-lag."""
    kw = dict(duration_s=600, n_prefill=4, output_mean=step(240, 156, at=0.5),
              prefill_queue=step(0.3, 25, at=0.5))
    assert only(RULE.evaluate(Cluster(n_decode=2, **kw).context(("requests",))),  # type: ignore[arg-type]
                "PD701") == []
    [f] = only(RULE.evaluate(Cluster(n_decode=4, **kw).context(("requests",))), "PD701")  # type: ignore[arg-type]
    assert f.summary.startswith("The output lengths fell")


def test_the_extra_instances_are_evidence() -> None:
    [f] = only(RULE.evaluate(scenario_context("ratio")), "PD701")
    extra = next(e for e in f.evidence if e.what == "extra prefill instances the new mix needs")
    assert float(extra.value) > 1.0 and extra.baseline == 1.0


# Shorter than the matrix's 240 s would hide the drift: the Azure conversation trace's prompts
# drift by a third in its fourth minute (a PD701 before the swing and one-instance tests).
TRACE_S = 240.0
_TRACES = ("AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv",
           "mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("trace", _TRACES)
def test_real_traces_at_a_constant_adequate_ratio_never_fire(trace: str, traces_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The public traces (../shared/traces: Azure LLM inference 2023 code/conversation,
    Mooncake conversation/synthetic, read in place) replayed by the simulator at the matrix's
    healthy counts and never rescaled: their natural length drift is no ratio-lag."""
    from dataclasses import replace

    scenarios = pytest.importorskip("pdprobe.sim.scenarios")
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose

    base = traces_dir  # the conftest fixture: skipped without the traces, fails in CI
    for load in ("healthy-low", "healthy-high"):
        cfg = scenarios.build_scenario(load, trace=base / trace)
        out = tmp_path / load
        scenarios.run_to_dir(replace(cfg, duration_s=TRACE_S), out)
        report = diagnose(DiagnoseRequest(paths=(out,)))
        assert not [f for f in report.findings if f.code == "PD701"], (
            load, [(f.code, f.severity.value, f.summary) for f in report.findings])


# --- controller audit (issue 13 item 4): the planner's own view of the shift ----------------

def _planner_windows(pred: list[float], cur: list[float], width: float = 120.0):
    from types import SimpleNamespace

    wins = [SimpleNamespace(start_ts=i * width, end_ts=(i + 1) * width,
                            planner_predicted_decode=p, planner_decode=c)
            for i, (p, c) in enumerate(zip(pred, cur, strict=True))]
    return SimpleNamespace(windows=tuple(wins))


def test_planner_audit_says_the_actuation_lagged():
    """Predicted decode replicas move at the shift, the deployed ones do not follow
    (the dynamo_planner.om scenario, tests/fixtures/metrics/families/)."""
    from pdprobe.rules.ratio_lag_measure import planner_audit

    cap = _planner_windows([2, 2, 4, 4, 4], [2, 2, 2, 2, 2])
    text, evidence = planner_audit(cap, 240.0, "decode")
    assert "recommended 4 decode" in text and "actuation lagged" in text
    assert [e.value for e in evidence] == [4.0, 2.0]


def test_planner_audit_says_the_recommendation_lagged():
    from pdprobe.rules.ratio_lag_measure import planner_audit

    text, _ = planner_audit(_planner_windows([2, 2, 2, 2, 2], [2, 2, 2, 2, 2]), 240.0, "decode")
    assert "recommendation stayed at 2 decode" in text and "prediction lagged" in text
    late, _ = planner_audit(_planner_windows([2, 2, 2, 2, 4, 4], [2, 2, 2, 2, 2, 4]), 240.0,
                            "decode")
    assert "recommendation lagged more" in late


def test_planner_audit_is_silent_without_planner_data():
    from pdprobe.rules.ratio_lag_measure import planner_audit

    assert planner_audit(None, 240.0, "decode") == ("", [])
