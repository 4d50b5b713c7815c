"""The report's per-instance figures as projections of the evidence.

A finding quotes the evidence (``traffic_share``, ``hit_ratio``, ``c_preemptions`` ...); the
instance table beside it shows ``InstanceSummary`` fields. Where both show the same quantity,
the table takes the evidence's figure, chosen with the evidence's one precedence
(``registry.CHOICES``), so a finding and its table never disagree:

- traffic share: request records, then finished-request counters, then token counters, then
  engine-log throughput (the table alone knew request records only);
- prefix-hit rate: prefix-cache counters, then the engine's hit-rate gauge, then cached_tokens
  in request records (the table alone preferred the records);
- preemptions in the window: the counter's increase with a series that starts inside the
  window counted from zero (the evidence's convention for a single ``/metrics`` snapshot).

An instance the evidence has no figure for keeps the table's own value (or its ``Missing``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.evidence.model import column

if TYPE_CHECKING:
    from pdprobe.analysis.base import InstanceSummary
    from pdprobe.analysis.evidence.model import ClusterEvidence

# InstanceSummary field -> the evidence column it shows (``instances`` table).
PROJECTED: Final = {
    "traffic_share": "traffic_share",
    "prefix_hit_ratio": "hit_ratio",
    "preemptions": "c_preemptions",
}


def instance_figures(evidence: ClusterEvidence) -> dict[str, dict[str, float]]:
    """Per instance, the projected fields the evidence has a finite figure for."""
    table = evidence.instances
    out: dict[str, dict[str, float]] = {str(name): {} for name in table.index}
    for field, name in PROJECTED.items():
        values = column(table, name)
        keep = np.isfinite(values.to_numpy(dtype=np.float64))
        for inst, value in zip(values.index[keep], values.to_numpy(dtype=np.float64)[keep],
                               strict=True):
            out[str(inst)][field] = float(value)
    return out


def project_instances(summaries: tuple[InstanceSummary, ...],
                      evidence: ClusterEvidence) -> tuple[InstanceSummary, ...]:
    """The summaries with every projected field replaced by the evidence's figure."""
    figures = instance_figures(evidence)
    return tuple(replace(s, **figures[s.name]) if figures.get(s.name) else s  # type: ignore[arg-type]
                 for s in summaries)
