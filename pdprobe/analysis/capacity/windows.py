"""The capacity estimate per time window, next to the instances deployed in that window.

A window's estimate uses the requests that arrived in it (their own lengths and burstiness)
with the model fitted over the whole capture. Deployed counts are the instances of each role
that reported samples or served requests in the window; offered load is arrivals (or the
started-requests counter), served load is completions (or the finished-requests counter).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.base import RatioWindow
from pdprobe.analysis.capacity.mix import WorkloadMix
from pdprobe.analysis.capacity.perf_observations import float_column, status_ok
from pdprobe.analysis.capacity.rates import ModelInputs
from pdprobe.analysis.capacity.ratio_fit import ratio_fit
from pdprobe.analysis.capacity.recommend import Slo, binding_stage, size, utilizations
from pdprobe.values import Missing

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.dataset import Dataset

# A window needs this many requests for its length mix and burstiness to mean something.
MIN_WINDOW_REQUESTS: Final = 20
# A trailing window shorter than this share of the window length is merged into the previous.
MIN_TAIL_FRACTION: Final = 0.5
# Cap on the number of windows (a week at 5 minutes is 2016); wider windows beyond it.
MAX_WINDOWS: Final = 2000
# Instances × windows beyond which presence is found from the distinct pairs, not a full table.
MAX_PRESENCE_CELLS: Final = 4_000_000


def window_edges(start: float, end: float, window_s: float) -> np.ndarray:
    """Window boundaries covering [start, end]; a short tail joins the last full window."""
    span = end - start
    if span <= 0:
        return np.array([start, start + window_s])
    width = max(window_s, span / MAX_WINDOWS)
    n = max(int(span // width), 1)
    edges = start + width * np.arange(n + 1)
    tail = end - edges[-1]
    if tail > MIN_TAIL_FRACTION * width or n == 0:
        edges = np.append(edges, end)
    else:
        edges[-1] = end
    return edges


def window_index(times: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each time's window ``w`` with ``edges[w] <= t < edges[w + 1]``, or -1 outside all."""
    t = np.asarray(times, dtype=np.float64)
    idx = np.searchsorted(edges, t, side="right") - 1
    idx[(idx >= len(edges) - 1) | ~np.isfinite(t)] = -1
    return idx


def active_instances(dataset: Dataset, role: str, edges: np.ndarray,
                     arrival_window: np.ndarray | None = None) -> list[int | None]:
    """Per window: instances of ``role`` that reported samples or served requests in it.

    Metric samples count for instances known to have the role; request records name the
    instance directly. All windows at once: each source's labels become integer codes (a
    categorical column's own codes: no string per row) and (window, instance) pairs are marked
    in a presence table, never per-window scans. ``arrival_window``: each record's window
    (``window_index`` of its arrival) when the caller has it, shared by both roles.
    """
    import pandas as pd

    from pdprobe.analysis.tables import column_codes

    n_win = len(edges) - 1
    names = {i.name for i in dataset.instances_of(role)}  # type: ignore[arg-type]
    if not names:
        return [None] * n_win
    sources: list[tuple[np.ndarray, np.ndarray, pd.Index]] = []
    m = dataset.metrics
    if len(m):
        # The metric rows' instance codes (shared by every analysis); codes of instances
        # without the role become -1 (decided per distinct name, not per row).
        codes, labels = column_codes(m, "instance")
        member = np.fromiter((str(u) in names for u in labels), dtype=bool, count=len(labels))
        renumber = np.append(np.where(member, np.cumsum(member) - 1, -1), -1)
        sources.append((window_index(m["ts"].to_numpy(dtype=np.float64, na_value=np.nan), edges),
                        renumber[codes], labels[member]))
    req = dataset.requests
    col = f"{role}_instance"
    if len(req) and dataset.has_request_column(col):
        column = req[col]
        if isinstance(column.dtype, pd.CategoricalDtype):  # the canonical dtype: its codes
            codes, labels = column.cat.codes.to_numpy(), pd.Index(column.cat.categories)
        else:
            codes, labels = pd.factorize(column.astype("string"))
        if arrival_window is None:
            arrival_window = window_index(
                req["arrival_ts"].to_numpy(dtype=np.float64, na_value=np.nan), edges)
        sources.append((arrival_window, codes, labels))
    seen: dict[str, np.ndarray] = {}  # instance -> windows it was seen in
    for win, codes, labels in sources:
        pairs = _window_label_pairs(win, codes, labels, n_win)
        for label, present in pairs.items():  # loop over instances, not rows
            seen[label] = seen[label] | present if label in seen else present
    if not seen:
        return [None] * n_win
    counts = np.sum(list(seen.values()), axis=0)
    return [int(c) if c else None for c in counts]


