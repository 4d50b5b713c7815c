"""The workload the capacity model sizes for: per-request (prompt, cached, output) and arrivals.

A ``WorkloadMix`` keeps the whole joint length distribution (one entry per request, or a
quantile sample when only a distribution is known) because prefill cost is convex in prompt
length and decode residency couples prompt and output: means alone under-size both (Jensen).
Arrival timing (burstiness, load windows) is measured in ``arrivals.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis import sampling, strata
from pdprobe.analysis.capacity.arrivals import LoadWindows, arrival_profile, window_of
from pdprobe.analysis.capacity.population import (
    Population,
    at_least_one,
    cached_in_range,
    known_rows,
    record_numbers,
    usable_records,
)
from pdprobe.analysis.row_slices import ascending
from pdprobe.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.capacity.arrival_windows import Profile
    from pdprobe.dataset import Dataset

# Quantile sample size when only a length distribution (mean, p90, histogram) is known: fine
# enough that E[f(I)] of a quadratic f is within 0.1 % of the exact integral.
SYNTHETIC_SAMPLE: Final = 4000
# Fixed seed so the same options always give the same plan.
SYNTHETIC_SEED: Final = 20240601
P90_Z: Final = 0.9


@dataclass(frozen=True, eq=False)
class WorkloadMix:
    """Requests to serve: lengths per request, arrival rate and burstiness.

    With ``population`` the lengths and arrival times are a stratified sample of it (above
    ``sampling.MIX_SAMPLE_REQUESTS``); the rate, burstiness and load windows are every
    arrival's, and ``load.window_of`` is the sampled arrivals' windows.
    """

    prompt_tokens: np.ndarray  # float64, >= 1
    cached_tokens: np.ndarray  # float64, 0 <= cached < prompt
    output_tokens: np.ndarray  # float64, >= 1
    rate_rps: float
    arrival_cv2: float  # squared CV of arrivals at the queueing time scale
    arrival_cv2_source: str
    description: str
    arrival_ts: np.ndarray | None = None  # sorted Unix seconds, when known
    load: LoadWindows | None = None  # rate over time; None = stationary at rate_rps
    population: Population | None = None  # what a sampled mix was drawn from (None: all)

    def __post_init__(self) -> None:
        if not (len(self.prompt_tokens) == len(self.cached_tokens) == len(self.output_tokens)):
            raise ValueError("length arrays differ in size")
        if len(self.prompt_tokens) == 0:
            raise ValueError("a workload mix needs at least one request")

    @property
    def size(self) -> int:
        return len(self.prompt_tokens)

    @property
    def uncached_tokens(self) -> np.ndarray:
        """Prompt tokens prefill must compute (at least 1: the last token is always run)."""
        return np.maximum(self.prompt_tokens - self.cached_tokens, 1.0)

    @property
    def hit_rate(self) -> float:
        """Token-weighted prefix-cache hit rate."""
        return float(self.cached_tokens.sum() / self.prompt_tokens.sum())

    def with_rate(self, rate_rps: float) -> WorkloadMix:
        return replace(self, rate_rps=float(rate_rps))

    def with_hit_rate_shift(self, delta: float) -> WorkloadMix:
        """Every request's cached fraction moved by ``delta`` (clipped to [0, 1))."""
        frac = self.cached_tokens / self.prompt_tokens
        new = np.clip(frac + delta, 0.0, 1.0) * self.prompt_tokens
        new = np.minimum(new, self.prompt_tokens - 1.0)
        return replace(self, cached_tokens=np.maximum(new, 0.0),
                       description=f"{self.description}, hit rate {delta:+.0%}")

    def at_lengths(self, prompt: float, output: float, label: str) -> WorkloadMix:
        """Every request at the given lengths, keeping the token-weighted hit rate."""
        h = self.hit_rate
        n = self.size
        p = np.full(n, max(float(prompt), 1.0))
        return replace(self, prompt_tokens=p, cached_tokens=np.minimum(p * h, p - 1.0),
                       output_tokens=np.full(n, max(float(output), 1.0)), description=label)

    def clipped(self, max_prompt_tokens: int) -> tuple[WorkloadMix, int]:
        """Prompts capped at the engine's context limit, and how many were longer (of every
        request, when the mix is a sample)."""
        pop = self.population
        # (none longer when the largest is known, without a pass over every request)
        over = 0 if pop is not None and pop.prompt_max is not None and \
            pop.prompt_max <= max_prompt_tokens else \
            int(np.count_nonzero((pop.prompt_tokens if pop is not None
                                  else self.prompt_tokens) > max_prompt_tokens))
        if not over:
            return self, 0
        p = np.minimum(self.prompt_tokens, float(max_prompt_tokens))
        return replace(self, prompt_tokens=p,
                       cached_tokens=np.minimum(self.cached_tokens, p - 1.0),
                       population=pop.clipped(float(max_prompt_tokens))
                       if pop is not None else None), over

    def collapsed(self) -> WorkloadMix:
        """One request of mean lengths: the mean-based (Dynamo planner) view of this mix."""
        p = float(self.prompt_tokens.mean())
        c = float(self.cached_tokens.mean())
        o = float(self.output_tokens.mean())
        return replace(self, prompt_tokens=np.array([p]), cached_tokens=np.array([c]),
                       output_tokens=np.array([o]), arrival_ts=None, load=None,
                       population=None, description=f"mean lengths of {self.description}")

    def unsampled(self) -> WorkloadMix:
        """Every request the mix stands for (itself when it is not a sample); its load
        windows are not carried over (``window_of`` is the sample's)."""
        pop = self.population
        if pop is None:
            return self
        return replace(self, prompt_tokens=np.asarray(pop.prompt_tokens, dtype=np.float64),
                       cached_tokens=np.asarray(pop.cached_tokens, dtype=np.float64),
                       output_tokens=np.asarray(pop.output_tokens, dtype=np.float64),
                       arrival_ts=pop.arrival_ts, load=None, population=None)

    def subset(self, mask: np.ndarray, rate_rps: float, description: str,
               timescale_s: float) -> WorkloadMix:
        """The requests selected by ``mask``, with their own burstiness (of a sampled mix:
        the sample's; ``window`` measures a time window's on every arrival)."""
        ts = self.arrival_ts[mask] if self.arrival_ts is not None else None
        load = None
        if ts is not None:
            cv2, how, load = arrival_profile(ts, timescale_s)
        else:
            cv2, how = self.arrival_cv2, self.arrival_cv2_source
        return replace(self, prompt_tokens=self.prompt_tokens[mask],
                       cached_tokens=self.cached_tokens[mask],
                       output_tokens=self.output_tokens[mask], rate_rps=rate_rps,
                       arrival_cv2=cv2, arrival_cv2_source=how, description=description,
                       arrival_ts=ts, load=load, population=None)

    def window(self, lo: int, hi: int, rate_rps: float, description: str,
               timescale_s: float, profile: Profile | None = None) -> WorkloadMix | None:
        """Requests ``lo..hi-1`` in arrival order (of the population, when the mix is a
        sample) with their own burstiness, measured on every arrival among them; None when
        the sample holds none of them (``profile``: their arrivals', if known)."""
        pop = self.population
        if pop is None:
            return self.subset(np.arange(lo, hi), rate_rps, description, timescale_s)
        part, a, b = pop.between(lo, hi)
        if b <= a:
            return None
        # every arrival's burstiness; load windows of the sampled ones only (memory)
        cv2, how, load = profile if profile is not None else arrival_profile(
            part.arrival_ts, timescale_s, keep_windows=False, ordered=True)  # (ascending)
        if load is not None:
            load = replace(load, window_of=window_of(load, part.arrival_ts[part.rows],
                                                     float(part.arrival_ts[0])))
        return replace(self, prompt_tokens=self.prompt_tokens[a:b],
                       cached_tokens=self.cached_tokens[a:b],
                       output_tokens=self.output_tokens[a:b], rate_rps=rate_rps,
                       arrival_cv2=cv2, arrival_cv2_source=how, description=description,
                       arrival_ts=part.arrival_ts[part.rows], load=load, population=part)


