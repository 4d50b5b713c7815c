"""Result types of the analysis layer (frozen; units in field names).

Analyses are pure functions over the ``Dataset``'s columnar tables; they return these values,
with ``Missing(reason)`` wherever the inputs do not support a number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdprobe.signals import Role
from pdprobe.values import Maybe, Missing


@dataclass(frozen=True)
class Quantiles:
    """Summary of a sample (or a histogram estimate: ``estimated`` is then True)."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float | None = None
    estimated: bool = False  # interpolated from histogram buckets


@dataclass(frozen=True)
class LengthDistribution:
    """Token-length distribution with a shape summary (Jensen matters for convex costs)."""

    quantiles: Quantiles
    cv: float  # coefficient of variation
    skewness: float
    shape: str  # "narrow", "wide", "heavy-tailed", "bimodal"


@dataclass(frozen=True)
class TimeSeries:
    """A regular series for charts and trend tests (``ts`` are Unix seconds, bin starts)."""

    ts: tuple[float, ...]
    values: tuple[float, ...]  # NaN where unknown
    unit: str
    step_s: float


@dataclass(frozen=True)
class LabeledSeries:
    """A named time series for charts, e.g. RDMA retransmits/s on one node."""

    name: str  # stable id, e.g. "rdma_retransmits_per_s"
    unit: str
    labels: tuple[tuple[str, str], ...]  # e.g. (("node", "10.0.0.1"),)
    series: TimeSeries


@dataclass(frozen=True)
class WorkloadSummary:
    """The workload over the window: request count, arrival and offered rates, burstiness, length
    distributions, prefix caching and failures."""
    requests: int
    window_start_ts: float
    window_end_ts: float
    arrival_rate_rps: Maybe[float]  # Missing when the arrivals span no time
    prompt_tokens: Maybe[LengthDistribution]
    output_tokens: Maybe[LengthDistribution]
    offered_rate_rps: Maybe[float] = Missing("no offered-load counter")
    completed_rate_rps: Maybe[float] = Missing("no completion timestamps or counters")
    cached_fraction: Maybe[float] = Missing("no cached_tokens column")
    arrival_cv2: Maybe[float] = Missing("too few arrivals")  # squared CV of inter-arrivals
    prompt_output_corr: Maybe[float] = Missing("no per-request lengths")
    arrival_series: TimeSeries | None = None  # requests/s per bin
    source: str = "request records"  # or "metric histograms"
    failed_requests: int = 0


@dataclass(frozen=True)
class InstanceSummary:
    """One instance's figures over the window (latency quantiles, queue, KV usage, hit rate,
    transfer time, token rates); each is ``Missing`` with a reason when no input carried it."""
    name: str
    role: Role
    role_source: str
    requests: Maybe[int] = Missing("no per-request records name this instance")
    traffic_share: Maybe[float] = Missing("no per-request records name this instance")
    ttft_s: Maybe[Quantiles] = Missing("no TTFT data")
    tpot_s: Maybe[Quantiles] = Missing("no TPOT data")
    queue_s: Maybe[Quantiles] = Missing("no queue-time data")
    kv_transfer_s: Maybe[Quantiles] = Missing("no KV-transfer data")
    queue_depth: Maybe[Quantiles] = Missing("no queue-depth gauge or log")
    running: Maybe[Quantiles] = Missing("no running-requests gauge or log")
    kv_usage_ratio: Maybe[Quantiles] = Missing("no KV-usage gauge or log")
    prefix_hit_ratio: Maybe[float] = Missing("no prefix-cache data")
    preemptions: Maybe[float] = Missing("no preemption counter")
    prompt_tokens_per_s: Maybe[float] = Missing("no token counter")
    generation_tokens_per_s: Maybe[float] = Missing("no token counter")
    queue_series: TimeSeries | None = None
    ttft_series: TimeSeries | None = None
    kv_usage_series: TimeSeries | None = None
    node: str | None = None
    engine: str | None = None


@dataclass(frozen=True)
class SloAttainment:
    """Share of requests meeting the TTFT and TPOT objectives (and both), and how it was measured:
    per request, or interpolated from histograms."""
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    ttft: Maybe[float] = Missing("no TTFT SLO given")  # fraction of requests within SLO
    tpot: Maybe[float] = Missing("no TPOT SLO given")
    both: Maybe[float] = Missing("needs per-request TTFT and TPOT")
    method: str = "per-request"  # or "histogram interpolation"
    target: float = 0.9  # share of requests that must meet both objectives (--slo-target)
    defaulted: tuple[str, ...] = ()  # "ttft"/"tpot" when the default objective was used
    since_start: bool = False  # histograms read since engine start (a single scrape)

    @property
    def observed(self) -> float | None:
        """The attainment judged against ``target``: both objectives per request when known,
        else the lower of the two (an upper bound of "both", so a miss there is a miss)."""
        if not isinstance(self.both, Missing):
            return float(self.both)
        parts = [float(v) for v in (self.ttft, self.tpot) if not isinstance(v, Missing)]
        return min(parts) if parts else None

    @property
    def missed(self) -> bool:
        """Observed attainment below the target."""
        obs = self.observed
        return obs is not None and obs < self.target


