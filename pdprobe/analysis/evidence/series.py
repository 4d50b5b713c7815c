"""Per-bin evidence: role-level cluster series, instances alive per bin, workload series.

The cluster table has one row per bin (index: bin start) and the ``CLUSTER`` columns of the
registry: per-role means of the per-instance gauge bins, pool throughput, instances serving,
arrivals, length means and request-record latency medians. Everything is a groupby over bins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.evidence.columns import (
    ROLE_COLUMN,
    arrival_bins,
    arrivals_in_order,
    request_column,
    transfer_seconds,
)
from pdprobe.analysis.row_slices import blocked_medians, has_values
from pdprobe.analysis.table_facts import column_finite

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.model import Window
    from pdprobe.analysis.evidence.per_instance import ArrivalBinFigures
    from pdprobe.dataset import Dataset

# Per-role means of per-instance gauge bins: (cluster column, bins name, role).
ROLE_MEANS: Final = (("prefill_queue", "g_waiting", "prefill"),
                     ("prefill_bootstrap", "g_bootstrap", "prefill"),
                     ("prefill_inflight", "g_inflight", "prefill"),
                     ("prefill_running", "g_running", "prefill"),
                     ("decode_waiting", "g_waiting", "decode"),
                     ("decode_deferred", "g_deferred", "decode"),
                     ("decode_kv_fetch", "g_kv_fetch", "decode"),
                     ("decode_prealloc", "g_prealloc", "decode"),
                     ("decode_transfer_queue", "g_transfer_queue", "decode"),
                     ("decode_kv_usage", "g_kv_usage", "decode"),
                     ("decode_running", "g_running", "decode"),
                     ("decode_retracted", "g_retracted", "decode"))
ALIVE_COLUMN: Final[Mapping[str, str]] = {"prefill": "prefill_alive", "decode": "decode_alive"}
# Request columns whose per-bin median is read off each bin's sorted values rather than a
# partition at the middle: waits before prefill are 0 for every request that found no queue
# (about half of them), and numpy's partition slows down badly on ties where its AVX-512 sort
# does not (4.5M sampled waits at 10M rows: 61 ms partitioned, 37 ms sorted; TPOT and
# transfer times, without ties, 27 ms partitioned and 44 ms sorted). The same order
# statistics, so the same medians.
_SORTED_MEDIANS: Final = frozenset({"queue_s"})


def _role_mean(bins: Mapping[str, pd.DataFrame], name: str, names: tuple[str, ...]) -> Any:
    """Mean over these instances of the per-bin frame ``name`` (None when absent)."""
    frame = bins.get(name)
    if frame is None:
        return None
    cols = [c for c in names if c in frame.columns]
    if not cols:
        return None
    return frame[cols].mean(axis=1, skipna=True)


def cluster_series(ds: Dataset, window: Window, table: pd.DataFrame,
                   bins: Mapping[str, pd.DataFrame], alive: pd.DataFrame,
                   found: ArrivalBinFigures | None = None) -> pd.DataFrame:
    """The cluster table: one row per bin, the registry's ``CLUSTER`` columns. ``found``:
    what ``request_figures`` found for the arrival bins (None: each found here)."""
    import pandas as pd

    out = pd.DataFrame(index=pd.Index(window.bin_ts, name="ts"))
    roles = {r: tuple(table.index[table["role"] == r].astype(str)) for r in ("prefill", "decode")}
    for col, name, role in ROLE_MEANS:
        series = _role_mean(bins, name, roles[role])
        if series is not None:
            out[col] = series.to_numpy()
    for col, name, role, signal in (
            ("prompt_tps_total", "g_prompt_tps", "prefill", S.PROMPT_TOKENS_TOTAL),
            ("gen_tps_total", "g_gen_tps", "decode", S.GENERATION_TOKENS_TOTAL)):
        frame = bins.get(name)
        cols_ = [c for c in roles[role] if frame is not None and c in frame.columns]
        if frame is not None and cols_:
            out[col] = frame[cols_].sum(axis=1, min_count=1).to_numpy()
        else:  # token counters, when the engine exposes no throughput gauge (SGLang)
            rate = _counter_rate_bins(ds, window, signal, roles[role])
            if rate is not None:
                out[col] = rate
    if "decode_waiting" in out.columns:
        deferred = out["decode_deferred"].fillna(0.0) if "decode_deferred" in out.columns else 0.0
        out["decode_admission"] = (out["decode_waiting"] - deferred).clip(lower=0.0)
    # Instances alive per bin: any metric sample in the bin, or a request that names them.
    for role in ("prefill", "decode"):
        cols = [c for c in roles[role] if c in alive.columns]
        if cols:
            out[ALIVE_COLUMN[role]] = alive[cols].sum(axis=1).to_numpy(dtype="float64")
    _request_series(ds, window, out, found)
    if "prompt_mean" not in out.columns:
        _histogram_mix(ds, window, out)
    return out


def _counter_rate_bins(ds: Dataset, window: Window, signal: str,
                       instances: tuple[str, ...]) -> np.ndarray | None:
    """Per-bin rate of a counter summed over ``instances`` (NaN where nothing was sampled)."""
    from pdprobe.analysis.tables import signal_rows

    m = ds.metrics
    if m.empty or not instances:
        return None
    rows = signal_rows(m, signal)
    sub = rows[((rows["kind"] == S.COUNTER) & rows["instance"].isin(list(instances))).to_numpy(
        dtype=bool, na_value=False)]
    if sub.empty:
        return None
    per = binned_increase(sub, ["instance"], window)
    if per.empty:
        return None
    total = per.groupby(level="_bin").sum()
    out = np.full(window.n_bins, np.nan)
    out[total.index.to_numpy(dtype=np.int64)] = total.to_numpy(dtype="float64") / window.step_s
    return out


def alive_bins(ds: Dataset, window: Window, index: pd.Index,
               bins: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """1 where an instance was serving in a bin, else 0 (columns: instances).

    An instance with metric samples in a bin is alive there. From request records alone an
    instance counts as alive from the first to the last request that names it: a bin in which
    the router sent it nothing is exactly what a skewed router looks like, not a dead instance.
    ``bins``: the per-bin frames made so far, whose requests per (bin, instance) cell
    (``ROLE_COUNT_BINS``, from ``request_figures``) name the cells when every arrival is
    inside the window (``_counted_cells``).
    """
    import pandas as pd

    from pdprobe.analysis.tables import column_codes

    names = list(index.astype(str))
    pos = {n: i for i, n in enumerate(names)}
    alive = np.zeros((window.n_bins, len(names)))

    def located(codes: np.ndarray, uniques: pd.Index, ts: pd.Series
                ) -> tuple[np.ndarray, np.ndarray]:
        lookup = np.array([pos.get(str(u), -1) for u in uniques] + [-1], dtype=np.int64)
        where = lookup[codes]  # code -1 (missing) maps to the trailing -1
        t = ts.to_numpy(dtype="float64")
        ok = (where >= 0) & (t >= window.start_ts) & (t <= window.end_ts)
        return where[ok], window.bin_of(t[ok])

    m = ds.metrics
    if len(m):
        where, b = located(*column_codes(m, "instance"), m["ts"])
        alive[b, where] = 1.0
    counted = None if bins is None else _counted_cells(ds, window, pos, len(names), bins)
    for seen in counted if counted is not None else _request_cells(ds, window, pos, len(names)):
        # first and last bin naming each instance, from the (instance, bin) cells seen
        named = seen.any(axis=1)
        first = np.where(named, seen.argmax(axis=1), window.n_bins)
        last = np.where(named, window.n_bins - 1 - seen[:, ::-1].argmax(axis=1), -1)
        bins_ = np.arange(window.n_bins)[:, None]
        alive = np.maximum(alive, ((bins_ >= first[None, :]) & (bins_ <= last[None, :]))
                           .astype(float))
    return pd.DataFrame(alive, columns=names)


def _counted_cells(ds: Dataset, window: Window, pos: Mapping[str, int], n_names: int,
                   bins: Mapping[str, pd.DataFrame]) -> list[np.ndarray] | None:
    """``_request_cells`` read off the requests counted per (bin, instance) cell of each role
    column (``ROLE_COUNT_BINS``: a cell with rows counts at least 1), when arrivals in time
    order all lie inside the window (so no row is left out there, nor is a NaN arrival put in
    bin 0): the same cells without a pass over the rows (at 10M rows two cell codes per row,
    ~45 ms). None when the arrivals are not so, or a role column with values has no counts."""
    from pdprobe.analysis.evidence.registry import ROLE_COUNT_BINS

    req = ds.requests
    if not len(req):
        return []
    t = req["arrival_ts"].to_numpy(dtype="float64")
    if not (t[0] >= window.start_ts and t[-1] <= window.end_ts and arrivals_in_order(ds)):
        return None
    out = []
    for role, col in ROLE_COLUMN.items():
        if col not in ds.request_columns:
            continue
        frame = bins.get(ROLE_COUNT_BINS[role])
        if frame is None:
            if has_values(req, col):
                return None  # counted nowhere: read the rows
            continue
        named = frame.to_numpy(dtype="float64") > 0  # NaN: no row
        seen = np.zeros((n_names, window.n_bins), dtype=bool)
        for label, column in zip(frame.columns, named.T, strict=True):
            if pos.get(str(label), -1) >= 0 and column.any():
                seen[pos[str(label)]] |= column
        if seen.any():
            out.append(seen)
    return out


def _request_cells(ds: Dataset, window: Window, pos: Mapping[str, int],
                   n_names: int) -> list[np.ndarray]:
    """Per role column naming some instance inside the window: the (instance, bin) cells
    its requests name, as a bool matrix (instances at ``pos``). One pass over row slices for
    both columns: cells are marked on the columns' own codes (a code -1 marks a spare row),
    then mapped to instances, so no per-row name lookup or full-length cell array is built."""
    from pdprobe.analysis.grouped import chunks, key_codes

    req = ds.requests
    columns = [key_codes(req[col]) for col in ROLE_COLUMN.values()
               if col in ds.request_columns and len(req)]
    if not columns:
        return []
    n_bins = window.n_bins
    t = req["arrival_ts"].to_numpy(dtype="float64")
    all_bins = arrival_bins(ds, window)
    marks = [np.zeros((len(labels) + 1) * n_bins, dtype=bool) for _codes, labels in columns]
    for part in chunks(len(req)):
        inside = t[part] >= window.start_ts
        inside &= t[part] <= window.end_ts
        every = bool(inside.all())
        # int32 cells (a role column's cells are far fewer): half the memory of intp per row
        bins = all_bins[part].astype(np.int32)
        for (codes, _labels), mark in zip(columns, marks, strict=True):
            cell = codes[part].astype(np.int32)
            cell *= n_bins
            cell += bins  # code -1 lands in the spare last row (a negative index)
            mark[cell if every else cell[inside]] = True
    out = []
    for (_codes, labels), mark in zip(columns, marks, strict=True):
        by_code = mark.reshape(len(labels) + 1, n_bins)[:-1]
        seen = np.zeros((n_names, n_bins), dtype=bool)
        for code, label in enumerate(labels):
            if pos.get(label, -1) >= 0 and by_code[code].any():
                seen[pos[label]] |= by_code[code]
        if seen.any():
            out.append(seen)
    return out


def _request_series(ds: Dataset, window: Window, out: pd.DataFrame,
                    found: ArrivalBinFigures | None = None) -> None:
    """Arrivals, length means and latency medians per bin from request records: one grouping
    of the rows by bin, one sort per column and bin (``analysis.grouped``). ``found``: the
    bins' sample and prompt-token sums ``request_figures`` found (None: each found here)."""
    from pdprobe.analysis.evidence.bin_figures import (
        bin_groups,
        run_counts_and_sums,
        sorted_figures,
        transfer_medians,
    )
    from pdprobe.analysis.grouped import GROUP_SAMPLE_MAX, column_values, sample_max

    req = ds.requests
    if req.empty:
        return
    n = window.n_bins
    # medians and p90 on a sample of each bin's rows in a very large table
    # (drawn beside a role column's cells when it could be: ``request_figures``)
    groups = bin_groups(arrival_bins(ds, window), n, sample_max(len(req), GROUP_SAMPLE_MAX),
                        drawn=None if found is None else found.sample)
    sizes = groups.totals.astype("float64")

    def per_bin(values: np.ndarray) -> np.ndarray:
        full = np.full(n, np.nan)
        full[groups.ids] = values
        return full

    def column(name: str) -> np.ndarray:
        return column_values(req, name)  # the column's own array: no float copy of a token one

    out["arrivals"] = np.nan_to_num(per_bin(sizes), nan=0.0)
    # each bin's prompt tokens summed beside the cells' when exact (``cell_sums``): the very
    # floats of the exact sums ``Groups.sums`` adds
    prompt_sums = None if found is None else found.prompt_sums
    for name, col in (("prompt_tokens", "prompt_mean"), ("output_tokens", "output_mean")):
        values = column(name)
        counts = groups.counts(values)
        sums = prompt_sums[groups.ids] if name == "prompt_tokens" and prompt_sums is not None \
            else groups.sums(values)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[col] = per_bin(np.where(counts > 0, sums / counts, np.nan))
    cols = ds.request_columns
    ttft_p90 = None  # read off the TTFT's sort (one pass for both figures)
    for col, name in (("queue_s", "queue_s_p50"), ("ttft_s", "ttft_p50"),
                      ("tpot_s", "tpot_p50")):
        if request_column(ds, col) is None:
            continue
        if col in _SORTED_MEDIANS:  # a median alone, of values with many ties: sorted
            out[name] = per_bin(sorted_figures(groups, column(col))[0])
            continue
        if col != "ttft_s":  # a median alone: each bin partitioned at its middle, not sorted
            out[name] = per_bin(blocked_medians(groups, column(col)))
            continue
        # the median and the p90 read off one sort of each bin
        median, p90 = sorted_figures(groups, column(col), 0.9)
        out[name] = per_bin(median)
        ttft_p90 = per_bin(p90)
    xfer = transfer_seconds(ds)
    x = None if xfer is None else xfer.to_numpy(dtype="float64")
    with_kv = "kv_bytes" in cols and has_values(req, "kv_bytes")
    kv = column("kv_bytes") if with_kv else None
    per_gb = None
    if x is not None:  # the transfer time's median, and per GB of the records with bytes
        xfer_p50, per_gb = transfer_medians(groups, x, kv)
        out["xfer_s_p50"] = per_bin(xfer_p50)
    if ttft_p90 is not None:  # set here: the frame's column order is unchanged
        out["ttft_p90"] = ttft_p90
    if kv is not None:
        # (the column's sum, cached for the transfer figures: finite, no value is NaN)
        have, sums = run_counts_and_sums(groups, kv, no_nan=kv.dtype == np.float64 and
                                         column_finite(req, "kv_bytes"))
        total = np.where(have > 0, sums, np.nan)  # sum(min_count=1)
        out["kv_bytes_per_s"] = per_bin(total) / window.step_s
        if per_gb is not None:
            out["xfer_s_per_gb_p50"] = per_bin(per_gb)


