"""Evidence features: every number a rule looks at, computed once per diagnosis.

``features_for(ctx)`` turns the dataset's long tables and the analysis results into a few
tidy tables: one row per instance (traffic share, queue depth, KV usage, hit rate, latencies,
transfer figures, each with where it came from), per-bin series per instance and per role
(for trend and change-point tests), one row per node (RDMA traffic, retransmissions and
congestion relative to traffic, link rate, TCP bytes), event counts and the length mix over
time. Everything is a groupby or a pivot over columns, never a loop over rows or samples;
loops run over signals and instances only.

A figure the inputs do not support is NaN (tables) or None (scalars); the rules turn that into
an ``Inconclusive`` or a lower confidence, never into a 0.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.rules.stats import ChangePoint
from pdprobe.values import Missing

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.base import CapacityResult
    from pdprobe.dataset import Dataset
    from pdprobe.rules.base import RuleContext

# Gauges summarised per instance (mean, p90, per-bin mean); short names used in column names.
GAUGES: Final[Mapping[str, str]] = {
    "waiting": S.REQUESTS_WAITING,
    "running": S.REQUESTS_RUNNING,
    "deferred": S.REQUESTS_DEFERRED,
    "kv_fetch": S.KV_FETCH_WAITING,
    "kv_usage": S.KV_USAGE_RATIO,
    "hit_gauge": S.PREFIX_HIT_RATIO,
    "prealloc": S.DECODE_PREALLOC_QUEUE,
    "transfer_queue": S.DECODE_TRANSFER_QUEUE,
    "bootstrap": S.PREFILL_BOOTSTRAP_QUEUE,
    "inflight": S.PREFILL_INFLIGHT_QUEUE,
    "retracted": S.REQUESTS_RETRACTED,
    "prompt_tps": S.PROMPT_THROUGHPUT_TPS,
    "gen_tps": S.GENERATION_THROUGHPUT_TPS,
    "itl_last": S.ITL_LAST_S,
    "ttft_last": S.TTFT_LAST_S,
    "xfer_latency_gauge": S.KV_TRANSFER_LATENCY_S_GAUGE,
    "xfer_speed_gauge": S.KV_TRANSFER_SPEED_GAUGE,
    "xfer_tput_log": S.KV_TRANSFER_THROUGHPUT_LOG,
    "xfer_avg_s_log": S.KV_TRANSFER_AVG_S_LOG,
    "xfer_avg_bytes_log": S.KV_TRANSFER_AVG_BYTES_LOG,
}
# Counters whose increase over the window is kept per instance.
COUNTERS: Final[Mapping[str, str]] = {
    "preemptions": S.PREEMPTIONS_TOTAL,
    "prefix_hits": S.PREFIX_HITS_TOTAL,
    "prefix_queries": S.PREFIX_QUERIES_TOTAL,
    "finished": S.REQUESTS_FINISHED_TOTAL,
    "failed": S.REQUESTS_FAILED_TOTAL,
    "prompt_tokens": S.PROMPT_TOKENS_TOTAL,
    "generation_tokens": S.GENERATION_TOKENS_TOTAL,
    "xfer_failures": S.KV_TRANSFER_FAILURES_TOTAL,
    "kv_rdma_bytes": S.KV_RDMA_BYTES_TOTAL,
    "kv_tcp_bytes": S.KV_TCP_BYTES_TOTAL,
    "kv_received_tokens": S.KV_RECEIVED_TOKENS_TOTAL,
}
# Histograms whose per-instance p50/p90 (and sum/count) are kept.
HISTOGRAMS: Final[Mapping[str, str]] = {
    "ttft": S.TTFT_S,
    "tpot": S.TPOT_S,
    "itl": S.ITL_S,
    "queue_s": S.QUEUE_S,
    "prefill_s": S.PREFILL_S,
    "xfer_s": S.KV_TRANSFER_S,
    "xfer_bytes": S.KV_TRANSFER_BYTES,
    "xfer_speed": S.KV_TRANSFER_BYTES_PER_S,
    "prompt_len": S.PROMPT_TOKENS,
    "computed": S.PREFILL_COMPUTED_TOKENS,
}
# Request columns that make a histogram redundant (exact per-request figures exist).
HISTOGRAM_COVERED_BY: Final[Mapping[str, frozenset[str]]] = {
    "ttft": frozenset({"ttft_s", "prefill_instance", "decode_instance"}),
    "tpot": frozenset({"tpot_s", "decode_instance"}),
    "itl": frozenset({"tpot_s", "decode_instance"}),
    "queue_s": frozenset({"queue_s", "prefill_instance"}),
    "prefill_s": frozenset({"prefill_s", "prefill_instance"}),
    "xfer_s": frozenset({"kv_transfer_s", "prefill_instance", "decode_instance"}),
    "xfer_bytes": frozenset({"kv_bytes", "kv_transfer_s", "prefill_instance"}),
    "xfer_speed": frozenset({"kv_bytes", "kv_transfer_s", "prefill_instance"}),
    "prompt_len": frozenset({"prompt_tokens", "prefill_s", "prefill_instance"}),
    "computed": frozenset({"prompt_tokens", "prefill_s", "prefill_instance"}),
}
# A KV pool above this is "near full": vLLM/SGLang start preempting or refuse admissions there.
KV_NEAR_FULL: Final = 0.9
# Active InfiniBand port state (node_exporter state_id / sysfs "4: ACTIVE").
PORT_ACTIVE: Final = 4.0
# When a node has no packet counter, packets are estimated from bytes with a 4 KiB RoCE MTU.
ASSUMED_MTU_BYTES: Final = 4096.0
# Bins with fewer requests than this are left out of the length-mix change-point test.
MIX_MIN_REQUESTS_PER_BIN: Final = 5
ROLE_COLUMN: Final[Mapping[str, str]] = {"prefill": "prefill_instance",
                                         "decode": "decode_instance"}


@dataclass(frozen=True)
class Window:
    """The diagnosis window and the bin width of every per-bin series."""

    start_ts: float
    end_ts: float
    step_s: float

    @property
    def span_s(self) -> float:
        return max(self.end_ts - self.start_ts, 0.0)

    @property
    def n_bins(self) -> int:
        return max(1, int(np.ceil(max(self.span_s, self.step_s) / self.step_s)))

    @property
    def bin_ts(self) -> np.ndarray:
        return self.start_ts + self.step_s * np.arange(self.n_bins)

    def bin_of(self, ts: np.ndarray) -> np.ndarray:
        idx = np.floor((np.asarray(ts, dtype=np.float64) - self.start_ts) / self.step_s)
        return np.clip(np.nan_to_num(idx, nan=0.0), 0, self.n_bins - 1).astype(np.int64)


@dataclass(frozen=True)
class Transfer:
    """Cluster-level KV-transfer figures, each None when the inputs do not carry it."""

    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_source: str = ""
    share_of_ttft_p50: float | None = None  # median per-request kv_transfer_s / ttft_s
    achieved_bytes_per_s: float | None = None  # bytes moved per second of transfer time
    achieved_source: str = ""
    bytes_total: float | None = None  # KV bytes moved in the window
    bytes_source: str = ""
    demand_vs_latency_rho: float | None = None  # per-bin demand (bytes/s) vs median latency
    demand_vs_latency_p: float | None = None
    # Median transfer time per GB (else per transfer) in the quietest / busiest third of bins.
    latency_low_demand_s: float | None = None
    latency_high_demand_s: float | None = None
    latency_per_gb: bool = False  # True when the two above are seconds per GB
    transfers: int | None = None  # number of transfers measured


@dataclass(frozen=True)
class Slo:
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    ttft_attainment: float | None = None
    tpot_attainment: float | None = None
    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None


@dataclass(frozen=True)
class Mix:
    """Level shifts of the workload over the window (length mix and arrival count)."""

    prompt: ChangePoint | None = None  # mean prompt tokens per bin
    output: ChangePoint | None = None  # mean output tokens per bin
    # Prompt tokens per output token from engine throughput (logs), when lengths are unknown.
    work: ChangePoint | None = None
    arrivals: ChangePoint | None = None  # requests per bin
    prompt_p_requests: float | None = None  # rank test on the requests either side of the split
    output_p_requests: float | None = None
    source: str = ""


@dataclass(frozen=True)
class Features:
    """Everything the rules compare, in tidy tables (see the module docstring)."""

    window: Window
    instances: pd.DataFrame  # index: instance name; one row per instance (see _instance_table)
    bins: Mapping[str, pd.DataFrame]  # name -> bins x instances (index: bin start ts)
    cluster: pd.DataFrame  # index: bin start ts; role-level and workload series
    nodes: pd.DataFrame  # index: node; RDMA/TCP counters over the window
    events: pd.DataFrame  # columns event, instance, count
    transfer: Transfer
    slo: Slo
    capacity: CapacityResult | None
    arrival_rate_rps: float | None
    request_columns: frozenset[str]
    n_requests: int
    has_metrics: bool
    has_network: bool
    rdma_signals: frozenset[str]  # RDMA signals present in the network table
    tcp_signals: frozenset[str]
    mix: Mix = field(default_factory=Mix)
    queue_share_of_ttft_p50: float | None = None  # median per-request queue_s / ttft_s
    queue_s_p90: float | None = None

    def role(self, role: str) -> pd.DataFrame:
        """The instance rows of one role (sorted by name)."""
        return self.instances[self.instances["role"] == role]

    def names(self, role: str) -> tuple[str, ...]:
        return tuple(self.role(role).index.astype(str))

    def has_requests_column(self, column: str) -> bool:
        return column in self.request_columns

    def event_count(self, event: str) -> int:
        if self.events.empty:
            return 0
        return int(self.events.loc[self.events["event"] == event, "count"].sum())

    def bin_frame(self, name: str, instances: tuple[str, ...] | list[str]) -> pd.DataFrame | None:
        """Per-bin values of ``name`` for these instances (columns), None when absent."""
        frame = self.bins.get(name)
        if frame is None:
            return None
        cols = [c for c in instances if c in frame.columns]
        if not cols:
            return None
        return frame[cols]

    def role_series(self, column: str) -> pd.Series | None:
        if column not in self.cluster.columns:
            return None
        series = self.cluster[column]
        return series if series.notna().any() else None


_CACHE: dict[int, tuple[weakref.ref[Any], Features]] = {}


def features_for(ctx: RuleContext) -> Features:
    """The features of ``ctx``, computed on first use and shared by every rule."""
    key = id(ctx)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is ctx:
        return hit[1]
    feats = compute_features(ctx)
    _CACHE[key] = (weakref.ref(ctx, _evict(key)), feats)
    return feats


def _evict(key: int) -> Callable[[weakref.ref[Any]], None]:
    """Drop the cached features when their context is garbage-collected."""
    def callback(_ref: weakref.ref[Any]) -> None:
        _CACHE.pop(key, None)
    return callback


def compute_features(ctx: RuleContext) -> Features:
    import pandas as pd

    from pdprobe.analysis.instances import window_of
    from pdprobe.analysis.stats import series_step

    ds = ctx.dataset
    span = window_of(ds)
    if span is None:
        start, end = 0.0, 0.0
    else:
        start, end = span
    window = Window(start, end, series_step(start, end))
    index = pd.Index(sorted(_instance_names(ds)), name="instance", dtype="object")
    role_of = {i.name: i.role for i in ds.instances}
    node_of = {i.name: (i.node or _host(i.name)) for i in ds.instances}
    cols = _Cols(index)
    cols.text["role"] = [role_of.get(n, "unknown") for n in index]
    cols.text["node"] = [node_of.get(n, _host(n)) for n in index]
    bins: dict[str, pd.DataFrame] = {}
    _request_features(ds, window, cols, bins)
    _gauge_features(ds, window, cols, bins)
    _counter_features(ds, window, cols)
    _histogram_features(ds, window, cols)
    _best_of(cols, window)
    alive = _alive_bins(ds, window, index)
    bins["alive"] = alive.set_axis(window.bin_ts, axis=0)
    table = cols.frame()
    cluster = _cluster_series(ds, window, table, bins, alive)
    nodes, rdma_signals, tcp_signals = _node_features(ds, window)
    events = _event_counts(ds)
    transfer = _transfer(ds, window, table, cluster)
    slo = _slo(ctx, ds, table)
    capacity = None if isinstance(ctx.capacity, Missing) else ctx.capacity
    rate = _arrival_rate(ctx, ds, window, table)
    mix = _mix(ds, window, cluster)
    share, q90 = _queue_share(ds)
    return Features(
        window=window, instances=table, bins=bins, cluster=cluster, nodes=nodes, events=events,
        transfer=transfer, slo=slo, capacity=capacity, arrival_rate_rps=rate,
        request_columns=frozenset(ds.request_columns), n_requests=len(ds.requests),
        has_metrics=not ds.metrics.empty, has_network=not ds.network.empty,
        rdma_signals=rdma_signals, tcp_signals=tcp_signals, mix=mix,
        queue_share_of_ttft_p50=share, queue_s_p90=q90,
    )


class _Cols:
    """Per-instance columns collected one by one, assembled into one frame at the end."""

    def __init__(self, index: pd.Index) -> None:
        self.index = index
        self.data: dict[str, pd.Series] = {}
        self.text: dict[str, Any] = {}

    def put(self, name: str, values: pd.Series) -> None:
        """Set ``name`` where ``values`` (indexed by instance) has a value; keep the rest."""
        import pandas as pd

        v = pd.Series(values, dtype="float64")
        if v.index.dtype != object:
            v.index = v.index.astype(str).astype(object)
        new = v.reindex(self.index)
        old = self.data.get(name)
        self.data[name] = new if old is None else new.combine_first(old)

    def set(self, name: str, values: Any) -> None:
        import pandas as pd

        self.data[name] = pd.Series(np.asarray(values, dtype="float64"), index=self.index)

    def get(self, name: str) -> pd.Series:
        import pandas as pd

        if name in self.data:
            return self.data[name]
        return pd.Series(np.nan, index=self.index, dtype="float64")

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        parts: dict[str, Any] = dict(self.text)
        parts.update(self.data)
        return pd.DataFrame(parts, index=self.index)


# ---------------------------------------------------------------------------------------------
# instances


def _host(name: str) -> str:
    """``host:port`` -> ``host``; a pod name stays as it is."""
    name = str(name)
    if name.startswith("["):  # [v6]:port
        return name.split("]")[0].lstrip("[")
    return name.rsplit(":", 1)[0] if name.count(":") == 1 else name


def _instance_names(ds: Dataset) -> set[str]:
    names = {i.name for i in ds.instances}
    req = ds.requests
    for col in ROLE_COLUMN.values():
        if col in ds.request_columns and len(req):
            names.update(str(v) for v in req[col].dropna().unique())
    if len(ds.metrics):
        from pdprobe.analysis.tables import column_codes

        names.update(str(v) for v in column_codes(ds.metrics, "instance")[1])
    names.discard("")
    return names


def _request_features(ds: Dataset, window: Window, cols: _Cols,
                      bins: dict[str, pd.DataFrame]) -> None:
    """Per-instance request figures, grouped by the column that names the instance's role."""
    import pandas as pd

    req = ds.requests
    if req.empty:
        return
    present = ds.request_columns
    has = {c: c in present and bool(req[c].notna().any()) for c in req.columns}
    derived = {}
    if has.get("prefill_s"):
        uncached = req["prompt_tokens"].astype("float64")
        if has.get("cached_tokens"):
            uncached = uncached - req["cached_tokens"].fillna(0.0)
        derived["prefill_s_per_token"] = req["prefill_s"] / uncached.clip(lower=1.0)
    if has.get("kv_transfer_s") and has.get("kv_bytes"):
        secs = req["kv_transfer_s"].where(req["kv_transfer_s"] > 0)
        derived["xfer_bytes_per_s"] = req["kv_bytes"] / secs
    frame = req.assign(**derived, _bin=window.bin_of(req["arrival_ts"].to_numpy()))
    roles = pd.Series(cols.text["role"], index=cols.index)
    for role, col in ROLE_COLUMN.items():
        if not has.get(col):
            continue
        sub = frame[frame[col].notna()]
        if sub.empty:
            continue
        key = sub[col].astype(str).astype("category")  # categorical keys group fast
        counts = key.value_counts()
        counts = counts[counts > 0]
        counts.index = counts.index.astype(str)
        # Only instances of this role (or of unknown role) take figures from this column.
        allowed = set(roles.index[roles.isin([role, "unknown"])].astype(str))
        keep = [k for k in counts.index if k in allowed]
        total = float(counts.sum())
        cols.put("req_count", counts.loc[keep].astype("float64"))
        cols.put("req_share", counts.loc[keep] / total)
        quant = [c for c in ("ttft_s", "tpot_s", "queue_s", "kv_transfer_s",
                             "prefill_s_per_token", "xfer_bytes_per_s")
                 if c in sub.columns and bool(sub[c].notna().any())]
        if quant:
            grouped = sub.groupby(key, sort=True, observed=True)[quant]
            q50 = grouped.median()
            q90 = grouped.quantile(0.9)
            for c in quant:
                short = c.removesuffix("_s")
                cols.put(f"req_{short}_p50", q50[c].reindex(keep))
                cols.put(f"req_{short}_p90", q90[c].reindex(keep))
        if has.get("kv_bytes"):
            cols.put("req_kv_bytes", sub.groupby(key, sort=True, observed=True)[
                "kv_bytes"].sum(min_count=1).reindex(keep))
        if has.get("cached_tokens"):
            sums = sub.groupby(key, sort=True, observed=True)[
                ["cached_tokens", "prompt_tokens"]].sum()
            ratio = sums["cached_tokens"] / sums["prompt_tokens"].where(sums["prompt_tokens"] > 0)
            ratio.index = ratio.index.astype(str)
            cols.put("req_hit_ratio", ratio.reindex(keep))
        # Per-bin, per-instance series for persistence checks.
        per_bin = sub.assign(_key=key).groupby(["_bin", "_key"], sort=True, observed=True)
        bins[f"req_count_{role}"] = _reindex_bins(per_bin.size().unstack("_key").fillna(0.0),
                                                  window)
        for c, name in (("tpot_s", "req_tpot"), ("ttft_s", "req_ttft"),
                        ("prefill_s_per_token", "req_prefill_per_token"),
                        ("kv_transfer_s", "req_xfer")):
            if c in sub.columns and bool(sub[c].notna().any()):
                medians: pd.DataFrame = per_bin[c].median().unstack("_key")
                _merge_bins(bins, name, _reindex_bins(medians, window))
        if has.get("cached_tokens"):
            sums = per_bin[["cached_tokens", "prompt_tokens"]].sum()
            hit_bins: pd.DataFrame = (sums["cached_tokens"] / sums["prompt_tokens"].where(
                sums["prompt_tokens"] > 0)).unstack("_key")
            _merge_bins(bins, "req_hit", _reindex_bins(hit_bins, window))


