"""What the fits observe in request records and metrics: busy periods, decode concurrency.

Prefill: each instance's prefill intervals grouped into busy periods (``busy_periods``), the
requests that ran alone (``isolated_rows``) and segments of busy time against computed
tokens (``busy_segments``), all in ``perf_busy.py`` and importable from here. Decode: the
time-averaged batch and context every request saw, reconstructed from all requests on its
instance (``decode_concurrency``), and per-minute (batch, context, ITL) points from metrics
when there are no records. Vectorised: no Python loop over requests.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis import sampling

# The busy periods and the column helpers live in their own modules; their names stay
# importable from here.
from pdprobe.analysis.capacity.perf_busy import (
    BUSY_SEGMENT_S,
    BusyPeriods,
    busy_periods,
    busy_segments,
    isolated_rows,
)
from pdprobe.analysis.capacity.perf_columns import (
    FEW_GROUPS,
    FloatColumns,
    float_column,
    instance_code_view,
    instance_codes,
    sort_by_group,
    status_ok,
)
from pdprobe.analysis.sample_runs import RunRangesBuilder
from pdprobe.analysis.sampling import PASS_CHUNK, sample_intervals

if TYPE_CHECKING:

    from pdprobe.dataset import Dataset

# Decode requests need at least this many output tokens to have a meaningful TPOT.
MIN_OUTPUT_FOR_TPOT: Final = 2
# Bin width for metric-based decode observations: several scrapes per bin, short enough that
# the batch size is roughly constant within it.
METRIC_FIT_STEP_S: Final = 60.0

__all__ = [
    "BUSY_SEGMENT_S", "FEW_GROUPS", "METRIC_FIT_STEP_S", "MIN_OUTPUT_FOR_TPOT",
    "SWEEP_BLOCK_REQUESTS", "BusyPeriods", "busy_periods", "busy_segments",
    "decode_concurrency", "decode_metric_observations", "decode_observations",
    "float_column", "group_codes", "instance_codes", "isolated_rows",
    "sort_by_group",
    "status_ok",
]


def group_codes(group: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense integer codes ``0..k-1`` for group labels (any dtype), and ``k``."""
    g = np.asarray(group)
    if len(g) == 0:
        return np.zeros(0, dtype=np.int64), 0
    if g.dtype.kind in "iub":
        g = g.astype(np.int64)
        lo, hi = int(g.min()), int(g.max())
        if hi - lo <= 4 * len(g):  # compact labels (already codes): renumber by counting
            present = np.bincount(g - lo) > 0
            if lo == 0 and bool(present.all()):  # dense codes already (the usual case)
                return g, len(present)
            remap = np.cumsum(present) - 1
            return remap[g - lo], int(present.sum())
        uniq, inv = np.unique(g, return_inverse=True)
        return inv.astype(np.int64).reshape(-1), len(uniq)
    import pandas as pd

    codes, uniq = pd.factorize(g, use_na_sentinel=False)  # a hash, not a sort of strings
    return codes.astype(np.int64), len(uniq)


# Requests per block of the decode sweep: whole instances are swept together until a block
# holds this many, so its working arrays (about 1 MB each) stay in the CPU cache and are
# reused from block to block instead of being fresh memory.
SWEEP_BLOCK_REQUESTS: Final = 1 << 16


