"""PD801: the SLO is missed; the stage holding most of the excess time names the cause."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Final

from pdprobe import signals as S
from pdprobe.rules.base import (
    Evidence,
    Finding,
    Inputs,
    Live,
    RuleContext,
    RuleResult,
    Severity,
)
from pdprobe.rules.common import BaseRule, ev, pct, secs, whole
from pdprobe.rules.pd301_kv_transfer_bandwidth import decode_explains_transfer
from pdprobe.rules.thresholds import SLO_CRITICAL
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.base import CapacityResult
    from pdprobe.analysis.evidence.model import ClusterEvidence, SloMissShape
    from pdprobe.rules.base import Cause, Component

# Stage of TTFT -> the cause it points at, and the words for it.
STAGE_CAUSE: Final[dict[str, Cause]] = {
    "queue": "prefill-bound", "prefill": "prefill-bound", "kv-transfer": "kv-transfer-bandwidth",
    "decode-admission": "decode-bound",
}
STAGE_WORDS: Final = {
    "queue": "the wait before prefill", "prefill": "prefill compute",
    "kv-transfer": "the KV transfer", "decode-admission": "decode admission and the first step",
}
CAUSE_COMPONENT: Final[dict[str, Component]] = {
    "prefill-bound": "instance-manager", "decode-bound": "instance-manager",
    "kv-transfer-bandwidth": "kv-connector",
}
# Misses are "in bursts" when this share of them arrived in the busiest bins, and at least
# BURST_LIFT times the share of all requests those bins carried (else the bins are just busy).
BURST_MISS_SHARE: Final = 0.5
BURST_LIFT: Final = 1.5
# Confidence from the share of the excess the leading stage holds: per request (met and missed
# requests compared) 0.45 + 0.5 x share; histogram means (no met/missed split) 0.35 + 0.4 x share;
# no decomposition at all (the objective that missed alone) FALLBACK_CONFIDENCE.
FALLBACK_CONFIDENCE: Final = 0.35


class SloMiss(BaseRule):
    """The SLO is missed: fewer requests than the target met their objectives

    What it means: the share of requests within both objectives (TTFT and TPOT; the defaults
    when none are given: TTFT 2 s, TPOT 100 ms) is below the target (`--slo-target`, default
    90 %). This is what users see, whatever the rest of the telemetry says, so a miss is always
    at least a warning (critical below 50 %).

    Why it matters in a disaggregated deployment: the time to first token crosses three stages
    on two pools (wait and compute on prefill, the KV transfer, admission on decode): the stage
    where the missed requests lost their time names the pool or link that is short. When a
    more specific rule explains the miss (a straggler, routing skew, ratio lag), that rule
    leads and this finding is its consequence.

    Evidence it uses: per request, TTFT = wait before prefill (queue_s) → prefill compute
    (prefill_s) → KV transfer (kv_transfer_s) → decode admission and the first decode step
    (the rest of ttft_s); each stage's excess is its mean over the requests that missed minus
    its median over those that met. Wait or compute → prefill-bound; the transfer →
    kv-transfer-bandwidth (or the fabric cause behind it), unless the capacity model at the
    deployed counts explains it by too few decode instances (PD301's test: decode at or beyond
    its capacity, with the links under 80 % busy or busier only because transfers converge on
    fewer decode than prefill instances) → decode-bound; decode admission, or a TPOT miss →
    decode-bound (preemptions shown apart). Confidence 0.45 + 0.5 x the leading stage's share.
    Without records the histogram means (queue, prefill, KV transfer, TTFT) stand in; a single
    scrape is read since engine start. Misses are "in bursts" when >= 50 % of them arrived in
    the busiest fifth of the window and that is >= 1.5x those bins' share of all requests.

    With --verify, a simulation of the recommended counts below the target is a warning of
    its own (or said in the miss): the recommendation is not enough as modelled.

    What to do: follow the named stage: scale or fix the pool it belongs to, or the link;
    when the misses are concentrated in bursts, size for the bursts (or smooth admission).
    """

    code = "PD801"
    name = "slo-miss"
    cause = "prefill-bound"  # the class default; each finding names the stage's cause
    component = "instance-manager"
    inputs = Inputs(
        needs=("per-request ttft_s / tpot_s, or TTFT / TPOT / inter-token latency histograms",),
        evidence=("slo", "slo_miss"),
        live=(Live("latency histograms", (S.TTFT_S, S.TPOT_S, S.ITL_S)),),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        f = ctx.evidence
        slo = f.slo
        observed = slo.observed
        verify = _verify_miss(f, ctx.quoted)
        if observed is None:
            return [verify] if verify is not None else [self.inconclusive()]
        if observed >= slo.target:
            return [verify] if verify is not None else []
        shape = f.slo_miss
        ttft_att, tpot_att = slo.ttft_attainment, slo.tpot_attainment
        ttft_leads = ttft_att is not None and ttft_att < slo.target and (
            tpot_att is None or ttft_att <= tpot_att)
        cause, confidence, why = self._cause(f, shape, ttft_leads, ctx.quoted)
        severity = Severity.CRITICAL if observed < SLO_CRITICAL else Severity.WARNING
        objectives = _objectives(f)
        summary = (f"SLO missed: {pct(observed)} of requests met {objectives} against a target "
                   f"of {pct(slo.target)}; {why}")
        burst = _burst_phrase(shape)
        if burst:
            summary += f"; {burst}"
        if verify is not None:
            summary += f"; {verify.summary[0].lower()}{verify.summary[1:]}"
        evidence = self._evidence(f, shape, observed)
        finding = self.finding(severity, confidence, summary, evidence=evidence,
                               next_steps=_steps(cause, bool(burst)))
        return [replace(finding, cause=cause, component=CAUSE_COMPONENT[cause])]

    @staticmethod
    def _cause(f: ClusterEvidence, shape: SloMissShape, ttft_leads: bool,
               quoted: CapacityResult | None = None) -> tuple[Cause, float, str]:
        if not ttft_leads:
            extra = ""
            if shape.preemptions:
                extra = f" ({shape.preemptions} preemptions/retractions in the window)"
            return "decode-bound", 0.6, f"TPOT misses most: decode steps are too slow{extra}"
        if shape.stages:
            top = shape.stages[0]
            cause = STAGE_CAUSE[top.stage]
            complete = len(shape.stages_known) == 3
            if top.stage == "decode-admission" and not complete:
                # the rest of TTFT also holds the stages the inputs did not measure
                missing = sorted({"queue", "prefill", "kv-transfer"} - set(shape.stages_known))
                return _fallback(f, f"TTFT beyond the measured stages holds most of the excess "
                                    f"(unmeasured: {', '.join(missing)})")
            per_request = shape.source == "per-request"
            conf = (0.45 + 0.5 * top.share) if per_request else (0.35 + 0.4 * top.share)
            what = "of the missed requests' excess TTFT" if per_request else "of the mean TTFT"
            why = (f"{STAGE_WORDS[top.stage]} holds {pct(top.share)} {what} "
                   f"({secs(top.missed_mean_s)} on average)")
            decode_short = decode_explains_transfer(f.capacity, quoted) \
                if top.stage == "kv-transfer" else None
            if decode_short:
                # KV handed over to a saturated decode pool waits there: the transfer time
                # holds decode's shortage (the capacity model at the deployed counts says so).
                return "decode-bound", conf - 0.1, (f"{why}, but {decode_short}: "
                                                    "decode-bound")
            return cause, conf, f"{why}: {cause}"
        return _fallback(f, "TTFT misses most and no stage timing splits it")

    @staticmethod
    def _evidence(f: ClusterEvidence, shape: SloMissShape, observed: float) -> list[Evidence]:
        slo = f.slo
        src = slo.method
        out = [ev("SLO attainment (both objectives)" if slo.both_attainment is not None
                  else "SLO attainment (lower of TTFT and TPOT)", 100 * observed, "%",
                  window=whole(f), baseline=100 * slo.target, source=src)]
        for label, att, obj in (("TTFT", slo.ttft_attainment, slo.ttft_slo_s),
                                ("TPOT", slo.tpot_attainment, slo.tpot_slo_s)):
            if att is not None and obj is not None:
                out.append(ev(f"requests within {label} ≤ {secs(obj)}", 100 * att, "%",
                              window=whole(f), baseline=100 * slo.target, source=src))
        for st in shape.stages:
            if shape.source == "per-request":
                out.append(ev(f"{STAGE_WORDS[st.stage]}: share of the excess TTFT",
                              100 * st.share, "%", window=whole(f),
                              source=f"per request: mean {secs(st.missed_mean_s)} over the "
                                     "requests that missed, median "
                                     f"{secs(st.met_median_s or 0.0)} over those that met"))
            else:
                out.append(ev(f"{STAGE_WORDS[st.stage]}: share of the mean TTFT",
                              100 * st.share, "%", window=whole(f),
                              source=f"histogram means: {secs(st.missed_mean_s)} "
                                     "(a bucket estimate, all requests)"))
        if shape.burst_share is not None:
            out.append(ev("share of TTFT misses in the busiest fifth of the window",
                          100 * shape.burst_share, "%", window=whole(f),
                          baseline=100 * (shape.busy_request_share or 0.0),
                          source="request arrivals per bin (baseline: share of all requests)"))
        if shape.preemptions:
            out.append(ev("preemptions / retractions", shape.preemptions, "", window=whole(f),
                          source="preemption counters or log events"))
        return out


# Confidence of a --verify miss: the simulation replays the observed requests on the model's
# own coefficients, so it is as sure as the model, no more.
VERIFY_CONFIDENCE: Final = 0.6


def _verify_miss(f: ClusterEvidence, quoted: CapacityResult | None = None) -> Finding | None:
    """A warning when ``--verify`` simulated the recommendation below the target, else None."""
    cap = f.capacity
    ver = getattr(cap, "verified", None)
    if cap is None or ver is None or isinstance(ver, Missing):
        return None
    att = ver.observed
    if att is None or att >= ver.target:
        return None
    ttft = None if isinstance(ver.ttft, Missing) else float(ver.ttft)
    tpot = None if isinstance(ver.tpot, Missing) else float(ver.tpot)
    cause: Cause = "decode-bound" if ttft is not None and tpot is not None and tpot < ttft \
        else "prefill-bound"
    rec = f"{cap.recommended_prefill}P:{cap.recommended_decode}D"
    shown = rec if quoted is None else f"{quoted.recommended_prefill}P:{quoted.recommended_decode}D"
    # the simulation replayed the model's own counts: where the report recommends others
    # (the check against the window, the headroom), it says whose counts those were
    subject = f"The recommended {rec}" if shown == rec else \
        f"The capacity model's {rec} (the capacity section recommends {shown})"
    return Finding(code=SloMiss.code, cause=cause, severity=Severity.WARNING,
                   confidence=VERIFY_CONFIDENCE,
                   summary=(f"{subject} meets the objectives for only {pct(att)} of "
                            f"requests in simulation (--verify, {ver.method}) against a target "
                            f"of {pct(ver.target)}: the recommendation is not enough as "
                            "modelled"),
                   evidence=(ev("simulated SLO attainment at the recommended counts",
                                100 * att, "%", window=whole(f), baseline=100 * ver.target,
                                source=ver.method),),
                   next_steps=("Size above the recommendation, or check the model's inputs "
                               "(profile, KV capacity, objectives) in the capacity notes.",),
                   component=CAUSE_COMPONENT[cause])


def _fallback(f: ClusterEvidence, why: str) -> tuple[Cause, float, str]:
    """No stage split: the capacity model's binding stage at the deployed counts, else prefill."""
    cap = f.capacity
    if cap is not None and cap.binding_basis == "deployed counts" and \
            cap.binding in ("prefill", "decode", "transfer"):
        cause: Cause = {"prefill": "prefill-bound", "decode": "decode-bound",
                        "transfer": "kv-transfer-bandwidth"}[str(cap.binding)]  # type: ignore[assignment]
        return cause, FALLBACK_CONFIDENCE, (f"{why}; the capacity model finds {cap.binding} the "
                                            f"busiest stage at the deployed counts: {cause}")
    return "prefill-bound", FALLBACK_CONFIDENCE - 0.1, f"{why}: prefill-bound (weakly)"


