"""Tests for pdprobe/analysis/workload.py: trace statistics and shapes from request records
(the histogram fallback: test_workload_metrics.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.base import LengthDistribution, WorkloadSummary
from pdprobe.analysis.length_shape import classify_shape, is_bimodal, length_distribution
from pdprobe.analysis.workload import default_bin_s, summarize_workload
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.requests_file import read_requests
from pdprobe.dataset import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    REQUEST_COLUMNS,
    Dataset,
    InstanceInfo,
    conform,
    empty_frame,
)
from pdprobe.values import Missing


def _summary(dataset: Dataset, bin_s: float | None = None) -> WorkloadSummary:
    result = summarize_workload(dataset, bin_s)
    assert isinstance(result, WorkloadSummary), result
    return result


def _dist(value: object) -> LengthDistribution:
    assert isinstance(value, LengthDistribution), value
    return value


# The figures published with the public traces (the README beside them): requests, span, arrival rate,
# input mean/p50/p90/p99/max, output mean/p50/p90/p99/max.
TRACE_TABLE = [
    ("AzureLLMInferenceTrace_code.csv", 8819, 3435.9, 2.567,
     (2047.8, 1469, 5187.6, 7436, 7437), (27.9, 13, 55, 251.5, 1899)),
    ("AzureLLMInferenceTrace_conv.csv", 19366, 3501.7, 5.530,
     (1154.7, 1020, 2734.5, 4142, 14050), (211.1, 129, 424, 601, 1000)),
    ("mooncake_conversation_trace.jsonl", 12031, 3537.0, 3.401,
     (12035.1, 6909, 27367, 85400.4, 126195), (342.6, 350, 597, 1118.5, 2000)),
    ("mooncake_synthetic_trace.jsonl", 3993, 1022.0, 3.907,
     (15325.5, 11587, 38611.2, 66456.2, 191378), (149.1, 69, 389, 768.1, 893)),
]


def _printed(expected: float) -> float:
    """Half a unit of the last printed digit."""
    text = repr(float(expected)) if not float(expected).is_integer() else "1"
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10 ** -decimals + 1e-9


@pytest.mark.parametrize(("name", "count", "span", "rate", "inp", "out"), TRACE_TABLE)
def test_public_traces_match_readme(traces_dir: Path, name: str, count: int, span: float,
                                    rate: float, inp: tuple[float, ...],
                                    out: tuple[float, ...]) -> None:
    dataset = fuse([read_requests(traces_dir / name, ReadContext())])
    summary = _summary(dataset)
    assert summary.requests == count
    assert summary.source == "request records"
    assert summary.window_end_ts - summary.window_start_ts == pytest.approx(span, abs=0.05)
    assert summary.arrival_rate_rps == pytest.approx(rate, abs=0.0005)
    for dist, expected in ((_dist(summary.prompt_tokens), inp),
                           (_dist(summary.output_tokens), out)):
        q = dist.quantiles
        assert not q.estimated and q.count == count
        for got, want in zip((q.mean, q.p50, q.p90, q.p99, q.max), expected, strict=True):
            assert got == pytest.approx(want, abs=_printed(want)), (name, expected)


def test_public_trace_shapes(traces_dir: Path) -> None:
    shapes = {}
    for name, *_ in TRACE_TABLE:
        summary = _summary(fuse([read_requests(traces_dir / name, ReadContext())]))
        shapes[name] = (_dist(summary.prompt_tokens).shape, _dist(summary.output_tokens).shape)
    # Azure conv prompts cluster around templates and its outputs have two peaks (~90 and ~390
    # tokens); Mooncake synthetic mixes short chat turns with long documents.
    assert shapes["AzureLLMInferenceTrace_conv.csv"] == ("bimodal", "bimodal")
    assert shapes["mooncake_synthetic_trace.jsonl"][0] == "bimodal"
    # p99/p50 = 19 for Azure code outputs, 12.4 for Mooncake conversation prompts.
    assert shapes["AzureLLMInferenceTrace_code.csv"] == ("wide", "heavy-tailed")
    assert shapes["mooncake_conversation_trace.jsonl"] == ("heavy-tailed", "wide")


# --- request records: the derived numbers ---------------------------------------------------


def _dataset(requests: pd.DataFrame, columns: set[str] | None = None,
             metrics: pd.DataFrame | None = None,
             instances: tuple[InstanceInfo, ...] = ()) -> Dataset:
    return Dataset(
        requests=conform(requests, REQUEST_COLUMNS) if len(requests) else empty_frame(
            REQUEST_COLUMNS),
        metrics=conform(metrics, METRIC_COLUMNS) if metrics is not None else empty_frame(
            METRIC_COLUMNS),
        network=empty_frame(NETWORK_COLUMNS),
        events=empty_frame(EVENT_COLUMNS),
        instances=instances,
        sources=(),
        request_columns=frozenset(columns if columns is not None else requests.columns),
    )


def test_request_derived_numbers() -> None:
    n = 101  # one arrival per second over 100 s
    prompt = np.arange(1, n + 1) * 10
    req = pd.DataFrame({
        "arrival_ts": 1000.0 + np.arange(n),
        "prompt_tokens": prompt,
        "output_tokens": prompt // 2 + 1,  # monotonic in prompt: Spearman 1
        "cached_tokens": np.where(np.arange(n) % 2 == 0, prompt / 2, np.nan),
        "e2e_s": np.full(n, 10.0),
        "status": ["error", "timeout", "aborted", "error"] + ["ok"] * 96 + [None],
    })
    summary = _summary(_dataset(req))
    assert summary.requests == 101
    assert summary.arrival_rate_rps == pytest.approx(1.01)
    assert summary.offered_rate_rps == pytest.approx(1.01)
    assert summary.arrival_cv2 == pytest.approx(0.0)
    assert summary.prompt_output_corr == pytest.approx(1.0)
    assert summary.cached_fraction == pytest.approx(0.5)
    assert summary.failed_requests == 4
    # finish = arrival + 10 s; inside [1000, 1100]: arrivals 1000..1090 -> 91, less 4 failed
    assert summary.completed_rate_rps == pytest.approx(87 / 100)
    series = summary.arrival_series
    assert series is not None
    assert series.step_s == pytest.approx(10.0)  # default: 100 s / 60 clamped to 10 s
    assert len(series.values) == 10
    assert series.values[0] == pytest.approx(1.0) and series.values[-1] == pytest.approx(1.1)
    assert sum(v * series.step_s for v in series.values) == pytest.approx(101)


def test_missing_optional_columns_give_reasons() -> None:
    req = pd.DataFrame({"arrival_ts": [1.0, 2.0, 4.0, 8.0], "prompt_tokens": [5, 5, 5, 5],
                        "output_tokens": [1, 2, 3, 4]})
    summary = _summary(_dataset(req))
    assert summary.cached_fraction == Missing("no cached_tokens column in request records")
    assert summary.completed_rate_rps == Missing("no e2e_s column in request records")
    assert summary.prompt_output_corr == Missing("prompt or output length is constant")
    gaps = np.array([1.0, 2.0, 4.0])
    assert summary.arrival_cv2 == pytest.approx(gaps.var() / gaps.mean() ** 2)
    assert summary.failed_requests == 0


def test_single_instant_has_no_rate() -> None:
    req = pd.DataFrame({"arrival_ts": [5.0, 5.0], "prompt_tokens": [1, 2],
                        "output_tokens": [1, 2]})
    summary = _summary(_dataset(req))
    assert summary.requests == 2
    assert isinstance(summary.arrival_rate_rps, Missing)
    assert "one instant" in summary.arrival_rate_rps.reason
    assert isinstance(summary.offered_rate_rps, Missing)
    assert summary.arrival_series is None


def test_explicit_bin_and_bad_bin() -> None:
    req = pd.DataFrame({"arrival_ts": np.linspace(0, 600, 601), "prompt_tokens": 1,
                        "output_tokens": 1})
    summary = _summary(_dataset(req), bin_s=60.0)
    assert summary.arrival_series is not None and summary.arrival_series.step_s == 60.0
    with pytest.raises(ValueError, match="bin_s"):
        summarize_workload(_dataset(req), bin_s=0)


def test_default_bin_is_clamped() -> None:
    assert default_bin_s(60.0) == 10.0
    assert default_bin_s(3600.0) == 60.0
    assert default_bin_s(86400.0) == 300.0


# --- shapes ---------------------------------------------------------------------------------


def test_shape_labels_on_known_distributions() -> None:
    rng = np.random.default_rng(7)

    def shape(x: np.ndarray) -> str:
        return _dist(length_distribution(np.rint(x))).shape

    mix = np.r_[rng.lognormal(np.log(200), 0.3, 4000), rng.lognormal(np.log(4000), 0.3, 4000)]
    assert shape(mix) == "bimodal"
    assert shape(np.r_[np.full(300, 128.0), np.full(200, 2048.0)]) == "bimodal"
    assert shape(rng.lognormal(7, 1.3, 8000)) == "heavy-tailed"
    assert shape(rng.lognormal(7, 0.2, 8000)) == "narrow"
    assert shape(rng.uniform(1, 8000, 8000)) == "wide"
    assert shape(np.full(100, 512.0)) == "narrow"
    assert shape(rng.exponential(1000, 8000) + 1) == "wide"  # p99/p50 = 6.6 < 10
    assert shape(rng.poisson(5, 8000) + 1.0) == "narrow"  # small integers are not modes


def test_bimodality_needs_enough_samples_and_mass() -> None:
    rng = np.random.default_rng(3)
    few = np.r_[np.full(10, 100.0), np.full(10, 5000.0)]
    assert not is_bimodal(few)
    lopsided = np.r_[rng.lognormal(np.log(200), 0.3, 9700), rng.lognormal(np.log(9000), 0.2, 300)]
    assert not is_bimodal(lopsided)  # 3 % in the second bump is a tail, not a population


def test_bimodality_on_a_large_sample_uses_a_stride() -> None:
    rng = np.random.default_rng(11)
    mix = np.rint(np.r_[rng.lognormal(np.log(300), 0.3, 300_000),
                        rng.lognormal(np.log(6000), 0.3, 200_000)])
    rng.shuffle(mix)
    assert is_bimodal(mix)
    assert not is_bimodal(np.rint(rng.lognormal(7, 1.0, 500_000)))


def test_classify_without_sample_uses_tail_and_cv() -> None:
    assert classify_shape(None, 100.0, 1500.0, 0.3) == "heavy-tailed"
    assert classify_shape(None, 100.0, 300.0, 0.8) == "wide"
    assert classify_shape(None, 100.0, 150.0, 0.2) == "narrow"


def test_length_distribution_moments() -> None:
    x = np.array([1.0, 2.0, 3.0, 10.0])
    dist = _dist(length_distribution(x))
    assert dist.quantiles.mean == 4.0
    assert dist.cv == pytest.approx(x.std() / 4.0)
    z = (x - 4.0) / x.std()
    assert dist.skewness == pytest.approx(float(np.mean(z ** 3)))
    assert dist.quantiles.p90 == pytest.approx(np.percentile(x, 90))



@pytest.mark.parametrize("name", ["mooncake_conversation_trace.jsonl",
                                  "AzureLLMInferenceTrace_conv.csv"])
def test_length_quantiles_from_a_sample_on_public_traces(traces_dir: Path, name: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A public trace (read in place) with the sampling threshold forced below its size: the
    length quantiles come from a sample of COLUMN_SAMPLE_ROWS rows within the stated rank
    tolerance (four standard deviations); count, mean, CV and skewness stay exact."""
    from pdprobe.analysis import grouped

    dataset = fuse([read_requests(traces_dir / name, ReadContext())])
    full = _summary(dataset)
    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", 1_000)
    monkeypatch.setattr(grouped, "COLUMN_SAMPLE_ROWS", 3_000)
    dataset = fuse([read_requests(traces_dir / name, ReadContext())])  # a new table: no cache
    sampled = _summary(dataset)
    for which in ("prompt_tokens", "output_tokens"):
        a, b = getattr(full, which), getattr(sampled, which)
        assert isinstance(a, LengthDistribution) and isinstance(b, LengthDistribution)
        assert b.quantiles.count == a.quantiles.count
        assert b.quantiles.mean == a.quantiles.mean and b.quantiles.max == a.quantiles.max
        assert b.cv == a.cv and b.skewness == a.skewness
        values = np.sort(dataset.requests[which].to_numpy(dtype=np.float64))
        for q, got in ((0.5, b.quantiles.p50), (0.9, b.quantiles.p90), (0.99, b.quantiles.p99)):
            low = np.searchsorted(values, got, side="left") / values.size
            high = np.searchsorted(values, got, side="right") / values.size
            gap = 0.0 if low <= q <= high else min(abs(low - q), abs(high - q))
            assert gap <= 4 * np.sqrt(q * (1 - q) / 3_000) + 1 / 3_000, (which, q)


