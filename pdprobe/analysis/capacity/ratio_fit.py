"""Why a window's recommended counts can differ from its theoretical P/D ratio.

The theoretical ratio is the ratio of the two pools' loads in instances at full use
(``load_prefill / load_decode``, from the per-instance capacities). Recommended counts are
integers of at least one per pool, sized against the latency objectives, so they can differ
from the ratio for two stated reasons only:

- **floor**: a pool whose load is under one instance still gets one, so a window needing 2.6
  prefill per decode at 0.3 decode instance of load is 1P:1D or 3P:1D, never 2.6P:1D;
- **objective**: a pool sized above its load's ceiling because queueing against the latency
  objective needs spare capacity (its utilisation at the recommended count is said).

Anything else (counts further than one instance from the ratio with neither reason) is
``unexplained``: a bug in the sizing, which the tests look for on every scenario and trace.
"""

from __future__ import annotations

import math
from typing import Final

# Counts within one instance of the ratio on either pool agree with it: integers cannot do better.
ONE_INSTANCE: Final = 1


def counts_agree(theoretical: float, prefill: int, decode: int) -> bool:
    """True when ``prefill:decode`` is within one instance (either pool) of ``theoretical``."""
    lo = max(prefill - ONE_INSTANCE, 0) / (decode + ONE_INSTANCE)
    hi = (prefill + ONE_INSTANCE) / max(decode - ONE_INSTANCE, 1)
    return lo <= theoretical <= hi


def ratio_fit(theoretical: float, prefill: int, decode: int, load_prefill: float,
              load_decode: float) -> str:
    """``consistent``, ``decode at its floor …``, ``prefill sized by the objective …`` etc."""
    if counts_agree(theoretical, prefill, decode):
        return "consistent"
    reasons = []
    for pool, count, load in (("decode", decode, load_decode), ("prefill", prefill, load_prefill)):
        if count == 1 and load < 1:
            reasons.append(f"{pool} at its floor of one instance for {load:.2f} instance of load")
        elif count > math.ceil(load):
            reasons.append(f"{pool} sized by the objective: {count} for {load:.2f} instances of "
                           f"load ({load / count:.0%} busy)")
    return "; ".join(reasons) if reasons else "unexplained"
