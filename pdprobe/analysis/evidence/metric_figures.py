"""Per-instance evidence from the engines' gauges, counters and histograms.

Each producer fills the columns the registry declares for it (``GAUGE_STATS``, ``COUNTERS``,
``HISTOGRAM_STATS``) in one grouped pass over its input; the request records' figures are in
``per_instance``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.columns import reindex_bins
from pdprobe.analysis.evidence.registry import (
    COUNTERS,
    GAUGE_BINS,
    GAUGE_STATS,
    HISTOGRAM_COVERED_BY,
    HISTOGRAM_STATS,
    KV_FULL_FRAC,
    KV_NEAR_FULL,
)
from pdprobe.analysis.row_slices import has_values

if TYPE_CHECKING:
    from collections.abc import MutableMapping

    import pandas as pd

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


def gauge_figures(ds: Dataset, window: Window, cols: InstanceColumns,
                  bins: MutableMapping[str, pd.DataFrame]) -> None:
    """Mean / p90 per instance and per-bin means of every declared gauge, in one pass."""
    import pandas as pd

    from pdprobe.analysis.tables import signal_rows

    m = ds.metrics
    if m.empty:
        return
    signals = sorted({s.source for s in (*GAUGE_STATS, *GAUGE_BINS)})
    # Each gauge's rows from the per-signal split; groups are integer codes, not strings.
    names: list[str] = []
    parts: list[pd.DataFrame] = []
    for signal in signals:
        rows = signal_rows(m, signal)
        ts = rows["ts"].to_numpy(dtype=np.float64)
        keep = ((rows["kind"] == S.GAUGE).to_numpy(dtype=bool, na_value=False)
                & (ts >= window.start_ts) & (ts <= window.end_ts)
                & rows["value"].notna().to_numpy() & rows["instance"].notna().to_numpy())
        if keep.any():
            names.append(signal)
            parts.append(rows[keep])
    if not parts:
        return
    name_code = np.repeat(np.arange(len(names)), [len(p) for p in parts])
    inst_code, inst_names = pd.factorize(pd.concat([p["instance"] for p in parts]), sort=True)
    labels = np.asarray([str(n) for n in inst_names], dtype=object)
    n_inst = len(labels)
    value = pd.Series(np.concatenate([p["value"].to_numpy(dtype=np.float64) for p in parts]))
    ts = np.concatenate([p["ts"].to_numpy(dtype=np.float64) for p in parts])
    grouped = value.groupby(name_code * n_inst + inst_code, sort=True)
    stats = {"mean": grouped.mean(), "p90": grouped.quantile(0.9)}
    key = stats["mean"].index.to_numpy()
    for s in GAUGE_STATS:
        if s.source not in names:
            continue
        mine = key // n_inst == names.index(s.source)
        part = stats[s.stat][mine]
        part.index = pd.Index(labels[key[mine] % n_inst])
        cols.put(s.name, part)
    if KV_FULL_FRAC.source in names:
        kv = name_code == names.index(KV_FULL_FRAC.source)
        full = pd.Series(value.to_numpy()[kv] >= KV_NEAR_FULL).groupby(inst_code[kv]).mean()
        full.index = pd.Index(labels[full.index.to_numpy()])
        cols.put(KV_FULL_FRAC.name, full)
    n_bins = window.n_bins
    cell = (name_code * n_bins + window.bin_of(ts)) * n_inst + inst_code
    per_bin = value.groupby(cell, sort=True).mean()
    cell = per_bin.index.to_numpy()
    means = per_bin.to_numpy()
    for b in GAUGE_BINS:
        if b.source not in names:
            continue
        mine = cell // (n_bins * n_inst) == names.index(b.source)
        index = pd.MultiIndex.from_arrays([(cell[mine] // n_inst) % n_bins,
                                           labels[cell[mine] % n_inst]], names=["_bin", "instance"])
        # unstack as before, so the frame's memory layout (and row sums over it) are unchanged
        bins[b.name] = reindex_bins(pd.Series(means[mine], index=index).unstack("instance"),
                                    window)