def mix_from_requests(requests: pd.DataFrame, *, rate_rps: float | None, timescale_s: float,
                      description: str, rescale: bool = True,
                      max_requests: int | None = None) -> WorkloadMix:
    """The mix of recorded requests (all statuses: they were offered load).

    With ``rate_rps`` and ``rescale`` the arrival times are stretched to that rate (the same
    pattern replayed faster or slower); without ``rescale`` only the rate is overridden.
    Above ``max_requests`` (default ``sampling.MIX_SAMPLE_REQUESTS``) the lengths are a
    stratified sample of that many (``Population``); rate and burstiness use every arrival.

    Memory: a sampled mix's population is the record columns themselves where they need no
    change (every row usable, in arrival order and in range: the usual case), not float64
    copies (three 80 MB arrays, an int64 window per arrival at 10M): only the sample is float64.
    """
    n_rows = len(requests)
    prompt, output = record_numbers(requests, "prompt_tokens"), \
        record_numbers(requests, "output_tokens")
    cached = record_numbers(requests, "cached_tokens") if "cached_tokens" in requests \
        else np.zeros(n_rows)
    arrival = requests["arrival_ts"]
    # a float64 column is read in place (its NaN are the missing ones: no 80 MB copy and NaN
    # pass at 10M), kept by a sampled mix's population only (an unsampled mix copies it), and
    # read-only through a view of its own (pandas' array keeps its flags): no write through
    # the population can reach the records the evidence reads on the other thread
    if arrival.dtype == np.float64:
        ts = arrival.to_numpy().view()
        ts.flags.writeable = False
    else:
        ts = arrival.to_numpy(dtype=np.float64, na_value=np.nan)
    column_ts = ts
    limit = sampling.MIX_SAMPLE_REQUESTS if max_requests is None else max_requests
    # the sample's length strata, made by the usable-rows scan (kept when all are, in order)
    counted: list[np.ndarray] = []  # (the strata's counts per chunk, made with them)
    codes = strata.StrataCodes(n_rows, 2, counted) if n_rows > limit else None
    ok, scan = usable_records(ts, prompt, output, cached, codes,
                              known_rows(requests, ts, prompt, output))
    scanned = (prompt, output)  # (their chunk sums hold while the mix keeps these arrays)
    every_row = ok is None or bool(ok.all())  # the usual case: no copies of the selection
    if ok is not None and not every_row:
        prompt, output, ts, cached = prompt[ok], output[ok], ts[ok], cached[ok]
    # (every row usable: the scan's checks are of these arrays, no pass to repeat them)
    output = output if every_row and scan.outputs_positive else at_least_one(output)
    cached = cached if every_row and scan.cached_as_is else cached_in_range(cached, prompt)
    if len(prompt) == 0:
        raise ValueError("no request has a prompt length, output length and arrival time")
    order = None
    if not (scan.ascending if every_row else ascending(ts)):  # records are usually in order
        order = np.argsort(ts, kind="stable")
        prompt, cached, output, ts = prompt[order], cached[order], output[order], ts[order]
    span = float(ts[-1] - ts[0])
    observed = (len(ts) - 1) / span if span > 0 else float("nan")
    ordered = True  # ascending, as checked or sorted above, and without NaN
    if rate_rps is None:
        rate_rps = observed
    elif rescale and math.isfinite(observed) and observed > 0:
        # replay the same arrival pattern faster or slower: burstiness keeps its shape
        stretch = observed / rate_rps
        ts = ts[0] + (ts - ts[0]) * stretch
        ordered = stretch > 0  # (a positive stretch is monotone, rounding and all)
    sampled = len(ts) > limit
    cv2, how, load = arrival_profile(ts, timescale_s, keep_windows=not sampled,
                                     ordered=ordered)
    code = None
    if sampled and codes is not None and every_row and scan.outputs_positive and order is None:
        code = codes.code  # the scan's: of these very arrays, in this order
    del codes  # (memory: the scan's codes go before the fallback makes its own, 20 MB at 10M)
    if sampled and code is None:  # rows left out, outputs raised to 1 or sorted: strata now
        counted = []
        code = strata.length_strata(prompt, output, counts=counted)
    keep = strata.stratified_sample(code, limit, counted) if code is not None else None
    del code  # (memory: two bytes per request)
    if keep is None:
        return WorkloadMix(np.array(prompt, dtype=np.float64), np.array(cached, dtype=np.float64),
                           np.array(output, dtype=np.float64), float(rate_rps), cv2, how,
                           description, arrival_ts=ts.copy() if ts is column_ts else ts,
                           load=load)
    # each sampled request's row in the records: through the sort, then the selection
    source = keep if order is None else order[keep]
    if ok is not None and not every_row:
        source = np.flatnonzero(ok)[source]
    same = prompt is scanned[0] and output is scanned[1]
    pop = Population(ts, prompt, cached, output, keep, source, scan.sums if same else None,
                     scan.prompt_max if same else None)
    if load is not None:
        load = replace(load, window_of=window_of(load, ts[keep], float(ts[0])))
    return WorkloadMix(np.asarray(prompt[keep], dtype=np.float64),
                       np.asarray(cached[keep], dtype=np.float64),
                       np.asarray(output[keep], dtype=np.float64), float(rate_rps), cv2, how,
                       f"{description} ({pop.describe()})", arrival_ts=ts[keep], load=load,
                       population=pop)


