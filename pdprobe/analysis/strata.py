"""The capacity mix's proportional stratified sample (``stratified_sample``) and the length
strata it is drawn over (``length_strata``: octaves of prompt and output length).

Above ``sampling.MIX_SAMPLE_REQUESTS`` requests the plan sizes on a sample of that many, taken
in arrival order within each stratum: every request is equally likely to be in it, and every
stratum and every time window holds its proportional share. Passes run a chunk of
``sampling.PASS_CHUNK`` requests at a time (read when called: tests shorten it).
"""

from __future__ import annotations

import functools
from typing import Final

import numpy as np

from pdprobe.analysis import sampling

# Length strata are octaves (powers of two) of the prompt and of the output length, capped so
# that the pair fits one small integer (a radix sort). 2^63 tokens is beyond any length.
LENGTH_OCTAVES: Final = 64


# A float64's exponent field, and what it holds for NaN and the infinities.
_EXPONENT_SHIFT: Final = 52
_EXPONENT_FIELD: Final = 0x7FF


def octaves(values: np.ndarray) -> np.ndarray:
    """Each value's octave, clipped to ``[0, LENGTH_OCTAVES - 1]`` (int64): ``e`` of
    ``v = m·2^e`` with ``|m|`` in [0.5, 1), ``np.frexp``'s exponent, read from the float64's
    exponent field instead (the biased exponent less 1022 for every normal value; zero and
    subnormals clip to 0 as theirs do; NaN and infinities, 0 as ``np.frexp`` gives them).
    Bit operations: a quarter of ``np.frexp``'s time (a call per value)."""
    bits = np.array(values, dtype=np.float64).view(np.int64)  # its own copy, written in place
    bits >>= _EXPONENT_SHIFT
    bits &= _EXPONENT_FIELD
    special = None if np.asarray(values).dtype.kind in "iub" else bits == _EXPONENT_FIELD
    bits -= 1022
    if special is not None:  # (integers are never NaN nor infinite)
        bits[special] = 0
    return np.clip(bits, 0, LENGTH_OCTAVES - 1, out=bits)


# Strata codes below this are counted in a table (``stratified_sample`` a chunk at a time).
FEW_STRATA: Final = 1 << 15
# ``stratified_sample`` keeps each chunk's counts for its second pass (instead of counting
# the chunk again) while all of them hold at most this many cells (8 MB): length strata
# (4,096 codes) at 10 million items are 625,000.
STRATA_TABLE_CELLS: Final = 1 << 20


def length_strata(*lengths: np.ndarray, counts: list[np.ndarray] | None = None
                  ) -> np.ndarray:
    """Each request's length stratum: the octave of each length array, combined into one
    integer code (two arrays give codes below 2^12, as int16: memory, a fifth of int64's).
    ``counts``: each chunk's requests per stratum are appended to it (small codes only, and
    only while all the chunks' tables hold at most ``STRATA_TABLE_CELLS`` cells: beyond that
    none is, and ``stratified_sample`` counts them itself), for ``stratified_sample``:
    counted while the chunk's codes are at hand, not in a pass of their own."""
    n = len(lengths[0])
    codes = StrataCodes(n, len(lengths), counts)
    for lo in range(0, n, sampling.PASS_CHUNK):  # chunks: no whole-size temporaries
        codes.add(lo, *(values[lo:lo + sampling.PASS_CHUNK] for values in lengths))
    return codes.code