# --- slice by slice above one row slice (10M rows): the figures of one pass -----------------

@pytest.mark.parametrize("chunk", [97, 1 << 20])
def test_sliced_length_moments_equal_one_pass(monkeypatch: pytest.MonkeyPatch,
                                              chunk: int) -> None:
    """Integer lengths read without a float copy, moments summed slice by slice: the count,
    mean, quantiles, max and shape of the whole-array figures, CV and skewness to 1e-12."""
    from pdprobe.analysis import row_slices

    rng = np.random.default_rng(8)
    lengths = np.rint(rng.lognormal(6, 1.1, 5_003)).astype(np.int64)
    whole = _dist(length_distribution(lengths.astype(np.float64)))
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    sliced = _dist(length_distribution(lengths))
    assert sliced.quantiles == whole.quantiles  # counts, mean of integers, order statistics
    assert sliced.shape == whole.shape
    assert sliced.cv == pytest.approx(whole.cv, rel=1e-12)
    assert sliced.skewness == pytest.approx(whole.skewness, rel=1e-12)


@pytest.mark.parametrize("chunk", [50, 1 << 20])
def test_sliced_spearman_and_gaps_equal_one_pass(monkeypatch: pytest.MonkeyPatch,
                                                 chunk: int) -> None:
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.workload import _arrival_cv2, _spearman

    rng = np.random.default_rng(9)
    x = rng.integers(0, 400, 2_001)
    y = x // 3 + rng.integers(0, 200, x.size)
    arrival = np.cumsum(rng.exponential(0.1, x.size))
    want_rho = _spearman(x.astype(np.float64), y.astype(np.float64))
    want_cv2 = _arrival_cv2(arrival)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    assert _spearman(x, y) == pytest.approx(want_rho, rel=1e-12)
    assert _arrival_cv2(arrival) == pytest.approx(want_cv2, rel=1e-12)
    gaps = np.diff(arrival)
    assert _arrival_cv2(arrival) == pytest.approx(gaps.var() / gaps.mean() ** 2, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_sorted_percentile_is_numpys_percentile(seed: int) -> None:
    """Percentiles of a sorted copy are ``np.percentile``'s to the bit: integer lengths with
    many ties, floats, one value, ranks that fall between two values."""
    from pdprobe.analysis.length_shape import sorted_percentile

    rng = np.random.default_rng(seed)
    for values in (rng.integers(1, 50, 10_001), rng.lognormal(size=9_999), np.array([3.5]),
                   np.log(rng.integers(1, 4_000, 2_000).astype(np.float64))):
        for q in ((50.0, 90.0, 99.0), (0.5, 99.5)):
            got = sorted_percentile(values, q)
            assert np.array_equal(got, np.percentile(values, q))


@pytest.mark.parametrize("seed", range(3))
def test_arrival_series_of_sorted_arrivals_counts_every_arrival_in_its_bin(seed: int) -> None:
    """Per-bin counts from each bin's first arrival (a binary search) are the counts of binning
    every arrival: arrivals on bin edges, ties, empty bins, the last arrival in the last bin."""
    from pdprobe.analysis.workload import _arrival_series

    rng = np.random.default_rng(seed)
    arrival = np.sort(np.concatenate([rng.uniform(0.0, 100.0, 5_000), [10.0, 10.0, 20.0],
                                      rng.uniform(60.0, 61.0, 50)]))
    arrival = arrival[(arrival < 40.0) | (arrival > 55.0)]  # a gap: bins without arrivals
    start, end = float(arrival[0]), float(arrival[-1])
    for bin_s in (10.0, 3.7, 1000.0):
        series = _arrival_series(arrival, start, end, bin_s)
        n_bins = len(series.values)
        step = series.step_s
        idx = np.minimum(((arrival - start) / step).astype(np.int64), n_bins - 1)
        want = np.bincount(idx, minlength=n_bins) / step
        assert np.array_equal(np.asarray(series.values), want)


@pytest.mark.parametrize(("categorical", "chunk", "run"),
                         [(True, 1 << 16, 1024), (False, 1 << 16, 1024), (True, 100, 8),
                          (False, 64, 3)])
def test_completed_rate_by_slices_is_the_masked_count(monkeypatch: pytest.MonkeyPatch,
                                                      categorical: bool, chunk: int,
                                                      run: int) -> None:
    """Successful requests finished inside the window, counted slice by slice: the count of the
    full-length masks (NaN and infinite e2e_s, failed and missing statuses, rows without a
    finite arrival), though only the finish time and the status are tested per row; by runs
    of rows (``completion_runs``: whole runs inside or outside the window counted at once)."""
    from pdprobe.analysis import completion_runs, row_slices, sampling
    from pdprobe.analysis.row_slices import category_mask
    from pdprobe.analysis.workload import _completed_rate

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 97)
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    monkeypatch.setattr(completion_runs, "PLACE_RUN", run)
    rng = np.random.default_rng(4)
    n = 1_000
    status = rng.choice(np.array(["ok", "error", "timeout", None], dtype=object), n,
                        p=[0.7, 0.1, 0.1, 0.1])
    e2e = np.where(rng.random(n) < 0.1, np.nan, rng.exponential(5.0, n))
    e2e[::53] = np.inf
    e2e[::59] = -np.inf
    arrival = rng.uniform(0.0, 100.0, n)
    arrival[rng.random(n) < 0.1] = rng.choice([np.nan, np.inf, -np.inf], 1)
    req = pd.DataFrame({"arrival_ts": arrival, "e2e_s": e2e,
                        "status": pd.Categorical(status) if categorical else status})
    start, end = 0.0, 90.0
    done = np.isfinite(e2e) & np.isfinite(arrival)
    done &= ~category_mask(req["status"], lambda s: s != "ok")
    with np.errstate(invalid="ignore"):
        finish = arrival + e2e
    want = int(np.count_nonzero(done & (finish >= start) & (finish <= end))) / (end - start)
    with np.errstate(invalid="ignore"):
        assert _completed_rate(req, start, end) == want
    # in arrival order (the usual case): most runs inside the window, counted whole
    ordered = np.linspace(0.0, 80.0, n)
    short = np.where(np.isfinite(e2e), np.minimum(e2e, 5.0), e2e)
    with np.errstate(invalid="ignore"):
        finish = ordered + short
    done = np.isfinite(finish) & ~category_mask(req["status"], lambda s: s != "ok")
    want = int(np.count_nonzero(done & (finish >= start) & (finish <= end))) / (end - start)
    with np.errstate(invalid="ignore"):
        got = _completed_rate(req.assign(arrival_ts=ordered, e2e_s=short), start, end)
    assert got == want > 0
    if 4 * chunk <= n:  # (the small runs: several per chunk)
        # a successful finish exactly at the window's end, first row and earliest finish of a
        # run whose others finish after it, and one exactly at its start, the latest of a run
        # finishing before it: each run is neither inside nor outside, read again, its row
        # counted (the window holds its ends)
        arrival_e, e2e_e, status_e = ordered.copy(), short.copy(), status.copy()
        for row, at, beyond in ((2 * chunk, end, 1.0), (3 * chunk, start, -1.0)):
            arrival_e[row:row + run] = at + beyond
            e2e_e[row:row + run] = 0.0
            arrival_e[row] = at
            status_e[row] = "ok"
        edged = req.assign(arrival_ts=arrival_e, e2e_s=e2e_e,
                           status=pd.Categorical(status_e) if categorical else status_e)
        with np.errstate(invalid="ignore"):
            finish = arrival_e + e2e_e
        done = np.isfinite(finish) & ~category_mask(edged["status"], lambda s: s != "ok")
        want = int(np.count_nonzero(done & (finish >= start) & (finish <= end))) / (end - start)
        with np.errstate(invalid="ignore"):
            assert _completed_rate(edged, start, end) == want
    failed = req.assign(status="error")
    assert isinstance(_completed_rate(failed, start, end), Missing)
    # none inside the window, yet some succeeded: a rate of 0, not Missing
    assert _completed_rate(req.assign(e2e_s=1e6), start, end) == 0.0


