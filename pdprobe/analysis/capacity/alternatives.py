"""Other answers beside the recommendation: a mean-based planner's, and the what-if band.

``mean_based`` is what a planner sizing from mean lengths computes (the Jensen gap says how
far that under-sizes); ``band`` re-sizes the recommendation (``sizings.Sizings``) under
planning errors: load ±20 %, p90 lengths, prefix-cache hit rate ±10 points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.base import RatioBandEntry
from pdprobe.analysis.capacity.rates import ModelInputs, StageRates, stage_rates
from pdprobe.analysis.capacity.recommend import LengthWork, Slo, ceil_count
from pdprobe.analysis.capacity.sizings import Sizings

if TYPE_CHECKING:
    from collections.abc import Callable

    from pdprobe.analysis.capacity.calibrate import CalibratedWaits
    from pdprobe.analysis.capacity.mix import WorkloadMix

# What-if shifts for the band: planning error on load, and a prefix-cache hit-rate change.
BAND_LOAD_FACTORS: Final = (0.8, 1.2)
BAND_HIT_RATE_SHIFT: Final = 0.1


@dataclass(frozen=True)
class MeanBased:
    """The Dynamo-planner answer from mean lengths: ``f(mean ISL)``, ``ctx = ISL + OSL/2``."""

    rates: StageRates
    prefill: int
    decode: int
    ratio: float
    jensen_gap_prefill: float  # E[f(u)] / f(E[u]) - 1
    jensen_gap_decode: float  # kappa / (mean ISL + mean OSL / 2) - 1


def mean_based(mix: WorkloadMix, model: ModelInputs, slo: Slo,
               full: StageRates | None = None) -> MeanBased:
    """Counts as a mean-based planner computes them: ``ceil(λ / engine rate at the means)``."""
    full = full or stage_rates(mix, model, slo.tpot_s)
    rates = stage_rates(mix.collapsed(), model, slo.tpot_s)
    lam = mix.rate_rps
    return MeanBased(
        rates=rates,
        prefill=ceil_count(lam / rates.prefill_capacity_rps) if lam > 0 else 1,
        decode=ceil_count(lam / rates.decode_capacity_rps) if lam > 0 else 1,
        ratio=rates.decode_capacity_rps / rates.prefill_capacity_rps,
        jensen_gap_prefill=full.prefill_service_s / rates.prefill_service_s - 1.0,
        jensen_gap_decode=full.decode_context_tokens / rates.decode_context_tokens - 1.0,
    )


def band(mix: WorkloadMix, model: ModelInputs, slo: Slo,
         hit_rate_known: bool = True, work: LengthWork | None = None,
         waits: CalibratedWaits | None = None,
         sizings: Sizings | None = None) -> tuple[RatioBandEntry, ...]:
    """The recommendation under what-ifs: load ±20 %, p90 lengths, hit rate ±10 points.

    ``work`` is ``LengthWork.of(mix, model, slo)`` when the caller has it (the load cases
    share it). Every case is sized by the wait model the recommendation uses: ``waits``
    (the window-calibrated one, aligned with ``mix``; each case keeps the measured rest of
    TTFT of the same requests, moved by what the case changes in the model's bare TTFT), or
    the model's own. A load factor of 1 is the recommendation's own sizing. ``sizings``:
    the plan's, where each case's mix and its sizing by the model's own waits are kept for
    the band with other waits (the cases' keys are their labels).
    """
    same_lengths = work or LengthWork.of(mix, model, slo)
    sizings = sizings if sizings is not None else Sizings()

    def case(m: WorkloadMix, w: LengthWork | None = None) -> tuple[WorkloadMix, LengthWork]:
        if w is None:
            # a hit-rate case has the same lengths: their occupancy is the mix's
            w = LengthWork.of(m, model, slo, occupancy=same_lengths.occupancy) \
                if m.prompt_tokens is mix.prompt_tokens \
                and m.output_tokens is mix.output_tokens else LengthWork.of(m, model, slo)
        return m, w

    def at_load(f: float) -> Callable[[], tuple[WorkloadMix, LengthWork]]:
        return lambda: case(mix.with_rate(mix.rate_rps * f), same_lengths)

    cases: list[tuple[str, Callable[[], tuple[WorkloadMix, LengthWork]]]] = []
    for f in BAND_LOAD_FACTORS:
        cases.append((f"load {f - 1:+.0%} ({mix.rate_rps * f:.3g} req/s)", at_load(f)))
    p90_prompt = float(np.quantile(mix.prompt_tokens, 0.9))
    p90_output = float(np.quantile(mix.output_tokens, 0.9))
    cases.append((f"p90 lengths (prompt {p90_prompt:,.0f}, output {p90_output:,.0f})",
                   lambda: case(mix.at_lengths(p90_prompt, p90_output, "p90 lengths"))))
    h = mix.hit_rate
    if h + BAND_HIT_RATE_SHIFT < 1.0:
        cases.append((f"hit rate {h + BAND_HIT_RATE_SHIFT:.0%} (+{BAND_HIT_RATE_SHIFT * 100:.0f} "
                      f"pts{'' if hit_rate_known else ' from an unknown, assumed 0'})",
                      lambda: case(mix.with_hit_rate_shift(BAND_HIT_RATE_SHIFT))))
    if h > 0:
        cases.append((f"hit rate {max(h - BAND_HIT_RATE_SHIFT, 0):.0%} "
                      f"(-{min(BAND_HIT_RATE_SHIFT, h) * 100:.0f} pts)",
                      lambda: case(mix.with_hit_rate_shift(-BAND_HIT_RATE_SHIFT))))
    out = []
    for label, make in cases:
        try:  # counts only: the band shows no TTFT estimates
            r = sizings.sized(("band", label), make, model, slo, waits, like_plan=True)[0]
        except ValueError:
            if waits is None:
                raise
            # no count meets the objective with the calibrated waits in this what-if: the
            # row is left out (as a window that cannot be sized is), not the whole re-plan
            continue
        out.append(RatioBandEntry(label=label, prefill=r.prefill, decode=r.decode,
                                  theoretical_ratio=r.theoretical_ratio, binding=r.binding))
    return tuple(out)
