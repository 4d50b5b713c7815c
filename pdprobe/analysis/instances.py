"""Per-instance summaries: traffic, latency, queue, KV usage and hit rate of every instance.

Request records give exact per-request figures grouped by ``prefill_instance`` /
``decode_instance``; engine metrics and logs give gauges (queue depth, KV usage) and
histogram estimates. Where both exist, request records win for latencies and metrics for
gauges. Everything is one groupby pass per signal, never a loop over rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.base import InstanceSummary, Quantiles, TimeSeries
from pdprobe.analysis.row_slices import has_values
from pdprobe.analysis.stats import figure_quantiles, grouped_quantiles, series_step
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
    # every role column's grouping at once (shared with the evidence): their samples and the
    # whole-column sample drawn from one stream
    groupings = key_groupings(req, [column for column, _latencies in roles])
    # every role column's TTFT series in one pass: the rows' bins are computed once for all
    ttft_series: list[Mapping[str, TimeSeries]] = [{} for _ in roles]
    if roles and dataset.has_request_column("ttft_s"):
        ttft_series, totals = _binned_means_by_codes(
            keys, req["arrival_ts"].to_numpy(dtype=np.float64),
            req["ttft_s"].to_numpy(dtype=np.float64), start, end, step, "s")
        # the series' cells cover every row (every arrival in a bin): their counts and sums
        # per instance are the TTFT figures' own, so a sampled grouping's figures pass over
        # the rows for the maxima alone
        for (column, _latencies), groups, found in zip(roles, groupings, totals, strict=True):
            if found is not None and groups.sampled:
                know_sums(req, column, "ttft_s", *found)
    with_hits = dataset.has_request_column("cached_tokens") and has_values(req, "cached_tokens")
    if with_hits:  # each column's sums of every role at once (when exact: ``joint_sums``)
        from pdprobe.analysis.joint_sums import group_sums_each

        for source_col in ("cached_tokens", "prompt_tokens"):
            group_sums_each(req, [column for column, _latencies in roles], source_col)
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


def _binned_means_by_codes(keys: list[tuple[np.ndarray, list[str]]], ts: np.ndarray,
                           values: np.ndarray, start: float, end: float, step: float,
                           unit: str) -> tuple[list[Mapping[str, TimeSeries]],
                                               list[tuple[np.ndarray, np.ndarray] | None]]:
    """Per key (codes, labels): the mean of ``values`` per (code, time bin) over the rows with
    a code, a time and a value, as one regular series per code with a value: ``_binned_by`` on
    integer codes, with no full-length bin, cell or mask array. Arrivals in time order (the
    usual case) are read bin by bin (``_cell_sums_by_runs``), others slice by slice
    (``_cell_sums_by_slices``): the same sums up to the last bits.

    Also per key, when every row has a time (so a bin): the non-NaN values and their sum per
    code over every row (None otherwise)."""
    from pdprobe.analysis.row_slices import ascending, finite_ends

    n_bins = max(1, int(np.ceil((end - start) / step)))
    # (NaN times are not ascending; an infinite one has no bin of its own order)
    by_runs = len(ts) > 0 and ascending(ts) and finite_ends(ts)
    cells = (_cell_sums_by_runs if by_runs else _cell_sums_by_slices)(
        keys, ts, values, start, step, n_bins)
    series = [_means(key_sums, key_counts, labels, n_bins, start, step, unit)
              for (_codes, labels), (key_sums, key_counts) in zip(keys, cells, strict=True)]
    totals: list[tuple[np.ndarray, np.ndarray] | None] = [
        (key_counts.reshape(len(labels), n_bins).sum(axis=1),
         key_sums.reshape(len(labels), n_bins).sum(axis=1)) if by_runs else None
        for (_codes, labels), (key_sums, key_counts) in zip(keys, cells, strict=True)]
    return series, totals


def _cell_sums_by_slices(keys: list[tuple[np.ndarray, list[str]]], ts: np.ndarray,
                         values: np.ndarray, start: float, step: float,
                         n_bins: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per key, the sum and count of ``values`` per (code, bin) cell (``code * n_bins + bin``)
    over the rows with a code, a time and a value, slice by slice (``grouped.chunks``; sums
    added in row order, as one bincount adds them). The time bins (a float floor division, the
    costly part) are computed once per slice for every key."""
    from pdprobe.analysis.grouped import chunks
    from pdprobe.analysis.sampling import floor_quotient  # a // b, the very bins, faster

    sums = [np.zeros(len(labels) * n_bins) for _codes, labels in keys]
    counts = [np.zeros(len(labels) * n_bins, dtype=np.int64) for _codes, labels in keys]
    for part in chunks(len(ts)):
        t, v = ts[part], values[part]
        timed = ~np.isnan(t)
        timed &= ~np.isnan(v)
        every = bool(timed.all())
        if not every:  # the rows with a time and a value (all of them: no copies)
            if not timed.any():
                continue
            t, v = t[timed], v[timed]
        bins = np.clip(floor_quotient(t - start, step).astype(np.int64), 0, n_bins - 1)
        for (codes, _labels), key_sums, key_counts in zip(keys, sums, counts, strict=True):
            c = codes[part] if every else codes[part][timed]
            ok = c >= 0
            if ok.all():
                cell, w = bins.copy(), v
            elif ok.any():  # and the rows with a code
                cell, w, c = bins[ok], v[ok], c[ok]
            else:
                continue
            cell += c.astype(np.int64) * n_bins
            np.add.at(key_sums, cell, w)
            np.add.at(key_counts, cell, 1)
    return list(zip(sums, counts, strict=True))


