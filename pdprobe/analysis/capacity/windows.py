"""The capacity estimate per time window, next to the instances deployed in that window.

A window's estimate uses the requests that arrived in it (their own lengths and burstiness)
with the model fitted over the whole capture. Deployed counts are the instances of each role
that reported samples or served requests in the window; offered load is arrivals (or the
started-requests counter), served load is completions (or the finished-requests counter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.base import RatioWindow
from pdprobe.analysis.capacity.arrival_windows import window_profiles
from pdprobe.analysis.capacity.chunked import run_sums
from pdprobe.analysis.capacity.mix import WorkloadMix
from pdprobe.analysis.capacity.rates import ModelInputs
from pdprobe.analysis.capacity.ratio_fit import ratio_fit
from pdprobe.analysis.capacity.recommend import (
    LengthWork,
    Slo,
    binding_stage,
    utilizations,
)
from pdprobe.analysis.capacity.sizings import Sizings
from pdprobe.analysis.capacity.window_counts import (
    active_instances,
    counter_served_rates,
    known_sum,
    record_firsts,
    served_counts,
    window_bounds,
    window_edges,
    window_index,
)
from pdprobe.values import Missing

if TYPE_CHECKING:
    from pdprobe.analysis.capacity.calibrate import CalibratedWaits
    from pdprobe.dataset import Dataset

# A window needs this many requests for its length mix and burstiness to mean something.
MIN_WINDOW_REQUESTS: Final = 20


def _rate_or_none(rates: np.ndarray | None, w: int) -> float | None:
    if rates is None or not math.isfinite(rates[w]):
        return None
    return float(rates[w])


@dataclass(frozen=True)
class WindowMix:
    """A window's own mix and the run of the plan's mix it holds (requests ``lo..hi-1``, in
    the order the calibrated waits are measured in)."""

    mix: WorkloadMix
    lo: int
    hi: int


@dataclass(frozen=True)
class WindowFrames:
    """The windows as observed, before sizing: each window's record and, where it has
    enough requests to size, its own mix. Observing costs passes over every record; sizing
    is per wait model (the model's own, the window-calibrated one), so a plan re-sized with
    other waits reuses the frames. Windows from metrics alone come sized (no waits to
    calibrate with) and have no mix."""

    windows: tuple[RatioWindow, ...]
    mixes: tuple[WindowMix | None, ...]


def ratio_windows(dataset: Dataset | None, mix: WorkloadMix, model: ModelInputs, slo: Slo,
                  window_s: float, waits: CalibratedWaits | None = None
                  ) -> tuple[RatioWindow, ...]:
    """One ``RatioWindow`` per window of the capture (empty when arrival times are unknown),
    each sized on its own mix by the wait model the plan uses (``waits``: the calibrated one,
    aligned with ``mix``; None: the model's own).

    Counts and mean lengths are every request's; a sampled mix (``mix.population``) sizes
    each window on its share of the sample, with the burstiness of all its arrivals.
    """
    return size_windows(window_frames(dataset, mix, model, slo, window_s), model, slo, waits)


def size_windows(frames: WindowFrames, model: ModelInputs, slo: Slo,
                 waits: CalibratedWaits | None = None,
                 sizings: Sizings | None = None) -> tuple[RatioWindow, ...]:
    """The frames' windows sized on their own mixes, with ``waits`` (taking each window's
    run of them) when given. ``sizings``: the plan's, where each window's sizing by the
    model's own waits is kept for sizing the same frames with other waits."""
    sizings = sizings if sizings is not None else Sizings()
    return tuple(win if m is None else _sized(win, m.mix, model, slo,
                                              waits.rows(m.lo, m.hi) if waits else None,
                                              sizings, ("window", w))
                 for w, (win, m) in enumerate(zip(frames.windows, frames.mixes, strict=True)))


def window_frames(dataset: Dataset | None, mix: WorkloadMix, model: ModelInputs, slo: Slo,
                  window_s: float) -> WindowFrames:
    """Every window's observations and own mix (``WindowFrames``)."""
    pop = mix.population
    ts = pop.arrival_ts if pop is not None else mix.arrival_ts
    if ts is None or len(ts) < 2:
        if dataset is not None and dataset.requests.empty and not dataset.metrics.empty:
            sized = with_planner(dataset, metric_windows(dataset, mix, model, slo, window_s))
            return WindowFrames(sized, (None,) * len(sized))
        return WindowFrames((), ())
    edges = window_edges(float(ts[0]), float(ts[-1]), window_s)
    n_win = len(edges) - 1
    # arrivals are sorted, so each window's requests are one run: its bounds, not a mask
    bounds = window_bounds(ts, edges)
    count = np.diff(bounds)
    # each window's run of the mix's requests (of its sample, when the mix is one)
    runs = np.searchsorted(pop.rows, bounds, side="left") if pop is not None else bounds
    prompt = pop.prompt_tokens if pop is not None else mix.prompt_tokens
    output = pop.output_tokens if pop is not None else mix.output_tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        sums = pop.length_sums if pop is not None else None  # (in-scan sums per chunk)
        mean_prompt = run_sums(prompt, bounds, (sums.rows, sums.prompt) if sums else None) \
            / count
        mean_output = run_sums(output, bounds, (sums.rows, sums.output) if sums else None) \
            / count
    # each window's run of records, found once for both roles
    firsts = record_firsts(dataset, edges) if dataset and len(dataset.requests) else None
    active_p = active_instances(dataset, "prefill", edges, firsts) if dataset \
        else [None] * n_win
    active_d = active_instances(dataset, "decode", edges, firsts) if dataset \
        else [None] * n_win
    done = served_counts(dataset, edges) if dataset else None
    counted = counter_served_rates(dataset, edges) if dataset and done is None else None
    # a sampled mix's windows take the burstiness of all their arrivals: every window's
    # profile at once (the same figures, without a search loop per window)
    profiles = window_profiles(pop.arrival_ts, bounds, slo.ttft_s,
                               wanted=count >= MIN_WINDOW_REQUESTS) if pop is not None \
        else [None] * n_win
    out, mixes = [], []
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
        sub = None
        if n >= MIN_WINDOW_REQUESTS:
            sub = mix.window(int(bounds[w]), int(bounds[w + 1]), n / dur, f"window {w}",
                             slo.ttft_s, profiles[w])
            if sub is None or sub.size < MIN_WINDOW_REQUESTS:  # a sampled mix: too few in it
                reason = (f"only {sub.size if sub is not None else 0} of the window's {n} "
                          f"requests are in the capacity sample ({MIN_WINDOW_REQUESTS} "
                          "needed)")
                base = replace(base, theoretical_ratio=Missing(reason),
                               recommended_prefill=Missing(reason),
                               recommended_decode=Missing(reason))
                sub = None
        out.append(base)
        mixes.append(WindowMix(sub, int(runs[w]), int(runs[w + 1])) if sub is not None
                     else None)
    # the planner's figures are observations too: sizing keeps them (``replace``)
    windows = with_planner(dataset, tuple(out)) if dataset is not None else tuple(out)
    return WindowFrames(windows, tuple(mixes))


# The last window stands for the current workload only if it is not a stub at the capture's end.
CURRENT_WINDOW_MIN_SHARE = 0.5  # of the median requests per window


def current_window(windows: tuple[RatioWindow, ...]) -> RatioWindow | None:
    """The latest window with a recommendation and a representative number of requests."""
    sized = [w for w in windows if not isinstance(w.recommended_prefill, Missing)
             and not isinstance(w.recommended_decode, Missing)]
    if len(sized) < 2:
        return None
    typical = float(np.median([w.requests for w in sized]))
    for w in reversed(sized):
        if w.requests >= CURRENT_WINDOW_MIN_SHARE * typical:
            return w
    return None


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


def _sized(base: RatioWindow, sub: WorkloadMix, model: ModelInputs, slo: Slo,
           waits: CalibratedWaits | None = None, sizings: Sizings | None = None,
           key: object = "window") -> RatioWindow:
    """``base`` with the sizing of its own mix ``sub`` (with the window's run of the
    calibrated ``waits`` when the plan uses them); the binding stage is judged at the counts
    deployed in the window when both are known. ``sizings``: where the window's sizing by
    the model's own waits is kept, under ``key``."""
    sizings = sizings if sizings is not None else Sizings()
    try:
        rec = sizings.sized(key, lambda: (sub, LengthWork.of(sub, model, slo)), model, slo,
                            waits)[0]
    except ValueError:
        if waits is None:
            raise
        reason = "no prefill count meets the objective with the recalibrated waits"
        return replace(base, recommended_prefill=Missing(reason))
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
    # each window's run of records (when there are any), found once for both roles
    firsts = record_firsts(dataset, edges) if len(dataset.requests) else None
    active_p = active_instances(dataset, "prefill", edges, firsts)
    active_d = active_instances(dataset, "decode", edges, firsts)
    # Every window's counts and mean lengths at once, from the length histograms.
    counts, prompt_sums, has_p = histogram_totals_by_window(metrics, S.PROMPT_TOKENS, edges,
                                                            decode)
    out_counts, output_sums, has_o = histogram_totals_by_window(metrics, S.OUTPUT_TOKENS,
                                                                edges, decode)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_prompt = np.where(has_p & (counts > 0), prompt_sums / counts, np.nan)
        mean_output = np.where(has_o & (out_counts > 0), output_sums / out_counts, np.nan)
    counts = np.where(has_p, counts, np.nan)
    started = known_sum(counter_increase_by_window(metrics, S.REQUESTS_STARTED_TOTAL, edges)
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
