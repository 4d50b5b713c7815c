"""Per-bin request series of the cluster table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pdprobe.analysis.evidence.model import Window
from pdprobe.analysis.evidence.series import _request_series
from pdprobe.values import Missing
from tests.rules.builders import make_dataset


def _series_of(arrival: np.ndarray, **columns: np.ndarray
               ) -> tuple[Window, pd.DataFrame, np.ndarray]:
    """``_request_series`` of requests arriving at ``arrival`` (plus ``columns``) over 300 s in
    30 s bins: the window, the per-bin frame and each request's bin."""
    requests = pd.DataFrame({"arrival_ts": arrival, "prompt_tokens": 100, "output_tokens": 10,
                             **columns})
    window = Window(0.0, 300.0, 30.0)
    out = pd.DataFrame(index=pd.Index(window.bin_ts, name="ts"))
    _request_series(make_dataset(requests), window, out)
    return window, out, np.clip(np.floor(arrival / 30.0), 0, window.n_bins - 1)


def test_transfer_seconds_per_gb_median_per_bin() -> None:
    """The per-bin median of 1e9 * kv_transfer_s / kv_bytes (records without bytes, or 0
    bytes, left out), and the per-bin byte rate."""
    rng = np.random.default_rng(6)
    n = 600
    arrival = np.sort(rng.uniform(0.0, 300.0, n))
    kv = rng.uniform(1e6, 5e8, n)
    kv[::7] = 0.0
    kv[::11] = np.nan
    xfer = rng.uniform(0.001, 0.2, n)
    window, out, bins = _series_of(arrival, kv_bytes=kv, kv_transfer_s=xfer)
    per_gb = pd.Series(1e9 * xfer / np.where(kv > 0, kv, np.nan))
    want = per_gb.groupby(bins).median().reindex(range(window.n_bins))
    np.testing.assert_array_equal(out["xfer_s_per_gb_p50"].to_numpy(), want.to_numpy())
    rate = pd.Series(kv).groupby(bins).sum(min_count=1).reindex(range(window.n_bins)) / 30.0
    np.testing.assert_allclose(out["kv_bytes_per_s"].to_numpy(), rate.to_numpy(), rtol=1e-12)



def test_ttft_median_and_p90_per_bin_from_one_sort() -> None:
    """TTFT p50 and p90 per bin (read off one sort) are pandas' grouped median and linear
    quantile, NaN rows left out, and the columns keep their order."""
    rng = np.random.default_rng(8)
    n = 500
    arrival = np.sort(rng.uniform(0.0, 300.0, n))
    ttft = rng.lognormal(-1.0, 0.8, n)
    ttft[::9] = np.nan
    queue = rng.uniform(0.0, 0.5, n)
    window, out, bins = _series_of(arrival, ttft_s=ttft, queue_s=queue)
    grouped = pd.Series(ttft).groupby(bins)
    np.testing.assert_array_equal(out["ttft_p50"].to_numpy(),
                                  grouped.median().reindex(range(window.n_bins)).to_numpy())
    np.testing.assert_array_equal(out["ttft_p90"].to_numpy(),
                                  grouped.quantile(0.9).reindex(range(window.n_bins)).to_numpy())
    np.testing.assert_array_equal(
        out["queue_s_p50"].to_numpy(),
        pd.Series(queue).groupby(bins).median().reindex(range(window.n_bins)).to_numpy())
    named = [c for c in out.columns if c.endswith(("_p50", "_p90"))]
    assert named == ["queue_s_p50", "ttft_p50", "ttft_p90"]

