"""Helpers every rule shares: building findings and evidence, wording numbers, trends."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.rules.base import Evidence, Finding, Inconclusive, Rule, Severity
from pdprobe.rules.stats import MIN_TREND_POINTS, Trend, significant_figures, trend

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.rules.features import Features

# Mann–Kendall: p below this and tau at least this make a trend (p 0.01 because a diagnosis runs
# a dozen such tests; tau 0.3 = clearly more rising pairs than falling, not a wobble).
TREND_ALPHA: Final = 0.01
TREND_MIN_TAU: Final = 0.3
# SLO attainment: below this share of requests within the objective the SLO counts as missed
# (the usual "p90 within target" goal), below the critical share users see an outage.
SLO_GOAL: Final = 0.9
SLO_CRITICAL: Final = 0.5
# A rise that ends in a drain counts when the rising part spans this share of the series.
RISE_MIN_SHARE: Final = 0.3
# A rise must last at least this many bins and this share of the window to be "growing".
MIN_RISE_BINS: Final = 4
MIN_RISE_SHARE: Final = 0.1
# Confidence never reaches certainty from telemetry alone, nor drops below "worth a look".
CONFIDENCE_MAX: Final = 0.95
CONFIDENCE_MIN: Final = 0.2


class BaseRule(Rule):
    """Shared plumbing: findings and inconclusive results stamped with the rule's identity."""

    def finding(self, severity: Severity, confidence: float, summary: str, *,
                instances: Iterable[str] = (), evidence: Iterable[Evidence] = (),
                next_steps: Iterable[str] = ()) -> Finding:
        return Finding(code=self.code, cause=self.cause, severity=severity,
                       confidence=round(clamp_confidence(confidence), 2), summary=summary,
                       instances=tuple(sorted(set(instances))), evidence=tuple(evidence),
                       next_steps=tuple(next_steps), component=self.component)

    def inconclusive(self, needs: str | None = None) -> Inconclusive:
        return Inconclusive(code=self.code, cause=self.cause,
                            needs=needs or "; or ".join(self.requires))


def clamp_confidence(value: float) -> float:
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


def whole(feats: Features) -> tuple[float, float]:
    return (feats.window.start_ts, feats.window.end_ts)


def finite(value: object) -> bool:
    try:
        return value is not None and bool(np.isfinite(float(value)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def pct(ratio: float) -> str:
    """0.413 -> "41 %"; values under 10 % keep one decimal."""
    v = 100.0 * ratio
    return f"{v:.1f} %" if abs(v) < 10 else f"{v:.0f} %"


def secs(value: float) -> str:
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 0.01:
        return f"{value * 1000:.1f} ms"
    if value < 1.0:
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def duration(value: float) -> str:
    if value >= 5400:
        return f"{value / 3600:.1f} h"
    if value >= 90:
        return f"{value / 60:.0f} min"
    return f"{value:.0f} s"


def rate_bytes(value: float) -> str:
    """Bytes per second in decimal GB/s (MB/s below 1 GB/s)."""
    if value >= 1e9:
        return f"{value / 1e9:.1f} GB/s"
    return f"{value / 1e6:.0f} MB/s"


def names(items: Sequence[str], limit: int = 4) -> str:
    items = list(items)
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"


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


def rising(tr: Trend | None, min_growth: float, feats: Features) -> bool:
    """A significant rise of at least ``min_growth`` that lasted long enough to matter.

    A burst that builds a queue for two bins and drains is load variance, not a shortage: the
    rise must span ``MIN_RISE_BINS`` bins and ``MIN_RISE_SHARE`` of the window.
    """
    if tr is None or not tr.rising(TREND_ALPHA, TREND_MIN_TAU, min_growth):
        return False
    w = feats.window
    return tr.rising_for_s >= max(MIN_RISE_BINS * w.step_s, MIN_RISE_SHARE * w.span_s)


def column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A float column, all-NaN when absent (so rules can ask for anything)."""
    import pandas as pd

    if name in frame.columns:
        return frame[name].astype("float64")
    return pd.Series(np.nan, index=frame.index, dtype="float64")


def worst(*severities: Severity) -> Severity:
    return max(severities, key=lambda s: s.rank)


def slo_missed(attainment: float | None) -> bool:
    return attainment is not None and attainment < SLO_GOAL


def slo_collapsed(attainment: float | None) -> bool:
    return attainment is not None and attainment < SLO_CRITICAL


# A prefill backlog: the mean queue per prefill instance up by this many requests, or the median
# wait before prefill up by this much and at least doubled (see PD101 for the reasoning).
BACKLOG_QUEUE_GROWTH: Final = 3.0
BACKLOG_WAIT_GROWTH_S: Final = 0.5


def prefill_backlog(feats: Features) -> tuple[Trend | None, str]:
    """The rising trend of the prefill queue (depth, else wait) and what it measured, or None."""
    tq = series_trend(feats.role_series("prefill_queue"))
    if rising(tq, BACKLOG_QUEUE_GROWTH, feats):
        return tq, "prefill queue depth per instance"
    tw = series_trend(feats.role_series("queue_s_p50"))
    if rising(tw, BACKLOG_WAIT_GROWTH_S, feats) and tw is not None and \
            tw.hinge_end_level >= 2 * max(tw.onset_level, 0.0):
        return tw, "median wait before prefill (s)"
    return None, ""


# Decode KV held by transfers: requests waiting for remote KV outnumber those waiting for a
# decode slot or memory by this factor (and at least one waits on average). Both vLLM and SGLang
# reserve decode KV before the transfer lands, so a slow hand-off fills decode memory too.
REMOTE_DOMINANCE: Final = 2.0


def remote_kv_dominates(feats: Features) -> tuple[bool, float, float]:
    """(dominates, mean remote-KV waiters, mean admission waiters) per decode instance."""
    decode = feats.role("decode")
    remote = column(decode, "remote_kv_wait_mean")
    admission = column(decode, "admission_wait_mean")
    prealloc = column(decode, "g_prealloc_mean")
    r = float(remote.median()) if remote.notna().any() else 0.0
    a = max(float(admission.median()) if admission.notna().any() else 0.0,
            float(prealloc.median()) if prealloc.notna().any() else 0.0)
    return r >= 1.0 and r >= REMOTE_DOMINANCE * max(a, 0.5), r, a
