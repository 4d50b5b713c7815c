"""PD502: requests routed to instances with a persistently low prefix-cache hit rate."""

from __future__ import annotations

from typing import Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.analysis.evidence.stats import peer_median
from pdprobe.rules.base import Evidence, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    column,
    ev,
    evidence_confidence,
    names,
    pct,
    prefill_backlog,
    slo_missed,
    whole,
)
from pdprobe.rules.thresholds import PERSISTENT_BIN_SHARE

# An instance's hit rate at most half its peers' median, with the peers at 20 % or more (below
# that nobody's cache helps much) and at least 15 points apart, is "low".
LOW_HIT_FACTOR: Final = 0.5
MIN_PEER_HIT: Final = 0.2
MIN_HIT_GAP: Final = 0.15
# The low-hit instance must take at least this fraction of its fair share of traffic to matter.
MIN_TRAFFIC_FRACTION_OF_FAIR: Final = 0.5


class LowPrefixHitRouting(BaseRule):
    """Requests go to instances whose prefix cache rarely hits, while prefill queues back up

    What it means: one or more instances of a role show a prefix-cache (KV) hit rate far
    below their peers', persistently over the window, while they still receive a normal share
    of requests. The router sends requests where their prefix is not cached.

    Why it matters in a disaggregated deployment: every missed prefix is recomputed by
    prefill. A router that ignores cache locality (or a decode instance selected without
    regard to its KV hit rate, as DOPD's router does) multiplies prefill work, so prefill
    queues grow and the deployment looks prefill-bound. Adding prefill instances treats the
    symptom; routing for cache affinity removes the work.

    Evidence it uses: per-instance hit rate from prefix-cache token counters over the window,
    else the engine's hit-rate gauge, else cached_tokens / prompt_tokens in request records;
    an instance at <= 50 % of its peers' median (LOW_HIT_FACTOR), peers >= 20 %, gap >= 15
    points, in >= 60 % of the time bins when per-bin data exist, and taking >= half its fair
    share of traffic. It is a warning when the extra prefill work shows: the prefill queue
    rising (>= 3 requests per instance, or the wait before prefill up >= 0.5 s and doubled)
    or the TTFT SLO missed; otherwise info.

    What to do: enable or fix prefix-/KV-aware routing (the router must see each instance's
    cached prefixes); keep sessions on the instance that holds their prefix; check the low-hit
    instances' cache size and eviction (a smaller KV pool or a restart empties the cache).
    """

    code = "PD502"
    name = "low-prefix-hit-routing"
    cause = "routing-skew"
    component = "router"
    inputs = Inputs(
        needs=(
        "per-instance prefix-cache hit rate (vllm:prefix_cache_hits/queries, "
        "sglang:cache_hit_rate, log stats lines, or cached_tokens with instance columns)",
        ),
        evidence=("instances.hit_ratio", "instances.traffic_share", "bins.g_hit_gauge", "bins.req_hit",
                  "cluster.prefill_queue", "cluster.queue_s_p50", "slo"),
        live=(Live("prefix-cache hits", (S.PREFIX_HITS_TOTAL, S.PREFIX_HIT_RATIO)),),
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        f = ctx.evidence
        judged = False
        low_all: list[str] = []
        evidence: list[Evidence] = []
        lines = []
        persistent_any = False
        for role in ("decode", "prefill"):
            rows = f.role(role)
            hit = column(rows, "hit_ratio")
            if hit.notna().sum() < 2:
                continue
            judged = True
            peers = peer_median(hit.to_numpy())
            share = column(rows, "traffic_share")
            fair = 1.0 / len(rows)
            for pos, inst in enumerate(rows.index.astype(str)):
                h, pm = float(hit.iloc[pos]), float(peers[pos])
                if not (np.isfinite(h) and np.isfinite(pm)):
                    continue
                if not (pm >= MIN_PEER_HIT and h <= LOW_HIT_FACTOR * pm and pm - h >= MIN_HIT_GAP):
                    continue
                s = float(share.iloc[pos])
                if np.isfinite(s) and s < MIN_TRAFFIC_FRACTION_OF_FAIR * fair:
                    continue  # it hardly gets traffic: its cold cache costs little
                persistent = self._persistent(f, inst, list(rows.index.astype(str)))
                if persistent is False:
                    continue
                persistent_any = persistent_any or bool(persistent)
                low_all.append(inst)
                lines.append((inst, h, pm, role))
                evidence.append(ev(f"prefix-cache hit rate on {inst}", 100 * h, "%",
                                   instances=[inst], window=whole(f), baseline=100 * pm,
                                   source=f"{rows.loc[inst, 'hit_ratio_source']} "
                                          "(baseline: peer median)"))
                if np.isfinite(s):
                    evidence.append(ev(f"share of {role} traffic to {inst}", 100 * s, "%",
                                       instances=[inst], window=whole(f), baseline=100 * fair))
        if not judged:
            return [self.inconclusive()]
        if not low_all:
            return []
        tq, what = prefill_backlog(f)
        queue_up = tq is not None
        ttft_miss = slo_missed(f.slo.ttft_attainment)
        if tq is not None:
            evidence.append(ev(what, tq.hinge_end_level, "", instances=list(f.names("prefill")),
                               window=(tq.onset_ts, tq.end_ts), baseline=tq.onset_level,
                               source="trend since the onset (hinge fit)"))
        impact = queue_up or ttft_miss
        severity = Severity.WARNING if impact else Severity.INFO
        confidence = evidence_confidence(1 + int(impact) + int(persistent_any), 3)
        if not impact:
            confidence = min(confidence, 0.45)
        inst, h, pm, role = lines[0]
        who = names(low_all) if len(low_all) > 1 else inst
        summary = (f"{who} {'have' if len(low_all) > 1 else 'has'} a {pct(h)} prefix-hit rate "
                   f"against {pct(pm)} on {'their' if len(low_all) > 1 else 'its'} "
                   f"{role} peers")
        if queue_up:
            summary += " while the prefill queues back up: the router sends requests where " \
                       "their prefix is not cached"
        elif ttft_miss:
            summary += " and TTFT misses its SLO: the router sends requests where their " \
                       "prefix is not cached"
        return [self.finding(severity, confidence, summary, instances=low_all,
                             evidence=evidence, next_steps=(
            "Enable or fix prefix-/KV-aware routing so requests reach the instance that "
            "holds their prefix (the router needs each instance's cached blocks).",
            "Keep sessions sticky to the instance that holds their prefix.",
            "Check the low-hit instances' KV pool size and eviction; a restart or a smaller "
            "pool empties the cache.",
        ))]

    @staticmethod
    def _persistent(f: ClusterEvidence, inst: str, peers: list[str]) -> bool | None:
        for name in ("g_hit_gauge", "req_hit"):
            frame = f.bin_frame(name, peers)
            if frame is None or inst not in frame.columns or frame.shape[1] < 2:
                continue
            mine = frame[inst]
            others = frame.drop(columns=[inst]).median(axis=1)
            ok = mine.notna() & others.notna() & (others > 0)
            if ok.sum() < 3:
                continue
            low = (mine[ok] <= LOW_HIT_FACTOR * others[ok]).mean()
            return bool(low >= PERSISTENT_BIN_SHARE)
        return None