def _window_label_pairs(win: np.ndarray, codes: np.ndarray, uniq: pd.Index,
                        n_win: int) -> dict[str, np.ndarray]:
    """For each label: in which windows it occurs (``win`` -1 and missing labels skipped).

    ``codes``/``uniq`` are the factorized labels (code -1: missing).
    """
    ok = (win >= 0) & (codes >= 0)
    k = len(uniq)
    if k == 0 or not ok.any():
        return {}
    if ok.all():  # the usual case: no copies of the selection
        key = codes.astype(np.int64)
    else:
        key = codes[ok].astype(np.int64)
        win = win[ok]
    key *= n_win
    key += win
    if k * n_win <= MAX_PRESENCE_CELLS:
        table = np.bincount(key, minlength=k * n_win).reshape(k, n_win) > 0
    else:  # many labels over many windows: mark only the pairs that occur
        table = np.zeros((k, n_win), dtype=bool)
        pairs = np.unique(key)
        table[pairs // n_win, pairs % n_win] = True
    return {str(label): table[i] for i, label in enumerate(uniq)}


def served_counts(dataset: Dataset, edges: np.ndarray) -> np.ndarray | None:
    """Per window: requests completed ``ok`` in it, from the records (None without ``e2e_s``)."""
    req = dataset.requests
    if not (len(req) and dataset.has_request_column("e2e_s")):
        return None
    done = float_column(req, "arrival_ts") + float_column(req, "e2e_s")
    w = window_index(done, edges)
    if dataset.has_request_column("status"):
        w[~status_ok(req)] = -1  # no status counts as ok
    return np.bincount(w[w >= 0], minlength=len(edges) - 1)


def counter_served_rates(dataset: Dataset, edges: np.ndarray) -> np.ndarray | None:
    """Per window: completions per second from the decode instances' finished-requests
    counters (NaN where no increase is known); None without metrics."""
    if dataset.metrics.empty:
        return None
    from pdprobe import signals as S
    from pdprobe.analysis.promql import counter_increase_by_window

    inc = counter_increase_by_window(dataset.metrics, S.REQUESTS_FINISHED_TOTAL, edges)
    decode = [i.name for i in dataset.instances_of("decode")]
    if decode:
        inc = inc[inc.index.isin(decode)]
    return _known_sum(inc.to_numpy(dtype=np.float64)) / np.diff(edges)


def _known_sum(values: np.ndarray) -> np.ndarray:
    """Column sums over the known (non-NaN) cells; NaN for a column with none."""
    known = ~np.isnan(values)
    total = np.where(known, values, 0.0).sum(axis=0)
    return np.where(known.any(axis=0), total, np.nan)


def _rate_or_none(rates: np.ndarray | None, w: int) -> float | None:
    if rates is None or not math.isfinite(rates[w]):
        return None
    return float(rates[w])


def ratio_windows(dataset: Dataset | None, mix: WorkloadMix, model: ModelInputs, slo: Slo,
                  window_s: float) -> tuple[RatioWindow, ...]:
    """One ``RatioWindow`` per window of the capture (empty when arrival times are unknown).

    Counts and mean lengths are every request's; a sampled mix (``mix.population``) sizes
    each window on its share of the sample, with the burstiness of all its arrivals.
    """
    pop = mix.population
    ts = pop.arrival_ts if pop is not None else mix.arrival_ts
    if ts is None or len(ts) < 2:
        if dataset is not None and dataset.requests.empty and not dataset.metrics.empty:
            return with_planner(dataset, metric_windows(dataset, mix, model, slo, window_s))
        return ()
    edges = window_edges(float(ts[0]), float(ts[-1]), window_s)
    n_win = len(edges) - 1
    idx = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, n_win - 1)
    # arrivals are sorted, so each window's requests are one run: its bounds, not a mask
    bounds = np.searchsorted(idx, np.arange(n_win + 1), side="left")
    count = np.diff(bounds)
    prompt = pop.prompt_tokens if pop is not None else mix.prompt_tokens
    output = pop.output_tokens if pop is not None else mix.output_tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_prompt = np.bincount(idx, weights=prompt, minlength=n_win) / count
        mean_output = np.bincount(idx, weights=output, minlength=n_win) / count
    arrival_window = window_index(dataset.requests["arrival_ts"].to_numpy(
        dtype=np.float64, na_value=np.nan), edges) if dataset and len(dataset.requests) else None
    active_p = active_instances(dataset, "prefill", edges, arrival_window) if dataset \
        else [None] * n_win
    active_d = active_instances(dataset, "decode", edges, arrival_window) if dataset \
        else [None] * n_win
    done = served_counts(dataset, edges) if dataset else None
    counted = counter_served_rates(dataset, edges) if dataset and done is None else None
    out = []
    for w in range(n_win):  # loop over windows, vectorised over their requests
        lo, hi = float(edges[w]), float(edges[w + 1])
        n = int(count[w])
        dur = hi - lo
        mean_p = float(mean_prompt[w]) if n else math.nan
        mean_o = float(mean_output[w]) if n else math.nan
        dep_p, dep_d = active_p[w], active_d[w]
        served = done[w] / dur if done is not None else _rate_or_none(counted, w)
        base = _unsized(lo, hi, n, mean_p, mean_o, dep_p, dep_d, offered=n / dur,
                        served=served if served is not None else Missing(
                            "no completion times or finished counter"))
        if n < MIN_WINDOW_REQUESTS:
            out.append(base)
            continue
        sub = mix.window(int(bounds[w]), int(bounds[w + 1]), n / dur, f"window {w}",
                         slo.ttft_s)
        if sub is None or sub.size < MIN_WINDOW_REQUESTS:  # a sampled mix: too few in it
            reason = (f"only {sub.size if sub is not None else 0} of the window's {n} requests "
                      f"are in the capacity sample ({MIN_WINDOW_REQUESTS} needed)")
            out.append(replace(base, theoretical_ratio=Missing(reason),
                               recommended_prefill=Missing(reason),
                               recommended_decode=Missing(reason)))
            continue
        out.append(_sized(base, sub, model, slo))
    return with_planner(dataset, tuple(out)) if dataset is not None else tuple(out)


