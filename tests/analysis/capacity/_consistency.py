"""Whether a capacity section's counts describe one model (used by end-to-end tests)."""

from __future__ import annotations

from pdprobe.analysis.base import CapacityResult
from pdprobe.values import Missing


def set_by_policy(cap: CapacityResult, pool: str) -> bool:
    """The pool's count was set by a rule, not sized by a model: the SLO-miss guard's deployed
    count + 1, or the deployed count kept when even the recalibrated waits are too short."""
    return any((f"the {pool} stage misses the SLO at the deployed" in n
                and "are recommended" in n) or (pool == "prefill" and " are kept (" in n)
               for n in cap.notes)


def count_disagreements(cap: CapacityResult) -> list[str]:
    """Where the counts disagree: per pool, the needed count (a model's sizing of the whole
    window, or its current window's) must lie within the range of the windows' counts (the
    whole window is a mixture of its windows: a count every window meets is met overall, one
    no window meets is missed overall) and between the band's load -20 % and +20 % rows
    (more load never needs fewer instances). Empty when they agree."""
    out = []
    for pool in ("prefill", "decode"):
        need = cap.needed_prefill if pool == "prefill" else cap.needed_decode
        if isinstance(need, Missing) or set_by_policy(cap, pool):
            continue
        sized = [int(c) for w in cap.windows
                 if not isinstance(c := getattr(w, f"recommended_{pool}"), Missing)]
        if len(sized) >= 2 and not min(sized) <= need <= max(sized):
            out.append(f"needed {pool} {need} outside the windows' {min(sized)}..{max(sized)}")
        low = [getattr(b, pool) for b in cap.band if b.label.startswith("load -")]
        high = [getattr(b, pool) for b in cap.band if b.label.startswith("load +")]
        if low and high and not low[0] <= need <= high[0]:
            out.append(f"needed {pool} {need} outside the band's load rows {low[0]}..{high[0]}")
    return out
