"""The engine: every rule over a context, merged by cause, roots first, deterministic."""

from __future__ import annotations

import dataclasses

import pytest

from pdprobe.rules import engine
from pdprobe.rules.base import Evidence, Finding, Severity
from pdprobe.rules.engine import EXPLAINS, PRECEDENCE, rank, run_rules
from tests.rules.builders import INPUT_MIXES, SCENARIOS, scenario_context


def _f(code: str, cause: str, severity: Severity = Severity.WARNING, confidence: float = 0.7,
       instances: tuple[str, ...] = (), evidence: tuple[Evidence, ...] = ()) -> Finding:
    return Finding(code=code, cause=cause, severity=severity, confidence=confidence,  # type: ignore[arg-type]
                   summary=f"{code} summary", instances=instances, evidence=evidence,
                   next_steps=(f"{code} step",))


def test_same_cause_merges_into_one_finding() -> None:
    a = _f("PD201", "decode-bound", Severity.INFO, 0.4, ("d0",),
           (Evidence("kv", 99.0, "%"),))
    b = _f("PD202", "decode-bound", Severity.CRITICAL, 0.8, ("d1",),
           (Evidence("prealloc", 8.0),))
    [m] = rank([a, b])
    assert m.code == "PD202" and m.severity is Severity.CRITICAL
    assert m.instances == ("d0", "d1")
    assert m.confidence == pytest.approx(0.85)
    assert [e.what for e in m.evidence] == ["prealloc", "also indicated by", "kv"]
    assert m.evidence[1].value == "PD201: PD201 summary"
    assert m.next_steps == ("PD202 step", "PD201 step")


def test_root_cause_leads_and_consequences_point_back() -> None:
    rdma = _f("PD401", "rdma-retransmits", Severity.WARNING, 0.7, ("p0",))
    xfer = _f("PD301", "kv-transfer-bandwidth", Severity.CRITICAL, 0.9)
    pre = _f("PD101", "prefill-bound", Severity.WARNING, 0.9, ("p0", "p1"))
    out = rank([pre, xfer, rdma])
    assert [f.code for f in out] == ["PD401", "PD301", "PD101"]
    root = out[0]
    assert root.is_root_cause and root.consequences == ("PD301", "PD101")
    assert root.severity is Severity.CRITICAL  # the impact it causes
    assert not out[1].is_root_cause and not out[2].is_root_cause
    assert out[1].summary.endswith("(a consequence of PD401, rdma-retransmits)")


def test_info_findings_explain_nothing_and_instance_conditions_hold() -> None:
    rdma = _f("PD401", "rdma-retransmits", Severity.INFO, 0.3, ("p0",))
    pre = _f("PD101", "prefill-bound", Severity.WARNING, 0.9, ("p0",))
    assert all(f.is_root_cause for f in rank([rdma, pre]))
    # routing-skew explains decode-bound only on overlapping instances.
    skew = _f("PD501", "routing-skew", Severity.WARNING, 0.9, ("d0",))
    other = _f("PD201", "decode-bound", Severity.WARNING, 0.9, ("d3",))
    assert all(f.is_root_cause for f in rank([skew, other]))
    same = _f("PD201", "decode-bound", Severity.WARNING, 0.9, ("d0",))
    assert [f.is_root_cause for f in rank([skew, same])] == [True, False]
    # A weakly supported upstream does not demote a well-supported finding.
    lag = _f("PD701", "ratio-lag", Severity.WARNING, 0.55)
    dec_sure = _f("PD201", "decode-bound", Severity.WARNING, 0.9)
    assert all(f.is_root_cause for f in rank([lag, dec_sure]))
    lag_sure = _f("PD701", "ratio-lag", Severity.WARNING, 0.7)
    assert [f.is_root_cause for f in rank([lag_sure, dec_sure])] == [True, False]
    # decode-bound explains prefill-bound only through starvation (PD202).
    dec = _f("PD201", "decode-bound")
    assert all(f.is_root_cause for f in rank([dec, pre]))
    starve = _f("PD202", "decode-bound")
    assert [f.code for f in rank([starve, pre]) if f.is_root_cause] == ["PD202"]


def test_graph_points_down_the_precedence_order() -> None:
    order = {c: i for i, c in enumerate(PRECEDENCE)}
    assert all(order[e.src] < order[e.dst] for e in EXPLAINS)


def test_ranking_is_deterministic_whatever_the_input_order() -> None:
    fs = [_f("PD601", "straggler", Severity.WARNING, 0.7, ("d1",)),
          _f("PD501", "routing-skew", Severity.WARNING, 0.7, ("d0",)),
          _f("PD701", "ratio-lag", Severity.INFO, 0.4),
          _f("PD101", "prefill-bound", Severity.CRITICAL, 0.9, ("p0",))]
    first = rank(fs)
    assert rank(list(reversed(fs))) == first
    assert [f.code for f in first] == ["PD101", "PD501", "PD601", "PD701"]


