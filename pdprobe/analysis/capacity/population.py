"""The requests a sampled workload mix stands for: what stays exact when the plan samples.

Above ``sampling.MIX_SAMPLE_REQUESTS`` requests ``mix.mix_from_requests`` sizes on a
proportional stratified sample (``strata.stratified_sample``: by arrival time and by prompt
and output length). The arrival rate, the burstiness and the load windows are measured on
every arrival before sampling; a ``Population`` keeps every request's arrival time and lengths
so that what is a count or a sum stays exact where it is used later (the windows' request
counts and mean lengths, their burstiness, the prompts beyond the context limit), and knows
which of them the sample holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.row_slices import ascending, finite_ends
from pdprobe.analysis.sampling import PASS_CHUNK, SAMPLED_MARK
from pdprobe.analysis.strata import StrataCodes
from pdprobe.analysis.table_facts import column_ascending, known_length_range

if TYPE_CHECKING:
    import pandas as pd

# How the sample is stratified, in the words of the notes.
STRATA: Final = "arrival time and prompt and output length (octaves)"


@dataclass(frozen=True, eq=False)
class Population:
    """Every request a sampled mix was drawn from, in arrival order, and which it holds."""

    arrival_ts: np.ndarray  # sorted, every request (rescaled with the mix's when it was)
    # lengths: numbers of any dtype (memory: the record columns themselves when they needed
    # no change, e.g. int64 token counts; read them as numbers, never write into them)
    prompt_tokens: np.ndarray
    cached_tokens: np.ndarray  # 0 <= cached <= prompt - 1
    output_tokens: np.ndarray  # >= 1
    rows: np.ndarray  # the sample: ascending positions in the arrays above
    source_rows: np.ndarray | None = None  # per sampled request: its row in the records
    # integer lengths' sums per run of rows (``RecordScan.sums``, of these very arrays)
    length_sums: ChunkSums | None = None
    prompt_max: int | None = None  # the largest of ``prompt_tokens``, when known (no pass)

    @property
    def size(self) -> int:
        return len(self.arrival_ts)

    @property
    def observed_rate_rps(self) -> float:
        """Arrivals per second over the span of every arrival (NaN when it has none)."""
        span = float(self.arrival_ts[-1] - self.arrival_ts[0]) if self.size else 0.0
        return (self.size - 1) / span if span > 0 else float("nan")

    def describe(self) -> str:
        """A note naming the sample: its size, what it was drawn from, how."""
        return (f"{SAMPLED_MARK} {len(self.rows):,} of {self.size:,} requests, stratified by "
                f"{STRATA}, every one equally likely to be in it")

    def between(self, lo: int, hi: int) -> tuple[Population, int, int]:
        """Requests ``lo..hi-1`` (a time window) and the range of sampled requests among
        them: ``(population, a, b)`` with the window's sample at positions ``a..b-1`` of the
        whole sample."""
        a, b = (int(i) for i in np.searchsorted(self.rows, [lo, hi], side="left"))
        src = self.source_rows[a:b] if self.source_rows is not None else None
        return Population(self.arrival_ts[lo:hi], self.prompt_tokens[lo:hi],
                          self.cached_tokens[lo:hi], self.output_tokens[lo:hi],
                          self.rows[a:b] - lo, src), a, b  # (sums are of the whole)

    def clipped(self, max_prompt_tokens: float) -> Population:
        """Prompts capped at the context limit (as ``WorkloadMix.clipped`` caps the sample)."""
        p = np.minimum(self.prompt_tokens, max_prompt_tokens)
        return Population(self.arrival_ts, p, np.minimum(self.cached_tokens, p - 1.0),
                          self.output_tokens, self.rows, self.source_rows)  # (sums changed)


def record_numbers(requests: pd.DataFrame, name: str) -> np.ndarray:
    """A request column as numbers: a plain numpy numeric column's own array (a read-only
    view: no float64 copy of an integer column), else float64 with NaN where missing."""
    column = requests[name]
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "iuf":
        return column.to_numpy()
    return column.to_numpy(dtype=np.float64, na_value=np.nan)


@dataclass(frozen=True)
class ChunkSums:
    """Sums of integer prompt and output lengths per run of ``rows`` rows (from row 0): a sum
    over any run of rows is then the runs' sums between its ends and the rows at its two
    ends, not a pass over it (``chunked.run_sums``). A ``Population`` holds them only for
    its own length arrays, every one at least 1 (every record usable, outputs positive)."""

    rows: int
    prompt: np.ndarray  # int64, one per run
    output: np.ndarray


@dataclass(frozen=True)
class RecordScan:
    """What ``usable_records`` found of every row, besides which are usable: whether every
    output length is at least 1 (``at_least_one`` keeps them), every cached count already in
    range by ``cached_in_range``'s first test (it keeps them) and the arrivals never decrease
    (``row_slices.ascending``)."""

    outputs_positive: bool
    cached_as_is: bool
    ascending: bool
    sums: ChunkSums | None = None  # integer prompt and output lengths' (None: not integers)
    prompt_max: int | None = None  # the largest prompt, when the caller knew it (KnownRows)


@dataclass(frozen=True)
class KnownRows:
    """What a caller knows of every record without testing them: each is usable (a finite
    arrival, a prompt of at least one token, finite lengths) and the arrivals never
    decrease; whether every output is at least 1 and the largest length (all >= 0)."""

    outputs_positive: bool
    peak: int
    prompt_max: int | None = None


def usable_records(ts: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                   cached: np.ndarray, codes: StrataCodes | None = None,
                   known: KnownRows | None = None) -> tuple[np.ndarray | None, RecordScan]:
    """Which requests the mix can use (a finite arrival, a prompt of at least one token,
    finite lengths) and, of every row, what ``at_least_one``, ``cached_in_range`` and
    ``ascending`` would check (``RecordScan``): one pass a chunk at a time, each chunk's
    columns read once while they are in the CPU cache, instead of a pass per check (when
    every row is usable the checks are of the very arrays the mix keeps). ``codes``: every
    row's length strata of ``prompt`` and ``output`` are added to it in the same pass (the
    mix's sample when every row is usable as it is, in order). ``known``: what the caller
    knows of every row (``KnownRows``): those tests are not made, and the usable rows are
    None (every row)."""
    n = len(ts)
    ok = np.empty(n if known is None else 0, dtype=bool)
    # integer lengths (the canonical dtype) hold no NaN: compared as they are, not as floats
    int_prompt, int_output = prompt.dtype.kind in "iu", output.dtype.kind in "iu"
    positive, as_is, rising = True, cached.dtype == np.float64, True
    if known is not None:
        positive = known.outputs_positive
    # integer lengths' sums per chunk, while the chunk is in the CPU cache (the windows' mean
    # lengths are then read from them, not from a pass of their own)
    sums: tuple[list[int], list[int]] | None = ([], []) if int_prompt and int_output else None
    # the largest length seen (the sums are kept only if no chunk's can wrap)
    peak = 0 if known is None else known.peak
    for lo in range(0, n, PASS_CHUNK):  # chunks: no whole-size temporaries
        at = slice(lo, lo + PASS_CHUNK)
        if known is None:
            part = ok[at]
            np.isfinite(ts[at], out=part)
            part &= prompt[at] >= 1  # (NaN compares False)
            if not int_prompt:
                part &= np.isfinite(prompt[at])
            if not int_output:
                part &= np.isfinite(output[at])
            positive = positive and not bool(np.any(output[at] < 1))
            # (each step to the next chunk's first included)
            rising = rising and ascending(ts[lo:min(lo + PASS_CHUNK, n - 1) + 1])
        as_is = as_is and _in_range(cached[at], prompt[at])
        if codes is not None:
            codes.add(lo, prompt[at], output[at],
                      peak=known.peak if known is not None else None)
        if sums is not None:
            sums[0].append(int(np.add.reduce(prompt[at])))
            sums[1].append(int(np.add.reduce(output[at])))
            if known is None:
                peak = max(peak, int(np.maximum.reduce(prompt[at], initial=0)),
                           int(np.maximum.reduce(output[at], initial=0)))
    # an integer sum of a chunk wraps silently (int64) once it passes 2^63: kept only when
    # no chunk's can (every chunk's at most peak * PASS_CHUNK; negative lengths make the
    # records unusable as they are, so the sums go unread)
    chunk = ChunkSums(PASS_CHUNK, np.array(sums[0], dtype=np.int64),
                      np.array(sums[1], dtype=np.int64)) \
        if sums is not None and peak * PASS_CHUNK < 2**63 else None
    return ok if known is None else None, RecordScan(
        positive, as_is, rising, chunk, known.prompt_max if known is not None else None)


def known_rows(requests: pd.DataFrame, ts: np.ndarray, prompt: np.ndarray,
                output: np.ndarray) -> KnownRows | None:
    """``KnownRows`` of the records when the workload summary found the integer lengths'
    range (``table_facts.known_length_range``: every prompt of at least one token) and the arrivals are known
    to be in time order with finite ends (so all finite): every record is usable, with no
    test of each. None otherwise (the scan tests them)."""
    p_range = known_length_range(requests, "prompt_tokens")
    o_range = known_length_range(requests, "output_tokens")
    # (no range is recorded for a column with a negative length: ``length_counts`` counts
    # none, so the smallest recorded is 0 or more and only a prompt of no token is left out)
    if (p_range is None or o_range is None or prompt.dtype.kind not in "iu"
            or output.dtype.kind not in "iu" or p_range[0] == 0):
        return None
    # defensive: the only writer of the ranges (the workload summary) records them only when
    # both hold, so this re-check is always true; kept because it is cheap (both cached per
    # table, asked of this table already: no pass)
    if not (column_ascending(requests, "arrival_ts") and finite_ends(ts)):
        return None
    return KnownRows(o_range[0] >= 1, max(p_range[1], o_range[1]), p_range[1])


def _in_range(cached: np.ndarray, prompt: np.ndarray) -> bool:
    """``cached_in_range``'s first test of a chunk of float64 cached counts: every value from
    +0.0 (sign bit clear, as an integer view shows; not NaN, which fails the second test) up
    to prompt - 1, which its clip keeps bit for bit."""
    return bool(np.all(cached.view(np.int64) >= 0)) and bool(
        np.all(cached <= np.subtract(prompt, 1.0, dtype=np.float64)))


def at_least_one(output: np.ndarray) -> np.ndarray:
    """``np.maximum(output, 1.0)`` (lengths of at least one token): ``output`` itself when no
    value is below 1 (checked a chunk at a time), so no copy is made."""
    for lo in range(0, len(output), PASS_CHUNK):
        if np.any(output[lo:lo + PASS_CHUNK] < 1):
            return np.maximum(output, 1.0)
    return output


def cached_in_range(cached: np.ndarray, prompt: np.ndarray) -> np.ndarray:
    """Cached tokens as the mix counts them: unknown ones 0, clipped to ``[0, prompt - 1]``.
    ``cached`` itself when that changes no value (compared bit for bit, a chunk at a time),
    else a float64 copy."""
    def clipped(lo: int) -> np.ndarray:
        hi = lo + PASS_CHUNK
        part = np.asarray(cached[lo:hi], dtype=np.float64)
        return np.clip(np.nan_to_num(part, nan=0.0), 0.0,
                       np.maximum(np.asarray(prompt[lo:hi], dtype=np.float64) - 1.0, 0.0))

    same = cached.dtype == np.float64
    for lo in range(0, len(cached), PASS_CHUNK) if same else ():
        part = cached[lo:lo + PASS_CHUNK]
        # the usual chunk (``_in_range``) is kept as it is; any other is compared as clipped
        if _in_range(part, prompt[lo:lo + PASS_CHUNK]):
            continue
        if not np.array_equal(clipped(lo).view(np.int64), part.view(np.int64)):
            same = False
            break
    if same:
        return cached
    known = np.empty(len(cached))
    for lo in range(0, len(cached), PASS_CHUNK):  # chunks: no whole-size temporaries
        known[lo:lo + PASS_CHUNK] = clipped(lo)
    return known