class StrataCodes:
    """``length_strata`` built a chunk at a time by a caller's own pass over the lengths
    (``population.usable_records``: each chunk's lengths are read once while they are in the
    CPU cache, not again in a pass of their own): ``add`` each chunk of rows in turn, then
    read ``code`` (and the ``counts`` list given, as ``length_strata`` fills it)."""

    def __init__(self, n: int, arrays: int, counts: list[np.ndarray] | None = None) -> None:
        self.cells = LENGTH_OCTAVES ** arrays
        self.small = self.cells <= 2**15
        if counts is not None and -(-n // sampling.PASS_CHUNK) * self.cells > \
                STRATA_TABLE_CELLS:
            counts = None  # (memory: a table per chunk without bound)
        self.counts = counts if self.small else None
        self.code = np.zeros(n, dtype=np.int16 if self.small else np.int64)

    def add(self, lo: int, *lengths: np.ndarray, peak: int | None = None) -> None:
        """The codes of rows ``lo..lo + len - 1`` from their lengths (one array each).
        ``peak``: every length is an integer from 0 up to it, as the caller knows (none is
        then looked at to find out)."""
        hi = lo + len(lengths[0])
        part: np.ndarray = self.code[lo:hi]
        if not (self.small and _table_lookup(part, lengths, peak)):
            part = octaves(lengths[0])  # (its own array: the first octave is the code so far)
            for values in lengths[1:]:
                part *= LENGTH_OCTAVES
                part += octaves(values)
            self.code[lo:hi] = part
        if self.counts is None:
            return
        if lo % sampling.PASS_CHUNK or not (hi - lo == sampling.PASS_CHUNK or hi == len(self.code)):
            # counts are per chunk of ``sampling.PASS_CHUNK`` rows (``stratified_sample``
            # reads them so): chunks of another size leave it to count them itself
            self.counts.clear()
            self.counts = None
            return
        self.counts.append(np.bincount(part, minlength=self.cells))


# Integer lengths below this are coded through a table of their octaves (``_table_lookup``):
# 128 KB of int16, which stays in the CPU cache.
OCTAVE_TABLE_SIZE: Final = 1 << 16


@functools.cache
def _octave_table(scale: int) -> np.ndarray:
    """``octaves(v) * scale`` of every integer ``v`` below ``OCTAVE_TABLE_SIZE`` (int16: the
    small codes'). Read-only: shared by every caller."""
    table = (octaves(np.arange(OCTAVE_TABLE_SIZE)) * scale).astype(np.int16)
    table.flags.writeable = False
    return table


def _table_lookup(out: np.ndarray, lengths: tuple[np.ndarray, ...],
                  peak: int | None = None) -> bool:
    """The small (int16) codes of integer ``lengths`` written into ``out`` by looking their
    octaves up in a table, when every length is in ``[0, OCTAVE_TABLE_SIZE)`` (a negative
    one, seen unsigned, is beyond it; ``peak``: every one is in ``[0, peak]``, known); else
    False, ``out`` untouched. The same codes as
    ``octaves``' bit operations, at a quarter of their cost (two gathers from a table in
    the CPU cache instead of a float conversion and four passes per array)."""
    if not all(v.dtype.kind in "iu" for v in lengths):
        return False
    if peak is not None:  # (known: no reduction of each array)
        if peak >= OCTAVE_TABLE_SIZE:
            return False
    elif any(len(v) and int(np.maximum.reduce(v.view(f"u{v.dtype.itemsize}"))) >=
             OCTAVE_TABLE_SIZE for v in lengths):
        return False
    scale = LENGTH_OCTAVES ** (len(lengths) - 1)
    np.take(_octave_table(scale), lengths[0], out=out, mode="clip")  # (all in range)
    for values in lengths[1:]:
        scale //= LENGTH_OCTAVES
        out += np.take(_octave_table(scale), values, mode="clip")
    return True


def stratified_sample(strata: np.ndarray, size: int,
                      chunk_counts: list[np.ndarray] | None = None) -> np.ndarray | None:
    """Positions (ascending) of a proportional stratified sample of ``size``, or None when
    there are at most ``size`` items (then everything is used).

    Items are taken in their given order (for requests: arrival order) within each stratum
    (integer codes, e.g. ``length_strata``), strata one after another, and every
    ``n / size``-th is kept (systematic selection from the middle of each step, so the same
    input always gives the same sample). Every item has the same inclusion probability
    ``size / n``, so unweighted means over the sample are unbiased; every stratum, and every
    run of consecutive items within a stratum (a time window, when the order is arrival
    order), holds its proportional share to within one item.

    Memory: for small codes (``length_strata``'s) the items are ranked within their stratum a
    chunk at a time from per-stratum counts, without the stable sort's int64 order of every
    item (80 MB at 10 million). ``chunk_counts``: ``length_strata``'s per-chunk counts of
    these codes, when it made them (then there is no counting pass).
    """
    codes = np.asarray(strata)
    n = len(codes)
    if n <= size:
        return None
    # the k-th kept position j (in stratum order) is the first where floor((j + 1)·f + 1/2)
    # reaches k + 1, f = size / n: in integers, j = ceil((2k + 1)·n / (2·size)) - 1
    k = np.arange(size, dtype=np.int64)
    pos = ((2 * k + 1) * n + 2 * size - 1) // (2 * size) - 1
    del k
    starts = range(0, n, sampling.PASS_CHUNK)
    if chunk_counts is not None and len(chunk_counts) == len(starts):  # (codes >= 0)
        counts = chunk_counts[0].copy()
        for here in chunk_counts[1:]:  # (a running sum: no stack of every table)
            counts += here
        width = int(np.flatnonzero(counts)[-1]) + 1  # the largest code's, as below
        return _systematic(codes, pos, counts[:width], [c[:width] for c in chunk_counts],
                           size)
    width = int(codes.max()) + 1  # per-stratum tables: the codes present, not FEW_STRATA
    if not (codes.min() >= 0 and width <= FEW_STRATA):
        order = np.argsort(codes, kind="stable")
        return np.sort(order[pos])
    counts = np.zeros(width, dtype=np.int64)
    # per-stratum counts, a chunk at a time; each chunk's are kept for the second pass when
    # their tables are small (``STRATA_TABLE_CELLS``), else counted again there
    keep = width * len(starts) <= STRATA_TABLE_CELLS
    per_chunk: list[np.ndarray] = []
    for lo in starts:
        here = np.bincount(codes[lo:lo + sampling.PASS_CHUNK], minlength=width)
        counts += here
        if keep:
            per_chunk.append(here)
    return _systematic(codes, pos, counts, per_chunk if keep else None, size)


def _systematic(codes: np.ndarray, pos: np.ndarray, counts: np.ndarray,
                per_chunk: list[np.ndarray] | None, size: int) -> np.ndarray:
    """``stratified_sample``'s second pass: the items at the kept positions ``pos`` of
    stratum order, from the strata's ``counts`` and each chunk's (None: counted again)."""
    n, width = len(codes), len(counts)
    taken = counts.cumsum() - counts  # items of earlier strata (in stratum order), then seen
    kept = []
    for i, lo in enumerate(range(0, n, sampling.PASS_CHUNK)):
        part = codes[lo:lo + sampling.PASS_CHUNK].astype(np.int16, copy=False)
        order = np.argsort(part, kind="stable")  # a radix sort of small integers
        here = per_chunk[i] if per_chunk is not None else np.bincount(part, minlength=width)
        if 4 * size <= n:  # a sparse sample (the mix's): found per stratum
            kept.append(_kept_of_runs(pos, order, here, taken) + lo)
        else:  # a dense one (the prefill fit's, often): each item ranked and tested
            rank = np.empty(len(part), dtype=np.int64)
            # each item's place in stratum order: its stratum's items before this chunk,
            # then its rank among the chunk's items of the stratum (its place in the sorted
            # chunk less the chunk's items of smaller strata: a table lookup, not a search)
            rank[order] = np.arange(len(part)) - (here.cumsum() - here)[part[order]]
            rank += taken[part]
            kept.append(np.flatnonzero(_is_kept(rank, n, size)) + lo)
        taken += here
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)