def _cell_sums_by_runs(keys: list[tuple[np.ndarray, list[str]]], ts: np.ndarray,
                       values: np.ndarray, start: float, step: float,
                       n_bins: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``_cell_sums_by_slices`` of times in ascending order: each bin's rows are one run, found
    by a binary search of the bins (``row_slices.key_starts``: the same floor division at a few
    hundred rows instead of every row), and each run's sums are one ``np.bincount`` over the
    joint codes of every key (``code_a * n_b + code_b``; a key's sums are its codes' sums over
    the other keys' codes: the same counts, sums up to the last bits), one pair of bincounts
    per bin instead of one per key (a quarter of the cost at 10M rows, and half of that)."""
    from pdprobe.analysis.row_slices import key_starts
    from pdprobe.analysis.sampling import floor_quotient

    if not keys:
        return []
    n = len(ts)
    starts = key_starts(lambda at: np.clip(floor_quotient(ts[at] - start, step).astype(np.int64),
                                           0, n_bins - 1), n_bins, n)
    bounds = np.append(starts, n).tolist()
    # one slot per code and one (first) for the rows without a code, per key
    widths = [len(labels) + 1 for _codes, labels in keys]
    if int(np.prod(widths)) > _JOINT_SLOTS_MAX:  # too many joint cells: key by key
        return [_key_sums_by_runs(codes, width, values, bounds, n_bins)
                for (codes, _labels), width in zip(keys, widths, strict=True)]
    slots = int(np.prod(widths))
    # sum over the keys of (code + 1) * stride: the codes' combination plus one per stride
    offset = sum(int(np.prod(widths[k + 1:])) for k in range(len(widths)))
    sums = np.zeros((n_bins, slots))
    counts = np.zeros((n_bins, slots), dtype=np.int64)
    for b in range(n_bins):
        lo, hi = bounds[b], bounds[b + 1]
        if hi <= lo:
            continue
        v = values[lo:hi]
        nan = np.isnan(v)
        ok = ~nan if nan.any() else None
        if ok is not None:
            v = v[ok]
        slot = None
        for (codes, _labels), width in zip(keys, widths, strict=True):
            c = codes[lo:hi] if ok is None else codes[lo:hi][ok]
            if slot is None:
                slot = c.astype(np.intp)
            else:
                slot *= width
                slot += c
        assert slot is not None
        slot += offset  # every key's code + 1: slot 0 for none
        sums[b] = np.bincount(slot, weights=v, minlength=slots)
        counts[b] = np.bincount(slot, minlength=slots)
    out = []
    shape = (n_bins, *widths)
    for k in range(len(keys)):
        others = tuple(axis + 1 for axis in range(len(keys)) if axis != k)
        key_sums = sums.reshape(shape).sum(axis=others)  # (bins, slots of key k)
        key_counts = counts.reshape(shape).sum(axis=others)
        out.append((key_sums.T[1:].ravel(), key_counts.T[1:].ravel()))
    return out


# Joint (code, code, ...) slots ``_cell_sums_by_runs`` counts per bin at most (two keys of
# 120 and 40 instances: 5,000); more take a pass per key.
_JOINT_SLOTS_MAX: Final = 1 << 16


def _key_sums_by_runs(codes: np.ndarray, width: int, values: np.ndarray, bounds: list[int],
                      n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``_cell_sums_by_runs`` of one key whose joint slots would be too many."""
    sums = np.zeros((width, n_bins))
    counts = np.zeros((width, n_bins), dtype=np.int64)
    for b in range(n_bins):
        lo, hi = bounds[b], bounds[b + 1]
        if hi <= lo:
            continue
        v = values[lo:hi]
        nan = np.isnan(v)
        c = codes[lo:hi]
        if nan.any():
            v, c = v[~nan], c[~nan]
        slot = c.astype(np.intp)
        slot += 1
        sums[:, b] = np.bincount(slot, weights=v, minlength=width)
        counts[:, b] = np.bincount(slot, minlength=width)
    return sums[1:].ravel(), counts[1:].ravel()


def _means(sums: np.ndarray, counts: np.ndarray, labels: list[str], n_bins: int, start: float,
           step: float, unit: str) -> Mapping[str, TimeSeries]:
    """One regular series of ``sums / counts`` per label with a count, per (label, bin) cell."""
    if not counts.any():
        return {}
    cell_sums = sums.reshape(len(labels), n_bins)
    cell_counts = counts.reshape(len(labels), n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(cell_counts > 0, cell_sums / np.maximum(cell_counts, 1), np.nan)
    edges = tuple(float(start + step * i) for i in range(n_bins))
    rows = np.flatnonzero(cell_counts.any(axis=1))
    return {labels[r]: TimeSeries(ts=edges, values=tuple(means[r].tolist()), unit=unit,
                                  step_s=float(step))
            for r in rows.tolist()}


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
