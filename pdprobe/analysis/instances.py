"""Per-instance summaries: traffic, latency, queue, KV usage and hit rate of every instance.

Request records give exact per-request figures grouped by ``prefill_instance`` /
``decode_instance``; engine metrics and logs give gauges (queue depth, KV usage) and
histogram estimates. Where both exist, request records win for latencies and metrics for
gauges. Everything is one groupby pass per signal, never a loop over rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.base import InstanceSummary, Quantiles, TimeSeries
from pdprobe.analysis.instance_series import binned_means_by_codes
from pdprobe.analysis.row_slices import has_values
from pdprobe.analysis.stats import figure_quantiles, grouped_quantiles, series_step
from pdprobe.analysis.table_facts import column_ascending
from pdprobe.analysis.tables import has_signal, signal_rows
from pdprobe.dataset import Dataset
from pdprobe.values import Missing

if TYPE_CHECKING:
    import pandas as pd

# Request-record latency columns summarised per instance, by the role whose column names it.
PREFILL_LATENCIES = {"ttft_s": "ttft_s", "queue_s": "queue_s"}
DECODE_LATENCIES = {"ttft_s": "ttft_s", "tpot_s": "tpot_s", "kv_transfer_s": "kv_transfer_s"}
GAUGE_FIELDS = {
    "queue_depth": S.REQUESTS_WAITING,
    "running": S.REQUESTS_RUNNING,
    "kv_usage_ratio": S.KV_USAGE_RATIO,
}
HISTOGRAM_FIELDS = {
    "ttft_s": S.TTFT_S,
    "tpot_s": S.TPOT_S,
    "queue_s": S.QUEUE_S,
    "kv_transfer_s": S.KV_TRANSFER_S,
}


def window_of(dataset: Dataset) -> tuple[float, float] | None:
    """The first and last time of the requests' arrivals and the metric and network samples
    (None without any)."""
    los, his = [], []
    for frame, column in ((dataset.requests, "arrival_ts"), (dataset.metrics, "ts"),
                          (dataset.network, "ts")):
        if len(frame):
            lo, hi = _span(frame, column)
            los.append(lo)
            his.append(hi)
    return (min(los), max(his)) if los else None


def _span(table: pd.DataFrame, column: str) -> tuple[float, float]:
    """``float(table[column].min()), float(table[column].max())`` (NaN skipped), cached per
    table: the instance summaries, the series and the evidence each ask for the window, and
    pandas' min and max each build a NaN mask (25 ms for a 10M-row table)."""
    from pdprobe.analysis.table_cache import table_cache

    cache = table_cache(table)
    key = ("span", column)
    if key not in cache:
        series = table[column]
        if series.dtype.kind == "f":
            values = series.to_numpy()
            lo, hi = values.min(), values.max()
            if np.isnan(lo):  # a NaN: skipped, as pandas skips it
                kept = values[~np.isnan(values)]
                lo, hi = (kept.min(), kept.max()) if kept.size else (np.nan, np.nan)
        else:
            lo, hi = series.min(), series.max()
        cache[key] = (float(lo), float(hi))
    found: tuple[float, float] = cache[key]
    return found


def summarize_instances(dataset: Dataset) -> tuple[InstanceSummary, ...]:
    """One summary per known instance, sorted by role then name."""
    window = window_of(dataset)
    if window is None or not dataset.instances:
        return ()
    start, end = window
    step = series_step(start, end)
    fields: dict[str, dict[str, Any]] = {i.name: {} for i in dataset.instances}
    _from_requests(dataset, fields, start, end, step)
    _from_metrics(dataset, fields, start, end, step)
    order = {"prefill": 0, "decode": 1, "frontend": 2, "unknown": 3}
    out = []
    for info in sorted(dataset.instances, key=lambda i: (order[i.role], i.name)):
        out.append(InstanceSummary(name=info.name, role=info.role, role_source=info.role_source,
                                   node=info.node, engine=info.engine, **fields[info.name]))
    return tuple(out)


def _set(fields: dict[str, dict[str, Any]], name: str, key: str, value: Any,
         overwrite: bool = False) -> None:
    slot = fields.get(name)
    if slot is None or value is None:
        return
    if overwrite or key not in slot or isinstance(slot[key], Missing):
        slot[key] = value


