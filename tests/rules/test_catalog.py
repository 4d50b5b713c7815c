"""The catalog: stable codes, every contract cause covered, explanations that say enough."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pdprobe.rules.base import CAUSES, Finding
from pdprobe.rules.catalog import ALL_RULES, find_rules, render_explanation

SECTIONS = ("What it means", "Why it matters in a disaggregated deployment",
            "Evidence it uses", "What to do")


def test_every_rule_module_holds_its_rule_and_has_its_test() -> None:
    """The catalog is what the pdNNN_* modules declare; each has its test file."""
    root = Path(__file__).resolve().parents[2]
    modules = sorted(p.stem for p in (root / "pdprobe" / "rules").glob("pd[0-9][0-9][0-9]_*.py"))
    assert [r.__module__.rsplit(".", 1)[-1] for r in ALL_RULES] == modules
    codes = [r.code for r in ALL_RULES]
    assert codes == sorted(codes) and len(set(codes)) == len(codes)
    assert all(m.startswith(r.code.lower() + "_") for m, r in zip(modules, ALL_RULES, strict=True))
    assert len({r.name for r in ALL_RULES}) == len(ALL_RULES)
    for module in modules:
        assert (root / "tests" / "rules" / f"test_{module}.py").exists(), module


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_inputs_are_declared_once_and_known_to_the_registry(rule: type) -> None:
    from pdprobe.analysis.evidence.registry import describe

    assert rule.requires == rule.inputs.needs and rule.inputs.needs
    assert rule.inputs.evidence, "declare the evidence the rule reads"
    for ref in rule.inputs.evidence:
        describe(ref)
    assert rule().inconclusive().needs == "; or ".join(rule.inputs.needs)


def test_every_contract_cause_has_a_rule() -> None:
    assert {r.cause for r in ALL_RULES} == set(CAUSES)


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_explanation_has_title_sections_thresholds_and_inputs(rule: type) -> None:
    text = render_explanation(rule)
    head = text.splitlines()[0]
    assert head.startswith(f"{rule.code} {rule.name}: ")
    assert f"cause: {rule.cause}" in text and f"component: {rule.component}" in text
    for section in SECTIONS:
        assert section in text, (rule.code, section)
    # Thresholds are named and justified in the text (at least one number with a unit or %).
    assert re.search(r"\d+(\.\d+)? ?(%|s\b|x\b|requests)", text)
    for need in rule.requires:
        assert f"  - {need}" in text


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_find_rules_by_code_cause_or_name(rule: type) -> None:
    """Lookups read the registry: a new rule is found without editing this test."""
    assert find_rules(rule.code) == [rule]
    assert find_rules(rule.code.lower()) == [rule]
    assert rule in find_rules(rule.name)  # a name may also be a cause (PD301)
    assert find_rules(rule.cause) == [r for r in ALL_RULES if r.cause == rule.cause]


def test_find_rules_without_a_match() -> None:
    assert find_rules("nothing") == []


def test_rules_read_only_the_evidence_they_declare(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every evidence column a rule reads on the shared scenarios is in its ``inputs``: the
    declaration that drives "not judged", ``pdprobe check`` and the docs is the truth."""
    import pdprobe.analysis.evidence.model as model
    from tests.rules.builders import SCENARIOS, scenario_context

    contexts = [scenario_context(name, mix) for name in SCENARIOS for mix in ("all", "logs")]
    read: list[str] = []
    declared_spec = model.spec

    def recording_spec(table: str, name: str) -> object:
        read.append(f"{table}.{name}")
        return declared_spec(table, name)  # type: ignore[arg-type]

    monkeypatch.setattr(model, "spec", recording_spec)
    for rule in ALL_RULES:
        read.clear()
        for ctx in contexts:
            rule().evaluate(ctx)
        assert set(read) <= set(rule.inputs.evidence), (rule.code, sorted(
            set(read) - set(rule.inputs.evidence)))


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_every_rule_is_silent_on_a_healthy_cluster(rule: type) -> None:
    """The shared "does not fire" fixture every rule, present and future, must pass: a
    healthy simulated cluster with every input kind, no SLO given and no capacity model."""
    from tests.rules.builders import scenario_context

    results = rule().evaluate(scenario_context("healthy"))
    assert not [r for r in results if isinstance(r, Finding)], results


def test_explain_and_rules_commands() -> None:
    from typer.testing import CliRunner

    from pdprobe.cli.app import app

    runner = CliRunner()
    res = runner.invoke(app, ["explain", "PD202"])
    assert res.exit_code == 0
    assert res.stdout.startswith("PD202 decode-kv-starvation: Decode KV starvation")
    assert "sglang #6351" in res.stdout
    res = runner.invoke(app, ["explain", "no-rdma"])
    assert res.exit_code == 0 and "PD402 no-rdma" in res.stdout
    res = runner.invoke(app, ["rules"])
    assert res.exit_code == 0
    lines = res.stdout.strip().splitlines()
    assert len(lines) == len(ALL_RULES)
    first = ALL_RULES[0]
    assert lines[0].startswith(f"{first.code}  {first.cause}")
