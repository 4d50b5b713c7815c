"""PD303: KV transfers fail, time out or are abandoned (kv-transfer-failures)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import BaseRule, ev, evidence_confidence, pct, whole
from pdprobe.rules.thresholds import (
    FAILURE_CONCENTRATION,
    FAILURE_CONCENTRATION_MIN,
    FAILURE_TTFT_RATIO,
    KV_FAILURE_SHARE_CRITICAL,
    KV_FAILURE_SHARE_WARN,
    KV_FAILURES_CRITICAL,
)

if TYPE_CHECKING:
    from pdprobe.analysis.evidence.failures import Failures
    from pdprobe.analysis.evidence.model import ClusterEvidence

# What each failure event is, in the evidence's words.
EVENT_WORDS = {
    S.EV_KV_TRANSFER_FAILED: "failed KV transfers (log lines)",
    S.EV_KV_TRANSFER_TIMEOUT: "KV transfer batches that timed out",
    S.EV_KV_EXPIRED: "KV blocks released unpulled (expired)",
    S.EV_KV_BOOTSTRAP_FAILED: "failed P/D handshakes",
    S.EV_KV_PEER_LOST: "KV peers lost (heartbeat)",
    S.EV_SESSION_FAILED: "failed transfer sessions",
    S.EV_RDMA_NIC_INACTIVE: "local RDMA NICs marked inactive",
    S.EV_RDMA_CONNECT_FAILED: "RDMA connections to a peer that failed",
    S.EV_RDMA_RAIL_PAUSED: "RDMA paths to a peer paused",
    S.EV_RDMA_RETRY_EXCEEDED: "RDMA work requests that exhausted their retries",
    S.EV_KV_LOAD_RECOMPUTED: "decode recomputes after a failed KV load",
    S.EV_REQUEST_ABORTED: "requests aborted by the engine",
}


# Failures found in request records alone (status error, prefill done, no first token) could
# be any error at the hand-off: never surer than a coin toss.
RECORDS_ONLY_CONFIDENCE: Final = 0.5
NEXT_STEPS: Final = (
    "Read the first failure line on the named instances: the first error is the cause, "
    "later ones are fallout.",
    "If one NIC or peer stands out, drain it and check the link (ibstat, port error "
    "counters) or that instance's health.",
    "Compare the transfer timeouts (VLLM_NIXL_ABORT_REQUEST_TIMEOUT, "
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT) with the transfer times; check that both "
    "sides run the same connector and version.",
)


@dataclass(frozen=True)
class _Measured:
    """How many transfers failed, out of how many, and where the number came from."""

    failed: float
    share: float | None
    share_source: str
    from_records_only: bool


class KvTransferFailures(BaseRule):
    """KV transfers fail, time out or are abandoned

    What it means: the KV cache of some requests never reaches their decode instance: the
    connector or transfer engine reports failed transfers (SGLang "Decode transfer failed ...
    KVTransferError", vLLM "Failing N request(s) due to KV load failure", Mooncake "TRANSFER_FAIL"
    or "transport retry counter exceeded", NIXL failed transfers), batches time out, prefill
    releases KV blocks no decode worker pulled ("retrieved by 0 decode worker(s)"), a peer stops
    answering, or decode recomputes the prompt after a failed load.

    Why it matters in a disaggregated deployment: the hand-off is the one step an aggregated
    server does not have. A failed transfer is an error for the user, or a retry/recompute that
    waited out a timeout first (a TTFT tail), and the prefill work is lost. Failures that gather
    on one NIC or one peer point at hardware or one sick instance, not at load.

    Evidence it uses: failure events from logs (with the request, peer and NIC they name), the
    failure and expiry counters of the connectors (vllm:nixl/mooncake_num_failed_transfers,
    *_num_kv_expired_reqs, sglang:num_transfer_failed_reqs, NIXL agent_errors, Mooncake TENT
    failures), and request records with status error whose prefill finished but that never got a
    first token. The share of requests affected (failed transfers / finished requests) is a
    warning from KV_FAILURE_SHARE_WARN = 1 % and critical from 5 %; without a denominator (a log
    of failure lines only) any failed transfer is a warning and KV_FAILURES_CRITICAL = 10 are
    critical; below 1 % it is info. Reported with it: the failure rate over time, TTFT p90 of
    requests arriving while failures happen against the rest (a tail when >= 1.5x), their error
    share, and the NIC or peer carrying >= FAILURE_CONCENTRATION = 60 % of the failures that
    name one (at least 3), which is named in the summary.

    What to do: read the failure lines of the named instances (the first error is the cause,
    later ones are fallout); if one NIC or peer stands out, drain it and check its link (ibstat,
    port errors) or that instance's health; check the transfer timeouts against the transfer
    times (VLLM_NIXL_ABORT_REQUEST_TIMEOUT, SGLANG_DISAGGREGATION_WAITING_TIMEOUT) and that
    decode pulls before prefill's lease expires; make sure both sides run the same connector
    and version.
    """

    code = "PD303"
    name = "kv-transfer-failures"
    cause = "kv-transfer-failures"
    component = "kv-connector"
    inputs = Inputs(
        needs=(
            "engine or transfer-engine logs with KV-transfer failure lines (SGLang, vLLM, "
            "Mooncake, NIXL)",
            "KV-connector failure/expiry counters (vllm:nixl_num_failed_transfers, "
            "sglang:num_transfer_failed_reqs, ...)",
            "request records with a status column",
        ),
        evidence=("failures", "events", "slo", "instances.c_kv_failures",
                  "instances.c_kv_expired", "instances.c_kv_transfers", "instances.c_finished"),
        live=(Live("KV-transfer failure counters", (S.KV_TRANSFER_FAILURES_TOTAL,
                                                    S.KV_EXPIRED_TOTAL)),
              Live("finished requests", (S.REQUESTS_FINISHED_TOTAL,))),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Measure failures and their share; decide severity; explain rate, tail and spread."""
        f = ctx.evidence
        fl = f.failures
        has_counters = fl.counter_failures is not None or fl.counter_expired is not None
        has_status = fl.records_error is not None
        if not (fl.any or has_counters or has_status):
            return [self.inconclusive()]
        m = self._measure(fl)
        if m is None:
            return []
        return [self._explain(f, fl, m)]

    @staticmethod
    def _measure(fl: Failures) -> _Measured | None:
        """Failed transfers and the share of requests they are; None when nothing failed."""
        failed = fl.failed_transfers
        records_only = False
        if failed <= 0 and not fl.fabric_events:
            # Records alone: only errors at the hand-off (prefill done, no first token) are KV
            # failures; other errors and timeouts can be anything (overload, client, model).
            if not fl.records_handoff:
                return None
            failed, records_only = float(fl.records_handoff), True
        share, source = None, ""
        if fl.records_handoff is not None and fl.records and fl.records_handoff > failed:
            failed = float(fl.records_handoff)
        if fl.finished:
            share = min(1.0, failed / fl.finished)
            source = "request records" if fl.records else "finished-request counters"
        return _Measured(failed, share, source, records_only)

    def _explain(self, f: ClusterEvidence, fl: Failures, m: _Measured) -> Finding:
        """The finding: counts, share, rate, tail and spread; severity from the share."""
        evidence, tail, standout = self._evidence(f, fl, m)
        return self.finding(self._severity(fl, m), self._confidence(fl, m, tail),
                            self._summary(fl, m, standout, tail),
                            instances=sorted({name for name, _ in fl.by_instance}),
                            evidence=evidence, next_steps=NEXT_STEPS)

    def _evidence(self, f: ClusterEvidence, fl: Failures, m: _Measured,
                  ) -> tuple[list[Evidence], bool, str]:
        """The evidence, whether failures drive the TTFT tail, and the NIC/peer standing out."""
        evidence: list[Evidence] = []
        window = (fl.first_ts, fl.last_ts) if fl.first_ts is not None and \
            fl.last_ts is not None else whole(f)
        if m.failed > 0:
            evidence.append(ev("failed or abandoned KV transfers", m.failed, "transfers",
                               instances=[name for name, _ in fl.by_instance], window=window,
                               source=self._sources(fl, m)))
        if m.share is not None:
            evidence.append(ev("share of requests whose KV hand-off failed", 100 * m.share, "%",
                               window=whole(f), baseline=100 * KV_FAILURE_SHARE_WARN,
                               source=f"failed transfers / finished requests ({m.share_source})"))
        for event, words in EVENT_WORDS.items():
            n = fl.by_event.get(event, 0)
            if n:
                evidence.append(ev(words, n, "events", instances=f.event_instances(event),
                                   window=window, source=f"{event} events"))
        self._rate(f, fl, evidence)
        tail = self._tail(fl, evidence)
        if fl.records_error is not None and fl.records:
            evidence.append(ev("requests with status error", 100 * fl.records_error / fl.records,
                               "%", window=whole(f), source="request records"))
        return evidence, tail, self._standout(fl, evidence)

    @staticmethod
    def _confidence(fl: Failures, m: _Measured, tail: bool) -> float:
        """One channel per kind of input that saw failures (events, counters, records, tail)."""
        agree = sum(bool(x) for x in (fl.transfer_events or fl.fabric_events,
                                      fl.counter_failures or fl.counter_expired,
                                      fl.records_handoff, tail))
        available = sum(bool(x) for x in (fl.by_event, fl.counter_failures is not None,
                                          fl.records_error is not None)) + 1
        confidence = evidence_confidence(max(agree, 1), available)
        # Records alone cannot tell a KV failure from any error at the hand-off.
        return min(confidence, RECORDS_ONLY_CONFIDENCE) if m.from_records_only else confidence

    @staticmethod
    def _summary(fl: Failures, m: _Measured, standout: str, tail: bool) -> str:
        share_txt = f" ({pct(m.share)} of requests)" if m.share is not None else ""
        what = "failed, timed out or were abandoned" if fl.transfer_events or m.failed else \
            "hit transfer-engine errors"
        plural = "" if round(m.failed) == 1 else "s"
        summary = f"KV transfers {what}: {m.failed:.0f} hand-off{plural}{share_txt}"
        if not m.failed and fl.fabric_events:
            summary = f"The transfer engine gave up on KV paths {fl.fabric_events} times"
        if standout:
            summary += f", most of them on {standout}"
        if tail:
            summary += "; TTFT is higher while they happen"
        return summary

    @staticmethod
    def _sources(fl: Failures, m: _Measured) -> str:
        parts = []
        if fl.requests_logged:
            parts.append(f"{fl.requests_logged} in logs")
        if fl.counter_failures:
            parts.append(f"{fl.counter_failures:.0f} failure counter")
        if fl.counter_expired:
            parts.append(f"{fl.counter_expired:.0f} expiry counter")
        if fl.records_handoff:
            parts.append(f"{fl.records_handoff} records failed at the hand-off")
        return "; ".join(parts) or "request records"

    @staticmethod
    def _severity(fl: Failures, m: _Measured) -> Severity:
        if m.share is not None:
            if m.share >= KV_FAILURE_SHARE_CRITICAL:
                return Severity.CRITICAL
            return Severity.WARNING if m.share >= KV_FAILURE_SHARE_WARN else Severity.INFO
        failed = max(m.failed, fl.fabric_events)
        return Severity.CRITICAL if failed >= KV_FAILURES_CRITICAL else Severity.WARNING

    @staticmethod
    def _rate(f: ClusterEvidence, fl: Failures, evidence: list[Evidence]) -> None:
        """Failures per minute over the span they cover, and the worst bin."""
        per_bin = fl.per_bin
        if per_bin is None or per_bin.sum() <= 0:
            return
        step = f.window.step_s
        busy = per_bin[per_bin > 0]
        span_min = max((fl.last_ts or 0) - (fl.first_ts or 0), step) / 60.0
        evidence.append(ev("failure rate over the span with failures", float(per_bin.sum())
                           / span_min, "per min", window=(fl.first_ts or f.window.start_ts,
                                                          fl.last_ts or f.window.end_ts),
                           source=f"{len(busy)} of {len(per_bin)} windows of "
                                  f"{step:g} s had failures"))
        peak_ts = float(busy.index[int(np.argmax(busy.to_numpy()))])
        evidence.append(ev("failure rate in the worst window", float(busy.max()) * 60 / step,
                           "per min", window=(peak_ts, peak_ts + step)))

    @staticmethod
    def _tail(fl: Failures, evidence: list[Evidence]) -> bool:
        """TTFT and errors of requests arriving while failures happen against the rest."""
        tail = False
        a, b = fl.ttft_p90_failing_bins_s, fl.ttft_p90_other_bins_s
        if a is not None and b is not None:
            tail = b > 0 and a >= FAILURE_TTFT_RATIO * b
            evidence.append(ev("TTFT p90 of requests arriving while transfers fail", a, "s",
                               baseline=b, source="requests arriving in other windows as "
                                                  "baseline"))
        e1, e2 = fl.error_share_failing_bins, fl.error_share_other_bins
        if e1 is not None and e2 is not None and e1 > e2:
            evidence.append(ev("requests not ok while transfers fail", 100 * e1, "%",
                               baseline=100 * e2, source="status error/timeout/aborted; "
                                                          "other windows as baseline"))
        return tail

    @staticmethod
    def _standout(fl: Failures, evidence: list[Evidence]) -> str:
        """The NIC or peer carrying most of the failures that name one ("" when none does)."""
        found = ""
        for label, ranked in (("NIC", fl.by_nic), ("peer", fl.by_peer)):
            total = sum(n for _, n in ranked)
            if not ranked or total < FAILURE_CONCENTRATION_MIN:
                continue
            top, n = ranked[0]
            share = n / total
            if share < FAILURE_CONCENTRATION:
                continue
            others = len(ranked) - 1
            where = top
            evidence.append(ev(f"failures naming {label} {where}", 100 * share, "%",
                               baseline=100 * FAILURE_CONCENTRATION,
                               source=f"{n} of {total} events that name a {label}"
                                      + (f"; {others} other {label}s named" if others else
                                         "; no other named")))
            found = found or f"{label} {where}"
        return found
