"""One exposed metric -> one signal: the ``MetricSpec`` record and its units.

Split out of ``metric_catalog`` so that the catalog's family modules (``metric_families``) can
build specs without importing the catalog; ``metric_catalog`` re-exports everything here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from pdprobe import signals as S

Engine = Literal["vllm", "sglang", "dynamo", "trtllm", "node", "mooncake", "rdma-exporter",
                 "nixl", "lmcache", "llm-d", "custom"]  # custom: names from a --metrics-map file
Aggregation = Literal["sum", "max", "mean"]
# instance: one engine instance's number; network: a node's port; deployment: a number about the
# whole deployment (a planner's replica counts, a scheduler's decisions), the `deployment` table.
Scope = Literal["instance", "network", "deployment"]


@dataclass(frozen=True)
class MetricSpec:
    """How one exposed metric becomes one signal."""

    name: str  # exposed name as the reference spells it (with ':')
    signal: str
    kind: str  # signals.GAUGE | COUNTER | "histogram"
    engine: Engine
    scale: float = 1.0  # multiply values (and `le` bounds) by this to reach base units
    label_filter: tuple[tuple[str, str], ...] = ()  # only series whose labels match
    aggregate: Aggregation = "sum"  # combining sub-series (engine=, dp_rank=, ...) of an instance
    scope: Scope = "instance"
    instance_label: str | None = None  # label naming the instance when not `instance`
    counter_bits: int | None = None  # 32 for mlx5 Q-counters that wrap at 2**32
    note: str = ""
    aliases: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        return normalise_name(self.name)


def normalise_name(name: str) -> str:
    """``vllm:num_requests_running`` and ``vllm_num_requests_running`` give the same key."""
    return name.replace(":", "_")


H = "histogram"
G = S.GAUGE
C = S.COUNTER
MS_TO_S = 1e-3
US_TO_S = 1e-6
MIB = float(2**20)
GIB = float(2**30)
# The series of a classic histogram family and the row kind each becomes (files and live alike).
HIST_SUFFIXES: Final = (("_bucket", S.BUCKET), ("_sum", S.HSUM), ("_count", S.HCOUNT))
