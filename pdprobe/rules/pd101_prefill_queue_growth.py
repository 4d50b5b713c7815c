"""PD101: prefill short of capacity (prefill-bound)."""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.rules.base import Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    column,
    duration,
    ev,
    evidence_confidence,
    finite,
    names,
    pct,
    rising,
    secs,
    series_trend,
    slo_collapsed,
    slo_missed,
    whole,
)
from pdprobe.rules.thresholds import (
    DECODE_BACKPRESSURE_QUEUE,
    DECODE_KV_PRESSURE,
    PREFILL_QUEUE_GROWTH,
    PREFILL_WAIT_GROWTH_S,
)

# Queueing "dominates" TTFT when the median request spends this share of its TTFT waiting.
QUEUE_DOMINANT_SHARE: Final = 0.5
# The capacity model's prefill utilisation at the deployed count from which the pool is
# saturated: at rho = 0.85 Kingman's wait is already ~5.7x the service time x (ca2+cs2)/2.
PREFILL_SATURATED_UTIL: Final = 0.85
# Without request records, a prefill queue of this many requests per instance in the median
# time bin is sustained queueing (with a saturated pool or a missed SLO).
SUSTAINED_QUEUE_MIN: Final = 1.0
# A p90 wait before prefill this long is an outage for interactive users whatever the SLO.
CRITICAL_QUEUE_WAIT_S: Final = 10.0
# Decode KV usage below this while prefill queues means decode is under-fed (waits on prefill).
DECODE_UNDERFED_KV: Final = 0.5


