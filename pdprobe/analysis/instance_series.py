"""Per-instance TTFT series of request records: the mean per (instance, time bin) cell.

The instance summaries' ``ttft_series`` of every role column at once, on the columns' integer
codes (``analysis.grouped``): arrivals in time order are read bin run by bin run over the joint
codes of every key, others slice by slice. With the series come each instance's count and sum
of the values over every row, the TTFT figures' own (``grouped.know_sums``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np

from pdprobe.analysis.base import TimeSeries
from pdprobe.analysis.row_slices import compact_dtype


def binned_means_by_codes(keys: list[tuple[np.ndarray, list[str]]], ts: np.ndarray,
                           values: np.ndarray, start: float, end: float, step: float,
                           unit: str, in_order: bool | None = None) -> tuple[list[Mapping[str, TimeSeries]],
                                               list[tuple[np.ndarray, np.ndarray] | None]]:
    """Per key (codes, labels): the mean of ``values`` per (code, time bin) over the rows with
    a code, a time and a value, as one regular series per code with a value:
    ``instances._binned_by`` on integer codes, with no full-length bin, cell or mask array.
    Arrivals in time order (the usual case) are read bin by bin (``_cell_sums_by_runs``),
    others slice by slice (``_cell_sums_by_slices``): the same sums up to the last bits.

    Also per key, when every row has a time (so a bin): the non-NaN values and their sum per
    code over every row (None otherwise). ``in_order``: whether ``ts`` never decreases, when
    the caller knows (``table_facts.column_ascending``)."""
    from pdprobe.analysis.row_slices import ascending, finite_ends

    n_bins = max(1, int(np.ceil((end - start) / step)))
    # (NaN times are not ascending; an infinite one has no bin of its own order)
    by_runs = len(ts) > 0 and (ascending(ts) if in_order is None else in_order) and \
        finite_ends(ts)
    cells = (_cell_sums_by_runs if by_runs else _cell_sums_by_slices)(
        keys, ts, values, start, step, n_bins)
    series = [_means(key_sums, key_counts, labels, n_bins, start, step, unit)
              for (_codes, labels), (key_sums, key_counts) in zip(keys, cells, strict=True)]
    totals: list[tuple[np.ndarray, np.ndarray] | None] = [
        (key_counts.reshape(len(labels), n_bins).sum(axis=1),
         key_sums.reshape(len(labels), n_bins).sum(axis=1)) if by_runs else None
        for (_codes, labels), (key_sums, key_counts) in zip(keys, cells, strict=True)]
    return series, totals


def _cell_sums_by_slices(keys: list[tuple[np.ndarray, list[str]]], ts: np.ndarray,
                         values: np.ndarray, start: float, step: float,
                         n_bins: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per key, the sum and count of ``values`` per (code, bin) cell (``code * n_bins + bin``)
    over the rows with a code, a time and a value, slice by slice (``grouped.chunks``; sums
    added in row order, as one bincount adds them). The time bins (a float floor division, the
    costly part) are computed once per slice for every key."""
    from pdprobe.analysis.grouped import chunks
    from pdprobe.analysis.sampling import floor_quotient  # a // b, the very bins, faster

    sums = [np.zeros(len(labels) * n_bins) for _codes, labels in keys]
    counts = [np.zeros(len(labels) * n_bins, dtype=np.int64) for _codes, labels in keys]
    for part in chunks(len(ts)):
        t, v = ts[part], values[part]
        timed = ~np.isnan(t)
        timed &= ~np.isnan(v)
        every = bool(timed.all())
        if not every:  # the rows with a time and a value (all of them: no copies)
            if not timed.any():
                continue
            t, v = t[timed], v[timed]
        bins = np.clip(floor_quotient(t - start, step).astype(np.int64), 0, n_bins - 1)
        for (codes, _labels), key_sums, key_counts in zip(keys, sums, counts, strict=True):
            c = codes[part] if every else codes[part][timed]
            ok = c >= 0
            if ok.all():
                cell, w = bins.copy(), v
            elif ok.any():  # and the rows with a code
                cell, w, c = bins[ok], v[ok], c[ok]
            else:
                continue
            cell += c.astype(np.int64) * n_bins
            np.add.at(key_sums, cell, w)
            np.add.at(key_counts, cell, 1)
    return list(zip(sums, counts, strict=True))