def test_a_broken_rule_becomes_inconclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdprobe.rules import catalog
    from pdprobe.rules.pd601_straggler import Straggler

    class Broken(Straggler):
        def evaluate(self, ctx):  # type: ignore[no-untyped-def]
            raise ZeroDivisionError("boom")

    monkeypatch.setattr(catalog, "ALL_RULES", (Broken,))
    monkeypatch.delenv("PDPROBE_DEBUG", raising=False)
    findings, inconclusive = run_rules(scenario_context("healthy", "requests"))
    assert findings == ()
    assert inconclusive[0].code == "PD601" and "ZeroDivisionError: boom" in inconclusive[0].needs
    monkeypatch.setenv("PDPROBE_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        run_rules(scenario_context("healthy", "requests"))


@pytest.mark.parametrize("mix", sorted(INPUT_MIXES))
@pytest.mark.parametrize("name", ["healthy", "healthy-sglang"])
def test_healthy_clusters_get_no_warning(name: str, mix: str) -> None:
    findings, inconclusive = run_rules(scenario_context(name, mix))
    assert all(f.severity is Severity.INFO for f in findings), findings
    assert not any("internal error" in i.needs for i in inconclusive)


EXPECTED = {
    "prefill": "prefill-bound", "decode": "decode-bound", "starve": "decode-bound",
    "starve-vllm": "decode-bound", "xfer-wait": "kv-transfer-bandwidth",
    "rdma": "rdma-retransmits", "tcp": "no-rdma", "skew": "routing-skew",
    "hit": "routing-skew", "straggler": "straggler", "ratio": "ratio-lag",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_top_finding_names_the_injected_cause(name: str) -> None:
    findings, _ = run_rules(scenario_context(name))
    assert findings and findings[0].cause == EXPECTED[name]
    assert findings[0].is_root_cause and findings[0].severity is not Severity.INFO
    # Every root cause listed once; consequences are never roots.
    roots = [f.cause for f in findings if f.is_root_cause]
    assert len(roots) == len(set(roots))


def test_misleading_symptoms_are_folded_under_their_root() -> None:
    findings, _ = run_rules(scenario_context("starve"))
    assert findings[0].code == "PD202" and "PD101" in findings[0].consequences
    pre = next(f for f in findings if f.code == "PD101")
    assert not pre.is_root_cause
    findings, _ = run_rules(scenario_context("hit"))
    assert findings[0].code == "PD502" and findings[0].consequences == ("PD101",)


def test_same_findings_every_run() -> None:
    ctx = SCENARIOS["skew"].context(INPUT_MIXES["all"])
    again = SCENARIOS["skew"].context(INPUT_MIXES["all"])
    assert run_rules(ctx) == run_rules(again)
    assert dataclasses.asdict(run_rules(ctx)[0][0]) == dataclasses.asdict(run_rules(again)[0][0])


def test_module_checks_reject_a_bad_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "EXPLAINS", (engine.Edge("prefill-bound", "no-rdma", "any"),))
    with pytest.raises(RuntimeError, match="points up"):
        engine._check_graph()


def test_a_second_pass_computes_only_the_rules_that_quote_the_capacity() -> None:
    """The service's second pass (the checked capacity quoted): a rule that did not read
    ``ctx.quoted`` in the first keeps its results; the ranked findings are those of judging
    the quoting context afresh."""
    from pdprobe.rules.engine import judge_rules
    from tests.rules.builders import capacity

    cap = capacity(rec_p=4, rec_d=4, dep_p=2, dep_d=4)
    checked = dataclasses.replace(cap, recommended_prefill=6, recommended_decode=5,
                                  needed_prefill=5, needed_decode=4)
    ctx = scenario_context("prefill", capacity=cap)
    first = judge_rules(ctx)
    quoting = dataclasses.replace(ctx, quoted_capacity=checked)
    again = judge_rules(quoting, earlier=first)
    fresh = judge_rules(quoting)
    assert (again.findings, again.inconclusive) == (fresh.findings, fresh.inconclusive)
    assert again.findings != first.findings  # the quoted counts changed
    read = [r for (_, r) in first.results]
    assert any(read) and not all(read)
    for (old, read_quoted), (new, _) in zip(first.results, again.results, strict=True):
        assert (new is old) is not read_quoted  # computed again exactly when it quoted
    # a context differing in anything else is judged afresh
    other = dataclasses.replace(quoting, options=dataclasses.replace(ctx.options))
    assert all(new is not old for (old, _), (new, _) in
               zip(first.results, judge_rules(other, earlier=first).results, strict=True))


def test_rules_read_the_quoted_capacity_only_through_ctx_quoted() -> None:
    """A style rule: rules read the quote through ``RuleContext.quoted`` (the one place that
    says which capacity a finding quotes). A direct read of the field is noted as well
    (next test), so it would not keep a stale quote; the rule keeps the reads in one place."""
    from pathlib import Path

    import pdprobe.rules

    for path in Path(pdprobe.rules.__file__).parent.glob("*.py"):
        if path.name not in ("base.py", "engine.py"):
            assert "quoted_capacity" not in path.read_text(), path.name


def test_any_read_of_the_quoted_capacity_is_noted() -> None:
    """A rule's view notes the field read directly as well as through ``quoted``; reading
    the capacity as built (the same in both passes) is not a read of the quote."""
    from pdprobe.rules.engine import _Watched
    from tests.rules.builders import capacity

    ctx = scenario_context("prefill", capacity=capacity(rec_p=4, rec_d=4, dep_p=2, dep_d=4))

    def view() -> _Watched:
        return _Watched(**{f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)})

    built = view()
    assert built.capacity is ctx.capacity and built.read_quoted == [False]
    direct = view()
    assert direct.quoted_capacity is None and direct.read_quoted == [True]
    through = view()
    assert through.quoted is ctx.capacity and through.read_quoted == [True]
