"""Per-instance summaries from request records and from metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.analysis.instances import summarize_instances
from pdprobe.collectors.fuse import fuse
from pdprobe.dataset import ROLE_FROM_LABEL, Partial, RoleHint, SourceInfo
from pdprobe.values import Missing


def _requests(n: int = 400, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    decode = np.where(np.arange(n) % 10 < 4, "d0", np.where(np.arange(n) % 10 < 7, "d1", "d2"))
    return pd.DataFrame({
        "arrival_ts": 1_700_000_000 + np.sort(rng.uniform(0, 600, n)),
        "prompt_tokens": rng.integers(100, 2000, n),
        "output_tokens": rng.integers(10, 300, n),
        "cached_tokens": np.where(decode == "d2", 0.0, 50.0),
        "prefill_instance": np.where(np.arange(n) % 2 == 0, "p0", "p1"),
        "decode_instance": decode,
        "ttft_s": np.where(decode == "d0", 2.0, 0.5),
        "tpot_s": np.linspace(0.02, 0.04, n),
        "queue_s": 0.1,
    })


def _dataset(requests: pd.DataFrame | None = None, metrics: pd.DataFrame | None = None):
    hints = []
    names = set()
    if requests is not None:
        names |= {(n, "prefill") for n in requests["prefill_instance"].unique()}
        names |= {(n, "decode") for n in requests["decode_instance"].unique()}
    if metrics is not None:
        names |= {(n, "decode" if n.startswith("d") else "prefill") for n in metrics["instance"].unique()}
    hints = [RoleHint(n, r, "test", ROLE_FROM_LABEL) for n, r in names]  # type: ignore[arg-type]
    part = Partial(source=SourceInfo("t", "x", "x", 0), requests=requests, metrics=metrics,
                   role_hints=tuple(hints),
                   request_columns=frozenset(requests.columns) if requests is not None else frozenset())
    return fuse([part])


def test_request_based_summaries() -> None:
    summaries = {s.name: s for s in summarize_instances(_dataset(_requests()))}
    assert [s.role for s in summaries.values()] == ["prefill", "prefill", "decode", "decode", "decode"]
    d0 = summaries["d0"]
    assert d0.requests == 160 and d0.traffic_share == pytest.approx(0.4)
    assert d0.ttft_s.p50 == pytest.approx(2.0)  # type: ignore[union-attr]
    assert summaries["d1"].ttft_s.p90 == pytest.approx(0.5)  # type: ignore[union-attr]
    assert summaries["d2"].prefix_hit_ratio == 0.0
    assert summaries["p0"].queue_s.p50 == pytest.approx(0.1)  # type: ignore[union-attr]
    assert isinstance(summaries["p0"].tpot_s, Missing)  # TPOT belongs to decode instances
    assert d0.ttft_series is not None and np.nanmax(d0.ttft_series.values) == pytest.approx(2.0)


def _gauge(instance: str, signal: str, values: list[float], t0: float = 1_700_000_000.0) -> pd.DataFrame:
    return pd.DataFrame({"ts": t0 + 15.0 * np.arange(len(values)), "instance": instance,
                         "signal": signal, "kind": S.GAUGE, "le": np.nan, "value": values})


def _counter(instance: str, signal: str, values: list[float]) -> pd.DataFrame:
    return _gauge(instance, signal, values).assign(kind=S.COUNTER)


def test_metric_based_summaries_and_histograms() -> None:
    les = [0.1, 0.5, 1.0, float("inf")]
    hist_rows = []
    for step, counts in enumerate(([0, 0, 0, 0], [10, 60, 90, 100])):
        for le, c in zip(les, counts, strict=True):
            hist_rows.append({"ts": 1_700_000_000.0 + 15 * step, "instance": "d0", "signal": S.TTFT_S,
                              "kind": S.BUCKET, "le": le, "value": float(c)})
        hist_rows.append({"ts": 1_700_000_000.0 + 15 * step, "instance": "d0", "signal": S.TTFT_S,
                          "kind": S.HSUM, "le": np.nan, "value": 0.0 if step == 0 else 42.0})
        hist_rows.append({"ts": 1_700_000_000.0 + 15 * step, "instance": "d0", "signal": S.TTFT_S,
                          "kind": S.HCOUNT, "le": np.nan, "value": 0.0 if step == 0 else 100.0})
    metrics = pd.concat([
        _gauge("d0", S.REQUESTS_WAITING, [0, 2, 4, 6, 8]),
        _gauge("d0", S.KV_USAGE_RATIO, [0.5, 0.6, 0.7, 0.8, 0.9]),
        _counter("d0", S.PREFIX_HITS_TOTAL, [0, 10, 20, 30, 40]),
        _counter("d0", S.PREFIX_QUERIES_TOTAL, [0, 100, 200, 300, 400]),
        _counter("p0", S.PROMPT_TOKENS_TOTAL, [0, 1500, 3000, 4500, 6000]),
        pd.DataFrame(hist_rows),
    ], ignore_index=True)
    summaries = {s.name: s for s in summarize_instances(_dataset(metrics=metrics))}
    d0 = summaries["d0"]
    assert d0.queue_depth.p50 == 4.0 and d0.queue_depth.max == 8.0  # type: ignore[union-attr]
    assert d0.kv_usage_ratio.mean == pytest.approx(0.7)  # type: ignore[union-attr]
    assert d0.prefix_hit_ratio == pytest.approx(0.1)
    ttft = d0.ttft_s
    assert not isinstance(ttft, Missing) and ttft.estimated
    assert ttft.p50 == pytest.approx(0.1 + 0.4 * (50 - 10) / 50)  # inside the (0.1, 0.5] bucket
    assert ttft.mean == pytest.approx(0.42)  # from _sum/_count, exact
    assert summaries["p0"].prompt_tokens_per_s == pytest.approx(6000 / 60)
    assert isinstance(summaries["p0"].requests, Missing)  # no request records name it


@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_binned_ttft_means_equal_pandas(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Per-instance TTFT series from slices equal pandas' mean per (instance, bin), with rows
    missing their instance, time or TTFT left out."""
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.instance_series import binned_means_by_codes

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(4)
    n = 211
    codes = rng.integers(-1, 3, n).astype(np.int8)
    ts = rng.uniform(0.0, 100.0, n)
    ts[::17] = np.nan
    values = rng.lognormal(size=n)
    values[::13] = np.nan
    got = binned_means_by_codes([(codes, ["a", "b", "c"])], ts, values, 0.0, 100.0, 15.0,
                                 "s")[0][0]
    frame = pd.DataFrame({"code": codes, "bin": np.clip((ts - 0.0) // 15.0, 0, 6), "v": values})
    frame = frame[(frame["code"] >= 0) & frame["bin"].notna() & frame["v"].notna()]
    want = frame.groupby(["code", "bin"])["v"].mean()
    assert sorted(got) == ["a", "b", "c"]
    for (code, b), mean in want.items():
        assert got["abc"[int(code)]].values[int(b)] == pytest.approx(mean, rel=1e-12)
    assert sum(np.isfinite(s.values).sum() for s in got.values()) == len(want)


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_binned_means_of_two_keys_in_one_pass_equal_each_alone(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Two role columns' TTFT series from one pass (bins computed once) are, to the bit, each
    column's own pass: rows without a code in one column still count in the other."""
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.instance_series import binned_means_by_codes

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(9)
    n = 307
    first = rng.integers(-1, 3, n).astype(np.int8)
    second = rng.integers(0, 4, n).astype(np.int16)
    second[::23] = -1
    ts = rng.uniform(0.0, 100.0, n)
    ts[::19] = np.nan
    values = rng.lognormal(size=n)
    values[::11] = np.nan
    keys = [(first, ["a", "b", "c"]), (second, ["w", "x", "y", "z"])]
    both, totals = binned_means_by_codes(keys, ts, values, 0.0, 100.0, 15.0, "s")
    assert totals == [None, None]  # (times missing: not every row counted)
    assert len(both) == 2
    for (codes, labels), got in zip(keys, both, strict=True):
        alone = binned_means_by_codes([(codes, labels)], ts, values, 0.0, 100.0, 15.0,
                                       "s")[0][0]
        assert got == alone
        frame = pd.DataFrame({"code": codes, "bin": np.clip(ts // 15.0, 0, 6), "v": values})
        frame = frame[(frame["code"] >= 0) & frame["bin"].notna() & frame["v"].notna()]
        want = frame.groupby(["code", "bin"])["v"].mean()
        assert sorted(got) == sorted(labels[int(c)] for c in frame["code"].unique())
        for (code, b), mean in want.items():
            assert got[labels[int(code)]].values[int(b)] == pytest.approx(mean, rel=1e-12)



@pytest.mark.parametrize("seed", range(4))
def test_cell_sums_of_times_in_order_are_the_sliced_sums(seed: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrivals in time order are summed bin run by bin run: the counts of the slice-by-slice
    pass and its sums (to the bit for one key or key by key, to 1e-12 over the joint codes of
    two keys; rows without a code or a value left out, empty bins, times past the window's end
    clipped into the last bin, a bin edge hit exactly)."""
    from pdprobe.analysis import instance_series
    from pdprobe.analysis.instance_series import (
        _cell_sums_by_runs,
        _cell_sums_by_slices,
        binned_means_by_codes,
    )

    rng = np.random.default_rng(seed)
    n = 997
    ts = rng.uniform(-5.0, 110.0, n)
    ts[ts > 40.0] += 20.0  # a gap: bins without rows
    ts[:3] = 30.0  # on a bin edge, three times
    ts.sort()
    first = rng.integers(-1, 3, n).astype(np.int8)
    second = rng.integers(0, 200, n).astype(np.int16)
    second[::7] = -1
    values = rng.lognormal(size=n)
    values[rng.random(n) < 0.2 * (seed % 2)] = np.nan
    keys = [(first, ["a", "b", "c"]), (second, [f"i{k}" for k in range(200)])]
    n_bins = int(np.ceil(120.0 / 15.0))
    runs = _cell_sums_by_runs(keys, ts, values, 0.0, 15.0, n_bins)
    slices = _cell_sums_by_slices(keys, ts, values, 0.0, 15.0, n_bins)
    for (run_sums, run_counts), (sums, counts) in zip(runs, slices, strict=True):
        assert run_sums.dtype == sums.dtype and run_counts.dtype == counts.dtype
        np.testing.assert_allclose(run_sums, sums, rtol=1e-12)
        assert np.array_equal(run_counts, counts)
        assert counts.sum() > 0
    for key in keys:  # one key: its own bincounts, to the bit
        (run_sums, run_counts), = _cell_sums_by_runs([key], ts, values, 0.0, 15.0, n_bins)
        (sums, counts), = _cell_sums_by_slices([key], ts, values, 0.0, 15.0, n_bins)
        assert np.array_equal(run_sums, sums) and np.array_equal(run_counts, counts)
    with monkeypatch.context() as patch:  # too many joint slots: key by key, to the bit
        patch.setattr(instance_series, "_JOINT_SLOTS_MAX", 100)
        for (run_sums, run_counts), (sums, counts) in zip(
                _cell_sums_by_runs(keys, ts, values, 0.0, 15.0, n_bins), slices, strict=True):
            assert np.array_equal(run_sums, sums) and np.array_equal(run_counts, counts)
    # the dispatcher takes the runs for sorted times and the slices otherwise: the same series
    shuffled = rng.permutation(n)
    a, totals = binned_means_by_codes(keys, ts, values, 0.0, 120.0, 15.0, "s")
    b = binned_means_by_codes([(c[shuffled], labels) for c, labels in keys], ts[shuffled],
                               values[shuffled], 0.0, 120.0, 15.0, "s")[0]
    # in time order every row has a bin: per code, the non-NaN values and their sum
    for (codes, labels), found in zip(keys, totals, strict=True):
        assert found is not None
        counts, sums = found
        have = ~np.isnan(values)
        for code in range(len(labels)):
            rows = have & (codes == code)
            assert counts[code] == rows.sum()
            assert sums[code] == pytest.approx(values[rows].sum(), rel=1e-12)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for name in x:
            np.testing.assert_allclose(x[name].values, y[name].values, rtol=1e-12)
    empty = _cell_sums_by_runs(keys, ts[:0], values[:0], 0.0, 15.0, n_bins)
    assert all(not s.any() and not c.any() for s, c in empty)
    # an infinite last time is ascending but has no bin in the times' order: the slices
    infinite = np.append(ts[:-1], np.inf)
    with np.errstate(invalid="ignore"):  # (the infinite time's bin: a NaN cast, clipped)
        via = binned_means_by_codes(keys, infinite, values, 0.0, 120.0, 15.0, "s")[0]
        want = binned_means_by_codes([(c[shuffled], labels) for c, labels in keys],
                                      infinite[shuffled], values[shuffled], 0.0, 120.0, 15.0,
                                      "s")[0]
    for x, y in zip(via, want, strict=True):
        assert x.keys() == y.keys()
        for name in x:
            np.testing.assert_allclose(x[name].values, y[name].values, rtol=1e-12)


def test_window_span_is_pandas_min_and_max() -> None:
    """The window's first and last times (numpy's min and max, cached per table) are pandas'
    ``min()`` and ``max()``: NaN skipped, all-NaN columns NaN, integer columns."""
    from pdprobe.analysis.instances import _span

    rng = np.random.default_rng(3)
    ts = rng.uniform(1e9, 2e9, 1_000)
    with_nan = ts.copy()
    with_nan[[0, 17, 999]] = np.nan
    frame = pd.DataFrame({"a": ts, "b": with_nan, "c": np.full(1_000, np.nan),
                          "d": rng.integers(0, 10**12, 1_000)})
    for column in "abcd":
        lo, hi = _span(frame, column)
        want = float(frame[column].min()), float(frame[column].max())
        np.testing.assert_array_equal([lo, hi], want)
    assert _span(frame, "b") is _span(frame, "b")  # cached
