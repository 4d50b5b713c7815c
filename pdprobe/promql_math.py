"""Counter and histogram math on plain arrays: the bottom of the metric pipeline.

Counter-reset and 32-bit wrap correction, Prometheus ``increase``/``rate`` with their edge
extrapolation, ``histogram_quantile`` (one histogram or many at once); the grouped
(many-series-at-once) forms of the window increase live in ``pdprobe.promql_grouped``. Both the collectors (which correct raw cumulative series while reading files or a live
Prometheus) and ``pdprobe.analysis.promql`` (the table helpers over the dataset's metric tables)
import this module; it imports nothing from pdprobe, so no layer reaches upwards for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

import numpy as np

# A drop of a ``bits``-wide counter counts as a wrap (not a restart) when the previous value is in
# the upper half of the range and the new one in the lower half: hardware counters (mlx5
# Q-counters) wrap there and are not reset by an engine restart, while a restart drop from a small
# value is far more likely a driver reload than a wrap.
WRAP_TOP_FRACTION: Final = 0.5


# Prometheus extrapolates to a window edge when the gap to it is below 1.1 average sample
# intervals (promql/functions.go extrapolatedRate); otherwise by half an interval.
EXTRAPOLATION_THRESHOLD: Final = 1.1


def correct_counter(values: np.ndarray, bits: int | None = None) -> np.ndarray:
    """Raw cumulative samples of one series (time order) -> monotonic cumulative values.

    A drop is a reset: the new value counts from 0 (Prometheus). For ``bits``-wide counters a drop
    from the upper half of ``2**bits`` into the lower half is a wrap and adds ``2**bits``. NaN
    samples stay NaN in the output and do not break the chain (the previous valid sample is
    carried across them). The first valid sample keeps its value.
    """
    v = np.asarray(values, dtype=np.float64)
    group = np.zeros(len(v), dtype=np.int64)
    return correct_counters_grouped(group, v, bits)


def correct_counters_grouped(group: np.ndarray, values: np.ndarray,
                             bits: int | np.ndarray | None = None) -> np.ndarray:
    """``correct_counter`` for many series at once.

    ``group`` labels each sample's series and must be sorted (samples of a series contiguous, in
    time order). ``bits`` is one width for all, a per-sample array (0 = no wrap), or None.
    """
    import pandas as pd

    v = np.asarray(values, dtype=np.float64)
    g = np.asarray(group)
    out = np.full(len(v), np.nan)
    valid = ~np.isnan(v)
    if not valid.any():
        return out
    x = v[valid]
    gx = g[valid]
    # corrected = raw + offset, the offset growing at each drop by what the counter lost: the
    # previous raw value for a reset, 2**bits for a wrap. Series without drops keep their values
    # bit for bit.
    adj = np.zeros(len(x))
    if len(x) > 1:
        prev, cur = x[:-1], x[1:]
        drop = (gx[1:] == gx[:-1]) & (cur < prev)
        if drop.any():
            step = np.where(drop, prev, 0.0)
            if bits is not None:
                b = np.broadcast_to(np.asarray(bits, dtype=np.float64), v.shape)[valid][1:]
                width = np.exp2(b)
                wrap = drop & (b > 0) & (prev >= WRAP_TOP_FRACTION * width) & (
                    cur < WRAP_TOP_FRACTION * width)
                step = np.where(wrap, width, step)
            adj[1:] = step
    if adj.any():
        offset = pd.Series(adj).groupby(gx).cumsum().to_numpy()
        out[valid] = x + offset
    else:
        out[valid] = x
    return out


def _window_samples(ts: np.ndarray, values: np.ndarray, start_ts: float,
                    end_ts: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(ts, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    keep = (t >= start_ts) & (t <= end_ts) & ~np.isnan(v)
    t, v = t[keep], v[keep]
    if len(t) > 1 and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    return t, v


def increase(ts: np.ndarray, values: np.ndarray, start_ts: float, end_ts: float) -> float:
    """Prometheus ``increase()`` over ``[start_ts, end_ts]``, with its edge extrapolation.

    ``values`` are cumulative counter samples (drops are still treated as resets). NaN when fewer
    than two samples fall in the window.
    """
    t, v = _window_samples(ts, values, start_ts, end_ts)
    if len(t) < 2:
        return float("nan")
    if np.any(np.diff(v) < 0):
        v = correct_counter(v)
    result = float(v[-1] - v[0])
    sampled = float(t[-1] - t[0])
    if sampled <= 0:
        return float("nan")
    avg = sampled / (len(t) - 1)
    to_start = float(t[0] - start_ts)
    to_end = float(end_ts - t[-1])
    if result > 0 and v[0] >= 0:
        # A counter cannot go below zero: do not extrapolate past its zero point.
        to_zero = sampled * (float(v[0]) / result)
        to_start = min(to_start, to_zero)
    threshold = avg * EXTRAPOLATION_THRESHOLD
    interval = sampled
    interval += to_start if to_start < threshold else avg / 2
    interval += to_end if to_end < threshold else avg / 2
    return result * (interval / sampled)


def rate(ts: np.ndarray, values: np.ndarray, start_ts: float, end_ts: float) -> float:
    """Prometheus ``rate()``: ``increase`` per second of the window."""
    span = end_ts - start_ts
    if span <= 0:
        return float("nan")
    return increase(ts, values, start_ts, end_ts) / span


def _prepare_buckets(le: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Sorted, coalesced, monotonic buckets ending in +Inf; None when unusable."""
    b = np.asarray(le, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    keep = ~np.isnan(b) & ~np.isnan(c)
    b, c = b[keep], c[keep]
    if len(b) == 0:
        return None
    order = np.argsort(b, kind="stable")
    b, c = b[order], c[order]
    if not np.isposinf(b[-1]):
        return None
    # Coalesce duplicate bounds (Prometheus sums them; they come from merged series).
    uniq, first = np.unique(b, return_index=True)
    if len(uniq) != len(b):
        c = np.add.reduceat(c, first)
        b = uniq
    # Counts must not decrease with le; Prometheus raises them to the running maximum.
    c = np.maximum.accumulate(c)
    if len(b) < 2:
        return None
    return b, c


def histogram_quantile(q: float, le: np.ndarray, cumulative_counts: np.ndarray) -> float:
    """Prometheus ``histogram_quantile`` (promql/quantile.go ``bucketQuantile``) of one histogram.

    ``le`` are upper bounds (any order; the last must be +Inf), ``cumulative_counts`` the counts
    at or below each bound. Linear interpolation inside the bucket, lower bound 0 for the first
    bucket, the highest finite bound when the quantile falls in the +Inf bucket, NaN for an empty
    histogram.
    """
    if np.isnan(q):
        return float("nan")
    if q < 0:
        return float("-inf")
    if q > 1:
        return float("inf")
    prepared = _prepare_buckets(le, cumulative_counts)
    if prepared is None:
        return float("nan")
    b, c = prepared
    total = c[-1]
    if total == 0:
        return float("nan")
    rank = float(q * total)
    idx = int(np.searchsorted(c[:-1], rank, side="left"))
    if idx == len(b) - 1:
        return float(b[-2])
    if idx == 0 and b[0] <= 0:
        return float(b[0])
    start, end, count = 0.0, float(b[idx]), float(c[idx])
    if idx > 0:
        start = float(b[idx - 1])
        count -= float(c[idx - 1])
        rank -= float(c[idx - 1])
    if count == 0:
        return float("nan")  # Prometheus computes 0/0 here (q = 0 with an empty first bucket)
    return float(start + (end - start) * (rank / count))


def fraction_below(threshold: float, le: np.ndarray, cumulative_counts: np.ndarray) -> float:
    """Share of observations <= ``threshold``, interpolating linearly inside its bucket.

    Uses the same bucket reading as ``histogram_quantile`` (first bucket starts at 0). A
    threshold at or above the highest finite bound counts what lies at or below that bound
    (observations in the +Inf bucket are taken as above any threshold). NaN when empty.
    """
    prepared = _prepare_buckets(le, cumulative_counts)
    if prepared is None or np.isnan(threshold):
        return float("nan")
    b, c = prepared
    total = c[-1]
    if total == 0:
        return float("nan")
    finite_b = b[:-1]
    if threshold >= finite_b[-1]:
        return float(c[-2] / total)
    idx = int(np.searchsorted(finite_b, threshold, side="left"))
    if finite_b[idx] == threshold:
        return float(c[idx] / total)
    lower = 0.0 if idx == 0 else float(finite_b[idx - 1])
    below = 0.0 if idx == 0 else float(c[idx - 1])
    upper = float(finite_b[idx])
    if threshold <= lower or (idx == 0 and upper <= 0):
        return float(below / total) if threshold >= lower else 0.0
    share = (threshold - lower) / (upper - lower)
    return float((below + share * (c[idx] - below)) / total)


class FrozenMapping(Mapping[str, float]):
    """A read-only mapping that deep-copies as itself.

    pandas deep-copies ``DataFrame.attrs`` on every derived frame; per-instance dicts there made
    each operation on a 512-instance histogram copy thousands of objects.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, float] | None = None) -> None:
        self._data: dict[str, float] = dict(data or {})

    def __getitem__(self, key: str) -> float:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMapping({self._data!r})"

    def __deepcopy__(self, memo: dict[int, object]) -> FrozenMapping:
        return self


def histogram_quantiles_matrix(q: float, le: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``histogram_quantile(q, le, row)`` for every row of ``counts`` at once.

    ``le`` ascending and unique with +Inf last; ``counts`` is ``[histograms, buckets]`` of
    cumulative counts. Same semantics as the scalar function, vectorised so a 512-instance
    cluster costs one array pass instead of 512 Python calls.
    """
    b = np.asarray(le, dtype=np.float64)
    c = np.maximum.accumulate(np.nan_to_num(np.asarray(counts, dtype=np.float64)), axis=1)
    n, k = c.shape
    out = np.full(n, np.nan)
    if k < 2 or not np.isposinf(b[-1]) or np.isnan(q):
        return out
    if q < 0 or q > 1:
        return np.full(n, -np.inf if q < 0 else np.inf)
    total = c[:, -1]
    rank = q * total
    idx = (c[:, :-1] < rank[:, None]).sum(axis=1)  # searchsorted(side="left") per monotone row
    rows = np.arange(n)
    finite_idx = np.minimum(idx, k - 2)
    prev = np.where(idx > 0, c[rows, np.maximum(idx - 1, 0)], 0.0)
    start = np.where(idx > 0, b[np.maximum(idx - 1, 0)], 0.0)
    count = c[rows, finite_idx] - prev
    with np.errstate(invalid="ignore", divide="ignore"):
        inside = start + (b[finite_idx] - start) * ((rank - prev) / count)
    out = np.where(count > 0, inside, np.nan)
    out = np.where((idx == 0) & (b[0] <= 0), b[0], out)
    out = np.where(idx == k - 1, b[-2], out)
    return np.where(total > 0, out, np.nan)
