"""The requests a sampled workload mix stands for: what stays exact when the plan samples.

Above ``sampling.MIX_SAMPLE_REQUESTS`` requests ``mix.mix_from_requests`` sizes on a
proportional stratified sample (``sampling.stratified_sample``: by arrival time and by prompt
and output length). The arrival rate, the burstiness and the load windows are measured on
every arrival before sampling; a ``Population`` keeps every request's arrival time and lengths
so that what is a count or a sum stays exact where it is used later (the windows' request
counts and mean lengths, their burstiness, the prompts beyond the context limit), and knows
which of them the sample holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from pdprobe.analysis.sampling import SAMPLED_MARK

# How the sample is stratified, in the words of the notes.
STRATA: Final = "arrival time and prompt and output length (octaves)"


@dataclass(frozen=True, eq=False)
class Population:
    """Every request a sampled mix was drawn from, in arrival order, and which it holds."""

    arrival_ts: np.ndarray  # sorted, every request (rescaled with the mix's when it was)
    prompt_tokens: np.ndarray
    cached_tokens: np.ndarray
    output_tokens: np.ndarray
    rows: np.ndarray  # the sample: ascending positions in the arrays above
    source_rows: np.ndarray | None = None  # per sampled request: its row in the records

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
                          self.rows[a:b] - lo, src), a, b

    def clipped(self, max_prompt_tokens: float) -> Population:
        """Prompts capped at the context limit (as ``WorkloadMix.clipped`` caps the sample)."""
        p = np.minimum(self.prompt_tokens, max_prompt_tokens)
        return Population(self.arrival_ts, p, np.minimum(self.cached_tokens, p - 1.0),
                          self.output_tokens, self.rows, self.source_rows)