def _cell_sums_by_runs(keys: list[tuple[np.ndarray, list[str]]], ts: np.ndarray,
                       values: np.ndarray, start: float, step: float,
                       n_bins: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``_cell_sums_by_slices`` of times in ascending order: each bin's rows are one run, found
    by a binary search of the bins (``key_search.key_starts``: the same floor division at a few
    hundred rows instead of every row), and each run's sums are one ``np.bincount`` over the
    joint codes of every key (``code_a * n_b + code_b``; a key's sums are its codes' sums over
    the other keys' codes: the same counts, sums up to the last bits), one pair of bincounts
    per bin instead of one per key (a quarter of the cost at 10M rows, and half of that)."""
    from pdprobe.analysis.key_search import key_starts
    from pdprobe.analysis.sampling import floor_quotient

    if not keys:
        return []
    n = len(ts)
    starts = key_starts(lambda at: np.clip(floor_quotient(ts[at] - start, step).astype(np.int64),
                                           0, n_bins - 1), n_bins, n)
    bounds = np.append(starts, n).tolist()
    # one slot per code and one (first) for the rows without a code, per key
    widths = [len(labels) + 1 for _codes, labels in keys]
    if int(np.prod(widths)) > _JOINT_SLOTS_MAX:  # too many joint cells: key by key
        return [_joint_run_sums([key], [width], values, bounds, n_bins)[0]
                for key, width in zip(keys, widths, strict=True)]
    return _joint_run_sums(keys, widths, values, bounds, n_bins)


def _joint_run_sums(keys: list[tuple[np.ndarray, list[str]]], widths: list[int],
                    values: np.ndarray, bounds: list[int],
                    n_bins: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each key's per-(code, bin) sums and counts of ``values`` from one bincount pair per
    bin's run of rows (``bounds``) over the keys' joint codes; one key alone is its own codes."""
    slots = int(np.prod(widths))
    # sum over the keys of (code + 1) * stride: the codes' combination plus one per stride
    offset = sum(int(np.prod(widths[k + 1:])) for k in range(len(widths)))
    # the smallest type holding every slot (each partial combination of codes lies between
    # -slots and slots): two keys of 120 and 40 instances' 5,000 slots in int16
    narrow = compact_dtype(slots)
    sums = np.zeros((n_bins, slots))
    counts = np.zeros((n_bins, slots), dtype=np.int64)
    for b in range(n_bins):
        lo, hi = bounds[b], bounds[b + 1]
        if hi <= lo:
            continue
        v = values[lo:hi]
        nan = np.isnan(v)
        ok = ~nan if nan.any() else None
        if ok is not None:
            v = v[ok]
        slot = None
        for (codes, _labels), width in zip(keys, widths, strict=True):
            c = codes[lo:hi] if ok is None else codes[lo:hi][ok]
            if slot is None:
                slot = c.astype(narrow)
            else:
                slot *= width
                slot += c
        assert slot is not None
        slot += offset  # every key's code + 1: slot 0 for none
        # computed in the narrow type, widened once for both bincounts (each widens any
        # other type again): a quarter of the memory traffic of computing it in intp
        wide = slot.astype(np.intp)
        sums[b] = np.bincount(wide, weights=v, minlength=slots)
        counts[b] = np.bincount(wide, minlength=slots)
    out = []
    shape = (n_bins, *widths)
    for k in range(len(keys)):
        others = tuple(axis + 1 for axis in range(len(keys)) if axis != k)
        key_sums = sums.reshape(shape).sum(axis=others)  # (bins, slots of key k)
        key_counts = counts.reshape(shape).sum(axis=others)
        out.append((key_sums.T[1:].ravel(), key_counts.T[1:].ravel()))
    return out


# Joint (code, code, ...) slots ``_cell_sums_by_runs`` counts per bin at most (two keys of
# 120 and 40 instances: 5,000); more take a pass per key.
_JOINT_SLOTS_MAX: Final = 1 << 16


def _means(sums: np.ndarray, counts: np.ndarray, labels: list[str], n_bins: int, start: float,
           step: float, unit: str) -> Mapping[str, TimeSeries]:
    """One regular series of ``sums / counts`` per label with a count, per (label, bin) cell."""
    if not counts.any():
        return {}
    cell_sums = sums.reshape(len(labels), n_bins)
    cell_counts = counts.reshape(len(labels), n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(cell_counts > 0, cell_sums / np.maximum(cell_counts, 1), np.nan)
    edges = tuple(float(start + step * i) for i in range(n_bins))
    rows = np.flatnonzero(cell_counts.any(axis=1))
    return {labels[r]: TimeSeries(ts=edges, values=tuple(means[r].tolist()), unit=unit,
                                  step_s=float(step))
            for r in rows.tolist()}
