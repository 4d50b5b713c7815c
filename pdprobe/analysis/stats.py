"""Small vectorised statistics shared by the analyses (quantiles, series binning)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.base import Quantiles, TimeSeries

if TYPE_CHECKING:
    import pandas as pd

# Series for charts and trend tests: about this many bins over the window, within these bounds.
SERIES_TARGET_BINS: Final = 60
SERIES_MIN_STEP_S: Final = 15.0  # the usual scrape interval; finer bins would be empty
SERIES_MAX_STEP_S: Final = 300.0


def quantiles(values: np.ndarray | pd.Series) -> Quantiles | None:
    """count/mean/p50/p90/p99/max of the finite values (numpy's linear percentile), or None."""
    arr = np.asarray(values, dtype="float64")
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return None
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return Quantiles(count=int(arr.size), mean=float(arr.mean()), p50=float(p50), p90=float(p90),
                     p99=float(p99), max=float(arr.max()))


def grouped_quantiles(frame: pd.DataFrame, key: str, column: str) -> dict[str, Quantiles]:
    """Quantiles of ``column`` per value of ``key``, computed in one groupby pass."""
    sub = frame[[key, column]].dropna()
    if sub.empty:
        return {}
    grouped = sub.groupby(key, observed=True)[column]
    qs = grouped.quantile(np.array([0.5, 0.9, 0.99])).unstack()
    agg = grouped.agg(["count", "mean", "max"])
    qs = qs.reindex(agg.index)
    # Plain Python values column by column: per-row Series access cost more than the groupby.
    columns = zip(agg.index, agg["count"].tolist(), agg["mean"].tolist(), agg["max"].tolist(),
                  qs[0.5].tolist(), qs[0.9].tolist(), qs[0.99].tolist(), strict=True)
    return {str(name): Quantiles(count=int(count), mean=float(mean), p50=float(p50),
                                 p90=float(p90), p99=float(p99), max=float(top))
            for name, count, mean, top, p50, p90, p99 in columns}


def series_step(start_ts: float, end_ts: float) -> float:
    span = max(end_ts - start_ts, 1.0)
    return float(min(max(span / SERIES_TARGET_BINS, SERIES_MIN_STEP_S), SERIES_MAX_STEP_S))


def binned_series(ts: np.ndarray, values: np.ndarray, start_ts: float, end_ts: float,
                  step_s: float, unit: str, how: str = "mean") -> TimeSeries:
    """Regular series over [start, end): mean/max/sum of ``values`` per bin, NaN when empty."""
    n_bins = max(1, int(np.ceil((end_ts - start_ts) / step_s)) or 1)
    edges_ts = start_ts + step_s * np.arange(n_bins)
    idx = np.clip(((np.asarray(ts) - start_ts) // step_s).astype("int64"), 0, n_bins - 1)
    vals = np.asarray(values, dtype="float64")
    ok = np.isfinite(vals)
    idx, vals = idx[ok], vals[ok]
    sums = np.bincount(idx, weights=vals, minlength=n_bins)
    counts = np.bincount(idx, minlength=n_bins)
    if how == "sum":
        out = sums
    elif how == "max":
        out = np.full(n_bins, -np.inf)
        np.maximum.at(out, idx, vals)
        out[counts == 0] = np.nan
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return TimeSeries(ts=tuple(float(t) for t in edges_ts), values=tuple(float(v) for v in out),
                      unit=unit, step_s=float(step_s))
