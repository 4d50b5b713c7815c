"""Charted transfer-path series: network rates per node from per-port counters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.analysis.series import RDMA_RETRANSMITS, RDMA_TX_BANDWIDTH, _network_rates
from pdprobe.dataset import NETWORK_COLUMNS, conform


class _Net:
    def __init__(self, network: pd.DataFrame) -> None:
        self.network = network


def _port(node: str, port: str, signal: str, start: float, values: list[float]) -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame({"ts": start + 7.0 + 15.0 * np.arange(n), "node": node, "device": "mlx5_0",
                         "port": port, "signal": signal, "kind": "counter",
                         "value": np.asarray(values, dtype=float)})


def test_two_ports_and_a_reset_never_give_a_negative_rate() -> None:
    """Two ports of one node in the same scrapes (node_exporter's infiniband collector exports
    one series per device and port; the collectors already undo counter resets per series):
    taking the node as the series interleaved the ports' samples, so the rate between a bin
    edge's two neighbours jumped between counters and went negative."""
    n = 80
    big = list(1e9 + 1e6 * np.arange(n))
    small = list(10.0 + 2 * np.arange(n))
    retx = list(np.arange(n) * 3.0)
    frames = [_port("node-a", "1", S.RDMA_TX_BYTES_TOTAL, 0.0, big),
              _port("node-a", "2", S.RDMA_TX_BYTES_TOTAL, 0.0, small),
              _port("node-a", "1", S.RDMA_OUT_OF_SEQUENCE_TOTAL, 0.0, retx),
              _port("node-a", "2", S.RDMA_OUT_OF_SEQUENCE_TOTAL, 0.0, [5.0] * n)]
    net = conform(pd.concat(frames, ignore_index=True), NETWORK_COLUMNS)
    edges = tuple(float(60 * i) for i in range(19))
    made = _network_rates(_Net(net), 0.0, 60.0, len(edges), edges)  # type: ignore[arg-type]
    series = {s.name: s for s in made}
    tx = np.array(series[RDMA_TX_BANDWIDTH].series.values, dtype=float)
    rates = np.array(series[RDMA_RETRANSMITS].series.values, dtype=float)
    assert np.nanmin(tx) >= 0 and np.nanmin(rates) >= 0
    # port 1 grows 1e6 per 15 s: ~66.7 kB/s; port 2 adds a fraction of a byte per second
    assert np.nanmedian(tx) == pytest.approx(1e6 / 15, rel=0.01)
    assert np.nanmedian(rates) == pytest.approx(3 / 15, rel=0.01)


class _Req:
    def __init__(self, requests: pd.DataFrame) -> None:
        self.requests = requests

    def has_request_column(self, name: str) -> bool:
        return name in self.requests.columns