def test_alive_bins_from_requests_span_first_to_last_named_bin(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An instance named by requests is alive from the first to the last bin naming it, in
    either role column, slices of any size; rows naming no instance, or one outside the
    index, and rows outside the window mark nothing."""
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.evidence.series import alive_bins

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 7)
    arrival = np.array([5.0, 35.0, 95.0, 15.0, 65.0, 250.0, 40.0, np.nan, 120.0, 130.0])
    prefill = [None, "p1", "p1", "p2", None, "p2", "zz", "p2", None, None]
    decode = ["d1", None, "d1", None, "d1", None, None, None, "d1", None]
    requests = pd.DataFrame({"arrival_ts": arrival, "prompt_tokens": 10, "output_tokens": 2,
                             "prefill_instance": pd.Categorical(prefill),
                             "decode_instance": pd.Categorical(decode)})
    window = Window(0.0, 200.0, 30.0)  # 250.0 is outside
    index = pd.Index(["d1", "p1", "p2"])
    alive = alive_bins(make_dataset(requests), window, index)
    spans = {"d1": (0, 4), "p1": (1, 3), "p2": (0, 0)}
    for name, (first, last) in spans.items():
        want = np.zeros(window.n_bins)
        want[first:last + 1] = 1.0
        np.testing.assert_array_equal(alive[name].to_numpy(), want, err_msg=name)


def test_queue_median_per_bin_of_tied_waits() -> None:
    """Waits are mostly 0 (read off each bin's sorted values): pandas' grouped median, with
    NaN rows left out, and NaN for a bin without any wait."""
    rng = np.random.default_rng(9)
    n = 400
    arrival = np.sort(rng.uniform(0.0, 300.0, n))
    arrival[(arrival >= 60.0) & (arrival < 90.0)] = 75.0  # bin 2: every wait NaN below
    queue = np.where(rng.random(n) < 0.6, 0.0, rng.exponential(0.2, n))
    queue[::13] = np.nan
    queue[(arrival >= 60.0) & (arrival < 90.0)] = np.nan
    window, out, bins = _series_of(arrival, queue_s=queue)
    want = pd.Series(queue).groupby(bins).median().reindex(range(window.n_bins))
    np.testing.assert_array_equal(out["queue_s_p50"].to_numpy(), want.to_numpy())
    assert np.isnan(out["queue_s_p50"].to_numpy()[2])


def test_alive_bins_from_the_request_counts_per_cell() -> None:
    """Arrivals in time order inside the window: the cells named by the requests are read off
    the per-cell request counts, the same alive bins as a pass over the rows; arrivals out of
    order, outside the window or NaN: the rows are read."""
    from pdprobe.analysis.evidence.build import compute_evidence
    from pdprobe.analysis.evidence.series import _counted_cells, alive_bins

    rng = np.random.default_rng(10)
    n = 300
    arrival = np.sort(rng.uniform(0.0, 200.0, n))
    prefill = rng.choice(np.array(["p1", "p2", "p3", "zz", None], dtype=object), n)
    prefill[arrival > 120.0] = np.where(prefill[arrival > 120.0] == "p3", None,
                                        prefill[arrival > 120.0])  # p3 stops early
    decode = rng.choice(np.array(["d1", "d2", None], dtype=object), n)
    decode[arrival < 50.0] = None  # the decode column names nobody at first
    requests = pd.DataFrame({"arrival_ts": arrival, "prompt_tokens": 10, "output_tokens": 2,
                             "prefill_instance": pd.Categorical(prefill),
                             "decode_instance": pd.Categorical(decode)})
    ds = make_dataset(requests)
    evidence = compute_evidence(ds, workload=Missing("x"), slo=Missing("x"),
                                capacity=Missing("x"))
    window, index = evidence.window, evidence.instances.index
    pos = {name: i for i, name in enumerate(index.astype(str))}
    assert _counted_cells(ds, window, pos, len(index), evidence.bins) is not None
    rows = alive_bins(ds, window, index)
    pd.testing.assert_frame_equal(alive_bins(ds, window, index, evidence.bins), rows)
    assert rows.to_numpy().any() and not rows.to_numpy().all()
    for changed in (arrival[::-1].copy(), np.append(arrival[:-1], 250.0),
                    np.append(arrival[:-1], np.nan)):
        other = make_dataset(requests.assign(arrival_ts=changed))
        assert _counted_cells(other, window, pos, len(index), evidence.bins) is None


def test_arrivals_in_order_checked_once_per_table() -> None:
    """Arrivals that never decrease (no NaN) are in order; the answer is kept per table."""
    from pdprobe.analysis.evidence.columns import arrivals_in_order
    from pdprobe.analysis.table_cache import table_cache

    def ds_of(arrival: list[float]):  # type: ignore[no-untyped-def]
        return make_dataset(pd.DataFrame({"arrival_ts": arrival, "prompt_tokens": 10,
                                          "output_tokens": 2}))

    ordered = ds_of([1.0, 2.0, 2.0, 5.0])
    assert arrivals_in_order(ordered)
    assert table_cache(ordered.requests)[("ascending", "arrival_ts")] is True
    assert not arrivals_in_order(ds_of([1.0, 3.0, 2.0]))
    assert not arrivals_in_order(ds_of([1.0, float("nan"), 2.0]))
