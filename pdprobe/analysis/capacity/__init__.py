"""The capacity model: KV producer/consumer rates and the theoretical and recommended P/D.

``estimate_plan`` is what ``pdprobe diagnose`` calls (``estimate_capacity``: its plan by the
model as built); ``plan_capacity`` serves ``pdprobe ratio``. See docs/model.md for the
formulas and their assumptions.
"""

from pdprobe.analysis.capacity.estimate import (
    BuiltModel,
    build_model,
    choose_profile,
    estimate_capacity,
    estimate_plan,
    plan_capacity,
)

__all__ = ["BuiltModel", "build_model", "choose_profile", "estimate_capacity", "estimate_plan",
           "plan_capacity"]