def decode_concurrency(start: np.ndarray, end: np.ndarray, ctx0: np.ndarray,
                       growth_tokens: np.ndarray,
                       group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time-averaged batch size and context tokens each request saw while it decoded.

    Requests ``j`` decode on instance ``group[j]`` from ``start[j]`` to ``end[j]``, their
    context growing linearly from ``ctx0[j]`` (the prompt) by ``growth_tokens[j]`` over the
    interval (one token per step). On each
    instance the batch ``N(t)`` and the context total ``K(t) = A(t) + R(t)·t`` are piecewise
    linear between start/end events, so their integrals are exact cumulative sums; each
    request's average is the integral over its own interval divided by its length.

    Requests are sorted by instance (a radix sort) and swept in blocks of whole instances;
    within a block the start and end events are sorted by (instance, time), running sums and
    integrals are cumulative sums with the segments between two instances' events zeroed, and
    each request reads the integrals at its own two events (equal, at tied times, to the last
    tied event's: tied segments have zero length). ``O(n log n)``, no per-request Python.
    """
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    n = len(start)
    batch = np.full(n, np.nan)
    ctx = np.full(n, np.nan)
    if n == 0:
        return batch, ctx
    codes, n_groups = group_codes(group)
    small = codes.astype(np.int16) if n_groups < 2**15 else codes
    by_group = np.argsort(small, kind="stable")  # radix sort: instances contiguous
    sizes = np.bincount(codes, minlength=n_groups)
    ends = np.cumsum(sizes)
    dur = end - start
    rate = np.divide(np.asarray(growth_tokens, dtype=np.float64), dur, out=np.zeros(n),
                     where=dur > 0)  # context tokens/s
    ctx0 = np.asarray(ctx0, dtype=np.float64)
    firsts = ends - sizes  # each instance's first place in ``by_group``
    lo, g = 0, 0
    while lo < n:  # loop over blocks of whole instances, vectorised within each
        # up to the first instance that ends at least a block's worth past lo (or the last)
        block_end = min(int(np.searchsorted(ends, lo + SWEEP_BLOCK_REQUESTS, side="left")),
                        n_groups - 1) + 1
        hi = int(ends[block_end - 1])
        idx = by_group[lo:hi]
        # (the instances' firsts in the block: its codes are not gathered to find them)
        b, k = _sweep(start[idx], end[idx], ctx0[idx], rate[idx], firsts[g:block_end] - lo)
        batch[idx], ctx[idx] = b, k
        lo, g = hi, block_end
    return batch, ctx


def _sweep(start: np.ndarray, end: np.ndarray, ctx0: np.ndarray, rate: np.ndarray,
           heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``decode_concurrency`` for requests sorted by instance, each instance's first at
    ``heads`` (ascending, from 0; no instance empty)."""
    n = len(start)
    # times from each instance's first start, so that the t² terms keep their precision
    origin = np.repeat(np.minimum.reduceat(start, heads), np.diff(np.append(heads, n)))
    s = start - origin
    e = end - origin
    base = ctx0 - rate * s  # K_j(t) = base_j + rate_j·t
    # by instance, then time; stable, so at a tie starts come before ends as in each
    # instance's own event list
    order, times = _event_order(s, e, heads)
    n_t = np.cumsum(np.where(order < n, 1.0, -1.0))  # value on [times[k], times[k+1])
    a_t = np.cumsum(np.concatenate([base, -base])[order])
    r_t = np.cumsum(np.concatenate([rate, -rate])[order])
    # events are grouped by instance: no segment joins two instances' events
    last = 2 * np.append(heads[1:], n)[:-1] - 1
    dt = np.diff(times)
    dt[last] = 0.0
    t_hi = times[1:].copy()
    t_hi[last] = times[last]
    seg_n = n_t[:-1] * dt
    seg_k = a_t[:-1] * dt + r_t[:-1] * (t_hi**2 - times[:-1] ** 2) / 2.0
    cum_n = np.concatenate([[0.0], np.cumsum(seg_n)])
    cum_k = np.concatenate([[0.0], np.cumsum(seg_k)])
    pos = np.empty(2 * n, dtype=np.int64)
    pos[order] = np.arange(2 * n)
    span = np.where(e > s, e - s, np.nan)
    batch = (cum_n[pos[n:]] - cum_n[pos[:n]]) / span
    ctx = (cum_k[pos[n:]] - cum_k[pos[:n]]) / span
    return batch, ctx


def _event_order(s: np.ndarray, e: np.ndarray, heads: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The permutation sorting the events ``[s, e]`` (starts, then ends, of requests sorted
    by instance; ``heads``: each instance's first) stably by (instance, time), and the times
    in that order: ``sort_by_group`` of them by instance. Each instance's events are laid
    out together (its starts, then its ends: the order a stable sort by instance gives them)
    and sorted on their own, which needs no sort by instance nor gathers of the times and
    codes through one (a tenth of the sweep's time at 10 million requests); for many
    instances in a block the loop over them would cost more: ``sort_by_group`` then."""
    n = len(s)
    if len(heads) > FEW_GROUPS:
        local = np.repeat(np.arange(len(heads)), np.diff(np.append(heads, n)))
        order = sort_by_group(np.concatenate([local, local]), len(heads), np.concatenate([s, e]))
        return order, np.concatenate([s, e])[order]
    bounds = [*heads.tolist(), n]
    parts, index = [], []
    for lo, hi in itertools.pairwise(bounds):  # loop over instances, not requests
        parts += [s[lo:hi], e[lo:hi]]
        index += [np.arange(lo, hi), np.arange(n + lo, n + hi)]
    times = np.concatenate(parts)
    order = np.concatenate(index)
    at = 0
    for lo, hi in itertools.pairwise(bounds):  # each instance's events sorted on their own
        part = times[at:at + 2 * (hi - lo)]
        if not bool(np.all(part[1:] >= part[:-1])):
            by_time = np.argsort(part, kind="stable")
            part[:] = part[by_time]
            order[at:at + len(part)] = order[at:at + len(part)][by_time]
        at += len(part)
    return order, times


def decode_observations(dataset: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | str:
    """(batch, context tokens, TPOT) per finished request and how the batch was known, or why not.

    A request decodes from its first token (``arrival + ttft_s``) for ``tpot_s · (output - 1)``
    seconds; the batch it shared is reconstructed from all requests on the same
    ``decode_instance``.

    Memory: the decode intervals are computed chunk by chunk (``decode_spans``) to find the
    usable rows and draw the sample, and again only at the rows the reconstruction needs; no
    whole-size start, end or float copy of an integer column is made (at 10 million requests
    those were about 0.8 GB of fresh pages).
    """
    if not dataset.has_request_column("tpot_s"):
        return "no tpot_s column in the request records"
    req = dataset.requests
    cols = FloatColumns(req, ("arrival_ts", "prompt_tokens", "output_tokens", "tpot_s",
                              "ttft_s", "e2e_s"))
    n = len(req)
    usable = np.empty(n, dtype=bool)
    # the usable requests' start and end ranges per run of rows: the sample's start range,
    # and the runs its sampling pass can skip
    runs = RunRangesBuilder()
    for lo in range(0, n, PASS_CHUNK):  # chunks: no temporaries the size of the table
        chunk = slice(lo, lo + PASS_CHUNK)
        s, e, _ = decode_spans(cols, chunk)
        ok = usable[chunk]
        np.isfinite(s, out=ok)
        ok &= np.isfinite(e)
        ok &= e > s
        if not cols.integer("prompt_tokens"):  # (an integer column has no NaN to find)
            ok &= np.isfinite(cols("prompt_tokens", chunk))
        runs.add(lo, s, e, ok)
    if n:  # (the loop ran: an empty table binds none of them)
        del ok, s, e  # memory: ``ok``, a view of the mask, would keep it alive once freed
    if not usable.any():
        return "no request has tpot_s with ttft_s or e2e_s to place its decode in time"
    how = "per decode_instance"
    # integer codes straight from the column (missing names are one group of their own):
    # no per-row Python strings; any named when a code is not -1 (the largest code: one
    # reduction of the small codes, not a mask of every row)
    named = instance_code_view(req["decode_instance"])[0] \
        if dataset.has_request_column("decode_instance") else None
    if named is not None and len(named) and int(named.max()) >= 0:
        group: np.ndarray | None = named
        share = 1.0
    else:
        group = None  # one group: the same reconstruction as all-zero codes
        pool = len(dataset.instances_of("decode"))
        share = 1.0 / pool if pool else 1.0
        how = (f"pool total split evenly over {pool} decode instances" if pool else
               "whole pool as one instance (no decode_instance column and no instance count)")
    sample = sample_intervals(lambda at: decode_spans(cols, at)[:2], n,
                              None if usable.all() else usable, group, runs=runs.done(),
                              size=sampling.DECODE_SAMPLE_REQUESTS)
    if sample is not None:  # exact figures for the sampled requests, from their overlaps
        observed = sample.observed
        rows = np.flatnonzero(sample.needed)
        how = f"{how}; {sample.describe('requests')}"
    else:
        observed = usable
        rows = np.flatnonzero(usable)
    del usable
    start, end, steps, tpot = _spans_and_tpot(cols, rows)
    codes = np.zeros(len(rows), dtype=np.int64) if group is None else group[rows]
    b, k = decode_concurrency(start, end, cols("prompt_tokens", rows), steps, codes)
    # the fit's requests among rows (rows ascend: they come out in row order); the spans'
    # steps and TPOT, not the columns gathered again: ``steps = max(output - 1, 0)`` reaches
    # ``MIN_OUTPUT_FOR_TPOT - 1`` exactly where the output reaches ``MIN_OUTPUT_FOR_TPOT``
    # (a subtraction of 1 is exact near 2 and monotone elsewhere; NaN fails both)
    kept = observed[rows] & (steps >= MIN_OUTPUT_FOR_TPOT - 1) & np.isfinite(tpot)
    if "status" in req:
        kept &= status_ok(req, rows)
    return b[kept] * share, k[kept] * share, tpot[kept], how


def decode_spans(cols: FloatColumns, rows: slice | np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(decode start, decode end, decode steps) of the requests at ``rows``: from the first
    token (``arrival + ttft_s``) for ``tpot_s · (output - 1)`` seconds, or placed back from
    the end (``arrival + e2e_s``) when there is no first-token time."""
    return _spans_and_tpot(cols, rows)[:3]


def _spans_and_tpot(cols: FloatColumns, rows: slice | np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``decode_spans`` and the TPOT it read (read only: a view of the column at a slice)."""
    steps = cols.less("output_tokens", rows, 1.0)  # an array of its own: computed in place
    np.maximum(steps, 0.0, out=steps)
    arrival = cols.read("arrival_ts", rows)  # read only: no copies
    tpot = cols.read("tpot_s", rows)
    s = arrival + cols.read("ttft_s", rows)
    e = np.multiply(tpot, steps)
    e += s  # (IEEE addition commutes: s + tpot·steps to the bit)
    placed = np.isfinite(s)
    if not placed.all():  # no first-token time: placed back from the end (arrival + e2e)
        unplaced = ~placed
        done = arrival + cols.read("e2e_s", rows)
        no_ttft = unplaced & np.isfinite(done)
        e = np.where(no_ttft, done, e)
        s = np.where(no_ttft, e - tpot * steps, s)
    return s, e, steps, tpot


def decode_metric_observations(dataset: Dataset, kv_capacity_tokens: int,
                               mean_context_tokens: float
                               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | str:
    """(batch, context, mean ITL) per decode instance and minute from metrics, or why not.

    Batch is the mean running-requests gauge; context the summed sequence lengths gauge, else
    KV tokens in use (or KV usage × the profile's capacity), else batch × the workload's mean
    decode context.
    """
    from pdprobe import signals as S
    from pdprobe.analysis.promql import gauge_series, rate_series

    metrics = dataset.metrics
    decode = {i.name for i in dataset.instances_of("decode")}
    if metrics.empty or not decode:
        return "no decode-instance metrics"
    step = METRIC_FIT_STEP_S
    itl_sum = rate_series(metrics, S.ITL_S, step, kind="sum")
    itl_cnt = rate_series(metrics, S.ITL_S, step, kind="count")
    if itl_sum.empty or itl_cnt.empty:
        return "no inter-token-latency histogram"
    itl = itl_sum.merge(itl_cnt, on=["ts", "instance"], suffixes=("_sum", "_count"))
    itl = itl[itl["instance"].isin(list(decode)) & (itl["rate_count"] > 0)]
    itl = itl.assign(itl_s=itl["rate_sum"] / itl["rate_count"])
    running = gauge_series(metrics, S.REQUESTS_RUNNING, step).rename(columns={"value": "batch"})
    if running.empty:
        return "no running-requests gauge on decode instances"
    frame = itl.merge(running, on=["ts", "instance"])
    how = "summed sequence lengths gauge"
    ctx_frame = gauge_series(metrics, S.DECODE_CONTEXT_TOKENS, step)
    scale = 1.0
    if ctx_frame.empty:
        ctx_frame, how = gauge_series(metrics, S.KV_USED_TOKENS, step), "KV tokens in use"
    if ctx_frame.empty:
        ctx_frame = gauge_series(metrics, S.KV_USAGE_RATIO, step)
        scale, how = float(kv_capacity_tokens), "KV usage × profile KV capacity"
    if ctx_frame.empty:
        frame = frame.assign(ctx=frame["batch"] * mean_context_tokens)
        how = "batch × mean decode context of the workload"
    else:
        ctx_frame = ctx_frame.assign(ctx=ctx_frame["value"] * scale)[["ts", "instance", "ctx"]]
        frame = frame.merge(ctx_frame, on=["ts", "instance"])
    if frame.empty:
        return "decode ITL and gauges share no time bins"
    return (frame["batch"].to_numpy(dtype=np.float64), frame["ctx"].to_numpy(dtype=np.float64),
            frame["itl_s"].to_numpy(dtype=np.float64), f"per-minute ITL vs batch ({how})")