def _merge_bins(bins: dict[str, pd.DataFrame], name: str, frame: pd.DataFrame) -> None:
    prev = bins.get(name)
    bins[name] = frame if prev is None else prev.combine_first(frame)


def _reindex_bins(frame: pd.DataFrame, window: Window) -> pd.DataFrame:
    out = frame.reindex(range(window.n_bins))
    out.index = window.bin_ts
    out.index.name = "ts"
    out.columns = [str(c) for c in out.columns]
    return out.astype("float64")


def _gauge_features(ds: Dataset, window: Window, cols: _Cols,
                    bins: dict[str, pd.DataFrame]) -> None:
    import pandas as pd

    from pdprobe.analysis.tables import signal_rows

    m = ds.metrics
    if m.empty:
        return
    # Each gauge's rows from the per-signal split, short names in sorted order (the order the
    # columns come out in); groups are integer codes, not (name, instance) strings.
    names: list[str] = []
    parts: list[pd.DataFrame] = []
    for name in sorted(GAUGES):
        rows = signal_rows(m, GAUGES[name])
        ts = rows["ts"].to_numpy(dtype=np.float64)
        keep = ((rows["kind"] == S.GAUGE).to_numpy(dtype=bool, na_value=False)
                & (ts >= window.start_ts) & (ts <= window.end_ts)
                & rows["value"].notna().to_numpy() & rows["instance"].notna().to_numpy())
        if keep.any():
            names.append(name)
            parts.append(rows[keep])
    if not parts:
        return
    name_code = np.repeat(np.arange(len(names)), [len(p) for p in parts])
    inst_code, inst_names = pd.factorize(pd.concat([p["instance"] for p in parts]), sort=True)
    labels = np.asarray([str(n) for n in inst_names], dtype=object)
    n_inst = len(labels)
    value = pd.Series(np.concatenate([p["value"].to_numpy(dtype=np.float64) for p in parts]))
    ts = np.concatenate([p["ts"].to_numpy(dtype=np.float64) for p in parts])
    grouped = value.groupby(name_code * n_inst + inst_code, sort=True)
    stats = grouped.agg(["mean", "count", "max"])
    stats["p90"] = grouped.quantile(0.9)
    key = stats.index.to_numpy()
    for code in np.unique(key // n_inst):
        part = stats[key // n_inst == code]
        part.index = pd.Index(labels[key[key // n_inst == code] % n_inst])
        for col in ("mean", "p90", "max", "count"):
            cols.put(f"g_{names[code]}_{col}", part[col])
    if "kv_usage" in names:
        kv = name_code == names.index("kv_usage")
        full = pd.Series(value.to_numpy()[kv] >= KV_NEAR_FULL).groupby(inst_code[kv]).mean()
        full.index = pd.Index(labels[full.index.to_numpy()])
        cols.put("g_kv_usage_full_frac", full)
    n_bins = window.n_bins
    cell = (name_code * n_bins + window.bin_of(ts)) * n_inst + inst_code
    per_bin = value.groupby(cell, sort=True).mean()
    cell = per_bin.index.to_numpy()
    means = per_bin.to_numpy()
    for code in np.unique(cell // (n_bins * n_inst)):
        mine = cell // (n_bins * n_inst) == code
        index = pd.MultiIndex.from_arrays([(cell[mine] // n_inst) % n_bins,
                                           labels[cell[mine] % n_inst]], names=["_bin", "instance"])
        # unstack as before, so the frame's memory layout (and row sums over it) are unchanged
        bins[f"g_{names[code]}"] = _reindex_bins(
            pd.Series(means[mine], index=index).unstack("instance"), window)


def _counter_features(ds: Dataset, window: Window, cols: _Cols) -> None:
    """Increase of every interesting counter per instance, in one grouped pass."""
    from pdprobe.analysis.promql import counter_increase_by_instance

    m = ds.metrics
    if m.empty:
        return
    by_signal = {v: k for k, v in COUNTERS.items()}
    sub = m[(m["kind"] == S.COUNTER) & m["signal"].isin(list(by_signal))]
    if sub.empty:
        return
    # One call for all signals: the signal becomes part of the series key.
    sub = sub.assign(name=sub["signal"].map(by_signal), signal="*")
    inc = counter_increase_by_instance(sub, "*", window.start_ts, window.end_ts,
                                       key=["instance", "name"], from_zero=True)
    for name in inc.index.get_level_values("name").unique():
        cols.put(f"c_{name}", inc.xs(name, level="name"))


def _histogram_features(ds: Dataset, window: Window, cols: _Cols) -> None:
    import pandas as pd

    from pdprobe.analysis.promql import histogram_quantiles_by_instance, histogram_window
    from pdprobe.analysis.tables import signal_rows

    m = ds.metrics
    if m.empty:
        return
    req = ds.requests
    covered = {c for c in ds.request_columns if c in req.columns and bool(req[c].notna().any())}
    for name, signal in HISTOGRAMS.items():
        if HISTOGRAM_COVERED_BY[name] <= covered:
            continue  # request records give the exact figure; the histogram adds nothing
        if not signal_rows(m, signal)["kind"].isin([S.BUCKET, S.HCOUNT]).any():
            continue
        hist = histogram_window(m, signal, window.start_ts, window.end_ts, by_instance=True,
                                from_zero=True)
        attrs = dict(hist.attrs)
        if not hist.empty:
            hist = hist.assign(instance=hist["instance"].astype(str))
            for q, label in ((0.5, "p50"), (0.9, "p90")):
                cols.put(f"h_{name}_{label}", histogram_quantiles_by_instance(hist, q))
        for part in ("sum", "count"):
            per = attrs.get(f"{part}_by_instance", {})
            if per:
                cols.put(f"h_{name}_{part}", pd.Series(
                    np.fromiter(per.values(), dtype=np.float64, count=len(per)),
                    index=pd.Index(list(per), dtype=object)))


def _choose(cols: _Cols, out: str, options: list[tuple[str, str]]) -> None:
    """``out`` = the first option that has a value, per instance; ``out_source`` says which."""
    value = cols.get(options[0][0]) * np.nan
    source = np.full(len(cols.index), "", dtype=object)
    for col, label in options:
        cand = cols.get(col)
        take = value.isna() & cand.notna()
        value = value.where(~take, cand)
        source = np.where(take.to_numpy(), label, source)
    cols.data[out] = value
    cols.text[f"{out}_source"] = source


def _best_of(cols: _Cols, window: Window) -> None:
    """One column per quantity, from the best source available for each instance."""
    import pandas as pd

    span = max(window.span_s, 1e-9)
    roles = pd.Series(cols.text["role"], index=cols.index)
    is_prefill = (roles == "prefill").to_numpy()
    # Traffic: per-request records, then finished-request counters, then token counters.
    cols.set("c_role_tokens", np.where(is_prefill, cols.get("c_prompt_tokens"),
                                       cols.get("c_generation_tokens")))
    cols.set("g_role_tps", np.where(is_prefill, cols.get("g_prompt_tps_mean"),
                                    cols.get("g_gen_tps_mean")))
    for base in ("c_finished", "c_role_tokens", "g_role_tps"):
        vals = cols.get(base)
        share = vals * np.nan
        for _role, idx in roles.groupby(roles).groups.items():
            # Shares among the instances that report the figure (an instance seen only in a
            # log, or under another name, has none and is left out rather than counted as 0).
            part = vals.loc[idx].dropna()
            total = part.sum()
            if len(part) >= 2 and np.isfinite(total) and total > 0:
                share.loc[part.index] = part / total
        cols.data[f"{base}_share"] = share
    _choose(cols, "traffic_share", [("req_share", "request records"),
                                    ("c_finished_share", "finished-request counters"),
                                    ("c_role_tokens_share", "token counters"),
                                    ("g_role_tps_share", "throughput in logs")])
    _choose(cols, "traffic_count", [("req_count", "request records"),
                                    ("c_finished", "finished-request counters")])
    # Prefix-cache hit rate: token counters over the window, engine gauge, request records.
    queries = cols.get("c_prefix_queries")
    cols.data["c_hit_ratio"] = cols.get("c_prefix_hits") / queries.where(queries > 0)
    _choose(cols, "hit_ratio", [("c_hit_ratio", "prefix-cache counters"),
                                ("g_hit_gauge_mean", "engine hit-rate gauge"),
                                ("req_hit_ratio", "cached_tokens in request records")])
    # Little's law on a decode instance: running sequences / tokens per second = time per token.
    gen = cols.get("g_gen_tps_mean")
    # (Not on prefill instances: their "running" requests are prefilling, not decoding.)
    cols.data["g_tpot_est"] = (cols.get("g_running_mean") / gen.where(gen > 0)).where(
        ~is_prefill)
    # Latencies: request records first (exact), then histograms, then last-value gauges.
    for q in ("p50", "p90"):
        _choose(cols, f"ttft_{q}", [(f"req_ttft_{q}", "request records"),
                                    (f"h_ttft_{q}", "TTFT histogram")])
        _choose(cols, f"tpot_{q}", [(f"req_tpot_{q}", "request records"),
                                    (f"h_tpot_{q}", "TPOT histogram"),
                                    (f"h_itl_{q}", "inter-token latency histogram"),
                                    ("g_itl_last_mean", "last inter-token latency gauge"),
                                    ("g_tpot_est" if q == "p50" else "",
                                     "running / generation throughput (Little's law)")])
        _choose(cols, f"queue_s_{q}", [(f"req_queue_{q}", "request records"),
                                       (f"h_queue_s_{q}", "queue-time histogram")])
        _choose(cols, f"xfer_s_{q}", [(f"req_kv_transfer_{q}", "request records"),
                                      (f"h_xfer_s_{q}", "KV-transfer histogram"),
                                      ("g_xfer_latency_gauge_mean", "KV-transfer gauge"),
                                      ("g_xfer_avg_s_log_mean", "KV transfer log lines")])
    time_sum = cols.get("h_xfer_s_sum")
    cols.data["h_xfer_achieved"] = cols.get("h_xfer_bytes_sum") / time_sum.where(time_sum > 0)
    _choose(cols, "xfer_bytes_per_s", [("req_xfer_bytes_per_p50", "request records"),
                                       ("h_xfer_achieved", "KV-transfer histograms"),
                                       ("h_xfer_speed_p50", "KV-transfer speed histogram"),
                                       ("g_xfer_speed_gauge_mean", "KV-transfer speed gauge")])
    # Prefill time per token from histograms: sum of prefill time over the tokens computed
    # (or prompted) on the instance; a mean, so long prompts weigh in, but no bucket coarseness.
    computed = cols.get("h_computed_sum").where(cols.get("h_computed_sum") > 0)
    prompted = cols.get("h_prompt_len_sum").where(cols.get("h_prompt_len_sum") > 0)
    cols.data["h_prefill_per_token"] = cols.get("h_prefill_s_sum") / computed.fillna(prompted)
    _choose(cols, "prefill_per_token_p50", [
        ("req_prefill_s_per_token_p50", "request records"),
        ("h_prefill_per_token", "prefill-time / token histograms (mean per token)")])
    _choose(cols, "samples", [("req_count", "request records"),
                              ("h_tpot_count", "TPOT histogram"),
                              ("h_prefill_s_count", "prefill-time histogram")])
    # Preemptions per finished request (decode memory pressure).
    reqs = cols.get("traffic_count")
    cols.data["preempt_per_request"] = cols.get("c_preemptions") / reqs.where(reqs > 0)
    cols.data["prompt_tokens_per_s"] = cols.get("c_prompt_tokens") / span
    # Decode admission wait: vLLM's waiting gauge includes requests deferred for remote KV.
    deferred = cols.get("g_deferred_mean")
    cols.data["admission_wait_mean"] = (cols.get("g_waiting_mean")
                                        - deferred.fillna(0.0)).clip(lower=0.0)
    cols.data["remote_kv_wait_mean"] = _max_of(
        [cols.get("g_kv_fetch_mean"), cols.get("g_transfer_queue_mean"), deferred])


def _max_of(series: list[pd.Series]) -> pd.Series:
    """Element-wise max ignoring NaN (NaN only where every input is NaN)."""
    import pandas as pd

    frame = pd.concat(series, axis=1)
    return frame.max(axis=1, skipna=True).where(frame.notna().any(axis=1))


# ---------------------------------------------------------------------------------------------
# cluster series


def _role_mean(bins: Mapping[str, pd.DataFrame], name: str, names: tuple[str, ...]) -> Any:
    frame = bins.get(name)
    if frame is None:
        return None
    cols = [c for c in names if c in frame.columns]
    if not cols:
        return None
    return frame[cols].mean(axis=1, skipna=True)


def _cluster_series(ds: Dataset, window: Window, table: pd.DataFrame,
                    bins: dict[str, pd.DataFrame], alive: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    out = pd.DataFrame(index=pd.Index(window.bin_ts, name="ts"))
    roles = {r: tuple(table.index[table["role"] == r].astype(str)) for r in ("prefill", "decode")}
    for col, name, role in (("prefill_queue", "g_waiting", "prefill"),
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
                            ("decode_retracted", "g_retracted", "decode")):
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
            out[f"{role}_alive"] = alive[cols].sum(axis=1).to_numpy(dtype="float64")
    _request_series(ds, window, out)
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
    per = _binned_increase(sub, ["instance"], window)
    if per.empty:
        return None
    total = per.groupby(level="_bin").sum()
    out = np.full(window.n_bins, np.nan)
    out[total.index.to_numpy(dtype=np.int64)] = total.to_numpy(dtype="float64") / window.step_s
    return out


def _alive_bins(ds: Dataset, window: Window, index: pd.Index) -> pd.DataFrame:
    """1 where an instance was serving in a bin, else 0 (columns: instances).

    An instance with metric samples in a bin is alive there. From request records alone an
    instance counts as alive from the first to the last request that names it: a bin in which
    the router sent it nothing is exactly what a skewed router looks like, not a dead instance.
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
    req = ds.requests
    for col in ROLE_COLUMN.values():
        if col in ds.request_columns and len(req):
            where, b = located(*pd.factorize(req[col], use_na_sentinel=True),
                               req["arrival_ts"])
            if not where.size:
                continue
            first = np.full(len(names), window.n_bins, dtype=np.int64)
            last = np.full(len(names), -1, dtype=np.int64)
            np.minimum.at(first, where, b)
            np.maximum.at(last, where, b)
            bins_ = np.arange(window.n_bins)[:, None]
            alive = np.maximum(alive, ((bins_ >= first[None, :]) & (bins_ <= last[None, :]))
                               .astype(float))
    return pd.DataFrame(alive, columns=names)


def _request_series(ds: Dataset, window: Window, out: pd.DataFrame) -> None:
    req = ds.requests
    if req.empty:
        return
    b = window.bin_of(req["arrival_ts"].to_numpy())
    grouped = req.assign(_bin=b).groupby("_bin", sort=True)
    n = window.n_bins
    out["arrivals"] = grouped.size().reindex(range(n)).fillna(0.0).to_numpy(dtype="float64")
    out["prompt_mean"] = grouped["prompt_tokens"].mean().reindex(range(n)).to_numpy(
        dtype="float64")
    out["output_mean"] = grouped["output_tokens"].mean().reindex(range(n)).to_numpy(
        dtype="float64")
    cols = ds.request_columns
    for col, name in (("queue_s", "queue_s_p50"), ("ttft_s", "ttft_p50"),
                      ("tpot_s", "tpot_p50"), ("kv_transfer_s", "xfer_s_p50")):
        if col in cols and req[col].notna().any():
            out[name] = grouped[col].median().reindex(range(n)).to_numpy(dtype="float64")
    if "ttft_s" in cols and req["ttft_s"].notna().any():
        out["ttft_p90"] = grouped["ttft_s"].quantile(0.9).reindex(range(n)).to_numpy(
            dtype="float64")
    if "kv_bytes" in cols and req["kv_bytes"].notna().any():
        out["kv_bytes_per_s"] = (grouped["kv_bytes"].sum(min_count=1).reindex(range(n))
                                 / window.step_s).to_numpy(dtype="float64")
        if "kv_transfer_s" in cols and req["kv_transfer_s"].notna().any():
            # Time per GB: congestion slows every byte; bigger transfers alone do not.
            per_gb = 1e9 * req["kv_transfer_s"] / req["kv_bytes"].where(req["kv_bytes"] > 0)
            out["xfer_s_per_gb_p50"] = per_gb.groupby(b).median().reindex(range(n)).to_numpy(
                dtype="float64")


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


def _binned_increase(frame: pd.DataFrame, key: list[str], window: Window) -> pd.Series:
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


def _node_features(ds: Dataset, window: Window) -> tuple[pd.DataFrame, frozenset[str],
                                                          frozenset[str]]:
    import pandas as pd

    from pdprobe.analysis.promql import counter_increase_by_instance
    from pdprobe.analysis.tables import signal_rows

    raw = ds.network
    empty = pd.DataFrame(index=pd.Index([], name="node", dtype="object"))
    if raw.empty:
        return empty, frozenset(), frozenset()
    # Host names from the few distinct node labels, not per row (500k rows on a big cluster).
    _codes, labels = pd.factorize(raw["node"].astype(str), use_na_sentinel=False)
    present = set(raw["signal"].dropna().unique())
    rdma = frozenset(s for s in present if s.startswith("rdma_") or s in (
        S.LINK_RATE_BYTES_PER_S, S.PORT_STATE))
    tcp = frozenset(s for s in present if s in (S.NODE_TCP_TX_BYTES_TOTAL,
                                                S.NODE_TCP_RX_BYTES_TOTAL))
    key = ["node", "device", "port"]
    index = pd.Index(sorted({_host(v) for v in labels}), name="node", dtype="object")

    def rows_of(signal: str, kind: str) -> tuple[pd.DataFrame, np.ndarray]:
        """One signal's rows of one kind (from the per-signal split), nodes as host names;
        and each row's node as its position in ``index``."""
        rows = signal_rows(raw, signal)
        rows = rows[(rows["kind"] == kind).to_numpy(dtype=bool, na_value=False)]
        codes, names = pd.factorize(rows["node"].astype(str), use_na_sentinel=False)
        host_names = [_host(v) for v in names]
        hosts = pd.Series(host_names, dtype=raw["node"].dtype).array
        filled = {c: rows[c].fillna("") for c in ("device", "port") if rows[c].hasnans}
        return (rows.assign(node=hosts.take(codes), **filled),
                index.get_indexer(pd.Index(host_names, dtype=object))[codes])

    counters: dict[str, tuple[pd.DataFrame, int]] = {}

    def counter_series(signal: str) -> tuple[pd.DataFrame, int]:
        """A counter's samples keyed by one ``_series`` number that orders as (node, device,
        port) do, and the numbers per node (node = number // it). One integer key groups far
        faster than three string columns; one-category signal/kind columns select instantly.
        """
        if signal not in counters:
            rows, node = rows_of(signal, S.COUNTER)
            device_code, devices = pd.factorize(rows["device"], sort=True)
            port_code, ports = pd.factorize(rows["port"], sort=True)
            per_node = len(devices) * len(ports)
            one = np.zeros(len(rows), dtype=np.int64)
            counters[signal] = (pd.DataFrame({
                "signal": pd.Categorical.from_codes(one, dtype=pd.CategoricalDtype([signal])),
                "kind": pd.Categorical.from_codes(one, dtype=pd.CategoricalDtype([S.COUNTER])),
                "ts": rows["ts"].to_numpy(dtype=np.float64),
                "value": rows["value"].to_numpy(dtype=np.float64),
                "_series": node * per_node + device_code * len(ports) + port_code,
            }), per_node)
        return counters[signal]

    cols: dict[str, Any] = {}

    def per_node(signal: str) -> pd.Series:
        if signal in present:
            frame, series_per_node = counter_series(signal)
            inc = counter_increase_by_instance(frame, signal, window.start_ts, window.end_ts,
                                               key="_series", from_zero=True)
            if len(inc):
                node = index[inc.index.to_numpy() // series_per_node]
                return inc.groupby(node).sum(min_count=1).reindex(index)
        return pd.Series(np.nan, index=index)

    for name, signal in (("rdma_tx_bytes", S.RDMA_TX_BYTES_TOTAL),
                         ("rdma_rx_bytes", S.RDMA_RX_BYTES_TOTAL),
                         ("rdma_tx_packets", S.RDMA_TX_PACKETS_TOTAL),
                         ("rdma_rx_packets", S.RDMA_RX_PACKETS_TOTAL),
                         ("tcp_tx_bytes", S.NODE_TCP_TX_BYTES_TOTAL),
                         ("tcp_rx_bytes", S.NODE_TCP_RX_BYTES_TOTAL),
                         ("link_downed", S.RDMA_LINK_DOWNED_TOTAL),
                         ("port_errors", S.RDMA_PORT_ERRORS_TOTAL)):
        cols[name] = per_node(signal)
    retrans = [per_node(s).rename(s) for s in S.RETRANSMIT_SIGNALS if s in present]
    if retrans:
        frame = pd.concat(retrans, axis=1)
        cols["retransmits"] = frame.sum(axis=1, min_count=1)
        cols["retransmit_top_signal"] = frame.fillna(0.0).idxmax(axis=1).where(
            frame.notna().any(axis=1))
    congestion = [per_node(s) for s in S.CONGESTION_SIGNALS if s in present]
    if congestion:
        cols["cnp"] = pd.concat(congestion, axis=1).sum(axis=1, min_count=1)
    both = pd.concat([cols["rdma_tx_bytes"], cols["rdma_rx_bytes"]], axis=1)
    cols["rdma_bytes"] = both.sum(axis=1, min_count=1)
    packets = pd.concat([cols["rdma_tx_packets"], cols["rdma_rx_packets"]], axis=1).sum(
        axis=1, min_count=1)
    cols["rdma_packets_measured"] = packets.notna()
    cols["rdma_packets"] = packets.fillna(cols["rdma_bytes"] / ASSUMED_MTU_BYTES)
    cols["tcp_bytes"] = pd.concat([cols["tcp_tx_bytes"], cols["tcp_rx_bytes"]], axis=1).sum(
        axis=1, min_count=1)
    # Link capacity: sum over a node's ports of their rate, only ports that are ACTIVE.
    if S.PORT_STATE in present:
        state = rows_of(S.PORT_STATE, S.GAUGE)[0].groupby(key)["value"].last()
    if S.LINK_RATE_BYTES_PER_S in present:
        per_port = rows_of(S.LINK_RATE_BYTES_PER_S, S.GAUGE)[0].groupby(key)["value"].max()
        if S.PORT_STATE in present:
            active = state.reindex(per_port.index)
            per_port = per_port.where(active.isna() | (active == PORT_ACTIVE), 0.0)
        cols["link_bytes_per_s"] = per_port.groupby(level="node").sum().reindex(index)
    if S.PORT_STATE in present:
        cols["ports"] = state.groupby(level="node").size().reindex(index).astype("float64")
        cols["ports_active"] = (state == PORT_ACTIVE).groupby(level="node").sum().reindex(
            index).astype("float64")
    # Peak direction rates (p90 over bins) for link utilisation; bins with retransmissions.
    # Per signal, then summed over a node's ports per bin.
    per_node_bin = {}
    for signal in sorted({S.RDMA_TX_BYTES_TOTAL, S.RDMA_RX_BYTES_TOTAL, *S.RETRANSMIT_SIGNALS}
                         & present):
        frame, series_per_node = counter_series(signal)
        if len(frame):
            binned = _binned_increase(frame, ["_series"], window)
            if len(binned):
                cell = pd.MultiIndex.from_arrays(
                    [index[binned.index.get_level_values("_series") // series_per_node],
                     binned.index.get_level_values("_bin")], names=["node", "_bin"])
                per_node_bin[signal] = binned.set_axis(cell).groupby(
                    level=["node", "_bin"]).sum()
    for name, signal in (("rdma_tx_p90_bytes_per_s", S.RDMA_TX_BYTES_TOTAL),
                         ("rdma_rx_p90_bytes_per_s", S.RDMA_RX_BYTES_TOTAL)):
        if signal in per_node_bin:
            rate = per_node_bin[signal] / window.step_s
            cols[name] = rate.groupby(level="node").quantile(0.9).reindex(index)
    # in signal order, as the sum over signals was before
    retrans_bins = [b for s, b in per_node_bin.items() if s in S.RETRANSMIT_SIGNALS]
    if retrans_bins:
        node_bin = pd.concat(retrans_bins).groupby(level=["node", "_bin"]).sum()
        cols["retransmit_bins"] = (node_bin > 0).groupby(level="node").sum().reindex(
            index).astype("float64")
        cols["measured_bins"] = node_bin.groupby(level="node").size().reindex(
            index).astype("float64")
    nodes = pd.DataFrame({k: (v.reindex(index) if isinstance(v, pd.Series) else v)
                          for k, v in cols.items()}, index=index)
    return nodes, rdma, tcp


def _event_counts(ds: Dataset) -> pd.DataFrame:
    import pandas as pd

    ev = ds.events
    if ev.empty:
        return pd.DataFrame({"event": pd.Series(dtype="object"),
                             "instance": pd.Series(dtype="object"),
                             "count": pd.Series(dtype="int64")})
    counts = ev.assign(instance=ev["instance"].fillna("").astype(str),
                       event=ev["event"].astype(str)).groupby(
        ["event", "instance"], sort=True).size()
    return counts.rename("count").reset_index()


# ---------------------------------------------------------------------------------------------
# transfer, SLO, rates


def _transfer(ds: Dataset, window: Window, table: pd.DataFrame,
              cluster: pd.DataFrame) -> Transfer:
    from pdprobe.analysis.promql import histogram_quantile, histogram_window
    from pdprobe.analysis.tables import has_signal
    from pdprobe.rules.stats import spearman

    req = ds.requests
    cols = ds.request_columns
    out: dict[str, Any] = {}
    if "kv_transfer_s" in cols and req["kv_transfer_s"].notna().any():
        x = req["kv_transfer_s"].to_numpy(dtype="float64")
        x = x[np.isfinite(x)]
        out.update(latency_p50_s=float(np.median(x)), latency_p90_s=float(np.quantile(x, 0.9)),
                   latency_source="request records", transfers=int(x.size))
        if "ttft_s" in cols and req["ttft_s"].notna().any():
            ratio = (req["kv_transfer_s"] / req["ttft_s"].where(req["ttft_s"] > 0)).to_numpy(
                dtype="float64")
            ratio = ratio[np.isfinite(ratio)]
            if ratio.size:
                out["share_of_ttft_p50"] = float(np.median(ratio))
        if "kv_bytes" in cols and req["kv_bytes"].notna().any():
            both = req[["kv_bytes", "kv_transfer_s"]].dropna()
            both = both[both["kv_transfer_s"] > 0]
            if len(both):
                out.update(achieved_bytes_per_s=float(both["kv_bytes"].sum()
                                                      / both["kv_transfer_s"].sum()),
                           achieved_source="kv_bytes / kv_transfer_s in request records")
    elif not ds.metrics.empty and has_signal(ds.metrics, S.KV_TRANSFER_S):
        hist = histogram_window(ds.metrics, S.KV_TRANSFER_S, window.start_ts, window.end_ts,
                                from_zero=True)
        if not hist.empty and hist["count"].sum() > 0:
            le, cnt = hist["le"].to_numpy(), hist["count"].to_numpy()
            p50 = histogram_quantile(0.5, le, cnt)
            p90 = histogram_quantile(0.9, le, cnt)
            if np.isfinite(p50):
                out.update(latency_p50_s=p50, latency_p90_s=p90,
                           latency_source="KV-transfer histograms",
                           transfers=int(hist.attrs.get("count", 0) or 0))
    if "kv_bytes" in cols and req["kv_bytes"].notna().any():
        out.update(bytes_total=float(req["kv_bytes"].sum()), bytes_source="request records")
    elif "h_xfer_bytes_sum" in table.columns and table["h_xfer_bytes_sum"].notna().any():
        # A transfer is counted on both ends by some connectors: take the producer side.
        pre = table.loc[table["role"] == "prefill", "h_xfer_bytes_sum"]
        src = pre if pre.notna().any() else table["h_xfer_bytes_sum"]
        out.update(bytes_total=float(src.sum()), bytes_source="KV-transfer byte histograms")
    if "achieved_bytes_per_s" not in out:
        achieved = table["xfer_bytes_per_s"].dropna()
        if len(achieved):
            out.update(achieved_bytes_per_s=float(achieved.median()),
                       achieved_source=str(table.loc[achieved.index[0],
                                                      "xfer_bytes_per_s_source"]))
    if "latency_p50_s" not in out:
        lat = table["xfer_s_p50"].dropna()
        if len(lat):
            out.update(latency_p50_s=float(lat.median()),
                       latency_p90_s=float(table["xfer_s_p90"].dropna().median())
                       if table["xfer_s_p90"].notna().any() else None,
                       latency_source=str(table.loc[lat.index[0], "xfer_s_p50_source"]))
    lat_col = "xfer_s_per_gb_p50" if "xfer_s_per_gb_p50" in cluster.columns else "xfer_s_p50"
    if "kv_bytes_per_s" in cluster.columns and lat_col in cluster.columns:
        demand = cluster["kv_bytes_per_s"].to_numpy(dtype="float64")
        per_bin = cluster[lat_col].to_numpy(dtype="float64")
        rho, p, n = spearman(demand, per_bin)
        if n >= 5 and np.isfinite(rho):
            ok = np.isfinite(demand) & np.isfinite(per_bin)
            d, lt = demand[ok], per_bin[ok]
            lo, hi = np.quantile(d, [1 / 3, 2 / 3])
            out.update(demand_vs_latency_rho=rho, demand_vs_latency_p=p,
                       latency_low_demand_s=float(np.median(lt[d <= lo])),
                       latency_high_demand_s=float(np.median(lt[d >= hi])),
                       latency_per_gb=lat_col == "xfer_s_per_gb_p50")
    return Transfer(**out)


def _slo(ctx: RuleContext, ds: Dataset, table: pd.DataFrame) -> Slo:
    from pdprobe.analysis.base import SloAttainment

    slo = ctx.slo
    ttft_slo = ctx.options.slo_ttft_s
    tpot_slo = ctx.options.slo_tpot_s
    ttft_att = tpot_att = None
    if isinstance(slo, SloAttainment):
        ttft_slo = ttft_slo if ttft_slo is not None else slo.ttft_slo_s
        tpot_slo = tpot_slo if tpot_slo is not None else slo.tpot_slo_s
        ttft_att = None if isinstance(slo.ttft, Missing) else float(slo.ttft)
        tpot_att = None if isinstance(slo.tpot, Missing) else float(slo.tpot)
    req = ds.requests
    ttft_p90 = tpot_p90 = None
    if "ttft_s" in ds.request_columns and req["ttft_s"].notna().any():
        ttft_p90 = float(req["ttft_s"].quantile(0.9))
    elif table["ttft_p90"].notna().any():
        ttft_p90 = float(table["ttft_p90"].max())
    if "tpot_s" in ds.request_columns and req["tpot_s"].notna().any():
        tpot_p90 = float(req["tpot_s"].quantile(0.9))
    elif table.loc[table["role"] == "decode", "tpot_p90"].notna().any():
        tpot_p90 = float(table.loc[table["role"] == "decode", "tpot_p90"].median())
    return Slo(ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo, ttft_attainment=ttft_att,
               tpot_attainment=tpot_att, ttft_p90_s=ttft_p90, tpot_p90_s=tpot_p90)


def _arrival_rate(ctx: RuleContext, ds: Dataset, window: Window,
                  table: pd.DataFrame) -> float | None:
    from pdprobe.analysis.base import WorkloadSummary

    if isinstance(ctx.workload, WorkloadSummary):
        arrival = ctx.workload.arrival_rate_rps
        if not isinstance(arrival, Missing) and arrival > 0:
            return float(arrival)
    if len(ds.requests) >= 2 and window.span_s > 0:
        return float(len(ds.requests) / window.span_s)
    finished = table.loc[table["role"] == "decode", "c_finished"] if "c_finished" in \
        table.columns else None
    if finished is not None and finished.notna().any() and window.span_s > 0:
        return float(finished.sum() / window.span_s)
    return None


def _queue_share(ds: Dataset) -> tuple[float | None, float | None]:
    req = ds.requests
    cols = ds.request_columns
    if "queue_s" not in cols or not req["queue_s"].notna().any():
        return None, None
    q90 = float(req["queue_s"].quantile(0.9))
    if "ttft_s" not in cols or not req["ttft_s"].notna().any():
        return None, q90
    ratio = (req["queue_s"] / req["ttft_s"].where(req["ttft_s"] > 0)).to_numpy(dtype="float64")
    ratio = ratio[np.isfinite(ratio)]
    return (float(np.median(ratio)) if ratio.size else None), q90


def _mix(ds: Dataset, window: Window, cluster: pd.DataFrame) -> Mix:
    """Strongest level shift of mean prompt/output length and of arrivals per bin.

    Bins with too few requests are left out (a bin mean of 3 requests is noise). When request
    records exist the split is re-tested on the requests themselves (rank test), which is far
    more powerful than comparing bin means.
    """
    from scipy import stats

    from pdprobe.rules.stats import change_point

    if "prompt_mean" not in cluster.columns:
        return _throughput_mix(cluster)
    ts = cluster.index.to_numpy(dtype="float64")
    counts = cluster["arrivals"] if "arrivals" in cluster.columns else cluster.get("arrivals_hist")
    keep = np.ones(len(ts), dtype=bool)
    if counts is not None:
        keep = counts.to_numpy(dtype="float64") >= MIX_MIN_REQUESTS_PER_BIN
    out: dict[str, Any] = {"source": "request records" if len(ds.requests)
                           else "token-length histograms"}
    for col, name in (("prompt_mean", "prompt"), ("output_mean", "output")):
        if col not in cluster.columns:
            continue
        vals = cluster[col].to_numpy(dtype="float64")
        cp = change_point(ts[keep], np.log(np.clip(vals[keep], 1e-9, None)))
        if cp is None:
            continue
        # Report levels in tokens, not in logs.
        before = vals[keep & (ts < cp.ts)]
        after = vals[keep & (ts >= cp.ts)]
        cp = ChangePoint(index=cp.index, ts=cp.ts, before=float(np.nanmedian(before)),
                         after=float(np.nanmedian(after)), p_value=cp.p_value)
        out[name] = cp
        if len(ds.requests):
            req = ds.requests
            tok = req["prompt_tokens" if name == "prompt" else "output_tokens"].to_numpy(
                dtype="float64")
            arr = req["arrival_ts"].to_numpy(dtype="float64")
            a, b = tok[arr < cp.ts], tok[arr >= cp.ts]
            if a.size >= 5 and b.size >= 5:
                out[f"{name}_p_requests"] = float(stats.mannwhitneyu(a, b).pvalue)
    if counts is not None:
        cp = change_point(ts, counts.to_numpy(dtype="float64"))
        if cp is not None:
            out["arrivals"] = cp
    return Mix(**out)


def _throughput_mix(cluster: pd.DataFrame) -> Mix:
    """Without lengths, the prompt/output token-rate ratio from the engines' throughput.

    Prefill instances' prompt throughput over decode instances' generation throughput is the
    mix's prompt tokens per output token (decode instances' own "prompt throughput" is left out:
    older vLLM counted KV received over the connector there).
    """
    from pdprobe.rules.stats import change_point

    if "prompt_tps_total" not in cluster.columns or "gen_tps_total" not in cluster.columns:
        return Mix()
    p = cluster["prompt_tps_total"].to_numpy(dtype="float64")
    g = cluster["gen_tps_total"].to_numpy(dtype="float64")
    ok = np.isfinite(p) & np.isfinite(g) & (p > 0) & (g > 0)
    if ok.sum() < 6:
        return Mix()
    ts = cluster.index.to_numpy(dtype="float64")[ok]
    ratio = p[ok] / g[ok]
    cp = change_point(ts, np.log(ratio))
    if cp is None:
        return Mix()
    cp = ChangePoint(index=cp.index, ts=cp.ts, before=float(np.median(ratio[ts < cp.ts])),
                     after=float(np.median(ratio[ts >= cp.ts])), p_value=cp.p_value)
    return Mix(work=cp, source="engine throughput (prompt vs generation tokens/s)")
