"""The types of the evidence registry: a declared column (``Spec``) and a precedence (``Choice``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Table = Literal["instances", "bins", "cluster", "nodes"]
TABLES: Final[tuple[Table, ...]] = ("instances", "bins", "cluster", "nodes")


class UnknownEvidence(KeyError):
    """An evidence name that the registry does not declare (a typo, or a missing declaration)."""


@dataclass(frozen=True)
class Spec:
    """One evidence column: where it lives, its unit, what it means and what produces it."""

    name: str
    table: Table
    unit: str
    meaning: str
    produced_by: str  # requests | gauges | counters | histograms | precedence | derived | ...
    source: str = ""  # the signal, request column or evidence it is computed from
    stat: str = ""  # mean | p50 | p90 | sum | count | increase | bins (for the producers)


@dataclass(frozen=True)
class Choice:
    """A quantity several inputs carry: options (evidence name, source label), best first."""

    name: str
    source: str  # the column that records which option was taken, per instance
    options: tuple[tuple[str, str], ...]


def inst(name: str, unit: str, meaning: str, produced_by: str, source: str = "",
         stat: str = "") -> Spec:
    """A per-instance column."""
    return Spec(name, "instances", unit, meaning, produced_by, source, stat)


def binned(name: str, unit: str, meaning: str, produced_by: str, source: str = "") -> Spec:
    """A per-bin frame (bins x instances)."""
    return Spec(name, "bins", unit, meaning, produced_by, source, "bins")


def clus(name: str, unit: str, meaning: str, source: str = "") -> Spec:
    """A cluster series (one value per bin)."""
    return Spec(name, "cluster", unit, meaning, "cluster", source)


def node(name: str, unit: str, meaning: str, source: str = "") -> Spec:
    """A per-node column."""
    return Spec(name, "nodes", unit, meaning, "network", source)