def test_spearman_of_a_constant_length_is_missing() -> None:
    from pdprobe.analysis.workload import _spearman

    x = np.arange(10)
    assert isinstance(_spearman(np.full(10, 7), x), Missing)
    assert isinstance(_spearman(x, np.full(10, 7.0)), Missing)
    assert not isinstance(_spearman(np.where(x == 3, 6, 5), x), Missing)  # one value differs


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
def test_sliced_length_moments_reuse_buffers_to_the_bit(monkeypatch: pytest.MonkeyPatch,
                                                        dtype: type) -> None:
    """The sliced moments (converted by the copy and the subtraction into reused buffers) are,
    to the bit, those of converting each slice and subtracting the mean from the copy."""
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.length_shape import _moments

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 1_000)
    rng = np.random.default_rng(6)
    x = (rng.integers(0, 100_000, 4_321) + (0.25 if dtype is np.float64 else 0)).astype(dtype)
    total, top = 0.0, -np.inf
    for part in row_slices.chunks(x.size):
        values = x[part].astype(np.float64)
        total += float(values.sum())
        top = max(top, float(values.max()))
    mean = total / x.size
    sq_sum = cube_sum = 0.0
    for part in row_slices.chunks(x.size):
        dev = x[part].astype(np.float64)
        dev -= mean
        sq = dev * dev
        sq_sum += float(sq.sum())
        cube_sum += float(np.einsum("i,i->", sq, dev))
    assert _moments(x) == (mean, sq_sum / x.size, cube_sum, top)


