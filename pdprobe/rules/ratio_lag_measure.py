"""PD701's measurements: the mix shift, the needed and deployed ratio, the pressure it caused.

Helpers of ``pd701_ratio_lag.RatioLag`` (which keeps the measure -> decide -> explain body):
finding the change point of the length mix, the needed P/D ratio change across it, whether
the deployed counts followed, the pressure on the pool that became short, the attainment
after the shift, and the audit of a planner that exports its own view.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.analysis.evidence.stats import ChangePoint
from pdprobe.rules.base import Evidence, RuleContext
from pdprobe.rules.common import (
    duration,
    ev,
    prefill_backlog,
    rising,
    role_names,
    series_trend,
    slo_collapsed,
)
from pdprobe.rules.thresholds import DECODE_ADMISSION_GROWTH, TREND_ALPHA, TREND_MIN_TAU

if TYPE_CHECKING:
    import pandas as pd

# A shift of the median per-bin mean prompt or output length by 30 % or more changes the
# prefill/decode work split enough to move the ratio by a whole instance in typical xPyD pools.
MIX_SHIFT_MIN: Final = 0.3
# Rank test across the split (requests, else bins): the shift must be far beyond chance.
MIX_ALPHA: Final = 1e-3
# The shift must exceed the statistic's own variation before it: the largest swing of an
# earlier window's median (stats.window_swing) times this margin, so a trace whose mean
# length wanders by a third from quarter to quarter does not make its next wander a "shift".
SWING_MARGIN: Final = 1.5
# A pressure series at least 1.5x its pre-shift level after the shift is the mismatch hurting.
IMPACT_RATIO: Final = 1.5
# Floors under pre-shift levels so "from 0.01 to 0.02" never counts as doubling.
IMPACT_FLOORS: Final = {
    "prefill_queue": 1.0, "queue_s_p50": 0.2, "ttft_p50": 0.2, "tpot_p50": 0.01,
    "decode_kv_usage": 0.3, "decode_admission": 1.0, "decode_prealloc": 1.0,
}
# How each pressure column reads in the evidence: its name and unit.
IMPACT_LABELS: Final = {
    "prefill_queue": ("prefill queue depth", "requests"),
    "queue_s_p50": ("median wait before prefill", "s"),
    "ttft_p50": ("TTFT p50", "s"), "tpot_p50": ("TPOT p50", "s"),
    "decode_kv_usage": ("decode KV usage", "ratio"),
    "decode_admission": ("decode admission queue", "requests"),
    "decode_prealloc": ("decode pre-allocation queue", "requests"),
}
PREFILL_SIDE: Final = ("prefill_queue", "queue_s_p50", "ttft_p50")
DECODE_SIDE: Final = ("tpot_p50", "decode_kv_usage", "decode_admission", "decode_prealloc")


@dataclass(frozen=True)
class MixShift:
    """A shift of the length mix: which statistic moved, where, and how surely."""

    which: str  # "prompt" | "output"
    cp: ChangePoint
    p_value: float


def find_shift(f: ClusterEvidence) -> MixShift | None:
    """The largest shift of the prompt, output or work mix beyond chance and its own
    wandering before it; None when nothing shifted."""
    best: MixShift | None = None
    for which, cp, p_req in (("prompt", f.mix.prompt, f.mix.prompt_p_requests),
                             ("output", f.mix.output, f.mix.output_p_requests),
                             ("work", f.mix.work, None)):
        if cp is None or not cp.before or cp.before <= 0:
            continue
        p = p_req if p_req is not None else cp.p_value
        rel = (cp.after - cp.before) / cp.before
        if abs(rel) < MIX_SHIFT_MIN or p >= MIX_ALPHA or cp.after <= 0:
            continue
        if abs(np.log(cp.after / cp.before)) <= SWING_MARGIN * cp.before_swing:
            continue  # no larger than the series' own wandering before it
        if best is None or abs(np.log(cp.after / cp.before)) > abs(
                np.log(best.cp.after / best.cp.before)):
            best = MixShift(which, cp, p)
    return best

def needed_ratio_change(f: ClusterEvidence, shift: MixShift,
                        evidence: list[Evidence]) -> float | None:
    """Relative change of the needed prefill/decode ratio across the shift."""
    cp = shift.cp
    if shift.which == "work":  # the throughput ratio is itself the work proxy
        return cp.after / cp.before - 1.0
    cap = f.capacity
    if cap is not None and cap.windows:
        pre = [w.theoretical_ratio for w in cap.windows
               if w.end_ts <= cp.ts + f.window.step_s and isinstance(w.theoretical_ratio,
                                                                      float)]
        post = [w.theoretical_ratio for w in cap.windows
                if w.start_ts >= cp.ts - f.window.step_s and isinstance(w.theoretical_ratio,
                                                                        float)]
        pre_f = [float(x) for x in pre if isinstance(x, float)]
        post_f = [float(x) for x in post if isinstance(x, float)]
        if pre_f and post_f and np.median(pre_f) > 0:
            r0, r1 = float(np.median(pre_f)), float(np.median(post_f))
            evidence.append(ev("theoretical P/D ratio after the shift", r1,
                               "prefill per decode", window=(cp.ts, f.window.end_ts),
                               baseline=r0, source=f"capacity model per window "
                                                   f"({cap.model_source})"))
            return r1 / r0 - 1.0
    prompt, output = f.cluster_column("prompt_mean"), f.cluster_column("output_mean")
    if prompt is None or output is None:
        return None
    before = f.cluster.index < cp.ts
    work = (prompt / output.where(output > 0)).to_numpy(
        dtype="float64")
    w0 = np.nanmedian(work[before]) if np.isfinite(work[before]).any() else np.nan
    w1 = np.nanmedian(work[~before]) if np.isfinite(work[~before]).any() else np.nan
    if not (np.isfinite(w0) and np.isfinite(w1)) or w0 <= 0:
        return None
    evidence.append(ev("prompt tokens per output token after the shift", float(w1),
                       "tokens/token", window=(cp.ts, f.window.end_ts), baseline=float(w0),
                       source="work proxy for the needed P/D ratio (no capacity windows)"))
    return float(w1 / w0 - 1.0)

def deployed_follow(f: ClusterEvidence, cp: ChangePoint, direction: str,
                    evidence: list[Evidence]) -> tuple[bool, float | None] | None:
    """(followed, lag in s or None) from the instance counts per bin; None when unknown."""
    p, d = f.cluster_column("prefill_alive"), f.cluster_column("decode_alive")
    if p is None or d is None:
        return None
    c = f.cluster
    live = (p > 0) & (d > 0)
    if not live.any():
        return None
    ratio = (p / d.where(d > 0)).where(live)
    before = (c.index < cp.ts) & live.to_numpy()
    after = (c.index >= cp.ts) & live.to_numpy()
    if not before.any() or not after.any():
        return None
    r0 = float(ratio[before].median())
    evidence.append(ev("deployed prefill/decode instances after the shift",
                       f"{p[after].median():.0f}P:{d[after].median():.0f}D", "",
                       window=(cp.ts, f.window.end_ts),
                       baseline=f"{p[before].median():.0f}P:{d[before].median():.0f}D",
                       source="instances reporting per bin"))
    moved = ratio[after] > r0 * 1.05 if direction == "prefill" else ratio[after] < r0 * 0.95
    if not moved.any():
        return (False, None)
    first = float(moved[moved].index[0])
    return (True, first - cp.ts)

def pressure_after_shift(f: ClusterEvidence, cp: ChangePoint, direction: str,
                         evidence: list[Evidence], until_ts: float) -> tuple[bool, bool]:
    """Whether the side that became short shows pressure between the shift and
    ``until_ts`` (the end, or the late follow), and whether its SLO collapsed."""
    upto = f.cluster.index < until_ts
    names_ = PREFILL_SIDE if direction == "prefill" else DECODE_SIDE
    hit = False
    for col in names_:
        full = f.cluster_column(col)
        if full is None:
            continue
        series: pd.Series = full[upto]
        before = series.index < cp.ts
        b, a = series[before].dropna(), series[~before].dropna()
        if len(b) < 3 or len(a) < 3:
            continue
        pre = series_trend(b)
        if pre is not None and pre.rising(TREND_ALPHA, TREND_MIN_TAU, 0.0):
            continue  # already rising before the shift (warm-up, a growing backlog)
        level0 = max(float(b.median()), IMPACT_FLOORS[col])
        level1 = float(a.median())
        if level1 >= IMPACT_RATIO * level0:
            hit = True
            label, unit = IMPACT_LABELS.get(col, (col.replace("_", " "), ""))
            evidence.append(ev(f"{label} after the shift", level1, unit,
                               window=(cp.ts, until_ts), baseline=float(b.median()),
                               source="median per bin before vs after"))
    if not hit:
        # A backlog that started growing at the shift, even before its median doubled.
        tr, what = prefill_backlog(f) if direction == "prefill" else (
            series_trend(f.role_series("decode_admission")), "decode admission queue")
        grew = tr is not None and (direction == "prefill" or rising(
            tr, DECODE_ADMISSION_GROWTH, f))
        if grew and tr is not None and cp.ts - f.window.step_s <= tr.onset_ts < until_ts:
            hit = True
            evidence.append(ev(f"{what} since the shift", tr.hinge_end_level, "",
                               window=(tr.onset_ts, tr.end_ts), baseline=tr.onset_level,
                               source="rising trend whose onset follows the shift"))
    att = f.slo.ttft_attainment if direction == "prefill" else f.slo.tpot_attainment
    return hit, hit and slo_collapsed(att)

def capacity_mismatch(f: ClusterEvidence, cp: ChangePoint, evidence: list[Evidence]) -> bool:
    """Whether most capacity windows after the shift deploy other counts than recommended."""
    cap = f.capacity
    if cap is None or not cap.windows:
        return False
    post = [w for w in cap.windows if w.start_ts >= cp.ts]
    bad = [w for w in post if isinstance(w.recommended_prefill, int)
           and isinstance(w.deployed_prefill, int) and isinstance(w.recommended_decode, int)
           and isinstance(w.deployed_decode, int)
           and (w.recommended_prefill, w.recommended_decode)
           != (w.deployed_prefill, w.deployed_decode)]
    if not post or not bad:
        return False
    w = bad[-1]
    evidence.append(ev("capacity windows after the shift where deployed ≠ recommended "
                       f"(of {len(post)})", len(bad), "windows",
                       window=(cp.ts, f.window.end_ts),
                       source=f"last: recommended {w.recommended_prefill}P:"
                              f"{w.recommended_decode}D, deployed {w.deployed_prefill}P:"
                              f"{w.deployed_decode}D"))
    return len(bad) * 2 >= len(post)


def extra_instances(f: ClusterEvidence, cp: ChangePoint, needed: float) -> float | None:
    """Instances the pool that became short needs beyond its deployed count after the shift,
    at the other pool's deployed count, taking the deployed split as right before the shift
    (None when the deployed counts are unknown)."""
    p, d = f.cluster_column("prefill_alive"), f.cluster_column("decode_alive")
    n_p = n_d = float("nan")
    if p is not None and d is not None:
        before = f.cluster.index < cp.ts
        n_p, n_d = float(p[before].median()), float(d[before].median())
    if not (np.isfinite(n_p) and np.isfinite(n_d) and n_p > 0 and n_d > 0):
        n_p, n_d = float(len(role_names(f, "prefill"))), float(len(role_names(f, "decode")))
    if n_p <= 0 or n_d <= 0 or needed <= -1.0:
        return None
    if needed > 0:  # prefill short: P x (r1 / r0) prefill instances at the same decode count
        return n_p * needed
    return n_d * (1.0 / (1.0 + needed) - 1.0)  # decode short: D x (r0 / r1)


# Attainment after the shift is judged on at least this many requests; fewer say nothing.
MIN_AFTER_REQUESTS: Final = 20
# When the objective was already missed before the shift, the shift must make it this much
# worse (10 points of attainment) to be the cause rather than a standing shortage.
WORSE_AFTER: Final = 0.1


def attainment_between(ctx: RuleContext, start_ts: float, end_ts: float,
                      direction: str) -> tuple[float, int] | None:
    """Share of the requests arriving in ``[start_ts, end_ts)`` within the objective of the
    pool that became short (TTFT for prefill, TPOT for decode), and how many were judged;
    None without request records carrying it or without the objective."""
    slo = ctx.evidence.slo
    column, objective = (("ttft_s", slo.ttft_slo_s) if direction == "prefill"
                         else ("tpot_s", slo.tpot_slo_s))
    req = ctx.dataset.requests
    if objective is None or not len(req) or column not in req.columns:
        return None
    ts = req["arrival_ts"].to_numpy(dtype="float64")
    values = req[column].to_numpy(dtype="float64")
    inside = (ts >= start_ts) & (ts < end_ts) & np.isfinite(values)
    n = int(inside.sum())
    if n < MIN_AFTER_REQUESTS:
        return None
    return float(np.mean(values[inside] <= objective)), n


def freed_instances(f: ClusterEvidence, shift: MixShift, direction: str) -> float | None:
    """Instances the other pool could give up when the shift only took work off it (outputs
    fell: decode's work per request falls with them; prompts fell: prefill's), None when the
    shift adds work to the pool that became short itself (or the counts are unknown)."""
    other = {("output", "prefill"): "decode", ("prompt", "decode"): "prefill"}.get(
        (shift.which, direction))
    cp = shift.cp
    if other is None or not cp.before or cp.after >= cp.before:
        return None
    alive = f.cluster_column(f"{other}_alive")
    n = float(alive[f.cluster.index < cp.ts].median()) if alive is not None else float("nan")
    if not (np.isfinite(n) and n > 0):
        n = float(len(role_names(f, other)))
    return n * (1.0 - cp.after / cp.before) if n > 0 else None


# The planner's recommendation counts as moved once it differs from its pre-shift value by at
# least half a replica (the gauges hold whole replica counts).
PLANNER_MOVE_MIN: Final = 0.5


def planner_audit(cap: object, shift_ts: float, direction: str) -> tuple[str, list[Evidence]]:
    """Whether the planner's recommendation or its actuation lagged the shift.

    Reads the capacity windows' planner counts (Dynamo ``dynamo_planner_*``): the recommended
    (predicted) replicas of the pool that had to grow, and the deployed replicas the planner
    saw. Returns a clause for the summary ("" without planner data) and the evidence.
    """
    windows = getattr(cap, "windows", ()) or ()
    pred_f, cur_f = f"planner_predicted_{direction}", f"planner_{direction}"

    def known(w: object, name: str) -> float | None:
        v = getattr(w, name, None)
        return float(v) if isinstance(v, (int, float)) and np.isfinite(v) else None

    rows = [(w.start_ts, w.end_ts, known(w, pred_f), known(w, cur_f)) for w in windows
            if known(w, pred_f) is not None]
    before = [r for r in rows if r[1] <= shift_ts]
    after = [r for r in rows if r[1] > shift_ts]
    if not before or not after:
        return "", []
    p0, c0, p_last = before[-1][2], before[-1][3], after[-1][2]
    assert p0 is not None and p_last is not None  # rows keep windows with a recommendation
    moved = [r for r in after if r[2] is not None and abs(r[2] - p0) >= PLANNER_MOVE_MIN]
    last = after[-1]
    evidence = [ev(f"planner's recommended {direction} replicas after the shift", p_last,
                   "replicas", window=(shift_ts, last[1]), baseline=p0,
                   source="dynamo_planner_predicted_num_*_replicas, last value per window")]
    if not moved:
        return (f"the planner's own recommendation stayed at {p0:.0f} {direction}: its "
                f"prediction lagged the shift"), evidence
    rec_ts, target = moved[0][1], moved[0][2]
    assert target is not None
    followed = [r for r in after if r[0] >= moved[0][0] and r[3] is not None
                and abs(r[3] - target) < PLANNER_MOVE_MIN]
    if last[3] is not None:
        evidence.append(ev(f"deployed {direction} replicas the planner saw after the shift",
                           last[3], "replicas", window=(shift_ts, last[1]), baseline=c0,
                           source="dynamo_planner_num_*_replicas, last value per window"))
    rec_lag = max(rec_ts - shift_ts, 0.0)
    if not followed:
        return (f"the planner recommended {target:.0f} {direction} within {duration(rec_lag)} "
                f"but the deployed replicas stayed at {last[3]:.0f}: its actuation lagged"
                if last[3] is not None else
                f"the planner recommended {target:.0f} {direction} within {duration(rec_lag)}; "
                f"the deployed replicas are unknown"), evidence
    act_lag = max(followed[0][1] - rec_ts, 0.0)
    which = "actuation" if act_lag > rec_lag else "recommendation"
    return (f"the planner recommended {target:.0f} {direction} after {duration(rec_lag)} and "
            f"the replicas followed {duration(act_lag)} later: its {which} lagged more"), evidence


def iso_time(ts: float) -> str:
    """``ts`` (Unix seconds) as a UTC time of day for the summary."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%H:%M:%S UTC")
