"""How rules quote the capacity model's counts for one pool: the shortage and the step.

A finding says "short by N" (what meets the objective minus what is deployed) and "scale to
R" (the recommended count). With ``--headroom`` or ``--min-instances`` the two differ by more
than the deployed count, so the step says where the difference comes from; otherwise a reader
adding N to the deployed count finds a number the report never shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pdprobe.analysis.base import CapacityResult

Pool = Literal["prefill", "decode"]


def _counts(cap: CapacityResult | None, pool: Pool) -> tuple[int, int, int] | None:
    """(needed, recommended, deployed) of ``pool``, None unless the model gives the
    recommended and deployed counts; needed is the recommended one where the service did
    not set it (no --headroom / --min-instances applied)."""
    if cap is None:
        return None
    rec = getattr(cap, f"recommended_{pool}")
    dep = getattr(cap, f"deployed_{pool}")
    if not (isinstance(rec, int) and isinstance(dep, int)):
        return None
    need = getattr(cap, f"needed_{pool}")
    return (need if isinstance(need, int) else rec), rec, dep


def pool_short_by(cap: CapacityResult | None, pool: Pool) -> int | None:
    """Instances of ``pool`` the capacity model adds to meet the objective (None when it adds
    none): from the needed count, since the recommended one adds --headroom /
    --min-instances, which is no shortage."""
    counts = _counts(cap, pool)
    if counts is None:
        return None
    need, _, dep = counts
    return need - dep if need > dep else None


def beyond_needed(cap: CapacityResult | None, pool: Pool) -> str:
    """Why the recommended count of ``pool`` exceeds what meets the objective, as a clause
    to follow the recommendation ("" when it does not): "4 meet the objective, plus 1 of
    --headroom" or "3 meet the objective, raised to --min-instances 4"."""
    counts = _counts(cap, pool)
    if cap is None or counts is None:
        return ""
    need, rec, _ = counts
    if rec <= need:
        return ""
    headroom = cap.headroom_instances
    if headroom and need + headroom == rec:
        return f"{need} meet the objective, plus {headroom} of --headroom"
    if headroom:
        return (f"{need} meet the objective, plus {headroom} of --headroom, raised to "
                f"--min-instances {rec}")
    return f"{need} meet the objective, raised to --min-instances {rec}"
