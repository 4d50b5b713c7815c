"""Time series worth charting that no per-instance summary carries: the KV-transfer path.

KV-transfer latency over time (per decode instance from request records, else the mean from
histogram ``_sum``/``_count`` rates), and per node the RDMA retransmission, congestion and
bandwidth rates from node_exporter's InfiniBand/RoCE counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.base import LabeledSeries, TimeSeries
from pdprobe.analysis.instances import window_of
from pdprobe.analysis.key_search import key_starts
from pdprobe.analysis.row_gather import code_counts
from pdprobe.analysis.row_slices import (
    ascending,
    chunks,
    compact_dtype,
    finite_ends,
    has_values,
)
from pdprobe.analysis.stats import series_step
from pdprobe.analysis.tables import has_signal, signal_rows
from pdprobe.dataset import Dataset

if TYPE_CHECKING:
    import pandas as pd

KV_TRANSFER_LATENCY: Final = "kv_transfer_latency_s"
RDMA_RETRANSMITS: Final = "rdma_retransmits_per_s"
RDMA_CONGESTION: Final = "rdma_cnp_per_s"
RDMA_TX_BANDWIDTH: Final = "rdma_tx_bytes_per_s"


def transfer_path_series(dataset: Dataset) -> tuple[LabeledSeries, ...]:
    """The transfer-path series over the window on one time grid (KV transfer latency per instance,
    RDMA counters per node), for the HTML report's charts."""
    window = window_of(dataset)
    if window is None:
        return ()
    start, end = window
    step = series_step(start, end)
    n_bins = max(1, int(np.ceil((end - start) / step)))
    edges = tuple(float(start + step * i) for i in range(n_bins))
    out: list[LabeledSeries] = []
    out.extend(_latency_from_requests(dataset, start, step, n_bins, edges))
    if not out:
        out.extend(_latency_from_histograms(dataset, start, step, n_bins, edges))
    out.extend(_network_rates(dataset, start, step, n_bins, edges))
    return tuple(out)


def _series(values: np.ndarray, edges: tuple[float, ...], unit: str, step: float) -> TimeSeries:
    return TimeSeries(ts=edges, values=tuple(np.asarray(values, dtype=np.float64).tolist()),
                      unit=unit, step_s=step)


def _rows(table: pd.DataFrame) -> zip[tuple[object, np.ndarray]]:
    """(index label, row values) of a float table, without building a Series per row."""
    return zip(table.index, table.to_numpy(dtype=np.float64), strict=True)


# The KV-transfer latency charted per (instance, bin): the p90 shows the jitter retransmits
# cause better than a mean would. Linear interpolation between order statistics, as pandas'
# ``groupby(...).quantile`` computes it.
LATENCY_QUANTILE: Final = 0.9
# The series' name for requests whose decode instance is unknown.
UNKNOWN_INSTANCE: Final = "all"