# The planner's signals per RatioWindow field, and how deployments combine: counts add up
# (one planner per Dynamo graph, each sizing its own), latencies take the worst.
PLANNER_FIELDS: Final = (
    ("planner_prefill", "planner_prefill_replicas", "sum"),
    ("planner_decode", "planner_decode_replicas", "sum"),
    ("planner_predicted_prefill", "planner_predicted_prefill_replicas", "sum"),
    ("planner_predicted_decode", "planner_predicted_decode_replicas", "sum"),
    ("planner_observed_ttft_s", "planner_observed_ttft_s", "max"),
    ("planner_estimated_ttft_s", "planner_estimated_ttft_s", "max"),
    ("planner_observed_itl_s", "planner_observed_itl_s", "max"),
    ("planner_estimated_itl_s", "planner_estimated_itl_s", "max"),
)


def planner_by_window(dataset: Dataset, edges: np.ndarray) -> dict[str, np.ndarray]:
    """Per planner signal: its value at the end of each window (the last sample in it, per
    deployment, combined over deployments), NaN where the window has none."""
    dep = dataset.deployment
    if dep is None or dep.empty:
        return {}
    n_win = len(edges) - 1
    out: dict[str, np.ndarray] = {}
    win_all = window_index(dep["ts"].to_numpy(dtype=np.float64), edges)
    signals = dep["signal"].astype(str).to_numpy()
    for _, signal, how in PLANNER_FIELDS:  # loop over the eight signals, not rows
        sel = (signals == signal) & (win_all >= 0)
        if not sel.any():
            continue
        part = dep.loc[sel, ["ts", "deployment"]].assign(w=win_all[sel],
                                                          v=dep["value"].to_numpy()[sel])
        last = part.sort_values("ts", kind="stable").groupby(["deployment", "w"])["v"].last()
        per_win = last.groupby(level="w").agg(how)
        values = np.full(n_win, np.nan)
        values[per_win.index.to_numpy(dtype=np.int64)] = per_win.to_numpy(dtype=np.float64)
        out[signal] = values
    return out