@pytest.mark.parametrize("n", [3, 1_000, 5_003])
def test_sliced_spearman_rank_sums_without_a_pass(monkeypatch: pytest.MonkeyPatch,
                                                  n: int) -> None:
    """The average ranks' sum taken as n (n + 1) / 2 gives the very coefficient of summing
    every row's rank (ties, a few distinct lengths, many)."""
    from pdprobe.analysis import row_slices, workload

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 256)
    rng = np.random.default_rng(n)
    for high in (4, 5_000):
        x, y = rng.integers(0, high, n), rng.integers(0, high, n) + rng.integers(0, 3, n)
        lookup_x = workload._rank_lookup(x)
        lookup_y = workload._rank_lookup(y)
        assert lookup_x is not None and lookup_y is not None
        assert float(lookup_x[x].sum()) == n * (n + 1) / 2
        got = workload._spearman_sliced(x, y, lookup_x, lookup_y)
        monkeypatch.setattr(workload, "EXACT", 0)  # every row's rank summed
        want = workload._spearman_sliced(x, y, lookup_x, lookup_y)
        monkeypatch.undo()
        monkeypatch.setattr(row_slices, "CHUNK_ROWS", 256)
        assert got == want


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_length_moments_from_counts_equal_the_sliced_ones(monkeypatch: pytest.MonkeyPatch,
                                                          dtype: type) -> None:
    """Above one slice the moments read off the rows per length (``length_counts``) are the
    sliced passes' figures: count, mean, max and quantiles exactly, CV and skewness to 1e-12;
    and the Spearman coefficient with the squared deviations summed per length is the one
    summed per row (to 1e-12)."""
    from pdprobe.analysis import row_slices
    from pdprobe.analysis.length_shape import length_counts
    from pdprobe.analysis.workload import _spearman

    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 1_000)
    rng = np.random.default_rng(12)
    x = np.rint(rng.lognormal(6, 1.1, 7_001)).astype(dtype)
    y = (x // 2 + rng.integers(0, 300, x.size)).astype(dtype)
    counts = length_counts(x)
    assert counts is not None and counts.sum() == x.size
    sliced = _dist(length_distribution(x))
    counted = _dist(length_distribution(x, None, counts))
    assert counted.quantiles == sliced.quantiles and counted.shape == sliced.shape
    assert counted.cv == pytest.approx(sliced.cv, rel=1e-12)
    assert counted.skewness == pytest.approx(sliced.skewness, rel=1e-12)
    assert _spearman(x, y, (counts, length_counts(y))) == pytest.approx(_spearman(x, y),
                                                                        rel=1e-12)
    assert length_counts(x - 1_000) is None and length_counts(x.astype(np.float64)) is None


def test_length_quantiles_of_an_integer_sample_sorted_by_counting() -> None:
    """An integer sample of counted lengths is sorted by counting its lengths: the very
    quantiles of sorting it as floats."""
    from pdprobe.analysis.length_shape import counted_sort, length_counts

    rng = np.random.default_rng(13)
    x = np.rint(rng.lognormal(5, 1.2, 20_000)).astype(np.int64)
    sample = x[rng.random(x.size) < 0.1]
    counts = length_counts(x)
    assert counts is not None
    np.testing.assert_array_equal(counted_sort(sample, counts.size),
                                  np.sort(sample.astype(np.float64)))
    got = _dist(length_distribution(x, sample, counts)).quantiles
    want = _dist(length_distribution(x, sample.astype(np.float64))).quantiles
    assert (got.p50, got.p90, got.p99) == (want.p50, want.p90, want.p99)
