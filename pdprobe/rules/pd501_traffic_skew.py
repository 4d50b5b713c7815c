"""PD501: the router spreads load unevenly over instances of a role (routing-skew)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.analysis.evidence.registry import KV_NEAR_FULL, ROLE_COUNT_BINS
from pdprobe.analysis.evidence.stats import peer_median
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    column,
    ev,
    evidence_confidence,
    median,
    names,
    pct,
    role_names,
    role_rows,
    slo_missed,
    whole,
)
from pdprobe.rules.thresholds import (
    CONFIDENCE_NO_IMPACT,
    KV_FULL_TIME_SHARE,
    PERSISTENT_BIN_SHARE,
    STRAGGLER_RATIO,
)

if TYPE_CHECKING:
    import pandas as pd

# An instance taking at least 1.5x its fair share (1/n of the role's traffic, weighted by the
# time each instance served when instances come and go) is overloaded by the router: 41 % of four decodes is 1.64x; 1.5x on two instances is a 75/25 split.
OVER_SHARE_RATIO: Final = 1.5
# At twice its fair share the instance runs with half the headroom of its peers: a warning
# even before latencies show it.
WARN_SHARE_RATIO: Final = 2.0
# At most half its fair share: capacity the router leaves idle.
UNDER_SHARE_RATIO: Final = 0.5
# Count-based shares must also be statistically uneven (chi-square against equal shares).
SKEW_P: Final = 1e-3
# Within a bin, "still skewed" means at least this multiple of the fair share.
BIN_OVER_RATIO: Final = 1.25
# The overloaded instance "suffers" when its latency is this much above its peers' median.
IMPACT_LATENCY_RATIO: Final = 1.3
# The overloaded instance's prefix-hit rate is worth mentioning below this share of its peers'.
HIT_NOTABLY_LOWER: Final = 0.7
MIN_PEER_HIT: Final = 0.1
# Instances must average this many requests before count-based shares mean anything.
MIN_REQUESTS_PER_INSTANCE: Final = 30


class TrafficSkew(BaseRule):
    """The router spreads load unevenly: one instance gets far more (or less) than its share

    What it means: among the instances of one role, one (or a few) receives a markedly larger
    share of the requests than its peers, or one is left nearly idle, persistently and beyond
    what chance explains.

    Why it matters in a disaggregated deployment: P/D ratios assume the router balances each
    pool. An overloaded decode instance fills its KV cache, preempts and slows its tokens
    while its peers have room, so the pool looks short of capacity although it is not: the
    router, not the ratio, needs fixing. Prefix- or KV-aware routers skew on purpose; the
    skew is a problem when the favoured instance pays for it.

    Evidence it uses: per-instance traffic share within its role from request records, else
    finished-request counters, else token counters, else the throughput printed in engine
    logs; the fair share is 1/n weighted by the time each instance served (instances that
    join or leave mid-window are not skew); over-share >= OVER_SHARE_RATIO = 1.5x the fair
    share, or under-share <= 0.5x (and
    the instance not slower than its peers, which would make it a straggler the router rightly
    avoids); count-based shares tested with chi-square (p < 0.001, at least 30 requests per
    instance), other shares required to hold in >= 60 % of the time bins. Impact on the
    overloaded instance (latency >= 1.3x its peers, KV near full while peers are not) makes it
    a warning; so does an over-share of 2x the fair share or more (half the headroom of its
    peers) or one whose impact cannot be measured; an over-share under 2x with measured
    latencies showing no impact is info; an under-share is info unless the rest of the pool
    is under pressure.
    The overloaded instance's prefix-hit rate is compared with its peers'.

    What to do: check the router policy and its inputs (round-robin weights, least-loaded
    metric freshness, KV-/prefix-aware scoring that ignores load); check for sticky sessions
    or a client pinning one endpoint; cap per-instance load in the router; for prefix-aware
    routing, balance cache affinity against load.
    """

    code = "PD501"
    name = "traffic-skew"
    cause = "routing-skew"
    component = "router"
    inputs = Inputs(
        needs=(
        "per-request prefill_instance / decode_instance columns",
        "per-instance finished-request or token counters",
        "engine log throughput per instance",
        ),
        evidence=("instances.traffic_share", "instances.traffic_count", "instances.tpot_p90",
                  "instances.ttft_p90", "instances.g_kv_usage_full_frac", "instances.hit_ratio",
                  "bins.alive", "bins.req_count_prefill", "bins.req_count_decode",
                  "bins.g_prompt_tps", "bins.g_gen_tps", "slo"),
        live=(Live("per-instance request or token counters", (S.REQUESTS_FINISHED_TOTAL,
                                                                 S.PROMPT_TOKENS_TOTAL,
                                                                 S.GENERATION_TOKENS_TOTAL)),),
        peers=True,
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Measure each role's traffic shares against fair shares; decide skew; explain it."""
        f = ctx.evidence
        judged = False
        skews: list[_RoleSkew] = []
        for role in ("decode", "prefill"):
            rows = role_rows(f, role)
            rows = rows[column(rows, "traffic_share").notna()]
            if len(rows) < 2:
                continue
            judged = True
            found = self._judge_role(f, role, rows)
            if found is not None:
                skews.append(found)
        if not judged:
            return [self.inconclusive()]
        return [self._explain(f, skews)] if skews else []

    def _explain(self, f: ClusterEvidence, skews: list[_RoleSkew]) -> Finding:
        """The finding over the skewed roles: severity from impact and size, the wording."""
        over = [i for s in skews for i in s.over]
        impact = any(s.impact for s in skews)
        if over:
            impact_known = any(s.impact_known for s in skews)
            largest = max(s.over_ratio for s in skews)
            severity = Severity.WARNING if (impact or not impact_known
                                            or largest >= WARN_SHARE_RATIO) else Severity.INFO
        else:
            severity = Severity.WARNING if impact else Severity.INFO
        agree = sum(1 + int(s.impact) + int(s.persistent) for s in skews)
        confidence = evidence_confidence(agree, 3 * len(skews))
        if severity is Severity.INFO:
            confidence = min(confidence, CONFIDENCE_NO_IMPACT)
        summary = "; ".join(s.summary for s in skews) + (
            ": the router, not the P/D ratio" if impact else "")
        return self.finding(severity, confidence, summary,
                            instances=over + [i for s in skews for i in s.under],
                            evidence=[e for s in skews for e in s.evidence], next_steps=(
            "Check the router policy and its inputs: weights, freshness of the load metric it "
            "balances on, KV-/prefix-aware scoring that ignores load.",
            "Look for sticky sessions or clients pinned to one endpoint.",
            "Cap per-instance load in the router before resizing the pool: the pool may be "
            "big enough once balanced.",
        ))

    def _judge_role(self, f: ClusterEvidence, role: str, rows: pd.DataFrame) -> _RoleSkew | None:
        """Over- and under-served instances of one role, when beyond chance and persistent."""
        share = column(rows, "traffic_share")
        fair_s = self._fair_shares(f, role, rows)
        source = str(rows["traffic_share_source"].iloc[0])
        counts = column(rows, "traffic_count")
        p_value = _chi_square_p(source, counts, fair_s)
        if p_value is not None and p_value >= SKEW_P:
            return None
        if p_value is None and source in COUNT_SOURCES:
            return None  # too few requests to tell skew from chance
        latency = column(rows, "tpot_p90" if role == "decode" else "ttft_p90")
        peer_lat = pd_series(peer_median(latency.to_numpy()), rows.index)
        over = [str(i) for i in share.index[(share >= OVER_SHARE_RATIO * fair_s).to_numpy()]]
        # An under-used instance much slower than its peers is a straggler the router avoids.
        slow = np.isfinite(latency) & np.isfinite(peer_lat) & (latency >= STRAGGLER_RATIO * peer_lat)
        under = [str(i) for i in share.index[((share <= UNDER_SHARE_RATIO * fair_s)
                                              & ~slow).to_numpy()]]
        if not over and not under:
            return None
        persistent = self._persistent(f, role, over)
        if p_value is None and persistent is False:
            return None
        evidence = [ev(f"share of {role} traffic to {inst}", 100 * float(share[inst]), "%",
                       instances=[inst], window=whole(f), baseline=100 * float(fair_s[inst]),
                       source=f"{source} (baseline: fair share for the time it served)")
                    for inst in over + under]
        if p_value is not None:
            evidence.append(ev(f"chi-square test of equal {role} shares", p_value, "p-value",
                               window=whole(f), source=f"{int(counts.sum())} requests"))
        impact, impact_known = _impact(f, role, rows, over, under, latency, peer_lat, evidence)
        hit_txt = _hit_note(f, rows, over, evidence)
        ratios = [float(share[i]) / float(fair_s[i]) for i in over
                  if np.isfinite(float(share[i])) and float(fair_s[i]) > 0]
        return _RoleSkew(over=over, under=under, evidence=evidence, impact=impact,
                         impact_known=impact_known, persistent=bool(persistent),
                         over_ratio=max(ratios, default=0.0),
                         summary=_role_summary(role, over, under, share, fair_s, hit_txt))

    @staticmethod
    def _fair_shares(f: ClusterEvidence, role: str, rows: pd.DataFrame) -> pd.Series:
        """Each instance's fair share: what an even router would have given it.

        With instances joining or leaving in the window, 1/n would call a newcomer
        under-used. Per time bin, the role's traffic is split evenly among the instances
        serving then; an instance's fair share is its part of those splits over the window.
        """
        import pandas as pd

        names_ = [str(i) for i in rows.index]
        alive = f.bin("alive")
        traffic = f.bin(ROLE_COUNT_BINS[role])
        if traffic is None:
            traffic = f.bin("g_gen_tps" if role == "decode" else "g_prompt_tps")
        if alive is not None:
            # (numpy on instances x bins, as the frames hold them: the per-bin frames' reindex,
            # fillna, div and mul were most of the rule's time at 160 instances x 91 bins)
            live = instance_rows(alive, names_) > 0  # (NaN: not serving)
            serving = live.sum(axis=0)
            # Weight the bins by the role's traffic in them when known (a bin in which the
            # instance served but nothing arrived is no evidence), else evenly.
            if traffic is not None:
                counts = instance_rows(traffic, names_)
                per_bin = np.where(np.isnan(counts), 0.0, counts).sum(axis=0)
                weight = pd.Series(per_bin, index=traffic.index).reindex(
                    alive.index).fillna(0.0).to_numpy()
            else:
                weight = np.ones(len(alive.index))
            weight = np.where(serving > 0, weight, 0.0)
            if float(weight.sum()) > 0 and bool(live.any(axis=1).all()):
                with np.errstate(divide="ignore", invalid="ignore"):
                    split = np.where(serving > 0, live / serving, 0.0)
                expected = (split * weight).sum(axis=1) / float(weight.sum())
                return pd_series(expected, rows.index)
        return pd.Series(1.0 / len(rows), index=rows.index)

    @staticmethod
    def _persistent(f: ClusterEvidence, role: str, over: list[str]) -> bool | None:
        """Whether the over-share holds in most bins (None when there are no per-bin counts)."""
        frame = f.bin(ROLE_COUNT_BINS[role])
        if frame is None:
            frame = f.bin("g_gen_tps" if role == "decode" else "g_prompt_tps")
        alive = f.bin("alive")
        if frame is None or alive is None or not over:
            return None
        names_ = [c for c in role_names(f, role) if c in frame.columns and c in alive.columns]
        if len(names_) < 2:
            return None
        sub = frame[names_].fillna(0.0)
        live = alive[names_].reindex(sub.index).fillna(0.0) > 0
        totals = sub.sum(axis=1)
        keep = (totals > 0) & (live.sum(axis=1) > 0)
        if not keep.any():
            return None
        shares = sub[keep].div(totals[keep], axis=0)
        fair = 1.0 / live[keep].sum(axis=1)  # per bin, among the instances serving then
        cols_over = [c for c in over if c in shares.columns]
        ok = live[keep][cols_over]
        held = ((shares[cols_over].ge(BIN_OVER_RATIO * fair, axis=0)) & ok).sum() / \
            ok.sum().clip(lower=1)
        return bool((held >= PERSISTENT_BIN_SHARE).all())


