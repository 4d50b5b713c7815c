"""pdprobe check's per-rule verdicts come from the rules' own input declarations."""

from __future__ import annotations

from pdprobe import signals as S
from pdprobe.rules.catalog import ALL_RULES
from pdprobe.services.check import capabilities


def test_capabilities_follow_the_rule_declarations() -> None:
    by_role = {"prefill": ["p0", "p1"], "decode": ["d0", "d1"]}
    everything = frozenset(s for r in ALL_RULES for n in r.inputs.live for s in n.signals)
    caps = {c.code: c for c in capabilities(everything, by_role)}
    assert set(caps) == {r.code for r in ALL_RULES}
    assert all(c.verdict == "yes" for c in caps.values())
    none = {c.code: c for c in capabilities(frozenset(), by_role)}
    assert none["PD202"].verdict == "no" and "decode KV usage" in none["PD202"].reason
    partial = {c.code: c for c in capabilities(frozenset({S.KV_USAGE_RATIO}), by_role)}
    assert partial["PD202"].verdict == "partial"


def test_roles_and_peers_are_required_as_declared() -> None:
    everything = frozenset(s for r in ALL_RULES for n in r.inputs.live for s in n.signals)
    caps = {c.code: c for c in capabilities(everything, {"decode": ["d0"]})}
    assert caps["PD101"].verdict == "no" and "prefill" in caps["PD101"].reason
    assert caps["PD601"].verdict == "no" and "two or more" in caps["PD601"].reason