def _instance_codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes of the decode instance column (-1 where unknown) and their labels.

    A categorical column's own codes (no copy); any other is made categorical (labels
    sorted, as a groupby of the strings would order them).
    """
    import pandas as pd

    if not isinstance(column.dtype, pd.CategoricalDtype):
        column = column.astype("category")
    return np.asarray(column.array.codes), [str(c) for c in column.cat.categories]


def _bin_of(arrival: np.ndarray, start: float, step: float, n_bins: int) -> np.ndarray:
    """The time bin of each of ``arrival`` (int64; a NaN arrival lands in bin 0)."""
    part = np.floor_divide(arrival - start, step)
    with np.errstate(invalid="ignore"):
        return np.clip(part.astype(np.int64), 0, n_bins - 1)


def _bins(arrival: np.ndarray, start: float, step: float, n_bins: int) -> np.ndarray:
    """Each row's time bin (int16/int32), computed a chunk at a time: no full-length float
    temporary."""
    dtype = np.int16 if n_bins < np.iinfo(np.int16).max else np.int32
    out = np.empty(arrival.size, dtype=dtype)
    for rows in chunks(arrival.size):  # one 8 MB float temporary per chunk
        out[rows] = _bin_of(arrival[rows], start, step, n_bins)
    return out


def _bin_bounds(arrival: np.ndarray, start: float, step: float,
                n_bins: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Where each time bin's rows start (``n_bins + 1`` bounds) and the row order they are
    read in (None: the table's own, each bin a slice of rows).

    Arrivals in time order (the usual case) never decrease in bin, so the bounds are a binary
    search of the very bins (``key_search.key_starts``: ``_bin_of`` at a few thousand rows
    instead of every row, and no full-length bin array: 0.15 of 0.34 CPU-s at 10M rows).
    Others are binned row by row and, out of order, sorted stably by bin."""
    # (NaN times are not ascending; an infinite one has no bin of its own order)
    if arrival.size and ascending(arrival) and finite_ends(arrival):
        starts = key_starts(lambda at: _bin_of(arrival[at], start, step, n_bins), n_bins,
                            arrival.size)
        return np.append(starts, arrival.size), None
    bins = _bins(arrival, start, step, n_bins)
    per_bin = code_counts(bins, n_bins)  # a slice at a time: no intp copy of every bin
    bounds = np.concatenate([[0], np.cumsum(per_bin)])
    return bounds, None if ascending(bins) else np.argsort(bins, kind="stable")


# Only a bin's rows at or above its screen value are grouped by instance (``_bin_quantiles``):
# the screen is the SCREEN_QUANTILE of every SCREEN_STRIDE-th row of the bin, below the p90 of
# every instance not much faster than the rest of the bin (one that is has all the bin's rows
# grouped instead). Bins of fewer than SCREEN_MIN_ROWS rows group every row.
SCREEN_QUANTILE: Final = 0.75
SCREEN_STRIDE: Final = 16
SCREEN_MIN_ROWS: Final = 4096


def _order_quantile(seg: np.ndarray, idx: int, frac: float) -> float:
    """pandas' linear quantile of one group (``group_quantile``) from the two order
    statistics it reads: rank ``idx`` of ``seg`` (a scratch copy, partitioned in place, not
    sorted) and, when ``frac`` is not 0, the next one.

    One partition at the lower rank: the next order statistic is then the smallest value
    right of it (the same value a partition at both ranks puts there, at about half the
    cost: the tail past p90 is a tenth of the group)."""
    seg.partition(idx)
    val = seg[idx]
    if frac == 0.0:
        return float(val)
    next_val = seg[idx + 1:].min()
    return float(val + (next_val - val) * frac)


def _group_quantile(seg: np.ndarray, q: float) -> float:
    """pandas' linear quantile ``q`` of one group (``seg``, a scratch copy)."""
    q_idx = q * (seg.size - 1)
    return _order_quantile(seg, int(q_idx), q_idx % 1)


def _screen(v: np.ndarray) -> float:
    """The bin's screen value (``SCREEN_QUANTILE`` of a strided sample of ``v``), -inf for a
    bin too small to screen."""
    if v.size < SCREEN_MIN_ROWS:
        return -np.inf
    sample = v[::SCREEN_STRIDE].copy()
    rank = int(SCREEN_QUANTILE * (sample.size - 1))
    sample.partition(rank)
    return float(sample[rank])


def _by_code(v: np.ndarray, c: np.ndarray, n_codes: int) -> tuple[np.ndarray, list[int]]:
    """``v`` grouped by code (a scratch copy: a stable sort of the codes, ~5 ns a row, the
    costly step) and where each code's values end in it."""
    grouped = v[np.argsort(c, kind="stable")]
    return grouped, np.cumsum(np.bincount(c, minlength=n_codes)).tolist()