def with_planner(dataset: Dataset, windows: tuple[RatioWindow, ...]) -> tuple[RatioWindow, ...]:
    """``windows`` with the planner's counts and latencies of each (unchanged without any)."""
    if not windows:
        return windows
    edges = np.array([w.start_ts for w in windows] + [windows[-1].end_ts])
    found = planner_by_window(dataset, edges)
    if not found:
        return windows
    out = []
    for i, win in enumerate(windows):  # loop over windows (at most MAX_WINDOWS)
        values: dict[str, float | Missing] = {}
        for field_name, signal, _ in PLANNER_FIELDS:
            v = found.get(signal)
            values[field_name] = (float(v[i]) if v is not None and math.isfinite(v[i])
                                  else Missing("no planner sample in the window"))
        out.append(replace(win, **values))  # type: ignore[arg-type]
    return tuple(out)


def _unsized(lo: float, hi: float, requests: int, mean_p: float, mean_o: float,
             dep_p: int | None, dep_d: int | None, *, offered: float | Missing,
             served: float | Missing) -> RatioWindow:
    """A window with what was observed in it, before (or without) sizing."""
    return RatioWindow(
        start_ts=lo, end_ts=hi,
        theoretical_ratio=Missing(f"only {requests} requests in the window "
                                  f"({MIN_WINDOW_REQUESTS} needed)"),
        recommended_prefill=Missing("too few requests in the window"),
        recommended_decode=Missing("too few requests in the window"),
        deployed_prefill=dep_p if dep_p is not None else Missing("no prefill instance seen"),
        deployed_decode=dep_d if dep_d is not None else Missing("no decode instance seen"),
        arrival_rate_rps=requests / (hi - lo), mean_prompt_tokens=mean_p,
        mean_output_tokens=mean_o, requests=requests, offered_rate_rps=offered,
        served_rate_rps=served,
    )


