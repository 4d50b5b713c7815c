"""Per-instance evidence straight from the inputs: request records, gauges, counters, histograms.

Each producer fills the columns the registry declares for it (``REQUEST_QUANTILES``,
``GAUGE_STATS``, ``COUNTERS``, ``HISTOGRAM_STATS`` ...) in one grouped pass over its input:
a groupby on integer codes, never a loop over rows or samples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.columns import (
    ROLE_COLUMN,
    InstanceColumns,
    merge_bins,
    reindex_bins,
    transfer_seconds,
)
from pdprobe.analysis.evidence.registry import (
    COUNTERS,
    GAUGE_BINS,
    GAUGE_STATS,
    HISTOGRAM_COVERED_BY,
    HISTOGRAM_STATS,
    KV_FULL_FRAC,
    KV_NEAR_FULL,
    REQUEST_QUANTILES,
    ROLE_COUNT_BINS,
)

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.model import Window
    from pdprobe.dataset import Dataset

# Request-record columns summarised per instance (two are derived per request below), in the
# order their quantiles are computed.
_QUANTILE_INPUTS = ("ttft_s", "tpot_s", "queue_s", "kv_transfer_s", "prefill_s_per_token",
                    "xfer_bytes_per_s")
# Per-bin medians of request columns, per instance: (request column, bins name).
_REQUEST_BIN_MEDIANS = (("tpot_s", "req_tpot"), ("ttft_s", "req_ttft"),
                        ("prefill_s_per_token", "req_prefill_per_token"),
                        ("kv_transfer_s", "req_xfer"))


def request_figures(ds: Dataset, window: Window, cols: InstanceColumns,
                    bins: dict[str, pd.DataFrame]) -> None:
    """Per-instance request figures, grouped by the column that names the instance's role."""
    import pandas as pd

    req = ds.requests
    if req.empty:
        return
    present = ds.request_columns
    has = {c: c in present and bool(req[c].notna().any()) for c in req.columns}
    derived = {}
    if has.get("prefill_s"):
        uncached = req["prompt_tokens"].astype("float64")
        if has.get("cached_tokens"):
            uncached = uncached - req["cached_tokens"].fillna(0.0)
        derived["prefill_s_per_token"] = req["prefill_s"] / uncached.clip(lower=1.0)
    xfer = transfer_seconds(ds)
    if xfer is not None and has.get("kv_bytes"):
        derived["xfer_bytes_per_s"] = req["kv_bytes"] / xfer.where(xfer > 0)
    frame = req.assign(**derived, _bin=window.bin_of(req["arrival_ts"].to_numpy()))
    roles = pd.Series(cols.text["role"], index=cols.index)
    for role, col in ROLE_COLUMN.items():
        if not has.get(col):
            continue
        sub = frame[frame[col].notna()]
        if sub.empty:
            continue
        key = sub[col]  # categorical keys group fast (the request table's already are)
        key = key.cat.remove_unused_categories() if isinstance(key.dtype, pd.CategoricalDtype) \
            else key.astype(str).astype("category")
        counts = key.value_counts()
        counts = counts[counts > 0]
        counts.index = counts.index.astype(str)
        # Only instances of this role (or of unknown role) take figures from this column.
        allowed = set(roles.index[roles.isin([role, "unknown"])].astype(str))
        keep = [k for k in counts.index if k in allowed]
        total = float(counts.sum())
        cols.put("req_count", counts.loc[keep].astype("float64"))
        cols.put("req_share", counts.loc[keep] / total)
        quant = [c for c in _QUANTILE_INPUTS if c in sub.columns and bool(sub[c].notna().any())]
        if quant:
            grouped = sub.groupby(key, sort=True, observed=True)[quant]
            by_q = {"p50": grouped.median(), "p90": grouped.quantile(0.9),
                    "mean": grouped.mean()}
            for s in REQUEST_QUANTILES:
                if s.source in quant:
                    cols.put(s.name, by_q[s.stat][s.source].reindex(keep))
        if has.get("cached_tokens"):
            sums = sub.groupby(key, sort=True, observed=True)[
                ["cached_tokens", "prompt_tokens"]].sum()
            ratio = sums["cached_tokens"] / sums["prompt_tokens"].where(sums["prompt_tokens"] > 0)
            ratio.index = ratio.index.astype(str)
            cols.put("req_hit_ratio", ratio.reindex(keep))
        # Per-bin, per-instance series for persistence checks.
        per_bin = sub.assign(_key=key).groupby(["_bin", "_key"], sort=True, observed=True)
        bins[ROLE_COUNT_BINS[role]] = reindex_bins(
            per_bin.size().unstack("_key").fillna(0.0), window)
        for c, name in _REQUEST_BIN_MEDIANS:
            if c in sub.columns and bool(sub[c].notna().any()):
                medians: pd.DataFrame = per_bin[c].median().unstack("_key")
                merge_bins(bins, name, reindex_bins(medians, window))
        if has.get("cached_tokens"):
            sums = per_bin[["cached_tokens", "prompt_tokens"]].sum()
            hit_bins: pd.DataFrame = (sums["cached_tokens"] / sums["prompt_tokens"].where(
                sums["prompt_tokens"] > 0)).unstack("_key")
            merge_bins(bins, "req_hit", reindex_bins(hit_bins, window))


def gauge_figures(ds: Dataset, window: Window, cols: InstanceColumns,
                  bins: dict[str, pd.DataFrame]) -> None:
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
    covered = {c for c in ds.request_columns if c in req.columns and bool(req[c].notna().any())}
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
