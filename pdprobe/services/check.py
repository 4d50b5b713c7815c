"""``pdprobe check --prometheus URL``: can pdprobe diagnose this cluster, and what will it say?

A doctor for the live path: connectivity, authentication, clock, which metric families exist
per engine, which instance roles could be decided, and per rule whether the live metrics are
enough to judge it. It issues only the cheap queries (time, discovery, roles), never the data
queries.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.roles import RoleOptions
from pdprobe.errors import PdprobeError
from pdprobe.redact import Redactor
from pdprobe.safe_text import clean

# How a role was decided, without the value: "label tier='ctx'" counts as "label tier".
_ROLE_HOW: Final = re.compile(r"(label [\w-]+|name pattern in \w+|metrics map selector|--\w+-match|"
                              r"no label, name pattern or evidence)")


@dataclass(frozen=True)
class Capability:
    code: str
    name: str
    cause: str
    verdict: str  # yes | partial | no
    reason: str


@dataclass(frozen=True)
class CheckResult:
    """The doctor's answer; ``usable`` decides the exit code (0 usable, 3 not)."""

    url: str
    usable: bool
    reachable: bool
    authenticated: bool
    problem: str | None = None  # one line when not usable
    server_version: str | None = None
    clock_skew_s: float | None = None
    window: dict[str, Any] = field(default_factory=dict)
    discovery: str = ""
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    roles: dict[str, list[str]] = field(default_factory=dict)
    role_sources: dict[str, int] = field(default_factory=dict)
    capabilities: tuple[Capability, ...] = ()
    planned_queries: int = 0
    issued_queries: int = 0
    elapsed_s: float = 0.0
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def check(target: PrometheusTarget, ctx: ReadContext | None = None,
          roles: RoleOptions | None = None) -> CheckResult:
    """Probe ``target``; never raises for server problems (they make the result unusable)."""
    from pdprobe.collectors.prometheus import (
        PrometheusAuthError,
        PrometheusUnreachable,
        display_url,
        probe,
    )

    redactor = Redactor(target.secrets(), target.basic_credentials())

    def tidy(text: str) -> str:  # server text: no secret in any spelling, no escapes
        return clean(redactor(text))

    url = display_url(target.url)
    try:
        p = probe(target, ctx, roles)
    except PrometheusUnreachable as exc:
        return CheckResult(url=url, usable=False, reachable=False, authenticated=False,
                           problem=tidy(exc.one_line()))
    except PrometheusAuthError as exc:
        return CheckResult(url=url, usable=False, reachable=True, authenticated=False,
                           problem=tidy(exc.one_line()))
    except PdprobeError as exc:
        return CheckResult(url=url, usable=False, reachable=True, authenticated=True,
                           problem=tidy(exc.one_line()))
    meta = p.meta
    found = meta.found
    by_role: dict[str, list[str]] = {}
    sources: dict[str, int] = {}
    for inst in p.instances:
        by_role.setdefault(inst.role, []).append(tidy(inst.name))
        m = _ROLE_HOW.match(inst.role_source)
        how = m.group(1) if m else inst.role_source
        sources[how] = sources.get(how, 0) + 1
    engines: dict[str, dict[str, Any]] = {}
    for engine, names in sorted(found.by_engine().items()):
        engines[engine] = {"families": sorted(names), "version": found.versions.get(engine)}
    caps = capabilities(found.signals, by_role)
    problem = None
    if not found.engines:
        where = f" matching {{{meta.selector}}}" if meta.selector else ""
        problem = tidy(f"no vLLM, SGLang or Dynamo metrics{where} in the window: check --selector, "
                   f"--since/--until or --metrics-map")
    elif not p.instances:
        problem = "metric families exist but no instance could be named: check --metrics-map"
    w = meta.window
    return CheckResult(
        url=url, usable=problem is None, reachable=True, authenticated=True, problem=problem,
        server_version=tidy(meta.server_version) if meta.server_version else None,
        clock_skew_s=round(meta.clock_skew_s, 3),
        window={"start": _iso(w.start_ts), "end": _iso(w.end_ts), "step_s": w.step_s,
                "coarse_step_s": w.coarse_step_s},
        discovery=meta.discovery, engines=engines,
        roles={k: sorted(v) for k, v in sorted(by_role.items())}, role_sources=sources,
        capabilities=caps, planned_queries=len(p.batches) + len(engines),
        issued_queries=len(meta.queries), elapsed_s=round(meta.elapsed_s, 3),
        warnings=tuple(dict.fromkeys(tidy(w) for w in (*p.warnings, *p.role_warnings))),
        notes=tuple(tidy(n) for n in p.notes),
    )


