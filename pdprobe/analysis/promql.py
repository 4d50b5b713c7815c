"""PromQL-style counter and histogram math over the dataset's long metric tables.

The primitives (``pdprobe.promql_math``) mirror Prometheus semantics where one exists (``increase``/``rate`` with
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

# The array primitives live in the bottom module (collectors use them too); re-exported here so
# analysis code keeps one import path for the whole toolbox.
from pdprobe.promql_grouped import (
    SortedGroups,
    group_sorted,
    increases_by_window,
    interp_grouped,
    window_increase,
)
from pdprobe.promql_math import (
    EXTRAPOLATION_THRESHOLD,
    WRAP_TOP_FRACTION,
    FrozenMapping,
    correct_counter,
    correct_counters_grouped,
    fraction_below,
    histogram_quantile,
    histogram_quantiles_matrix,
    increase,
    rate,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "AGGREGATIONS", "EXTRAPOLATION_THRESHOLD", "WRAP_TOP_FRACTION", "FrozenMapping", "KeySpec",
    "SortedGroups", "correct_counter", "correct_counters_grouped", "counter_increase_by_instance",
    "counter_increase_by_window", "fraction_below", "gauge_series", "group_sorted",
    "histogram_quantile", "histogram_quantiles_by_instance", "histogram_quantiles_matrix",
    "histogram_totals_by_window", "histogram_window", "increase", "increases_by_window",
    "interp_grouped", "rate", "rate_series", "window_increase",
]

AGGREGATIONS: Final = ("mean", "max", "min", "sum", "median", "last", "first")

KeySpec = str | Sequence[str]


# --------------------------------------------------------------------------------------------
# Table helpers
# --------------------------------------------------------------------------------------------


def _keys(key: KeySpec) -> list[str]:
    return [key] if isinstance(key, str) else list(key)


def _select(table: pd.DataFrame, signal: str, kinds: Collection[str],
            instances: Collection[str] | None, key_cols: list[str]) -> pd.DataFrame:
    from pdprobe.analysis.tables import signal_rows

    table = signal_rows(table, signal)
    mask = table["kind"].isin(list(kinds))
    if instances is not None:
        mask &= table[key_cols[0]].isin(list(instances))
    mask &= table["value"].notna()
    keep = mask.fillna(False).to_numpy(dtype=bool)
    # Most selections keep every row of the signal: skip the copy (a take of every column).
    return table if keep.all() else table.loc[keep]


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

    from pdprobe.analysis.promql_groups import increase_in_window, kind_groups
    from pdprobe.analysis.tables import signal_rows

    cols = _keys(key)
    groups = kind_groups(signal_rows(metrics, signal), kind, cols)
    res = increase_in_window(groups, cols, start_ts, end_ts, from_zero)
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

    from pdprobe.analysis.promql_groups import increase_in_window, kind_groups
    from pdprobe.analysis.tables import signal_rows

    # Each kind's rows are grouped and sorted once per table (promql_groups), not per call.
    rows = signal_rows(metrics, signal)
    res = increase_in_window(kind_groups(rows, "bucket", ["instance", "le"]), ["instance", "le"],
                             start_ts, end_ts, from_zero, instances)
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
    attrs: dict[str, object] = {"skipped_instances": skipped}  # a short list
    for kind in ("sum", "count"):
        inc = increase_in_window(kind_groups(rows, kind, ["instance"]), ["instance"], start_ts,
                                 end_ts, from_zero, instances)
        if kept is not None and len(inc):
            inc = inc[~inc["instance"].isin(kept)]
        per = _per_instance(inc)
        attrs[f"{kind}_by_instance"] = FrozenMapping(per)
        known = [v for v in per.values() if not np.isnan(v)]
        attrs[kind] = float(np.sum(known)) if known else float("nan")
    out.attrs.update(attrs)
    return out


def _per_instance(inc: pd.DataFrame) -> dict[str, float]:
    """``{str(instance): float(increase)}`` of ``increase_in_window``'s rows, the columns read
    whole (iterating an arrow string column is a Python object per element)."""
    import pandas as pd

    if "instance" not in inc.columns or "increase" not in inc.columns:
        return {}
    names = [str(pd.NA) if k is None else str(k) for k in inc["instance"].tolist()]
    values = inc["increase"].to_numpy(dtype=np.float64).tolist()
    return dict(zip(names, values, strict=True))


# Cells of a [group, window] block of increases: a week of 5-minute windows over 12k bucket
# series would otherwise be ~25M cells per array.
MAX_BLOCK_CELLS: Final = 2_000_000


def _window_blocks(n_groups: int, edges: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive ``(first, last + 1)`` window ranges of at most ``MAX_BLOCK_CELLS`` cells."""
    n_win = max(len(edges) - 1, 0)
    step = max(1, MAX_BLOCK_CELLS // max(n_groups, 1))
    return [(w, min(w + step, n_win)) for w in range(0, n_win, step)]


def counter_increase_by_window(metrics: pd.DataFrame, signal: str, edges: np.ndarray, *,
                               key: KeySpec = "instance", kind: str = "counter",
                               from_zero: bool = False) -> pd.DataFrame:
    """``counter_increase_by_instance`` for every window ``[edges[w], edges[w + 1]]``.

    Rows: the key (as ``counter_increase_by_instance``'s index); columns: window numbers.
    NaN where the increase is unknown or the series has no sample up to the window's end.
    """
    import pandas as pd

    cols = _keys(key)
    frame = _select(metrics, signal, (kind,), None, cols)
    n_win = max(len(edges) - 1, 0)
    if frame.empty:
        return pd.DataFrame(np.zeros((0, n_win)), columns=range(n_win))
    g = group_sorted(frame, cols, dropna=False)
    inc = np.concatenate([increases_by_window(g, edges[a:b + 1], from_zero)[0]
                          for a, b in _window_blocks(len(g.starts), edges)] or
                         [np.zeros((len(g.starts), 0))], axis=1)
    keys = g.key_frame(frame, cols, g.starts)
    index = (pd.Index(keys[cols[0]], name=cols[0]) if len(cols) == 1
             else pd.MultiIndex.from_frame(keys))
    return pd.DataFrame(inc, index=index, columns=range(n_win))


def histogram_totals_by_window(metrics: pd.DataFrame, signal: str, edges: np.ndarray,
                               instances: Collection[str] | None = None
                               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``histogram_window``'s totals for every window ``[edges[w], edges[w + 1]]`` at once.

    Per window: the observation count and sum (``attrs["count"]``/``attrs["sum"]``, over the
    instances not skipped) and whether any bucket increase is left (``len(...) > 0``).
    """
    import pandas as pd

    n_win = max(len(edges) - 1, 0)
    frame = _select(metrics, signal, ("bucket", "sum", "count"), instances, ["instance"])
    frame = frame[["instance", "ts", "kind", "le", "value"]]
    inst_codes, names = pd.factorize(frame["instance"], use_na_sentinel=False)
    frame = frame.assign(_inst=inst_codes)
    # Instances skipped per window: some bucket of theirs is present with an unknown increase.
    skipped = np.zeros((len(names), n_win), dtype=bool)
    has_buckets = np.zeros(n_win, dtype=bool)
    buckets = frame[frame["kind"] == "bucket"]
    if len(buckets):
        g = group_sorted(buckets, ["_inst", "le"], dropna=False)
        owner = buckets["_inst"].to_numpy()[g.order[g.starts]]
        for a, b in _window_blocks(len(g.starts), edges):
            inc, present = increases_by_window(g, edges[a:b + 1], False)
            np.logical_or.at(skipped[:, a:b], owner, present & np.isnan(inc))
            has_buckets[a:b] = (present & ~skipped[owner, a:b]).any(axis=0)
    totals = []
    for kind in ("count", "sum"):
        part = frame[frame["kind"] == kind]
        total = np.full(n_win, np.nan)
        if len(part):
            g = group_sorted(part, ["_inst"], dropna=False)
            owner = part["_inst"].to_numpy()[g.order[g.starts]]
            for a, b in _window_blocks(len(g.starts), edges):
                inc, present = increases_by_window(g, edges[a:b + 1], False)
                known = present & ~skipped[owner, a:b] & ~np.isnan(inc)
                total[a:b] = np.where(known.any(axis=0),
                                      np.where(known, inc, 0.0).sum(axis=0), np.nan)
        totals.append(total)
    return totals[0], totals[1], has_buckets


def histogram_quantiles_by_instance(hist: pd.DataFrame, q: float) -> pd.Series:
    """``histogram_quantile(q, ...)`` per instance of a ``histogram_window(by_instance=True)``.

    Instances with different bucket sets are aligned on the union of bounds; a bound an
    instance lacks takes its count at the next lower bound it has (cumulative counts).
    """
    import pandas as pd

    if hist.empty:
        return pd.Series([], dtype="float64", name=f"q{q}")
    instances, bounds, table = _bucket_matrix(hist)
    values = histogram_quantiles_matrix(q, bounds, table)
    return pd.Series(values, index=pd.Index(instances, name="instance"), dtype="float64",
                     name=f"q{q}")


def _bucket_matrix(hist: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Instances (sorted), bucket bounds (ascending) and the ``[instance, bound]`` counts.

    Counts of repeated (instance, bound) rows add up; a bound an instance lacks takes the
    count at its next lower bound, 0 below its first.
    """
    import pandas as pd

    inst_codes, instances = pd.factorize(hist["instance"].astype(str), sort=True)
    le_codes, bounds = pd.factorize(hist["le"].to_numpy(dtype=np.float64), sort=True)
    counts = hist["count"].to_numpy(dtype=np.float64)
    ok = (inst_codes >= 0) & (le_codes >= 0) & ~np.isnan(counts)
    table = np.zeros((len(instances), len(bounds)))
    present = np.zeros(table.shape, dtype=bool)
    np.add.at(table, (inst_codes[ok], le_codes[ok]), counts[ok])
    present[inst_codes[ok], le_codes[ok]] = True
    # Forward-fill along the bounds: each cell takes the last present column at or before it.
    cols = np.where(present, np.arange(len(bounds)), -1)
    last = np.maximum.accumulate(cols, axis=1)
    rows = np.arange(len(instances))[:, None]
    filled = np.where(last >= 0, table[rows, np.maximum(last, 0)], 0.0)
    return np.asarray(instances, dtype=object), np.asarray(bounds, dtype=np.float64), filled


def _bins(ts: np.ndarray, step_s: float) -> np.ndarray:
    return np.floor(ts / step_s) * step_s


def rate_series(metrics: pd.DataFrame, signal: str, step_s: float, *,
                key: KeySpec = "instance", kind: str = "counter") -> pd.DataFrame:
    """Per-second rate of a cumulative ``signal`` per step-aligned bin and instance (or ``key``).

    The cumulative value is interpolated linearly between samples at each bin edge; a bin's
    rate is the difference across it over ``step_s``. Bins not covered by samples at both edges
    are left out. Columns ``ts`` (bin start), the key column(s), ``rate``; sorted by key, then
    time.
    """
    import pandas as pd

    if step_s <= 0:
        raise ValueError("step_s must be positive")
    cols = _keys(key)
    frame = _select(metrics, signal, (kind,), None, cols)
    g = group_sorted(frame, cols, dropna=True) if len(frame) else None
    if g is None or not len(g.starts):
        return _empty_rates(metrics, cols)
    t = g.ts
    first_t, last_t = t[g.starts], t[g.ends - 1]
    # The edges np.arange(ceil(t0 / step) * step, t_last + step * 1e-9, step) of each series.
    first_edge = np.ceil(first_t / step_s) * step_s
    n_edges = np.maximum(np.ceil((last_t + step_s * 1e-9 - first_edge) / step_s), 0)
    n_edges = np.where(g.sizes >= 2, n_edges, 0).astype(np.int64)
    if n_edges.max(initial=0) < 2:
        return _empty_rates(metrics, cols)
    group_of_edge = np.repeat(np.arange(len(g.starts)), n_edges)
    offsets = np.cumsum(n_edges) - n_edges
    k = np.arange(len(group_of_edge)) - offsets[group_of_edge]
    # np.arange's own arithmetic (start + k * ((start + step) - start)), for identical edges.
    delta = (first_edge + step_s) - first_edge
    edges = first_edge[group_of_edge] + k * delta[group_of_edge]
    cum = interp_grouped(g, group_of_edge, edges)
    same = group_of_edge[1:] == group_of_edge[:-1]
    rates = (cum[1:] - cum[:-1])[same] / step_s
    lefts = np.flatnonzero(same)
    keys = g.key_frame(frame, cols, g.starts[group_of_edge[lefts]])
    out = pd.DataFrame({"ts": edges[lefts]})
    for col in cols:
        out[col] = keys[col].array
    out["rate"] = rates
    return out


def _empty_rates(metrics: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    import pandas as pd

    out = {"ts": pd.Series(dtype="float64")}
    out.update({c: pd.Series(dtype=metrics[c].dtype) for c in cols})
    out["rate"] = pd.Series(dtype="float64")
    return pd.DataFrame(out)


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
