"""PD101: prefill short of capacity (prefill-bound).

What the rule measures is held in ``prefill_queue_measure.py`` (``PrefillMeasure``).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.base import CapacityResult
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.capacity_quote import beyond_needed, pool_short_by
from pdprobe.rules.common import (
    BaseRule,
    column,
    duration,
    ev,
    evidence_confidence,
    names,
    pct,
    rising,
    role_rows,
    secs,
    series_trend,
    slo_collapsed,
    wait_rising,
    whole,
)
from pdprobe.rules.prefill_queue_measure import (
    PREFILL_SATURATED_UTIL,
    QUEUE_DOMINANT_SHARE,
    SUSTAINED_QUEUE_MIN,
    PrefillMeasure,
    capacity_known,
    deployed_prefill_count,
    median_or_zero,
    prompt_mix_stable,
)
from pdprobe.rules.thresholds import (
    CONFIDENCE_UNOBSERVED,
    DECODE_BACKPRESSURE_QUEUE,
    DECODE_KV_PRESSURE,
    PREFILL_QUEUE_GROWTH,
)

# A p90 wait before prefill this long is an outage for interactive users whatever the SLO.
CRITICAL_QUEUE_WAIT_S: Final = 10.0


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
    "Short by N" comes from the capacity model when it ran (what meets the objective, before
    --headroom), otherwise from the queue's growth rate: N_p x arrival rate / (arrival rate -
    growth rate) instances stop the growth. Judged on the model as built; the counts it
    quotes are the report's capacity section's (after the check against the window).

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
        """Measure the prefill backlog and the capacity model; decide prefill-bound; explain."""
        f = ctx.evidence
        if not self._judgeable(f):
            return [self.inconclusive()]
        m = self._measure(f)
        if not m.observed and m.cap_short_by is None:
            return []
        return [self._explain(f, m, ctx.quoted)]

    @staticmethod
    def _judgeable(f: ClusterEvidence) -> bool:
        """Whether the inputs carry a prefill queue, a wait, a capacity model or a TTFT share."""
        return not (f.role_series("prefill_queue") is None and f.role_series("queue_s_p50") is None
                    and not capacity_known(f.capacity) and f.queue_share_of_ttft_p50 is None)

    def _measure(self, f: ClusterEvidence) -> PrefillMeasure:
        """The prefill queue and wait trends, the standing queue, the model and decode's side."""
        prefill, decode = role_rows(f, "prefill"), role_rows(f, "decode")
        cap = f.capacity
        queue_series = f.role_series("prefill_queue")
        tq = series_trend(queue_series)
        tw = series_trend(f.role_series("queue_s_p50"))
        util = cap.deployed_prefill_utilization if cap is not None else None
        kv = column(decode, "g_kv_usage_p90")
        queue_rising = rising(tq, PREFILL_QUEUE_GROWTH, f)
        return PrefillMeasure(
            prefill=list(prefill.index), n_p=len(prefill) or deployed_prefill_count(cap),
            queue=tq, queue_rising=queue_rising,
            rising=self._rising_instances(f, list(prefill.index)) if queue_rising else [],
            wait=tw, wait_rising=wait_rising(tw, f),
            share=f.queue_share_of_ttft_p50,
            # The median over time bins, not the mean: a burst that queues for a minute and
            # drains must not look like a standing queue.
            typical_queue=float(queue_series.median()) if queue_series is not None else None,
            # Near saturation a stable queue is the symptom: Kingman's wait grows as rho/(1-rho).
            util=util if isinstance(util, float) else None,
            att=f.slo.ttft_attainment, cap_known=capacity_known(cap),
            cap_short_by=pool_short_by(cap, "prefill"),
            decode=list(decode.index),
            decode_kv=float(kv.median()) if kv.notna().any() else None,
            backpressure=max(median_or_zero(decode, "g_prealloc_mean"),
                             median_or_zero(prefill, "g_bootstrap_mean")),
            mix_stable=prompt_mix_stable(f))

    def _explain(self, f: ClusterEvidence, m: PrefillMeasure,
                 quoted: CapacityResult | None) -> Finding:
        """The finding: the backlog and model evidence, decode's side, severity and wording.
        Judged on the model as built (``m``); its counts quoted from ``quoted``, the report's
        capacity section (RuleContext.quoted)."""
        evidence = self._backlog_evidence(f, m, quoted)
        evidence += self._decode_evidence(f, m)
        short_by = m.cap_short_by
        if short_by is None:
            short_by = self._growth_short_by(f, m, evidence)
        quoted_short_by = pool_short_by(quoted, "prefill")
        # the section's count, where the model itself found prefill short: without that, the
        # section's extra prefill is the SLO-miss guard's answer to this very finding, and the
        # growth's own estimate (quoted in the evidence) stands
        if m.cap_short_by is not None and quoted_short_by is not None:
            short_by = quoted_short_by
        if f.queue_s_p90 is not None:
            evidence.append(ev("p90 wait before prefill", f.queue_s_p90, "s", window=whole(f),
                               source="queue_s in request records"))
        severity = Severity.WARNING if m.observed else Severity.INFO
        if m.observed and (slo_collapsed(m.att) or (f.queue_s_p90 or 0.0) >= CRITICAL_QUEUE_WAIT_S):
            severity = Severity.CRITICAL
        confidence = evidence_confidence(*m.agreement())
        if not m.observed:
            confidence = min(confidence, CONFIDENCE_UNOBSERVED)
        affected = m.rising or m.prefill
        rising_for = m.queue.rising_for_s if m.queue_rising and m.queue is not None else (
            m.wait.rising_for_s if m.wait_rising and m.wait is not None else None)
        summary = self._summary(f, short_by, rising_for, m.queue if m.queue_rising else None,
                                affected, m.observed, quoted)
        return self.finding(severity, confidence, summary, instances=affected,
                            evidence=evidence, next_steps=self._next_steps(quoted, short_by))

    def _backlog_evidence(self, f: ClusterEvidence, m: PrefillMeasure,
                          quoted: CapacityResult | None) -> list[Evidence]:
        """The queue and wait trends, the standing queue, the SLO and the model's count."""
        out: list[Evidence] = []
        tq, tw = m.queue, m.wait
        if m.queue_rising and tq is not None:
            out.append(ev("prefill queue depth per instance", tq.hinge_end_level, "requests",
                          instances=m.rising or m.prefill, window=(tq.onset_ts, tq.end_ts),
                          baseline=tq.onset_level, source="requests_waiting on prefill instances"))
            out.append(ev("prefill queue rising trend (Mann-Kendall test)", tq.p_value,
                          "p-value", window=(tq.onset_ts, tq.end_ts),
                          source=f"Kendall tau {tq.tau:.2f}"))
        if m.wait_rising and tw is not None:
            out.append(ev("median wait before prefill", tw.hinge_end_level, "s",
                          window=(tw.onset_ts, tw.end_ts), baseline=tw.onset_level,
                          source="queue_s in request records"))
        if m.queue_dominant:
            out += self._standing_queue_evidence(f, m)
        if m.att is not None:
            slo_s = f.slo.ttft_slo_s
            out.append(ev("requests within the TTFT SLO", 100 * m.att, "%", window=whole(f),
                          baseline=None if slo_s is None else f"SLO {secs(slo_s)}",
                          source="SLO attainment"))
        cap = quoted
        if m.cap_short_by is not None and cap is not None:
            out.append(ev("prefill instances recommended by the capacity model",
                          cap.recommended_prefill, "instances", window=whole(f),  # type: ignore[arg-type]
                          baseline=cap.deployed_prefill,  # type: ignore[arg-type]
                          source=f"capacity model ({cap.model_source})"))
        return out

    @staticmethod
    def _standing_queue_evidence(f: ClusterEvidence, m: PrefillMeasure) -> list[Evidence]:
        """Queueing dominates TTFT (or a standing queue), and the utilisation behind it."""
        if m.share is not None:
            out = [ev("median share of TTFT spent queueing", 100 * m.share, "%",
                      window=whole(f), baseline=100 * QUEUE_DOMINANT_SHARE,
                      source="queue_s / ttft_s in request records")]
        else:
            out = [ev("typical prefill queue per instance (median over time)",
                      m.typical_queue or 0.0, "requests", instances=m.prefill, window=whole(f),
                      baseline=SUSTAINED_QUEUE_MIN, source="requests_waiting on prefill instances")]
        if m.saturated and m.util is not None:
            cap = f.capacity
            out.append(ev("prefill utilisation at the deployed count (capacity model)",
                          100 * m.util, "%", window=whole(f), baseline=100 * PREFILL_SATURATED_UTIL,
                          source=f"capacity model ({cap.model_source if cap else ''})"))
        return out

    @staticmethod
    def _decode_evidence(f: ClusterEvidence, m: PrefillMeasure) -> list[Evidence]:
        """Decode under-fed (supports) or pushing back (contradicts), and the length mix."""
        out: list[Evidence] = []
        if m.decode_kv is not None:
            out.append(ev("decode KV usage p90 (median over decode instances)",
                          100 * m.decode_kv, "%", instances=m.decode, window=whole(f),
                          source="kv_usage_ratio on decode instances"))
        if m.backpressure >= DECODE_BACKPRESSURE_QUEUE:
            out.append(ev("requests waiting for decode admission per instance", m.backpressure,
                          "requests", window=whole(f),
                          source="decode_prealloc_queue / prefill_bootstrap_queue"))
        prompt = f.mix.prompt
        if prompt is not None and m.observed and m.mix_stable:
            out.append(ev("mean prompt length before / after the strongest shift", prompt.after,
                          "tokens", window=whole(f), baseline=prompt.before, source=f.mix.source))
        return out

    @staticmethod
    def _growth_short_by(f: ClusterEvidence, m: PrefillMeasure,
                         evidence: list[Evidence]) -> int | None:
        """Without the model: N_p x arrival rate / (arrival rate - growth rate) stop the growth."""
        tq, lam, n_p = m.queue, f.arrival_rate_rps, m.n_p
        if not (m.queue_rising and tq is not None and lam and n_p):
            return None
        growth_rps = max(tq.growth, 0.0) / max(tq.rising_for_s, 1.0) * max(n_p, 1)
        if not growth_rps or lam <= growth_rps:
            return None
        needed = math.ceil(n_p * lam / (lam - growth_rps))
        if needed <= n_p:
            return None
        evidence.append(ev("prefill instances needed to stop the queue growth", needed,
                           "instances", window=whole(f), baseline=n_p,
                           source="arrival rate / (arrival rate - queue growth)"))
        return needed - n_p

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
                 instances: list[str], observed: bool, cap: CapacityResult | None) -> str:
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
        decode = role_rows(f, "decode")
        kv = column(decode, "g_kv_usage_p90")
        if kv.notna().any() and float(kv.median()) < DECODE_KV_PRESSURE:
            parts.append(f"decode KV usage stayed under {pct(float(np.ceil(kv.max() * 20) / 20))}")
        if prompt_mix_stable(f):
            parts.append("the length mix did not change")
        tail = ""
        if cap is not None and isinstance(cap.recommended_prefill, int) and \
                isinstance(cap.recommended_decode, int):
            tail = f"; recommended {cap.recommended_prefill}P:{cap.recommended_decode}D"
        return f"{head}: " + "; ".join(parts[:1]) + (
            " while " + " and ".join(parts[1:]) if len(parts) > 1 else "") + tail

    @staticmethod
    def _next_steps(cap: CapacityResult | None, short_by: int | None) -> list[str]:
        steps = []
        if cap is not None and isinstance(cap.recommended_prefill, int) and \
                isinstance(cap.recommended_decode, int):
            why = beyond_needed(cap, "prefill")
            steps.append(f"Scale prefill to {cap.recommended_prefill} instances "
                         f"({cap.recommended_prefill}P:{cap.recommended_decode}D recommended "
                         f"by the capacity model{': ' + why if why else ''}; see "
                         f"'pdprobe ratio').")
        elif short_by:
            steps.append(f"Add at least {short_by} prefill instance(s); run 'pdprobe ratio' "
                         f"for a recommendation with headroom.")
        steps.append("Check the prefix-cache hit rate and the chunked-prefill token budget on "
                     "the prefill instances: either lowers prefill capacity without more "
                     "traffic.")
        steps.append("If an autoscaler sizes the pools, check that it sees queue time and "
                     "offered load (requests started), not only completions.")
        return steps
