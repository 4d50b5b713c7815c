"""PD201: decode saturated (decode-bound)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pdprobe import signals as S
from pdprobe.analysis.base import CapacityResult
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.analysis.evidence.registry import KV_NEAR_FULL
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.capacity_quote import beyond_needed, pool_short_by
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
    role_rows,
    secs,
    series_trend,
    slo_collapsed,
    slo_missed,
    whole,
)
from pdprobe.rules.thresholds import (
    CONFIDENCE_UNOBSERVED,
    DECODE_ADMISSION_GROWTH,
    KV_FULL_TIME_SHARE,
    RETRACTING_MEAN,
)
from pdprobe.units import fmt_count

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.stats import Trend

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
                  "cluster.decode_admission", "instances.remote_kv_wait_mean",
                  "instances.admission_wait_mean", "instances.g_prealloc_mean",
                  "instances.g_deferred_mean", "instances.g_kv_fetch_mean",
                  "instances.g_transfer_queue_mean", "events", "slo", "capacity"),
        live=(Live("decode KV usage", (S.KV_USAGE_RATIO,)),
              Live("preemption/retraction counters", (S.PREEMPTIONS_TOTAL, S.REQUESTS_RETRACTED)),
              Live("TPOT/ITL histograms", (S.TPOT_S, S.ITL_S))),
        roles=("decode",),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Measure decode memory, preemptions, TPOT and admission; decide saturation; explain."""
        f = ctx.evidence
        m = self._measure(f)
        if not m.available:
            return [self.inconclusive()]
        if not (m.observed or m.full or m.short_by is not None):
            return []
        return [self._explain(f, m, ctx.quoted)]

    @staticmethod
    def _measure(f: ClusterEvidence) -> _Saturation:
        """Each decode channel: KV full, preemptions, TPOT, admission queue, capacity model."""
        decode = role_rows(f, "decode")
        kv_full = column(decode, "g_kv_usage_full_frac")
        preempt = column(decode, "c_preemptions")
        retracted = column(decode, "g_retracted_mean")
        tpot_att = f.slo.tpot_attainment
        tpot_series = f.role_series("tpot_p50")
        admission = f.role_series("decode_admission")
        cap_known = _cap_known(f)
        available = sum(bool(c) for c in (
            kv_full.notna().any(), preempt.notna().any() or retracted.notna().any(),
            tpot_att is not None or tpot_series is not None, admission is not None, cap_known))
        # KV full of transfers in flight is the hand-off's doing (PD302), not decode work.
        full = [] if remote_kv_dominates(f)[0] else kv_full[
            kv_full >= KV_FULL_TIME_SHARE].index.astype(str).tolist()
        total = max(float(preempt.sum()) if preempt.notna().any() else 0.0,
                    float(f.event_count(S.EV_PREEMPTION)))
        requests = float(column(decode, "traffic_count").sum()) or float(f.n_requests)
        tt = series_trend(tpot_series)
        ta = series_trend(admission)
        return _Saturation(
            decode=decode, available=available, full=full, preempt=preempt, retracted=retracted,
            preemptions=total, preempt_share=total / requests if requests > 0 else None,
            retracting=bool(retracted.notna().any()
                            and float(retracted.max()) >= RETRACTING_MEAN),
            tpot_att=tpot_att,
            tpot_trend=tt if tpot_att is None and tt is not None and rising(
                tt, TPOT_RISE_FACTOR * max(tt.onset_level, 1e-6), f) else None,
            admission_trend=ta if rising(ta, DECODE_ADMISSION_GROWTH, f) and (
                _admission_separated(decode) or decode_kv_pressure(f)) else None,
            short_by=_short_by(f))

    def _explain(self, f: ClusterEvidence, m: _Saturation,
                 quoted: CapacityResult | None) -> Finding:
        """The finding: evidence per channel, severity, confidence and wording. Judged on the
        model as built (``m``); its counts quoted from ``quoted``, the report's capacity
        section (RuleContext.quoted)."""
        evidence = self._memory_evidence(f, m) + self._speed_evidence(f, m)
        cap = quoted
        short_by = pool_short_by(quoted, "decode")
        if short_by is None:
            short_by = m.short_by
        if m.short_by is not None and cap is not None:
            evidence.append(ev("decode instances recommended by the capacity model",
                               cap.recommended_decode, "instances",  # type: ignore[arg-type]
                               window=whole(f), baseline=cap.deployed_decode,  # type: ignore[arg-type]
                               source=f"capacity model ({cap.model_source})"))
        severity = Severity.WARNING if m.observed else Severity.INFO
        if m.observed and (slo_collapsed(m.tpot_att) or m.preempting_critical):
            severity = Severity.CRITICAL
        confidence = evidence_confidence(m.agreeing if m.observed else 1, m.available)
        if not m.observed:
            confidence = min(confidence, CONFIDENCE_UNOBSERVED)
        instances = sorted({*m.full, *m.preempting_instances}) or list(
            m.decode.index.astype(str))
        rising_for = m.tpot_trend.rising_for_s if m.tpot_trend is not None else (
            m.admission_trend.rising_for_s if m.admission_trend is not None else None)
        summary = self._summary(short_by, m.full, m.preempting or m.retracting,
                                m.preemptions, m.tpot_slow, m.admission_trend is not None,
                                rising_for, m.observed, f)
        return self.finding(severity, confidence, summary, instances=instances,
                            evidence=evidence, next_steps=self._next_steps(quoted, short_by))

    @staticmethod
    def _memory_evidence(f: ClusterEvidence, m: _Saturation) -> list[Evidence]:
        """KV memory full most of the time, and the preemptions/retractions it causes."""
        out: list[Evidence] = []
        if m.full:
            out.append(ev("decode instances with KV usage >= 90 % most of the time",
                          len(m.full), "instances", instances=m.full, window=whole(f),
                          baseline=len(m.decode), source="kv_usage_ratio on decode instances"))
            kv_p90 = column(m.decode, "g_kv_usage_p90").loc[m.full]
            out.append(ev("KV usage p90 on those instances", 100 * float(kv_p90.median()),
                          "%", instances=m.full, window=whole(f), baseline=100 * KV_NEAR_FULL))
        if m.preempting or m.retracting:
            out.append(ev("preemptions/retractions on decode", m.preemptions, "sequences",
                          instances=m.preempting_instances, window=whole(f),
                          baseline=None if m.preempt_share is None
                          else f"{pct(m.preempt_share)} of requests",
                          source="preemptions_total / requests_retracted"))
        return out

    @staticmethod
    def _speed_evidence(f: ClusterEvidence, m: _Saturation) -> list[Evidence]:
        """TPOT against its objective or its own trend, and the decode admission queue."""
        out: list[Evidence] = []
        if m.tpot_att is not None:
            slo_s = f.slo.tpot_slo_s
            out.append(ev("requests within the TPOT SLO", 100 * m.tpot_att, "%",
                          window=whole(f), baseline=None if slo_s is None else f"SLO {secs(slo_s)}",
                          source="SLO attainment"))
        tt = m.tpot_trend
        if tt is not None:
            out.append(ev("median TPOT", tt.hinge_end_level, "s", window=(tt.onset_ts, tt.end_ts),
                          baseline=tt.onset_level, source="tpot_s in request records"))
        if f.slo.tpot_p90_s is not None:
            out.append(ev("TPOT p90", f.slo.tpot_p90_s, "s", window=whole(f),
                          source="tpot_s / TPOT histograms"))
        ta = m.admission_trend
        if ta is not None:
            out.append(ev("decode admission queue per instance", ta.hinge_end_level,
                          "requests", instances=list(m.decode.index),
                          window=(ta.onset_ts, ta.end_ts), baseline=ta.onset_level,
                          source="requests_waiting minus deferred on decode instances"))
        return out

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
    def _next_steps(cap: CapacityResult | None, short_by: int | None) -> list[str]:
        steps = []
        if cap is not None and isinstance(cap.recommended_prefill, int) and \
                isinstance(cap.recommended_decode, int):
            why = beyond_needed(cap, "decode")
            steps.append(f"Scale decode to {fmt_count(cap.recommended_decode, 'instances')} "
                         f"({cap.recommended_prefill}P:{cap.recommended_decode}D recommended "
                         f"by the capacity model{': ' + why if why else ''}).")
        elif short_by:
            steps.append(f"Add at least {short_by} decode instance(s).")
        else:
            steps.append("Add decode instances, or grow their KV pool.")
        steps.append("Grow the KV pool per decode instance: higher gpu-memory-utilization / "
                     "mem-fraction-static, an FP8 KV cache, or a lower max-num-seqs.")
        steps.append("Before scaling, check that the router spreads sequences evenly over the "
                     "decode instances (PD501).")
        return steps


