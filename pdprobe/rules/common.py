"""Helpers every rule shares: building findings and evidence, trends, shared judgements.

Numbers are worded by ``pdprobe.units`` and shared thresholds live in ``rules.thresholds``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from pdprobe.analysis.evidence.model import column
from pdprobe.analysis.evidence.stats import MIN_TREND_POINTS, Trend, significant_figures, trend
from pdprobe.analysis.table_cache import table_cache
from pdprobe.rules.base import Evidence, Finding, Inconclusive, Rule, Severity
from pdprobe.rules.thresholds import (
    CONFIDENCE_MAX,
    CONFIDENCE_MIN,
    DECODE_KV_PRESSURE,
    MIN_RISE_BINS,
    MIN_RISE_SHARE,
    PREFILL_QUEUE_GROWTH,
    PREFILL_WAIT_GROWTH_S,
    REMOTE_DOMINANCE,
    RISE_MIN_SHARE,
    SLO_CRITICAL,
    SLO_GOAL,
    TREND_ALPHA,
    TREND_MIN_TAU,
)
from pdprobe.units import duration, names, pct, rate_bytes, secs

__all__ = ["column", "duration", "names", "pct", "rate_bytes", "secs"]  # re-exported for rules

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.model import ClusterEvidence

class BaseRule(Rule):
    """Shared plumbing: findings and inconclusive results stamped with the rule's identity."""

    def finding(self, severity: Severity, confidence: float, summary: str, *,
                instances: Iterable[str] = (), evidence: Iterable[Evidence] = (),
                next_steps: Iterable[str] = ()) -> Finding:
        """A ``Finding`` of this rule, confidence clamped and rounded, instances sorted and
        deduplicated."""
        return Finding(code=self.code, cause=self.cause, severity=severity,
                       confidence=round(clamp_confidence(confidence), 2), summary=summary,
                       instances=tuple(sorted(set(instances))), evidence=tuple(evidence),
                       next_steps=tuple(next_steps), component=self.component)

    def inconclusive(self, needs: str | None = None) -> Inconclusive:
        """An ``Inconclusive`` of this rule: what it needs (its declared inputs unless told)."""
        return Inconclusive(code=self.code, cause=self.cause,
                            needs=needs or "; or ".join(self.requires))


def role_rows(feats: ClusterEvidence, role: str) -> pd.DataFrame:
    """``feats.role(role)``, taken once per instance table and shared by every rule (and both
    of the service's passes): a take of the ~60-column table (string columns one by one) is
    ~0.6 ms, and the rules asked for one 16 times a pass. Shared, so never modified in place
    (no rule assigns into a frame)."""
    cache = table_cache(feats.instances)
    key = ("role rows", role)
    if key not in cache:
        cache[key] = feats.role(role)
    rows: pd.DataFrame = cache[key]
    return rows


def median(values: pd.Series | np.ndarray) -> float:
    """pandas' median of a few values (NaN skipped; NaN when none): ``np.median`` of the
    others, the same middle value or mean of the two, without the masked-array path
    ``Series.median`` takes below 600 values (~1 ms a call)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if v.size else float("nan")


def row_medians(values: np.ndarray) -> np.ndarray:
    """Each row's median of its non-NaN values (NaN for none), as ``DataFrame.median(axis=1)``
    gives it (the middle value, or the mean of the two), from one sort of the rows."""
    ordered = np.sort(values, axis=1)  # NaN last
    n = (~np.isnan(values)).sum(axis=1)
    rows = np.arange(len(values))
    low = ordered[rows, np.maximum((n - 1) // 2, 0)]
    high = ordered[rows, np.maximum(n // 2, 0)]
    return np.where(n == 0, np.nan, np.where(n % 2 == 1, low, (low + high) / 2))


def against_peers(feats: ClusterEvidence, name: str, inst: str,
                  members: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per bin of the per-bin frame ``name``, ``inst``'s value and the median of the other
    ``members``' (NaN skipped), over the bins where both are known and the peers' is above
    0; None when the frame lacks ``inst`` or any peer, or when fewer than 3 bins remain."""
    frame = feats.bin_frame(name, members)
    if frame is None or inst not in frame.columns or frame.shape[1] < 2:
        return None
    values = frame.to_numpy(dtype=np.float64)
    at = frame.columns.get_loc(inst)
    mine = values[:, at]
    others = row_medians(np.delete(values, at, axis=1))
    with np.errstate(invalid="ignore"):
        ok = ~np.isnan(mine) & ~np.isnan(others) & (others > 0)
    if int(ok.sum()) < 3:
        return None
    return mine[ok], others[ok]


def role_names(feats: ClusterEvidence, role: str) -> tuple[str, ...]:
    """``feats.names(role)`` from the shared ``role_rows``."""
    return tuple(role_rows(feats, role).index.astype(str))


def clamp_confidence(value: float) -> float:
    """A confidence within ``CONFIDENCE_MIN``..``CONFIDENCE_MAX``: no finding is certain or
    worthless."""
    return float(min(CONFIDENCE_MAX, max(CONFIDENCE_MIN, value)))


def evidence_confidence(agreeing: int, available: int, contrary: int = 0) -> float:
    """0.45 for one signal, rising with each agreeing independent signal, lowered by contrary ones.

    ``available`` counts the evidence channels the inputs carried at all: a finding backed by
    every channel it could have seen is surer than one backed by one of five.
    """
    if agreeing <= 0:
        return CONFIDENCE_MIN
    base = 0.45 + 0.15 * (agreeing - 1)
    coverage = agreeing / max(available, agreeing)
    return clamp_confidence(base + 0.2 * coverage - 0.2 * contrary)