def _from_requests(dataset: Dataset, fields: dict[str, dict[str, Any]], start: float,
                   end: float, step: float) -> None:
    """Per-instance request figures: one grouping per role column on its integer codes, shared
    with the evidence (``analysis.grouped``); no copy of the request table."""
    from pdprobe.analysis.grouped import (
        figures,
        group_sums,
        key_groupings,
        know_code_counts,
        know_sums,
        table_key_codes,
    )

    req = dataset.requests
    if req.empty:
        return
    roles = [(column, latencies) for column, latencies in (("prefill_instance", PREFILL_LATENCIES),
                                                           ("decode_instance", DECODE_LATENCIES))
             if dataset.has_request_column(column) and has_values(req, column)]
    # (cached: a string key factorized once, here and for its grouping)
    keys = [table_key_codes(req, column) for column, _latencies in roles]
    # every role column's TTFT series in one pass: the rows' bins are computed once for all
    ttft_series: list[Mapping[str, TimeSeries]] = [{} for _ in roles]
    totals: list[tuple[np.ndarray, np.ndarray] | None] = [None for _ in roles]
    if roles and dataset.has_request_column("ttft_s"):
        ttft_series, totals = binned_means_by_codes(
            keys, req["arrival_ts"].to_numpy(dtype=np.float64),
            req["ttft_s"].to_numpy(dtype=np.float64), start, end, step, "s",
            column_ascending(req, "arrival_ts"))  # (cached: the workload asks it too)
        # the series' cells cover every row (every arrival in a bin): when every row has a
        # TTFT and an instance, their counts are the groupings' rows per instance (made next,
        # without a count of their own)
        for (column, _latencies), found in zip(roles, totals, strict=True):
            if found is not None:
                know_code_counts(req, column, found[0])
    # every role column's grouping at once (shared with the evidence): their samples and the
    # whole-column sample drawn from one stream
    groupings = key_groupings(req, [column for column, _latencies in roles])
    # the series' counts and sums per instance are the TTFT figures' own, so a sampled
    # grouping's figures pass over the rows for the maxima alone
    for (column, _latencies), groups, found in zip(roles, groupings, totals, strict=True):
        if found is not None and groups.sampled:
            know_sums(req, column, "ttft_s", *found)
    with_hits = dataset.has_request_column("cached_tokens") and has_values(req, "cached_tokens")
    if with_hits:  # both columns' sums of every role at once (when exact: ``joint_sums``)
        from pdprobe.analysis.joint_sums import group_sums_columns

        group_sums_columns(req, [column for column, _latencies in roles],
                           ["cached_tokens", "prompt_tokens"])
    for (column, latencies), (_codes, labels), series_of, groups in zip(
            roles, keys, ttft_series, groupings, strict=True):
        # value_counts: every category (unused ones count 0), else every value present; the
        # grouping's totals cover every row
        counts = np.zeros(len(labels), dtype=np.int64)
        counts[groups.ids] = groups.totals
        total = float(counts.sum())
        for name, n in zip(labels, counts.tolist(), strict=True):
            _set(fields, name, "requests", int(n))
            _set(fields, name, "traffic_share", float(n) / total)
        for field, source_col in latencies.items():
            if dataset.has_request_column(source_col):
                for name, q in figure_quantiles(figures(req, column, source_col)).items():
                    _set(fields, name, field, q)
        if with_hits:
            hits = group_sums(req, column, "cached_tokens")
            prompts = group_sums(req, column, "prompt_tokens")
            for name, hit, prompt in zip(groups.labels, hits.tolist(),
                                         prompts.tolist(),
                                         strict=True):
                if prompt > 0:
                    _set(fields, name, "prefix_hit_ratio", float(hit / prompt))
        for name, series in series_of.items():
            _set(fields, name, "ttft_series", series)