@dataclass(frozen=True)
class RatioBandEntry:
    """How the recommendation moves under one what-if (e.g. "+20 % load")."""

    label: str
    prefill: int
    decode: int
    theoretical_ratio: float
    binding: str | None = None  # stage nearest its limit at these counts


@dataclass(frozen=True)
class RatioWindow:
    """The capacity estimate over one time window, next to what was deployed."""

    start_ts: float
    end_ts: float
    theoretical_ratio: Maybe[float]
    recommended_prefill: Maybe[int]
    recommended_decode: Maybe[int]
    deployed_prefill: Maybe[int]
    deployed_decode: Maybe[int]
    arrival_rate_rps: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    producer_tokens_per_s: Maybe[float] = Missing("not estimated")  # prefill demand, tok/s
    consumer_tokens_per_s: Maybe[float] = Missing("not estimated")  # decode demand, tok/s
    requests: int = 0  # requests arriving in the window
    offered_rate_rps: Maybe[float] = Missing("no offered-load data")  # arrivals or started
    served_rate_rps: Maybe[float] = Missing("no completion data")  # completed in the window
    binding: Maybe[str] = Missing("not estimated")  # at the deployed counts, else recommended
    # Offered load in instances at full use (rate over one instance's capacity): their ratio is
    # the theoretical ratio; ratio_fit says why the integer counts differ from it, if they do.
    prefill_load_instances: Maybe[float] = Missing("not estimated")
    decode_load_instances: Maybe[float] = Missing("not estimated")
    ratio_fit: Maybe[str] = Missing("not estimated")
    # A planner's own view over the window (Dynamo dynamo_planner_*; the deployment table), its
    # last value in the window, summed over deployments (counts) or their worst (latencies).
    planner_prefill: Maybe[float] = Missing("no planner metrics")  # deployed, as it saw them
    planner_decode: Maybe[float] = Missing("no planner metrics")
    planner_predicted_prefill: Maybe[float] = Missing("no planner metrics")  # recommended
    planner_predicted_decode: Maybe[float] = Missing("no planner metrics")
    planner_observed_ttft_s: Maybe[float] = Missing("no planner metrics")
    planner_estimated_ttft_s: Maybe[float] = Missing("no planner metrics")
    planner_observed_itl_s: Maybe[float] = Missing("no planner metrics")
    planner_estimated_itl_s: Maybe[float] = Missing("no planner metrics")