# Traffic-share sources that count requests (a chi-square test applies to them).
COUNT_SOURCES: Final = ("request records", "finished-request counters")


@dataclass(frozen=True)
class _RoleSkew:
    """One role's skew: who gets too much or too little, its evidence, impact, wording."""

    over: list[str]
    under: list[str]
    evidence: list[Evidence]
    impact: bool  # the overloaded instance pays (latency, KV), or the rest of the pool does
    impact_known: bool  # latency or KV usage of an overloaded instance was measured
    persistent: bool  # the over-share holds in most bins
    over_ratio: float  # the largest share / fair-share ratio of an over-served instance
    summary: str


def instance_rows(frame: pd.DataFrame, names_: list[str]) -> np.ndarray:
    """A per-bin frame's columns ``names_`` as rows (instances x bins, C order: each
    instance's bins contiguous, as the frame's block holds them), NaN for a name it lacks."""
    import pandas as pd

    pos = frame.columns.get_indexer(pd.Index(names_))
    if not frame.shape[1]:  # no instance column at all: every name lacks one
        return np.full((len(names_), len(frame)), np.nan)
    out = np.ascontiguousarray(frame.to_numpy(dtype=np.float64).T[pos])
    out[pos < 0] = np.nan
    return out


def pd_series(values: np.ndarray, index: pd.Index) -> pd.Series:
    import pandas as pd

    return pd.Series(values, index=index, dtype="float64")


