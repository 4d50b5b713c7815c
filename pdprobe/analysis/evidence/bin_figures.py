"""Per-bin figures of request rows grouped by arrival bin (the cluster table's request series).

Arrival bins in time order are runs of rows: ``bin_groups`` groups them run by run (the very
``Groups.of`` of the bins, sample included, without a pass over every row's code). The
figures are read a block of about ``CHUNK_ROWS`` grouped rows at a time (each block's gathered
values reuse the allocator's memory), by sorting (``sorted_figures``: values with many ties,
or several quantiles) or by partitioning each bin at its middle (``transfer_medians``: the
transfer time and, from the same gathered values, the time per GB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pdprobe.analysis.evidence.cells import medians_of
from pdprobe.analysis.key_search import key_starts
from pdprobe.analysis.row_slices import (
    Column,
    ascending,
    chunks,
    compact_dtype,
    group_slices,
    index_dtype,
    take,
)

if TYPE_CHECKING:
    from pdprobe.analysis.grouped import Groups


class BinSample:
    """``bin_groups``' sample of the rows of bins that never decrease, drawn from the draws of
    another sample of the same rows (``cells.BinCells``, which hands over each bin's draws in
    row order: ``take``): one seeded stream, one float32 per row, so the very draws
    ``bin_groups`` would make, made once for both samples (10M rows: ~18 ms). ``complete``
    once every row's draw was handed over."""

    def __init__(self, bins: np.ndarray, n_bins: int, sample_max: int) -> None:
        n = bins.size
        totals = np.diff(np.append(key_starts(lambda at: bins[at], n_bins, n), n))
        # each bin's rate, as ``bin_groups`` computes it for the bins with rows
        self._rate = np.minimum(1.0, sample_max / np.maximum(totals, 1)).astype(np.float32)
        self._rows = np.empty(n, dtype=index_dtype(n))  # pages past the rows kept: untouched
        self._kept = 0
        self._next = 0  # the first row whose draw was not handed over
        self._lost = False
        self.fed = False

    def take(self, b: int, lo: int, uniform: np.ndarray) -> None:
        """The draws ``uniform`` of rows ``lo, lo + 1, ...`` of bin ``b``."""
        self.fed = True
        if lo != self._next:  # (rows were skipped: not this sample)
            self._lost = True
        hit = np.flatnonzero(uniform < self._rate[b])
        np.add(hit, lo, out=self._rows[self._kept:self._kept + hit.size], casting="unsafe")
        self._kept += hit.size
        self._next = lo + uniform.size

    @property
    def complete(self) -> bool:
        """Every row's draw handed over, in row order."""
        return not self._lost and self._next == self._rows.size

    def rows(self) -> np.ndarray:
        """The rows sampled, ascending."""
        return self._rows[:self._kept]


def bin_groups(bins: np.ndarray, n_bins: int, sample_max: int | None,
               drawn: BinSample | None = None) -> Groups:
    """``Groups.of(bins, range(n_bins), sample_max=sample_max)``: when the bins never decrease
    (arrivals in time order) each bin's rows are one run, found by a binary search (no count
    of every row's code, no check of the order), and the sample is drawn run by run against
    each bin's rate (no rate looked up per row, no code gathered at the sampled rows): the
    same draws, so the same rows; or read from ``drawn``, the same sample drawn beside another
    (``BinSample``, when complete). Other bins go to ``Groups.of``."""
    from pdprobe.analysis.grouped import SAMPLE_SEED, Groups

    n = bins.size
    if not n or bins[0] < 0 or bins[-1] >= n_bins or not ascending(bins):
        return Groups.of(bins, range(n_bins), sample_max=sample_max)
    starts = np.append(key_starts(lambda at: bins[at], n_bins, n), n)
    totals = np.diff(starts)
    used = totals > 0
    ids = np.flatnonzero(used)
    codes = bins
    if not used.all():  # renumbered as ``Groups.of`` numbers the groups with rows
        lookup = np.where(used, np.cumsum(used) - 1, -1).astype(compact_dtype(ids.size))
        codes = lookup[bins]
    elif codes.dtype.itemsize > np.dtype(compact_dtype(n_bins)).itemsize:
        codes = codes.astype(compact_dtype(n_bins))
    totals, starts = totals[used], np.append(starts[:-1][used], n)
    bounds = np.zeros(ids.size + 1, dtype=np.int64)
    common: dict[str, Any] = {"codes": codes, "labels": tuple(str(b) for b in ids.tolist()),
                              "ids": ids, "totals": totals, "complete": True, "ordered": True}
    if sample_max is None or not (totals > sample_max).any():
        np.cumsum(totals, out=bounds[1:])
        return Groups(order=np.arange(n, dtype=index_dtype(n)), bounds=bounds, **common)
    if drawn is not None and drawn.complete:
        order = drawn.rows()
        bounds[:] = np.searchsorted(order, starts.astype(order.dtype))  # (no int64 copy)
        return Groups(order=order, bounds=bounds, sampled=True, **common)
    rate = np.minimum(1.0, sample_max / totals).astype(np.float32)
    # ``sample_rows``' draws: one float32 per row, a slice at a time, from one seeded stream
    rng = np.random.default_rng(SAMPLE_SEED)
    rows = np.empty(n, dtype=index_dtype(n))  # pages past the rows kept are never touched
    kept = 0
    bounds_at = starts.tolist()
    for part in chunks(n):
        uniform = rng.random(part.stop - part.start, dtype=np.float32)
        first = int(np.searchsorted(starts, part.start, side="right")) - 1
        for g in range(first, ids.size):
            a, b = max(bounds_at[g], part.start), min(bounds_at[g + 1], part.stop)
            if a >= part.stop:
                break
            hit = np.flatnonzero(uniform[a - part.start:b - part.start] < rate[g])
            np.add(hit, a, out=rows[kept:kept + hit.size], casting="unsafe")
            kept += hit.size
    order = rows[:kept]
    bounds[:] = np.searchsorted(order, starts.astype(order.dtype))  # (no int64 copy)
    return Groups(order=order, bounds=bounds, sampled=True, **common)


