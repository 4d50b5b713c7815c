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


def _filled(column: pd.Series, value: str) -> pd.Series:
    """``column.fillna(value)``; a categorical gets ``value`` as a category first (kept in
    name order, so groups sort as the strings would)."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype) and column.isna().any():
        cats = column.cat.categories
        if value not in cats:
            column = column.cat.set_categories(sorted([*cats, value]))
    return column.fillna(value)


def _latency_from_requests(dataset: Dataset, start: float, step: float, n_bins: int,
                           edges: tuple[float, ...]) -> list[LabeledSeries]:
    req = dataset.requests
    if not dataset.has_request_column("kv_transfer_s") or req["kv_transfer_s"].isna().all():
        return []
    sub = req[["arrival_ts", "decode_instance", "kv_transfer_s"]].dropna(subset=["kv_transfer_s"])
    sub = sub.assign(decode_instance=_filled(sub["decode_instance"], "all"),
                     _bin=np.clip(((sub["arrival_ts"] - start) // step).astype("int64"), 0, n_bins - 1))
    # p90 per bin shows the jitter retransmits cause better than a mean would
    table = (sub.groupby(["decode_instance", "_bin"], observed=True)["kv_transfer_s"].quantile(0.9)
             .unstack("_bin").reindex(columns=range(n_bins)))
    return [LabeledSeries(KV_TRANSFER_LATENCY, "s", (("instance", str(name)), ("stat", "p90")),
                          _series(row, edges, "s", step))
            for name, row in _rows(table)]


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
