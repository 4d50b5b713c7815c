"""The capacity model checked against the window before it recommends.

At the deployed counts, for the observed mix and arrivals, the model predicts TTFT attainment
and p90 (``CapacityResult.deployed_ttft_*``); the window observed its own. Both are reported.
Beyond ``MODEL_TOLERANCE`` the model is said to disagree, and in which direction. Whatever the
model says, a pool whose stage misses the SLO is never recommended at or below its deployed
count, unless another finding explains the miss: then the recommendation is stated as
conditional on fixing that finding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Final

from pdprobe.analysis.base import CapacityResult
from pdprobe.values import Maybe, Missing

# Predicted and observed TTFT attainment agree within this many points (0.05 = 5 points): the
# backtest's target for the model at the deployed counts (docs/model.md).
MODEL_TOLERANCE: Final = 0.05
# Predicted and observed TTFT p90 agree within this factor either way. Five points of
# attainment around the 90th percentile span p85..p95; on an exponential wait tail that is
# a factor ln(20)/ln(10) = 1.30 above p90 and ln(10)/ln(6.7) = 1.21 below it, so 1.5 leaves
# margin for the bare TTFT's spread while catching a wait level that attainment hides: a
# tail mostly inside the objective moves the p90 long before it moves the attainment (issue:
# per-instance round-robin queues, p90 0.57 s predicted vs 1.28 s observed at 4 points).
MODEL_P90_FACTOR: Final = 1.5


def p90_disagrees(predicted_s: float | None, observed_s: float | None) -> bool:
    """True when both TTFT p90s are known, positive and more than ``MODEL_P90_FACTOR`` apart."""
    if predicted_s is None or observed_s is None:
        return False
    if not (math.isfinite(predicted_s) and math.isfinite(observed_s)):
        return False
    if predicted_s <= 0 or observed_s <= 0:
        return False
    return max(predicted_s / observed_s, observed_s / predicted_s) > MODEL_P90_FACTOR


def _num(value: Maybe[float] | Maybe[int] | None) -> float | None:
    return None if value is None or isinstance(value, Missing) else float(value)


# The diagnosis's plan re-sized with the window-calibrated waits, its prefill count at least
# the argument (``estimate.CapacityPlan.recalibrated``); None when no count meets it.
Replan = Callable[[int], CapacityResult | None]


def check_against_window(cap: CapacityResult, *, observed_attainment: float | None,
                         observed_p90_s: float | None, slo_missed: bool,
                         short_pools: Mapping[str, tuple[str, ...]],
                         observed_tpot_p90_s: float | None = None,
                         recalibrated: Replan | None = None) -> CapacityResult:
    """``cap`` with the observed figures, the model check and the SLO-miss guard applied.

    ``short_pools``: "prefill"/"decode" whose stage the findings name, each with the codes of
    the findings that explain it (a straggler, skew, the fabric; empty when none does).
    ``recalibrated``: the same plan by the window-calibrated waits. When the recalibration
    sets the prefill count (the recommendation rule, docs/model.md), the result is that
    plan, so its windows, band, TTFT estimates, utilisations and notes describe the model
    the count comes from; without it only the count moves.
    """
    check = _check_text(cap, observed_attainment, observed_p90_s, observed_tpot_p90_s)
    notes: list[str] = []
    dep_p, dep_d = _num(cap.deployed_prefill), _num(cap.deployed_decode)
    rec_p, rec_d = cap.recommended_prefill, cap.recommended_decode
    conditional: tuple[str, ...] = ()
    at_least: int | None = None  # a count set by the recalibration: re-planned with it
    if not (slo_missed and "prefill" in short_pools):  # else the SLO-miss guard below decides
        at_least, note = _recalibrated_prefill(cap, observed_attainment, observed_p90_s,
                                               short_pools)
        if note:
            notes.append(note)
    if slo_missed:
        for pool in ("prefill", "decode"):
            if pool not in short_pools:
                continue
            explained_by = short_pools[pool]
            rec = _num(rec_p if pool == "prefill" else rec_d)
            dep = dep_p if pool == "prefill" else dep_d
            if rec is None or dep is None:
                continue
            if rec > dep:
                cal_p = _num(cap.calibrated_prefill) if pool == "prefill" else None
                if not explained_by and cal_p is not None and cal_p > rec:
                    notes.append(f"the prefill stage misses the SLO; with the recalibrated "
                                 f"waits {int(cal_p)} prefill meet the objective (the model "
                                 f"alone said {int(rec)})")
                    at_least = int(cal_p)
                continue
            if explained_by:
                conditional = tuple(sorted(set(conditional) | set(explained_by)))
                notes.append(f"the {pool} stage misses the SLO at the deployed {int(dep)} "
                             f"instances; {int(rec)} {pool} is enough only once "
                             f"{', '.join(conditional)} is fixed")
                continue
            raised = int(dep) + 1
            cal_p = _num(cap.calibrated_prefill) if pool == "prefill" else None
            if cal_p is not None and cal_p > raised:
                at_least = int(cal_p)
                notes.append(f"the {pool} stage misses the SLO at the deployed {int(dep)} "
                             f"instances; with the recalibrated waits {at_least} {pool} meet "
                             f"the objective (the model alone said {int(rec)})")
            else:
                notes.append(f"the {pool} stage misses the SLO at the deployed {int(dep)} "
                             f"instances, so {raised} {pool} are recommended (the model alone "
                             f"said {int(rec)})")
                if pool == "prefill":
                    rec_p = raised
                else:
                    rec_d = raised
    base = cap
    if at_least is not None:
        planned = recalibrated(at_least) if recalibrated is not None else None
        if planned is not None:  # the plan the count comes from, figures and all
            base, rec_p = planned, planned.recommended_prefill
        else:  # only the count is known: the utilisation shown is that of the count
            rec_p = at_least
            before = _num(cap.recommended_prefill)
            if before is not None:
                base = replace(cap, prefill_utilization=_scaled(cap.prefill_utilization,
                                                                before, at_least))
    if check:
        notes.append(check)
    return replace(base, recommended_prefill=rec_p, recommended_decode=rec_d,
                   observed_ttft_attainment=observed_attainment if observed_attainment is not None
                   else Missing("no observed TTFT attainment"),
                   observed_ttft_p90_s=observed_p90_s if observed_p90_s is not None
                   else Missing("no observed TTFT p90"),
                   observed_tpot_p90_s=observed_tpot_p90_s if observed_tpot_p90_s is not None
                   else Missing("no observed TPOT p90"),
                   model_check=check, conditional_on=conditional,
                   notes=base.notes + tuple(notes))


def _check_text(cap: CapacityResult, observed_attainment: float | None,
                observed_p90_s: float | None, observed_tpot_p90_s: float | None) -> str:
    """The model check in words: the prediction at the deployed counts against the window,
    and what was done about a disagreement."""
    pred = _num(cap.deployed_ttft_attainment_estimate)
    pred_p90 = _num(cap.deployed_ttft_p90_estimate_s)
    check = ""
    dep_p, dep_d = _num(cap.deployed_prefill), _num(cap.deployed_decode)
    if pred is not None and observed_attainment is not None:
        gap = pred - observed_attainment
        at = f"{int(dep_p or 0)}P:{int(dep_d or 0)}D" if dep_p and dep_d else "the deployed counts"
        check = (f"at {at} the model predicts {pred:.1%} of requests within the TTFT objective"
                 + (f" (p90 {pred_p90:.2f} s)" if pred_p90 is not None else "")
                 + f"; the window observed {observed_attainment:.1%}"
                 + (f" (p90 {observed_p90_s:.2f} s)" if observed_p90_s is not None else ""))
        cal = _num(cap.calibrated_ttft_attainment_estimate)
        level_off = p90_disagrees(pred_p90, observed_p90_s)
        if abs(gap) <= MODEL_TOLERANCE and cap.recalibrated and cal is not None and level_off:
            check += _p90_recalibration(cap, pred_p90, observed_p90_s, cal,
                                        observed_attainment)
        elif abs(gap) <= MODEL_TOLERANCE:
            check += f": they agree within {MODEL_TOLERANCE * 100:.0f} points"
        elif cap.recalibrated and cal is not None:
            direction = "optimistic" if gap > 0 else "pessimistic"
            cal_p90 = _num(cap.calibrated_ttft_p90_estimate_s)
            left = cal - observed_attainment
            check += (f": the model is {direction} by {abs(gap) * 100:.0f} points, beyond the "
                      f"{MODEL_TOLERANCE * 100:.0f}-point tolerance, so it was recalibrated "
                      f"with the window's measured waits (scale "
                      f"{_num(cap.wait_scale) or 1.0:.2g}): {cal:.1%}"
                      + (f" (p90 {cal_p90:.2f} s)" if cal_p90 is not None else "")
                      + (f", within {MODEL_TOLERANCE * 100:.0f} points of the window"
                         if abs(left) <= MODEL_TOLERANCE else
                         f", still {abs(left) * 100:.0f} points "
                         f"{'above' if left > 0 else 'below'} the window: the waits' shape "
                         "(when and how long) differs from the model's, not only their level"))
        else:
            direction = "optimistic" if gap > 0 else "pessimistic"
            check += (f": the model is {direction} by {abs(gap) * 100:.0f} points, beyond the "
                      f"{MODEL_TOLERANCE * 100:.0f}-point tolerance, and the inputs carry no "
                      "per-request waits to recalibrate it with (queue_s, ttft_s), so its "
                      "counts are checked against the observed miss below")
    tpot_p90 = _num(cap.deployed_tpot_p90_estimate_s)
    if tpot_p90 is not None and observed_tpot_p90_s is not None:
        tpot_gap = "; TPOT p90: model " + f"{tpot_p90 * 1000:.0f} ms, window " \
            f"{observed_tpot_p90_s * 1000:.0f} ms"
        check = (check + tpot_gap) if check else tpot_gap[2:]
    return check


def _factor(ratio: float) -> str:
    """``ratio`` to one decimal, or two where one would print the tolerance itself (1.52
    beyond a 1.5x tolerance must not read "1.5x")."""
    text = f"{ratio:.1f}"
    return f"{ratio:.2f}" if text == f"{MODEL_P90_FACTOR:.1f}" else text


def _p90_recalibration(cap: CapacityResult, pred_p90: float | None,
                       observed_p90_s: float | None, cal: float,
                       observed_attainment: float) -> str:
    """The check's words when attainment agreed but the TTFT p90 did not."""
    assert pred_p90 is not None and observed_p90_s is not None  # p90_disagrees checked both
    cal_p90 = _num(cap.calibrated_ttft_p90_estimate_s)
    ratio = observed_p90_s / pred_p90
    text = (f": they agree within {MODEL_TOLERANCE * 100:.0f} points of attainment, but the "
            f"model's TTFT p90 is {_factor(max(ratio, 1 / ratio))}x "
            f"{'shorter' if ratio > 1 else 'longer'} than the window's, beyond the "
            f"{MODEL_P90_FACTOR:g}x tolerance (a TTFT tail mostly inside the objective moves "
            "the p90 before the attainment), so it was recalibrated with the window's measured "
            f"waits (scale {_num(cap.wait_scale) or 1.0:.2g}): {cal:.1%}"
            + (f" (p90 {cal_p90:.2f} s)" if cal_p90 is not None else ""))
    if p90_disagrees(cal_p90, observed_p90_s) or abs(cal - observed_attainment) > \
            MODEL_TOLERANCE:
        return text + (", still off the window: the waits' shape (which requests wait, how "
                       "long) differs from the model's, not only their level")
    return text + ", now in line with the window"


