"""PD302: decode waits for remote KV while prefill idles (kv-transfer-bandwidth)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pdprobe import signals as S
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    column,
    ev,
    evidence_confidence,
    names,
    pct,
    prefill_backlog,
    remote_kv_dominates,
    rising,
    role_rows,
    series_trend,
    slo_collapsed,
    whole,
)
from pdprobe.rules.thresholds import DECODE_KV_PRESSURE

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.model import ClusterEvidence
    from pdprobe.analysis.evidence.stats import Trend

# Requests per decode instance waiting for remote KV (vLLM kv_fetch / deferred, SGLang
# transfer queue): at least this many on average ...
REMOTE_WAIT_MIN: Final = 2.0
# ... and at least this share of the decode batch (Little's law: a healthy cluster always has
# arrival rate x transfer time in flight; a quarter of the batch waiting is not healthy).
REMOTE_WAIT_SHARE_OF_RUNNING: Final = 0.25
# Growth of the remote-KV wait (requests per instance) that counts as rising.
REMOTE_WAIT_GROWTH_MIN: Final = 2.0
# Prefill is "idle" when its mean queue per instance is under this.
PREFILL_IDLE_QUEUE: Final = 1.0


class DecodeWaitsForKv(BaseRule):
    """Decode instances wait for remote KV while prefill idles: the hand-off is the bottleneck

    What it means: a sizeable share of the requests on the decode instances are neither
    running nor queued for memory: they wait for their KV cache to arrive from prefill
    (vLLM num_requests_kv_fetch_by_stage / deferred requests, SGLang decode transfer queue),
    while decode KV memory is not full and the prefill queues are empty.

    Why it matters in a disaggregated deployment: this is the signature of a slow KV
    hand-off. It is easy to misread: TTFT is high, so prefill looks guilty, yet prefill has
    nothing queued; decode throughput is low, so decode looks small, yet decode memory is
    free. Neither pool needs more instances; the transfer path does.

    Evidence it uses: mean requests waiting for remote KV per decode instance >= 2 and >= 25 %
    of the running batch, or rising by >= 2 with a significant trend; decode KV usage p90
    under 85 % (otherwise decode memory is the limit, PD202), unless the remote-KV waiters
    outnumber the admission waiters two to one (then transfers in flight hold the memory);
    prefill queue under 1 request per instance (prefill idle). A growing prefill backlog rules
    it out: then the KV is late because prefill is (SGLang's decode side enters its transfer
    queue before prefill even runs), and PD101 covers it. Critical when fewer than half the requests meet the TTFT SLO.

    What to do: look at the transfer path: link utilisation and achieved bandwidth
    (PD301), retransmissions (PD401), TCP fallback (PD402); check the connector's
    hand-over (vLLM NIXL side-channel time vs transfer time, block size, Mooncake transfer
    threads).
    """

    code = "PD302"
    name = "decode-waits-for-kv"
    cause = "kv-transfer-bandwidth"
    component = "kv-connector"
    inputs = Inputs(
        needs=(
        "requests waiting for remote KV on decode instances (vLLM "
        "num_requests_kv_fetch_by_stage or waiting_by_reason{reason=deferred}, SGLang "
        "num_decode_transfer_queue_reqs)",
        ),
        evidence=("instances.remote_kv_wait_mean", "instances.g_waiting_mean", "instances.g_running_mean",
                  "instances.g_kv_usage_p90", "instances.admission_wait_mean",
                  "instances.g_prealloc_mean",
                  "cluster.decode_kv_fetch", "cluster.decode_transfer_queue",
                  "cluster.decode_deferred", "cluster.decode_waiting", "cluster.prefill_queue",
                  "cluster.queue_s_p50", "slo"),
        live=(Live("requests waiting for remote KV", (S.KV_FETCH_WAITING, S.REQUESTS_DEFERRED,
                                                        S.DECODE_TRANSFER_QUEUE)),),
        roles=("decode",),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Measure remote-KV waits, decode memory and prefill's queue; decide; explain."""
        f = ctx.evidence
        m = self._measure(f)
        if m is None:
            return [self.inconclusive()]
        if not (m.waiting or m.trend is not None):
            return []
        if m.kv_full and not m.held:
            return []  # memory, not transfer: PD202 covers it
        if prefill_backlog(f)[0] is not None:
            # The KV is late because prefill is late (SGLang's decode side even enters its
            # transfer queue before prefill runs): a prefill problem, not the hand-off.
            return []
        if m.ambiguous and not m.prefill_idle:
            return []  # without the breakdown, only "decode waits while prefill idles" counts
        return [self._explain(f, m)]

    @staticmethod
    def _measure(f: ClusterEvidence) -> _Waits | None:
        """Requests waiting for remote KV per decode instance (vLLM logs: all waiting), their
        trend, decode KV memory and the prefill queue; None when the inputs carry no waits."""
        decode = role_rows(f, "decode")
        remote = column(decode, "remote_kv_wait_mean")
        ambiguous = not remote.notna().any()
        if ambiguous:
            # vLLM log lines give one "Waiting" count (slot + remote KV): usable, but weaker.
            remote = column(decode, "g_waiting_mean")
            if not remote.notna().any() or not column(decode, "g_kv_usage_p90").notna().any():
                return None
        running = column(decode, "g_running_mean")
        names_ = ("decode_waiting",) if ambiguous else ("decode_kv_fetch",)
        series = next((x for x in (f.role_series(n) for n in (
            *names_, "decode_transfer_queue", "decode_deferred")) if x is not None), None)
        tr = series_trend(series)
        kv = column(decode, "g_kv_usage_p90")
        held, _, admission = remote_kv_dominates(f)
        queue = column(role_rows(f, "prefill"), "g_waiting_mean")
        return _Waits(
            decode=decode, remote=remote, ambiguous=ambiguous, level=float(remote.median()),
            running=float(running.median()) if running.notna().any() else None,
            trend=tr if rising(tr, REMOTE_WAIT_GROWTH_MIN, f) else None,
            kv=float(kv.median()) if kv.notna().any() else None, held=held,
            admission=admission,
            prefill_queue=float(queue.median()) if queue.notna().any() else None)

    def _explain(self, f: ClusterEvidence, m: _Waits) -> Finding:
        """The finding: the waits, decode memory, the idle prefill side; severity and words."""
        evidence = self._evidence(f, m)
        agree = 1 + int(m.trend is not None) + int(m.kv is not None) + int(m.prefill_idle)
        contrary = int(m.prefill_queue is not None and not m.prefill_idle) + int(m.ambiguous)
        severity = Severity.CRITICAL if slo_collapsed(f.slo.ttft_attainment) else Severity.WARNING
        confidence = evidence_confidence(agree, 4, contrary)  # waits, trend, KV, prefill queue
        insts = m.remote[m.remote >= REMOTE_WAIT_MIN].index.astype(str).tolist() or \
            list(m.decode.index.astype(str))
        idle = " while prefill idles" if m.prefill_idle else ""
        kv_txt = ""
        if m.kv is not None:
            kv_txt = (f" (decode KV only {pct(m.kv)} used)" if not m.kv_full else
                      f" (decode KV {pct(m.kv)} used, mostly by transfers in flight)")
        summary = (f"Decode instances {names(insts)} wait for remote KV ({m.level:.1f} requests "
                   f"each on average){idle}{kv_txt}: the KV hand-off, not prefill or decode "
                   f"capacity, is the bottleneck")
        return self.finding(severity, confidence, summary, instances=insts, evidence=evidence,
                            next_steps=(
            "Check the transfer path: link utilisation and achieved bandwidth (PD301), "
            "retransmissions (PD401), TCP fallback (PD402).",
            "Compare the connector's hand-over time with the wire time (vLLM NIXL side "
            "channel, KV block size, Mooncake transfer threads).",
            "Do not add prefill or decode instances for this: neither pool is the limit.",
        ))

    @staticmethod
    def _evidence(f: ClusterEvidence, m: _Waits) -> list[Evidence]:
        what = ("requests waiting on decode instances (slot or remote KV: no breakdown)"
                if m.ambiguous else "requests waiting for remote KV per decode instance")
        out = [ev(what, m.level, "requests", instances=list(m.decode.index), window=whole(f),
                  baseline=m.running,
                  source=("requests_waiting" if m.ambiguous else
                          "kv_fetch_waiting / decode_transfer_queue / requests_deferred")
                  + " (baseline: running requests)")]
        tr = m.trend
        if tr is not None:
            out.append(ev("remote-KV wait per decode instance", tr.hinge_end_level, "requests",
                          window=(tr.onset_ts, tr.end_ts), baseline=tr.onset_level,
                          source="trend"))
        if m.kv is not None:
            out.append(ev("decode KV usage p90 (median over decode instances)", 100 * m.kv, "%",
                          window=whole(f), baseline=100 * DECODE_KV_PRESSURE,
                          source="kv_usage_ratio"))
        if m.kv_full:
            out.append(ev("requests waiting for decode admission per instance", m.admission,
                          "requests", window=whole(f),
                          source="decode KV is full of transfers in flight: the remote-KV "
                                 "waiters outnumber these"))
        if m.prefill_queue is not None:
            out.append(ev("prefill queue per instance", m.prefill_queue, "requests",
                          instances=list(role_rows(f, "prefill").index), window=whole(f),
                          baseline=PREFILL_IDLE_QUEUE, source="requests_waiting"))
        return out


