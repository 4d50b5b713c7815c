"""Bounded samples of request records for the capacity model.

Reconstructing the decode batch every request shared sorts every start and end event of a
capture: at 10 million requests that is most of a diagnosis, while a fit of three coefficients
is settled by a few hundred thousand observations. Above ``SAMPLE_MAX_REQUESTS`` the fit
observes the requests that *start* in evenly spread time blocks (every ``k``-th block of
``SAMPLE_BLOCK_S``, at most about ``DECODE_SAMPLE_REQUESTS`` of them): a sample stratified by
time window, holding every instance and every length that ran in those windows in proportion.
Each sampled request's figure stays exact: the reconstruction runs on every request of the same
instance that overlaps a sampled one, which is everything its figure depends on. Prefill busy
periods are sampled the same way above ``BUSY_SAMPLE_MAX_REQUESTS``. The capacity plan sizes on
a proportional stratified sample of ``MIX_SAMPLE_REQUESTS`` (``strata.stratified_sample``:
arrival time × length octaves). Counts and sums (rates, burstiness, load windows, window
counts) keep using all rows, and the notes say what was sampled.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np

from pdprobe.analysis import sample_runs
from pdprobe.analysis.overlaps import Intervals, mark_overlapping
from pdprobe.analysis.sample_runs import (
    RunRanges,
    blocks_of,
    floor_quotient,
    merged_ranges,
    runs_to_read,
    sampled_around,
)

# Above this many requests the reconstructions run on a sample. Up to it the exact
# reconstruction is cheap (the sorts over 400,000 requests' events cost under a second on one
# core), and every bundled input, simulated scenario and public trace is below it, so their
# reports are exact. Above it the decode sample holds at most about
# ``DECODE_SAMPLE_REQUESTS`` (one block in three or more), which pins a three-coefficient fit
# far below the noise of any capture (the NNLS fit itself samples 100,000 for its first
# passes, perf_solver.NNLS_MAX_POINTS).
SAMPLE_MAX_REQUESTS: Final = 400_000
# Above that threshold the decode sample holds at most about this many requests (one block
# in ``ceil(n / that)``: 133,000-200,000 from 400,000 to 600,000 requests, one block in three,
# closer to 200,000 the larger the capture): a size, not a fraction of the capture, as for
# the busy periods below.
# The overlap test, the sweep and the fit follow the sample (the passes finding the usable
# rows read every request): at 10 million requests the capacity stage cost 1.15-1.19 CPU-s
# with 400,000 (one block in 25) and 0.99-1.00 with 200,000 (one in 50), while the decode
# figures moved by at most 1.4e-6 relative (the fit's R² 0.463 -> 0.459, rejected either way; the
# profile's scale, a median of 400,000 or 200,000 ratios, 0.9967 both) and no count moved
# (docs/model.md, "Sampled reconstructions"). The NNLS fit's first passes use 100,000 anyway
# (perf_solver.NNLS_MAX_POINTS).
DECODE_SAMPLE_REQUESTS: Final = 200_000
# Prefill busy periods are sampled above this many prefills (more than decode's), and the
# sample then holds about ``BUSY_SAMPLE_REQUESTS`` of them (one block in ``ceil(n / that)``):
# a size, not a fraction of the capture, since the overlap test, the reconstruction and the
# fit follow the sample while only the passes that find the valid rows and the candidates
# read every prefill (at 10 million prefills the capacity stage cost 1.69 CPU-s with one
# block in three, 1.34 with one in ten and 1.15-1.22 with one in twenty; with the decode
# sample bounded too, 1.00-1.02 with one in twenty and 0.96-0.98 with one in forty, 250,000).
# Every bundled input, simulated scenario, public trace and the 1M bench capture is at or
# below the threshold (exact). The prefill fit prefers requests that ran alone on their
# instance; under heavy load they are rare, and when a sample holds too few the periods are
# rebuilt from every prefill (``model_build.too_thin``, at the sample's cost on top). The 10M
# bench capture keeps 101,623 lone requests in its one-in-forty sample (a fit needs 30).
BUSY_SAMPLE_MAX_REQUESTS: Final = 1_000_000
BUSY_SAMPLE_REQUESTS: Final = 250_000
# Length of a sampled time block: a minute holds many decode lifetimes (seconds to a minute),
# so a block's overlap margin stays small against the block, and it is short against a capture
# of hours, so the blocks fall in every phase of the load.
SAMPLE_BLOCK_S: Final = 60.0
# Passes over every request run in chunks of this many: each temporary then stays in the CPU
# cache and is reused, instead of being fresh memory the size of the capture (at 10 million
# requests that costs several times the arithmetic).
PASS_CHUNK: Final = 1 << 16
# How a sample's description starts (fit policy looks for it to say the fit was sampled).
SAMPLED_MARK: Final = "a sample of"


@dataclass(frozen=True)
class TimeSample:
    """Which requests are observed and which the reconstruction needs (boolean masks)."""

    observed: np.ndarray  # requests starting in a sampled block: the fit's observations
    needed: np.ndarray  # observed ones and every request overlapping a sampled block's span
    every: int  # one block in ``every`` is sampled
    total: int  # requests the sample was drawn from

    size: int = -1  # observed requests (-1: count ``observed``)
    # ``sample_intervals(by_group=True)``: the needed rows' positions sorted by (group,
    # start), stably, as the overlap test sorted them anyway
    by_group: np.ndarray | None = None
    # with ``pad_s``: those rows' intervals, in that order (start, end without the pad)
    by_group_spans: tuple[np.ndarray, np.ndarray] | None = None

    def describe(self, what: str) -> str:
        """A note naming the sample: its size, what it was drawn from, how."""
        size = self.size if self.size >= 0 else int(np.count_nonzero(self.observed))
        return (f"{SAMPLED_MARK} {size:,} of {self.total:,} {what} (those "
                f"starting in one {SAMPLE_BLOCK_S:g} s block in every {self.every}; exact "
                "figures for each, from every request overlapping it)")

    def released(self) -> TimeSample:
        """The same sample without its per-request masks (memory: two bytes per request of
        the capture), for keeping once the masks were read: ``describe``, ``every`` and
        ``total`` still hold."""
        empty = np.zeros(0, dtype=bool)
        return TimeSample(empty, empty, self.every, self.total,
                          self.size if self.size >= 0 else int(np.count_nonzero(self.observed)))


def time_sample(start: np.ndarray, end: np.ndarray, group: np.ndarray | None = None,
                max_requests: int | None = None,
                block_s: float = SAMPLE_BLOCK_S, closed: bool = False) -> TimeSample | None:
    """Requests of ``[start, end)`` intervals observed in evenly spread time blocks, or None
    when there are at most ``max_requests`` (default ``SAMPLE_MAX_REQUESTS``; then everything
    is used).

    Intervals must be finite; ``group`` (integer codes, e.g. the decode instance) limits the
    overlaps to requests of the same group. Blocks are ``block_s`` long from the earliest
    start; one in every ``k = ceil(n / max_requests)`` is kept (the middle one of each run of
    ``k``, so a capture always gives the same sample). ``needed`` marks the observed requests
    and every request of their group overlapping one of them; ``closed`` counts intervals
    that only touch (one ends when the other starts) as overlapping, as busy periods do.
    """
    s = np.asarray(start, dtype=np.float64)
    e = np.asarray(end, dtype=np.float64)
    return sample_intervals(lambda rows: (s[rows], e[rows]), len(s), None,
                            None if group is None else np.asarray(group),
                            max_requests=max_requests, block_s=block_s, closed=closed)


def sample_intervals(intervals: Intervals, n_rows: int, valid: np.ndarray | None,
                     group: np.ndarray | None, *, max_requests: int | None = None,
                     block_s: float = SAMPLE_BLOCK_S, closed: bool = False,
                     start_range: tuple[float, float] | None = None,
                     by_group: bool = False, runs: RunRanges | None = None,
                     raw: Intervals | None = None, pad_s: float = 0.0,
                     size: int | None = None) -> TimeSample | None:
    """``time_sample`` of the ``n_rows`` intervals ``intervals`` computes, of the rows
    ``valid`` marks (None: all; the others may be anything and are neither observed nor
    needed), without whole-size arrays of them.

    The masks cover all ``n_rows``; ``total`` counts the valid rows. Three chunked passes over
    the intervals (the earliest start, the observed blocks' reach, the candidates) and the
    exact overlap test on the candidates, whose ``group`` codes (any integer dtype: a
    categorical column's own codes do) are the only ones read. The same sample as
    ``time_sample`` of the valid rows alone. ``start_range``: the valid rows' earliest and
    latest start when the caller found them in its own pass (the first pass is skipped).
    ``by_group`` (with ``group``): also ``TimeSample.by_group``, the needed rows' positions
    in (group, start) order, from the overlap test's own sort (no second one). ``runs``: the
    valid intervals' ranges per run of rows from the caller's own pass (``sample_runs``; it
    gives the start range too): the sampling pass then reads only the runs that hold a
    sampled block or end in or after the next one, the others being neither observed nor
    candidates but by starting before an earlier block's reach (``_candidates``). ``raw``
    (with ``by_group``): the intervals whose ends plus ``pad_s`` are ``intervals``' (to the
    bit: ``e + pad_s``), which the overlap test computes instead and keeps for the needed
    rows (``TimeSample.by_group_spans``): no second gather of them. ``size``: above
    ``max_requests`` the sample holds about this many (one block in ``ceil(n / size)``; at
    most ``max_requests``); None: ``max_requests``.
    """
    max_requests = SAMPLE_MAX_REQUESTS if max_requests is None else max_requests
    n = n_rows if valid is None else int(np.count_nonzero(valid))
    if n <= max_requests:
        return None
    every = math.ceil(n / (max_requests if size is None else min(size, max_requests)))
    phase = every // 2
    if runs is not None:
        start_range = runs.start_range
    t0, s_max = start_range if start_range is not None else (math.inf, -math.inf)
    for _lo, _hi, s, _ in _chunks(intervals, n_rows, valid) if start_range is None else ():
        if len(s):
            t0, s_max = min(t0, float(s.min())), max(s_max, float(s.max()))
    # floor division is monotone: the latest start is in the last block
    n_blocks = int(np.floor_divide(np.float64(s_max) - t0, block_s)) + 1
    reach = np.full(n_blocks, -np.inf)
    sampled = np.arange(n_blocks) % every == phase  # per block (a table, not per row)
    prev, nxt = sampled_around(n_blocks, every)
    # the candidates ending in or after the next sampled block are found in this pass (they
    # need no reach); those starting before an earlier block's reach only where a block's
    # reach can get past its start (``_candidates``, the runs holding such a block)
    spans: list[tuple[np.ndarray, ...]] = []  # per run: first row, end, blocks' range
    if runs is None:
        observed, maybe = np.empty(n_rows, dtype=bool), np.empty(n_rows, dtype=bool)
        ranges: Iterator[tuple[int, int]] = (
            (lo, min(lo + PASS_CHUNK, n_rows)) for lo in range(0, n_rows, PASS_CHUNK))
    else:  # (the runs not read are neither observed nor candidates: zeros)
        observed, maybe = np.zeros(n_rows, dtype=bool), np.zeros(n_rows, dtype=bool)
        ranges = runs_to_read(runs, sampled, nxt, t0, block_s, spans, PASS_CHUNK)
    with np.errstate(invalid="ignore"):  # invalid rows' blocks are garbage, masked off
        for lo, hi in ranges:
            s, e = intervals(slice(lo, hi))
            b = blocks_of(s, t0, block_s, n_blocks)
            at = np.arange(0, len(b), sample_runs.RUN_ROWS)
            spans.append((at + lo, np.append(at[1:], len(b)) + lo, np.minimum.reduceat(b, at),
                          np.maximum.reduceat(b, at)))
            obs = observed[lo:hi]
            np.take(sampled, b, out=obs)
            if valid is not None:
                obs &= valid[lo:hi]
            np.maximum.at(reach, b[obs], e[obs])  # over the observed only
            part = maybe[lo:hi]
            # an end reaching an observed start in block q (floor((start - t0) / block_s) =
            # q, floor division) is at least q by the rounded quotient too: rounding is
            # monotone
            e = np.subtract(e, t0)  # (a new array: ``intervals`` may give views)
            np.divide(e, block_s, out=e)
            np.greater_equal(np.floor(e, out=e), nxt[b], out=part)
            part |= obs
            if valid is not None:
                part &= valid[lo:hi]
    if not observed.any():  # a capture shorter than the stride of blocks: keep it all
        return None
    reach = np.maximum.accumulate(reach)  # an earlier block's long request reaches further
    needed = observed.copy()
    # (the candidates' positions are held by the overlap test alone: freed once split)
    # memory: the candidates' positions are handed to the overlap test alone (freed once
    # split), and the candidate mask is freed before it runs
    handed = [_candidates(intervals, valid, maybe, reach, prev, sampled, t0, block_s, spans)]
    del maybe, spans
    kept = mark_overlapping(intervals if raw is None else raw, handed.pop(), observed, needed,
                            group, closed, by_group and group is not None,
                            None if raw is None else pad_s)
    return TimeSample(observed=observed, needed=needed, every=every, total=n,
                      by_group=kept[0] if kept is not None else None,
                      by_group_spans=(kept[1], kept[2]) if kept is not None and
                      kept[1] is not None and kept[2] is not None else None)


def _chunks(intervals: Intervals, n_rows: int, valid: np.ndarray | None
            ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(lo, hi, start, end)`` per chunk of ``PASS_CHUNK`` rows (only the valid ones when
    ``valid`` is given): each chunk's temporaries stay in the CPU cache and are reused."""
    for lo in range(0, n_rows, PASS_CHUNK):
        hi = min(lo + PASS_CHUNK, n_rows)
        s, e = intervals(slice(lo, hi))
        if valid is not None:
            s, e = s[valid[lo:hi]], e[valid[lo:hi]]
        yield lo, hi, s, e


# Above this many requests the capacity plan sizes on a stratified sample of this many
# (``strata.stratified_sample``). Every sizing candidate evaluates every request of the mix
# (a pool search is tens of passes over it, the band and the windows repeat it), so the plan's cost
# follows this number, not the capture: about 2.5 µs of CPU per sampled request for the whole
# plan. 250,000 requests put the share of requests missing the TTFT objective, the quantity the
# prefill count is searched on, within ±0.001 (two standard errors of a 10 % share, less after
# stratification) and every length moment the rates use within a fraction of a percent, while
# a 10-million-request plan costs under a second. The bundled sample, the simulated scenarios
# and the public traces are far below it: their plans use every request.
MIX_SAMPLE_REQUESTS: Final = 250_000


def _candidates(intervals: Intervals, valid: np.ndarray | None, maybe: np.ndarray,
                reach: np.ndarray, prev: np.ndarray, sampled: np.ndarray, t0: float,
                block_s: float, spans: list[tuple[np.ndarray, ...]]) -> np.ndarray:
    """Positions of the requests that may overlap an observed one (a superset, found with
    block arithmetic): ``maybe`` (the observed ones and those ending in or after the next
    sampled block, from ``sample_intervals``' pass) and those starting before the furthest
    end (``reach``, per block) of any sampled block at or before theirs.

    A start ``s`` in block ``q`` is at most a reach ``r`` only if ``q`` is at most ``r``'s
    block (both by the same rounded floor division, which is monotone), so only the runs of
    ``sample_runs.RUN_ROWS`` rows (``spans``: their first rows, ends and lowest and highest
    blocks) holding a block that its sampled block's reach gets to are read again: the block
    after each sampled one, mostly, not the capture.
    Requests of a sampled block are observed already (or invalid).
    """
    # how far the sampled block at or before each block reaches (-inf: none before)
    late_reach = np.where(prev >= 0, reach[np.clip(prev, 0, len(reach) - 1)], -np.inf)
    with np.errstate(invalid="ignore"):
        late_block = floor_quotient(late_reach - t0, block_s)  # (-inf: before every block)
    reached = ~sampled & (np.arange(len(reach)) <= late_block)
    # runs of rows whose blocks include a reached one: from a running count of them
    first, ends, lowest, highest = (np.concatenate([part[i] for part in spans]).astype(np.intp)
                                    for i in range(4))
    upto = np.concatenate([[0], np.cumsum(reached)])
    again = np.flatnonzero(upto[highest + 1] > upto[lowest])
    again = again[np.argsort(first[again], kind="stable")]  # (row order: read, then not)
    with np.errstate(invalid="ignore"):  # invalid rows' blocks are garbage, masked off
        # consecutive runs read together, at most PASS_CHUNK rows at a time
        for lo, hi in merged_ranges(first[again], ends[again], PASS_CHUNK):
            s, _ = intervals(slice(lo, hi))
            b = blocks_of(s, t0, block_s, len(reach))
            starts_early = np.less_equal(s, late_reach[b])
            if valid is not None:
                starts_early &= valid[lo:hi]
            maybe[lo:hi] |= starts_early
    return positions(maybe)


def positions(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)`` as int32 when the positions fit (memory: half of int64's),
    found a chunk at a time."""
    out = np.empty(int(np.count_nonzero(mask)), dtype=np.int32 if len(mask) < 2**31
                   else np.int64)
    at = 0
    for lo in range(0, len(mask), PASS_CHUNK):
        found = np.flatnonzero(mask[lo:lo + PASS_CHUNK])
        out[at:at + len(found)] = found + lo
        at += len(found)
    return out
