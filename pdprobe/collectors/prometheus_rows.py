"""Live series -> per-instance group rows -> the dataset's long metric and network tables.

``batch_groups`` turns one batch's answer into groups (instance, node/device/port, signal, kind,
le) with reset/wrap-corrected, carried-forward cumulative values or aggregated gauges;
``select_and_flatten`` applies engine precedence and rename chains and emits the long tables in
time order. Everything is vectorised over series and grid columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.metric_roles import ENGINE_PRIORITY, UNLISTED_ENGINE_PRIORITY
from pdprobe.collectors.prometheus_decode import SeriesSet
from pdprobe.collectors.prometheus_members import (
    _KINDS,
    _ffill_rows,
    _grid,
    _group_ids,
    _members,
)
from pdprobe.dataset import (
    DEPLOYMENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    conform,
)
from pdprobe.redact import redact as redact  # re-exported for callers of this module

if TYPE_CHECKING:
    import pandas as pd


_SCALED_ROWS: Final = frozenset({S.GAUGE, S.COUNTER, S.HSUM})


@dataclass
class Groups:
    """One batch's aggregated rows: a key table, a value matrix and a presence matrix."""

    keys: pd.DataFrame  # one row per group (see _KEY_COLUMNS)
    values: np.ndarray  # [groups, columns]
    present: np.ndarray  # [groups, columns] bool
    ts: np.ndarray  # [columns]
    reset_idents: set[str]  # instances whose cumulative series dropped (restart or wrap)
    notes: tuple[str, ...] = ()  # how router series were named (metric_names.name_label_sets)


