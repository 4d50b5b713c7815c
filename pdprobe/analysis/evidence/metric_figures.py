"""Per-instance evidence from the engines' counters and histograms.

Each producer fills the columns the registry declares for it (``COUNTERS``,
``HISTOGRAM_STATS``) in one grouped pass over its input; the request records' and gauges'
figures are in ``per_instance``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.registry import COUNTERS, HISTOGRAM_COVERED_BY, HISTOGRAM_STATS
from pdprobe.analysis.row_slices import has_values

if TYPE_CHECKING:
    from pdprobe.analysis.evidence.columns import InstanceColumns
    from pdprobe.analysis.evidence.model import Window
    from pdprobe.dataset import Dataset


def counter_figures(ds: Dataset, window: Window, cols: InstanceColumns) -> None:
    """Increase of every declared counter per instance, in one grouped pass."""
    from pdprobe.analysis.promql import counter_increase_by_instance

    m = ds.metrics
    if m.empty:
        return
    by_signal = {s.source: s.name for s in COUNTERS}
    sub = m[(m["kind"] == S.COUNTER) & m["signal"].isin(list(by_signal))]
    if sub.empty:
        return
    # One call for all signals: the signal becomes part of the series key.
    sub = sub.assign(name=sub["signal"].map(by_signal), signal="*")
    inc = counter_increase_by_instance(sub, "*", window.start_ts, window.end_ts,
                                       key=["instance", "name"], from_zero=True)
    for name in inc.index.get_level_values("name").unique():
        cols.put(str(name), inc.xs(name, level="name"))


def histogram_figures(ds: Dataset, window: Window, cols: InstanceColumns) -> None:
    """Declared quantiles, sums and counts of the engine histograms, per instance.

    A histogram whose figures the request records give exactly (``HISTOGRAM_COVERED_BY``)
    is skipped.
    """
    import pandas as pd

    from pdprobe.analysis.promql import histogram_quantiles_by_instance, histogram_window
    from pdprobe.analysis.tables import signal_rows

    m = ds.metrics
    if m.empty:
        return
    req = ds.requests
    covered = {c for c in ds.request_columns if c in req.columns and has_values(req, c)}
    for signal in dict.fromkeys(s.source for s in HISTOGRAM_STATS):
        if HISTOGRAM_COVERED_BY[signal] <= covered:
            continue  # request records give the exact figure; the histogram adds nothing
        if not signal_rows(m, signal)["kind"].isin([S.BUCKET, S.HCOUNT]).any():
            continue
        hist = histogram_window(m, signal, window.start_ts, window.end_ts, by_instance=True,
                                from_zero=True)
        attrs = dict(hist.attrs)
        mine = [s for s in HISTOGRAM_STATS if s.source == signal]
        if not hist.empty:
            hist = hist.assign(instance=hist["instance"].astype(str))
            for s in mine:
                if s.stat in ("p50", "p90"):
                    q = 0.5 if s.stat == "p50" else 0.9
                    cols.put(s.name, histogram_quantiles_by_instance(hist, q))
        for s in mine:
            if s.stat not in ("sum", "count"):
                continue
            per = attrs.get(f"{s.stat}_by_instance", {})  # the attribute histogram_window sets
            if per:
                cols.put(s.name, pd.Series(
                    np.fromiter(per.values(), dtype=np.float64, count=len(per)),
                    index=pd.Index(list(per), dtype=object)))
