"""PD901: disaggregation is silently not in effect (not-disaggregated)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.rules.base import Evidence, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    column,
    ev,
    evidence_confidence,
    names,
    pct,
    role_rows,
    whole,
)
from pdprobe.rules.thresholds import KV_FAILURE_SHARE_WARN

if TYPE_CHECKING:
    from pdprobe.analysis.evidence.model import ClusterEvidence

# Decode instances doing at least this share of the cluster's prompt (prefill) work prefill
# locally: in a working P/D deployment decode computes only the last few prompt tokens (vLLM
# counts received KV as "external", SGLang decode runs no prefill batches), so a quarter is
# far beyond noise.
LOCAL_PREFILL_SHARE: Final = 0.25
# Share of requests not disaggregated from which disaggregation is effectively off (critical).
NOT_DISAGG_CRITICAL: Final = 0.5
# "KV never crossed" needs this many finished requests: a few could all be full prefix hits.
MIN_FINISHED: Final = 20
# Decode received at most this share of its prompt tokens by KV transfer: "none arrived".
RECEIVED_FLAT_SHARE: Final = 0.02
# Completed records that moved no KV bytes, at least this share: the KV never crossed.
NO_KV_RECORD_SHARE: Final = 0.9
# Prefill instances emit one token per request in P/D; this many per finished request means
# they decode too (an aggregated worker registered as prefill).
PREFILL_TOKENS_PER_REQUEST: Final = 4.0


@dataclass
class _Signs:
    """What shows disaggregation is not in effect: share of requests affected per sign."""

    shares: list[float] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    instances: set[str] = field(default_factory=set)
    channels: int = 0  # evidence channels the inputs carried
    contrary: int = 0  # channels showing the opposite (KV crossed, decode did not prefill)
    kinds: list[str] = field(default_factory=list)  # summary fragments
    share_known: bool = True  # False when a sign had no denominator (a log of failure lines)


class NotDisaggregated(BaseRule):
    """Disaggregation is silently not in effect

    What it means: the deployment is meant to prefill on prefill instances and ship the KV to
    decode instances, but it does not: decode instances compute the prompts themselves (prompt
    throughput on decode, SGLang decode servers printing prefill batches, vLLM decode
    recomputing after failed KV loads: "Recovered from KV load failure: N request(s)
    rescheduled", V0 "redo model forwarding"), workers run in the wrong role (a prefill instance
    generating whole answers), or no KV crosses the fabric while requests complete (connector
    byte/transfer counters, decode's received-token counter and the records' kv_bytes flat).

    Why it matters in a disaggregated deployment: every request pays a full prefill on the
    decode GPUs, between decode steps: TPOT rises for everyone, prefill GPUs idle, and capacity
    planning for P/D is wrong. Nothing fails, so dashboards stay green; it is typically a router
    or proxy that bypasses prefill, a KV connector that is not configured on one side
    (kv_role, kv-transfer-config), or a load failure policy of "recompute" hiding failed loads.

    Evidence it uses: decode instances' share of the cluster's prompt throughput >=
    LOCAL_PREFILL_SHARE = 25 %; decode-side recompute events after failed KV loads (share of
    finished requests, >= 1 % is a warning); decode receiving <= 2 % of its prompt tokens by KV
    transfer (vllm:prompt_tokens_by_source_total) while generating; connector counters (NIXL
    agent bytes, Mooncake TENT bytes, transfers) flat over >= 20 finished requests; >= 90 % of
    completed records with kv_bytes 0; prefill instances emitting >= 4 tokens per finished
    request. Supporting: node RDMA counters flat. Critical when at least half the requests are
    not disaggregated.

    What to do: check that the router/proxy sends every request to a prefill instance first
    (the P/D decision counter of llm-d, the proxy's logs); check each instance's role flags
    (--kv-transfer-config kv_role, --disaggregation-mode) and that both sides run the same KV
    connector; if decode recomputes after failed loads, fix the failures (PD303) or set the
    failure policy to fail so they show.
    """

    code = "PD901"
    name = "not-disaggregated"
    cause = "not-disaggregated"
    component = "instance-manager"
    inputs = Inputs(
        needs=(
            "prompt throughput per instance (vLLM/SGLang logs or prompt-token counters) with "
            "roles",
            "decode recompute lines after failed KV loads (vLLM logs)",
            "KV connector byte/transfer counters (NIXL telemetry, Mooncake TENT, vLLM prompt "
            "tokens by source) with finished requests",
            "request records with kv_bytes",
        ),
        evidence=("instances.g_prompt_tps_mean", "instances.c_kv_received_tokens",
                  "instances.c_prompt_tokens", "instances.c_generation_tokens",
                  "instances.c_finished", "instances.c_kv_tx_bytes", "instances.c_kv_rx_bytes",
                  "instances.c_kv_rdma_bytes", "instances.c_kv_tcp_bytes",
                  "instances.c_kv_transfers", "nodes.rdma_bytes", "failures"),
        live=(Live("prompt tokens received by KV transfer", (S.KV_RECEIVED_TOKENS_TOTAL,)),
              Live("KV connector traffic", (S.KV_TX_BYTES_TOTAL, S.KV_RX_BYTES_TOTAL,
                                            S.KV_RDMA_BYTES_TOTAL, S.KV_TRANSFERS_TOTAL)),
              Live("finished requests", (S.REQUESTS_FINISHED_TOTAL,))),
        roles=("decode",),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Measure each sign of local prefill or an idle hand-off; decide; explain."""
        f = ctx.evidence
        signs = _Signs()
        self._local_prefill(f, signs)
        self._recompute(f, signs)
        self._received(f, signs)
        self._connector_flat(f, signs)
        self._records(f, signs)
        self._wrong_role(f, signs)
        if not signs.channels:
            return [self.inconclusive()]
        if not signs.shares:
            return []
        share = max(signs.shares)
        if share < KV_FAILURE_SHARE_WARN:
            return []
        self._fabric_flat(f, signs)
        severity = Severity.CRITICAL if share >= NOT_DISAGG_CRITICAL else Severity.WARNING
        # Channels that saw nothing either way (a wrong-role check when roles are right) do not
        # weaken a sign; channels that show KV crossing do.
        confidence = evidence_confidence(len(signs.shares), len(signs.shares) + signs.contrary,
                                         contrary=int(signs.contrary > 0))
        insts = sorted(signs.instances)
        where = f" on {names(insts)}" if insts else ""
        part = f"about {pct(share)} of" if signs.share_known or len(signs.shares) > 1 else "some"
        summary = (f"Disaggregation is not in effect for {part} requests{where}: "
                   + "; ".join(signs.kinds))
        return [self.finding(severity, confidence, summary, instances=insts,
                             evidence=signs.evidence, next_steps=(
            "Check that the router/proxy sends every request to a prefill instance first.",
            "Check each instance's role flags (vLLM --kv-transfer-config kv_role, SGLang "
            "--disaggregation-mode) and that both sides run the same KV connector.",
            "If decode recomputes after failed KV loads, fix the failures (PD303) or set the "
            "load failure policy to fail so they show.",
        ))]

    @staticmethod
    def _local_prefill(f: ClusterEvidence, s: _Signs) -> None:
        tps = column(f.instances, "g_prompt_tps_mean")
        decode = f.instances["role"] == "decode"
        if not tps[decode].notna().any():
            return
        s.channels += 1
        total = float(tps.fillna(0).clip(lower=0).sum())
        local = tps[decode].fillna(0).clip(lower=0)
        if total <= 0 or float(local.sum()) / total < LOCAL_PREFILL_SHARE:
            s.contrary += int(total > 0)
            return
        share = float(local.sum()) / total
        busy = [str(i) for i in local[local > 0].index]
        s.shares.append(share)
        s.instances.update(busy)
        s.kinds.append("decode instances compute prompts themselves")
        s.evidence.append(ev("decode instances' share of the prompt (prefill) throughput",
                             100 * share, "%", instances=busy, window=whole(f),
                             baseline=100 * LOCAL_PREFILL_SHARE,
                             source="prompt throughput on decode / all instances"))

    @staticmethod
    def _recompute(f: ClusterEvidence, s: _Signs) -> None:
        fl = f.failures
        if not fl.recompute_events:
            if fl.by_event or f.events.shape[0]:
                s.channels += 1  # logs that could have shown recomputes did not
            return
        s.channels += 1
        n = fl.recomputed_requests
        # without a denominator (a log of these lines only) any recompute is a warning
        share = min(1.0, n / fl.finished) if fl.finished else KV_FAILURE_SHARE_WARN
        s.share_known = s.share_known and bool(fl.finished)
        s.shares.append(max(share, KV_FAILURE_SHARE_WARN))
        s.instances.update(f.event_instances(S.EV_KV_LOAD_RECOMPUTED))
        s.kinds.append(f"decode recomputed {n} prompt{'' if n == 1 else 's'} after failed KV "
                       "loads")
        s.evidence.append(ev("requests decode recomputed after a failed KV load", n,
                             "requests", instances=f.event_instances(S.EV_KV_LOAD_RECOMPUTED),
                             window=whole(f), source=f"{fl.recompute_events} log lines"
                             + (f", {fl.recomputed_tokens} tokens" if fl.recomputed_tokens
                                else "")))

    @staticmethod
    def _received(f: ClusterEvidence, s: _Signs) -> None:
        decode = role_rows(f, "decode")
        got = column(decode, "c_kv_received_tokens")
        prompt = column(decode, "c_prompt_tokens")
        gen = column(decode, "c_generation_tokens")
        if not (got.notna().any() and prompt.notna().any()):
            return
        s.channels += 1
        p = float(prompt.sum())
        if p <= 0 or float(gen.fillna(0).sum()) <= 0:
            return
        ratio = float(got.fillna(0).sum()) / p
        if ratio > RECEIVED_FLAT_SHARE:
            s.contrary += 1
            return
        s.shares.append(1.0 - ratio)
        s.instances.update(str(i) for i in decode.index)
        s.kinds.append("decode received almost no prompt KV by transfer")
        s.evidence.append(ev("prompt tokens decode received by KV transfer", 100 * ratio, "%",
                             instances=list(decode.index), window=whole(f),
                             baseline=100 * RECEIVED_FLAT_SHARE,
                             source="prompt tokens by source external_kv_transfer / prompt "
                                    "tokens on decode"))

    @staticmethod
    def _finished(f: ClusterEvidence) -> float:
        fin = f.failures.finished
        return float(fin) if fin else 0.0

    def _connector_flat(self, f: ClusterEvidence, s: _Signs) -> None:
        cols = ("c_kv_tx_bytes", "c_kv_rx_bytes", "c_kv_rdma_bytes", "c_kv_tcp_bytes",
                "c_kv_transfers")
        values = [column(f.instances, c) for c in cols]
        if not any(v.notna().any() for v in values):
            return
        s.channels += 1
        moved = sum(float(v.fillna(0).sum()) for v in values)
        s.contrary += int(moved > 0)
        if moved > 0 or self._finished(f) < MIN_FINISHED:
            return
        s.shares.append(1.0)
        s.kinds.append("the KV connector moved no bytes")
        s.evidence.append(ev("KV bytes and transfers counted by the connector", 0.0, "bytes",
                             window=whole(f), baseline=f"{self._finished(f):.0f} requests "
                             "finished", source="NIXL agent / Mooncake TENT / transfer counters"))

    @staticmethod
    def _records(f: ClusterEvidence, s: _Signs) -> None:
        share = f.failures.records_no_kv_share
        if share is None:
            return
        s.channels += 1
        s.contrary += int(share < 1 - NO_KV_RECORD_SHARE)  # most requests moved KV
        if share < NO_KV_RECORD_SHARE or f.failures.records < MIN_FINISHED:
            return
        s.shares.append(share)
        s.kinds.append("completed requests moved no KV bytes")
        s.evidence.append(ev("completed requests with kv_bytes 0", 100 * share, "%",
                             window=whole(f), baseline=100 * NO_KV_RECORD_SHARE,
                             source="request records"))

    @staticmethod
    def _wrong_role(f: ClusterEvidence, s: _Signs) -> None:
        prefill = role_rows(f, "prefill")
        gen = column(prefill, "c_generation_tokens")
        fin = column(prefill, "c_finished")
        if not (gen.notna().any() and fin.notna().any()):
            return
        s.channels += 1
        with np.errstate(all="ignore"):
            per = gen / fin.where(fin >= MIN_FINISHED)
        wrong = per[per >= PREFILL_TOKENS_PER_REQUEST]
        if wrong.empty:
            return
        s.shares.append(float(fin[wrong.index].sum() / max(float(fin.sum()), 1.0)))
        s.instances.update(str(i) for i in wrong.index)
        s.kinds.append(f"{names(list(wrong.index))} generate whole answers (a decode or "
                       "aggregated worker registered as prefill)")
        s.evidence.append(ev("tokens generated per finished request on prefill instances",
                             float(wrong.median()), "tokens", instances=list(wrong.index),
                             window=whole(f), baseline=PREFILL_TOKENS_PER_REQUEST,
                             source="generation tokens / finished requests (P/D prefill emits 1)"))

    def _fabric_flat(self, f: ClusterEvidence, s: _Signs) -> None:
        """Supporting: node RDMA counters flat while requests finish."""
        if not f.has_node_column("rdma_bytes") or self._finished(f) < MIN_FINISHED:
            return
        rdma = f.node_column("rdma_bytes")
        if rdma.notna().any() and float(rdma.fillna(0).sum()) <= 0:
            s.evidence.append(ev("RDMA bytes on the nodes", 0.0, "bytes", window=whole(f),
                                 source="node_exporter InfiniBand counters"))