def _chi_square_p(source: str, counts: pd.Series, fair_s: pd.Series) -> float | None:
    """Chi-square p-value of the counts against the fair shares, None when the shares are not
    counts or too few (under MIN_REQUESTS_PER_INSTANCE per instance)."""
    # scipy.special, not scipy.stats: the same survival function (stats.chisquare's p-value
    # is chdtrc(k - 1, statistic)) without importing scipy.stats (~0.9 s) on every diagnosis.
    from scipy.special import chdtrc

    if not (source in COUNT_SOURCES and counts.notna().all()
            and float(counts.sum()) >= MIN_REQUESTS_PER_INSTANCE * len(counts)):
        return None
    observed = counts.to_numpy(dtype="float64")
    expected = float(counts.sum()) * fair_s.to_numpy()
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return float(chdtrc(len(observed) - 1, statistic))


def _impact(f: ClusterEvidence, role: str, rows: pd.DataFrame, over: list[str],
            under: list[str], latency: pd.Series, peer_lat: pd.Series,
            evidence: list[Evidence]) -> tuple[bool, bool]:
    """(impact, impact known): the overloaded instances slower or fuller than their peers;
    with under-use only, the rest of the pool under pressure (SLO missed or KV full)."""
    impact = impact_known = False
    kv = column(rows, "g_kv_usage_full_frac")
    for inst in over:
        lat, peer = float(latency[inst]), float(peer_lat[inst])
        if np.isfinite(lat) and np.isfinite(peer):
            impact_known = True
            if peer > 0 and lat / peer >= IMPACT_LATENCY_RATIO:
                impact = True
                evidence.append(ev(f"{'TPOT' if role == 'decode' else 'TTFT'} p90 on {inst}",
                                   lat, "s", instances=[inst], window=whole(f), baseline=peer,
                                   source="peer median as baseline"))
        if kv.notna().any() and np.isfinite(kv.get(inst, np.nan)):
            impact_known = True
            peers = kv.drop(index=inst).dropna()
            if kv[inst] >= KV_FULL_TIME_SHARE and (not len(peers)
                                               or median(peers) < KV_FULL_TIME_SHARE):
                impact = True
                evidence.append(ev(f"time with KV usage >= {pct(KV_NEAR_FULL)} on {inst}",
                                   100 * float(kv[inst]), "%", instances=[inst], window=whole(f),
                                   baseline=100 * median(peers) if len(peers) else None,
                                   source="peer median as baseline"))
    if under and not over:
        impact = slo_missed(f.slo.tpot_attainment if role == "decode"
                            else f.slo.ttft_attainment)
        if kv.notna().any():
            others = kv.drop(index=[u for u in under if u in kv.index]).dropna()
            impact = impact or (len(others) > 0 and median(others) >= KV_FULL_TIME_SHARE)
    return impact, impact_known