def _from_metrics(dataset: Dataset, fields: dict[str, dict[str, Any]], start: float,
                  end: float, step: float) -> None:
    metrics = dataset.metrics
    if metrics.empty:
        return

    def gauge(signal: str) -> pd.DataFrame:
        rows = signal_rows(metrics, signal)
        return rows[(rows["kind"] == S.GAUGE).to_numpy(dtype=bool, na_value=False)]

    for field, signal in GAUGE_FIELDS.items():
        sub = gauge(signal)
        if sub.empty:
            continue
        for name, q in grouped_quantiles(sub, "instance", "value").items():
            _set(fields, name, field, q)
    for name, series in _binned_by(gauge(S.REQUESTS_WAITING), "instance",
                                   "ts", "value", start, end, step, "requests").items():
        _set(fields, name, "queue_series", series)
    for name, series in _binned_by(gauge(S.KV_USAGE_RATIO), "instance",
                                   "ts", "value", start, end, step, "ratio").items():
        _set(fields, name, "kv_usage_series", series)

    from pdprobe.analysis.promql import counter_increase_by_instance

    span = max(end - start, 1e-9)
    hits = counter_increase_by_instance(metrics, S.PREFIX_HITS_TOTAL, start, end)
    queries = counter_increase_by_instance(metrics, S.PREFIX_QUERIES_TOTAL, start, end)
    for name in hits.index.intersection(queries.index):
        if queries[name] > 0:
            _set(fields, str(name), "prefix_hit_ratio", float(hits[name] / queries[name]))
    hit_gauge = gauge(S.PREFIX_HIT_RATIO)
    if not hit_gauge.empty:
        for inst, value in hit_gauge.groupby("instance", observed=True)["value"].mean().items():
            _set(fields, str(inst), "prefix_hit_ratio", float(value))
    for field, signal, per_s in (("preemptions", S.PREEMPTIONS_TOTAL, False),
                                 ("prompt_tokens_per_s", S.PROMPT_TOKENS_TOTAL, True),
                                 ("generation_tokens_per_s", S.GENERATION_TOKENS_TOTAL, True)):
        for inst, value in counter_increase_by_instance(metrics, signal, start, end).items():
            if np.isfinite(value):
                _set(fields, str(inst), field, float(value / span if per_s else value))
    _histogram_quantiles(metrics, fields, start, end)


def _histogram_quantiles(metrics: pd.DataFrame, fields: dict[str, dict[str, Any]],
                         start: float, end: float) -> None:
    from pdprobe.analysis.promql import histogram_quantiles_by_instance, histogram_window

    for field, signal in HISTOGRAM_FIELDS.items():
        if not has_signal(metrics, signal):
            continue
        hist = histogram_window(metrics, signal, start, end, by_instance=True)
        if hist.empty:
            continue
        totals = hist.groupby("instance", observed=True)["count"].max()
        quantiles = {q: histogram_quantiles_by_instance(hist, q) for q in (0.5, 0.9, 0.99)}
        sums = hist.attrs.get("sum_by_instance", {})
        counts_by = hist.attrs.get("count_by_instance", {})
        names = [str(name) for name in totals.index]
        # Plain Python values per quantile, aligned on the instances: no per-instance lookups.
        p50s, p90s, p99s = (quantiles[q].reindex(names).tolist() for q in (0.5, 0.9, 0.99))
        for key, total, p50, p90, p99 in zip(names, totals.tolist(), p50s, p90s, p99s,
                                             strict=True):  # one entry per instance
            if not total > 0:
                continue
            n_obs = counts_by.get(key, float("nan"))
            # the mean comes from _sum/_count, which are exact where the buckets are not
            mean = sums.get(key, float("nan")) / n_obs if n_obs and n_obs > 0 else float("nan")
            q = Quantiles(count=round(float(total)), mean=float(mean),
                          p50=float(p50), p90=float(p90), p99=float(p99), estimated=True)
            _set(fields, key, field, q)


def _binned_by(frame: pd.DataFrame, key: str, ts_col: str, value_col: str, start: float,
               end: float, step: float, unit: str) -> Mapping[str, TimeSeries]:
    """Mean of ``value_col`` per (key, time bin), as one regular series per key."""
    sub = frame[[key, ts_col, value_col]].dropna()
    if sub.empty:
        return {}
    n_bins = max(1, int(np.ceil((end - start) / step)))
    bins = np.clip(((sub[ts_col].to_numpy() - start) // step).astype("int64"), 0, n_bins - 1)
    grouped = sub.assign(_bin=bins).groupby([key, "_bin"], observed=True)[value_col].mean()
    table = grouped.unstack("_bin").reindex(columns=range(n_bins))
    edges = tuple(float(start + step * i) for i in range(n_bins))
    rows = table.to_numpy(dtype=np.float64).tolist()  # plain floats, row by row
    return {
        str(name): TimeSeries(ts=edges, values=tuple(row), unit=unit, step_s=float(step))
        for name, row in zip(table.index, rows, strict=True)
    }
