"""Full-length passes over request columns in blocks: no temporary as long as the column.

At 10M rows a float64 temporary is 80 MB and a mask 10 MB; reading holds the canonical
columns (~950 MB) already, so every full-length temporary raises the peak, and on a virtual
machine the first touch of new memory costs ~2-3 CPU-s of system time per GB. These helpers
answer the same questions as the one-line numpy expressions they replace, one block of
``BLOCK_ROWS`` rows at a time (the temporaries stay in cache), with identical results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# Rows per block: 1 MB of float64, small enough to stay in cache, large enough that the
# Python loop costs nothing next to the numpy work (10 iterations per million rows).
BLOCK_ROWS: Final = 1 << 17


def any_finite(values: np.ndarray) -> bool:
    """``np.isfinite(values).any()``, stopping at the first block that has a finite value."""
    return any(bool(np.isfinite(values[s:s + BLOCK_ROWS]).any())
               for s in range(0, values.size, BLOCK_ROWS))


def any_at_least(values: np.ndarray, low: float) -> bool:
    """``(values >= low).any()`` (NaN is not), stopping at the first block that has one."""
    return any(bool((values[s:s + BLOCK_ROWS] >= low).any())
               for s in range(0, values.size, BLOCK_ROWS))


def count_backwards(values: np.ndarray) -> int:
    """How many ``i`` have ``values[i + 1] < values[i]`` (``np.count_nonzero(np.diff(values)
    < 0)`` for finite values), without a mask as long as ``values``."""
    total = 0
    for s in range(0, max(values.size - 1, 0), BLOCK_ROWS):
        e = min(s + BLOCK_ROWS, values.size - 1)
        total += int(np.count_nonzero(values[s + 1:e + 1] < values[s:e]))
    return total


def above_per_row(values: np.ndarray, per: np.ndarray, ratio: float) -> np.ndarray:
    """Mask of ``values > ratio * np.maximum(per, 1.0)`` (NaN compares false), computed a block
    at a time: the only full-length array is the mask itself."""
    out = np.empty(values.size, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        for s in range(0, values.size, BLOCK_ROWS):
            e = s + BLOCK_ROWS
            np.greater(values[s:e], ratio * np.maximum(per[s:e], 1.0), out=out[s:e])
    return out


def remap_codes(codes: np.ndarray, remap: np.ndarray) -> np.ndarray:
    """``remap[codes]`` written over ``codes`` (writable, contiguous) a block at a time; a code
    of -1 takes ``remap[-1]``, as the gather does."""
    if not codes.flags.writeable or not codes.flags.c_contiguous:
        return remap[codes]
    for s in range(0, codes.size, BLOCK_ROWS):
        e = s + BLOCK_ROWS
        codes[s:e] = remap[codes[s:e]]
    return codes


def null_strings(n: int) -> pa.Array:
    """``n`` nulls as a ``large_string`` array whose buffers are zero pages never written: an
    absent text column costs no memory (``pa.nulls`` writes 8 bytes of offsets per row, 80 MB
    at 10M rows, and pandas' string arrays hold ``large_string``)."""
    import pyarrow as pa

    offsets = np.zeros(n + 1, dtype=np.int64)  # calloc: pages are committed when written
    validity = np.zeros((n + 7) // 8, dtype=np.uint8)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(b""),
                                            pa.py_buffer(validity), null_count=n)


def count_backwards_kept(values: np.ndarray, kept: np.ndarray) -> int:
    """``count_backwards(values[kept])`` without copying the kept values out."""
    total = 0
    last = None
    for s in range(0, values.size, BLOCK_ROWS):
        block = values[s:s + BLOCK_ROWS][kept[s:s + BLOCK_ROWS]]
        if not block.size:
            continue
        if last is not None and block[0] < last:
            total += 1
        total += int(np.count_nonzero(block[1:] < block[:-1]))
        last = block[-1]
    return total


def compact(values: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """``values[kept]`` written over the front of ``values`` (writable, contiguous) a block at
    a time and returned as a view of it: the kept rows in their order without a second
    column (the rows after them stay allocated, unused)."""
    pos = 0
    for s in range(0, values.size, BLOCK_ROWS):
        block = values[s:s + BLOCK_ROWS][kept[s:s + BLOCK_ROWS]]  # a copy: safe to write over
        values[pos:pos + block.size] = block
        pos += block.size
    return values[:pos]


def distinct_in_order(column: pd.Series) -> list[Any]:
    """``column.dropna().unique()`` as a list (each value once, in the order of its first row)
    without the copy and the full-length hash: for a categorical column, its codes are read a
    block at a time and the scan stops once every category has been seen (instance names:
    usually in the first block). Any other column takes the pandas way."""
    import pandas as pd

    if not isinstance(column.dtype, pd.CategoricalDtype):
        return list(column.dropna().unique())
    codes = column.array.codes
    categories = column.cat.categories
    seen: dict[int, None] = {}
    for s in range(0, codes.size, BLOCK_ROWS):
        for code in pd.unique(codes[s:s + BLOCK_ROWS]).tolist():  # first-seen order
            if code >= 0:  # -1: missing
                seen.setdefault(code, None)
        if len(seen) == len(categories):
            break
    return [categories[code] for code in seen]
