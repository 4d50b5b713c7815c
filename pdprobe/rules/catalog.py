"""The rule catalog: every rule, looked up by code, cause or name, and its explanation text.

Codes are stable and grouped by area: 1xx prefill, 2xx decode, 3xx KV transfer, 4xx network
fabric, 5xx routing, 6xx stragglers, 7xx ratio/planning, 8xx SLO, 9xx disaggregation in effect.
A code is never reused for another meaning; a retired rule keeps its code reserved.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Final

from pdprobe.rules.base import CAUSES, Rule

# A rule module is named after its code and slug: pd101_prefill_queue_growth.py.
RULE_MODULE: Final = re.compile(r"pd(\d{3})_\w+")


def _discover() -> tuple[type[Rule], ...]:
    """Every rule class in the ``pdprobe.rules.pdNNN_*`` modules, in code order.

    Adding a rule is adding its module (and its fixtures and test): nothing lists rules by hand.
    """
    import pdprobe.rules as package

    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(package.__path__):
        if not RULE_MODULE.fullmatch(info.name):
            continue
        module = importlib.import_module(f"pdprobe.rules.{info.name}")
        found += [obj for obj in vars(module).values()
                  if isinstance(obj, type) and issubclass(obj, Rule)
                  and obj.__module__ == module.__name__ and "code" in vars(obj)]
    return tuple(sorted(found, key=lambda r: r.code))


ALL_RULES: Final[tuple[type[Rule], ...]] = _discover()


def _check_catalog() -> None:
    """Codes and names unique, causes from the contract, module named after the code, every
    declared evidence reference known to the registry: a broken catalog fails at import."""
    from pdprobe.analysis.evidence.registry import describe

    codes = [r.code for r in ALL_RULES]
    slugs = [r.name for r in ALL_RULES]
    if len(set(codes)) != len(codes) or len(set(slugs)) != len(slugs):
        raise RuntimeError("duplicate rule code or name in pdprobe.rules.catalog")
    for r in ALL_RULES:
        if r.cause not in CAUSES:
            raise RuntimeError(f"rule {r.code} has unknown cause {r.cause!r}")
        module = r.__module__.rsplit(".", 1)[-1]
        if not module.startswith(r.code.lower() + "_"):
            raise RuntimeError(f"rule {r.code} lives in {module}.py: name it {r.code.lower()}_*")
        for ref in r.inputs.evidence:
            describe(ref)  # raises UnknownEvidence


_check_catalog()


def find_rules(code_or_cause: str) -> list[type[Rule]]:
    """Rules whose code (``PD101``, ``pd101``), cause (``prefill-bound``) or name matches."""
    key = code_or_cause.strip().lower()
    by_code = [r for r in ALL_RULES if r.code.lower() == key]
    if by_code:
        return by_code
    return [r for r in ALL_RULES if key in (r.cause, r.name)]


def render_explanation(rule: type[Rule]) -> str:
    """The text ``pdprobe explain`` prints: heading, the docstring, then what the rule needs."""
    text = rule.explanation()
    lines = text.splitlines()
    title = lines[0] if lines else rule.name
    body = "\n".join(lines[1:]).strip()
    head = f"{rule.code} {rule.name}: {title}"
    meta = f"cause: {rule.cause}    component: {rule.component}"
    needs = "\n".join(f"  - {r}" for r in rule.inputs.needs)
    text = f"{head}\n{'=' * len(head)}\n{meta}\n\n{body}\n\nInputs it reads (any of):\n{needs}"
    if rule.inputs.live:
        live = "\n".join(f"  - {n.label}: {', '.join(n.signals)}" for n in rule.inputs.live)
        text += f"\n\nFrom live Prometheus metrics (pdprobe check):\n{live}"
    return text


def render_evidence(rule: type[Rule]) -> str:
    """The evidence a rule reads, one line each: "table.name (unit): meaning"."""
    from pdprobe.analysis.evidence.registry import describe

    return "\n".join(f"  - {describe(ref)}" for ref in rule.inputs.evidence)