def _histogram_mix(ds: Dataset, window: Window, out: pd.DataFrame) -> None:
    """Per-bin mean prompt/output length from the token histograms' sum and count rates."""
    from pdprobe.analysis.promql import rate_series

    m = ds.metrics
    if m.empty:
        return
    for signal, col in ((S.PROMPT_TOKENS, "prompt_mean"), (S.OUTPUT_TOKENS, "output_mean")):
        sums = rate_series(m, signal, window.step_s, kind=S.HSUM)
        counts = rate_series(m, signal, window.step_s, kind=S.HCOUNT)
        if sums.empty or counts.empty:
            continue
        s = sums.groupby("ts")["rate"].sum()
        c = counts.groupby("ts")["rate"].sum()
        mean = (s / c.where(c > 0)).dropna()
        idx = window.bin_of(mean.index.to_numpy(dtype="float64"))
        values = np.full(window.n_bins, np.nan)
        values[idx] = mean.to_numpy(dtype="float64")
        out[col] = values
        if col == "prompt_mean":
            rate_per_bin = np.full(window.n_bins, np.nan)
            rate_per_bin[idx] = c.reindex(mean.index).to_numpy(dtype="float64") * window.step_s
            out["arrivals_hist"] = rate_per_bin


# ---------------------------------------------------------------------------------------------
# network


