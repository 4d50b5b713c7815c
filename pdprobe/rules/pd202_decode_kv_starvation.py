"""PD202: decode KV starvation back-pressuring prefill (decode-bound, looks prefill-bound)."""

from __future__ import annotations

from dataclasses import dataclass
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
from pdprobe.rules.common import (
    BaseRule,
    column,
    ev,
    evidence_confidence,
    names,
    pct,
    remote_kv_dominates,
    rising,
    role_rows,
    series_trend,
    slo_collapsed,
    slo_missed,
    whole,
)
from pdprobe.rules.thresholds import DECODE_BACKPRESSURE_QUEUE, DECODE_KV_PRESSURE, RETRACTING_MEAN

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.model import ClusterEvidence
    from pdprobe.analysis.evidence.stats import Trend

# Growth that counts as "rising" for the pre-allocation / bootstrap queues (requests/instance).
QUEUE_GROWTH_MIN: Final = 2.0


class DecodeKvStarvation(BaseRule):
    """Decode KV starvation is holding back prefill (looks like a prefill problem, is not)

    What it means: decode instances have no free KV memory for new sequences, so requests
    that finished prefill cannot be admitted: they pile up in SGLang's decode pre-allocation
    queue (and, upstream, the prefill bootstrap/in-flight queues) or in vLLM's decode waiting
    queue while the decode KV pool is nearly full. Prefill instances then hold finished KV,
    stop taking new work, and TTFT rises: the dashboards point at prefill.

    Why it matters in a disaggregated deployment: prefill and decode are coupled through KV
    hand-off. Decode memory pressure back-pressures prefill (sglang #6351: "prefill hangs
    underutilised"), and the obvious reaction, adding prefill instances, makes it worse by
    pushing more KV at decodes that cannot take it. The root is decode capacity or decode
    memory.

    Evidence it uses: decode pre-allocation queue (SGLang num_decode_prealloc_queue_reqs) or
    vLLM decode admission wait (num_requests_waiting minus deferred) of at least
    DECODE_BACKPRESSURE_QUEUE = 1 request per decode instance on average, or rising by >= 2; decode
    KV usage p90 >= DECODE_KV_PRESSURE = 85 % or retractions; supporting: SGLang prefill bootstrap /
    in-flight queues >= 1 per prefill instance or rising, prefill queue or TTFT symptoms. When
    requests waiting for remote KV outnumber those waiting for decode admission two to one, the
    decode memory is held by transfers in flight: that is a hand-off problem (PD302), and this
    rule stays silent.
    Critical when the prefill side is visibly blocked (bootstrap queue or prefill queue
    rising) or fewer than half the requests meet the TTFT SLO.

    What to do: add decode capacity or memory (more decode instances, higher
    mem-fraction-static / gpu-memory-utilization, FP8 KV cache, lower max running requests);
    do not add prefill instances; in SGLang check --max-running-requests and the
    pre-allocation reserve; with NIXL, check the staging headroom per hand-off.
    """

    code = "PD202"
    name = "decode-kv-starvation"
    cause = "decode-bound"
    component = "instance-manager"
    inputs = Inputs(
        needs=(
        "decode admission queues (SGLang num_decode_prealloc_queue_reqs, vLLM "
        "num_requests_waiting / waiting_by_reason on decode instances) together with decode "
        "KV usage",
        ),
        evidence=("instances.g_prealloc_mean", "instances.admission_wait_mean", "instances.g_kv_usage_p90",
                  "instances.g_retracted_mean", "instances.remote_kv_wait_mean",
                  "instances.g_bootstrap_mean", "cluster.decode_prealloc",
                  "cluster.prefill_bootstrap", "cluster.prefill_queue", "slo"),
        live=(Live("decode admission queues", (S.DECODE_PREALLOC_QUEUE, S.REQUESTS_WAITING,
                                                 S.REQUESTS_DEFERRED)),
              Live("decode KV usage", (S.KV_USAGE_RATIO,))),
        roles=("decode",),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Measure decode admission waits and KV pressure; decide starvation; explain it."""
        f = ctx.evidence
        m = self._measure(f)
        if m is None:
            return [self.inconclusive()]
        if not (m.vllm_starved or m.sglang_starved):
            return []
        if remote_kv_dominates(f)[0]:
            # Most waiting requests wait for their KV to arrive, holding decode memory while
            # they do: the hand-off fills decode, not decode work (PD302 reports it).
            return []
        return [self._explain(f, m)]

    @staticmethod
    def _measure(f: ClusterEvidence) -> _Decode | None:
        """The decode side's queues and memory, None when the inputs carry neither."""
        decode = role_rows(f, "decode")
        prealloc = column(decode, "g_prealloc_mean")
        admission = column(decode, "admission_wait_mean")
        kv_p90 = column(decode, "g_kv_usage_p90")
        retracted = column(decode, "g_retracted_mean")
        if not (prealloc.notna().any() or admission.notna().any()) or not (
                kv_p90.notna().any() or retracted.notna().any() or prealloc.notna().any()):
            return None
        kv = float(kv_p90.median()) if kv_p90.notna().any() else None
        kv_high = kv is not None and kv >= DECODE_KV_PRESSURE
        retracting = bool(retracted.notna().any() and float(retracted.max()) >= RETRACTING_MEAN)
        tp = series_trend(f.role_series("decode_prealloc"))
        prealloc_rising = rising(tp, QUEUE_GROWTH_MIN, f)
        prealloc_level = float(prealloc.median()) if prealloc.notna().any() else 0.0
        admission_level = float(admission.median()) if admission.notna().any() else 0.0
        return _Decode(
            decode=decode, prealloc=prealloc, admission=admission, retracted=retracted, kv=kv,
            kv_high=kv_high, retracting=retracting, prealloc_trend=tp,
            prealloc_rising=prealloc_rising, prealloc_level=prealloc_level,
            admission_level=admission_level,
            # vLLM's waiting queue on decode is only starvation when memory is tight.
            vllm_starved=admission_level >= DECODE_BACKPRESSURE_QUEUE and (kv_high or retracting),
            sglang_starved=prealloc_level >= DECODE_BACKPRESSURE_QUEUE or prealloc_rising)

    def _explain(self, f: ClusterEvidence, m: _Decode) -> Finding:
        """The finding: decode evidence, the prefill-side symptom, severity and wording."""
        evidence: list[Evidence] = []
        agree = 0
        if m.sglang_starved and not (m.kv_high or m.retracting) and m.kv is not None:
            # Pre-allocation waits with free KV memory: the limit is elsewhere (request slots).
            agree -= 1
        waiting_insts = self._decode_evidence(f, m, evidence)
        agree += int(m.sglang_starved) + int(m.vllm_starved) + int(m.kv_high) + int(m.retracting)
        blocked, prefill_agree, available = self._prefill_blocked(f, evidence)
        agree += prefill_agree
        att = f.slo.ttft_attainment
        if slo_missed(att) and att is not None:
            evidence.append(ev("requests within the TTFT SLO", 100 * att, "%", window=whole(f),
                               source="SLO attainment"))
        severity = Severity.WARNING
        if blocked or slo_collapsed(att):
            severity = Severity.CRITICAL
        confidence = evidence_confidence(max(agree, 1), available + 1)
        if not (m.kv_high or m.retracting):
            severity = Severity.WARNING if severity is Severity.CRITICAL else severity
        instances = sorted(waiting_insts) or sorted(m.decode.index.astype(str))
        kv_txt = f" (KV usage p90 {pct(m.kv)})" if m.kv is not None else ""
        if blocked:
            summary = (f"Decode KV starvation on {names(instances)}{kv_txt} is blocking prefill: "
                       f"requests that finished prefill wait for decode memory, so the prefill "
                       f"queues are back-pressure, not a prefill shortage")
        else:
            summary = (f"Requests wait for decode KV memory on {names(instances)}{kv_txt}: "
                       f"decode admission, not prefill, limits throughput")
        return self.finding(severity, confidence, summary, instances=instances,
                            evidence=evidence, next_steps=(
            "Add decode capacity or KV memory (more decode instances, higher "
            "mem-fraction-static / gpu-memory-utilization, FP8 KV cache).",
            "Do not add prefill instances: they push more KV at decodes that cannot take it.",
            "SGLang: check --max-running-requests and the pre-allocation reserve; vLLM+NIXL: "
            "check the staging headroom per hand-off (pool tokens / sequence length "
            "minus max-num-seqs).",
        ))

    @staticmethod
    def _decode_evidence(f: ClusterEvidence, m: _Decode, evidence: list[Evidence]) -> list[str]:
        """Evidence of the decode-side waits and memory; the instances where requests wait."""
        waiting_insts: list[str] = []
        if m.sglang_starved:
            waiting_insts = m.prealloc[m.prealloc >= DECODE_BACKPRESSURE_QUEUE].index.astype(
                str).tolist()
            evidence.append(ev("requests waiting for decode KV pre-allocation per instance",
                               m.prealloc_level, "requests", instances=waiting_insts,
                               window=whole(f), baseline=DECODE_BACKPRESSURE_QUEUE,
                               source="decode_prealloc_queue"))
            tp = m.prealloc_trend
            if m.prealloc_rising and tp is not None:
                evidence.append(ev("decode pre-allocation queue per instance", tp.hinge_end_level,
                                   "requests", window=(tp.onset_ts, tp.end_ts),
                                   baseline=tp.onset_level, source="decode_prealloc_queue"))
        if m.vllm_starved:
            waiting_insts = waiting_insts or m.admission[
                m.admission >= DECODE_BACKPRESSURE_QUEUE].index.astype(str).tolist()
            evidence.append(ev("requests waiting for decode admission per instance",
                               m.admission_level, "requests", instances=waiting_insts,
                               window=whole(f), baseline=DECODE_BACKPRESSURE_QUEUE,
                               source="requests_waiting minus requests_deferred on decode"))
        if m.kv is not None:
            evidence.append(ev("decode KV usage p90 (median over decode instances)", 100 * m.kv,
                               "%", instances=list(m.decode.index), window=whole(f),
                               baseline=100 * DECODE_KV_PRESSURE, source="kv_usage_ratio"))
        if m.retracting:
            evidence.append(ev("retracted requests on decode (max mean per instance)",
                               float(m.retracted.max()), "requests", window=whole(f),
                               source="requests_retracted"))
        return waiting_insts

    @staticmethod
    def _prefill_blocked(f: ClusterEvidence, evidence: list[Evidence]) -> tuple[bool, int, int]:
        """The symptom upstream: prefill blocked behind decode (blocked, agreeing, channels)."""
        prefill = role_rows(f, "prefill")
        available, agree, blocked = 2, 0, False
        boot = column(prefill, "g_bootstrap_mean")
        tb = series_trend(f.role_series("prefill_bootstrap"))
        if boot.notna().any():
            available += 1
            level = float(boot.median())
            if level >= DECODE_BACKPRESSURE_QUEUE or rising(tb, QUEUE_GROWTH_MIN, f):
                blocked = True
                agree += 1
                evidence.append(ev("prefill requests waiting for a decode slot per instance",
                                   level, "requests", instances=list(prefill.index),
                                   window=whole(f), source="prefill_bootstrap_queue"))
        tq = series_trend(f.role_series("prefill_queue"))
        if rising(tq, QUEUE_GROWTH_MIN, f) and tq is not None:
            blocked = True
            evidence.append(ev("prefill queue depth per instance (the misleading symptom)",
                               tq.hinge_end_level, "requests", instances=list(prefill.index),
                               window=(tq.onset_ts, tq.end_ts), baseline=tq.onset_level,
                               source="requests_waiting on prefill instances"))
        return blocked, agree, available


@dataclass(frozen=True)
class _Decode:
    """What PD202 measures on the decode side (per-instance columns and their medians)."""

    decode: pd.DataFrame
    prealloc: pd.Series
    admission: pd.Series
    retracted: pd.Series
    kv: float | None  # KV usage p90, median over decode instances
    kv_high: bool
    retracting: bool
    prealloc_trend: Trend | None
    prealloc_rising: bool
    prealloc_level: float
    admission_level: float
    vllm_starved: bool
    sglang_starved: bool