def gamma_from_mean_p90(mean: float, p90: float, what: str) -> tuple[float, float]:
    """Gamma (shape, scale) with the given mean and 90th percentile.

    The gamma family spans p90/mean from 1 (no spread) to about 2.7 (shape ~0.4), which covers
    real token-length distributions (the public traces have 1.7-2.5).
    """
    from scipy.optimize import brentq
    from scipy.stats import gamma

    if mean <= 0 or p90 <= 0:
        raise UsageError(f"--{what}-mean and --{what}-p90 must be positive")
    ratio = p90 / mean
    if ratio <= 1.0:
        raise UsageError(f"--{what}-p90 ({p90:g}) must exceed --{what}-mean ({mean:g})",
                         hint="a length distribution's p90 is above its mean unless it is "
                              "extremely skewed; omit the p90 for fixed lengths")

    def excess(log_shape: float) -> float:
        k = math.exp(log_shape)
        return float(gamma.ppf(P90_Z, k) / k) - ratio

    grid = np.linspace(math.log(0.05), math.log(1e4), 200)
    shapes = np.exp(grid)
    values = gamma.ppf(P90_Z, shapes) / shapes - ratio
    best = int(np.argmax(values))
    if values[best] < 0:
        top = values[best] + ratio
        raise UsageError(f"--{what}-p90 / --{what}-mean = {ratio:.2f} is wider than the length "
                         f"model supports (at most {top:.2f})",
                         hint="give a trace with --trace for such heavy tails")
    log_k = brentq(excess, grid[best], grid[-1])
    k = math.exp(log_k)
    return k, mean / k


