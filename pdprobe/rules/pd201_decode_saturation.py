"""PD201: decode saturated (decode-bound)."""

from __future__ import annotations

from typing import Final

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.analysis.evidence.registry import KV_NEAR_FULL
from pdprobe.rules.base import Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    column,
    decode_kv_pressure,
    duration,
    ev,
    evidence_confidence,
    names,
    pct,
    remote_kv_dominates,
    rising,
    secs,
    series_trend,
    slo_collapsed,
    slo_missed,
    whole,
)
from pdprobe.rules.thresholds import (
    DECODE_ADMISSION_GROWTH,
    KV_FULL_TIME_SHARE,
    RETRACTING_MEAN,
)
from pdprobe.units import fmt_count

# Preemptions (vLLM) / retractions (SGLang) worth reporting: at least this many and at least this
# share of the requests (recompute throws away decode work and stalls the batch).
MIN_PREEMPTIONS: Final = 10
PREEMPT_SHARE_WARN: Final = 0.005
PREEMPT_SHARE_CRITICAL: Final = 0.05
# TPOT rising by half over the window is a decode slowing down under load.
TPOT_RISE_FACTOR: Final = 0.5


class DecodeSaturation(BaseRule):
    """Decode is short of capacity: KV memory full, preemptions, slow tokens

    What it means: the decode instances cannot hold or serve the sequences they are given.
    Their KV cache sits near full, sequences are preempted (vLLM) or retracted (SGLang) and
    recomputed, the time per output token (TPOT) rises or misses its SLO, and requests queue
    for a decode slot.

    Why it matters in a disaggregated deployment: every prefilled request must find KV space
    on a decode instance. When decode is full, finished prefills wait with their KV pinned on
    the prefill side, so the symptom often shows up upstream as prefill queueing (see PD202).
    Adding prefill instances makes it worse; the fix is more decode capacity or less KV per
    sequence.

    Evidence it uses: decode KV usage >= 90 % for at least half the window
    (KV_FULL_TIME_SHARE); preemptions/retractions >= MIN_PREEMPTIONS = 10 and >= 0.5 % of
    requests; TPOT SLO attainment below 90 % (or, with no SLO, the median TPOT rising by 50 %
    with a significant trend); the decode admission queue rising by >= 2 requests per
    instance; the capacity model's recommended decode count above the deployed one. A full KV
    pool alone is reported as info (a busy but healthy decode pool also runs full). Critical
    when fewer than half the requests meet the TPOT SLO or preemptions exceed 5 % of requests.

    What to do: add decode instances (the finding says how many when the capacity model ran);
    raise the KV pool (gpu-memory-utilization, fewer max sequences, FP8 KV cache); check
    whether one decode instance carries more than its share (PD501) before scaling the pool.
    """

    code = "PD201"
    name = "decode-saturation"
    cause = "decode-bound"
    component = "instance-manager"
    inputs = Inputs(
        needs=(
        "decode KV usage (vllm:kv_cache_usage_perc / sglang:token_usage or log stats lines)",
        "preemption or retraction counters",
        "per-request tpot_s or TPOT/ITL histograms",
        "a capacity estimate with deployed instance counts",
        ),
        evidence=("instances.g_kv_usage_full_frac", "instances.g_kv_usage_p90", "instances.c_preemptions",
                  "instances.g_retracted_mean", "instances.traffic_count", "cluster.tpot_p50",
                  "cluster.decode_admission", "instances.remote_kv_wait_mean", "events", "slo",
                  "capacity"),
        live=(Live("decode KV usage", (S.KV_USAGE_RATIO,)),
              Live("preemption/retraction counters", (S.PREEMPTIONS_TOTAL, S.REQUESTS_RETRACTED)),
              Live("TPOT/ITL histograms", (S.TPOT_S, S.ITL_S))),
        roles=("decode",),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        f = ctx.evidence
        decode = f.role("decode")
        cap = f.capacity
        kv_full = column(decode, "g_kv_usage_full_frac")
        preempt = column(decode, "c_preemptions")
        retracted = column(decode, "g_retracted_mean")
        tpot_series = f.role_series("tpot_p50")
        admission = f.role_series("decode_admission")
        tpot_att = f.slo.tpot_attainment
        cap_known = cap is not None and isinstance(cap.recommended_decode, int) and \
            isinstance(cap.deployed_decode, int)
        channels = [kv_full.notna().any(), preempt.notna().any() or retracted.notna().any(),
                    tpot_att is not None or tpot_series is not None, admission is not None,
                    cap_known]
        if not any(channels):
            return [self.inconclusive()]
        available = sum(bool(c) for c in channels)
        evidence = []
        agree = 0
        affected: set[str] = set()

        held, _, _ = remote_kv_dominates(f)
        # KV full of transfers in flight is the hand-off's doing (PD302), not decode work.
        full_insts = [] if held else kv_full[kv_full >= KV_FULL_TIME_SHARE].index.astype(
            str).tolist()
        if full_insts:
            affected.update(full_insts)
            evidence.append(ev("decode instances with KV usage >= 90 % most of the time",
                               len(full_insts), "instances", instances=full_insts,
                               window=whole(f), baseline=len(decode),
                               source="kv_usage_ratio on decode instances"))
            kv_p90 = column(decode, "g_kv_usage_p90").loc[full_insts]
            evidence.append(ev("KV usage p90 on those instances", 100 * float(kv_p90.median()),
                               "%", instances=full_insts, window=whole(f),
                               baseline=100 * KV_NEAR_FULL))

        total_preempt = float(preempt.sum()) if preempt.notna().any() else 0.0
        events = f.event_count(S.EV_PREEMPTION)
        total_preempt = max(total_preempt, float(events))
        requests = float(column(decode, "traffic_count").sum()) or float(f.n_requests)
        preempt_share = total_preempt / requests if requests > 0 else None
        preempting = total_preempt >= MIN_PREEMPTIONS and (
            preempt_share is None or preempt_share >= PREEMPT_SHARE_WARN)
        retracting = bool(retracted.notna().any() and float(retracted.max()) >= RETRACTING_MEAN)
        if preempting or retracting:
            agree += 1
            insts = preempt[preempt > 0].index.astype(str).tolist() or \
                retracted[retracted >= RETRACTING_MEAN].index.astype(str).tolist()
            affected.update(insts)
            evidence.append(ev("preemptions/retractions on decode", total_preempt, "sequences",
                               instances=insts, window=whole(f),
                               baseline=None if preempt_share is None
                               else f"{pct(preempt_share)} of requests",
                               source="preemptions_total / requests_retracted"))

        tpot_slow = slo_missed(tpot_att)
        if tpot_att is not None:
            slo_s = f.slo.tpot_slo_s
            evidence.append(ev("requests within the TPOT SLO", 100 * tpot_att, "%",
                               window=whole(f),
                               baseline=None if slo_s is None else f"SLO {secs(slo_s)}",
                               source="SLO attainment"))
        tt = series_trend(tpot_series)
        rising_for = None
        if tpot_att is None and tt is not None and rising(
                tt, TPOT_RISE_FACTOR * max(tt.onset_level, 1e-6), f):
            tpot_slow = True
            rising_for = tt.rising_for_s
            evidence.append(ev("median TPOT", tt.hinge_end_level, "s",
                               window=(tt.onset_ts, tt.end_ts), baseline=tt.onset_level,
                               source="tpot_s in request records"))
        if tpot_slow:
            agree += 1
        if f.slo.tpot_p90_s is not None:
            evidence.append(ev("TPOT p90", f.slo.tpot_p90_s, "s", window=whole(f),
                               source="tpot_s / TPOT histograms"))

        ta = series_trend(admission)
        # vLLM logs print one "Waiting" count that includes requests waiting for remote KV;
        # without the deferred/transfer breakdown a rising queue on a decode with free KV
        # memory may be the KV hand-off (PD302), not decode capacity.
        separated = any(column(decode, c).notna().any() for c in (
            "g_deferred_mean", "g_kv_fetch_mean", "g_transfer_queue_mean", "g_prealloc_mean"))
        kv_pressure = decode_kv_pressure(f)
        admission_rising = rising(ta, DECODE_ADMISSION_GROWTH, f) and (separated or kv_pressure)
        if admission_rising and ta is not None:
            agree += 1
            rising_for = rising_for or ta.rising_for_s
            evidence.append(ev("decode admission queue per instance", ta.hinge_end_level,
                               "requests", instances=list(decode.index),
                               window=(ta.onset_ts, ta.end_ts), baseline=ta.onset_level,
                               source="requests_waiting minus deferred on decode instances"))

        short_by = None
        if cap_known and cap is not None:
            rec_d = int(cap.recommended_decode)  # type: ignore[arg-type]
            dep_d = int(cap.deployed_decode)  # type: ignore[arg-type]
            if rec_d > dep_d:
                short_by = rec_d - dep_d
                agree += 1
                evidence.append(ev("decode instances recommended by the capacity model", rec_d,
                                   "instances", window=whole(f), baseline=dep_d,
                                   source=f"capacity model ({cap.model_source})"))

        observed = preempting or retracting or tpot_slow or admission_rising
        if full_insts and observed:
            agree += 1
        if not observed and not full_insts and short_by is None:
            return []
        severity = Severity.WARNING if observed else Severity.INFO
        if observed and (slo_collapsed(tpot_att) or (
                preempt_share is not None and preempt_share >= PREEMPT_SHARE_CRITICAL
                and total_preempt >= MIN_PREEMPTIONS)):
            severity = Severity.CRITICAL
        confidence = evidence_confidence(agree if observed else 1, available)
        if not observed:
            confidence = min(confidence, 0.4)
        instances = sorted(affected) or list(decode.index.astype(str))
        return [self.finding(severity, confidence,
                             self._summary(short_by, full_insts, preempting or retracting,
                                           total_preempt, tpot_slow, admission_rising,
                                           rising_for, observed, f),
                             instances=instances, evidence=evidence,
                             next_steps=self._next_steps(f, short_by))]

    @staticmethod
    def _summary(short_by: int | None, full: list[str], preempting: bool, preempts: float,
                 tpot_slow: bool, admission: bool, rising_for: float | None, observed: bool,
                 f: ClusterEvidence) -> str:
        head = (f"Decode is short by {short_by} instance{'s' if short_by != 1 else ''}"
                if short_by else "Decode is saturated")
        parts = []
        if full:
            parts.append(f"KV cache near full on {names(full)}")
        if preempting:
            parts.append(f"{preempts:.0f} sequences preempted or retracted")
        if tpot_slow:
            parts.append("time per output token misses its target" if rising_for is None
                         else f"time per output token rose for {duration(rising_for)}")
        if admission:
            parts.append("requests queue for a decode slot")
        if not observed:
            if full:
                return (f"{head}: KV cache near full on {names(full)}, but no preemptions, "
                        f"queueing or slow tokens were seen")
            return f"{head} according to the capacity model; no decode pressure was observed"
        return f"{head}: " + ", ".join(parts)

    @staticmethod
    def _next_steps(f: ClusterEvidence, short_by: int | None) -> list[str]:
        steps = []
        cap = f.capacity
        if cap is not None and isinstance(cap.recommended_prefill, int) and \
                isinstance(cap.recommended_decode, int):
            steps.append(f"Scale decode to {fmt_count(cap.recommended_decode, 'instances')} "
                         f"({cap.recommended_prefill}P:{cap.recommended_decode}D recommended "
                         f"by the capacity model).")
        elif short_by:
            steps.append(f"Add at least {short_by} decode instance(s).")
        else:
            steps.append("Add decode instances, or grow their KV pool.")
        steps.append("Grow the KV pool per decode instance: higher gpu-memory-utilization / "
                     "mem-fraction-static, an FP8 KV cache, or a lower max-num-seqs.")
        steps.append("Before scaling, check that the router spreads sequences evenly over the "
                     "decode instances (PD501).")
        return steps
