"""The capacity model end to end: workload mix + performance model -> ``CapacityResult``.

The performance model itself is built in ``model_build.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.ahead import Ahead
from pdprobe.analysis.base import CapacityResult, WorkloadSummary
from pdprobe.analysis.capacity.alternatives import band, mean_based
from pdprobe.analysis.capacity.calibrate import (
    failed_share,
    measured_parts,
    recalibration_note,
    tpot_at,
)
from pdprobe.analysis.capacity.mix import (
    WorkloadMix,
    mix_from_histograms,
    mix_from_requests,
)
from pdprobe.analysis.capacity.model_build import BuiltModel, build_model, choose_profile
from pdprobe.analysis.capacity.rates import KV_MEMORY_TARGET
from pdprobe.analysis.capacity.recalibrate import check_model
from pdprobe.analysis.capacity.recommend import (
    LengthWork,
    Slo,
    binding_stage,
    recommend,
    utilizations,
)
from pdprobe.analysis.capacity.sizings import Sizings
from pdprobe.analysis.capacity.transfer import KvBytes, measured_kv_bytes
from pdprobe.analysis.capacity.windows import (
    WindowFrames,
    current_window,
    size_windows,
    window_frames,
)
from pdprobe.values import Missing

if TYPE_CHECKING:
    from collections.abc import Callable

    from pdprobe.analysis.base import RatioBandEntry, RatioWindow, SloAttainment
    from pdprobe.analysis.capacity.calibrate import CalibratedWaits
    from pdprobe.analysis.capacity.recalibrate import ModelCheck
    from pdprobe.dataset import Dataset

    # Confirms a recommendation (``--verify``): the services pass the simulator's replay, so
    # analysis never imports ``sim`` (the layer contract in pyproject.toml).
    Verifier = Callable[[WorkloadMix, "BuiltModel", Slo, CapacityResult], "SloAttainment | Missing"]


# Served load this far below offered load means back-pressure (Dynamo #8861: sizing from
# completions under-provisions); said in a note.
SERVED_SHORTFALL: Final = 0.95


@dataclass(frozen=True)
class CapacityPlan:
    """The capacity model's answer by the model as built (its own waits: ``result``), and
    the same plan re-sized with the window-calibrated waits (``recalibrated``; None when the
    window did not contradict the model's waits with longer ones).

    ``verify`` (with ``--verify``; ``result`` is verified already) replays the counts of a
    result the diagnosis recommends instead, so the replay shown is of the counts shown.

    ``recalibrated(at_least)`` is the whole plan (overall count, windows, band, TTFT
    estimates, utilisations, notes) by the calibrated waits, its prefill count at least
    ``at_least``; None when no count meets the objective with them. Which of the two the
    diagnosis recommends is ``check.check_against_window``'s decision: it needs the
    findings, and the rules read ``result``. ``prepare_recalibrated`` (with
    ``recalibrated``) computes that plan's band and windows, which do not depend on
    ``at_least``, ahead of the decision, on a thread that would otherwise idle (``Ahead``).
    """

    result: CapacityResult
    recalibrated: Callable[[int], CapacityResult | None] | None = None
    # --verify: a result with ``verified`` set by replaying the counts it recommends
    verify: Callable[[CapacityResult], CapacityResult] | None = None
    prepare_recalibrated: Callable[[], None] | None = None


def plan_capacity(mix: WorkloadMix, built: BuiltModel, slo: Slo, *,
                  deployed_prefill: int | None = None, deployed_decode: int | None = None,
                  dataset: Dataset | None = None, window_s: float | None = None,
                  hit_rate_known: bool = True, extra_notes: tuple[str, ...] = ()
                  ) -> CapacityResult:
    """Recommendation, mean-based comparison, band and windows for one mix, as a result
    (by the model as built: ``capacity_plan`` has the recalibrated plan too)."""
    return capacity_plan(mix, built, slo, deployed_prefill=deployed_prefill,
                         deployed_decode=deployed_decode, dataset=dataset, window_s=window_s,
                         hit_rate_known=hit_rate_known, extra_notes=extra_notes).result


@dataclass(frozen=True, eq=False)
class _Inputs:
    """What a plan is made of, whatever wait model sizes it."""

    mix: WorkloadMix
    built: BuiltModel
    slo: Slo
    work: LengthWork
    checked: ModelCheck
    frames: WindowFrames
    sizings: Sizings  # shared by the plans by each wait model
    notes: tuple[str, ...]
    deployed: tuple[int | None, int | None]  # prefill, decode
    hit_rate_known: bool


def capacity_plan(mix: WorkloadMix, built: BuiltModel, slo: Slo, *,
                  deployed_prefill: int | None = None, deployed_decode: int | None = None,
                  dataset: Dataset | None = None, window_s: float | None = None,
                  hit_rate_known: bool = True, extra_notes: tuple[str, ...] = ()
                  ) -> CapacityPlan:
    """The plan by the model as built and, when the window's waits contradict it with
    longer ones, how to re-plan with them (``CapacityPlan``)."""
    model = built.inputs
    notes = list(extra_notes)
    if mix.population is not None:
        notes.append(f"the plan sizes on {mix.population.describe()}: the arrival rate, "
                     "burstiness and load windows and each window's request count and mean "
                     "lengths are measured on every request")
    mix, over = mix.clipped(built.profile.max_model_len)
    if over:
        notes.append(f"{over} requests have prompts beyond the {built.profile.max_model_len:,}-"
                     f"token context of profile {built.profile.name}; they are counted at that "
                     "length (an engine would reject or truncate them)")
    work = LengthWork.of(mix, model, slo)  # shared with the band's load cases
    sizings = Sizings()  # each mix sized once by the model's own waits, for both plans
    measured = measured_parts(dataset.requests, mix) \
        if dataset is not None and len(dataset.requests) else None
    checked = check_model(mix, model, slo, work, deployed_prefill, measured,
                          failed=failed_share(dataset.requests, mix)
                          if measured is not None and dataset is not None else 0.0,
                          sizings=sizings)
    frames = window_frames(dataset, mix, model, slo, window_s) if window_s \
        else WindowFrames((), ())
    inputs = _Inputs(mix, built, slo, work, checked, frames, sizings, tuple(notes),
                     (deployed_prefill, deployed_decode), hit_rate_known)
    result = _plan(inputs)
    waits = checked.waits
    if waits is None:
        return CapacityPlan(result)

    parts = Ahead(lambda: _band_and_windows(inputs, waits))

    def recalibrated(at_least: int) -> CapacityResult | None:
        try:
            return _plan(inputs, waits, at_least, parts.get())
        except ValueError:  # no count meets the objective with the calibrated waits
            return None

    return CapacityPlan(result, recalibrated, prepare_recalibrated=parts.prepare)


def _band_and_windows(inputs: _Inputs, waits: CalibratedWaits | None
                      ) -> tuple[tuple[RatioBandEntry, ...], tuple[RatioWindow, ...]]:
    """The band and the windows of the plan sized with ``waits``, whatever its least prefill
    count."""
    return (band(inputs.mix, inputs.built.inputs, inputs.slo,
                 hit_rate_known=inputs.hit_rate_known, work=inputs.work, waits=waits,
                 sizings=inputs.sizings),
            size_windows(inputs.frames, inputs.built.inputs, inputs.slo, waits,
                         inputs.sizings))


def _plan(inputs: _Inputs, waits: CalibratedWaits | None = None, at_least: int = 0,
          parts: tuple[tuple[RatioBandEntry, ...], tuple[RatioWindow, ...]] | None = None
          ) -> CapacityResult:
    """The plan sized by one wait model: the model's own, or the calibrated ``waits``; the
    prefill count at least ``at_least``; ``parts``: its band and windows when made already
    (``_band_and_windows``)."""
    mix, built, slo, work, checked = (inputs.mix, inputs.built, inputs.slo, inputs.work,
                                      inputs.checked)
    model, (deployed_prefill, deployed_decode) = built.inputs, inputs.deployed
    notes = list(inputs.notes)
    rec = recommend(mix, model, slo, work, waits, at_least, before=checked.notes,
                    sizings=inputs.sizings)
    mb = mean_based(mix, model, slo, rec.rates)
    bands, windows = _band_and_windows(inputs, waits) if parts is None else parts
    notes += list(built.notes) + list(rec.notes)
    notes.append(f"arrival burstiness ca² = {mix.arrival_cv2:.2f} ({mix.arrival_cv2_source}); "
                 f"prefill service cs² = {rec.rates.prefill_service_cv2:.2f}")
    if rec.rates.decode_batch_limit == "kv-memory":
        notes.append(f"decode batches are capped by KV memory, not by the TPOT objective: "
                     f"{rec.rates.decode_batch:.0f} sequences of "
                     f"{rec.rates.decode_context_tokens:,.0f} context tokens fill "
                     f"{KV_MEMORY_TARGET:.0%} of the cache; more KV memory per decode instance "
                     "would raise its capacity")
    if mb.prefill != rec.prefill or mb.decode != rec.decode:
        notes.append(f"a mean-based planner (f(mean ISL), ctx = ISL + OSL/2) would deploy "
                     f"{mb.prefill}P/{mb.decode}D instead of {rec.prefill}P/{rec.decode}D: "
                     f"prefill work per request is {_signed_percent(mb.jensen_gap_prefill)} "
                     f"and decode context {_signed_percent(mb.jensen_gap_decode)} off the "
                     "mean-based figure")
    md1_gap = rec.md1_ttft_s / rec.ttft_mean_s if rec.ttft_mean_s > 0 else 1.0
    if math.isfinite(md1_gap) and (md1_gap > 2 or md1_gap < 0.5):
        notes.append(f"DistServe's M/D/1 gives a mean TTFT of {rec.md1_ttft_s:.2f} s against "
                     f"{rec.ttft_mean_s:.2f} s from "
                     + ("the recalibrated waits" if rec.calibrated else "G/G/c")
                     + ": burstiness and length variance matter here")
    deployed: dict[str, float | Missing] = {
        "p": Missing("deployed counts unknown"), "d": Missing("deployed counts unknown"),
        "x": Missing("deployed counts unknown")}
    binding, basis = rec.binding, "recommended counts"
    if deployed_prefill and deployed_decode:
        up, ud, ux, _ = utilizations(rec.rates, mix.rate_rps, deployed_prefill, deployed_decode,
                                     model.link_bytes_per_s)
        deployed = {"p": up, "d": ud, "x": ux}
        binding, basis = binding_stage(up, ud, ux), "deployed counts"
    cal = checked.calibration
    if checked.recalibrated and cal is not None:
        notes.append(recalibration_note(cal))
    if waits is not None:  # which model the figures beside the count are
        shape = "a queue per prefill instance, " if waits.per_instance else ""
        notes.append(f"the TTFT estimates at the recommended count, the band and the windows "
                     f"are sized with the recalibrated waits ({shape}scaled by "
                     f"{waits.wait_scale:.2g}, each request's measured rest of TTFT), as the "
                     "recommended prefill count is")
    tpot = tpot_at(mix, model.decode, mix.rate_rps, deployed_decode, slo.tpot_s,
                   work.occupancy) if deployed_decode else None
    rec_prefill, rec_decode = rec.prefill, rec.decode
    rec_util = (rec.prefill_utilization, rec.decode_utilization, rec.transfer_utilization)
    current = current_window(windows)
    if current is not None:
        cur_p, cur_d = int(current.recommended_prefill), int(current.recommended_decode)  # type: ignore[arg-type]
        if cur_p > rec_prefill or cur_d > rec_decode:
            # A diagnosis recommends what the cluster needs now: when the latest window's mix
            # needs more than the whole window's average (a shift, a ramp), size for it.
            rec_prefill, rec_decode = max(rec_prefill, cur_p), max(rec_decode, cur_d)
            notes.append(f"recommended {rec_prefill}P/{rec_decode}D sizes for the current mix "
                         f"(the last full window needs {cur_p}P/{cur_d}D); the whole-window "
                         f"average mix alone would need {rec.prefill}P/{rec.decode}D, and the "
                         f"TTFT estimates of the prefill pool are for {rec.prefill}P on that "
                         "average mix")
            # utilisations must describe the counts actually recommended
            up, ud, ux, _ = utilizations(rec.rates, mix.rate_rps, rec_prefill, rec_decode,
                                         model.link_bytes_per_s)
            rec_util = (up, ud, ux)
    defaults = tuple(k for k, d in (("ttft", slo.ttft_default), ("tpot", slo.tpot_default)) if d)
    if defaults:
        notes.append("default objectives used: " + ", ".join(
            f"{k.upper()} {getattr(slo, k + '_s'):g} s" for k in defaults)
            + f" at p{slo.attainment * 100:.0f} (pass --slo-ttft/--slo-tpot for yours)")
    return CapacityResult(
        theoretical_ratio=rec.theoretical_ratio,
        recommended_prefill=rec_prefill,
        recommended_decode=rec_decode,
        deployed_prefill=deployed_prefill or Missing("no prefill instance identified"),
        deployed_decode=deployed_decode or Missing("no decode instance identified"),
        binding=binding,
        prefill_capacity_rps=rec.rates.prefill_capacity_rps,
        decode_capacity_rps=rec.rates.decode_capacity_rps,
        kv_bytes_per_token=model.kv.bytes_per_token,
        transfer_required_bytes_per_s=rec.transfer_required_bytes_per_s,
        transfer_capacity_bytes_per_s=model.link_bytes_per_s,
        mean_based_ratio=mb.ratio,
        mean_based_prefill=mb.prefill,
        mean_based_decode=mb.decode,
        band=bands,
        windows=windows,
        model_source=built.source,
        profile=built.profile.name,
        fit_quality=dict(built.fit_quality),
        notes=tuple(notes),
        slo_ttft_s=slo.ttft_s,
        slo_tpot_s=slo.tpot_s,
        slo_defaulted=defaults,
        arrival_rate_rps=mix.rate_rps,
        arrival_cv2=mix.arrival_cv2,
        prefill_service_s=rec.rates.prefill_service_s,
        prefill_service_cv2=rec.rates.prefill_service_cv2,
        prefill_limit=rec.prefill_limit,
        ttft_estimate_p90_s=rec.ttft_p90_s,
        ttft_estimate_mean_s=rec.ttft_mean_s,
        md1_ttft_s=rec.md1_ttft_s,
        ttft_attainment_estimate=rec.ttft_attainment,
        infeasible_ttft_fraction=rec.infeasible_ttft_fraction,
        decode_batch_size=rec.rates.decode_batch,
        decode_batch_limit=rec.rates.decode_batch_limit,
        decode_context_tokens=rec.rates.decode_context_tokens,
        decode_step_s=rec.rates.decode_step_s,
        decode_limit=rec.decode_limit,
        prefill_utilization=rec_util[0],
        decode_utilization=rec_util[1],
        transfer_utilization=rec_util[2],
        deployed_prefill_utilization=deployed["p"],
        deployed_decode_utilization=deployed["d"],
        deployed_transfer_utilization=deployed["x"],
        binding_basis=basis,
        mean_based_prefill_capacity_rps=mb.rates.prefill_capacity_rps,
        mean_based_decode_capacity_rps=mb.rates.decode_capacity_rps,
        jensen_gap_prefill=mb.jensen_gap_prefill,
        jensen_gap_decode=mb.jensen_gap_decode,
        deployed_ttft_attainment_estimate=_maybe(checked.deployed_ttft_attainment,
                                                 "deployed prefill count unknown"),
        deployed_ttft_p90_estimate_s=_maybe(checked.deployed_ttft_p90_s,
                                            "deployed prefill count unknown"),
        kv_bytes_source=model.kv.source,
        transfer_capacity_source=built.link_source,
        kv_capacity_tokens=model.decode.kv_capacity_tokens,
        kv_capacity_source=built.kv_capacity_source,
        calibrated_ttft_attainment_estimate=cal.attainment if cal is not None
        else Missing("no measured waits to recalibrate with (queue_s, ttft_s)"),
        calibrated_ttft_p90_estimate_s=cal.p90_s if cal is not None and math.isfinite(cal.p90_s)
        else Missing("no measured waits to recalibrate with (queue_s, ttft_s)"
                     if cal is None else "the calibrated TTFT tail has no end"),
        wait_scale=cal.wait_scale if cal is not None
        else Missing("no measured waits to recalibrate with (queue_s, ttft_s)"),
        recalibrated=checked.recalibrated,
        calibrated_prefill=checked.calibrated_prefill if checked.calibrated_prefill is not None
        else Missing("no recalibration raised the prefill count"),
        deployed_tpot_p90_estimate_s=tpot.p90_s if tpot is not None
        else Missing("deployed decode count unknown" if not deployed_decode
                     else "decode overloaded at the deployed count: requests wait for "
                          "admission, TPOT has no steady state"),
        deployed_tpot_attainment_estimate=tpot.attainment if tpot is not None
        else Missing("deployed decode count unknown" if not deployed_decode
                     else "decode overloaded at the deployed count"),
    )


def _maybe(value: float | None, reason: str) -> float | Missing:
    return Missing(reason) if value is None else value


def _signed_percent(x: float) -> str:
    """``+12%``; a gap that rounds to nothing is ``+0%`` whatever float noise its sign has."""
    return f"{0.0 if abs(x) <= 0.005 else x:+.0%}"


@dataclass(frozen=True)
class CapacityOptions:
    """What the capacity model takes from the user (a diagnosis's request, in analysis terms)."""

    slo_ttft_s: float | None = None  # None: the profile's default objective
    slo_tpot_s: float | None = None
    slo_target: float = 0.9  # share of requests that must meet both objectives
    profile: str | None = None  # model x GPU profile name or TOML path; None = infer/default
    window_s: float = 300.0  # capacity estimate per window
    verifier: Verifier | None = None  # confirms the recommendation by simulation (--verify)


def estimate_capacity(dataset: Dataset, workload: WorkloadSummary | Missing,
                      request: CapacityOptions) -> CapacityResult | Missing:
    """The capacity model over a diagnosed dataset, by the model as built (``estimate_plan``
    has the recalibrated plan too)."""
    plan = estimate_plan(dataset, workload, request)
    return plan if isinstance(plan, Missing) else plan.result


def estimate_plan(dataset: Dataset, workload: WorkloadSummary | Missing,
                  request: CapacityOptions, *, measured: KvBytes | str | None = None
                  ) -> CapacityPlan | Missing:
    """The capacity plan over a diagnosed dataset (entry point used by ``pdprobe diagnose``).

    ``measured``: ``measured_kv_bytes(dataset)`` when the caller has it (``analyse`` computes
    it on its other thread while this one summarises the workload)."""
    slo = Slo.of(request.slo_ttft_s, request.slo_tpot_s)
    slo = replace(slo, attainment=request.slo_target)
    if measured is None:  # once: it picks the profile and sizes transfers
        measured = measured_kv_bytes(dataset)
    profile, profile_notes = choose_profile(request.profile, dataset, measured=measured)
    notes = list(profile_notes)
    rate: float | None = None
    if isinstance(workload, WorkloadSummary):
        offered = workload.offered_rate_rps
        arrival = workload.arrival_rate_rps
        if (not isinstance(offered, Missing) and not isinstance(arrival, Missing)
                and offered > arrival * 1.05):
            rate = float(offered)
            notes.append(f"sized for the offered load {offered:.3g} req/s (requests started), "
                         f"above the {arrival:.3g} req/s seen in records")
        served = workload.completed_rate_rps
        demand = rate if rate is not None else arrival
        if (not isinstance(served, Missing) and not isinstance(demand, Missing)
                and served < demand * SERVED_SHORTFALL):
            notes.append(f"only {served:.3g} of {demand:.3g} req/s offered were served: "
                         "completions understate demand (back-pressure), so the estimate uses "
                         "the offered load")
    if len(dataset.requests):
        try:
            mix: WorkloadMix | str = mix_from_requests(
                dataset.requests, rate_rps=rate, timescale_s=slo.ttft_s,
                description="observed requests", rescale=False)
        except ValueError as exc:
            mix = str(exc)
    else:
        mix = mix_from_histograms(dataset, timescale_s=slo.ttft_s)
    if isinstance(mix, str):
        return Missing(f"capacity model needs request lengths: {mix}")
    if not (mix.rate_rps > 0 and math.isfinite(mix.rate_rps)):
        return Missing("capacity model needs an arrival rate: the requests span no time")
    built = build_model(dataset, mix, profile, measured=measured)
    dep_p = len(dataset.instances_of("prefill")) or None
    dep_d = len(dataset.instances_of("decode")) or None
    cached = mix.population.cached_tokens if mix.population is not None else mix.cached_tokens
    hit_known = dataset.has_request_column("cached_tokens") or float(np.sum(cached)) > 0
    try:
        plan = capacity_plan(mix, built, slo, deployed_prefill=dep_p, deployed_decode=dep_d,
                             dataset=dataset, window_s=request.window_s,
                             hit_rate_known=hit_known, extra_notes=tuple(notes))
    except ValueError as exc:  # a workload no finite cluster serves (e.g. absurd rate)
        return Missing(f"capacity model has no answer: {exc}")
    verifier = request.verifier
    if verifier is None:
        return plan

    def verified(result: CapacityResult) -> CapacityResult:
        # the replay is of every request, not of the sample the plan sized on
        return replace(result, verified=verifier(mix.unsampled(), built, slo, result))

    # the model's own counts replayed now (the rules judge them); the counts the diagnosis
    # finally recommends are replayed by the caller (``verify``) when they are others
    return replace(plan, result=verified(plan.result), verify=verified)
