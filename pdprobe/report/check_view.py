"""``pdprobe check``'s answer and how it reads: the result records, their text and JSON.

``services/check.py`` probes the Prometheus server and builds a ``CheckResult``; this module
only lays it out, so the service renders nothing itself.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Capability:
    """Whether one rule can judge from the live metrics: ``verdict`` yes, partial or no, and why."""

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


def to_json(result: CheckResult) -> str:
    """The answer as JSON (``schema: pdprobe-check/1``), keys sorted for stable diffs."""
    doc = asdict(result)
    doc["schema"] = "pdprobe-check/1"
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def render_text(result: CheckResult) -> str:
    """The answer for a terminal: connectivity, window, engines, roles, then per rule what a
    diagnosis can judge."""
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