def capabilities(signals: frozenset[str], by_role: dict[str, list[str]]) -> tuple[Capability, ...]:
    """Per rule: can the live metrics judge it (yes), in part (partial), or not (no)?

    Reads each rule's ``inputs`` declaration (``Inputs.live``, ``roles``, ``peers``).
    """
    from pdprobe.rules.catalog import ALL_RULES

    out: list[Capability] = []
    for rule in ALL_RULES:
        req = rule.inputs  # the rule's own declaration: live metrics, roles, peers
        if not req.live:
            out.append(Capability(rule.code, rule.name, rule.cause, "no",
                                  "needs inputs live metrics do not carry: "
                                  + "; ".join(req.needs)))
            continue
        missing_roles = [r for r in req.roles if not by_role.get(r)]
        if missing_roles:
            out.append(Capability(rule.code, rule.name, rule.cause, "no",
                                  f"no instance's role is {' or '.join(missing_roles)} (set "
                                  f"--prefill-match/--decode-match or a metrics-map role selector)"))
            continue
        if req.peers and max((len(by_role.get(r, [])) for r in ("prefill", "decode")),
                             default=0) < 2:
            out.append(Capability(rule.code, rule.name, rule.cause, "no",
                                  "needs two or more instances of one role to compare"))
            continue
        met = [n for n in req.live if any(s in signals for s in n.signals)]
        unmet = [n for n in req.live if n not in met]
        if not unmet:
            verdict, reason = "yes", "has " + ", ".join(n.label for n in met)
        elif met:
            verdict = "partial"
            reason = (f"has {', '.join(n.label for n in met)}; lacks "
                      f"{', '.join(n.label for n in unmet)}")
        else:
            verdict = "no"
            reason = f"lacks {', '.join(n.label for n in unmet)}"
        out.append(Capability(rule.code, rule.name, rule.cause, verdict, reason))
    return tuple(out)


def to_json(result: CheckResult) -> str:
    doc = asdict(result)
    doc["schema"] = "pdprobe-check/1"
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def render_text(result: CheckResult) -> str:
    lines = [f"pdprobe check: {result.url}: {'usable' if result.usable else 'NOT usable'}"]
    if result.problem:
        lines.append(f"  problem         {result.problem}")
    lines.append(f"  connectivity    {'ok' if result.reachable else 'FAILED'}"
                 + (f" (server {result.server_version})" if result.server_version else ""))
    if result.reachable:
        lines.append(f"  authentication  {'ok' if result.authenticated else 'FAILED'}")
    if result.clock_skew_s is not None:
        lines.append(f"  clock           server {result.clock_skew_s:+.1f} s from this machine")
    if result.window:
        w = result.window
        lines.append(f"  window          {w['start']} to {w['end']}, step {w['step_s']:g} s "
                     f"(counters and histograms {w['coarse_step_s']:g} s)")
    if result.discovery:
        lines.append(f"  discovery       {result.discovery}")
    for engine, info in result.engines.items():
        version = f" ({info['version']})" if info.get("version") else ""
        lines.append(f"  {engine:<15} {len(info['families'])} families{version}")
    if result.roles or (result.reachable and result.authenticated and result.window):
        counts = ", ".join(f"{len(v)} {k}" for k, v in result.roles.items()) or "no instances"
        lines.append(f"  roles           {counts}")
        for how, n in sorted(result.role_sources.items(), key=lambda kv: -kv[1]):
            lines.append(f"                  {n} by {how}")
    if result.capabilities:
        lines.append("What a diagnosis can judge from these metrics:")
        for cap in result.capabilities:
            lines.append(f"  {cap.verdict:<8}{cap.code} {cap.name} ({cap.cause}): {cap.reason}")
    if result.planned_queries:
        lines.append(f"A diagnosis would issue about {result.planned_queries} queries; this "
                     f"check issued {result.issued_queries} in {result.elapsed_s:.2f} s.")
    if result.warnings:
        lines.append("Warnings:")
        lines.extend(f"  - {w}" for w in result.warnings)
    if result.notes:
        lines.append("Notes:")
        lines.extend(f"  - {n}" for n in result.notes)
    return "\n".join(lines) + "\n"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