def lengths_from_summary(mean: float, p90: float | None, what: str, n: int) -> np.ndarray:
    """A quantile sample of ``n`` lengths with the given mean (and p90; fixed lengths without)."""
    if mean < 1:
        raise UsageError(f"--{what}-mean must be at least 1 token (got {mean:g})")
    if p90 is None:
        return np.full(n, float(mean))
    from scipy.stats import gamma

    k, scale = gamma_from_mean_p90(mean, p90, what)
    q = (np.arange(n) + 0.5) / n
    values = gamma.ppf(q, k, scale=scale)
    values = np.maximum(np.round(values), 1.0)
    # rounding and the floor shift the mean a little; rescale so the mean is what was asked
    return values * (mean / values.mean())


def mix_from_summary(*, prompt_mean: float, prompt_p90: float | None, output_mean: float,
                     output_p90: float | None, rate_rps: float, hit_rate: float,
                     arrival_cv2: float, max_prompt_tokens: int) -> WorkloadMix:
    """A mix from summary statistics: gamma-shaped lengths, independent prompt and output."""
    n = SYNTHETIC_SAMPLE if (prompt_p90 is not None or output_p90 is not None) else 1
    prompt = np.minimum(lengths_from_summary(prompt_mean, prompt_p90, "prompt", n),
                        float(max_prompt_tokens))
    output = lengths_from_summary(output_mean, output_p90, "output", n)
    rng = np.random.default_rng(SYNTHETIC_SEED)
    output = output[rng.permutation(n)]  # pair quantiles at random: independent lengths
    cached = np.minimum(prompt * hit_rate, prompt - 1.0)
    parts = [f"prompt mean {prompt_mean:g}" + (f"/p90 {prompt_p90:g}" if prompt_p90 else ""),
             f"output mean {output_mean:g}" + (f"/p90 {output_p90:g}" if output_p90 else "")]
    return WorkloadMix(prompt, np.maximum(cached, 0.0), output, float(rate_rps),
                       float(arrival_cv2),
                       "given" if arrival_cv2 != 1.0 else "assumed Poisson (no arrival times)",
                       ", ".join(parts) + " tokens")


