"""Small vectorised statistics shared by the analyses (quantiles, series binning)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.base import Quantiles

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.group_figures import GroupFigures

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
    """Quantiles of ``column`` per value of ``key`` (pandas' grouped linear quantiles), from one
    grouping on integer codes and one sort per group (``analysis.grouped``)."""
    from pdprobe.analysis.group_figures import GroupFigures
    from pdprobe.analysis.grouped import Groups, key_codes

    if frame.empty:
        return {}
    groups = Groups.of(*key_codes(frame[key]))
    values = frame[column].to_numpy(dtype=np.float64, na_value=np.nan)
    return figure_quantiles(GroupFigures.of(groups.sorted(values)))


def figure_quantiles(figs: GroupFigures) -> dict[str, Quantiles]:
    """count/mean/p50/p90/p99/max of every group with a value, by group label."""
    # Plain Python values column by column: per-group array access would cost more.
    columns = zip(figs.labels, figs.count.tolist(), figs.mean.tolist(), figs.max.tolist(),
                  figs.p50.tolist(), figs.p90.tolist(), figs.p99.tolist(), strict=True)
    return {name: Quantiles(count=int(count), mean=float(mean), p50=float(p50),
                            p90=float(p90), p99=float(p99), max=float(top))
            for name, count, mean, top, p50, p90, p99 in columns if count > 0}


def series_step(start_ts: float, end_ts: float) -> float:
    """The bin width for a window's time series: about ``SERIES_TARGET_BINS`` bins, clamped to
    ``SERIES_MIN_STEP_S``..``SERIES_MAX_STEP_S``."""
    span = max(end_ts - start_ts, 1.0)
    return float(min(max(span / SERIES_TARGET_BINS, SERIES_MIN_STEP_S), SERIES_MAX_STEP_S))