def sorted_figures(groups: Groups, values: Column, q: float | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Each group's median and, with ``q``, linear quantile ``q`` (else NaN) of its sorted
    non-NaN ``values`` (``Groups.sorted``), a block of about ``CHUNK_ROWS`` grouped rows
    at a time (``row_slices.group_slices``): a group's figures read only its own values, so
    they are the same, and each block's gathered values reuse the allocator's memory where
    every bin's at once were fresh pages (36 MB for 4.5M sampled rows at 10M rows)."""
    median = np.full(groups.n_groups, np.nan)
    upper = np.full(groups.n_groups, np.nan)
    for first, end, block in group_slices(groups):
        ranked = block.sorted(values)
        median[first:end] = ranked.median()
        if q is not None:
            upper[first:end] = ranked.quantile(q)
    return median, upper


def transfer_medians(groups: Groups, seconds: np.ndarray, kv_bytes: np.ndarray | None
                     ) -> tuple[np.ndarray, np.ndarray | None]:
    """Each group's median transfer time (``Groups.medians`` of ``seconds``) and, with
    ``kv_bytes``, its median time per GB (``1e9 * seconds / kv_bytes`` where the bytes are
    above 0, else NaN): congestion slows every byte, bigger transfers alone do not. A block
    of grouped rows at a time, each column gathered once at the block's rows for both
    figures (the time per GB read the transfer times again); a group's median reads only its
    own values, so the figures are the same."""
    median = np.full(groups.n_groups, np.nan)
    per_gb = None if kv_bytes is None else np.full(groups.n_groups, np.nan)
    for first, end, block in group_slices(groups):
        rows = block.order
        sizes = np.diff(block.bounds)
        x = take(seconds, rows)
        if per_gb is not None and kv_bytes is not None:
            ratio = np.multiply(x, 1e9)
            k = np.array(np.asarray(kv_bytes)[rows], dtype=np.float64, copy=None)
            k[~(k > 0)] = np.nan
            with np.errstate(invalid="ignore", divide="ignore"):
                np.divide(ratio, k, out=ratio)
            per_gb[first:end] = medians_of(ratio, sizes)
        median[first:end] = medians_of(x, sizes)  # partitioned in place: read last
    return median, per_gb


def run_counts_and_sums(groups: Groups, values: Column, no_nan: bool = False
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``groups.counts(values)`` and ``groups.sums(values)``; for groups that are runs of
    rows (``Groups.ordered``: arrival bins in time order) and float64 values, from one pass
    over each run: its NaN counted, then its values (NaN as 0) added one after the other by
    ``np.cumsum`` (``Groups.sums`` adds them one by one from 0.0 with ``np.add.at``: the same
    additions in the same order, so the same floats; + 0.0 gives a sum of zeros the sign of
    0.0 + each). At 10M rows ~45 -> ~30 ms. ``no_nan``: the caller knows no value is NaN
    (a finite sum of the column): no NaN test of each run (~10 ms less)."""
    if not (groups.ordered and isinstance(values, np.ndarray) and values.dtype == np.float64):
        return groups.counts(values), groups.sums(values)
    counts = groups.totals.copy()
    sums = np.zeros(groups.n_groups)
    start = 0
    for g, size in enumerate(groups.totals.tolist()):
        v = values[start:start + size]
        start += size
        nan = None if no_nan else np.isnan(v)
        n_nan = 0 if nan is None else int(np.count_nonzero(nan))
        if nan is not None and n_nan:
            counts[g] -= n_nan
            v = np.where(nan, 0.0, v)
        sums[g] = np.cumsum(v)[-1] + 0.0 if size else 0.0
    return counts, sums
