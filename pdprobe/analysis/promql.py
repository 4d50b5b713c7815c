"""PromQL-style counter and histogram math over the dataset's long metric tables.

The functions mirror Prometheus semantics where one exists (``increase``/``rate`` with
extrapolation, ``histogram_quantile``) so numbers match what a user sees in Grafana, and are
vectorised (numpy/pandas; loops run over series, never over samples).

Window convention for the table helpers (``histogram_window``, ``counter_increase_by_instance``):
the increase of a cumulative series over ``[start_ts, end_ts]`` is the value of its last sample at
or before ``end_ts`` minus its *baseline*: the last sample at or before ``start_ts`` if there is
one, else the first sample inside the window. Back-to-back windows therefore add up exactly. A
series with a single usable sample has no known increase (NaN) unless ``from_zero`` is set, which
takes 0 as the baseline (a counter that started inside the window, e.g. a single ``/metrics``
snapshot of a freshly started server).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# A drop of a ``bits``-wide counter counts as a wrap (not a restart) when the previous value is in
# the upper half of the range and the new one in the lower half: hardware counters (mlx5
# Q-counters) wrap there and are not reset by an engine restart, while a restart drop from a small
# value is far more likely a driver reload than a wrap.
WRAP_TOP_FRACTION: Final = 0.5
# Prometheus extrapolates to a window edge when the gap to it is below 1.1 average sample
# intervals (promql/functions.go extrapolatedRate); otherwise by half an interval.
EXTRAPOLATION_THRESHOLD: Final = 1.1
AGGREGATIONS: Final = ("mean", "max", "min", "sum", "median", "last", "first")

KeySpec = str | Sequence[str]


# --------------------------------------------------------------------------------------------
# Single-series primitives
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Table helpers
# --------------------------------------------------------------------------------------------


def _keys(key: KeySpec) -> list[str]:
    return [key] if isinstance(key, str) else list(key)


def _select(table: pd.DataFrame, signal: str, kinds: Collection[str],
            instances: Collection[str] | None, key_cols: list[str]) -> pd.DataFrame:
    mask = (table["signal"] == signal) & table["kind"].isin(list(kinds))
    if instances is not None:
        mask &= table[key_cols[0]].isin(list(instances))
    out = table.loc[mask.fillna(False).to_numpy(dtype=bool)]
    return out[out["value"].notna()]


def _window_increase(frame: pd.DataFrame, group_cols: list[str], start_ts: float | None,
                     end_ts: float | None, from_zero: bool) -> pd.DataFrame:
    """Per group: increase over the window (see the module docstring); NaN when unknown."""
    import pandas as pd

    if end_ts is not None:
        frame = frame[frame["ts"] <= end_ts]
    if frame.empty:
        return pd.DataFrame(columns=[*group_cols, "increase"])
    frame = frame.sort_values([*group_cols, "ts"], kind="stable")
    grouped = frame.groupby(group_cols, sort=True, dropna=False)
    last = grouped["value"].last()
    last_ts = grouped["ts"].last()
    if start_ts is None:
        base = grouped["value"].first()
        n_used = grouped["value"].size()
        in_window = n_used > 0
    else:
        before = frame[frame["ts"] <= start_ts].groupby(group_cols, sort=True, dropna=False)
        inside = frame[frame["ts"] >= start_ts].groupby(group_cols, sort=True, dropna=False)
        base_before = before["value"].last().reindex(last.index)
        base_inside = inside["value"].first().reindex(last.index)
        base = base_before.fillna(base_inside)
        n_inside = inside["value"].size().reindex(last.index).fillna(0)
        n_used = n_inside + base_before.notna().astype(int)
        # A series whose last sample precedes the window has ended: its increase is unknown.
        in_window = (last_ts >= start_ts) & (n_inside > 0)
    inc = last - base
    if from_zero:
        single = n_used < 2
        inc = inc.where(~single, last)
    else:
        inc = inc.where(n_used >= 2)
    inc = inc.where(in_window)
    return inc.rename("increase").reset_index()


def counter_increase_by_instance(metrics: pd.DataFrame, signal: str,
                                 start_ts: float | None = None, end_ts: float | None = None,
                                 *, key: KeySpec = "instance", kind: str = "counter",
                                 from_zero: bool = False) -> pd.Series:
    """Increase of a cumulative ``signal`` per instance (or ``key``) over the window.

    Index: the key (``instance``; a MultiIndex for several key columns such as
    ``("node", "device", "port")`` on the network table). NaN where the increase is unknown.
    ``kind`` may be ``count`` or ``sum`` to take a histogram's count/sum rows.
    """
    import pandas as pd

    cols = _keys(key)
    frame = _select(metrics, signal, (kind,), None, cols)
    res = _window_increase(frame[[*cols, "ts", "value"]], cols, start_ts, end_ts, from_zero)
    if res.empty:
        idx = (pd.Index([], name=cols[0], dtype="string") if len(cols) == 1
               else pd.MultiIndex.from_arrays([[] for _ in cols], names=cols))
        return pd.Series([], index=idx, dtype="float64", name=signal)
    series = res.set_index(cols)["increase"].astype("float64")
    series.name = signal
    return series


def histogram_window(metrics: pd.DataFrame, signal: str, start_ts: float | None = None,
                     end_ts: float | None = None, instances: Collection[str] | None = None,
                     by_instance: bool = False, *, from_zero: bool = False) -> pd.DataFrame:
    """Bucket increases of histogram ``signal`` over the window.

    Returns columns ``[instance,] le, count``: the increase of each cumulative bucket, summed
    over instances unless ``by_instance`` (Prometheus ``sum by (le) (increase(..._bucket))``).
    Instances with no known increase are left out and listed in ``attrs["skipped_instances"]``.
    ``attrs`` also holds the increases of the histogram's ``_sum`` and ``_count``:
    ``attrs["sum"]``/``attrs["count"]`` (floats, over the kept instances) and
    ``attrs["sum_by_instance"]``/``attrs["count_by_instance"]`` (dict instance -> float).
    """
    import pandas as pd

    frame = _select(metrics, signal, ("bucket", "sum", "count"), instances, ["instance"])
    frame = frame[["instance", "ts", "kind", "le", "value"]]
    buckets = frame[frame["kind"] == "bucket"]
    res = _window_increase(buckets, ["instance", "le"], start_ts, end_ts, from_zero)
    if res.empty:
        out = pd.DataFrame({"le": pd.Series(dtype="float64"), "count": pd.Series(dtype="float64")})
        if by_instance:
            out.insert(0, "instance", pd.Series(dtype="string"))
        skipped: list[str] = []
    else:
        bad = res.loc[res["increase"].isna(), "instance"].astype(str)
        skipped = sorted(set(bad.tolist()))
        res = res[~res["instance"].isin(skipped)].rename(columns={"increase": "count"})
        if by_instance:
            out = res[["instance", "le", "count"]].sort_values(["instance", "le"])
        else:
            out = res.groupby("le", sort=True)["count"].sum().reset_index()
        out = out.reset_index(drop=True)
    kept = None if not skipped else set(skipped)
    attrs: dict[str, object] = {"skipped_instances": skipped}
    for kind in ("sum", "count"):
        part = frame[frame["kind"] == kind]
        inc = _window_increase(part[["instance", "ts", "value"]], ["instance"], start_ts, end_ts,
                               from_zero)
        if kept is not None and len(inc):
            inc = inc[~inc["instance"].isin(kept)]
        per = {str(k): float(v) for k, v in zip(inc.get("instance", []), inc.get("increase", []),
                                                strict=False)}
        attrs[f"{kind}_by_instance"] = per
        known = [v for v in per.values() if not np.isnan(v)]
        attrs[kind] = float(np.sum(known)) if known else float("nan")
    out.attrs.update(attrs)
    return out


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


def histogram_quantiles_by_instance(hist: pd.DataFrame, q: float) -> pd.Series:
    """``histogram_quantile(q, ...)`` per instance of a ``histogram_window(by_instance=True)``.

    Instances with different bucket sets are aligned on the union of bounds; a bound an
    instance lacks takes its count at the next lower bound it has (cumulative counts).
    """
    import pandas as pd

    if hist.empty:
        return pd.Series([], dtype="float64", name=f"q{q}")
    table = (hist.pivot_table(index="instance", columns="le", values="count", aggfunc="sum",
                              observed=True)
             .sort_index(axis=1).ffill(axis=1).fillna(0.0))
    values = histogram_quantiles_matrix(q, table.columns.to_numpy(dtype="float64"),
                                        table.to_numpy(dtype="float64"))
    return pd.Series(values, index=table.index.astype(str), dtype="float64", name=f"q{q}")


def _bins(ts: np.ndarray, step_s: float) -> np.ndarray:
    return np.floor(ts / step_s) * step_s


def rate_series(metrics: pd.DataFrame, signal: str, step_s: float, *,
                key: KeySpec = "instance", kind: str = "counter") -> pd.DataFrame:
    """Per-second rate of a cumulative ``signal`` per step-aligned bin and instance (or ``key``).

    The cumulative value is interpolated linearly between samples at each bin edge; a bin's
    rate is the difference across it over ``step_s``. Bins not covered by samples at both edges
    are left out. Columns ``ts`` (bin start), the key column(s), ``rate``.
    """
    import pandas as pd

    if step_s <= 0:
        raise ValueError("step_s must be positive")
    cols = _keys(key)
    frame = _select(metrics, signal, (kind,), None, cols)
    if frame.empty:
        out = {"ts": pd.Series(dtype="float64")}
        out.update({c: pd.Series(dtype=metrics[c].dtype) for c in cols})
        out["rate"] = pd.Series(dtype="float64")
        return pd.DataFrame(out)
    frame = frame.sort_values([*cols, "ts"], kind="stable")
    parts = []
    for group_key, g in frame.groupby(cols, sort=True):
        t = g["ts"].to_numpy(dtype=np.float64)
        v = g["value"].to_numpy(dtype=np.float64)
        if len(t) < 2:
            continue
        first_edge = np.ceil(t[0] / step_s) * step_s
        edges = np.arange(first_edge, t[-1] + step_s * 1e-9, step_s)
        if len(edges) < 2:
            continue
        cum = np.interp(edges, t, v)
        keys = group_key if isinstance(group_key, tuple) else (group_key,)
        data: dict[str, object] = {"ts": edges[:-1], "rate": np.diff(cum) / step_s}
        data.update({str(col): val for col, val in zip(cols, keys, strict=True)})
        parts.append(pd.DataFrame(data))
    if not parts:
        return rate_series(metrics.iloc[0:0], signal, step_s, key=key, kind=kind)
    out_frame = pd.concat(parts, ignore_index=True)
    for c in cols:
        out_frame[c] = out_frame[c].astype(metrics[c].dtype)
    return out_frame[["ts", *cols, "rate"]]


def gauge_series(metrics: pd.DataFrame, signal: str, step_s: float, agg: str = "mean", *,
                 key: KeySpec = "instance") -> pd.DataFrame:
    """A gauge ``signal`` aggregated per step-aligned bin and instance (or ``key``).

    ``agg`` is one of ``AGGREGATIONS``. Columns ``ts`` (bin start), the key column(s),
    ``value``; bins without samples are absent.
    """
    if step_s <= 0:
        raise ValueError("step_s must be positive")
    if agg not in AGGREGATIONS:
        raise ValueError(f"agg must be one of {', '.join(AGGREGATIONS)}")
    cols = _keys(key)
    frame = _select(metrics, signal, ("gauge",), None, cols).sort_values("ts", kind="stable")
    frame = frame.assign(ts=_bins(frame["ts"].to_numpy(dtype=np.float64), step_s))
    out = frame.groupby(["ts", *cols], sort=True)["value"].agg(agg).reset_index()
    return out[["ts", *cols, "value"]]