def _pandas_latency(req: pd.DataFrame, start: float, step: float,
                    n_bins: int) -> list[tuple[str, np.ndarray]]:
    """The frame-copying pandas version the code-based one replaced, as the reference."""
    sub = req[["arrival_ts", "decode_instance", "kv_transfer_s"]].dropna(subset=["kv_transfer_s"])
    col = sub["decode_instance"]
    if isinstance(col.dtype, pd.CategoricalDtype) and col.isna().any():
        cats = col.cat.categories
        if "all" not in cats:
            col = col.cat.set_categories(sorted([*cats, "all"]))
    sub = sub.assign(decode_instance=col.fillna("all"),
                     _bin=np.clip(((sub["arrival_ts"] - start) // step).astype("int64"), 0,
                                  n_bins - 1))
    table = (sub.groupby(["decode_instance", "_bin"], observed=True)["kv_transfer_s"]
             .quantile(0.9).unstack("_bin").reindex(columns=range(n_bins)))
    return [(str(k), row) for k, row in zip(table.index, table.to_numpy(dtype=float),
                                            strict=True)]


def _frames() -> list[pd.DataFrame]:
    rng = np.random.default_rng(11)
    out = []
    for n, n_inst, sort_arrival in ((1, 1, True), (40, 3, True), (5000, 12, True),
                                    (5000, 12, False), (20000, 40, False)):
        names = [f"d{i}" for i in rng.permutation(n_inst)]  # categories not in name order
        inst = np.asarray(names, dtype=object)[rng.integers(0, n_inst, size=n)]
        kv = np.round(rng.lognormal(-4, 1, size=n), 4)  # ties
        arrival = 1000.0 + rng.uniform(0, 600, size=n)
        if sort_arrival:
            arrival.sort()
        out.append(pd.DataFrame({"arrival_ts": arrival, "kv_transfer_s": kv,
                                 "decode_instance": pd.Categorical(inst, categories=names)}))
    base = out[2]
    holes = base.copy()  # unknown instances and missing latencies
    holes.loc[holes.index[::7], "decode_instance"] = None
    holes.loc[holes.index[::5], "kv_transfer_s"] = np.nan
    out.append(holes)
    only_nan_kv = base.copy()  # an unknown instance only where the latency is missing too
    only_nan_kv.loc[only_nan_kv.index[::9], ["decode_instance", "kv_transfer_s"]] = None
    out.append(only_nan_kv)
    named_all = holes.copy()  # an instance really called "all": the unknown rows join it
    named_all["decode_instance"] = named_all["decode_instance"].cat.rename_categories(
        {named_all["decode_instance"].cat.categories[0]: "all"})
    out.append(named_all)
    strings = holes.assign(decode_instance=holes["decode_instance"].astype(object))
    out.append(strings)
    return out


def test_latency_per_instance_equals_the_pandas_groupby_quantile() -> None:
    """Codes, chunked bins and partitions give pandas' p90 per (instance, bin) bit for bit,
    in its row order: unsorted categories, unknown instances, missing latencies, an instance
    named "all", requests out of arrival order, string names."""
    from pdprobe.analysis.series import _latency_from_requests

    for frame in _frames():
        for start, step, n_bins in ((1000.0, 60.0, 10), (1010.5, 7.3, 90), (1000.0, 600.0, 1)):
            edges = tuple(start + step * i for i in range(n_bins))
            got = _latency_from_requests(_Req(frame), start, step, n_bins, edges)  # type: ignore[arg-type]
            want = _pandas_latency(frame, start, step, n_bins)
            assert [dict(s.labels)["instance"] for s in got] == [k for k, _ in want]
            for s, (_, row) in zip(got, want, strict=True):
                assert np.array_equal(np.asarray(s.series.values, dtype=float), row,
                                      equal_nan=True)


def test_missing_instance_names_join_the_series_in_name_order() -> None:
    from pdprobe.analysis.series import _latency_from_requests

    frame = pd.DataFrame({"arrival_ts": [0.0, 1.0, 2.0], "kv_transfer_s": [0.1, 0.2, 0.3],
                          "decode_instance": pd.Categorical(["d1", None, "b0"],
                                                            categories=["d1", "b0"])})
    got = _latency_from_requests(_Req(frame), 0.0, 10.0, 1, (0.0,))  # type: ignore[arg-type]
    assert [dict(s.labels)["instance"] for s in got] == ["all", "b0", "d1"]
    assert [s.series.values for s in got] == [(0.2,), (0.3,), (0.1,)]


def test_bin_bounds_of_ordered_arrivals_equal_binning_every_row() -> None:
    """Arrivals in time order take their bin bounds from a binary search of the bins; the same
    bounds as binning every row and counting (arrivals before the window, past it, on bin
    edges, one row, none)."""
    from pdprobe.analysis.series import _bin_bounds, _bins

    rng = np.random.default_rng(3)
    cases = [np.sort(rng.uniform(990.0, 1700.0, 5000)), np.array([1000.0]), np.array([]),
             np.repeat(1000.0 + 60.0 * np.arange(12), 3),  # on the edges, ties
             np.sort(np.round(rng.uniform(1000.0, 1600.0, 300)))]
    for arrival in cases:
        for start, step, n_bins in ((1000.0, 60.0, 10), (1010.5, 7.3, 90), (1000.0, 600.0, 1)):
            bounds, order = _bin_bounds(arrival, start, step, n_bins)
            bins = _bins(arrival, start, step, n_bins)
            want = np.concatenate([[0], np.cumsum(np.bincount(bins, minlength=n_bins))])
            assert order is None and np.array_equal(bounds, want)


def test_bin_bounds_out_of_order_read_the_rows_sorted_by_bin() -> None:
    from pdprobe.analysis.series import _bin_bounds, _bins

    arrival = np.array([1130.0, np.nan, 1000.0, 1070.0, 1001.0, 1500.0])
    bounds, order = _bin_bounds(arrival, 1000.0, 60.0, 5)
    bins = _bins(arrival, 1000.0, 60.0, 5)  # the NaN arrival lands in bin 0
    assert order is not None and np.array_equal(order, np.argsort(bins, kind="stable"))
    assert bounds.tolist() == [0, 3, 4, 5, 5, 6]
    # in time order but ending at infinity: binned row by row, as before
    with np.errstate(invalid="ignore"):
        arrival = np.array([1000.0, 1070.0, 1130.0, np.inf])
        bounds, order = _bin_bounds(arrival, 1000.0, 60.0, 5)
        bins = _bins(arrival, 1000.0, 60.0, 5)
    want = np.concatenate([[0], np.cumsum(np.bincount(bins, minlength=5))])
    assert np.array_equal(bounds, want)
    assert order is None if (np.diff(bins) >= 0).all() else \
        np.array_equal(order, np.argsort(bins, kind="stable"))


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 101, 2500])
def test_group_quantile_equals_pandas_linear_quantile(n: int) -> None:
    """One partition at the lower rank and the smallest value past it: pandas' p90, ties and
    fractions of zero (n = 11, 101: the rank is whole) included."""
    from pdprobe.analysis.series import _group_quantile

    rng = np.random.default_rng(n)
    for values in (rng.lognormal(size=n), np.round(rng.lognormal(size=n), 1)):
        want = pd.Series(values).quantile(0.9)
        assert _group_quantile(values.copy(), 0.9) == want