class PrefillQueueGrowth(BaseRule):
    """Prefill is short of capacity: prefill queues grow and the first token waits

    What it means: requests arrive faster than the prefill instances can process their
    prompts. The prefill queues grow (or the wait before prefill dominates time to first
    token), while the decode instances are under-fed: their KV cache stays far from full.

    Why it matters in a disaggregated deployment: prefill and decode are sized separately,
    so one pool can saturate while the other idles. Adding decode instances or tuning decode
    does nothing here; only more (or faster) prefill capacity, a better prefix-cache hit
    rate or a lower chunked-prefill overhead shortens the queue. A growing queue is
    unstable: TTFT keeps rising until requests time out.

    Evidence it uses (any of them; confidence grows with each that agrees):
    a significant rising trend (Mann–Kendall p < 0.01, Kendall tau >= 0.3) of the mean
    prefill queue depth per instance, by at least PREFILL_QUEUE_GROWTH = 3 requests since the
    onset found by a hinge fit and for at least 4 bins and 10 % of the window (a burst that
    drains within a minute is load variance; a rise that drains at the end of the window
    still counts); a rising median wait before prefill (queue_s) by at least
    PREFILL_WAIT_GROWTH_S = 0.5 s and at least doubling; the median request spending at
    least QUEUE_DOMINANT_SHARE = 50 % of its TTFT queueing (without request records: a prefill
    queue of at least 1 request per instance in the median time bin) while the TTFT SLO is missed or the
    capacity model puts the deployed prefill pool at >= 85 % utilisation (a stable but long
    queue near saturation); the capacity model's recommended prefill count above the
    deployed one. Decode KV usage under
    50 % and a stable length mix make it more certain; decode back-pressure (decode KV p90 >=
    85 %, SGLang pre-allocation or bootstrap queues >= 1 per instance) makes it less certain,
    because then decode is the likelier root (see PD202). Critical when the TTFT SLO is met
    by fewer than half the requests or the p90 wait before prefill reaches 10 s.
    "Short by N" comes from the capacity model when it ran, otherwise from the queue's
    growth rate: N_p x arrival rate / (arrival rate - growth rate) instances stop the growth.

    What to do: add prefill instances (the finding says how many and the recommended
    xP:yD); check the prefix-cache hit rate and chunked-prefill budget on the prefill
    instances; if an autoscaler manages the pools, check that it sees queue time and
    offered load, not only completions (a backlogged planner measures the throughput it
    already has).
    """

    code = "PD101"
    name = "prefill-queue-growth"
    cause = "prefill-bound"
    component = "instance-manager"
    inputs = Inputs(
        needs=(
        "prefill queue depth (vLLM num_requests_waiting / SGLang num_queue_reqs on prefill "
        "instances, or engine log stats lines)",
        "per-request queue_s or ttft_s with arrival times",
        "a capacity estimate with deployed instance counts",
        ),
        evidence=("cluster.prefill_queue", "cluster.queue_s_p50", "bins.g_waiting", "instances.g_kv_usage_p90",
                  "instances.g_prealloc_mean", "instances.g_bootstrap_mean", "queue_share", "slo",
                  "capacity", "mix", "arrival_rate"),
        live=(Live("prefill queue depth", (S.REQUESTS_WAITING, S.PREFILL_BOOTSTRAP_QUEUE)),
              Live("queue-time or TTFT histograms", (S.QUEUE_S, S.TTFT_S))),
        roles=("prefill",),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        f = ctx.evidence
        prefill = f.role("prefill")
        decode = f.role("decode")
        queue_series = f.role_series("prefill_queue")
        wait_series = f.role_series("queue_s_p50")
        cap = f.capacity
        cap_known = cap is not None and isinstance(cap.recommended_prefill, int) and \
            isinstance(cap.deployed_prefill, int)
        share = f.queue_share_of_ttft_p50
        if queue_series is None and wait_series is None and not cap_known and share is None:
            return [self.inconclusive()]
        evidence = []
        agree = available = contrary = 0
        affected: list[str] = []
        rising_for = None
        growth_rate_rps = None
        n_p = len(prefill)
        if not n_p and cap is not None and isinstance(cap.deployed_prefill, int):
            n_p = cap.deployed_prefill

        tq = series_trend(queue_series)
        queue_rising = rising(tq, PREFILL_QUEUE_GROWTH, f)
        if tq is not None:
            available += 1
        if queue_rising and tq is not None:
            agree += 1
            rising_for = tq.rising_for_s
            growth_rate_rps = max(tq.growth, 0.0) / max(tq.rising_for_s, 1.0) * max(n_p, 1)
            affected = self._rising_instances(f, list(prefill.index)) or list(prefill.index)
            evidence.append(ev("prefill queue depth per instance", tq.hinge_end_level,
                               "requests", instances=affected,
                               window=(tq.onset_ts, tq.end_ts), baseline=tq.onset_level,
                               source="requests_waiting on prefill instances"))
            evidence.append(ev("prefill queue rising trend (Mann-Kendall test)", tq.p_value,
                               "p-value", window=(tq.onset_ts, tq.end_ts),
                               source=f"Kendall tau {tq.tau:.2f}"))

        tw = series_trend(wait_series)
        if tw is not None:
            available += 1
        wait_rising = rising(tw, PREFILL_WAIT_GROWTH_S, f) and tw is not None and \
            tw.hinge_end_level >= 2 * max(tw.onset_level, 0.0)
        if wait_rising and tw is not None:
            agree += 1
            rising_for = rising_for or tw.rising_for_s
            evidence.append(ev("median wait before prefill", tw.hinge_end_level, "s",
                               window=(tw.onset_ts, tw.end_ts), baseline=tw.onset_level,
                               source="queue_s in request records"))

        att = f.slo.ttft_attainment
        # Near saturation a stable queue is the symptom: Kingman's wait grows as rho/(1-rho).
        util = cap.deployed_prefill_utilization if cap is not None else None
        saturated = isinstance(util, float) and util >= PREFILL_SATURATED_UTIL
        # The median over time bins, not the mean: a burst that queues for a minute and drains
        # must not look like a standing queue.
        typical_queue = float(queue_series.median()) if queue_series is not None else None
        queued = bool((share is not None and share >= QUEUE_DOMINANT_SHARE) or (
            share is None and typical_queue is not None
            and typical_queue >= SUSTAINED_QUEUE_MIN))
        if share is not None or typical_queue is not None:
            available += 1
        queue_dominant = queued and (slo_missed(att) or saturated)
        if queue_dominant:
            agree += 1
            if share is not None:
                evidence.append(ev("median share of TTFT spent queueing", 100 * share, "%",
                                   window=whole(f), baseline=100 * QUEUE_DOMINANT_SHARE,
                                   source="queue_s / ttft_s in request records"))
            else:
                evidence.append(ev("typical prefill queue per instance (median over time)",
                                   typical_queue or 0.0, "requests",
                                   instances=list(prefill.index), window=whole(f),
                                   baseline=SUSTAINED_QUEUE_MIN,
                                   source="requests_waiting on prefill instances"))
            if saturated and isinstance(util, float):
                evidence.append(ev("prefill utilisation at the deployed count (capacity model)",
                                   100 * util, "%", window=whole(f),
                                   baseline=100 * PREFILL_SATURATED_UTIL,
                                   source=f"capacity model ({cap.model_source if cap else ''})"))
        if att is not None:
            slo_s = f.slo.ttft_slo_s
            evidence.append(ev("requests within the TTFT SLO", 100 * att, "%", window=whole(f),
                               baseline=None if slo_s is None else f"SLO {secs(slo_s)}",
                               source="SLO attainment"))

        short_by = None
        if cap_known and cap is not None:
            available += 1
            rec_p = int(cap.recommended_prefill)  # type: ignore[arg-type]
            dep_p = int(cap.deployed_prefill)  # type: ignore[arg-type]
            if rec_p > dep_p:
                agree += 1
                short_by = rec_p - dep_p
                evidence.append(ev("prefill instances recommended by the capacity model", rec_p,
                                   "instances", window=whole(f), baseline=dep_p,
                                   source=f"capacity model ({cap.model_source})"))

        observed = queue_rising or wait_rising or queue_dominant
        if not observed and short_by is None:
            return []

        # Is decode under-fed (supports) or pushing back (contradicts)?
        kv_p90 = column(decode, "g_kv_usage_p90")
        if kv_p90.notna().any():
            decode_kv = float(kv_p90.median())
            evidence.append(ev("decode KV usage p90 (median over decode instances)",
                               100 * decode_kv, "%", instances=list(decode.index),
                               window=whole(f), source="kv_usage_ratio on decode instances"))
            if decode_kv >= DECODE_KV_PRESSURE:
                contrary += 1
            elif decode_kv < DECODE_UNDERFED_KV and observed:
                agree += 1
        backpressure = max(float(column(decode, "g_prealloc_mean").median(skipna=True)
                                 if column(decode, "g_prealloc_mean").notna().any() else 0.0),
                           float(column(prefill, "g_bootstrap_mean").median(skipna=True)
                                 if column(prefill, "g_bootstrap_mean").notna().any() else 0.0))
        if backpressure >= DECODE_BACKPRESSURE_QUEUE:
            contrary += 1
            evidence.append(ev("requests waiting for decode admission per instance",
                               backpressure, "requests", window=whole(f),
                               source="decode_prealloc_queue / prefill_bootstrap_queue"))
        mix = f.mix
        if mix.prompt is not None and observed:
            stable = abs(mix.prompt.relative_change) < 0.2 if finite(
                mix.prompt.relative_change) else False
            if stable:
                evidence.append(ev("mean prompt length before / after the strongest shift",
                                   mix.prompt.after, "tokens", window=whole(f),
                                   baseline=mix.prompt.before, source=mix.source))

        if short_by is None and growth_rate_rps and f.arrival_rate_rps and n_p:
            lam = f.arrival_rate_rps
            if lam > growth_rate_rps:
                needed = math.ceil(n_p * lam / (lam - growth_rate_rps))
                if needed > n_p:
                    short_by = needed - n_p
                    evidence.append(ev("prefill instances needed to stop the queue growth",
                                       needed, "instances", window=whole(f), baseline=n_p,
                                       source="arrival rate / (arrival rate - queue growth)"))

        severity = Severity.WARNING if observed else Severity.INFO
        if observed and (slo_collapsed(att) or (f.queue_s_p90 or 0.0) >= CRITICAL_QUEUE_WAIT_S):
            severity = Severity.CRITICAL
        if f.queue_s_p90 is not None:
            evidence.append(ev("p90 wait before prefill", f.queue_s_p90, "s", window=whole(f),
                               source="queue_s in request records"))
        confidence = evidence_confidence(agree, available, contrary)
        if not observed:
            confidence = min(confidence, 0.4)
        instances = affected or list(prefill.index)
        summary = self._summary(f, short_by, rising_for, tq if queue_rising else None,
                                instances, observed)
        return [self.finding(severity, confidence, summary, instances=instances,
                             evidence=evidence, next_steps=self._next_steps(f, short_by))]

    @staticmethod
    def _rising_instances(f: ClusterEvidence, prefill: list[str]) -> list[str]:
        frame = f.bin_frame("g_waiting", prefill)
        if frame is None:
            return []
        out = []
        for inst in frame.columns:  # one test per prefill instance, not per sample
            if rising(series_trend(frame[inst]), PREFILL_QUEUE_GROWTH, f):
                out.append(str(inst))
        return out

    @staticmethod
    def _summary(f: ClusterEvidence, short_by: int | None, rising_for: float | None, tq: object,
                 instances: list[str], observed: bool) -> str:
        head = (f"Prefill is short by {short_by} instance{'s' if short_by != 1 else ''}"
                if short_by else "Prefill is short of capacity")
        if not observed:
            return (f"{head} according to the capacity model, though no growing prefill queue "
                    f"was observed in this window")
        parts = []
        if tq is not None and rising_for is not None:
            parts.append(f"the prefill queues on {names(instances)} grew for {duration(rising_for)}")
        elif rising_for is not None:
            parts.append(f"the wait before prefill grew for {duration(rising_for)}")
        else:
            parts.append("most of the time to first token is spent queueing for prefill")
        decode = f.role("decode")
        kv = column(decode, "g_kv_usage_p90")
        if kv.notna().any() and float(kv.median()) < DECODE_KV_PRESSURE:
            parts.append(f"decode KV usage stayed under {pct(float(np.ceil(kv.max() * 20) / 20))}")
        mix = f.mix
        if mix.prompt is not None and finite(mix.prompt.relative_change) and \
                abs(mix.prompt.relative_change) < 0.2:
            parts.append("the length mix did not change")
        cap = f.capacity
        tail = ""
        if cap is not None and isinstance(cap.recommended_prefill, int) and \
                isinstance(cap.recommended_decode, int):
            tail = f"; recommended {cap.recommended_prefill}P:{cap.recommended_decode}D"
        return f"{head}: " + "; ".join(parts[:1]) + (
            " while " + " and ".join(parts[1:]) if len(parts) > 1 else "") + tail

    @staticmethod
    def _next_steps(f: ClusterEvidence, short_by: int | None) -> list[str]:
        steps = []
        cap = f.capacity
        if cap is not None and isinstance(cap.recommended_prefill, int) and \
                isinstance(cap.recommended_decode, int):
            steps.append(f"Scale prefill to {cap.recommended_prefill} instances "
                         f"({cap.recommended_prefill}P:{cap.recommended_decode}D recommended "
                         f"by the capacity model; see 'pdprobe ratio').")
        elif short_by:
            steps.append(f"Add at least {short_by} prefill instance(s); run 'pdprobe ratio' "
                         f"for a recommendation with headroom.")
        steps.append("Check the prefix-cache hit rate and the chunked-prefill token budget on "
                     "the prefill instances: either lowers prefill capacity without more "
                     "traffic.")
        steps.append("If an autoscaler sizes the pools, check that it sees queue time and "
                     "offered load (requests started), not only completions.")
        return steps
