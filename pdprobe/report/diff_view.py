"""What changed between two reports (``pdprobe diff``): the model its renderers read.

Built by ``pdprobe.services.diff``; rendered by ``pdprobe.report.diff_format``. Values are raw
numbers with their unit; wording happens in the renderer (``pdprobe.units``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Change = Literal["new", "gone", "worse", "better", "same"]

# Exit codes of ``pdprobe diff``, for a deploy check: did the change make anything worse?
DIFF_EXIT_SAME_OR_BETTER: Final = 0
DIFF_EXIT_NEW_WARNING: Final = 1
DIFF_EXIT_NEW_CRITICAL: Final = 2
DIFF_EXIT_UNKNOWN: Final = 3


@dataclass(frozen=True)
class FindingChange:
    """A finding (by code) in one report or both, and how it moved."""

    code: str
    cause: str
    change: Change
    severity_before: str | None  # None: not in the BEFORE report
    severity_after: str | None
    summary: str  # the AFTER report's sentence, or BEFORE's for a finding that is gone


@dataclass(frozen=True)
class FigureChange:
    """One key figure of the cluster, before and after (None: not measured in that report)."""

    what: str
    unit: str  # a pdprobe.units unit: "ratio", "s", "req/s", "requests", "" ...
    before: float | str | None
    after: float | str | None
    better: Literal["higher", "lower", ""] = ""  # which way is good ("" = neither)


@dataclass(frozen=True)
class InstanceMover:
    """An instance whose figure moved most between the reports."""

    instance: str
    role: str
    what: str
    unit: str
    before: float
    after: float


@dataclass(frozen=True)
class ReportDiff:
    """What changed between two reports (labels, statuses, findings that changed); ``verdict`` words
    it as BETTER, WORSE or SAME."""
    before_label: str
    after_label: str
    before_status: str
    after_status: str
    findings: tuple[FindingChange, ...]
    figures: tuple[FigureChange, ...]
    movers: tuple[InstanceMover, ...]
    instances_added: tuple[str, ...]
    instances_removed: tuple[str, ...]
    exit_code: int

    @property
    def verdict(self) -> str:
        """One line a deploy log can show: ``WORSE  new critical finding PD101 prefill-bound``."""
        new = [f for f in self.findings if f.change in ("new", "worse")]
        gone = [f for f in self.findings if f.change in ("gone", "better")]
        if self.exit_code == DIFF_EXIT_UNKNOWN:
            return (f"UNKNOWN  the AFTER report could not judge the cluster "
                    f"(status {self.after_status})")
        if self.exit_code in (DIFF_EXIT_NEW_WARNING, DIFF_EXIT_NEW_CRITICAL):
            worst = max(new, key=lambda f: _RANK.get(f.severity_after or "", 0))
            more = f" (+{len(new) - 1} more)" if len(new) > 1 else ""
            return (f"WORSE  {'new' if worst.change == 'new' else 'worse'} "
                    f"{worst.severity_after} finding {worst.code} {worst.cause}{more}")
        if gone:
            names = ", ".join(f"{f.code} {f.cause}" for f in gone[:3])
            more = f" and {len(gone) - 3} more" if len(gone) > 3 else ""
            return f"BETTER  gone or milder: {names}{more}; nothing new"
        return f"SAME  no finding appeared or got worse (status {self.after_status})"


_RANK: Final = {"info": 0, "warning": 1, "critical": 2}
