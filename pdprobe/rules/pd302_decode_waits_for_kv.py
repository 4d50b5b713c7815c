"""PD302: decode waits for remote KV while prefill idles (kv-transfer-bandwidth)."""

from __future__ import annotations

from typing import Final

from pdprobe import signals as S
from pdprobe.rules.base import Inputs, Live, RuleContext, RuleResult, Severity
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
    series_trend,
    slo_collapsed,
    whole,
)
from pdprobe.rules.thresholds import DECODE_KV_PRESSURE

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
                  "cluster.decode_kv_fetch", "cluster.decode_transfer_queue",
                  "cluster.decode_deferred", "cluster.decode_waiting", "cluster.prefill_queue",
                  "cluster.queue_s_p50", "slo"),
        live=(Live("requests waiting for remote KV", (S.KV_FETCH_WAITING, S.REQUESTS_DEFERRED,
                                                        S.DECODE_TRANSFER_QUEUE)),),
        roles=("decode",),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        f = ctx.evidence
        decode = f.role("decode")
        prefill = f.role("prefill")
        remote = column(decode, "remote_kv_wait_mean")
        ambiguous = False
        if not remote.notna().any():
            # vLLM log lines give one "Waiting" count (slot + remote KV): usable, but weaker.
            remote = column(decode, "g_waiting_mean")
            ambiguous = True
            if not remote.notna().any() or not column(decode, "g_kv_usage_p90").notna().any():
                return [self.inconclusive()]
        running = column(decode, "g_running_mean")
        level = float(remote.median())
        run_level = float(running.median()) if running.notna().any() else None
        waiting = level >= REMOTE_WAIT_MIN and (
            run_level is None or level >= REMOTE_WAIT_SHARE_OF_RUNNING * run_level)
        series = f.role_series("decode_waiting") if ambiguous else f.role_series(
            "decode_kv_fetch")
        if series is None:
            series = f.role_series("decode_transfer_queue")
        if series is None:
            series = f.role_series("decode_deferred")
        tr = series_trend(series)
        grow = rising(tr, REMOTE_WAIT_GROWTH_MIN, f)
        if not (waiting or grow):
            return []
        what = ("requests waiting on decode instances (slot or remote KV: no breakdown)"
                if ambiguous else "requests waiting for remote KV per decode instance")
        evidence = [ev(what, level, "requests", instances=list(decode.index), window=whole(f),
                       baseline=None if run_level is None else run_level,
                       source=("requests_waiting" if ambiguous else
                               "kv_fetch_waiting / decode_transfer_queue / requests_deferred")
                       + " (baseline: running requests)")]
        agree, available, contrary = 1, 3, 0
        if grow and tr is not None:
            agree += 1
            evidence.append(ev("remote-KV wait per decode instance", tr.hinge_end_level,
                               "requests", window=(tr.onset_ts, tr.end_ts),
                               baseline=tr.onset_level, source="trend"))
        kv = column(decode, "g_kv_usage_p90")
        kv_level = float(kv.median()) if kv.notna().any() else None
        if kv_level is not None:
            evidence.append(ev("decode KV usage p90 (median over decode instances)",
                               100 * kv_level, "%", window=whole(f), baseline=100 * DECODE_KV_PRESSURE,
                               source="kv_usage_ratio"))
            held, _, admission = remote_kv_dominates(f)
            if kv_level >= DECODE_KV_PRESSURE and not held:
                return []  # memory, not transfer: PD202 covers it
            if kv_level >= DECODE_KV_PRESSURE:
                evidence.append(ev("requests waiting for decode admission per instance",
                                   admission, "requests", window=whole(f),
                                   source="decode KV is full of transfers in flight: the "
                                          "remote-KV waiters outnumber these"))
            agree += 1
        queue = column(prefill, "g_waiting_mean")
        backlog, _ = prefill_backlog(f)
        if backlog is not None:
            # The KV is late because prefill is late (SGLang's decode side even enters its
            # transfer queue before prefill runs): a prefill problem, not the hand-off.
            return []
        prefill_idle = None
        if queue.notna().any():
            prefill_idle = float(queue.median()) < PREFILL_IDLE_QUEUE
            evidence.append(ev("prefill queue per instance", float(queue.median()), "requests",
                               instances=list(prefill.index), window=whole(f),
                               baseline=PREFILL_IDLE_QUEUE, source="requests_waiting"))
            if prefill_idle:
                agree += 1
            else:
                contrary += 1
        if ambiguous and not prefill_idle:
            return []  # without the breakdown, only "decode waits while prefill idles" counts
        if ambiguous:
            contrary += 1
        att = f.slo.ttft_attainment
        severity = Severity.CRITICAL if slo_collapsed(att) else Severity.WARNING
        confidence = evidence_confidence(agree, available + 1, contrary)
        insts = remote[remote >= REMOTE_WAIT_MIN].index.astype(str).tolist() or \
            list(decode.index.astype(str))
        idle = " while prefill idles" if prefill_idle else ""
        kv_txt = ""
        if kv_level is not None:
            kv_txt = (f" (decode KV only {pct(kv_level)} used)" if kv_level < DECODE_KV_PRESSURE else
                      f" (decode KV {pct(kv_level)} used, mostly by transfers in flight)")
        summary = (f"Decode instances {names(insts)} wait for remote KV ({level:.1f} requests "
                   f"each on average){idle}{kv_txt}: the KV hand-off, not prefill or decode "
                   f"capacity, is the bottleneck")
        return [self.finding(severity, confidence, summary, instances=insts, evidence=evidence,
                             next_steps=(
            "Check the transfer path: link utilisation and achieved bandwidth (PD301), "
            "retransmissions (PD401), TCP fallback (PD402).",
            "Compare the connector's hand-over time with the wire time (vLLM NIXL side "
            "channel, KV block size, Mooncake transfer threads).",
            "Do not add prefill or decode instances for this: neither pool is the limit.",
        ))]
