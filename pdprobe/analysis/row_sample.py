"""Fixed-seed Bernoulli samples of a table's rows, drawn slice by slice.

Above ``grouped.QUANTILE_EXACT_ROWS`` rows the quantiles of each group (and of a whole
column) are read from a sample: each row kept with its group's rate, by one draw of a fixed
seed per row, so the same capture always gives the same sample. The draws are taken
``row_slices.CHUNK_ROWS`` at a time (the same stream as one draw of every row), and several
samples of one table share them (``sample_rows_each``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
    for part in chunks(n):
        uniform = rng.random(part.stop - part.start, dtype=np.float32)
        for k, ((codes, _rate), keep_rate) in enumerate(zip(samples, keep_rates, strict=True)):
            # np.take: the same rates (code -1 reads the last slot) at half the cost of indexing
            threshold = keep_rate[0] if isinstance(codes, int) else \
                np.take(keep_rate, codes(part) if callable(codes) else codes[part])
            hit = np.flatnonzero(uniform < threshold)
            into = picked[k][kept[k]:kept[k] + hit.size]
            np.add(hit, part.start, out=into, casting="unsafe")  # positions below n fit
            kept[k] += hit.size
    return [rows[:m] for rows, m in zip(picked, kept, strict=True)]
