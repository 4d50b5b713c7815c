"""The capacity model: KV producer/consumer rates and the theoretical and recommended P/D.

``estimate_capacity`` is what ``pdprobe diagnose`` calls; ``plan_capacity`` serves
``pdprobe ratio``. See docs/model.md for the formulas and their assumptions.
"""

from pdprobe.analysis.capacity.estimate import (
    BuiltModel,
    build_model,
    choose_profile,
    estimate_capacity,
    plan_capacity,
)

__all__ = ["BuiltModel", "build_model", "choose_profile", "estimate_capacity", "plan_capacity"]
