"""The model at the deployed prefill count against the window, and the wait model it yields.

At the deployed count the model predicts TTFT attainment and p90 from its own waits
(``ModelCheck.deployed_*``: the model as built, before any checking). When the window's
measured waits (``calibrate.measured_parts``) contradict that prediction (attainment beyond
``check.MODEL_TOLERANCE``, or the p90 beyond ``check.MODEL_P90_FACTOR``) the prediction is
recalibrated (``calibrate.calibrate``: the window's wait level, its queue shape, each
request's measured rest of TTFT). Where the recalibrated waits are longer than the model's
(a scale above 1, or a queue per instance) they become a sizing input,
``calibrate.CalibratedWaits``: the overall count, each window's, the band's and the TTFT
estimates at the recommended count are then sized with it by the same functions that size
the model's own (``sizings.Sizings``, ``recommend.recommend``), so every figure of a plan
describes one model. Whether a plan with them is what the diagnosis recommends is
``check.check_against_window``'s decision (it needs the findings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pdprobe.analysis.capacity.calibrate import (
    PER_INSTANCE_SCALE_FACTOR,
    CalibratedWaits,
    Calibration,
    calibrate,
    observed_ttft_attainment,
    observed_ttft_quantile,
    routing_of,
)
from pdprobe.analysis.capacity.check import MODEL_TOLERANCE, p90_disagrees
from pdprobe.analysis.capacity.recommend import QUEUE_MISS_SHARE, prefill_pool
from pdprobe.analysis.capacity.sizings import Sizings

if TYPE_CHECKING:
    import numpy as np

    from pdprobe.analysis.capacity.mix import WorkloadMix
    from pdprobe.analysis.capacity.pool import PrefillPool
    from pdprobe.analysis.capacity.rates import ModelInputs
    from pdprobe.analysis.capacity.recommend import LengthWork, Slo


@dataclass(frozen=True)
class ModelCheck:
    """The model at the deployed prefill count, and its recalibration against the window."""

    # The model as built (its own pooled waits), at the deployed count: None when not asked
    # for or the pool is unstable there.
    deployed_ttft_attainment: float | None = None
    deployed_ttft_p90_s: float | None = None
    # The same prediction recalibrated with the window's measured waits (None without them);
    # ``recalibrated`` when the raw one was beyond the tolerances, so the calibrated stands.
    calibration: Calibration | None = None
    recalibrated: bool = False
    # The recalibrated waits as a sizing input, when they are longer than the model's (None
    # otherwise: a scale below 1 lowers no count), and the whole window's count with them.
    waits: CalibratedWaits | None = None
    calibrated_prefill: int | None = None
    notes: tuple[str, ...] = ()


def check_model(mix: WorkloadMix, model: ModelInputs, slo: Slo, work: LengthWork,
                deployed_prefill: int | None,
                measured: tuple[np.ndarray, np.ndarray] | None = None,
                failed: float = 0.0, sizings: Sizings | None = None) -> ModelCheck:
    """The prediction at ``deployed_prefill`` and, with ``measured`` (the window's wait and
    rest of TTFT per request, in the mix's order), its recalibration; ``failed`` (the
    window's share of failed requests, misses whatever their wait) comes out of the miss
    budget of counts sized with the window's waits, while it leaves ``QUEUE_MISS_SHARE`` of
    the budget for queueing (beyond that they are not the prefill pool's to fix).
    ``sizings``: the plan's (the whole mix is its ``PLAN``, with ``work``)."""
    if not deployed_prefill:
        return ModelCheck()
    pool, sample = prefill_pool(mix, work)
    raw, raw_p90 = _at(pool, sample, slo, deployed_prefill)
    out = ModelCheck(deployed_ttft_attainment=raw, deployed_ttft_p90_s=raw_p90)
    if measured is None:
        return out
    cal = calibrate(pool, deployed_prefill, measured, work.bare, slo.ttft_s, slo.attainment)
    observed = observed_ttft_attainment(measured, slo.ttft_s)
    # beyond the tolerance in attainment, or in the TTFT quantile's level (a wait tail mostly
    # inside the objective moves the quantile before the attainment)
    recalibrated = cal is not None and (
        (raw is not None and observed is not None and abs(raw - observed) > MODEL_TOLERANCE)
        or p90_disagrees(raw_p90, observed_ttft_quantile(measured, slo.attainment)))
    per_instance = False
    routing = routing_of(pool, deployed_prefill, measured[0]) if recalibrated else None
    if routing is not None and routing.per_instance:
        # requests wait while other instances idle: the waits' shape is a queue per
        # instance's, their level the window's
        per = calibrate(pool.per_instance(), deployed_prefill, measured, work.bare,
                        slo.ttft_s, slo.attainment)
        if per is not None and 1.0 / PER_INSTANCE_SCALE_FACTOR <= per.wait_scale <= \
                PER_INSTANCE_SCALE_FACTOR:
            cal, per_instance = replace(per, routing=routing), True
    out = replace(out, calibration=cal, recalibrated=recalibrated)
    budget = 1.0 - slo.attainment
    if cal is None or not recalibrated or not (cal.wait_scale > 1.0 or per_instance) \
            or budget <= 0:
        return out
    # each request's measured rest of TTFT where known, as the calibrated attainment takes
    # it (the model's bare TTFT elsewhere)
    cut = failed if failed <= QUEUE_MISS_SHARE * budget else 0.0
    waits = CalibratedWaits(wait_scale=cal.wait_scale, per_instance=per_instance,
                            rest_s=measured[1], bare_s=work.bare, failed_cut=cut)
    try:
        count = (sizings or Sizings()).whole(mix, work, model, slo, waits)[0].prefill
    except ValueError:  # no count meets the objective with these waits
        return out
    notes = (f"the count sized with the window's waits leaves the window's {cut:.1%} failed "
             f"requests (misses whatever their wait) out of the {budget:.0%} miss budget",
             ) if cut > 0 else ()
    return replace(out, waits=waits, calibrated_prefill=count, notes=notes)


def _at(pool: PrefillPool, sample: np.ndarray, slo: Slo,
        prefill: int) -> tuple[float | None, float | None]:
    """Predicted TTFT attainment and p90 at ``prefill`` instances (None: an unstable pool)."""
    try:
        att = float(1.0 - pool.miss_share(prefill, slo.ttft_s - sample))
        p90 = float(pool.ttft_quantile(prefill, sample, slo.attainment))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None, None
    return (att if math.isfinite(att) else None, p90 if math.isfinite(p90) else None)
