"""The rule interface: small classes that turn evidence into findings with root causes.

Each rule has a stable ``code``, the ``cause`` it diagnoses (a docs/contract.md root-cause name),
one ``inputs`` declaration of what it reads (``Inputs``: the inputs in words, the evidence
names, the live metrics, the roles it needs), and an ``evaluate`` that measures, decides and
explains: it returns findings carrying the numbers that made them fire. A rule whose inputs
are missing returns an ``Inconclusive`` saying what it needs (``Inputs.needs``). The class
docstring is what ``pdprobe explain CODE`` prints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar, Literal, get_args

from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import (
        CapacityResult,
        InstanceSummary,
        SloAttainment,
        WorkloadSummary,
    )
    from pdprobe.analysis.evidence.model import ClusterEvidence
    from pdprobe.dataset import Dataset

Cause = Literal[
    "prefill-bound",
    "decode-bound",
    "kv-transfer-bandwidth",
    "rdma-retransmits",
    "no-rdma",
    "routing-skew",
    "straggler",
    "ratio-lag",
    "kv-transfer-failures",
    "not-disaggregated",
]
# The same names as a tuple, read from the Literal so a new cause is added in one place.
CAUSES: tuple[Cause, ...] = get_args(Cause)

# The serving-system component a finding implicates (DOPD's decomposition).
Component = Literal[
    "resource-monitor", "scheduler/predictor", "instance-manager", "router", "kv-connector",
    "network-fabric",
]


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "critical": 2}[self.value]


@dataclass(frozen=True)
class Evidence:
    """One number (or fact) behind a finding, with its unit and the window it covers."""

    what: str  # e.g. "prefill queue depth p90"
    value: float | str
    unit: str = ""
    instances: tuple[str, ...] = ()
    window_start_ts: float | None = None
    window_end_ts: float | None = None
    baseline: float | str | None = None  # what it is compared with (peer median, SLO, capacity)
    source: str = ""  # signal or column it came from


@dataclass(frozen=True)
class Finding:
    code: str
    cause: Cause
    severity: Severity
    confidence: float  # 0..1: how sure, given the evidence available
    summary: str  # one sentence
    instances: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    next_steps: tuple[str, ...] = ()
    component: Component | None = None
    consequences: tuple[str, ...] = ()  # codes of findings explained by this one (ranking)
    is_root_cause: bool = True


@dataclass(frozen=True)
class Inconclusive:
    """A rule could not judge: what it needs that the inputs lack."""

    code: str
    cause: Cause
    needs: str


@dataclass(frozen=True)
class Live:
    """An input live Prometheus metrics can carry: met by any of ``signals``."""

    label: str
    signals: tuple[str, ...]


@dataclass(frozen=True)
class Inputs:
    """Everything a rule reads, declared once (drives "not judged", ``pdprobe check``, docs).

    ``needs``: the inputs in words, any of which lets the rule judge (the Inconclusive text);
    ``evidence``: the evidence it reads, as ``table.name`` from
    ``pdprobe.analysis.evidence.registry`` or a cluster figure (``FIGURES``);
    ``live``: what of it live metrics can carry; ``roles``: roles that must have an instance;
    ``peers``: whether it compares two or more instances of one role.
    """

    needs: tuple[str, ...]
    evidence: tuple[str, ...] = ()
    live: tuple[Live, ...] = ()
    roles: tuple[str, ...] = ()
    peers: bool = False


@dataclass(frozen=True)
class RuleOptions:
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_target: float = 0.9  # share of requests within both objectives (--slo-target)


@dataclass(frozen=True)
class RuleContext:
    """Everything a rule may look at; analyses are computed once and shared."""

    dataset: Dataset
    workload: WorkloadSummary | Missing
    instances: tuple[InstanceSummary, ...]
    slo: SloAttainment | Missing
    capacity: CapacityResult | Missing
    evidence: ClusterEvidence  # computed once per diagnosis by the service
    options: RuleOptions = field(default_factory=RuleOptions)
    # The capacity section the report shows (the service's check against the window and the
    # headroom applied to ``capacity``), when it differs: rules judge ``capacity`` (the model
    # as built, ``evidence.capacity``) and quote this one's counts (``quoted``).
    quoted_capacity: CapacityResult | None = None

    @property
    def quoted(self) -> CapacityResult | None:
        """The capacity whose counts a finding quotes (recommended, needed, windows): the
        report's section, the model as built until the service has checked it."""
        if self.quoted_capacity is not None:
            return self.quoted_capacity
        return None if isinstance(self.capacity, Missing) else self.capacity


RuleResult = list[Finding | Inconclusive]


class Rule(ABC):
    """Base class: subclasses set the class attributes and implement ``evaluate``."""

    code: ClassVar[str]  # stable id, e.g. "PD001"
    name: ClassVar[str]  # short slug, e.g. "prefill-queue-growth"
    cause: ClassVar[Cause]
    component: ClassVar[Component]
    inputs: ClassVar[Inputs]  # what it reads, declared once
    requires: ClassVar[tuple[str, ...]]  # = inputs.needs (set for every subclass)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("inputs")
        if declared is not None:
            cls.requires = declared.needs

    @abstractmethod
    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Findings (possibly none) or an Inconclusive naming what is missing."""

    @classmethod
    def explanation(cls) -> str:
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def title(cls) -> str:
        return cls.explanation().splitlines()[0] if cls.__doc__ else cls.name