@dataclass(frozen=True)
class _Waits:
    """What PD302 measures: remote-KV waits on decode, decode memory, the prefill queue."""

    decode: pd.DataFrame
    remote: pd.Series  # requests waiting for remote KV per decode instance (mean)
    ambiguous: bool  # vLLM log "Waiting": slot and remote KV together
    level: float  # median of ``remote`` over decode instances
    running: float | None  # running requests per decode instance (median)
    trend: Trend | None  # the remote-KV wait rising by REMOTE_WAIT_GROWTH_MIN
    kv: float | None  # decode KV usage p90, median over decode instances
    held: bool  # remote-KV waiters outnumber admission waiters (transfers hold the memory)
    admission: float  # requests waiting for decode admission per instance
    prefill_queue: float | None  # prefill queue per instance (median of means)

    @property
    def waiting(self) -> bool:
        return self.level >= REMOTE_WAIT_MIN and (
            self.running is None or self.level >= REMOTE_WAIT_SHARE_OF_RUNNING * self.running)

    @property
    def kv_full(self) -> bool:
        return self.kv is not None and self.kv >= DECODE_KV_PRESSURE

    @property
    def prefill_idle(self) -> bool:
        return self.prefill_queue is not None and self.prefill_queue < PREFILL_IDLE_QUEUE