def binned_increase(frame: pd.DataFrame, key: list[str], window: Window) -> pd.Series:
    """Counter increase per (key..., bin): each step between consecutive samples of a series
    goes to the bin of its later sample (a drop counts as a restart from 0)."""
    import pandas as pd

    from pdprobe.analysis.promql import group_sorted

    if len(frame) < 2:
        return pd.Series([], dtype="float64")
    # Samples of a series in time order, series in key order; rows with a missing label
    # belong to no series.
    g = group_sorted(frame, key, dropna=True)
    t, v = g.ts, g.values
    same = np.ones(max(len(t) - 1, 0), dtype=bool)
    same[g.starts[1:] - 1] = False  # a step across two series is no step
    d = np.diff(v)
    d = np.where(d < 0, v[1:], d)
    inside = (t[1:] >= window.start_ts) & (t[1:] <= window.end_ts)
    keep = same & inside & np.isfinite(d)
    series = np.cumsum(~same)[keep]  # series number of each step's later sample
    cell = series * window.n_bins + window.bin_of(t[1:][keep])
    # pandas' grouped sum (compensated, in time order within a cell) on integer cells
    inc = pd.Series(d[keep]).groupby(cell, sort=True).sum()
    cells, first = np.unique(cell, return_index=True)  # sorted, as the groupby's
    rows = np.flatnonzero(keep)[first] + 1  # a sample of each cell, for its key labels
    labels = g.key_frame(frame, key, rows)
    index = pd.MultiIndex.from_arrays(
        [*(labels[c] for c in key), cells % window.n_bins], names=[*key, "_bin"])
    return pd.Series(inc.to_numpy(), index=index, name="inc")