def _screened_frame(rng: np.random.Generator, n: int, fast: bool) -> pd.DataFrame:
    """Bins big enough to be screened (``SCREEN_MIN_ROWS``): 30 instances of one latency
    distribution, with ties, and with ``fast`` one instance ten times faster (its p90 below
    the screen: read from every row)."""
    names = [f"d{i}" for i in range(30)]
    codes = rng.integers(0, len(names), size=n)
    kv = np.round(rng.lognormal(-4, 1, size=n), 3)
    if fast:
        kv[codes == 7] /= 10
    frame = pd.DataFrame({"arrival_ts": np.sort(rng.uniform(1000.0, 1600.0, size=n)),
                          "kv_transfer_s": kv,
                          "decode_instance": pd.Categorical.from_codes(codes, names)})
    frame.loc[frame.index[::11], "decode_instance"] = None
    frame.loc[frame.index[::13], "kv_transfer_s"] = np.nan
    return frame


@pytest.mark.parametrize("fast", [False, True])
def test_screened_bins_equal_the_pandas_groupby_quantile(fast: bool) -> None:
    """Bins of thousands of rows group only the rows at or above their screen value; every
    p90 is still pandas' to the bit, an instance whose p90 is below the screen included."""
    from pdprobe.analysis import series
    from pdprobe.analysis.series import SCREEN_MIN_ROWS, _latency_from_requests

    rng = np.random.default_rng(5 + fast)
    frame = _screened_frame(rng, 60_000, fast)
    start, step, n_bins = 1000.0, 120.0, 5
    assert len(frame) / n_bins > 2 * SCREEN_MIN_ROWS
    edges = tuple(start + step * i for i in range(n_bins))
    calls = []
    real = series._by_code

    def counted(v: np.ndarray, c: np.ndarray, n_codes: int) -> tuple[np.ndarray, list[int]]:
        calls.append(v.size)
        return real(v, c, n_codes)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(series, "_by_code", counted)
        got = _latency_from_requests(_Req(frame), start, step, n_bins, edges)  # type: ignore[arg-type]
    want = _pandas_latency(frame, start, step, n_bins)
    assert [dict(s.labels)["instance"] for s in got] == [k for k, _ in want]
    for s, (_, row) in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(s.series.values, dtype=float), row, equal_nan=True)
    # screened: about a quarter of each bin's rows grouped, plus every row where one
    # instance's p90 is below the screen
    assert len(calls) == n_bins * (2 if fast else 1)
    assert min(calls) < len(frame) / n_bins / 3