def _kept_of_runs(pos: np.ndarray, order: np.ndarray, here: np.ndarray,
                  taken: np.ndarray) -> np.ndarray:
    """Of one chunk (``order`` its stable sort by stratum, ``here`` its items per stratum,
    ``taken`` each stratum's earlier items in stratum order): the positions (ascending, in
    the chunk) of the items at the kept positions ``pos``. A stratum's items in the chunk are
    a run of the sorted chunk and a run of stratum order: the kept positions falling in that
    run (a search per stratum present, not a test per item) name their places."""
    present = np.flatnonzero(here)
    first = (here.cumsum() - here)[present]
    from_k = np.searchsorted(pos, taken[present])
    many = np.searchsorted(pos, taken[present] + here[present]) - from_k
    at = np.arange(int(many.sum())) + np.repeat(from_k - (many.cumsum() - many), many)
    at = pos[at] - np.repeat(taken[present] - first, many)
    return np.sort(order[at])


def _is_kept(j: np.ndarray, n: int, size: int) -> np.ndarray:
    """Whether position ``j`` (in stratum order) is one of ``stratified_sample``'s
    ``ceil((2k + 1)·n / (2·size)) - 1``: whether ``(2·size·j, 2·size·(j + 1)]`` holds an odd
    multiple ``(2k + 1)·n`` with ``k < size`` (integers: no search in the kept positions)."""
    two_s = 2 * size
    m = (two_s * (j + 1)) // n  # the largest multiple of n in the interval is m·n
    q = m - 1 + (m & 1)  # the largest odd number <= m (m >= 0: its last bit is m % 2)
    return (q >= 1) & (q * n > two_s * j) & (q < two_s)
