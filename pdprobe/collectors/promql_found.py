"""What live discovery found: families per engine, the version their names point to, and the
warnings and notes about what is missing (and what that costs the diagnosis).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors.engines import VERSION_HINTS
from pdprobe.collectors.metric_catalog import normalise_name
from pdprobe.collectors.promql_plan import Family


def version_hints(families: Sequence[Family]) -> dict[str, str]:
    keys = {normalise_name(f.exposed) for f in families}
    out: dict[str, str] = {}
    for engine, hint in VERSION_HINTS:  # engines.ENGINES: first match per engine wins
        if engine not in out and all(n in keys for n in hint.need) \
                and not any(a in keys for a in hint.absent):
            out[engine] = hint.text
    return out


@dataclass(frozen=True)
class Found:
    """What discovery found, per engine, for notes, warnings and ``pdprobe check``."""

    families: tuple[Family, ...]
    engines: tuple[str, ...]  # engines with at least one family (instance scope)
    signals: frozenset[str]
    versions: dict[str, str] = field(default_factory=dict)

    def has_any(self, signals: Iterable[str]) -> bool:
        return any(s in self.signals for s in signals)

    def by_engine(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for fam in self.families:
            out.setdefault(fam.engine, []).append(fam.exposed)
        return out


def summarise(families: Sequence[Family]) -> Found:
    engines = tuple(sorted({f.engine for f in families if f.scope == "instance"}))
    signals = frozenset(s.signal for f in families for s in f.specs)
    return Found(tuple(families), engines, signals, version_hints(families))


def catalog_families(engine: str) -> list[str]:
    """Catalog names of one engine (for "missing" lists)."""
    return sorted({s.name for s in mc.ALL_SPECS if s.engine == engine})


def missing_warnings(found: Found) -> tuple[list[str], list[str]]:
    """(warnings, notes) about what the cluster does not expose and what that costs."""
    warnings: list[str] = []
    notes: list[str] = []
    rdma = [*S.RETRANSMIT_SIGNALS, *S.CONGESTION_SIGNALS, S.RDMA_TX_BYTES_TOTAL,
            S.RDMA_RX_BYTES_TOTAL]
    if not found.has_any(rdma):
        warnings.append("no node_infiniband_* or RDMA-exporter series for the cluster's nodes: "
                        "rdma-retransmits and no-rdma findings will be inconclusive")
    elif not found.has_any(S.RETRANSMIT_SIGNALS):
        warnings.append("node_infiniband_* has port counters but no hw_counters (needs "
                        "node_exporter >= 1.11): RDMA retransmissions cannot be judged")
    kv = (S.KV_TRANSFER_S, S.KV_TRANSFER_BYTES, S.KV_TRANSFER_BYTES_PER_S,
          S.KV_TRANSFER_LATENCY_S_GAUGE, S.KV_RDMA_BYTES_TOTAL)
    if found.engines and not found.has_any(kv):
        notes.append("no KV-connector transfer metrics (vllm:nixl_*/vllm:mooncake_*, "
                     "sglang:kv_transfer_*, tent_*): KV-transfer time is judged from network "
                     "counters and queues only")
    if found.engines and not found.has_any((S.TTFT_S, S.ITL_S, S.TPOT_S)):
        warnings.append("no TTFT/ITL/TPOT histograms: SLO attainment and straggler findings "
                        "will be inconclusive")
    for engine, text in sorted(found.versions.items()):
        notes.append(f"{engine}: {text}")
    return warnings, notes
