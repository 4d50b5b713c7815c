"""PD701: the length mix shifted and the deployed P/D ratio did not follow (ratio-lag).

The measurements (change point, needed and deployed ratio, pressure, planner audit) are in
``ratio_lag_measure.py``; this module keeps the rule and its decision.
"""

from __future__ import annotations

from typing import Final

from pdprobe import signals as S
from pdprobe.rules.base import Evidence, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import BaseRule, duration, ev, evidence_confidence, pct, role_names, whole
from pdprobe.rules.ratio_lag_measure import (
    MIX_ALPHA,
    WORSE_AFTER,
    attainment_between,
    capacity_mismatch,
    deployed_follow,
    extra_instances,
    find_shift,
    freed_instances,
    iso_time,
    needed_ratio_change,
    planner_audit,
    pressure_after_shift,
)

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

WHAT: Final = {"prompt": ("mean prompt length", "tokens"),
               "output": ("mean output length", "tokens"),
               "work": ("prompt tokens per output token", "tokens/token")}


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
        shift = find_shift(f)
        if shift is None:
            return []
        cp = shift.cp
        cluster = f.cluster
        before = cluster.index < cp.ts
        after = ~before
        what, unit = WHAT[shift.which]
        evidence: list[Evidence] = [
            ev(f"{what} after the shift", cp.after, unit, window=(cp.ts, f.window.end_ts),
               baseline=cp.before, source=f"{mix.source}; change point at {iso_time(cp.ts)}"),
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

        needed = needed_ratio_change(f, shift, evidence)
        if needed is None or abs(needed) < RATIO_CHANGE_MIN:
            return []
        direction = "prefill" if needed > 0 else "decode"  # the pool that needs to grow
        deployed = deployed_follow(f, cp, direction, evidence)
        extra = extra_instances(f, cp, needed)
        freed = freed_instances(f, shift, direction)
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
        impact, collapsed = pressure_after_shift(f, cp, direction, evidence, until)
        if not impact:
            # A shift nothing suffered from is the workload changing, not the scaling loop
            # lagging: the consequence (queue, latency, KV pressure on the pool that became
            # short) must be observed after the shift.
            return []
        after_att = attainment_between(ctx, cp.ts, until, direction)
        if after_att is not None:
            label = "TTFT" if direction == "prefill" else "TPOT"
            if after_att[0] >= f.slo.target:
                # Pressure rose but the objective still held on the pool that became short:
                # the counts absorbed the new mix (e.g. the fewest that meet it), nothing lags.
                return []
            before_att = attainment_between(ctx, f.window.start_ts, cp.ts, direction)
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
        cap_mismatch = capacity_mismatch(f, cp, evidence)
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
        summary = (f"{subject} {verb} by {pct(abs(change))} at {iso_time(cp.ts)} ({levels}), "
                   f"moving the needed P/D ratio by {pct(abs(needed))}, and {follow}"
                   f"{pressure}: the scaling loop lags the workload")
        instances = list(role_names(f, direction)) or list(role_names(f, "prefill") + role_names(f, "decode"))
        steps = ["Size each pool from the length mix (prefill demand from prompt tokens, "
                 "decode demand from output tokens x context), not from request counts."]
        cap = ctx.quoted  # the windows the report shows (re-planned when the check took it)
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
