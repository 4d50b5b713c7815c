"""Per-role time series for sparklines and charts: aligned grids, sums and means.

The text and Markdown views draw these as sparklines, the HTML view as SVG line charts; all
of them read the same ``RoleSeries`` built here from the instances' series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pdprobe.report.cells import RATIO_UNITS, SECONDS_UNITS, fmt_value

if TYPE_CHECKING:
    from pdprobe.analysis.base import (
        TimeSeries,
    )
    from pdprobe.report.model import Report


SPARK_CHARS: Final = "▁▂▃▄▅▆▇█"


# --- sparklines and series -------------------------------------------------------------------

def resample(values: Sequence[float], width: int) -> list[float]:
    """Down-sample to ``width`` points by bin mean (NaN bins stay NaN); shorter series unchanged."""
    import numpy as np

    arr = np.asarray(values, dtype="float64")
    n = arr.size
    if n <= width or width <= 0:
        return [float(v) for v in arr]
    idx = (np.arange(n) * width) // n
    finite = np.isfinite(arr)
    sums = np.bincount(idx[finite], weights=arr[finite], minlength=width)
    counts = np.bincount(idx[finite], minlength=width)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return [float(v) for v in out]


def sparkline(values: Sequence[float], width: int | None = None, *,
              hi: float | None = None) -> str:
    """``▁▂▃▅▇`` scaled from min(0, min) to max (or ``hi``, to share a scale across lines);
    unknown bins are blanks."""
    vals = resample(values, width) if width else [float(v) for v in values]
    finite = [v for v in vals if math.isfinite(v)]
    if not finite:
        return " " * len(vals)
    lo = min(0.0, min(finite))
    hi = max(finite) if hi is None or not math.isfinite(hi) else max(hi, max(finite))
    span = hi - lo
    out = []
    top = len(SPARK_CHARS) - 1
    for v in vals:
        if not math.isfinite(v):
            out.append(" ")
        elif span <= 0:
            out.append(SPARK_CHARS[0])
        else:
            out.append(SPARK_CHARS[min(top, round((v - lo) / span * top))])
    return "".join(out)


@dataclass(frozen=True)
class RoleSeries:
    """A per-role aggregate of instance series on one time grid (for sparklines and charts)."""

    role: str
    what: str  # "queue depth (sum)"
    unit: str
    ts: tuple[float, ...]
    values: tuple[float, ...]
    per_instance: tuple[tuple[str, tuple[float, ...]], ...]  # same grid

    @property
    def peak(self) -> float:
        """The highest known value of the aggregate series (NaN when none is known)."""
        finite = [v for v in self.values if math.isfinite(v)]
        return max(finite) if finite else float("nan")

    @property
    def instance_peak(self) -> float:
        """The highest value of any one instance (a shared scale makes an outlier visible)."""
        finite = [v for _, row in self.per_instance for v in row if math.isfinite(v)]
        return max(finite) if finite else float("nan")


def align_series(items: Sequence[tuple[str, TimeSeries]]
                 ) -> tuple[tuple[float, ...], list[tuple[str, tuple[float, ...]]]]:
    """Put series on one grid (the finest step over their joint span); NaN where absent."""
    import numpy as np

    usable = [(n, s) for n, s in items if s.ts]
    if not usable:
        return (), []
    start = min(s.ts[0] for _, s in usable)
    end = max(s.ts[-1] + s.step_s for _, s in usable)
    step = min(s.step_s for _, s in usable) or 1.0
    n_bins = max(1, math.ceil((end - start) / step - 1e-9))
    grid = tuple(float(start + step * i) for i in range(n_bins))
    out = []
    for name, s in usable:
        ts = np.asarray(s.ts, dtype="float64")
        vals = np.asarray(s.values, dtype="float64")
        idx = np.clip(((ts - start) // step).astype("int64"), 0, n_bins - 1)
        ok = np.isfinite(vals)
        sums = np.bincount(idx[ok], weights=vals[ok], minlength=n_bins)
        counts = np.bincount(idx[ok], minlength=n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            row = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        out.append((name, tuple(float(v) for v in row)))
    return grid, out


def role_series(report: Report, role: str, attr: str, how: str) -> RoleSeries | None:
    """Sum (queue depth) or mean (TTFT, KV usage) of one series over a role's instances."""
    import numpy as np

    items = [(i.name, getattr(i, attr)) for i in report.instances
             if i.role == role and getattr(i, attr) is not None]
    if not items:
        return None
    grid, rows = align_series(items)
    if not grid:
        return None
    mat = np.asarray([r for _, r in rows], dtype="float64")
    known = np.isfinite(mat)
    with np.errstate(invalid="ignore", divide="ignore"):
        if how == "sum":
            agg = np.where(known.any(axis=0), np.nansum(np.where(known, mat, 0.0), axis=0), np.nan)
        else:
            cnt = known.sum(axis=0)
            agg = np.where(cnt > 0, np.where(known, mat, 0.0).sum(axis=0) / np.maximum(cnt, 1),
                           np.nan)
    unit = items[0][1].unit
    label = {"queue_series": "queue depth", "ttft_series": "TTFT",
             "kv_usage_series": "KV usage"}.get(attr, attr)
    return RoleSeries(role=role, what=f"{label} ({how})", unit=unit, ts=grid,
                      values=tuple(float(v) for v in agg), per_instance=tuple(rows))


def series_value(value: float, unit: str) -> str:
    """A series value by its unit (TimeSeries units: "s", "ratio", "requests", ...)."""
    return fmt_value(value, unit if unit in SECONDS_UNITS | RATIO_UNITS else "")


SERIES_SPECS: Final = (("queue_series", "sum"), ("ttft_series", "mean"),
                       ("kv_usage_series", "mean"))


