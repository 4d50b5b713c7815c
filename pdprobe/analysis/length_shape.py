"""The shape of a token-length sample: quantiles, spread, skew and a label for the mix.

``length_distribution`` summarises prompt or output lengths from request records;
``classify_shape`` labels a mix "bimodal", "heavy-tailed", "wide" or "narrow" (also for the
histogram estimates of ``pdprobe.analysis.workload``, which re-exports these names).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from pdprobe.analysis.base import LengthDistribution, Quantiles
from pdprobe.values import Missing

# Shapes are judged on a log scale: token lengths span decades, and a capacity model cares about
# ratios (a 2x longer prompt), not absolute gaps.
# "bimodal": the smoothed log-length histogram has two interior peaks, each at least
# SHAPE_MODE_MIN_HEIGHT of the tallest, separated by a valley lower than SHAPE_MAX_DIP of the
# smaller peak, with at least SHAPE_MIN_MODE_MASS of the requests on each side. Two populations
# (e.g. chat turns vs. document prompts) make a mean-based P/D sizing wrong for both.
SHAPE_MIN_SAMPLES: Final = 50  # fewer requests make any histogram mode a coin toss
SHAPE_MAX_SAMPLES: Final = 200_000  # bin counts of ~5,000 per bin: sampling noise under 2 %
SHAPE_LOG_BINS: Final = 40
SHAPE_EDGE_BINS: Final = 3  # empty bins padded on each side so modes at the extremes are interior
SHAPE_SMOOTH_BINS: Final = 1.0  # Gaussian kernel sigma, in bins: removes single-bin noise
SHAPE_MODE_MIN_HEIGHT: Final = 0.1
SHAPE_MAX_DIP: Final = 0.4  # a dip to 40 % of the smaller peak is a clear valley, not noise
SHAPE_MIN_MODE_MASS: Final = 0.1
# "heavy-tailed": p99 at least this many times the median. An exponential distribution has
# p99/p50 = ln(100)/ln(2) = 6.6; a log-normal reaches 10 at sigma = 1, where the mean is already
# 1.65x the median and tail requests dominate the prefill work.
HEAVY_TAIL_P99_OVER_P50: Final = 10.0
# "narrow" below this coefficient of variation, else "wide": at CV 0.5 the Jensen gap of a
# quadratic cost (attention) is 25 % of the squared mean, the point where mean-based sizing
# starts to mislead.
NARROW_MAX_CV: Final = 0.5
# Integer lengths are spread uniformly within +-0.5 (fixed seed, so results are reproducible)
# before taking logs: small integers would otherwise leave empty log bins that look like valleys.
SHAPE_JITTER_SEED: Final = 0

QUANTILES: Final = (50.0, 90.0, 99.0)

# Token lengths are small non-negative integers: counted per length (O(n + max)), their ranks
# and moments are read off the counts instead of sorting or summing every row.
COUNTING_RANK_MAX: Final = 1 << 24


def length_counts(values: np.ndarray) -> np.ndarray | None:
    """Rows per length ``0..max`` of non-negative integer lengths below ``COUNTING_RANK_MAX``
    (counted slice by slice: ``row_gather.code_counts``), else None. One pass that gives the
    Spearman ranks (``workload``) and the moments of a large table (``length_distribution``)."""
    from pdprobe.analysis.row_gather import code_counts

    x = np.asarray(values)
    if x.dtype.kind not in "iu" or not x.size or x.dtype == np.uint64:  # (no bincount of it)
        return None
    high = x.max()
    if high >= COUNTING_RANK_MAX:
        return None
    try:  # (no pass for the smallest length: bincount refuses a negative one)
        return code_counts(x, int(high) + 1)
    except ValueError:
        return None


def length_distribution(values: np.ndarray, for_quantiles: np.ndarray | None = None,
                        counts: np.ndarray | None = None) -> LengthDistribution | Missing:
    """Quantiles (numpy's linear percentile), CV, skewness and a shape label of a sample.

    ``for_quantiles``, when given, is a sample of ``values`` the quantiles are read from (a very
    large table: ``grouped.quantile_rows``); count, mean, CV and skewness use every value.
    Integer lengths are read as they are (no float copy); above one row slice
    (``row_slices.CHUNK_ROWS``) the moments are summed slice by slice (the same figures up to
    the last bits of the sums), so no full-length deviation array is built; with ``counts``
    (``length_counts(values)``) they are read off the rows per length instead (the same
    count, mean and max; variance and skewness up to the last bits), with no pass at all.
    """
    from pdprobe.analysis.row_slices import CHUNK_ROWS

    x = np.asarray(values)
    if x.dtype.kind not in "iu":
        x = np.asarray(x, dtype=np.float64)
        finite = np.isfinite(x)
        if not finite.all():  # a copy only when something is dropped
            x = x[finite]
    if x.size == 0:
        return Missing("no lengths")
    if x.size <= CHUNK_ROWS:
        x = np.asarray(x, dtype=np.float64)
    qx, ordered = x, False
    sample = None if for_quantiles is None else np.asarray(for_quantiles)
    if sample is not None and sample.size and counts is not None and sample.dtype.kind in "iu":
        # a sample of the counted lengths: sorted by counting its lengths (``counted_sort``)
        qx, ordered = counted_sort(sample, counts.size), True
    elif sample is not None:
        qx = np.asarray(sample, dtype=np.float64)
        qx = qx[np.isfinite(qx)]
        if qx.size == 0:
            qx = x
    p50, p90, p99 = (float(v) for v in sorted_percentile(qx, QUANTILES, ordered))
    if counts is not None and x.size > CHUNK_ROWS and x.dtype.kind in "iu":
        mean, var, third, top = _count_moments(counts)
    else:
        mean, var, third, top = _moments(x)
    std = math.sqrt(var)
    cv = std / mean if mean > 0 else float("nan")
    skew = third / x.size / (var * std) if std > 0 else 0.0
    q = Quantiles(count=int(x.size), mean=mean, p50=p50, p90=p90, p99=p99, max=top)
    shape_sample = x if x.size <= SHAPE_MAX_SAMPLES else x[:: -(-x.size // SHAPE_MAX_SAMPLES)]
    return LengthDistribution(quantiles=q, cv=cv, skewness=skew,
                              shape=classify_shape(shape_sample, p50, p99, cv))


def sorted_percentile(values: np.ndarray, q: tuple[float, ...],
                      ordered: bool = False) -> np.ndarray:
    """``np.percentile(values, q)`` of a sorted copy: the same figures (the same values at the
    same ranks, interpolated by numpy alike), but numpy's AVX-512 sort and a percentile of
    sorted values take 10 ms for a million token lengths where the percentile's partition at
    six ranks of the raw values (lengths tie a lot) took 18 ms. ``ordered``: ``values`` is
    such a copy already (``counted_sort``), read in place."""
    return np.percentile(values if ordered else np.sort(values), q, overwrite_input=True)


def counted_sort(lengths: np.ndarray, n_lengths: int) -> np.ndarray:
    """``np.sort(lengths.astype(np.float64))`` of integer lengths ``0 <= length < n_lengths``
    by counting them: each length repeated its count of times (the very sorted array, a
    third of the cost of sorting a million lengths)."""
    per_length = np.bincount(lengths.astype(np.intp, copy=False), minlength=n_lengths)
    return np.repeat(np.arange(per_length.size, dtype=np.float64), per_length)


def _moments(x: np.ndarray) -> tuple[float, float, float, float]:
    """Mean, variance (mean squared deviation), sum of cubed deviations and maximum of ``x``:
    whole-array passes for a float array of one slice, else slice by slice."""
    from pdprobe.analysis.row_slices import chunks

    if x.dtype.kind == "f" and len(chunks(x.size)) == 1:
        mean = float(x.mean())
        dev = x - mean
        sq = dev * dev
        return mean, float(sq.mean()), float(np.dot(sq, dev)), float(x.max())
    total = 0.0
    top = -math.inf
    # two buffers of one slice reused by every slice; the int -> float64 conversion done by
    # the copy and by the subtraction themselves (the same values, fewer passes)
    size = chunks(x.size)[0].stop
    dev, sq = np.empty(size), np.empty(size)
    for part in chunks(x.size):
        values = dev[:part.stop - part.start]
        np.copyto(values, x[part], casting="unsafe")
        total += float(values.sum())
        top = max(top, float(values.max()))
    mean = total / x.size
    sq_sum = cube_sum = 0.0
    for part in chunks(x.size):
        m = part.stop - part.start
        np.subtract(x[part], mean, out=dev[:m], casting="unsafe")
        np.multiply(dev[:m], dev[:m], out=sq[:m])
        sq_sum += float(sq[:m].sum())
        cube_sum += float(np.einsum("i,i->", sq[:m], dev[:m]))  # no BLAS threads per slice
    return mean, sq_sum / x.size, cube_sum, top


def _count_moments(counts: np.ndarray) -> tuple[float, float, float, float]:
    """``_moments`` of the integer lengths whose rows per length are ``counts``: the sum of
    the lengths an exact integer (so the mean of the sliced sums of whole numbers, each below
    2**53), the deviations summed once per distinct length weighted by its rows."""
    lengths = np.flatnonzero(counts)
    rows = counts[lengths]
    n = int(rows.sum())
    mean = float(int(np.dot(rows, lengths))) / n  # int64: no rounding of the sum
    dev = lengths - mean
    weighted = rows * (dev * dev)
    return (mean, float(weighted.sum()) / n, float(np.einsum("i,i->", weighted, dev)),
            float(lengths[-1]))


def classify_shape(x: np.ndarray | None, p50: float, p99: float, cv: float) -> str:
    """"bimodal", "heavy-tailed", "wide" or "narrow" (in that order of precedence).

    ``x`` may be None (histogram estimates): the bimodality test then cannot run.
    """
    if x is not None and x.size >= SHAPE_MIN_SAMPLES and is_bimodal(x):
        return "bimodal"
    if p50 > 0 and p99 / p50 >= HEAVY_TAIL_P99_OVER_P50:
        return "heavy-tailed"
    if math.isfinite(cv) and cv >= NARROW_MAX_CV:
        return "wide"
    return "narrow"


def is_bimodal(values: np.ndarray) -> bool:
    """Two well-separated modes on the smoothed log-length histogram (see the SHAPE_* constants)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size > SHAPE_MAX_SAMPLES:
        x = x[:: -(-x.size // SHAPE_MAX_SAMPLES)]  # an even stride: a 40-bin histogram needs no more
    x = x[np.isfinite(x) & (x > 0)]
    if x.size < SHAPE_MIN_SAMPLES:
        return False
    if np.all(x == np.rint(x)):
        rng = np.random.default_rng(SHAPE_JITTER_SEED)
        x = np.maximum(x + rng.uniform(-0.5, 0.5, x.size), 0.5)
    y = np.log(x)
    lo, hi = (float(v) for v in sorted_percentile(y, (0.5, 99.5)))
    if hi - lo < 1e-6:
        return False
    inner = SHAPE_LOG_BINS - 2 * SHAPE_EDGE_BINS
    pad = (hi - lo) / inner * SHAPE_EDGE_BINS
    counts, _ = np.histogram(y, bins=SHAPE_LOG_BINS, range=(lo - pad, hi + pad))
    half = 3
    k = np.arange(-half, half + 1)
    kernel = np.exp(-0.5 * (k / SHAPE_SMOOTH_BINS) ** 2)
    kernel /= kernel.sum()
    smooth = np.convolve(np.pad(counts.astype(np.float64), half), kernel, mode="valid")
    smooth /= smooth.max()
    i = np.arange(1, smooth.size - 1)
    peaks = i[(smooth[i] > smooth[i - 1]) & (smooth[i] >= smooth[i + 1])
              & (smooth[i] >= SHAPE_MODE_MIN_HEIGHT)]
    if peaks.size < 2:
        return False
    total = smooth.sum()
    cum = np.cumsum(smooth)
    for a_pos, a in enumerate(peaks[:-1]):  # a handful of peaks at most
        for b in peaks[a_pos + 1:]:
            valley = a + int(np.argmin(smooth[a:b + 1]))
            dip = smooth[valley] / min(smooth[a], smooth[b])
            left = cum[valley - 1] / total if valley > 0 else 0.0
            if dip <= SHAPE_MAX_DIP and min(left, 1 - left) >= SHAPE_MIN_MODE_MASS:
                return True
    return False
