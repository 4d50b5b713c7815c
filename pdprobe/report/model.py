"""The report model every renderer reads, so numbers and wording agree across formats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pdprobe.analysis.base import (
    CapacityResult,
    InstanceSummary,
    LabeledSeries,
    SloAttainment,
    WorkloadSummary,
)
from pdprobe.dataset import Alias, SourceInfo
from pdprobe.rules.base import Finding, Inconclusive
from pdprobe.values import Maybe

Status = Literal["ok", "warning", "critical", "unknown"]
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class IdentityEntry:
    """One instance of the identity table: its name, role, and every name the inputs gave it."""

    name: str
    role: str
    role_source: str  # how the role was decided
    aliases: tuple[Alias, ...] = ()  # (source, name, how matched), the canonical name included
    node: str | None = None
    engine: str | None = None


@dataclass(frozen=True)
class RoleCounts:
    """Instances found per role (None when a role's count is unknown)."""
    prefill: int | None
    decode: int | None
    unknown: int = 0


@dataclass(frozen=True)
class Report:
    """The diagnosis: status, findings, the analyses they rest on and the inputs used; every
    renderer and the JSON schema read this."""
    schema_version: int
    status: Status
    pdprobe_version: str
    generated_at: str  # ISO 8601, UTC
    window_start_ts: float | None
    window_end_ts: float | None
    input_description: str  # "bundled sample", "3 files under capture/", "prometheus http://..."
    sources: tuple[SourceInfo, ...]
    workload: Maybe[WorkloadSummary]
    instance_counts: RoleCounts
    instances: tuple[InstanceSummary, ...]
    slo: Maybe[SloAttainment]
    capacity: Maybe[CapacityResult]
    findings: tuple[Finding, ...]
    inconclusive: tuple[Inconclusive, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    series: tuple[LabeledSeries, ...] = ()  # transfer-path series for charts
    identity: tuple[IdentityEntry, ...] = ()  # how names across the inputs became instances
    status_reason: str | None = None  # why the status is "unknown" (one line for stderr)


def status_for(findings: tuple[Finding, ...], judged: bool = True) -> Status:
    """Status follows the worst finding; "unknown" only when nothing could be judged.

    A report holding a finding was judged (docs/contract.md: never exit 3 with a warning finding).
    """
    worst = max((f.severity.rank for f in findings), default=0)
    if not judged and not findings:
        return "unknown"
    statuses: dict[int, Status] = {0: "ok", 1: "warning", 2: "critical"}
    return statuses[worst]