def _bin_quantiles(values: np.ndarray, codes: np.ndarray, rows: slice | np.ndarray,
                   unknown: int, out: np.ndarray, b: int, seen: np.ndarray) -> None:
    """``out[code, b]``: the quantile of ``values[rows]`` per instance code (NaN values left
    out; code -1 counted as ``unknown``); ``seen`` marks the codes that had a value.

    Only the rows at or above the bin's screen value (``_screen``: about a quarter of them)
    are grouped by code: each value below it is below every order statistic read, so rank
    ``k`` of a code's values is rank ``k - below`` of its screened ones (``below``: its values
    under the screen). When that rank is negative for a code (an instance much faster than
    the rest of the bin), every row is grouped too. The same order statistics, so the very
    figures, at about 60 % of the cost (10M rows in 91 bins: 0.12 -> 0.07 CPU-s)."""
    v = values[rows]
    c = codes[rows]
    ok = ~np.isnan(v)
    if not ok.all():
        v, c = v[ok], c[ok]
    if v.size == 0:
        return
    n_codes = out.shape[0]
    # the smallest type for the stable radix sort: int8 codes are one pass instead of two
    dtype = compact_dtype(n_codes)
    c = (np.where(c < 0, unknown, c) if c.min() < 0 else c).astype(dtype, copy=False)
    counts = np.bincount(c, minlength=n_codes)
    seen |= counts > 0
    floor = _screen(v)
    if floor > -np.inf:
        # (positions, then two takes: a boolean mask's gather is ~4x slower at this density)
        kept = np.flatnonzero(v >= floor)
        grouped, ends = _by_code(v.take(kept), c.take(kept), n_codes)
    else:
        grouped, ends = _by_code(v, c, n_codes)
    starts = [0, *ends[:-1]]
    below = (counts - np.diff(ends, prepend=0)).tolist()
    every: tuple[np.ndarray, list[int]] | None = None
    for g in np.flatnonzero(counts).tolist():
        q_idx = LATENCY_QUANTILE * (int(counts[g]) - 1)
        idx, frac = int(q_idx), q_idx % 1
        if idx >= below[g]:
            out[g, b] = _order_quantile(grouped[starts[g]:ends[g]], idx - below[g], frac)
            continue
        if every is None:  # the screen is above this code's rank: all the bin's rows
            every = _by_code(v, c, n_codes)
        end = every[1][g]
        out[g, b] = _order_quantile(every[0][end - int(counts[g]):end], idx, frac)


def _latency_from_requests(dataset: Dataset, start: float, step: float, n_bins: int,
                           edges: tuple[float, ...]) -> list[LabeledSeries]:
    """p90 KV-transfer latency per decode instance and bin, from the request records.

    The request columns are read in place (no frame copy): rows are binned a chunk at a time,
    each bin's rows grouped by instance code and each group's order statistics found by a
    partition. Requests without a decode instance count as the instance ``all``; series come
    in the instance category's order (all names sorted once ``all`` is added), as a pandas
    groupby of the filled column gives them.
    """
    req = dataset.requests
    if not dataset.has_request_column("kv_transfer_s"):
        return []
    if not has_values(req, "kv_transfer_s"):  # (cached: no NaN mask of every row)
        return []
    kv = req["kv_transfer_s"].to_numpy(dtype=np.float64)
    codes, labels = _instance_codes(req["decode_instance"])
    names = labels if UNKNOWN_INSTANCE in labels else [*labels, UNKNOWN_INSTANCE]
    unknown = names.index(UNKNOWN_INSTANCE)
    bounds, order = _bin_bounds(req["arrival_ts"].to_numpy(dtype=np.float64), start, step,
                                n_bins)
    first = bounds.tolist()  # (Python ints: one per bin edge, no numpy scalar per bin)
    out = np.full((len(names), n_bins), np.nan)
    seen = np.zeros(len(names), dtype=bool)
    for b in range(n_bins):
        lo, hi = first[b], first[b + 1]
        rows = slice(lo, hi) if order is None else order[lo:hi]
        _bin_quantiles(kv, codes, rows, unknown, out, b, seen)
    rank = list(range(len(names)))
    if len(names) > len(labels) and seen[unknown]:  # "all" added: categories re-sorted
        rank.sort(key=names.__getitem__)
    return [LabeledSeries(KV_TRANSFER_LATENCY, "s", (("instance", names[g]), ("stat", "p90")),
                          _series(out[g], edges, "s", step))
            for g in rank if seen[g]]


