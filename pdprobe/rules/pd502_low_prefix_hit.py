"""PD502: requests routed to instances with a persistently low prefix-cache hit rate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.analysis.evidence.stats import peer_median
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    against_peers,
    column,
    ev,
    evidence_confidence,
    names,
    pct,
    prefill_backlog,
    role_names,
    role_rows,
    slo_missed,
    whole,
)
from pdprobe.rules.thresholds import CONFIDENCE_NO_IMPACT, PERSISTENT_BIN_SHARE

if TYPE_CHECKING:
    import pandas as pd

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
        """Measure each instance's hit rate against its peers'; decide low-hit routing by the
        prefill work it adds; explain it."""
        f = ctx.evidence
        judged = False
        lows: list[_Low] = []
        for role in ("decode", "prefill"):
            rows = role_rows(f, role)
            if column(rows, "hit_ratio").notna().sum() < 2:
                continue
            judged = True
            lows += self._low_hit(f, role, rows)
        if not judged:
            return [self.inconclusive()]
        return [self._explain(f, lows)] if lows else []

    def _low_hit(self, f: ClusterEvidence, role: str, rows: pd.DataFrame) -> list[_Low]:
        """Instances of one role whose hit rate is persistently far below their peers' while
        they take at least half their fair share of the traffic."""
        hit = column(rows, "hit_ratio")
        peers = peer_median(hit.to_numpy())
        share = column(rows, "traffic_share")
        fair = 1.0 / len(rows)
        members = list(rows.index.astype(str))
        out = []
        for pos, inst in enumerate(members):
            h, pm, s = float(hit.iloc[pos]), float(peers[pos]), float(share.iloc[pos])
            if not (np.isfinite(h) and np.isfinite(pm) and pm >= MIN_PEER_HIT
                    and h <= LOW_HIT_FACTOR * pm and pm - h >= MIN_HIT_GAP):
                continue
            if np.isfinite(s) and s < MIN_TRAFFIC_FRACTION_OF_FAIR * fair:
                continue  # it hardly gets traffic: its cold cache costs little
            persistent = self._persistent(f, inst, members)
            if persistent is not False:
                out.append(_Low(inst, role, h, pm, s, fair, bool(persistent),
                                str(rows.loc[inst, "hit_ratio_source"])))
        return out

    def _explain(self, f: ClusterEvidence, lows: list[_Low]) -> Finding:
        """The finding: hit rates and shares, the prefill backlog or TTFT miss it causes."""
        evidence = [e for low in lows for e in low.evidence(f)]
        tq, what = prefill_backlog(f)
        if tq is not None:
            evidence.append(ev(what, tq.hinge_end_level, "", instances=list(role_names(f, "prefill")),
                               window=(tq.onset_ts, tq.end_ts), baseline=tq.onset_level,
                               source="trend since the onset (hinge fit)"))
        ttft_miss = slo_missed(f.slo.ttft_attainment)
        impact = tq is not None or ttft_miss
        severity = Severity.WARNING if impact else Severity.INFO
        confidence = evidence_confidence(
            1 + int(impact) + int(any(low.persistent for low in lows)), 3)
        if not impact:
            confidence = min(confidence, CONFIDENCE_NO_IMPACT)
        first, many = lows[0], len(lows) > 1
        who = names([low.inst for low in lows]) if many else first.inst
        summary = (f"{who} {'have' if many else 'has'} a {pct(first.hit)} prefix-hit rate "
                   f"against {pct(first.peers)} on {'their' if many else 'its'} "
                   f"{first.role} peers")
        if tq is not None:
            summary += " while the prefill queues back up: the router sends requests where " \
                       "their prefix is not cached"
        elif ttft_miss:
            summary += " and TTFT misses its SLO: the router sends requests where their " \
                       "prefix is not cached"
        return self.finding(severity, confidence, summary, instances=[low.inst for low in lows],
                            evidence=evidence, next_steps=(
            "Enable or fix prefix-/KV-aware routing so requests reach the instance that "
            "holds their prefix (the router needs each instance's cached blocks).",
            "Keep sessions sticky to the instance that holds their prefix.",
            "Check the low-hit instances' KV pool size and eviction; a restart or a smaller "
            "pool empties the cache.",
        ))

    @staticmethod
    def _persistent(f: ClusterEvidence, inst: str, peers: list[str]) -> bool | None:
        for name in ("g_hit_gauge", "req_hit"):
            found = against_peers(f, name, inst, peers)
            if found is None:
                continue
            mine, others = found
            return bool((mine <= LOW_HIT_FACTOR * others).mean() >= PERSISTENT_BIN_SHARE)
        return None


@dataclass(frozen=True)
class _Low:
    """One instance with a low hit rate: its rate, its peers', its traffic share."""

    inst: str
    role: str
    hit: float
    peers: float  # median hit rate of its peers
    share: float  # its share of the role's traffic (NaN when unknown)
    fair: float  # 1 / instances of the role
    persistent: bool  # low in most bins (False also when no per-bin data exist)
    source: str  # where the hit rate came from

    def evidence(self, f: ClusterEvidence) -> list[Evidence]:
        out = [ev(f"prefix-cache hit rate on {self.inst}", 100 * self.hit, "%",
                  instances=[self.inst], window=whole(f), baseline=100 * self.peers,
                  source=f"{self.source} (baseline: peer median)")]
        if np.isfinite(self.share):
            out.append(ev(f"share of {self.role} traffic to {self.inst}", 100 * self.share, "%",
                          instances=[self.inst], window=whole(f), baseline=100 * self.fair))
        return out
