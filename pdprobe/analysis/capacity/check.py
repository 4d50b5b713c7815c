"""The capacity model checked against the window before it recommends.

At the deployed counts, for the observed mix and arrivals, the model predicts TTFT attainment
and p90 (``CapacityResult.deployed_ttft_*``); the window observed its own. Both are reported.
Beyond ``MODEL_TOLERANCE`` the model is said to disagree, and in which direction. Whatever the
model says, a pool whose stage misses the SLO is never recommended at or below its deployed
count, unless another finding explains the miss: then the recommendation is stated as
conditional on fixing that finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from pdprobe.analysis.base import CapacityResult
from pdprobe.values import Maybe, Missing

# Predicted and observed TTFT attainment agree within this many points (0.05 = 5 points): the
# backtest's target for the model at the deployed counts (docs/model.md).
MODEL_TOLERANCE: Final = 0.05


def _num(value: Maybe[float] | Maybe[int] | None) -> float | None:
    return None if value is None or isinstance(value, Missing) else float(value)


def check_against_window(cap: CapacityResult, *, observed_attainment: float | None,
                         observed_p90_s: float | None, slo_missed: bool,
                         short_pools: Mapping[str, tuple[str, ...]],
                         observed_tpot_p90_s: float | None = None) -> CapacityResult:
    """``cap`` with the observed figures, the model check and the SLO-miss guard applied.

    ``short_pools``: "prefill"/"decode" whose stage the findings name, each with the codes of
    the findings that explain it (a straggler, skew, the fabric; empty when none does).
    """
    pred = _num(cap.deployed_ttft_attainment_estimate)
    pred_p90 = _num(cap.deployed_ttft_p90_estimate_s)
    notes = list(cap.notes)
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
        if abs(gap) <= MODEL_TOLERANCE:
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
    rec_p, rec_d = cap.recommended_prefill, cap.recommended_decode
    conditional: tuple[str, ...] = ()
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
                    rec_p = int(cal_p)
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
                raised = int(cal_p)
                notes.append(f"the {pool} stage misses the SLO at the deployed {int(dep)} "
                             f"instances; with the recalibrated waits {raised} {pool} meet "
                             f"the objective (the model alone said {int(rec)})")
            else:
                notes.append(f"the {pool} stage misses the SLO at the deployed {int(dep)} "
                             f"instances, so {raised} {pool} are recommended (the model alone "
                             f"said {int(rec)})")
            if pool == "prefill":
                rec_p = raised
            else:
                rec_d = raised
    if check:
        notes.append(check)
    return replace(cap, recommended_prefill=rec_p, recommended_decode=rec_d,
                   observed_ttft_attainment=observed_attainment if observed_attainment is not None
                   else Missing("no observed TTFT attainment"),
                   observed_ttft_p90_s=observed_p90_s if observed_p90_s is not None
                   else Missing("no observed TTFT p90"),
                   observed_tpot_p90_s=observed_tpot_p90_s if observed_tpot_p90_s is not None
                   else Missing("no observed TPOT p90"),
                   model_check=check, conditional_on=conditional, notes=tuple(notes))


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