@dataclass(frozen=True)
class CapacityResult:
    """The capacity model's answer: theoretical and recommended P/D and what binds.

    Rates are per instance unless named ``_total``. ``binding`` names the stage that limits:
    "prefill", "decode" or "transfer".
    """

    theoretical_ratio: Maybe[float]  # prefill instances per decode instance the workload needs
    recommended_prefill: Maybe[int]
    recommended_decode: Maybe[int]
    deployed_prefill: Maybe[int]
    deployed_decode: Maybe[int]
    binding: Maybe[str]
    prefill_capacity_rps: Maybe[float] = Missing("not estimated")  # per prefill instance
    decode_capacity_rps: Maybe[float] = Missing("not estimated")  # per decode instance
    kv_bytes_per_token: Maybe[float] = Missing("no model shape or transfer bytes")
    transfer_required_bytes_per_s: Maybe[float] = Missing("not estimated")  # per node
    transfer_capacity_bytes_per_s: Maybe[float] = Missing("not estimated")  # per node
    mean_based_ratio: Maybe[float] = Missing("not estimated")
    mean_based_prefill: Maybe[int] = Missing("not estimated")
    mean_based_decode: Maybe[int] = Missing("not estimated")
    band: tuple[RatioBandEntry, ...] = ()
    windows: tuple[RatioWindow, ...] = ()
    model_source: str = "profile"  # "observed fit", "profile", "profile (data too thin)"
    profile: str | None = None
    fit_quality: dict[str, float] = field(default_factory=dict)  # e.g. {"prefill_r2": 0.97}
    notes: tuple[str, ...] = ()
    verified: Maybe[SloAttainment] = Missing("not verified by simulation (use --verify)")
    # Objectives and load the estimate is for.
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_defaulted: tuple[str, ...] = ()  # "ttft"/"tpot" when the default objective was used
    arrival_rate_rps: Maybe[float] = Missing("not estimated")
    arrival_cv2: Maybe[float] = Missing("not estimated")  # at the TTFT time scale
    # Prefill stage (per instance).
    prefill_service_s: Maybe[float] = Missing("not estimated")  # mean busy time per request
    prefill_service_cv2: Maybe[float] = Missing("not estimated")
    prefill_limit: Maybe[str] = Missing("not estimated")  # ttft-slo, utilization, transfer
    ttft_estimate_p90_s: Maybe[float] = Missing("not estimated")  # at the recommended count
    ttft_estimate_mean_s: Maybe[float] = Missing("not estimated")  # G/G/c (Allen–Cunneen)
    md1_ttft_s: Maybe[float] = Missing("not estimated")  # DistServe M/D/1 cross-check
    ttft_attainment_estimate: Maybe[float] = Missing("not estimated")
    infeasible_ttft_fraction: Maybe[float] = Missing("not estimated")  # bare TTFT > SLO
    # Decode stage (per instance).
    decode_batch_size: Maybe[float] = Missing("not estimated")  # mean batch at capacity
    decode_batch_limit: Maybe[str] = Missing("not estimated")  # tpot-slo, kv-memory, max-batch
    decode_context_tokens: Maybe[float] = Missing("not estimated")  # Σ O(I+O/2) / Σ O
    decode_step_s: Maybe[float] = Missing("not estimated")
    decode_limit: Maybe[str] = Missing("not estimated")  # throughput, kv-memory, transfer
    # Utilisation of each stage at the recommended and at the deployed counts.
    prefill_utilization: Maybe[float] = Missing("not estimated")
    decode_utilization: Maybe[float] = Missing("not estimated")
    transfer_utilization: Maybe[float] = Missing("not estimated")
    deployed_prefill_utilization: Maybe[float] = Missing("deployed counts unknown")
    deployed_decode_utilization: Maybe[float] = Missing("deployed counts unknown")
    deployed_transfer_utilization: Maybe[float] = Missing("deployed counts unknown")
    binding_basis: str = "recommended counts"  # or "deployed counts"
    # Mean-based comparison (Jensen gap: distribution-aware / mean-based - 1).
    mean_based_prefill_capacity_rps: Maybe[float] = Missing("not estimated")
    mean_based_decode_capacity_rps: Maybe[float] = Missing("not estimated")
    jensen_gap_prefill: Maybe[float] = Missing("not estimated")  # E[f(u)]/f(E[u]) - 1
    jensen_gap_decode: Maybe[float] = Missing("not estimated")  # context vs ISL + OSL/2
    kv_bytes_source: str = ""
    transfer_capacity_source: str = ""
    # The model checked against the window: its predictions at the deployed counts for the
    # observed mix and arrivals (the model as built, its own pooled waits, before any
    # recalibration), and the attainment the window observed (set by the service).
    deployed_ttft_attainment_estimate: Maybe[float] = Missing("not estimated")
    deployed_ttft_p90_estimate_s: Maybe[float] = Missing("not estimated")
    observed_ttft_attainment: Maybe[float] = Missing("not compared")
    observed_ttft_p90_s: Maybe[float] = Missing("not compared")
    model_check: str = ""  # agreement of predicted and observed, and what was done about it
    conditional_on: tuple[str, ...] = ()  # finding codes the recommendation assumes fixed
    # The prediction at the deployed counts recalibrated with the window's measured waits
    # (analysis/capacity/calibrate.py); ``recalibrated`` when it replaced the raw one. When
    # the recalibration sets the recommended count, every figure at the recommended counts
    # (estimates, utilisations, band, windows) is the recalibrated model's (recalibrate.py).
    calibrated_ttft_attainment_estimate: Maybe[float] = Missing("not recalibrated")
    calibrated_ttft_p90_estimate_s: Maybe[float] = Missing("not recalibrated")
    wait_scale: Maybe[float] = Missing("not recalibrated")  # measured / model mean wait
    recalibrated: bool = False
    calibrated_prefill: Maybe[int] = Missing("not recalibrated")  # with the window's waits
    # TPOT at the deployed decode count, and the window's own p90 (set by the service).
    deployed_tpot_p90_estimate_s: Maybe[float] = Missing("not estimated")
    deployed_tpot_attainment_estimate: Maybe[float] = Missing("not estimated")
    observed_tpot_p90_s: Maybe[float] = Missing("not compared")
    # What meets the objective, before headroom (``--min-instances``, ``--headroom``): the
    # recommended counts add the headroom; the headline separates the two.
    needed_prefill: Maybe[int] = Missing("not estimated")
    needed_decode: Maybe[int] = Missing("not estimated")
    min_instances: int = 1  # per pool, asked for
    headroom_instances: int = 0  # per pool beyond what is needed, asked for
    # KV capacity per decode instance the model used, and where it came from ("measured: ..."
    # from the engines' usage ratio against tokens held, or "profile NAME").
    kv_capacity_tokens: Maybe[int] = Missing("not estimated")
    kv_capacity_source: str = ""
