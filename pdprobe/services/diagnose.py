"""``pdprobe diagnose``: read inputs, analyse, apply the rules, build the report."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pdprobe import __version__
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.identity import AliasMap
from pdprobe.collectors.prefetch import import_quietly, imported_meanwhile
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.roles import RoleOptions
from pdprobe.dataset import Dataset
from pdprobe.heap import collection_paused
from pdprobe.report.model import SCHEMA_VERSION, IdentityEntry, Report, RoleCounts, status_for
from pdprobe.values import Missing

if TYPE_CHECKING:
    from concurrent.futures import Future

    from pdprobe.analysis.base import CapacityResult
    from pdprobe.analysis.capacity.estimate import CapacityPlan
    from pdprobe.rules.base import Finding, Inconclusive, Rule, RuleContext


DEFAULT_WINDOW_S = 300.0
# What the evidence is computed with while the capacity model runs beside it (``analyse``).
PENDING: Final = Missing("the capacity model runs beside the evidence; set once it returns")
# What the analysis imports: about half a second of CPU (scipy.special ~0.3 of it; the live path
# never imports scipy.stats: evidence/rank_tests.py). A live collection loads them while its
# queries run (the main thread only waits then), instead of after. pandas first: the request
# reader's canonical frame needs it before the analysis does (a Parquet read lets this thread
# start only once its reading loop is done: ``collectors.prefetch.imports_held``).
ANALYSIS_MODULES: Final = (
    "pandas", "scipy.special", "pdprobe.analysis.workload", "pdprobe.analysis.instances",
    "pdprobe.analysis.slo", "pdprobe.analysis.series", "pdprobe.analysis.capacity",
    "pdprobe.rules.engine", "pdprobe.rules.catalog", "pdprobe.analysis.evidence.build",
)


@dataclass(frozen=True)
class DiagnoseRequest:
    paths: tuple[Path, ...] = ()
    prometheus: PrometheusTarget | None = None
    read: ReadContext = field(default_factory=ReadContext)
    roles: RoleOptions = field(default_factory=RoleOptions)
    aliases: AliasMap = field(default_factory=AliasMap)  # user-stated instance name matches
    exclude: tuple[str, ...] = ()  # --exclude globs for folder members (files.expand_paths)
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_target: float = 0.9  # share of requests that must meet both objectives (docs/contract.md)
    profile: str | None = None  # model x GPU profile name or TOML path; None = infer/default
    verify: bool = False  # confirm the recommendation by simulation
    window_s: float = DEFAULT_WINDOW_S  # capacity estimate per window
    min_instances: int = 1  # per pool, whatever the model needs (--min-instances)
    headroom: int = 0  # instances per pool beyond what is needed (--headroom; 1 = N+1)


def bundled_sample() -> Path:
    """The sample capture shipped inside the package."""
    return Path(str(resources.files("pdprobe") / "sample_logs"))


def load_dataset(request: DiagnoseRequest) -> tuple[Dataset, str]:
    """The fused dataset and a one-line description of where it came from."""
    if request.prometheus is not None:
        from pdprobe.collectors.prometheus import collect_live, display_url

        read = replace(request.read, while_waiting=load_analysis_modules)
        dataset = collect_live(request.prometheus, read, request.roles, request.aliases)
        return dataset, f"Prometheus {display_url(request.prometheus.url)}"
    from pdprobe.collectors.files import read_paths

    paths = request.paths or (bundled_sample(),)
    # The analysis modules are imported in a thread while the files are read: reading is
    # mostly pyarrow and numpy work that releases the GIL, and one core is often idle then
    # (at 10M rows the id check's sort runs alone), so the imports' ~0.4 CPU-s overlap it
    # instead of following it. Deferred: they start once the reader says the GIL is free
    # (``collectors.prefetch.imports_welcome``: a Parquet request file after its reading loop,
    # anything else once the inputs are sniffed). Joined before returning: no thread outlives
    # the read. No cyclic collection meanwhile: the imports create ~0.3M objects that all
    # live on, and the read creates few (``heap.collection_paused``).
    with collection_paused(), imported_meanwhile(*ANALYSIS_MODULES, deferred=True):
        dataset = read_paths(paths, request.read, request.roles, request.aliases,
                             exclude=request.exclude)
    if not request.paths:
        return dataset, "bundled sample scenario (pdprobe/sample_logs)"
    if len(paths) == 1:
        return dataset, str(paths[0])
    return dataset, f"{len(paths)} inputs"


def load_analysis_modules() -> None:
    """Import ``ANALYSIS_MODULES`` now; a failure is left for the real import to report."""
    import_quietly(*ANALYSIS_MODULES)


def diagnose(request: DiagnoseRequest) -> Report:
    dataset, description = load_dataset(request)
    return analyse(dataset, request, description)


def analyse(dataset: Dataset, request: DiagnoseRequest, description: str) -> Report:
    """Analyses, capacity model and rules over a dataset, into a report."""
    from pdprobe.analysis.capacity import estimate_plan
    from pdprobe.analysis.capacity.transfer import measured_kv_bytes
    from pdprobe.analysis.evidence.build import compute_evidence
    from pdprobe.analysis.evidence.project import project_instances
    from pdprobe.analysis.instances import summarize_instances
    from pdprobe.analysis.series import transfer_path_series
    from pdprobe.analysis.slo import slo_attainment
    from pdprobe.analysis.workload import summarize_workload
    from pdprobe.rules.base import RuleContext, RuleOptions
    from pdprobe.services.verify import capacity_options

    # Two threads share the work (numpy releases the GIL on whole-column work, so on 2 cores the
    # wall time is about the longer of the two, not their sum). The pool thread measures the
    # records' KV bytes, summarises the workload, then runs the capacity model (it reads only
    # the dataset, those bytes and the workload): at 10M rows ~1.6 CPU-s. This thread runs the
    # instance summaries, SLO, evidence (it reads the workload once the pool has it, and
    # carries the capacity result without reading it) and identity table: ~1.9 CPU-s there.
    # The transfer-path series goes to whichever thread is free first: queued behind the
    # capacity model, and taken back by this thread if the pool has not started it when the
    # evidence is done. Every figure is computed as it would be one after the other.
    options = capacity_options(request)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="analysis") as pool:
        # the pool runs one task at a time, in order: both are done before the plan starts
        measured = pool.submit(measured_kv_bytes, dataset)
        summarized = pool.submit(summarize_workload, dataset)
        planned = pool.submit(lambda: estimate_plan(dataset, summarized.result(), options,
                                                    measured=measured.result()))
        queued_series = pool.submit(transfer_path_series, dataset)
        # the plan re-sized with the calibrated waits, when the check against the window asks
        # for it in the judge: its band and windows ahead, on this thread once it is idle
        # (the judge makes them itself if it needs them first: ``analysis.ahead``)
        ahead = pool.submit(_prepare_recalibrated, planned)
        instances = summarize_instances(dataset)
        # judged with the objectives the capacity model uses: the defaults where none is given
        slo = slo_attainment(dataset, request.slo_ttft_s, request.slo_tpot_s,
                             request.slo_target, defaults=True)
        workload = summarized.result()
        evidence = compute_evidence(dataset, workload=workload, slo=slo, capacity=PENDING,
                                    slo_ttft_s=request.slo_ttft_s,
                                    slo_tpot_s=request.slo_tpot_s)
        identity = identity_table(dataset)
        series = (transfer_path_series(dataset) if queued_series.cancel()
                  else queued_series.result())
        plan = planned.result()
        capacity = plan if isinstance(plan, Missing) else plan.result
        evidence = replace(evidence,
                           capacity=None if isinstance(capacity, Missing) else capacity)
        instances = project_instances(instances, evidence)  # the table shows what findings quote
        ctx = RuleContext(
            dataset=dataset,
            workload=workload,
            instances=instances,
            slo=slo,
            capacity=capacity,
            evidence=evidence,
            options=RuleOptions(slo_ttft_s=request.slo_ttft_s, slo_tpot_s=request.slo_tpot_s,
                                slo_target=request.slo_target),
        )
        findings, inconclusive, capacity = judge(ctx, plan, request)
        ahead.cancel()  # not started: not needed either
    start, end = _window(dataset)
    counts = RoleCounts(
        prefill=len(dataset.instances_of("prefill")) or None,
        decode=len(dataset.instances_of("decode")) or None,
        unknown=len(dataset.instances_of("unknown")),
    )
    judged = bool(findings) or any(
        r.code not in {i.code for i in inconclusive} for r in _rules())
    reason = None if judged else unknown_reason(dataset, workload, inconclusive)
    return Report(
        schema_version=SCHEMA_VERSION,
        status=status_for(findings, judged=judged),
        status_reason=reason,
        pdprobe_version=__version__,
        generated_at=datetime.now(tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        window_start_ts=start,
        window_end_ts=end,
        input_description=description,
        sources=dataset.sources,
        workload=workload,
        instance_counts=counts,
        instances=instances,
        slo=slo,
        capacity=capacity,
        findings=findings,
        inconclusive=inconclusive,
        warnings=dataset.warnings,
        notes=dataset.notes + single_scrape_notes(dataset),
        series=series,
        identity=identity,
    )


def _prepare_recalibrated(planned: Future[CapacityPlan | Missing]) -> None:
    """Make the recalibrated plan's band and windows of ``planned``'s plan, if it has one."""
    plan = planned.result()
    if not isinstance(plan, Missing) and plan.prepare_recalibrated is not None:
        plan.prepare_recalibrated()


# What the check and the headroom set that no rule reads: a capacity differing from the one
# the rules saw only in these needs no second pass (``same_for_rules``).
CHECK_ONLY_FIELDS: Final = (
    "observed_ttft_attainment", "observed_ttft_p90_s", "observed_tpot_p90_s", "model_check",
    "conditional_on", "notes", "needed_prefill", "needed_decode", "min_instances",
    "headroom_instances", "verified")


def judge(ctx: RuleContext, plan: CapacityPlan | Missing, request: DiagnoseRequest
          ) -> tuple[tuple[Finding, ...], tuple[Inconclusive, ...], CapacityResult | Missing]:
    """The findings, the rules not judged and the report's capacity section, every count a
    finding quotes being the section's.

    The check against the window needs the findings (a pool a finding names short vetoes or
    shapes the recalibration), and the check and the headroom then change the counts,
    windows and estimates the findings quote. So the rules judge the model as built (their
    codes, causes, severities, confidence and evidence rest on it, as the check's decision
    does), and when the checked capacity differs from it in anything they read, they run
    once more on the same model with the checked capacity to quote (RuleContext.quoted):
    only the quoted counts can change, so the findings the check was decided on are the
    report's. Judging the checked capacity instead would be circular: the SLO-miss guard
    raises a pool by one because a finding names it short, and the prefill rule would then
    read that raise as the model's own evidence of a shortage. The second pass computes
    again only the rules that read the quoted capacity (``judge_rules``' ``earlier``).
    """
    from pdprobe.analysis.capacity.check import check_against_window, with_headroom
    from pdprobe.rules.engine import judge_rules

    first = judge_rules(ctx)
    findings, inconclusive = first.findings, first.inconclusive
    if isinstance(plan, Missing):
        return findings, inconclusive, plan
    slo = ctx.evidence.slo
    checked = check_against_window(
        plan.result, observed_attainment=slo.ttft_attainment, observed_p90_s=slo.ttft_p90_s,
        slo_missed=slo.missed, short_pools=short_pools(findings),
        observed_tpot_p90_s=slo.tpot_p90_s, recalibrated=plan.recalibrated)
    final = verified_final(with_headroom(checked, min_instances=request.min_instances,
                                         headroom=request.headroom), plan)
    if not same_for_rules(final, plan.result):
        again = judge_rules(replace(ctx, quoted_capacity=final), earlier=first)
        findings, inconclusive = again.findings, again.inconclusive
    return findings, inconclusive, final


def verified_final(final: CapacityResult, plan: CapacityPlan) -> CapacityResult:
    """``final`` with ``--verify``'s replay of the counts it recommends.

    The capacity model replays its own counts (the rules judge them: PD801 names them); where
    the check against the window or --headroom/--min-instances set others, or the re-plan
    was taken, those are replayed too, so the section's "verified" row is the simulation of
    the counts beside it."""
    if plan.verify is None:
        return final
    shown = (final.recommended_prefill, final.recommended_decode)
    simulated = (plan.result.recommended_prefill, plan.result.recommended_decode)
    if shown == simulated and final.verified == plan.result.verified:
        return final
    return plan.verify(final)


def same_for_rules(final: CapacityResult, seen: CapacityResult) -> bool:
    """Whether the rules read the same in ``final`` as in ``seen``, ``CHECK_ONLY_FIELDS``
    aside (``needed_*`` among them: the headroom derives them from the recommended counts,
    which it raises when they differ). Figures equal to rounding count as the same: the
    headroom re-scales each utilisation by needed / recommended even when that is 1."""
    for name in (f.name for f in fields(final)):
        if name in CHECK_ONLY_FIELDS:
            continue
        a, b = getattr(final, name), getattr(seen, name)
        if isinstance(a, float) and isinstance(b, float):
            if not (a == b or math.isclose(a, b, rel_tol=1e-12)
                    or (math.isnan(a) and math.isnan(b))):
                return False
        elif a != b:
            return False
    return True


POOL_OF_CAUSE: Final = {"prefill-bound": "prefill", "decode-bound": "decode"}


def short_pools(findings: tuple[Finding, ...]) -> dict[str, tuple[str, ...]]:
    """Pools a warning-or-worse finding names short, each with the codes of the findings that
    explain it (the root whose consequence it is, when that root is another cause)."""
    out: dict[str, tuple[str, ...]] = {}
    for f in findings:
        pool = POOL_OF_CAUSE.get(f.cause)
        if pool is None or f.severity.rank < 1:
            continue
        roots = tuple(r.code for r in findings
                      if r.is_root_cause and f.code in r.consequences and r.cause != f.cause)
        out[pool] = roots if not f.is_root_cause else ()
    return out


def _rules() -> tuple[type[Rule], ...]:
    from pdprobe.rules.catalog import ALL_RULES

    return ALL_RULES


# What one scrape cannot show: everything measured as a change over time.
SINGLE_SCRAPE_NEEDS: Final = ("rates and trends (queues growing, throughput, transfer "
                              "bandwidth) need two scrapes or more: capture a window "
                              "(pdprobe collect, or promtool tsdb dump-openmetrics)")


def single_scrape(dataset: Dataset) -> bool:
    """Metrics (engine or node) from one scrape only (no time span) and no request records."""
    import pandas as pd

    frames = [f["ts"] for f in (dataset.metrics, dataset.network) if len(f)]
    return bool(frames) and pd.concat(frames).nunique() <= 1 and not len(dataset.requests)


def single_scrape_notes(dataset: Dataset) -> tuple[str, ...]:
    """What a single scrape was judged on, and what needs two."""
    if not single_scrape(dataset):
        return ()
    return ("a single scrape: judged on what one scrape shows (gauges: KV usage, queues, "
            "running requests; counters and histograms since engine start, labelled \"since "
            f"start\"); {SINGLE_SCRAPE_NEEDS}",)


def unknown_reason(dataset: Dataset, workload: object,
                   inconclusive: tuple[object, ...]) -> str:
    """One line saying why nothing could be judged, and what to do."""
    first = dataset.warnings[0] if dataset.warnings else ""
    metrics = dataset.metrics
    if single_scrape(dataset):
        return f"a single scrape, and no rule can judge it from one: {SINGLE_SCRAPE_NEEDS}"
    if not len(metrics) and not len(dataset.requests) and not len(dataset.events):
        return ("no usable input: no request records, metrics or log lines were read"
                + (f" ({first})" if first else ""))
    if isinstance(workload, Missing) and not len(metrics):
        return f"too little data to judge any rule: {workload.reason}"
    return (f"too little data to judge any rule ({len(inconclusive)} rules not judged; "
            "pdprobe check lists what each needs)" + (f"; {first}" if first else ""))


def identity_table(dataset: Dataset) -> tuple[IdentityEntry, ...]:
    """Per instance: role and how decided, and every name the inputs gave it."""
    aliases = {i.name: i.aliases for i in dataset.identities}
    return tuple(IdentityEntry(name=info.name, role=info.role, role_source=info.role_source,
                               aliases=aliases.get(info.name, ()), node=info.node,
                               engine=info.engine)
                 for info in dataset.instances)


def _window(dataset: Dataset) -> tuple[float | None, float | None]:
    """The report's window: the first and last timestamp of any input (None, None if none)."""
    from pdprobe.analysis.instances import window_of

    window = window_of(dataset)
    return window if window is not None else (None, None)
