"""The metric families a live Prometheus has, matched to the catalog's (and a metrics map's) specs.

``families_from_names`` turns the names discovery found (either ``:``/``_`` spelling) into
``Family`` records; ``SpecIndex`` looks specs up by normalised name, the map's first; ``RENAMES``
ranks the names of one rename chain so only the newest is read. Pure functions (no I/O); the
query planner (``promql_plan``) re-exports these names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors.engines import DISCOVERY_RE
from pdprobe.collectors.metric_catalog import MetricSpec, normalise_name
from pdprobe.collectors.metric_spec import HIST_SUFFIXES
from pdprobe.collectors.metrics_map import MetricsMap

# Newer name for an older one (normalised): when both are exposed by one instance (vLLM keeps the
# deprecated names for a few releases), only the newer is read so nothing is counted twice.
# Derived from the catalog's one table of renames (metric_catalog.SUPERSEDED_BY, which the file
# reader's drop_superseded reads too), so a rename added there reaches the live path.
RENAMES: Final[dict[str, str]] = {
    **{normalise_name(old): normalise_name(new) for old, new in mc.SUPERSEDED_BY.items()},
    # Not renames but two spellings: spiderpool's suffix is unverified, so the catalog lists
    # both spellings of each counter and the `_total` one wins.
    **{normalise_name(s.name): normalise_name(s.name) + "_total"
       for s in mc.ALL_SPECS if s.engine == "rdma-exporter" and not s.name.endswith("_total")},
}
# Engine families discovery looks for (regex over __name__): one alternative per engine and
# family pattern of engines.ENGINES.
ENGINE_NAME_RE: Final = DISCOVERY_RE
NETWORK_NAME_RE: Final = r"node_infiniband_.+|node_network_(receive|transmit)_bytes_total|rdma_.+"


@dataclass(frozen=True)
class Family:
    """One metric family the server has, and the specs it feeds."""

    exposed: str  # as the server spells it; histograms: the family name without _bucket
    kind: str  # gauge | counter | histogram
    specs: tuple[MetricSpec, ...]
    chain: str  # newest name of its rename chain (normalised): alternatives share it
    rank: int  # 0 = the newest name spelled as in the catalog; higher = less preferred

    @property
    def spec(self) -> MetricSpec:
        return self.specs[0]

    @property
    def engine(self) -> str:
        return str(self.spec.engine)

    @property
    def scope(self) -> str:
        return self.spec.scope

    def series_names(self) -> tuple[str, ...]:
        if self.kind == "histogram":
            return tuple(self.exposed + suffix for suffix, _ in HIST_SUFFIXES)
        return (self.exposed,)

    def row_kind(self, series_name: str) -> str | None:
        """``bucket``/``sum``/``count`` for a histogram series name, the kind otherwise."""
        if self.kind != "histogram":
            return self.kind if series_name == self.exposed else None
        for suffix, kind in HIST_SUFFIXES:
            if series_name == self.exposed + suffix:
                return kind
        return None


def _chain_of(key: str) -> tuple[str, int]:
    depth = 0
    seen = {key}
    while key in RENAMES and RENAMES[key] not in seen:
        key = RENAMES[key]
        seen.add(key)
        depth += 1
    return key, depth


@dataclass(frozen=True)
class SpecIndex:
    """Specs by normalised name: the metrics map's first (they replace the catalog's), then the
    catalog."""

    by_key: dict[str, tuple[MetricSpec, ...]]
    gauge_variants: dict[str, MetricSpec]
    custom: tuple[MetricSpec, ...] = ()

    @classmethod
    def build(cls, metrics_map: MetricsMap | None = None) -> SpecIndex:
        by_key: dict[str, list[MetricSpec]] = {}
        custom = metrics_map.specs if metrics_map else ()
        custom_keys = {s.key for s in custom}
        for spec in custom:
            by_key.setdefault(spec.key, []).append(spec)
        for spec in mc.ALL_SPECS:
            if spec.key not in custom_keys:
                by_key.setdefault(spec.key, []).append(spec)
        return cls({k: tuple(v) for k, v in by_key.items()}, dict(mc.SGLANG_GAUGE_VARIANTS),
                   tuple(custom))

    def custom_names(self) -> list[str]:
        """Exposed names of map specs that discovery's built-in regexes would not find."""
        engine_re = re.compile(ENGINE_NAME_RE)
        net_re = re.compile(NETWORK_NAME_RE)
        out: list[str] = []
        for spec in self.custom:
            names = [spec.name]
            if spec.kind == "histogram":
                names = [spec.name + s for s, _ in HIST_SUFFIXES]
            out.extend(n for n in names if not engine_re.fullmatch(n) and not net_re.fullmatch(n))
        return sorted(set(out))


def families_from_names(names: Iterable[str], index: SpecIndex) -> list[Family]:
    """The families pdprobe reads among the exposed ``names`` (either ``:``/``_`` spelling)."""
    present = set(names)
    out: dict[str, Family] = {}
    for name in sorted(present):
        key = normalise_name(name)
        specs = tuple(s for s in index.by_key.get(key, ()) if s.kind != "histogram")
        if specs:
            _add(out, name, specs[0].kind, specs)
            continue
        if key in index.gauge_variants and index.by_key.get(key):
            # SGLang <=0.5.3 exposes kv_transfer_* as gauges under the later histogram name.
            _add(out, name, S.GAUGE, (index.gauge_variants[key],))
            continue
        counters = tuple(s for s in index.by_key.get(key + "_total", ()) if s.kind == S.COUNTER)
        if counters and not name.endswith("_total"):
            # A counter exported without `_total` (as the offline reader takes it).
            _add(out, name, S.COUNTER, counters)
            continue
        for suffix, _ in HIST_SUFFIXES:
            if name.endswith(suffix):
                family = name[: -len(suffix)]
                hspecs = tuple(s for s in index.by_key.get(normalise_name(family), ())
                               if s.kind == "histogram")
                if hspecs and family + "_bucket" in present:
                    _add(out, family, "histogram", hspecs)
                break
    return sorted(out.values(), key=lambda f: (f.engine, f.kind, f.exposed))


def _add(out: dict[str, Family], exposed: str, kind: str, specs: tuple[MetricSpec, ...]) -> None:
    if exposed in out:
        return
    key = normalise_name(exposed)
    chain, depth = _chain_of(key)
    spelled_as_catalog = exposed == specs[0].name
    out[exposed] = Family(exposed, kind, specs, chain, 2 * depth + (0 if spelled_as_catalog else 1))
