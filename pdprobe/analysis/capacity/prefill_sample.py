"""A bounded, stratified sample of the prefill fit's observations (``sample_prefill_rows``).

When most requests run alone on their prefill instance (a cluster that is not saturated),
the prefill fit would observe millions of them: at 10 million requests about 5.5 million,
whose gathered columns, design matrix and solver copies held ~630 MB and cost ~1.4 CPU-s,
for three coefficients that a few hundred thousand observations pin far below any capture's
noise. Above ``PREFILL_FIT_MAX_POINTS`` usable observations the fit therefore observes a
proportional stratified sample of that many, chosen before any of them is gathered: one
chunked pass over the candidates reads their validity and stratum (prefill instance ×
octave of uncached tokens), ``strata.stratified_sample`` picks the rows, and only those
rows' columns are read. Within each stratum the candidates are taken in record order (arrival
order), so every time window is represented in proportion too. Below the bound nothing is
sampled and nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.capacity.perf_columns import (
    FloatColumns,
    instance_code_view,
    status_ok,
)
from pdprobe.analysis.sampling import PASS_CHUNK, SAMPLED_MARK
from pdprobe.analysis.strata import LENGTH_OCTAVES, stratified_sample

if TYPE_CHECKING:
    import pandas as pd

# Above this many usable observations the prefill fit observes a stratified sample of this
# many. The same number as the decode reconstruction's sampling threshold
# (``sampling.SAMPLE_MAX_REQUESTS``; its sample is ``DECODE_SAMPLE_REQUESTS``): four times
# what the solver's first reweighting passes already use (``perf_solver``'s
# ``NNLS_MAX_POINTS``), so a three-coefficient fit's sampling error (a fraction of a percent
# on the quadratic term, measured in docs/model.md, "Bounded prefill fit") stays well below
# the difference between two captures, while the fit's transient memory is ~45 MB instead of
# ~630 MB at 5.5 million. Every bundled input, simulated scenario and public trace is far
# below it, so their fits are exact.
PREFILL_FIT_MAX_POINTS: Final = 400_000


@dataclass(frozen=True)
class PrefillSample:
    """The requests the prefill fit observes, and what they were drawn from."""

    rows: np.ndarray  # ascending positions of the sampled requests (all usable)
    total: int  # usable candidates they were drawn from

    def describe(self) -> str:
        """The sample's size and how it was drawn, for the fit's notes."""
        return (f"{SAMPLED_MARK} {len(self.rows):,} of {self.total:,} requests, stratified by "
                "prefill instance and uncached-length octave, in arrival order within each; "
                "every one equally likely to be in it")


def sample_prefill_rows(requests: pd.DataFrame, rows: np.ndarray | None,
                        max_points: int | None = None) -> PrefillSample | None:
    """A proportional stratified sample of at most ``max_points`` (default
    ``PREFILL_FIT_MAX_POINTS``) of the candidates ``rows`` (ascending positions; None: every
    request) that the prefill fit can use (prefill time finite and positive, prompt length
    known, status ok), or None when there are at most that many candidates or usable ones
    (then every one is observed, as before).

    Memory: two chunked passes over the candidates (their columns read a chunk at a time), a
    boolean per candidate and a small integer (stratum) per usable one; no gathered column or
    position array of every candidate.
    """
    max_points = PREFILL_FIT_MAX_POINTS if max_points is None else max_points
    n = len(requests) if rows is None else len(rows)
    if n <= max_points:
        return None
    cols = FloatColumns(requests, ("prompt_tokens", "cached_tokens", "prefill_s"))
    if "prefill_instance" in requests:
        inst, n_inst = instance_code_view(requests["prefill_instance"])
    else:
        inst, n_inst = np.zeros(len(requests), dtype=np.int8), 1
    n_strata = (n_inst + 1) * LENGTH_OCTAVES  # instance codes from -1 (missing)
    usable = np.empty(n, dtype=bool)
    strata = np.empty(n, dtype=np.int16 if n_strata < 2**15 else np.int64)  # usable ones'
    total = 0
    for lo in range(0, n, PASS_CHUNK):  # chunks: no temporaries the size of the candidates
        hi = min(lo + PASS_CHUNK, n)
        # (positions as intp: numpy gathers int32 ones at about half the speed, and each
        # chunk's are read five times)
        pos = None if rows is None else rows[lo:hi].astype(np.intp)
        at: slice | np.ndarray = slice(lo, hi) if pos is None else pos
        t = cols.read("prefill_s", at)
        prompt = cols("prompt_tokens", at)
        ok = usable[lo:hi]
        np.isfinite(t, out=ok)
        ok &= (t > 0) & np.isfinite(prompt)
        if "status" in requests:
            ok &= status_ok(requests, np.arange(lo, hi) if pos is None else pos)
        # as _observations computes it: max(prompt - cached, 1), missing cached as 0
        u = prompt[ok] - np.nan_to_num(cols("cached_tokens", at)[ok], nan=0.0)
        octave = np.frexp(np.maximum(u, 1.0))[1]  # u = m·2^e with m in [0.5, 1): e is the octave
        np.clip(octave, 0, LENGTH_OCTAVES - 1, out=octave)
        octave += (inst[at][ok].astype(np.int64) + 1) * LENGTH_OCTAVES
        strata[total:total + len(octave)] = octave
        total += len(octave)
    picked = stratified_sample(strata[:total], max_points)  # positions among the usable
    del strata
    if picked is None:
        return None
    # the picked usable candidates' places among all candidates, a chunk at a time
    chosen = np.empty(len(picked), dtype=np.int64)
    seen = done = 0
    for lo in range(0, n, PASS_CHUNK):
        ok = usable[lo:lo + PASS_CHUNK]
        count = int(np.count_nonzero(ok))
        upto = int(np.searchsorted(picked, seen + count))
        if upto > done:
            chosen[done:upto] = np.flatnonzero(ok)[picked[done:upto] - seen] + lo
        done, seen = upto, seen + count
    return PrefillSample(chosen if rows is None else rows[chosen], total)
