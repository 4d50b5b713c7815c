"""The workload summary from engine metrics, when there are no request records.

Estimated (``estimated=True``), PromQL-style: the length mix from the prompt/output length
histograms' bucket increases over the window, request rates from the started/finished/failed
counters, the cached fraction from the cached-token and prompt-token counters, the arrival
series from the histogram's ``_count`` rate. Each quantity is read from the instances that see
each request once (``_instances_for``). ``workload.summarize_workload`` calls it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pdprobe import signals as S
from pdprobe.analysis.base import LengthDistribution, Quantiles, TimeSeries, WorkloadSummary
from pdprobe.analysis.length_shape import QUANTILES, classify_shape
from pdprobe.analysis.tables import signal_rows
from pdprobe.analysis.workload import default_bin_s
from pdprobe.dataset import Dataset
from pdprobe.values import Maybe, Missing

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.signals import Role


def _instances_for(dataset: Dataset, signal: str, kinds: Sequence[str],
                   prefer: Role) -> tuple[list[str], str]:
    """Instances whose ``signal`` to use, and why.

    In a P/D cluster both legs of a request record it: the decode instance sees the full prompt
    (its KV arrives from prefill) and the prefill instance sees a one-token output. Summing over
    every instance would count each request twice and mix in those one-token outputs, so the
    frontend (one record per request) wins, then the role that owns the quantity: prompt lengths
    from prefill, output lengths and completions from decode.
    """
    rows = signal_rows(dataset.metrics, signal)
    rows = rows[rows["kind"].isin(list(kinds)).to_numpy(dtype=bool, na_value=False)]
    have = sorted({str(v) for v in rows["instance"].dropna().unique()})
    if not have:
        return [], ""
    roles = {i.name: i.role for i in dataset.instances}
    for role in ("frontend", prefer):
        chosen = [i for i in have if roles.get(i) == role]
        if chosen:
            return chosen, f"{role} instances"
    return have, "all instances"


def from_metrics(dataset: Dataset, bin_s: float | None) -> WorkloadSummary | None:
    from pdprobe.analysis.promql import counter_increase_by_instance, histogram_window

    metrics = dataset.metrics
    hist_kinds = ("bucket", "count", "sum")
    prompt_inst, prompt_how = _instances_for(dataset, S.PROMPT_TOKENS, hist_kinds, "prefill")
    output_inst, output_how = _instances_for(dataset, S.OUTPUT_TOKENS, hist_kinds, "decode")
    if not prompt_inst and not output_inst:
        return None
    import pandas as pd

    sel = pd.concat([signal_rows(metrics, s)["ts"] for s in (S.PROMPT_TOKENS, S.OUTPUT_TOKENS)])
    start, end = float(sel.min()), float(sel.max())
    span = end - start

    dists: dict[str, Maybe[LengthDistribution]] = {}
    counts: dict[str, float] = {}
    for signal, inst in ((S.PROMPT_TOKENS, prompt_inst), (S.OUTPUT_TOKENS, output_inst)):
        if not inst:
            dists[signal] = Missing(f"no {signal} histogram")
            continue
        hist = histogram_window(metrics, signal, start, end, instances=inst)
        dist, n = _histogram_distribution(hist)
        dists[signal] = dist
        if n is not None:
            counts[signal] = n
    if all(isinstance(d, Missing) for d in dists.values()):
        return None
    # The prompt histogram counts requests as they start prefill, the output one as they finish.
    lead = S.PROMPT_TOKENS if S.PROMPT_TOKENS in counts else S.OUTPUT_TOKENS
    n_requests = counts.get(lead, float("nan"))
    requests = round(n_requests) if math.isfinite(n_requests) else 0
    rate: Maybe[float] = (n_requests / span if span > 0 and math.isfinite(n_requests) else
                          Missing("the length histograms span no time" if span <= 0 else
                                  "the length histograms count no requests"))

    def counter_rate(signal: str, prefer: Role) -> tuple[Maybe[float], float]:
        inst, _ = _instances_for(dataset, signal, ("counter",), prefer)
        if not inst:
            return Missing(f"no {signal} counter"), float("nan")
        inc = counter_increase_by_instance(metrics, signal, start, end)
        inc = inc[inc.index.isin(inst)].dropna()
        if inc.empty or span <= 0:
            return Missing(f"{signal} has too few samples in the window"), float("nan")
        total = float(inc.sum())
        return total / span, total

    offered, _ = counter_rate(S.REQUESTS_STARTED_TOTAL, "frontend")
    completed, _ = counter_rate(S.REQUESTS_FINISHED_TOTAL, "decode")
    _, failed_total = counter_rate(S.REQUESTS_FAILED_TOTAL, "decode")

    cached: Maybe[float] = Missing("no cached-token and prompt-token counters")
    cached_inst, _ = _instances_for(dataset, S.CACHED_TOKENS_TOTAL, ("counter",), "prefill")
    if cached_inst:
        hits = counter_increase_by_instance(metrics, S.CACHED_TOKENS_TOTAL, start, end)
        prompts = counter_increase_by_instance(metrics, S.PROMPT_TOKENS_TOTAL, start, end)
        both = [i for i in cached_inst if i in hits.index and i in prompts.index]
        denominator = float(prompts.reindex(both).sum())
        if both and denominator > 0:
            cached = float(hits.reindex(both).sum()) / denominator

    series = None
    if span > 0:
        series = _histogram_count_series(metrics, lead, prompt_inst if lead == S.PROMPT_TOKENS
                                         else output_inst, bin_s or default_bin_s(span))
    return WorkloadSummary(
        requests=requests,
        window_start_ts=start,
        window_end_ts=end,
        arrival_rate_rps=rate,
        prompt_tokens=dists[S.PROMPT_TOKENS],
        output_tokens=dists[S.OUTPUT_TOKENS],
        offered_rate_rps=offered,
        completed_rate_rps=completed,
        cached_fraction=cached,
        arrival_cv2=Missing("needs per-request arrival times (metrics only)"),
        prompt_output_corr=Missing("needs per-request lengths (metrics only)"),
        arrival_series=series,
        source=f"metric histograms (prompt lengths from {prompt_how or 'no instance'}, output "
               f"lengths from {output_how or 'no instance'})",
        failed_requests=round(failed_total) if math.isfinite(failed_total) else 0,
    )


def _histogram_distribution(hist: pd.DataFrame) -> tuple[Maybe[LengthDistribution], float | None]:
    """Estimated distribution from summed bucket increases, and the request count."""
    from pdprobe.analysis.promql import histogram_quantile

    if hist.empty:
        return Missing("histogram has no increase in the window"), None
    le = hist["le"].to_numpy(dtype=np.float64)
    cum = hist["count"].to_numpy(dtype=np.float64)
    order = np.argsort(le)
    le, cum = le[order], np.maximum.accumulate(cum[order])
    total = float(cum[-1]) if np.isposinf(le[-1]) else float("nan")
    hcount = float(hist.attrs.get("count", float("nan")))
    hsum = float(hist.attrs.get("sum", float("nan")))
    n = hcount if math.isfinite(hcount) and hcount > 0 else total
    if not math.isfinite(n) or n <= 0:
        return Missing("histogram has no observations in the window"), None
    p50, p90, p99 = (histogram_quantile(q / 100.0, le, cum) for q in QUANTILES)
    # Moments from bucket midpoints (the +Inf bucket at its lower bound): only CV and skewness
    # come from them; the mean is exact when the histogram's _sum is known.
    finite = np.isfinite(le)
    bounds = le[finite]
    per_bucket = np.diff(np.concatenate(([0.0], cum)))
    lowers = np.concatenate(([0.0], bounds))[: per_bucket.size]
    uppers = np.concatenate((bounds, [bounds[-1] if bounds.size else 0.0]))[: per_bucket.size]
    mids = (lowers + uppers) / 2.0
    weights = per_bucket / per_bucket.sum() if per_bucket.sum() > 0 else per_bucket
    mid_mean = float(np.dot(weights, mids))
    var = float(np.dot(weights, (mids - mid_mean) ** 2))
    std = math.sqrt(var)
    mean = hsum / hcount if math.isfinite(hsum) and math.isfinite(hcount) and hcount > 0 \
        else mid_mean
    cv = std / mid_mean if mid_mean > 0 else float("nan")
    skew = float(np.dot(weights, (mids - mid_mean) ** 3)) / std ** 3 if std > 0 else 0.0
    q = Quantiles(count=round(n), mean=mean, p50=p50, p90=p90, p99=p99, max=None,
                  estimated=True)
    return LengthDistribution(quantiles=q, cv=cv, skewness=skew,
                              shape=classify_shape(None, p50, p99, cv)), n


def _histogram_count_series(metrics: pd.DataFrame, signal: str, instances: Sequence[str],
                            step_s: float) -> TimeSeries | None:
    """Requests/s per bin from the histogram's cumulative ``_count`` over the chosen instances."""
    from pdprobe.analysis.promql import rate_series

    rates = rate_series(metrics, signal, step_s, kind="count")
    rates = rates[rates["instance"].isin(list(instances))]
    if rates.empty:
        return None
    summed = rates.groupby("ts", sort=True)["rate"].sum()
    return TimeSeries(ts=tuple(float(t) for t in summed.index),
                      values=tuple(float(v) for v in summed.to_numpy()),
                      unit="requests/s", step_s=float(step_s))