@dataclass(frozen=True)
class _Saturation:
    """What PD201 measures on the decode side, one field per evidence channel."""

    decode: pd.DataFrame
    available: int  # evidence channels the inputs carried
    full: list[str]  # decode instances with KV near full most of the time
    preempt: pd.Series  # preemptions per decode instance
    retracted: pd.Series  # mean retracted requests per decode instance (SGLang)
    preemptions: float  # preemptions (counters or log events), cluster total
    preempt_share: float | None  # ... per request
    retracting: bool
    tpot_att: float | None  # TPOT SLO attainment
    tpot_trend: Trend | None  # median TPOT rising by TPOT_RISE_FACTOR (no SLO given)
    admission_trend: Trend | None  # decode admission queue rising
    short_by: int | None  # decode instances the capacity model adds

    @property
    def preempting(self) -> bool:
        return self.preemptions >= MIN_PREEMPTIONS and (
            self.preempt_share is None or self.preempt_share >= PREEMPT_SHARE_WARN)

    @property
    def preempting_critical(self) -> bool:
        return self.preempt_share is not None and self.preempt_share >= PREEMPT_SHARE_CRITICAL \
            and self.preemptions >= MIN_PREEMPTIONS

    @property
    def preempting_instances(self) -> list[str]:
        if not (self.preempting or self.retracting):
            return []
        return self.preempt[self.preempt > 0].index.astype(str).tolist() or \
            self.retracted[self.retracted >= RETRACTING_MEAN].index.astype(str).tolist()

    @property
    def tpot_slow(self) -> bool:
        return slo_missed(self.tpot_att) or self.tpot_trend is not None

    @property
    def observed(self) -> bool:
        return self.preempting or self.retracting or self.tpot_slow or \
            self.admission_trend is not None

    @property
    def agreeing(self) -> int:
        return sum(int(x) for x in (self.preempting or self.retracting, self.tpot_slow,
                                    self.admission_trend is not None, self.short_by is not None,
                                    bool(self.full) and self.observed))


def _cap_known(f: ClusterEvidence) -> bool:
    cap = f.capacity
    return cap is not None and isinstance(cap.recommended_decode, int) and \
        isinstance(cap.deployed_decode, int)


def _short_by(f: ClusterEvidence) -> int | None:
    """Decode instances the model as built adds (None when it adds none)."""
    return pool_short_by(f.capacity, "decode")


def _admission_separated(decode: pd.DataFrame) -> bool:
    """Whether the inputs tell remote-KV waits from decode-slot waits.

    vLLM logs print one "Waiting" count that includes requests waiting for remote KV; without
    the deferred/transfer breakdown a rising queue on a decode with free KV memory may be the
    KV hand-off (PD302), not decode capacity.
    """
    return any(column(decode, c).notna().any() for c in (
        "g_deferred_mean", "g_kv_fetch_mean", "g_transfer_queue_mean", "g_prealloc_mean"))
