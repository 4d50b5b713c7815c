"""The evidence of one diagnosis: tidy tables of declared columns and a few cluster figures.

``ClusterEvidence`` is computed once per diagnosis (``compute_evidence``) and read by every
rule and, where they show the same quantity, by the report. Its accessors take evidence
names declared in ``registry``: an undeclared name raises ``UnknownEvidence``; a declared one
the inputs do not carry reads as all-NaN (tables) or None (series), never as a 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from pdprobe.analysis.ahead import Ahead
from pdprobe.analysis.evidence.failures import Failures
from pdprobe.analysis.evidence.registry import Table, spec
from pdprobe.analysis.evidence.stats import ChangePoint

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.base import CapacityResult


@dataclass(frozen=True)
class Window:
    """The diagnosis window and the bin width of every per-bin series."""

    start_ts: float
    end_ts: float
    step_s: float

    @property
    def span_s(self) -> float:
        """Window length in seconds (0 for an empty window)."""
        return max(self.end_ts - self.start_ts, 0.0)

    @property
    def n_bins(self) -> int:
        """Number of bins (at least one)."""
        return max(1, int(np.ceil(max(self.span_s, self.step_s) / self.step_s)))

    @property
    def bin_ts(self) -> np.ndarray:
        """Start of every bin (Unix seconds)."""
        return self.start_ts + self.step_s * np.arange(self.n_bins)

    def bin_of(self, ts: np.ndarray) -> np.ndarray:
        """The bin of each timestamp, clipped into the window (NaN goes to bin 0), in the
        smallest integer type that holds the bins (int16 for up to 32,766): computed slice by
        slice, so 10M timestamps cost 20 MB of bins and no full-length float temporary."""
        from pdprobe.analysis.grouped import chunks, compact_dtype

        t = np.asarray(ts, dtype=np.float64)
        out = np.empty(t.shape, dtype=compact_dtype(self.n_bins))
        for part in chunks(t.size):
            idx = t[part] - self.start_ts  # new; in place on
            idx /= self.step_s
            np.floor(idx, out=idx)
            # clipped into the bins, NaN to bin 0: fmax and fmin skip a NaN, so this is
            # ``nan_to_num`` (NaN -> 0, +-inf -> the largest finite) then ``clip`` without
            # nan_to_num's three passes for NaN, +inf and -inf
            np.fmax(idx, 0.0, out=idx)
            np.fmin(idx, self.n_bins - 1, out=idx)
            out[part] = idx
        return out


@dataclass(frozen=True)
class Transfer:
    """Cluster-level KV-transfer figures, each None when the inputs do not carry it."""

    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_source: str = ""
    share_of_ttft_p50: float | None = None  # median per-request kv_transfer_s / ttft_s
    achieved_bytes_per_s: float | None = None  # bytes moved per second of transfer time
    achieved_source: str = ""
    bytes_total: float | None = None  # KV bytes moved in the window
    bytes_source: str = ""
    demand_vs_latency_rho: float | None = None  # per-bin demand (bytes/s) vs median latency
    demand_vs_latency_p: float | None = None
    # Median transfer time per GB (else per transfer) in the quietest / busiest third of bins.
    latency_low_demand_s: float | None = None
    latency_high_demand_s: float | None = None
    latency_per_gb: bool = False  # True when the two above are seconds per GB
    transfers: int | None = None  # number of transfers measured


@dataclass(frozen=True)
class Slo:
    """The objectives in force and how the requests fared against them."""

    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    ttft_attainment: float | None = None
    tpot_attainment: float | None = None
    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    both_attainment: float | None = None  # per request, both objectives met
    target: float = 0.9  # share of requests that must meet both (--slo-target)
    method: str = ""  # "per-request", "histogram interpolation", ...
    defaulted: tuple[str, ...] = ()  # objectives that are the defaults ("ttft", "tpot")
    since_start: bool = False  # histograms read since engine start (one scrape)
    # Attainment judged against ``target`` (analysis.base.SloAttainment.observed: both per
    # request, else the lower of the two), None when nothing was measured.
    observed: float | None = None

    @property
    def missed(self) -> bool:
        """Observed attainment below the target."""
        return self.observed is not None and self.observed < self.target


@dataclass(frozen=True)
class StageExcess:
    """One stage of the request's latency and how much of the excess over the objective it holds.

    ``excess_s``: its mean over the requests that missed minus its median over those that met
    the objective (0 when none met it); ``share`` of the stages' summed excess.
    """

    stage: str  # "queue", "prefill", "kv-transfer", "decode-admission", "first-decode-step"
    excess_s: float
    share: float
    missed_mean_s: float
    met_median_s: float | None = None


@dataclass(frozen=True)
class SloMissShape:
    """Where the time of the requests that missed the TTFT objective went, and when they came.

    ``stages`` sorted by share, largest first; ``source`` "per-request" or "histogram means"
    (then the shares are of the mean TTFT, no met/missed split). ``burst_share``: share of the
    misses that arrived in the busiest ``busy_bin_share`` of the bins, against
    ``busy_request_share`` of all requests.
    """

    stages: tuple[StageExcess, ...] = ()
    source: str = ""
    ttft_missed: int | None = None
    tpot_missed: int | None = None
    requests: int | None = None
    burst_share: float | None = None
    busy_request_share: float | None = None
    busy_bin_share: float | None = None
    preemptions: int | None = None  # preemptions/retractions counted in the window
    stages_known: tuple[str, ...] = ()  # stage columns the inputs measured


@dataclass(frozen=True)
class Mix:
    """Level shifts of the workload over the window (length mix and arrival count)."""

    prompt: ChangePoint | None = None  # mean prompt tokens per bin
    output: ChangePoint | None = None  # mean output tokens per bin
    # Prompt tokens per output token from engine throughput (logs), when lengths are unknown.
    work: ChangePoint | None = None
    arrivals: ChangePoint | None = None  # requests per bin
    prompt_p_requests: float | None = None  # rank test on the requests either side of the split
    output_p_requests: float | None = None
    source: str = ""


def column(frame: pd.DataFrame, name: str, table: Table = "instances") -> pd.Series:
    """A declared float column of ``frame`` (rows of ``table``), all-NaN when not carried."""
    import pandas as pd

    spec(table, name)
    if name in frame.columns:
        return frame[name].astype("float64")
    return pd.Series(np.nan, index=frame.index, dtype="float64")


_T = TypeVar("_T")


class Later(Ahead[_T]):
    """A figure computed when first read (``value``), once: evidence some rule reads only in
    some diagnoses (``ClusterEvidence.slo_miss``: PD801 reads it when the objective is
    missed), not computed in the others. Equal to another ``Later`` of an equal value."""

    @classmethod
    def known(cls, value: _T) -> Later[_T]:
        """A figure computed already."""
        found = cls(lambda: value)
        found.prepare()
        return found

    @property
    def value(self) -> _T:
        """The figure (computed at the first read)."""
        return self.get()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Later) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Later({self.get()!r})" if self.made else "Later(<not read>)"


def _no_slo_miss() -> Later[SloMissShape]:
    return Later.known(SloMissShape())


@dataclass(frozen=True)
class ClusterEvidence:
    """Everything the rules compare, in tidy tables of declared columns (see ``registry``)."""

    window: Window
    instances: pd.DataFrame  # index: instance name; one row per instance
    bins: Mapping[str, pd.DataFrame]  # name -> bins x instances (index: bin start ts)
    cluster: pd.DataFrame  # index: bin start ts; role-level and workload series
    nodes: pd.DataFrame  # index: node; RDMA/TCP counters over the window
    events: pd.DataFrame  # columns event, instance, count
    transfer: Transfer
    slo: Slo
    capacity: CapacityResult | None
    arrival_rate_rps: float | None
    request_columns: frozenset[str]
    n_requests: int
    has_metrics: bool
    has_network: bool
    rdma_signals: frozenset[str]  # RDMA signals present in the network table
    tcp_signals: frozenset[str]
    mix: Mix = field(default_factory=Mix)
    queue_share_of_ttft_p50: float | None = None  # median per-request queue_s / ttft_s
    queue_s_p90: float | None = None
    # where the missed time went (``slo_miss``), computed when first read
    slo_miss_later: Later[SloMissShape] = field(default_factory=_no_slo_miss)
    failures: Failures = field(default_factory=Failures)  # KV-transfer failures (failures.py)

    @property
    def slo_miss(self) -> SloMissShape:
        """Where the requests that missed the objective spent their time (``slo_miss``)."""
        return self.slo_miss_later.value

    def role(self, role: str) -> pd.DataFrame:
        """The instance rows of one role (sorted by name)."""
        return self.instances[self.instances["role"] == role]

    def names(self, role: str) -> tuple[str, ...]:
        """Names of the instances of one role."""
        return tuple(self.role(role).index.astype(str))

    def has_requests_column(self, column: str) -> bool:
        """Whether the request records carried ``column``."""
        return column in self.request_columns

    def event_count(self, event: str) -> int:
        """How many events of this kind the inputs logged."""
        if self.events.empty:
            return 0
        return int(self.events.loc[self.events["event"] == event, "count"].sum())

    def event_instances(self, event: str) -> list[str]:
        """Instances named by events of this kind (sorted)."""
        if self.events.empty:
            return []
        ev = self.events
        sub = ev[(ev["event"] == event) & (ev["instance"] != "")]
        return sorted(sub["instance"].astype(str).unique())

    def bin(self, name: str) -> pd.DataFrame | None:
        """The per-bin frame ``name`` (bins x instances), None when the inputs lack it."""
        spec("bins", name)
        return self.bins.get(name)

    def bin_frame(self, name: str, instances: tuple[str, ...] | list[str]) -> pd.DataFrame | None:
        """Per-bin values of ``name`` for these instances (columns), None when absent."""
        frame = self.bin(name)
        if frame is None:
            return None
        cols = [c for c in instances if c in frame.columns]
        if not cols:
            return None
        return frame[cols]

    def role_series(self, name: str) -> pd.Series | None:
        """The cluster series ``name``, None when absent or all-NaN."""
        series = self.cluster_column(name)
        if series is None:
            return None
        return series if series.notna().any() else None

    def cluster_column(self, name: str) -> pd.Series | None:
        """The cluster series ``name`` as computed (may be all-NaN), None when absent."""
        spec("cluster", name)
        return self.cluster[name] if name in self.cluster.columns else None

    def node_column(self, name: str) -> pd.Series:
        """A per-node float column, all-NaN when not carried."""
        return column(self.nodes, name, "nodes")

    def has_node_column(self, name: str) -> bool:
        """Whether the network inputs produced the per-node column ``name``."""
        spec("nodes", name)
        return name in self.nodes.columns

    def instances_on(self, nodes: list[str]) -> list[str]:
        """Instances running on these nodes (sorted)."""
        inst = self.instances
        return sorted(inst.index[inst["node"].isin(nodes)].astype(str))
