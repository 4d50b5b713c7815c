"""Fixed-seed Bernoulli samples of a table's rows, drawn slice by slice.

Above ``grouped.QUANTILE_EXACT_ROWS`` rows the quantiles of each group (and of a whole
column) are read from a sample: each row kept with its group's rate, by one draw of a fixed
seed per row, so the same capture always gives the same sample. The draws are taken
``row_slices.CHUNK_ROWS`` at a time (the same stream as one draw of every row), and several
samples of one table share them (``sample_rows_each``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from pdprobe.analysis.row_slices import chunks, index_dtype


def sample_rows(codes: np.ndarray | int | Callable[[slice], np.ndarray], rate: np.ndarray,
                seed: int, n_rows: int | None = None) -> np.ndarray:
    """Rows kept by a Bernoulli draw at ``rate[code]`` (code -1: never), the fixed-seed draws
    taken slice by slice (the same stream as one draw of every row). ``codes`` an int ``n``:
    ``n`` rows of code 0 (the draws compared with one rate; no array of codes); a function:
    the codes of a slice of ``n_rows`` rows (no full-length array of them)."""
    return sample_rows_each([(codes, rate)], seed, n_rows)[0]


def sample_rows_each(samples: Sequence[tuple[np.ndarray | int | Callable[[slice], np.ndarray],
                                             np.ndarray]],
                     seed: int, n_rows: int | None = None) -> list[np.ndarray]:
    """``sample_rows(codes, rate, seed, n_rows)`` for each ``(codes, rate)`` of rows of one
    table, from one stream of draws: the same seed draws the same number for a row whatever
    the codes, so each sample is the one drawn alone, and the draws (a third of a sample's
    cost) are taken once for all of them."""
    rng = np.random.default_rng(seed)
    first = samples[0][0]
    if callable(first):
        assert n_rows is not None
        n = n_rows
    else:
        n = first if isinstance(first, int) else first.size
    # code -1 reads the last slot: never kept
    keep_rates = [np.append(rate.astype(np.float32), np.float32(0.0)) for _codes, rate in samples]
    # written in place of a list of pieces and their concatenation (both held at once: 80 MB
    # at 10M rows kept); the pages past the rows kept are never written, so never committed
    picked = [np.empty(n, dtype=index_dtype(n)) for _ in samples]
    kept = [0] * len(samples)
    bands = [_band(rate) if isinstance(codes, np.ndarray) else None
             for codes, rate in samples]
    for part in chunks(n):
        uniform = rng.random(part.stop - part.start, dtype=np.float32)
        for k, ((codes, _rate), keep_rate, band) in enumerate(
                zip(samples, keep_rates, bands, strict=True)):
            # rates close together: each row's rate looked up only between the extremes
            hit = None if band is None or not isinstance(codes, np.ndarray) else \
                _kept_in_band(uniform, codes[part], keep_rate, *band)
            if hit is None:
                # np.take: the same rates (code -1 reads the last slot) at half the cost of
                # indexing
                threshold = keep_rate[0] if isinstance(codes, int) else \
                    np.take(keep_rate, codes(part) if callable(codes) else codes[part])
                hit = np.flatnonzero(uniform < threshold)
            into = picked[k][kept[k]:kept[k] + hit.size]
            np.add(hit, part.start, out=into, casting="unsafe")  # positions below n fit
            kept[k] += hit.size
    return [rows[:m] for rows, m in zip(picked, kept, strict=True)]


# ``sample_rows_each`` compares a slice's draws with the extremes of a sample's rates, and looks
# up each row's own rate only for the draws between them, when they are at most this far apart
# (a round-robin router's instances: rates ``m / 83,333`` and ``m / 83,334``, 7e-6 apart).
_BAND_MAX: Final = 1 / 64


def _band(rate: np.ndarray) -> tuple[np.float32, np.float32] | None:
    """The least and the largest of ``rate`` (float32) when they are at most ``_BAND_MAX``
    apart (else None): a draw below the least keeps a row of any code, one at or above the
    largest keeps none."""
    if not rate.size:
        return None
    rates = rate.astype(np.float32)
    lo, hi = rates.min(), rates.max()
    return (lo, hi) if hi - lo <= _BAND_MAX else None


def _kept_in_band(uniform: np.ndarray, codes: np.ndarray, keep_rate: np.ndarray,
                  lo: np.float32, hi: np.float32) -> np.ndarray | None:
    """``np.flatnonzero(uniform < keep_rate[codes])`` (positions in the slice) for rates
    between ``lo`` and ``hi``: the draws below ``hi``, less those from ``lo`` up that are not
    below their row's own rate (the same comparisons, each row's rate looked up only for the
    few draws between the extremes instead of a lookup per row). None when a row has no code
    (-1: never kept, whatever its draw), for the lookup of every row."""
    if codes.size and codes.min() < 0:
        return None
    below = uniform < hi
    hit = np.flatnonzero(below)
    if lo < hi:
        between = np.flatnonzero(below & (uniform >= lo))
        if between.size:
            dropped = between[uniform[between] >= np.take(keep_rate, codes[between])]
            if dropped.size:
                hit = np.delete(hit, np.searchsorted(hit, dropped))
    return hit