def _sized(base: RatioWindow, sub: WorkloadMix, model: ModelInputs, slo: Slo) -> RatioWindow:
    """``base`` with the sizing of its own mix ``sub``; the binding stage is judged at the
    counts deployed in the window when both are known."""
    rec = size(sub, model, slo)
    binding = rec.binding
    dep_p, dep_d = base.deployed_prefill, base.deployed_decode
    if dep_p and dep_d and not isinstance(dep_p, Missing) and not isinstance(dep_d, Missing):
        up, ud, ux, _ = utilizations(rec.rates, sub.rate_rps, dep_p, dep_d,
                                     model.link_bytes_per_s)
        binding = binding_stage(up, ud, ux)
    load_p = sub.rate_rps / rec.rates.producer_capacity_rps
    load_d = sub.rate_rps / rec.rates.consumer_capacity_rps
    return replace(
        base, theoretical_ratio=rec.theoretical_ratio, recommended_prefill=rec.prefill,
        recommended_decode=rec.decode, binding=binding,
        prefill_load_instances=load_p, decode_load_instances=load_d,
        ratio_fit=ratio_fit(rec.theoretical_ratio, rec.prefill, rec.decode, load_p, load_d),
        producer_tokens_per_s=sub.rate_rps * rec.rates.mean_uncached_tokens,
        consumer_tokens_per_s=sub.rate_rps * rec.rates.mean_output_tokens,
    )


def metric_windows(dataset: Dataset, mix: WorkloadMix, model: ModelInputs, slo: Slo,
                   window_s: float) -> tuple[RatioWindow, ...]:
    """Windows from engine metrics alone: counts and mean lengths from the length histograms.

    Each window's mix is the whole capture's length sample scaled to that window's mean
    prompt and output lengths (the shape is known only over the whole capture), at the
    window's request rate; arrivals within it are taken as Poisson.
    """
    from pdprobe import signals as S
    from pdprobe.analysis.promql import counter_increase_by_window, histogram_totals_by_window

    metrics = dataset.metrics
    decode = [i.name for i in dataset.instances_of("decode")] or None
    edges = window_edges(float(metrics["ts"].min()), float(metrics["ts"].max()), window_s)
    base_p, base_o = float(mix.prompt_tokens.mean()), float(mix.output_tokens.mean())
    active_p = active_instances(dataset, "prefill", edges)
    active_d = active_instances(dataset, "decode", edges)
    # Every window's counts and mean lengths at once, from the length histograms.
    counts, prompt_sums, has_p = histogram_totals_by_window(metrics, S.PROMPT_TOKENS, edges,
                                                            decode)
    out_counts, output_sums, has_o = histogram_totals_by_window(metrics, S.OUTPUT_TOKENS,
                                                                edges, decode)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_prompt = np.where(has_p & (counts > 0), prompt_sums / counts, np.nan)
        mean_output = np.where(has_o & (out_counts > 0), output_sums / out_counts, np.nan)
    counts = np.where(has_p, counts, np.nan)
    started = _known_sum(counter_increase_by_window(metrics, S.REQUESTS_STARTED_TOTAL, edges)
                         .to_numpy(dtype=np.float64))
    served_rates = counter_served_rates(dataset, edges)
    out = []
    for w in range(len(edges) - 1):  # loop over windows: each is sized on its own mix
        lo, hi = float(edges[w]), float(edges[w + 1])
        dur = hi - lo
        n, mean_p, mean_o = float(counts[w]), float(mean_prompt[w]), float(mean_output[w])
        dep_p, dep_d = active_p[w], active_d[w]
        offered = (float(started[w]) / dur if math.isfinite(started[w])
                   else (n / dur if n > 0 else None))
        served = _rate_or_none(served_rates, w)
        count = int(n) if math.isfinite(n) else 0
        base = _unsized(lo, hi, count, mean_p, mean_o, dep_p, dep_d,
                        offered=offered if offered is not None else Missing("no request counter"),
                        served=served if served is not None else Missing("no finished counter"))
        if count < MIN_WINDOW_REQUESTS or not (mean_p > 0 and mean_o > 0):
            out.append(base)
            continue
        rate = (offered if offered else count / dur)
        sub = replace(mix, prompt_tokens=mix.prompt_tokens * (mean_p / base_p),
                      cached_tokens=mix.cached_tokens * (mean_p / base_p),
                      output_tokens=np.maximum(mix.output_tokens * (mean_o / base_o), 1.0),
                      rate_rps=rate, description=f"window {w}")
        out.append(_sized(base, sub, model, slo))
    return tuple(out)
