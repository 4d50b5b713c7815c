"""PD701: the length mix shifted and the deployed P/D ratio did not follow (ratio-lag)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.analysis.evidence.stats import ChangePoint
from pdprobe.rules.base import Evidence, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    duration,
    ev,
    evidence_confidence,
    pct,
    prefill_backlog,
    rising,
    series_trend,
    slo_collapsed,
    whole,
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
# The needed ratio must move by more than one instance's worth at the deployed counts: the
# pool that became short needs more than this many extra instances at the other pool's count.
MIN_EXTRA_INSTANCES: Final = 1.0
# The needed ratio (capacity windows, else the prompt/output work proxy) must move by 25 %;
# below 50 % the finding's confidence stays moderate unless the capacity windows agree.
RATIO_CHANGE_MIN: Final = 0.25
RATIO_CHANGE_WARN: Final = 0.5
# A deployment that followed within this many bins is not lagging (planners act on intervals
# of minutes; the bins are a sixtieth of the window). A later follow is a lag only when the
# pool that became short showed pressure before the new instances arrived.
LAG_OK_BINS: Final = 3
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


WHAT: Final = {"prompt": ("mean prompt length", "tokens"),
               "output": ("mean output length", "tokens"),
               "work": ("prompt tokens per output token", "tokens/token")}


@dataclass(frozen=True)
class _Shift:
    which: str  # "prompt" | "output"
    cp: ChangePoint
    p_value: float


class RatioLag(BaseRule):
    """The length mix shifted and the deployed P/D ratio followed late, or not at all

    What it means: partway through the window the workload's prompt or output lengths
    changed markedly (for example a batch of long-document requests replaced chat) while
    the request rate stayed similar. The prefill/decode split the workload needs moved with
    it, but the deployed numbers of prefill and decode instances did not, or only after a
    delay, and the pool that became short shows pressure after the shift.

    Why it matters in a disaggregated deployment: the right P/D ratio depends on the length
    mix (prefill work grows with prompt length, superlinearly; decode work with output
    length and context), not only on the request rate. A planner that scales on request rate
    or on lagging completions keeps the old ratio while one pool saturates and the other
    idles. The root is the scaling/prediction loop, not a missing instance count.

    Evidence it uses: a change point (CUSUM over the per-bin mean prompt and output length,
    bins with >= 5 requests, at least 3 bins each side) shifting the median by >= 30 % with a
    rank-test p < 0.001 (on the requests either side when request records exist); from engine
    logs alone, the same test on the prefill instances' prompt throughput over the decode
    instances' generation throughput (prompt tokens per output token); the shift larger than
    1.5x the statistic's own variation before it (the largest swing of a quarter's median from
    the pre-shift median); the needed ratio moving by >= 25 % (the capacity model's per-window
    theoretical ratio, else the prompt/output work proxy) and by more than one instance's
    worth (the pool that became short needs more than one extra instance at the other pool's
    deployed count; when the shift only took work off the other pool, as falling outputs do
    off decode, that pool must have more than one instance to give); the deployed instance counts per bin not moving in that direction within
    3 bins of the shift; and the consequence observed: pressure on the side that became short
    (prefill queue, wait or TTFT; or decode TPOT, KV usage, admission queue) at >= 1.5x its
    pre-shift level after the shift (and not already rising before it), or a backlog whose
    rising trend starts at the shift (a late follow counts only when that pressure rose before
    it arrived), and, where request records measure it, fewer than the SLO target's share of
    the requests after the shift within that pool's objective (TTFT for prefill, TPOT for
    decode; at least 20 requests) and, when it was already missed before the shift, at least
    10 points worse after it (else the shortage was standing, not a lag). Without that
    consequence there is no finding: the workload
    changed, nothing lagged. Warning; critical when the SLO collapses after the shift.

    What to do: make the planner size each pool from the length mix it sees (prefill demand
    from prompt tokens, decode demand from output tokens x context), not from request counts;
    shorten its adjustment interval or forecast; check that it measures offered load (queue
    and requests started), not completions; meanwhile set the ratio the finding recommends.
    """

    code = "PD701"
    name = "ratio-lag"
    cause = "ratio-lag"
    component = "scheduler/predictor"
    inputs = Inputs(
        needs=(
        "prompt/output lengths over time (request records, or token-length histograms)",
        "instance counts over time (per-instance metrics, or request instance columns)",
        ),
        evidence=("mix", "cluster.prompt_mean", "cluster.output_mean", "cluster.arrivals",
                  "cluster.arrivals_hist", "cluster.prefill_alive", "cluster.decode_alive",
                  "cluster.prefill_queue", "cluster.queue_s_p50", "cluster.ttft_p50",
                  "cluster.tpot_p50", "cluster.decode_kv_usage", "cluster.decode_admission",
                  "cluster.decode_prealloc", "capacity", "slo"),
        live=(Live("token-length histograms", (S.PROMPT_TOKENS, S.OUTPUT_TOKENS)),
              Live("per-instance metrics over time", (S.REQUESTS_RUNNING,
                                                      S.REQUESTS_FINISHED_TOTAL))),
        roles=("prefill", "decode"),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        f = ctx.evidence
        mix = f.mix
        if mix.prompt is None and mix.output is None and mix.work is None:
            return [self.inconclusive()]
        shift = self._shift(f)
        if shift is None:
            return []
        cp = shift.cp
        cluster = f.cluster
        before = cluster.index < cp.ts
        after = ~before
        what, unit = WHAT[shift.which]
        evidence: list[Evidence] = [
            ev(f"{what} after the shift", cp.after, unit, window=(cp.ts, f.window.end_ts),
               baseline=cp.before, source=f"{mix.source}; change point at {_iso(cp.ts)}"),
            ev(f"rank test of the {what} before vs after", shift.p_value, "p-value",
               window=whole(f), baseline=MIX_ALPHA),
        ]
        agree, available = 1, 4
        arrivals = f.cluster_column("arrivals")
        if arrivals is None:
            arrivals = f.cluster_column("arrivals_hist")
        if arrivals is not None and arrivals[before].notna().any():
            a0 = float(arrivals[before].median()) / f.window.step_s
            a1 = float(arrivals[after].median()) / f.window.step_s
            evidence.append(ev("arrival rate after the shift", a1, "req/s",
                               window=(cp.ts, f.window.end_ts), baseline=a0))

        needed = self._needed_change(f, shift, evidence)
        if needed is None or abs(needed) < RATIO_CHANGE_MIN:
            return []
        direction = "prefill" if needed > 0 else "decode"  # the pool that needs to grow
        deployed = self._deployed(f, cp, direction, evidence)
        extra = _extra_instances(f, cp, needed)
        freed = _freed_instances(f, shift, direction)
        if freed is not None and freed <= MIN_EXTRA_INSTANCES:
            # The shift took work off the other pool (outputs fell, or prompts did) and did not
            # add any to this one: the planner could have moved less than one instance across,
            # so pressure here comes from elsewhere (load, a standing shortage), not the mix.
            return []
        if extra is not None:
            if extra <= MIN_EXTRA_INSTANCES:
                return []  # the new mix is within one instance of the deployed split
            evidence.append(ev(f"extra {direction} instances the new mix needs", extra,
                               "instances", window=(cp.ts, f.window.end_ts),
                               baseline=MIN_EXTRA_INSTANCES,
                               source=f"needed ratio change at the deployed "
                                      f"{'decode' if direction == 'prefill' else 'prefill'} "
                                      f"count (deployed split taken as right before the shift)"))
        lag = deployed[1] if deployed is not None and deployed[0] else None
        if lag is not None and lag <= LAG_OK_BINS * f.window.step_s:
            return []  # the ratio followed in time
        agree += 1
        until = cp.ts + lag if lag is not None else f.window.end_ts
        impact, collapsed = self._impact(f, cp, direction, evidence, until)
        if not impact:
            # A shift nothing suffered from is the workload changing, not the scaling loop
            # lagging: the consequence (queue, latency, KV pressure on the pool that became
            # short) must be observed after the shift.
            return []
        after_att = _attainment_after(ctx, cp.ts, until, direction)
        if after_att is not None:
            label = "TTFT" if direction == "prefill" else "TPOT"
            if after_att[0] >= f.slo.target:
                # Pressure rose but the objective still held on the pool that became short:
                # the counts absorbed the new mix (e.g. the fewest that meet it), nothing lags.
                return []
            before_att = _attainment_after(ctx, f.window.start_ts, cp.ts, direction)
            if before_att is not None and before_att[0] < f.slo.target and \
                    after_att[0] > before_att[0] - WORSE_AFTER:
                # Missing already before the shift and no worse after it: a standing shortage
                # (the capacity findings' to name), not a ratio that failed to follow.
                return []
            evidence.append(ev(f"requests within the {label} objective after the shift",
                               100 * after_att[0], "%", window=(cp.ts, until),
                               baseline=100 * f.slo.target,
                               source=f"request records ({after_att[1]} requests)"))
        agree += 1
        cap_mismatch = self._capacity_mismatch(f, cp, evidence)
        if cap_mismatch:
            agree += 1
        severity = Severity.CRITICAL if collapsed else Severity.WARNING
        confidence = evidence_confidence(agree, available)
        if deployed is None:
            confidence -= 0.15
        if abs(needed) < RATIO_CHANGE_WARN and not cap_mismatch:
            confidence = min(confidence, 0.55)  # a modest move: pressure, no model agreement
        change = (cp.after - cp.before) / cp.before
        verb = "rose" if change > 0 else "fell"
        if deployed is None:
            follow = "the deployed counts over time are unknown"
        elif deployed[1] is None:
            follow = f"the deployed ratio did not follow for the remaining " \
                     f"{duration(f.window.end_ts - cp.ts)}"
        else:
            follow = f"the deployed ratio followed only after {duration(deployed[1])}"
        pressure = f"; {direction} pressure rose after the shift" if impact else ""
        # Controller audit: a planner that exports its own view says which half of the loop lagged.
        audit, audit_evidence = planner_audit(f.capacity, cp.ts, direction)
        evidence.extend(audit_evidence)
        pressure += f"; {audit}" if audit else ""
        subject = ("The prompt-to-output token mix" if shift.which == "work"
                   else f"The {shift.which} lengths")
        levels = (f"{cp.before:.3g} to {cp.after:.3g} prompt tokens per output token"
                  if shift.which == "work" else f"{cp.before:.0f} to {cp.after:.0f} tokens")
        summary = (f"{subject} {verb} by {pct(abs(change))} at {_iso(cp.ts)} ({levels}), "
                   f"moving the needed P/D ratio by {pct(abs(needed))}, and {follow}"
                   f"{pressure}: the scaling loop lags the workload")
        instances = list(f.names(direction)) or list(f.names("prefill") + f.names("decode"))
        steps = ["Size each pool from the length mix (prefill demand from prompt tokens, "
                 "decode demand from output tokens x context), not from request counts."]
        cap = f.capacity
        if cap is not None and cap.windows:
            last = cap.windows[-1]
            if isinstance(last.recommended_prefill, int) and isinstance(
                    last.recommended_decode, int):
                steps.insert(0, f"Set {last.recommended_prefill}P:{last.recommended_decode}D "
                                f"for the current mix (capacity model, last window).")
        steps += ["Shorten the planner's adjustment interval or give it a forecast; make it "
                  "measure offered load (queue, requests started), not completions."]
        return [self.finding(severity, confidence, summary, instances=instances,
                             evidence=evidence, next_steps=steps)]

    @staticmethod
    def _shift(f: ClusterEvidence) -> _Shift | None:
        best: _Shift | None = None
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
                best = _Shift(which, cp, p)
        return best

    @staticmethod
    def _needed_change(f: ClusterEvidence, shift: _Shift, evidence: list[Evidence]) -> float | None:
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

    @staticmethod
    def _deployed(f: ClusterEvidence, cp: ChangePoint, direction: str,
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

    @staticmethod
    def _impact(f: ClusterEvidence, cp: ChangePoint, direction: str, evidence: list[Evidence],
                until_ts: float) -> tuple[bool, bool]:
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

    @staticmethod
    def _capacity_mismatch(f: ClusterEvidence, cp: ChangePoint, evidence: list[Evidence]) -> bool:
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


def _extra_instances(f: ClusterEvidence, cp: ChangePoint, needed: float) -> float | None:
    """Instances the pool that became short needs beyond its deployed count after the shift,
    at the other pool's deployed count, taking the deployed split as right before the shift
    (None when the deployed counts are unknown)."""
    p, d = f.cluster_column("prefill_alive"), f.cluster_column("decode_alive")
    n_p = n_d = float("nan")
    if p is not None and d is not None:
        before = f.cluster.index < cp.ts
        n_p, n_d = float(p[before].median()), float(d[before].median())
    if not (np.isfinite(n_p) and np.isfinite(n_d) and n_p > 0 and n_d > 0):
        n_p, n_d = float(len(f.names("prefill"))), float(len(f.names("decode")))
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


def _attainment_after(ctx: RuleContext, start_ts: float, end_ts: float,
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


def _freed_instances(f: ClusterEvidence, shift: _Shift, direction: str) -> float | None:
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
        n = float(len(f.names(other)))
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


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%H:%M:%S UTC")