def batch_groups(batch: pp.Batch, sset: SeriesSet, *, node_label: str | None = None,
                 raw: bool = False, as_aggregated: bool = False) -> Groups | None:
    """Turn one batch's series into per-(instance, signal, kind, le) group rows.

    Cumulative rows: each series is reset/wrap-corrected, carried forward across its gaps, and
    summed over the series of a group (sub-series, filter-label values); gauges are combined
    with the spec's aggregation. ``raw`` series (un-aggregated, possibly raw sample times) go
    through the same path. ``as_aggregated``: the answer to ``batch.promql(aggregate=False)``,
    read as its ``sum by`` would have been (only the labels that query keeps are looked at).
    """
    import pandas as pd

    from pdprobe.promql_math import correct_counters_grouped

    if not sset.labels:
        return None
    by_name: dict[str, tuple[pp.Family, str]] = {}
    for fam in batch.families:
        for name in fam.series_names():
            kind = fam.row_kind(name)
            if kind is not None:
                by_name[name] = (fam, kind)
    if as_aggregated and node_label not in batch.kept_labels:
        node_label = None  # the server's `sum by` would have dropped it
    members = _members(batch, sset.labels, by_name, node_label)
    if members is None:
        return None
    specs, m_le, m_node, m_device, m_port = (members.specs, members.le, members.node,
                                             members.device, members.port)

    col, grid_ts = _grid(sset)
    n_series, n_cols = len(sset.labels), len(grid_ts)
    sample_series = np.repeat(np.arange(n_series), np.diff(sset.offsets))
    mat = np.full((n_series, n_cols), np.nan)
    mat[sample_series, col] = sset.values
    present = ~np.isnan(mat)

    series, spec_of, kind_of, ident = members.series, members.spec, members.kind, members.ident
    reset_idents: set[str] = set()
    if batch.cumulative:
        # Correct each series once (a series feeding two specs has one bit width).
        bits = np.zeros(n_series)
        spec_bits = np.asarray([sp.counter_bits or 0 for _, sp in specs], dtype=np.float64)
        np.maximum.at(bits, series, spec_bits[spec_of])
        drops = np.zeros(n_series, dtype=bool)
        if n_cols > 1:
            drops = np.asarray((np.diff(_ffill_rows(mat), axis=1) < 0).any(axis=1), dtype=bool)
        if drops.any() and batch.scope != "network":
            reset_idents = set(ident[drops[series]].tolist())
        corrected = correct_counters_grouped(
            np.repeat(np.arange(n_series), n_cols), mat.reshape(-1),
            np.repeat(bits, n_cols) if bits.any() else None)
        work = _ffill_rows(corrected.reshape(n_series, n_cols))
    else:
        work = mat
    gid = _group_ids(ident, m_node, m_device, m_port, spec_of, kind_of, m_le)
    order = np.argsort(gid, kind="stable")
    gid_sorted = gid[order]
    starts = np.flatnonzero(np.concatenate(([True], gid_sorted[1:] != gid_sorted[:-1])))
    rows = series[order]
    pres = np.add.reduceat(present[rows].astype(np.int64), starts, axis=0)
    rep = order[starts]
    rep_specs = [specs[s] for s in spec_of[rep].tolist()]
    aggs = np.asarray([sp.aggregate if _KINDS[k] == S.GAUGE else "sum"
                       for (_, sp), k in zip(rep_specs, kind_of[rep].tolist(), strict=True)])
    if batch.cumulative:
        vals = np.add.reduceat(work[rows], starts, axis=0)
    else:
        filled_vals = np.where(present[rows], work[rows], 0.0)
        sums = np.add.reduceat(filled_vals, starts, axis=0)
        maxes = np.maximum.reduceat(np.where(present[rows], work[rows], -np.inf), starts, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums / pres
        vals = np.where((aggs == "max")[:, None], maxes,
                        np.where((aggs == "mean")[:, None], means, sums))
    kinds = [_KINDS[k] for k in kind_of[rep].tolist()]
    scale = np.asarray([sp.scale if k in _SCALED_ROWS else 1.0
                        for (_, sp), k in zip(rep_specs, kinds, strict=True)])
    vals = vals * scale[:, None]
    keys = pd.DataFrame({
        "ident": ident[rep], "node": m_node[rep], "device": m_device[rep], "port": m_port[rep],
        "signal": [sp.signal for _, sp in rep_specs], "kind": kinds,
        "le": m_le[rep], "agg": aggs,
        "family": [f.exposed for f, _ in rep_specs], "engine": [f.engine for f, _ in rep_specs],
        "chain": [f.chain for f, _ in rep_specs], "rank": [f.rank for f, _ in rep_specs],
        "frontend": [f.exposed.startswith("dynamo_frontend_") and not f.spec.instance_label
                     for f, _ in rep_specs],
    })
    keys["scope"] = batch.scope
    keys["raw"] = raw
    return Groups(keys, vals, pres > 0, grid_ts, reset_idents, members.notes)


def select_and_flatten(groups: Sequence[Groups]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Choose among alternatives and emit the long ``metrics`` and ``network`` tables.

    Per instance (or node/device/port) and signal, the preferred engine's families win, and in
    each rename chain the newest name; families that are genuinely different (e.g. failed
    transfers and failed receives) are added (cumulative) or combined with the spec's
    aggregation (gauges). Also returns the kept group keys (for roles and summaries).
    Rows come out in time order; string columns are built from the (few) group keys.
    """
    import pandas as pd

    frames: list[pd.DataFrame] = []
    for i, g in enumerate(groups):
        frame = g.keys.copy()
        frame["batch"] = i
        frame["local"] = np.arange(len(frame))
        frame["any_present"] = np.asarray(g.present.any(axis=1), dtype=bool)
        frames.append(frame)
    if not frames:
        return (conform(pd.DataFrame(), METRIC_COLUMNS), conform(pd.DataFrame(), NETWORK_COLUMNS),
                pd.DataFrame())
    keys = pd.concat(frames, ignore_index=True)
    keys = keys[keys["any_present"]]
    if not keys.empty:
        keys = keys.assign(eprio=keys["engine"].map(ENGINE_PRIORITY).fillna(UNLISTED_ENGINE_PRIORITY))
        ident = ["scope", "ident", "node", "device", "port", "signal", "kind"]
        best_engine = keys.groupby(ident, dropna=False)["eprio"].transform("min")
        keys = keys[keys["eprio"] == best_engine]
        best_rank = keys.groupby([*ident, "engine", "chain"], dropna=False)["rank"].transform("min")
        keys = keys[keys["rank"] == best_rank]
    keys = keys.reset_index(drop=True)
    metrics = _flatten(groups, keys[keys["scope"] == "instance"], METRIC_COLUMNS)
    network = _flatten(groups, keys[keys["scope"] == "network"], NETWORK_COLUMNS)
    return metrics, network, keys


def deployment_rows(groups: Sequence[Groups], keys: pd.DataFrame) -> pd.DataFrame:
    """The deployment-scope rows of the kept group keys (``select_and_flatten``'s third
    result), in ``DEPLOYMENT_COLUMNS`` (their ``ident`` is the deployment's name)."""
    import pandas as pd

    kept = keys[keys["scope"] == "deployment"] if len(keys) else keys
    if kept.empty:
        return conform(pd.DataFrame(), DEPLOYMENT_COLUMNS)
    flat = _flatten(groups, kept, METRIC_COLUMNS)
    return conform(flat.rename(columns={"instance": "deployment"}), DEPLOYMENT_COLUMNS)


def _time_order(ts: np.ndarray, grids: Sequence[np.ndarray]) -> np.ndarray:
    """Stable time order of ``ts``, whose values all come from the query grids ``grids``.

    The grids hold a few hundred distinct times: sorting their 16-bit ranks is a radix sort,
    several times faster than sorting a million floats. Raw re-reads (other times) fall back.
    """
    grid = np.unique(np.concatenate([np.asarray(g, dtype=np.float64) for g in grids]))
    if len(grid) <= np.iinfo(np.uint16).max:
        rank = np.searchsorted(grid, ts)
        if np.array_equal(grid[np.minimum(rank, len(grid) - 1)], ts):
            return np.argsort(rank.astype(np.uint16), kind="stable")
    return np.argsort(ts, kind="stable")


def _flatten(groups: Sequence[Groups], kept: pd.DataFrame,
             columns: Mapping[str, str]) -> pd.DataFrame:
    """The present cells of the kept groups as rows of ``columns`` (time order)."""
    import pandas as pd
    import pyarrow as pa

    if kept.empty:
        return conform(pd.DataFrame(), columns)
    kept = kept.reset_index(drop=True)
    dest_cols = ["ident", "node", "device", "port", "signal", "kind", "le"]
    dest = _group_ids(*(kept[c].to_numpy() for c in dest_cols))
    shared = np.bincount(dest)[dest] > 1
    ts_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    row_parts: list[np.ndarray] = []
    slow: list[pd.DataFrame] = []
    for b, sel in kept.groupby("batch", sort=True):
        g = groups[int(str(b))]
        local = sel["local"].to_numpy()
        krow = sel.index.to_numpy()
        gi, cj = np.nonzero(g.present[local])
        vals = g.values[local][gi, cj]
        rows = krow[gi]
        fast = ~shared[rows]
        ts_parts.append(g.ts[cj][fast])
        val_parts.append(vals[fast])
        row_parts.append(rows[fast])
        if not fast.all():
            slow.append(pd.DataFrame({"dest": dest[rows[~fast]], "ts": g.ts[cj][~fast],
                                      "value": vals[~fast], "row": rows[~fast],
                                      "agg": kept["agg"].to_numpy()[rows[~fast]]}))
    if slow:
        # Distinct families feeding one signal of one instance: added (cumulative, sum gauges)
        # or combined with the gauge's aggregation, per timestamp.
        part = pd.concat(slow, ignore_index=True)
        for how, sub in part.groupby("agg", sort=True):
            func = {"mean": "mean", "max": "max"}.get(str(how), "sum")
            combined = sub.groupby(["dest", "ts"], sort=False).agg(
                value=("value", func), row=("row", "first")).reset_index()
            ts_parts.append(combined["ts"].to_numpy(dtype=np.float64))
            val_parts.append(combined["value"].to_numpy(dtype=np.float64))
            row_parts.append(combined["row"].to_numpy(dtype=np.int64))
    ts = np.concatenate(ts_parts)
    values = np.concatenate(val_parts)
    rows = np.concatenate(row_parts)
    order = _time_order(ts, [g.ts for g in groups])
    ts, values, rows = ts[order], values[order], rows[order]
    source = {"instance": "ident"}
    out: dict[str, object] = {}
    for name, dtype in columns.items():
        if name == "ts":
            out[name] = ts
        elif name == "value":
            out[name] = values
        elif name == "le":
            out[name] = kept["le"].to_numpy(dtype=np.float64)[rows]
        else:
            codes, uniques = pd.factorize(kept[source.get(name, name)].to_numpy(dtype=object))
            dictionary = pa.DictionaryArray.from_arrays(
                pa.array(codes[rows].astype(np.int32)), pa.array(list(uniques), type=pa.string()))
            out[name] = pd.arrays.ArrowStringArray(dictionary.dictionary_decode())
            assert dtype == "string"
    return conform(pd.DataFrame(out), columns)
