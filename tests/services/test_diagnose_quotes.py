"""``pdprobe diagnose`` end to end: every capacity count a finding quotes is the one the
report's capacity section shows, after the check against the window and the headroom."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from pdprobe.analysis.base import CapacityResult, SloAttainment
from pdprobe.report.model import Report
from pdprobe.services.diagnose import DiagnoseRequest, diagnose


def quote_disagreements(report: Report) -> list[str]:
    """Each count a finding quotes (its words, its steps, its evidence) that the capacity
    section does not show."""
    cap = report.capacity
    assert isinstance(cap, CapacityResult)
    rec = (cap.recommended_prefill, cap.recommended_decode)
    last = cap.windows[-1] if cap.windows else None
    out: list[str] = []
    for f in report.findings:
        for text in (f.summary, *f.next_steps):
            for m in re.finditer(r"Scale prefill to (\d+) inst", text):
                if int(m[1]) != rec[0]:
                    out.append(f"{f.code}: {m[0]!r}, capacity {rec[0]}")
            for m in re.finditer(r"Scale decode to (\d+) inst", text):
                if int(m[1]) != rec[1]:
                    out.append(f"{f.code}: {m[0]!r}, capacity {rec[1]}")
            for m in re.finditer(r"(?:recommended (\d+)P:(\d+)D)|(?:(\d+)P:(\d+)D recommended)",
                                 text):
                p, d = (m[1], m[2]) if m[1] else (m[3], m[4])
                if (int(p), int(d)) != rec:
                    out.append(f"{f.code}: {m[0]!r}, capacity {rec}")
            for m in re.finditer(r"Set (\d+)P:(\d+)D for the current mix", text):
                assert last is not None
                if (int(m[1]), int(m[2])) != (last.recommended_prefill, last.recommended_decode):
                    out.append(f"{f.code}: {m[0]!r}, last window "
                               f"{last.recommended_prefill}P:{last.recommended_decode}D")
        for e in f.evidence:
            pool = {"prefill instances recommended by the capacity model": 0,
                    "decode instances recommended by the capacity model": 1}.get(e.what)
            if pool is not None and e.value != rec[pool]:
                out.append(f"{f.code}: {e.what} {e.value}, capacity {rec[pool]}")
    return out


def test_the_bundled_sample_with_headroom_quotes_the_recommended_counts() -> None:
    """The sample's prefill finding quoted the model's 3P:1D while the capacity section,
    with one instance of headroom, recommends 4P:2D; the finding still says prefill is short
    by what meets the objective (3 needed, 2 deployed), not by the headroom."""
    report = diagnose(DiagnoseRequest(headroom=1))
    cap = report.capacity
    assert isinstance(cap, CapacityResult)
    assert (cap.needed_prefill, cap.recommended_prefill) == (3, 4)
    assert quote_disagreements(report) == []
    pd101 = next(f for f in report.findings if f.code == "PD101")
    assert "Scale prefill to 4 instances (4P:2D recommended" in pd101.next_steps[0]
    assert pd101.summary.startswith("Prefill is short by 1 instance")
    # short by 1 from 2 deployed is 3, not the 4 of the step: the step says why
    assert "3 meet the objective, plus 1 of --headroom" in pd101.next_steps[0]
    plain = diagnose(DiagnoseRequest())
    assert [(f.code, f.cause, f.severity) for f in plain.findings] == \
        [(f.code, f.cause, f.severity) for f in report.findings]


def test_min_instances_quotes_the_raised_counts() -> None:
    """``--min-instances 5``: the finding's step says 5, as the capacity section does."""
    report = diagnose(DiagnoseRequest(min_instances=5))
    cap = report.capacity
    assert isinstance(cap, CapacityResult) and cap.recommended_prefill == 5
    assert quote_disagreements(report) == []
    pd101 = next(f for f in report.findings if f.code == "PD101")
    assert "3 meet the objective, raised to --min-instances 5" in pd101.next_steps[0]