def _latency_from_histograms(dataset: Dataset, start: float, step: float, n_bins: int,
                             edges: tuple[float, ...]) -> list[LabeledSeries]:
    from pdprobe.analysis.promql import rate_series

    metrics = dataset.metrics
    if metrics.empty or not has_signal(metrics, S.KV_TRANSFER_S):
        return []
    sums = rate_series(metrics, S.KV_TRANSFER_S, step, kind=S.HSUM)
    counts = rate_series(metrics, S.KV_TRANSFER_S, step, kind=S.HCOUNT)
    if sums.empty or counts.empty:
        return []
    merged = sums.merge(counts, on=["ts", "instance"], suffixes=("_sum", "_count"))
    merged = merged[merged["rate_count"] > 0]
    merged = merged.assign(mean=merged["rate_sum"] / merged["rate_count"],
                           _bin=np.clip(((merged["ts"] - start) // step).astype("int64"), 0, n_bins - 1))
    table = (merged.groupby(["instance", "_bin"], observed=True)["mean"].mean()
             .unstack("_bin").reindex(columns=range(n_bins)))
    return [LabeledSeries(KV_TRANSFER_LATENCY, "s", (("instance", str(name)), ("stat", "mean")),
                          _series(row, edges, "s", step))
            for name, row in _rows(table)]


# Network counters are per port: a node's rate is the sum of its ports' rates. Taking the node
# as the series key would interleave the samples of different ports (and of the counter kinds)
# into one "counter" whose steps between ports read as drops and rises, drawing negative rates.
PORT_KEY: Final = ("node", "device", "port")


def _network_rates(dataset: Dataset, start: float, step: float, n_bins: int,
                   edges: tuple[float, ...]) -> list[LabeledSeries]:
    from pdprobe.analysis.promql import counter_increase_by_window

    network = dataset.network
    if network.empty:
        return []
    import pandas as pd

    bounds = np.asarray([*edges, edges[-1] + step], dtype=np.float64)
    out: list[LabeledSeries] = []
    for name, signals, unit in ((RDMA_RETRANSMITS, S.RETRANSMIT_SIGNALS, "1/s"),
                                (RDMA_CONGESTION, (S.RDMA_CNP_HANDLED_TOTAL,), "1/s"),
                                (RDMA_TX_BANDWIDTH, (S.RDMA_TX_BYTES_TOTAL,), "bytes/s")):
        # per port and counter kind: increases per bin with resets handled as Prometheus does
        parts = []
        for sig in signals:
            # Only the signal's rows (the table's cached split), not a copy of the whole table.
            rows = signal_rows(network, sig)
            if rows.empty:
                continue
            # device/port may be absent (a node-level counter): a key of its own, not a
            # dropped row
            rows = rows.assign(device=rows["device"].fillna(""), port=rows["port"].fillna(""))
            parts.append(counter_increase_by_window(rows, sig, bounds, key=PORT_KEY))
        parts = [p for p in parts if not p.empty]
        if not parts:
            continue
        increases = pd.concat(parts)
        # sum over counter kinds and ports of a node, per bin (NaN only where no port knows)
        table = (increases.groupby(level="node", sort=True).sum(min_count=1) / step
                 ).reindex(columns=range(n_bins))
        out.extend(LabeledSeries(name, unit, (("node", str(node)),),
                                 _series(row, edges, unit, step))
                   for node, row in _rows(table))
    return out
