"""PD101's measurement: the prefill backlog, the capacity model's count and decode's side.

``PrefillMeasure`` holds what ``pd101_prefill_queue_growth.PrefillQueueGrowth`` measures and
decides from (whether the backlog was observed, how the evidence channels agree); the helpers
read the capacity model and the length mix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pdprobe.rules.common import finite, median_of, slo_missed
from pdprobe.rules.thresholds import DECODE_BACKPRESSURE_QUEUE, DECODE_KV_PRESSURE

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.base import CapacityResult
    from pdprobe.analysis.evidence.model import ClusterEvidence
    from pdprobe.analysis.evidence.stats import Trend

# Queueing "dominates" TTFT when the median request spends this share of its TTFT waiting.
QUEUE_DOMINANT_SHARE: Final = 0.5
# The capacity model's prefill utilisation at the deployed count from which the pool is
# saturated: at rho = 0.85 Kingman's wait is already ~5.7x the service time x (ca2+cs2)/2.
PREFILL_SATURATED_UTIL: Final = 0.85
# Without request records, a prefill queue of this many requests per instance in the median
# time bin is sustained queueing (with a saturated pool or a missed SLO).
SUSTAINED_QUEUE_MIN: Final = 1.0
# Decode KV usage below this while prefill queues means decode is under-fed (waits on prefill).
DECODE_UNDERFED_KV: Final = 0.5
# The prompt-length mix is "stable" when its strongest shift changes the mean by under 20 %:
# a fifth more prompt work is within what a prefill pool sized with headroom absorbs.
STABLE_MIX_CHANGE: Final = 0.2


@dataclass(frozen=True)
class PrefillMeasure:
    """What PD101 measures: the prefill backlog, the capacity model and decode's side."""

    prefill: list[str]
    n_p: int  # prefill instances seen, else the model's deployed count
    queue: Trend | None  # mean prefill queue per instance
    queue_rising: bool
    rising: list[str]  # prefill instances whose own queue rises (when the mean does)
    wait: Trend | None  # median wait before prefill
    wait_rising: bool
    share: float | None  # median share of TTFT spent queueing
    typical_queue: float | None  # prefill queue per instance, median over time bins
    util: float | None  # the model's prefill utilisation at the deployed count
    att: float | None  # TTFT SLO attainment
    cap_known: bool
    cap_short_by: int | None  # recommended - deployed prefill when the model wants more
    decode: list[str]
    decode_kv: float | None  # decode KV usage p90, median over decode instances
    backpressure: float  # requests waiting for decode admission per instance
    mix_stable: bool

    @property
    def saturated(self) -> bool:
        """Whether the model's prefill utilisation at the deployed count is saturated."""
        return self.util is not None and self.util >= PREFILL_SATURATED_UTIL

    @property
    def queue_dominant(self) -> bool:
        """Queueing dominates TTFT (else a standing queue) while the SLO misses or rho is high."""
        if self.share is not None:
            queued = self.share >= QUEUE_DOMINANT_SHARE
        else:
            queued = self.typical_queue is not None and self.typical_queue >= SUSTAINED_QUEUE_MIN
        return queued and (slo_missed(self.att) or self.saturated)

    @property
    def observed(self) -> bool:
        """Whether a growing queue, a growing wait or a dominant queue was observed."""
        return self.queue_rising or self.wait_rising or self.queue_dominant

    def agreement(self) -> tuple[int, int, int]:
        """(agreeing, available, contrary) evidence channels for the confidence."""
        channels = ((self.queue is not None, self.queue_rising),
                    (self.wait is not None, self.wait_rising),
                    (self.share is not None or self.typical_queue is not None,
                     self.queue_dominant),
                    (self.cap_known, self.cap_short_by is not None))
        available = sum(int(seen) for seen, _ in channels)
        agree = sum(int(hit) for _, hit in channels)
        contrary = int(self.backpressure >= DECODE_BACKPRESSURE_QUEUE)
        if self.decode_kv is not None:
            if self.decode_kv >= DECODE_KV_PRESSURE:
                contrary += 1
            elif self.decode_kv < DECODE_UNDERFED_KV and self.observed:
                agree += 1
        return agree, available, contrary


def capacity_known(cap: CapacityResult | None) -> bool:
    """Whether the capacity model gives both a recommended and a deployed prefill count."""
    return cap is not None and isinstance(cap.recommended_prefill, int) and \
        isinstance(cap.deployed_prefill, int)


def deployed_prefill_count(cap: CapacityResult | None) -> int:
    """The model's deployed prefill count, 0 when unknown."""
    return cap.deployed_prefill if cap is not None and isinstance(cap.deployed_prefill, int) else 0


def median_or_zero(rows: pd.DataFrame, name: str) -> float:
    """The median of a per-instance column, 0 when it has no values."""
    found = median_of(rows, name)
    return 0.0 if found is None else found


def prompt_mix_stable(f: ClusterEvidence) -> bool:
    """Whether the prompt-length mix stayed within STABLE_MIX_CHANGE over the window."""
    prompt = f.mix.prompt
    return prompt is not None and finite(prompt.relative_change) and \
        abs(prompt.relative_change) < STABLE_MIX_CHANGE