def test_no_headroom_leaves_the_findings_as_the_model_wrote_them() -> None:
    """Nothing raised, nothing re-planned: the rules run once (their words as before)."""
    from pdprobe.rules import engine

    calls = []
    original = engine.judge_rules

    def counted(ctx: object, earlier: object = None) -> object:
        calls.append(ctx)
        return original(ctx, earlier)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "judge_rules", counted)
        report = diagnose(DiagnoseRequest())
    assert len(calls) == 1
    assert quote_disagreements(report) == []


scenarios = pytest.importorskip("pdprobe.sim.scenarios")


@pytest.mark.slow
def test_a_count_the_recalibration_sets_is_the_one_the_finding_quotes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefill-bound cluster missing its TTFT objective, whose window-calibrated waits
    (stubbed: two more prefill than the model, the last window re-planned with them) set
    the recommendation: the prefill finding quoted the model's count (3P) beside a section
    recommending 5P; it now says 5, and is otherwise the model's finding."""
    from pdprobe.analysis import capacity as capacity_package
    from pdprobe.analysis.capacity.estimate import CapacityPlan

    real = capacity_package.estimate_plan

    def recalibrated_plan(*args: object, **kwargs: object) -> object:
        plan = real(*args, **kwargs)  # type: ignore[arg-type]
        assert isinstance(plan, CapacityPlan)
        cap = plan.result
        more = int(cap.recommended_prefill) + 2  # type: ignore[arg-type]
        model = replace(cap, recalibrated=True, wait_scale=2.0, calibrated_prefill=more)
        last = replace(cap.windows[-1], recommended_prefill=more)
        replanned = replace(model, recommended_prefill=more, windows=(*cap.windows[:-1], last))
        return CapacityPlan(model, lambda at_least: replanned if at_least <= more else None)

    scenarios.run_scenario("prefill-bound", tmp_path / "pb")
    plain = diagnose(DiagnoseRequest(paths=(tmp_path / "pb",)))
    monkeypatch.setattr(capacity_package, "estimate_plan", recalibrated_plan)
    report = diagnose(DiagnoseRequest(paths=(tmp_path / "pb",)))
    cap, before = report.capacity, plain.capacity
    assert isinstance(cap, CapacityResult) and isinstance(before, CapacityResult)
    assert cap.recommended_prefill == int(before.recommended_prefill) + 2  # type: ignore[arg-type]
    [pd101] = [f for f in report.findings if f.code == "PD101"]
    assert f"Scale prefill to {cap.recommended_prefill} instances" in pd101.next_steps[0]
    assert quote_disagreements(report) == []
    assert [(f.code, f.cause, f.severity, f.confidence) for f in report.findings] == \
        [(f.code, f.cause, f.severity, f.confidence) for f in plain.findings]


def test_verify_simulates_the_counts_the_section_shows() -> None:
    """``--verify`` replays the model's own counts inside the capacity model (the rules judge
    them); with ``--headroom`` the section recommends more, and its "verified" row is the
    replay of those (it described 3P/1D beside a 4P:2D recommendation)."""
    pytest.importorskip("pdprobe.sim.engine")
    raised = diagnose(DiagnoseRequest(verify=True, headroom=1)).capacity
    assert isinstance(raised, CapacityResult)
    assert (raised.recommended_prefill, raised.recommended_decode) == (4, 2)
    assert isinstance(raised.verified, SloAttainment)
    assert raised.verified.method.endswith("on 4P/2D (pdprobe.sim)")
    plain = diagnose(DiagnoseRequest(verify=True)).capacity
    assert isinstance(plain, CapacityResult) and isinstance(plain.verified, SloAttainment)
    assert (plain.recommended_prefill, plain.recommended_decode) == (3, 1)
    assert plain.verified.method.endswith("on 3P/1D (pdprobe.sim)")
    # more instances of each pool meet the objectives at least as often in the same replay
    assert raised.verified.both >= plain.verified.both  # type: ignore[operator]