def _still_optimistic(cap: CapacityResult, observed_attainment: float | None,
                      observed_p90_s: float | None) -> bool:
    """The recalibrated model still predicts more requests within the objective, or a shorter
    TTFT p90, than the window observed (beyond the tolerances)."""
    cal, cal_p90 = _num(cap.calibrated_ttft_attainment_estimate), \
        _num(cap.calibrated_ttft_p90_estimate_s)
    if cal is not None and observed_attainment is not None and \
            cal - observed_attainment > MODEL_TOLERANCE:
        return True
    return cal_p90 is not None and observed_p90_s is not None and \
        cal_p90 < observed_p90_s and p90_disagrees(cal_p90, observed_p90_s)


def _recalibrated_prefill(cap: CapacityResult, observed_attainment: float | None,
                          observed_p90_s: float | None,
                          short_pools: Mapping[str, tuple[str, ...]]
                          ) -> tuple[int | None, str]:
    """The least prefill count the recalibration sets, and its note (None, "" when it sets
    none: the recommendation stands).

    Recalibrated with waits longer than the model's, the model's own were contradicted by
    the window, so the count is the one the recalibrated waits need (``calibrated_prefill``);
    and where even they stay shorter than the window's, no count below the deployed one is
    recommended: nothing then says fewer instances would hold the objective. Not when a
    finding names decode short (the waits may be its back-pressure, which prefill instances
    do not remove) or names prefill short for another finding's reason (that finding is fixed
    first).
    """
    scale, r = _num(cap.wait_scale), _num(cap.recommended_prefill)
    cal_p = _num(cap.calibrated_prefill)
    if not cap.recalibrated or scale is None or r is None:
        return None, ""
    if scale <= 1.0 and cal_p is None:  # the window's waits are not longer than the model's
        return None, ""
    if "decode" in short_pools or short_pools.get("prefill"):
        return None, ""
    dep = _num(cap.deployed_prefill)
    if dep is not None and r < dep and (cal_p is None or cal_p <= dep) and \
            _still_optimistic(cap, observed_attainment, observed_p90_s):
        return int(dep), (f"even recalibrated, the model's waits are shorter than the "
                          f"window's, so they cannot show that fewer than the deployed "
                          f"{int(dep)} prefill meet the objective: {int(dep)} are kept (the "
                          f"model alone said {int(r)}"
                          + (f", the recalibrated waits {int(cal_p)}" if cal_p is not None
                             else "") + ")")
    if cal_p is not None and cal_p > r:
        return int(cal_p), (f"the window's waits contradict the model's; with the "
                            f"recalibrated waits {int(cal_p)} prefill meet the objective "
                            f"(the model alone said {int(r)})")
    return None, ""