def sample_from_histogram(le: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray | None:
    """A quantile sample from cumulative histogram buckets (linear within each bucket)."""
    order = np.argsort(le)
    le, cum = np.asarray(le, dtype=np.float64)[order], np.asarray(counts, dtype=np.float64)[order]
    if len(le) < 2 or not cum[-1] > 0:
        return None
    finite = np.isfinite(le)
    # the +Inf bucket's content sits at the last finite bound (histogram_quantile's convention)
    upper = np.where(finite, le, le[finite].max() if finite.any() else 1.0)
    cum = np.maximum.accumulate(cum)
    lower_edges = np.concatenate([[0.0], upper[:-1]])
    q = (np.arange(n) + 0.5) / n * cum[-1]
    idx = np.searchsorted(cum, q, side="left")
    idx = np.minimum(idx, len(cum) - 1)
    below = np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0)
    width = cum[idx] - below
    frac = np.where(width > 0, (q - below) / np.where(width > 0, width, 1.0), 0.5)
    return np.maximum(lower_edges[idx] + frac * (upper[idx] - lower_edges[idx]), 1.0)


def mix_from_histograms(dataset: Dataset, *, timescale_s: float) -> WorkloadMix | str:
    """A mix from engine length histograms when no per-request records exist (or why not)."""
    from pdprobe import signals as S
    from pdprobe.analysis.promql import counter_increase_by_instance, histogram_window

    decode = [i.name for i in dataset.instances_of("decode")]
    scope = decode or None  # decode engines see the full request (prefill sees max_tokens=1)
    prompt_h = histogram_window(dataset.metrics, S.PROMPT_TOKENS, instances=scope)
    output_h = histogram_window(dataset.metrics, S.OUTPUT_TOKENS, instances=scope)
    if prompt_h.empty or output_h.empty:
        return "no per-request records and no prompt/output length histograms"
    count = float(output_h.attrs.get("count", float("nan")))
    ts = dataset.metrics["ts"]
    span = float(ts.max() - ts.min()) if len(ts) else 0.0
    if not (count > 0 and span > 0):
        return "length histograms hold no requests over the window"
    prompt = sample_from_histogram(prompt_h["le"].to_numpy(), prompt_h["count"].to_numpy(),
                                   SYNTHETIC_SAMPLE)
    output = sample_from_histogram(output_h["le"].to_numpy(), output_h["count"].to_numpy(),
                                   SYNTHETIC_SAMPLE)
    if prompt is None or output is None:
        return "length histograms are empty"
    # keep the exact means from _sum/_count, which bucket interpolation only approximates
    for arr, hist in ((prompt, prompt_h), (output, output_h)):
        mean = float(hist.attrs.get("sum", float("nan"))) / float(hist.attrs.get("count", 1.0))
        if math.isfinite(mean) and mean > 0:
            arr *= mean / arr.mean()
    rng = np.random.default_rng(SYNTHETIC_SEED)
    output = output[rng.permutation(len(output))]
    hits = counter_increase_by_instance(dataset.metrics, S.PREFIX_HITS_TOTAL)
    queries = counter_increase_by_instance(dataset.metrics, S.PREFIX_QUERIES_TOTAL)
    prefill = {i.name for i in dataset.instances_of("prefill")}
    if prefill:
        hits = hits[hits.index.isin(list(prefill))]
        queries = queries[queries.index.isin(list(prefill))]
    h = float(hits.sum() / queries.sum()) if queries.sum() > 0 else 0.0
    h = min(max(h, 0.0), 1.0)
    cached = np.minimum(prompt * h, prompt - 1.0)
    return WorkloadMix(prompt, np.maximum(cached, 0.0), output, count / span, 1.0,
                       "assumed Poisson (metrics carry no arrival times)",
                       "length histograms" + (f", prefix hit rate {h:.0%}" if h else ""))
