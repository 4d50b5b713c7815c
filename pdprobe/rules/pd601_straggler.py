"""PD601: one instance markedly slower than its peers of the same role (straggler)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.model import ClusterEvidence
from pdprobe.analysis.evidence.registry import source_column
from pdprobe.analysis.evidence.stats import OUTLIER_Z, leave_one_out_z, peer_median
from pdprobe.rules.base import Evidence, Finding, Inputs, Live, RuleContext, RuleResult, Severity
from pdprobe.rules.common import (
    BaseRule,
    against_peers,
    column,
    ev,
    evidence_confidence,
    median,
    names,
    role_rows,
    secs,
    whole,
)
from pdprobe.rules.thresholds import PERSISTENT_BIN_SHARE, STRAGGLER_RATIO

if TYPE_CHECKING:
    import pandas as pd

# Slower than the peers' median by STRAGGLER_RATIO (thresholds) AND a modified z >= 3.5
# against the peers' median/MAD: z guards against noisy peers. Critical from 3x.
CRITICAL_RATIO: Final = 3.0
# Critical needs the 3x cleared by this margin: the means severity compares are exact from
# records and histogram sums but estimated from logs (Little's law on gauge averages, a few
# percent off), so a 3.0x instance must not be a page from one source and a ticket from another.
SOURCE_MARGIN: Final = 0.1
# With only two instances there is no robust spread; demand a 2x gap.
PAIR_RATIO: Final = 2.0
# Load explains slowness when the instance takes this multiple of its fair traffic share.
LOAD_EXPLAINS_RATIO: Final = 1.3
# ... or when its KV is full this much more of the time than its peers'.
KV_EXPLAINS_GAP: Final = 0.3
# Persistence over time: slower than 1.3x the peers in at least 60 % of bins with data.
BIN_SLOW_RATIO: Final = 1.3

# Per role, the speed measures compared, best first: (column, its p90 column when an SLO
# applies to it, label, per-bin frame, the column severity compares). A median from histogram
# buckets is an estimate whose error changes the ratio (a 3x straggler read 45 vs 15 ms from
# records but 38 vs 18 ms from vLLM's 25-50 ms and 10-25 ms TPOT buckets): the severity
# compares means, exact in every source (records, histogram sum/count, Little's law).
MEASURES: Final = {
    "decode": (("tpot_p50", "tpot_p90", "median TPOT", "req_tpot", "tpot_mean"),),
    "prefill": (("prefill_per_token_p50", None, "prefill time per uncached token",
                 "req_prefill_per_token", None),),
}
# Sources whose quantiles are interpolated within histogram buckets (said so in the report).
BUCKET_SOURCES: Final = ("TPOT histogram", "inter-token latency histogram")
# Each compared instance must have served this many requests: a median over a handful of
# heavy-tailed prompts says more about the prompts than about the instance.
MIN_SAMPLES: Final = 30


class Straggler(BaseRule):
    """One instance is markedly slower than its peers of the same role

    What it means: an instance does the same work as the others of its role, yet its time per
    output token (decode) or its prefill time per token (prefill) is far above theirs,
    persistently over the window, and neither more traffic nor a fuller KV cache explains it.

    Why it matters in a disaggregated deployment: P/D sizing assumes interchangeable
    instances. A straggler (thermal throttling, a degraded GPU or NVLink, a noisy neighbour,
    a wrong engine flag or version, a bad NIC) drags the pool's tail latency and, behind a
    least-loaded router, silently shrinks the pool. Scaling the pool hides it at a cost;
    replacing or fixing the instance removes it.

    Evidence it uses: decode: median TPOT per instance (request records, TPOT/ITL
    histograms, last-ITL gauges, running / generation throughput from logs); prefill: median
    prefill time per uncached prompt token from request records, else the prefill-time
    histogram's sum over the tokens computed. Instances with fewer than MIN_SAMPLES = 30
    requests are not judged. An instance is a straggler at >=
    STRAGGLER_RATIO = 1.5x its peers' median and a modified z >= 3.5 against the peers'
    median/MAD (two instances: a 2x gap), slower than 1.3x its peers in >= 60 % of the bins
    when per-bin data exist, and not explained by load (traffic share >= 1.3x fair, or KV
    full 30 points more of the time than its peers). Critical at 3x plus a 10 % margin
    (3.3x), or when it alone misses the SLO its peers meet. For decode the severity ratio
    compares mean TPOT (exact from request records and a histogram's sum/count, estimated by
    Little's law from logs), not a median interpolated in histogram buckets, so records and
    histograms of the same instance give the same severity; the report says when a median
    is a bucket estimate.

    What to do: check the instance's GPU clocks, temperature and ECC/XID errors (nvidia-smi,
    DCGM), its NVLink/PCIe link state, its engine version and flags against its peers, and
    other processes on its node; drain and replace it if it stays slow.
    """

    code = "PD601"
    name = "straggler"
    cause = "straggler"
    component = "resource-monitor"
    inputs = Inputs(
        needs=(
        "per-instance latency: request records with prefill_instance / decode_instance and "
        "tpot_s / prefill_s, or per-instance TPOT/ITL/prefill-time histograms, or engine log "
        "throughput",
        ),
        evidence=("instances.tpot_p50", "instances.tpot_p90", "instances.tpot_mean",
                  "instances.prefill_per_token_p50",
                  "instances.samples", "instances.traffic_share", "instances.g_kv_usage_full_frac",
                  "bins.req_tpot", "bins.req_prefill_per_token", "slo"),
        live=(Live("per-instance latency histograms", (S.TPOT_S, S.ITL_S, S.PREFILL_S, S.TTFT_S)),),
        peers=True,
    )

    def evaluate(self, ctx: RuleContext) -> RuleResult:
        """Measure each role's speed against its peers with the best measure available;
        decide stragglers not explained by load; explain them."""
        f = ctx.evidence
        judged = False
        found: list[_RoleSlow] = []
        for role, measures in MEASURES.items():
            rows = role_rows(f, role)
            if len(rows) < 2:
                continue
            for measure in measures:
                values = column(rows, measure[0])
                if values.notna().sum() < 2:
                    continue
                judged = True
                slow = self._judge(f, role, rows, values, measure)
                if slow is not None:
                    found.append(slow)
                break  # the best available measure decides for this role
        if not judged:
            return [self.inconclusive()]
        return [self._explain(f, found)] if found else []

    def _explain(self, f: ClusterEvidence, found: list[_RoleSlow]) -> Finding:
        """The finding: per role the slowest instance against its peers; severity from the
        exact means (or an SLO only the straggler misses)."""
        evidence: list[Evidence] = []
        parts: list[str] = []
        worst_ratio = 0.0
        for r in found:
            evidence.extend(r.evidence)
            sev = self._severity_ratios(f, r.rows, r.slow, r.ratios, r.measure[4], r.role,
                                        evidence)
            worst_ratio = max(worst_ratio, max(x for x, _ in sev))
            parts.append(self._part(r, sev))
        alone_misses = any(self._alone_misses(f, r) for r in found)
        critical = worst_ratio >= CRITICAL_RATIO * (1.0 + SOURCE_MARGIN)
        severity = Severity.CRITICAL if (critical or alone_misses) else Severity.WARNING
        confidence = evidence_confidence(
            1 + int(any(r.persistent for r in found)) + int(alone_misses), 3)
        slow_all = [i for r in found for i in r.slow]
        return self.finding(severity, confidence, "; ".join(parts), instances=slow_all,
                            evidence=evidence, next_steps=(
            f"Check {names(slow_all)}: GPU clocks, temperature and ECC/XID errors "
            "(nvidia-smi, DCGM), NVLink/PCIe link state, engine version and flags against its "
            "peers, other processes on the node.",
            "Drain and replace the instance if it stays slow; scaling the pool only hides it.",
        ))

    def _part(self, r: _RoleSlow, sev: list[tuple[float, str | None]]) -> str:
        """"decode-1 has a median TPOT of 45 ms against 15 ms on its decode peers (3.0x)"."""
        pos = int(np.argmax(r.ratios))
        top = r.slow[pos]
        how = f"{max(r.ratios):.1f}x"
        if self._source(r.rows, r.values, top) in BUCKET_SOURCES:
            how += " from histogram bucket estimates"
            if sev[pos][1] is not None:
                how += f"; the exact means are {sev[pos][1]}"
        return (f"{top} has a {r.measure[2]} of {secs(float(r.values[top]))} against "
                f"{secs(r.peers[top])} on its {r.role} peers ({how})")

    @staticmethod
    def _alone_misses(f: ClusterEvidence, r: _RoleSlow) -> bool:
        """Whether a straggler misses the role's SLO (p90) while its peers' median meets it."""
        slo = f.slo.tpot_slo_s if r.role == "decode" else f.slo.ttft_slo_s
        p90_col = r.measure[1]
        if slo is None or p90_col is None:
            return False
        p90 = column(r.rows, p90_col)
        mine = p90.reindex(r.slow).dropna()
        others = p90.drop(index=r.slow).dropna()
        return bool(len(mine) and len(others) and float(mine.max()) > slo >= float(
            median(others)))

    def _judge(self, f: ClusterEvidence, role: str, rows: pd.DataFrame, values: pd.Series,
               measure: Measure) -> _RoleSlow | None:
        """The instances of one role slower than their peers, persistently, and not because
        they take more traffic or hold fuller KV caches; None when there are none."""
        v = values.to_numpy(dtype="float64")
        peers = peer_median(v)
        with np.errstate(all="ignore"):
            ratio = v / peers
        z = leave_one_out_z(v)
        share = column(rows, "traffic_share").to_numpy(dtype="float64")
        fair = 1.0 / len(rows)
        out = _RoleSlow(role, rows, values, measure)
        members = list(rows.index.astype(str))
        for pos in np.flatnonzero(_candidates(rows, v, ratio, z, share, fair)).tolist():
            inst = members[pos]
            if _kv_explains(column(rows, "g_kv_usage_full_frac"), pos, inst):
                continue
            persistent = self._persistent(f, measure[3], inst, members)
            if persistent is False:
                continue
            out.persistent = out.persistent or bool(persistent)
            out.slow.append(inst)
            out.ratios.append(float(ratio[pos]))
            out.peers[inst] = float(peers[pos])
            out.evidence += self._evidence(f, out, inst, float(v[pos]), float(peers[pos]),
                                           float(z[pos]), float(share[pos]), fair)
        return out if out.slow else None

    def _evidence(self, f: ClusterEvidence, r: _RoleSlow, inst: str, value: float, peer: float,
                  z: float, share: float, fair: float) -> list[Evidence]:
        out = [ev(f"{r.measure[2]} on {inst}", value, "s", instances=[inst], window=whole(f),
                  baseline=peer,
                  source=f"{self._source(r.rows, r.values, inst)} (baseline: peer median)")]
        if np.isfinite(z):
            out.append(ev(f"modified z-score of {inst} against its {r.role} peers", z, "",
                          instances=[inst], window=whole(f), baseline=OUTLIER_Z,
                          source="median/MAD of the peers"))
        if np.isfinite(share):
            out.append(ev(f"share of {r.role} traffic to {inst}", 100 * share, "%",
                          instances=[inst], window=whole(f), baseline=100 * fair))
        return out

    @staticmethod
    def _severity_ratios(f: ClusterEvidence, rows: pd.DataFrame, slow: list[str],
                         ratios: list[float], sev_col: str | None, role: str,
                         evidence: list[Evidence]) -> list[tuple[float, str | None]]:
        """Per slow instance, the ratio severity compares (its mean over its peers' median
        mean where the exact means exist, else the ratio the straggler was found with) and
        the means in words ("46 ms vs 15 ms") when they were used."""
        if sev_col is None:
            return [(r, None) for r in ratios]
        means = column(rows, sev_col)
        out: list[tuple[float, str | None]] = []
        for inst, ratio in zip(slow, ratios, strict=True):
            mine = float(means.get(inst, np.nan))
            peers = means.drop(index=inst).dropna()
            if not (np.isfinite(mine) and len(peers) and median(peers) > 0):
                out.append((ratio, None))
                continue
            base = median(peers)
            out.append((mine / base, f"{secs(mine)} vs {secs(base)}, {mine / base:.1f}x"))
            src_col = f"{sev_col}_source"
            label = str(rows.loc[inst, src_col]) if src_col in rows.columns else sev_col
            evidence.append(ev(f"mean TPOT on {inst} (decides the severity)", mine, "s",
                               instances=[inst], window=whole(f), baseline=base,
                               source=f"{label}, exact in every source (baseline: median of "
                                      f"its {role} peers' means)"))
        return out

    @staticmethod
    def _source(rows: pd.DataFrame, values: pd.Series, inst: str) -> str:
        col = source_column(str(values.name))
        if col is not None and col in rows.columns:
            return str(rows.loc[inst, col])
        return str(values.name)

    @staticmethod
    def _persistent(f: ClusterEvidence, bins_name: str | None, inst: str,
                    members: list[str]) -> bool | None:
        if bins_name is None:
            return None
        found = against_peers(f, bins_name, inst, members)
        if found is None:
            return None
        mine, others = found
        return bool((mine >= BIN_SLOW_RATIO * others).mean() >= PERSISTENT_BIN_SHARE)


# (speed column, its p90 column when an SLO applies, label, per-bin frame, severity column)
Measure = tuple[str, str | None, str, str | None, str | None]


@dataclass
class _RoleSlow:
    """The stragglers of one role under one measure, with what makes them stand out."""

    role: str
    rows: pd.DataFrame
    values: pd.Series  # the measure per instance of the role
    measure: Measure
    slow: list[str] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)  # over the peers' median, per slow one
    peers: dict[str, float] = field(default_factory=dict)  # the peers' median, per slow one
    persistent: bool = False  # slow in most bins (per-bin data exist)
    evidence: list[Evidence] = field(default_factory=list)


def _candidates(rows: pd.DataFrame, v: np.ndarray, ratio: np.ndarray, z: np.ndarray,
                share: np.ndarray, fair: float) -> np.ndarray:
    """Instances far enough above their peers (ratio and z, or a 2x gap between two), with
    enough requests, and not taking LOAD_EXPLAINS_RATIO x their fair share (PD501)."""
    samples = column(rows, "samples").to_numpy(dtype="float64")
    with np.errstate(invalid="ignore"):
        if int(np.isfinite(v).sum()) >= 3:
            hit = (ratio >= STRAGGLER_RATIO) & (z >= OUTLIER_Z)
        else:
            hit = ratio >= PAIR_RATIO
        few = np.isfinite(samples) & (samples < MIN_SAMPLES)
        loaded = np.isfinite(share) & (share >= LOAD_EXPLAINS_RATIO * fair)
    return np.isfinite(ratio) & hit & ~few & ~loaded


def _kv_explains(kv: pd.Series, pos: int, inst: str) -> bool:
    """Whether the instance's KV is full KV_EXPLAINS_GAP more of the time than its peers'."""
    if not (kv.notna().any() and np.isfinite(kv.iloc[pos])):
        return False
    others = kv.drop(index=inst).dropna()
    return bool(len(others) and kv.iloc[pos] - median(others) >= KV_EXPLAINS_GAP)