def with_headroom(cap: CapacityResult, *, min_instances: int = 1,
                  headroom: int = 0) -> CapacityResult:
    """``cap`` with ``needed_*`` = what meets the objective and ``recommended_*`` = that plus
    ``headroom`` instances per pool, at least ``min_instances`` (``--headroom``,
    ``--min-instances``: keep N+1 to survive losing one)."""
    need_p, need_d = _num(cap.recommended_prefill), _num(cap.recommended_decode)
    if need_p is None or need_d is None:
        return cap
    rec_p = max(int(need_p) + headroom, min_instances)
    rec_d = max(int(need_d) + headroom, min_instances)
    notes = list(cap.notes)
    if (rec_p, rec_d) != (int(need_p), int(need_d)):
        asked = " and ".join(x for x in (
            f"{headroom} instance{'s' if headroom != 1 else ''} of headroom per pool"
            if headroom else "", f"at least {min_instances} per pool"
            if min_instances > 1 else "") if x)
        notes.append(f"{int(need_p)}P:{int(need_d)}D meet the objective; {rec_p}P:{rec_d}D "
                     f"are recommended with {asked}")
    return replace(cap, needed_prefill=int(need_p), needed_decode=int(need_d),
                   recommended_prefill=rec_p, recommended_decode=rec_d,
                   min_instances=min_instances, headroom_instances=headroom,
                   notes=tuple(notes),
                   # the utilisations shown as "recommended" are those of the counts shown
                   prefill_utilization=_scaled(cap.prefill_utilization, need_p, rec_p),
                   decode_utilization=_scaled(cap.decode_utilization, need_d, rec_d),
                   transfer_utilization=_scaled(cap.transfer_utilization,
                                                min(need_p, need_d), min(rec_p, rec_d)))


def _scaled(utilization: Maybe[float], before: float, after: float) -> Maybe[float]:
    """A pool's utilisation at ``after`` instances from its value at ``before`` (load / count;
    transfer load per node goes with the smaller pool)."""
    u = _num(utilization)
    return utilization if u is None or after <= 0 else u * before / after
