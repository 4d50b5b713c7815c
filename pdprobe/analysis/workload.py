"""What the cluster was asked to do: request count, arrival rate and the length mix.

From per-request records when there are any (exact numbers, numpy's default linear percentile, so
they equal what the traces README prints); otherwise estimated from the engines' prompt/output
length histograms (``estimated=True``), PromQL-style (``workload_metrics``). Vectorised
throughout. The length mix's shape (quantiles, CV, skew, bimodal/heavy-tailed/wide/narrow) is in
``length_shape``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis import sampling
from pdprobe.analysis.base import TimeSeries, WorkloadSummary
from pdprobe.analysis.completion_runs import CompletionRuns, completion_runs, ok_within
from pdprobe.analysis.exact_sums import EXACT
from pdprobe.analysis.grouped import chunks, column_values, quantile_rows
from pdprobe.analysis.key_search import key_starts
from pdprobe.analysis.length_shape import COUNTING_RANK_MAX, length_counts, length_distribution
from pdprobe.analysis.row_gather import code_counts
from pdprobe.analysis.row_slices import (
    ascending,
    category_count,
    finite_ends,
    take_rows,
)
from pdprobe.analysis.table_facts import column_ascending, failed_mask, know_length_range
from pdprobe.dataset import Dataset
from pdprobe.values import Maybe, Missing

if TYPE_CHECKING:
    import pandas as pd


# Arrival series: about this many bins over the window, clamped so a short capture still gets
# more than one request per bin and a long one is not smoothed to hourly.
SERIES_TARGET_BINS: Final = 60
SERIES_MIN_BIN_S: Final = 10.0
SERIES_MAX_BIN_S: Final = 300.0


def summarize_workload(dataset: Dataset, bin_s: float | None = None) -> WorkloadSummary | Missing:
    """Workload summary from request records, else from length histograms, else ``Missing``."""
    if bin_s is not None and not bin_s > 0:
        raise ValueError(f"bin_s must be positive, got {bin_s}")
    if len(dataset.requests):
        return _from_requests(dataset, bin_s)
    if len(dataset.metrics):
        from pdprobe.analysis.workload_metrics import from_metrics

        summary = from_metrics(dataset, bin_s)
        if summary is not None:
            return summary
    return Missing("no request records and no length histograms")


def default_bin_s(span_s: float) -> float:
    """span/60, clamped to [10 s, 300 s]."""
    return float(min(max(span_s / SERIES_TARGET_BINS, SERIES_MIN_BIN_S), SERIES_MAX_BIN_S))


# --- from request records ---------------------------------------------------------------------


def _from_requests(dataset: Dataset, bin_s: float | None) -> WorkloadSummary | Missing:
    req = dataset.requests
    arrival = req["arrival_ts"].to_numpy(dtype=np.float64)
    # arrivals in time order (the usual case) hold no NaN, so they are all finite when the
    # first and the last are: no finiteness mask of every row
    in_order = column_ascending(req, "arrival_ts")  # (cached: the evidence asks it too)
    every = in_order and finite_ends(arrival)
    ok_rows = None if every else np.isfinite(arrival)  # None: every row (no row dropped)

    def kept(values: np.ndarray) -> np.ndarray:
        return values if ok_rows is None else values[ok_rows]

    arrival = kept(arrival)
    if arrival.size > 1 and not (in_order or ascending(arrival)):  # (finite: never decrease)
        order = np.argsort(arrival, kind="stable")
        arrival = arrival[order]
    # the token columns' own (int64) arrays: every figure below reads them without a float copy
    prompt = kept(column_values(req, "prompt_tokens"))
    output = kept(column_values(req, "output_tokens"))
    count = int(arrival.size)
    if count == 0:
        return Missing("no request record has an arrival time")
    # rows per length: the Spearman ranks and, above one slice, the moments of each column
    # (``length_shape.length_counts``), so neither reads the rows again
    prompt_counts, output_counts = length_counts(prompt), length_counts(output)
    for name, found in (("prompt_tokens", prompt_counts), ("output_tokens", output_counts)):
        if found is not None and ok_rows is None:  # every row's: the capacity mix reads it
            know_length_range(req, name, found)
    start, end = float(arrival[0]), float(arrival[-1])
    span = end - start
    rate: Maybe[float] = (count / span if span > 0 else
                          Missing("all requests arrived at one instant: no rate"))

    cached: Maybe[float] = Missing("no cached_tokens column in request records")
    if dataset.has_request_column("cached_tokens"):
        cached_tokens = kept(req["cached_tokens"].to_numpy(dtype=np.float64))
        hits = float(cached_tokens.sum())
        if math.isfinite(hits):  # every value finite (a NaN or an infinity leaves the sum
            # not finite): the very sums, without a finiteness mask or a copy of every row
            denominator = float(prompt.sum() if prompt_counts is None else
                                int(np.dot(prompt_counts, np.arange(prompt_counts.size))))
        else:
            have = np.isfinite(cached_tokens)
            denominator, hits = float(prompt[have].sum()), float(cached_tokens[have].sum())
        cached = (hits / denominator if denominator > 0
                  else Missing("no prompt tokens in rows with cached_tokens"))

    failed = 0
    if dataset.has_request_column("status"):
        failed = category_count(req, "status", lambda s: s != "ok") if every else \
            int(np.count_nonzero(kept(failed_mask(req))))

    completed: Maybe[float] = Missing("no e2e_s column in request records")
    if dataset.has_request_column("e2e_s") and span > 0:
        completed = _completed_rate(req, start, end)

    series = None
    if span > 0:
        series = _arrival_series(arrival, start, end, bin_s or default_bin_s(span))

    return WorkloadSummary(
        requests=count,
        window_start_ts=start,
        window_end_ts=end,
        arrival_rate_rps=rate,
        prompt_tokens=length_distribution(prompt, _sampled(req, "prompt_tokens", ok_rows),
                                          prompt_counts),
        output_tokens=length_distribution(output, _sampled(req, "output_tokens", ok_rows),
                                          output_counts),
        offered_rate_rps=rate if span > 0 else Missing("all requests arrived at one instant"),
        completed_rate_rps=completed,
        cached_fraction=cached,
        arrival_cv2=_arrival_cv2(arrival),
        prompt_output_corr=_spearman(prompt, output, (prompt_counts, output_counts)),
        arrival_series=series,
        source="request records",
        failed_requests=failed,
    )


def _sampled(req: pd.DataFrame, column: str, rows: np.ndarray | None) -> np.ndarray | None:
    """``column`` over ``rows`` (None: every row) on the quantile sample of a very large
    table, else None (the quantiles then read every value; ``grouped.quantile_rows``)."""
    sample = quantile_rows(req)
    if sample is None:
        return None
    values = take_rows(column_values(req, column), sample)
    if rows is not None and not rows.all():  # (every row kept, as usual: no masked copy)
        values = values[rows[sample]]
    return values  # (integer lengths as they are: ``length_distribution`` sorts them by counting)


def _completed_rate(req: pd.DataFrame, start: float, end: float) -> Maybe[float]:
    """Requests finished successfully inside the arrival window, per second of it.

    Counted over the same window as the arrival rate, so offered vs. completed compares like with
    like; at steady state they differ only by the requests still in flight at the window's end.
    A successful request: an e2e_s value, a status "ok" or none, a finite arrival. Slice by
    slice, no full-length mask: a finish time inside the (finite) window is itself finite, so
    it holds only for a finite arrival and a finite e2e_s, and those two need no tests of
    their own (the very rows of testing them).
    """
    runs = completion_runs(req)  # (by runs of rows, which the capacity windows place too)
    if runs is None:
        return Missing("no arrival_ts or e2e_s column in request records")
    inside = ok_within(runs, start, end)
    if not inside and not _any_done(runs):
        return Missing("no successful request has an e2e_s value")
    return inside / (end - start)


def _any_done(runs: CompletionRuns) -> bool:
    """Whether any request succeeded with an e2e_s value and a finite arrival (asked only when
    none finished inside the window)."""
    done = np.isfinite(runs.e2e) & np.isfinite(runs.arrival)
    if runs.failed is not None:
        done &= ~runs.failed
    return bool(done.any())


def _arrival_series(arrival: np.ndarray, start: float, end: float, bin_s: float) -> TimeSeries:
    """Requests/s per bin. Bins tile the window exactly (the step is span / round(span/bin_s))
    so there is no partial last bin whose rate would be biased low."""
    span = end - start
    n_bins = max(1, round(span / bin_s))
    step = span / n_bins
    # the arrivals are in time order (``_from_requests`` sorts them), so the bins never
    # decrease along them: each bin's first arrival from a binary search of the very bins
    # (``key_starts``) instead of binning every arrival (90 ms at 10M rows)
    starts = key_starts(lambda at: np.minimum(((arrival[at] - start) / step).astype(np.int64),
                                              n_bins - 1), n_bins, arrival.size)
    counts = np.diff(np.append(starts, arrival.size))
    ts = start + step * np.arange(n_bins)
    return TimeSeries(ts=tuple(ts.tolist()), values=tuple((counts / step).tolist()),
                      unit="requests/s", step_s=float(step))


def _arrival_cv2(arrival: np.ndarray) -> Maybe[float]:
    if arrival.size < 3:
        return Missing("fewer than three arrivals")
    if len(chunks(arrival.size - 1)) == 1:
        gaps = np.diff(arrival)
        mean = float(gaps.mean())
        var = float(gaps.var())
    else:  # slice by slice (the same figure up to the last bits of the sums)
        n = arrival.size - 1
        # the gaps add up to the last arrival less the first (no pass of their own)
        mean = float(arrival[-1] - arrival[0]) / n
        sq = 0.0
        # slices of ``sampling.PASS_CHUNK`` gaps, each written into one reused buffer in the
        # CPU cache (no fresh 8 MB difference per slice of ``row_slices.CHUNK_ROWS``)
        dev = np.empty(min(n, sampling.PASS_CHUNK))
        for lo in range(0, n, sampling.PASS_CHUNK):
            hi = min(lo + sampling.PASS_CHUNK, n)
            part = np.subtract(arrival[lo + 1:hi + 1], arrival[lo:hi], out=dev[:hi - lo])
            part -= mean
            sq += float(np.einsum("i,i->", part, part))  # no BLAS threads per slice
        var = sq / n
    if mean <= 0:
        return Missing("all requests arrived at one instant")
    return float(var / (mean * mean))


def _spearman(x: np.ndarray, y: np.ndarray,
              counts: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
              ) -> Maybe[float]:
    """Spearman's rho of ``x`` and ``y``; ``counts``: their rows per length when known
    (``length_counts``), the extremes and the rank lookups read off them."""
    if x.size < 3:
        return Missing("fewer than three requests")
    # min == max is "every value equals the first" (NaN: neither), without a mask per value;
    # the rank lookups read the same extremes
    x_range, y_range = _extremes(x, counts[0]), _extremes(y, counts[1])
    if x_range[0] == x_range[1] or y_range[0] == y_range[1]:
        return Missing("prompt or output length is constant")
    lookup_x = _rank_lookup(x, x_range, counts[0])
    lookup_y = _rank_lookup(y, y_range, counts[1])
    if len(chunks(x.size)) > 1 and lookup_x is not None and lookup_y is not None:
        return _spearman_sliced(x, y, lookup_x, lookup_y, counts)
    # (the lookups at the values are ``average_ranks``' very ranks)
    rx = average_ranks(x) if lookup_x is None else lookup_x[x]
    ry = average_ranks(y) if lookup_y is None else lookup_y[y]
    rx -= rx.mean()
    ry -= ry.mean()
    return float(np.dot(rx, ry) / math.sqrt(float(np.dot(rx, rx)) * float(np.dot(ry, ry))))


def _spearman_sliced(x: np.ndarray, y: np.ndarray, lookup_x: np.ndarray,
                     lookup_y: np.ndarray,
                     counts: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
                     ) -> float:
    """Spearman's rho from each value's average rank (``_rank_lookup``), the rank sums and
    products added slice by slice: the same coefficient up to the last bits of the sums,
    without two full-length rank arrays. ``counts``: the rows per value of ``x`` and ``y``
    (``length_counts``), when known: the squared deviations are then summed once per value
    (weighted by its rows), and the pass over the rows adds the products alone."""
    n = x.size
    # each slice's ranks gathered into two reused buffers (np.take with an output: a third of
    # the cost of indexing, which allocates and checks every position), slices of
    # ``sampling.PASS_CHUNK`` rows: the buffers stay in the CPU cache between the gathers and
    # the products (a quarter less than slices of ``row_slices.CHUNK_ROWS``, whose 8 MB
    # buffers went out to memory and back)
    step = sampling.PASS_CHUNK
    parts = [slice(lo, min(lo + step, n)) for lo in range(0, n, step)]
    size = min(n, step)
    buf_x, buf_y = np.empty(size), np.empty(size)
    # average ranks are halves: their sums below 2**52 (n * (n + 1) below 2**53) are exact
    if n * (n + 1) <= EXACT:
        # the average ranks of n values add up to 1 + 2 + ... + n, and every partial sum
        # of those halves below 2**52 is exact in float64: the summed ranks are that
        # number, without a pass over the rows
        sum_x = sum_y = float(n * (n + 1) // 2)
    else:
        sum_x = sum_y = 0.0
        for part in parts:
            m = part.stop - part.start
            sum_x += float(np.take(lookup_x, x[part], out=buf_x[:m], mode="wrap").sum())
            sum_y += float(np.take(lookup_y, y[part], out=buf_y[:m], mode="wrap").sum())
    mean_x, mean_y = sum_x / n, sum_y / n
    # each value's rank less the mean, once per value: the very deviation of every row's rank
    centred_x, centred_y = lookup_x - mean_x, lookup_y - mean_y
    squares = [None if c is None else float(np.einsum("i,i,i->", c.astype(np.float64), d, d))
               for c, d in zip(counts, (centred_x, centred_y), strict=True)]
    xy = xx = yy = 0.0
    for part in parts:
        m = part.stop - part.start
        rx = np.take(centred_x, x[part], out=buf_x[:m], mode="wrap")
        ry = np.take(centred_y, y[part], out=buf_y[:m], mode="wrap")
        xy += float(np.einsum("i,i->", rx, ry))  # single-threaded, unlike BLAS
        if squares[0] is None:
            xx += float(np.einsum("i,i->", rx, rx))
        if squares[1] is None:
            yy += float(np.einsum("i,i->", ry, ry))
    xx = xx if squares[0] is None else squares[0]
    yy = yy if squares[1] is None else squares[1]
    return float(xy / math.sqrt(xx * yy))


def _extremes(values: np.ndarray, counts: np.ndarray | None) -> tuple[float, float]:
    """``(values.min(), values.max())``, read off the rows per length when given."""
    if counts is None:
        return values.min(), values.max()
    return float(np.flatnonzero(counts)[0]), float(counts.size - 1)


def _rank_lookup(values: np.ndarray, extremes: tuple[float, float] | None = None,
                 counts: np.ndarray | None = None) -> np.ndarray | None:
    """The average rank of every value 0..max of non-negative integer lengths below
    ``COUNTING_RANK_MAX`` held as integers (counted slice by slice), else None. ``extremes``:
    the values' (min, max) when the caller has them; ``counts``: their rows per length
    (``length_counts``), when the caller has those."""
    x = np.asarray(values)
    if x.dtype.kind not in "iu" or not x.size:
        return None
    low, high = (x.min(), x.max()) if extremes is None else extremes
    if low < 0 or high >= COUNTING_RANK_MAX:
        return None
    if counts is None:
        counts = code_counts(x, int(high) + 1)  # slice by slice
    below = np.cumsum(counts) - counts  # values strictly smaller
    lookup: np.ndarray = below + (counts + 1) / 2.0
    return lookup


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (as scipy.stats.rankdata)."""
    x = np.asarray(values)
    if x.dtype.kind in "iu":
        lookup = _rank_lookup(x)
        if lookup is not None:
            return lookup[x]
    x = np.asarray(x, dtype=np.float64)
    if x.size and np.all(x == np.rint(x)) and x.min() >= 0 and x.max() < COUNTING_RANK_MAX:
        ints = x.astype(np.int64)
        counts = np.bincount(ints)
        below = np.cumsum(counts) - counts  # values strictly smaller
        average = below + (counts + 1) / 2.0
        return average[ints]
    from scipy.stats import rankdata

    return np.asarray(rankdata(x), dtype=np.float64)