def _hit_note(f: ClusterEvidence, rows: pd.DataFrame, over: list[str],
              evidence: list[Evidence]) -> str:
    """" and has a 5 % prefix-hit rate against 60 % on its peers" for the first overloaded
    instance when its hit rate is notably lower (a prefix-aware router paying for affinity)."""
    if not over:
        return ""
    inst = over[0]
    hit = column(rows, "hit_ratio")
    peers_hit = float(pd_series(peer_median(hit.to_numpy()), rows.index)[inst])
    mine = float(hit.get(inst, np.nan))
    if not (np.isfinite(mine) and np.isfinite(peers_hit) and peers_hit >= MIN_PEER_HIT
            and mine <= HIT_NOTABLY_LOWER * peers_hit):
        return ""
    evidence.append(ev(f"prefix-cache hit rate on {inst}", 100 * mine, "%", instances=[inst],
                       window=whole(f), baseline=100 * peers_hit,
                       source=str(rows.loc[inst, "hit_ratio_source"])))
    return f" and has a {pct(mine)} prefix-hit rate against {pct(peers_hit)} on its peers"


def _role_summary(role: str, over: list[str], under: list[str], share: pd.Series,
                  fair_s: pd.Series, hit_txt: str) -> str:
    if len(over) > 1:
        return f"{names(over)} get more than {OVER_SHARE_RATIO:g}x their fair share of the " \
               f"{role} traffic"
    if over:
        top = over[0]
        return (f"{top} gets {pct(float(share[top]))} of the {role} traffic "
                f"(fair share {pct(float(fair_s[top]))}){hit_txt}")
    return (f"{names(under)} get{'s' if len(under) == 1 else ''} at most "
            f"{pct(float(share[under].max()))} of the {role} traffic "
            f"(fair share {pct(float(fair_s[under].max()))})")
