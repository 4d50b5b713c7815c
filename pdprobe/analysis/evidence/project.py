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
  window counted from zero (the evidence's convention for a single ``/metrics`` snapshot);
- a decode instance's TPOT where the table had none: the evidence also reads inter-token
  latency histograms, the last-ITL gauge and Little's law on logged throughput (running /
  generation tokens per second), which PD601 and PD501 quote (marked estimated).

An instance the evidence has no figure for keeps the table's own value (or its ``Missing``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.analysis.base import Quantiles
from pdprobe.analysis.evidence.model import column
from pdprobe.values import Missing

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


def decode_tpot(summary: InstanceSummary, evidence: ClusterEvidence) -> Quantiles | None:
    """The evidence's TPOT of a decode instance the table has none for (None otherwise)."""
    table = evidence.instances
    if summary.role != "decode" or not isinstance(summary.tpot_s, Missing) or \
            summary.name not in table.index:
        return None

    def figure(name: str) -> float:
        value = float(column(table, name).get(summary.name, math.nan))
        # a time is never negative: a mangled input's figure is no figure
        return value if math.isfinite(value) and value >= 0 else math.nan

    p50 = figure("tpot_p50")
    if not math.isfinite(p50):
        return None
    count = figure("samples")
    return Quantiles(count=int(count) if math.isfinite(count) else 0, mean=figure("tpot_mean"),
                     p50=p50, p90=figure("tpot_p90"), p99=math.nan, estimated=True)


def project_instances(summaries: tuple[InstanceSummary, ...],
                      evidence: ClusterEvidence) -> tuple[InstanceSummary, ...]:
    """The summaries with every projected field replaced by the evidence's figure."""
    figures = instance_figures(evidence)
    out = []
    for s in summaries:  # one per instance
        changes: dict[str, Any] = dict(figures.get(s.name, {}))
        tpot = decode_tpot(s, evidence)
        if tpot is not None:
            changes["tpot_s"] = tpot
        out.append(replace(s, **changes) if changes else s)
    return tuple(out)