def ev(what: str, value: float | str, unit: str = "", *, instances: Iterable[str] = (),
       window: tuple[float, float] | None = None, baseline: float | str | None = None,
       source: str = "") -> Evidence:
    """An ``Evidence`` with numbers rounded to 4 significant figures (stable across formats)."""
    val: float | str = significant_figures(float(value)) if isinstance(
        value, (int, float, np.floating, np.integer)) else value
    base: float | str | None = baseline
    if isinstance(baseline, (int, float, np.floating, np.integer)):
        base = significant_figures(float(baseline))
    return Evidence(what=what, value=val, unit=unit, instances=tuple(sorted(set(instances))),
                    window_start_ts=None if window is None else float(window[0]),
                    window_end_ts=None if window is None else float(window[1]),
                    baseline=base, source=source)


def whole(feats: ClusterEvidence) -> tuple[float, float]:
    """The whole analysis window, as an evidence window."""
    return (feats.window.start_ts, feats.window.end_ts)


def finite(value: object) -> bool:
    """True for a number that is neither None, NaN nor infinite (and not a non-number)."""
    try:
        return value is not None and bool(np.isfinite(float(value)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def series_trend(series: pd.Series | None) -> Trend | None:
    """Trend of a per-bin series indexed by bin start (NaN bins dropped).

    A window often ends after the incident: the load stops or is shed and the queue drains.
    When the whole series is not a clear rise, the rise up to its (smoothed) peak is tested
    instead, so a queue that grew for ten minutes and then drained still counts as growing.
    """
    if series is None:
        return None
    s = series.dropna()
    t = s.index.to_numpy(dtype=np.float64)
    v = s.to_numpy(dtype=np.float64)
    whole = trend(t, v)
    if whole is None or whole.rising(TREND_ALPHA, TREND_MIN_TAU, 0.0):
        return whole
    # Smooth over three bins so one spiky scrape cannot be "the peak".
    smooth = np.convolve(v, np.ones(3) / 3, mode="same")
    peak = int(np.argmax(smooth))
    if peak + 1 < len(v) and peak + 1 >= max(MIN_TREND_POINTS, RISE_MIN_SHARE * len(v)):
        head = trend(t[: peak + 1], v[: peak + 1])
        if head is not None and head.rising(TREND_ALPHA, TREND_MIN_TAU, 0.0):
            return head
    return whole


def rising(tr: Trend | None, min_growth: float, feats: ClusterEvidence) -> bool:
    """A significant rise of at least ``min_growth`` that lasted long enough to matter.

    A burst that builds a queue for two bins and drains is load variance, not a shortage: the
    rise must span ``MIN_RISE_BINS`` bins and ``MIN_RISE_SHARE`` of the window.
    """
    if tr is None or not tr.rising(TREND_ALPHA, TREND_MIN_TAU, min_growth):
        return False
    w = feats.window
    return tr.rising_for_s >= max(MIN_RISE_BINS * w.step_s, MIN_RISE_SHARE * w.span_s)


def median_of(rows: pd.DataFrame, name: str) -> float | None:
    """Median of a declared per-instance column over ``rows``, None when none reports it."""
    values = column(rows, name)
    return median(values) if values.notna().any() else None


def decode_kv_p90(feats: ClusterEvidence) -> float | None:
    """Decode KV usage p90, median over the decode instances (None without KV usage)."""
    return median_of(role_rows(feats, "decode"), "g_kv_usage_p90")


def decode_kv_pressure(feats: ClusterEvidence) -> bool:
    """Whether decode KV usage (p90, median over decode instances) is at DECODE_KV_PRESSURE."""
    kv = decode_kv_p90(feats)
    return kv is not None and kv >= DECODE_KV_PRESSURE


def worst(*severities: Severity) -> Severity:
    """The most severe of the given severities."""
    return max(severities, key=lambda s: s.rank)


def slo_missed(attainment: float | None) -> bool:
    """True when the SLO attainment is known and below ``SLO_GOAL``."""
    return attainment is not None and attainment < SLO_GOAL


def slo_collapsed(attainment: float | None) -> bool:
    """True when the SLO attainment is known and below ``SLO_CRITICAL`` (a collapse, not a miss)."""
    return attainment is not None and attainment < SLO_CRITICAL


def prefill_backlog(feats: ClusterEvidence) -> tuple[Trend | None, str]:
    """The rising trend of the prefill queue (depth, else wait) and what it measured, or None."""
    tq = series_trend(feats.role_series("prefill_queue"))
    if rising(tq, PREFILL_QUEUE_GROWTH, feats):
        return tq, "prefill queue depth per instance"
    tw = series_trend(feats.role_series("queue_s_p50"))
    if wait_rising(tw, feats) and tw is not None:
        return tw, "median wait before prefill (s)"
    return None, ""


def wait_rising(tw: Trend | None, feats: ClusterEvidence) -> bool:
    """The median wait before prefill rose by PREFILL_WAIT_GROWTH_S and at least doubled."""
    return rising(tw, PREFILL_WAIT_GROWTH_S, feats) and tw is not None and \
        tw.hinge_end_level >= 2 * max(tw.onset_level, 0.0)


def remote_kv_dominates(feats: ClusterEvidence) -> tuple[bool, float, float]:
    """(dominates, mean remote-KV waiters, mean admission waiters) per decode instance."""
    decode = role_rows(feats, "decode")
    remote = column(decode, "remote_kv_wait_mean")
    admission = column(decode, "admission_wait_mean")
    prealloc = column(decode, "g_prealloc_mean")
    r = median(remote) if remote.notna().any() else 0.0
    a = max(median(admission) if admission.notna().any() else 0.0,
            median(prealloc) if prealloc.notna().any() else 0.0)
    return r >= 1.0 and r >= REMOTE_DOMINANCE * max(a, 0.5), r, a