def _objectives(f: ClusterEvidence) -> str:
    slo = f.slo
    parts = []
    if slo.ttft_slo_s is not None:
        parts.append(f"TTFT ≤ {secs(slo.ttft_slo_s)}")
    if slo.tpot_slo_s is not None:
        parts.append(f"TPOT ≤ {secs(slo.tpot_slo_s)}")
    text = " and ".join(parts)
    if slo.defaulted:
        text += " (default objectives)" if len(slo.defaulted) == len(parts) else \
            f" ({', '.join(d.upper() for d in slo.defaulted)} default)"
    if slo.since_start:
        text += " since engine start"
    return text


def _burst_phrase(shape: SloMissShape) -> str:
    b, base = shape.burst_share, shape.busy_request_share
    if b is None or base is None:
        return ""
    if b >= BURST_MISS_SHARE and b >= BURST_LIFT * base:
        return (f"the misses came in bursts: {pct(b)} of them arrived in the busiest fifth of "
                f"the window, which carried {pct(base)} of the requests")
    return ""


def _steps(cause: Cause, bursty: bool) -> tuple[str, ...]:
    steps = {
        "prefill-bound": "Add prefill instances (see the recommendation), or check why prefill "
                         "is slow if a straggler or skew is reported.",
        "decode-bound": "Add decode instances or KV memory per decode instance (see the "
                        "recommendation); check preemptions.",
        "kv-transfer-bandwidth": "Check the KV-transfer path: RDMA in use, NIC per GPU, link "
                                 "errors; co-locate prefill and decode on one fabric.",
    }
    out = [steps[cause]]
    if bursty:
        out.append("Size for the bursts (peak, not mean, arrivals) or smooth admission.")
    return tuple(out)
