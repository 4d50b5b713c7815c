"""Sizings shared by a plan's two wait models (``estimate.capacity_plan``).

A plan sizes its whole mix, the band's cases and every window by the model's own waits, and
the plan re-sized with the window-calibrated waits sizes them all again: ``Sizings`` keeps
each mix's ``LengthWork`` and sizing by the model's own waits (``recommend.own_sizing``), and
the whole mix's sizing with the calibrated waits, so each is computed once; and it starts the
other pool searches where the whole mix's ended (``PrefillPool.smallest``'s guess).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from pdprobe.analysis.capacity.recommend import OwnSizing, own_sizing, sizing_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from pdprobe.analysis.capacity.calibrate import CalibratedWaits
    from pdprobe.analysis.capacity.mix import WorkloadMix
    from pdprobe.analysis.capacity.rates import ModelInputs
    from pdprobe.analysis.capacity.recommend import LengthWork, Sized, Sizing, Slo

# A plan's whole mix in ``Sizings`` (the band's cases and the windows have keys of their own).
PLAN: Final = "plan"


class Sizings:
    """A plan's mixes sized by the model's own waits, by key (``PLAN``, a band case, a
    window), and the whole mix's sizing with the calibrated waits: the model check sizes
    the whole mix with them, the plan by the model's own waits sizes everything again, and
    the plan re-sized with the calibrated waits (``estimate.CapacityPlan.recalibrated``)
    every mix once more. Each mix's ``LengthWork`` and pool search by the model's own waits
    is then done once, and the whole mix's calibrated search once: the same figures, as
    every sizing is a function of its mix, model, objective and waits. One thread at a time:
    the capacity thread, then the re-sized plan's band and windows (on that thread when it is
    idle, or in the judge: ``estimate.CapacityPlan.prepare_recalibrated``), then the judge."""

    def __init__(self) -> None:
        self._own: dict[object, OwnSizing] = {}
        self._calibrated: dict[object, tuple[CalibratedWaits, tuple[Sizing, Sized]]] = {}

    def own(self, key: object, make: Callable[[], tuple[WorkloadMix, LengthWork]],
            model: ModelInputs, slo: Slo, like_plan: bool = False) -> OwnSizing:
        """The mix ``make`` gives (with its ``LengthWork``) sized by the model's own waits,
        made and sized the first time ``key`` is asked for. ``like_plan``: the mix is the
        whole mix at another load or lengths (a band case), whose TTFT count is probably as
        far above the other floors as the whole mix's: its search starts there."""
        got = self._own.get(key)
        if got is None:
            mix, work = make()
            whole = self._own.get(PLAN) if like_plan else None
            got = self._own[key] = own_sizing(mix, model, slo, work,
                                              whole.headroom if whole is not None else None)
        return got

    def sized(self, key: object, make: Callable[[], tuple[WorkloadMix, LengthWork]],
              model: ModelInputs, slo: Slo, waits: CalibratedWaits | None = None,
              keep: bool = False, like_plan: bool = False) -> tuple[Sizing, Sized]:
        """``recommend.sizing_of`` the mix of ``key`` with ``waits``; ``keep``: the result with
        ``waits`` is kept for the next call with the same ``waits`` (the whole mix's);
        ``like_plan``: as ``own`` takes it."""
        own = self.own(key, make, model, slo, like_plan)
        if waits is None:
            return own.sizing, own.sized
        kept = self._calibrated.get(key)
        if kept is not None and kept[0] is waits:
            return kept[1]
        out = sizing_of(own.mix, model, slo, own.work, waits, own, self._guess(own))
        if keep:
            self._calibrated[key] = (waits, out)
        return out

    def whole(self, mix: WorkloadMix, work: LengthWork, model: ModelInputs, slo: Slo,
              waits: CalibratedWaits | None = None) -> tuple[Sizing, Sized]:
        """``sized`` of the plan's whole mix (``PLAN``, with its ``work``), its sizing with
        ``waits`` kept."""
        return self.sized(PLAN, lambda: (mix, work), model, slo, waits, keep=True)

    def _guess(self, own: OwnSizing) -> int | None:
        """Where a mix's calibrated count probably is: its own count raised as much as the
        whole mix's was (once that is kept). Only where the search starts: not its answer."""
        whole, kept = self._own.get(PLAN), self._calibrated.get(PLAN)
        if whole is None or kept is None:
            return None
        return math.ceil(own.sizing.prefill * kept[1][0].prefill / whole.sizing.prefill)
