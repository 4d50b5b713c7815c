"""Plan the PromQL queries of a live collection: window and steps, families, batches, roles.

Pure functions (no I/O), so the plan can be tested and shown (``pdprobe check``) on its own.

Query design (docs/live.md has the full table):

- one range query per *batch* of metric families of the same engine, kind and aggregation,
  aggregated on the server to one series per instance (``sum by (__name__, instance, ...)``;
  ``avg``/``max`` for gauges whose spec says so), so the number of queries grows with the
  number of metric families found, never with the number of instances; a spec's label filter
  (``finished_reason=~"abort|error"``) is a matcher of its own batch, so no series is split by
  a label nobody reads;
- counters and histograms are fetched as their *raw cumulative* per-instance sums, not as
  ``increase()``: differences of raw values telescope to the exact increase, whereas
  ``increase(c[step])`` extrapolates each step and drops what happens between steps (a single
  failed transfer between two windows would vanish). A restart shows as a drop of the summed
  series; the few instances with a drop are re-read sample by sample, per sub-series, so what
  they counted before the restart (between two grid points) is not lost and a reset of one
  sub-series (one DP engine restarting) is corrected like the offline reader does;
- engine counters and histograms are read at a coarser step than gauges and node series
  (``COARSE_TARGET_POINTS`` per window): their increase between two points is exact whatever
  the step, and a bucket row per ``le`` per instance is what makes answers large;
- one ``count by (instance, <role labels>)`` query per engine family gives the role labels and
  how many series of one family each instance has: where every instance has one, the engine
  batches are asked without ``sum by`` (the same answer, cheaper for the server).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors.metric_catalog import DEPLOYMENT_LABELS
from pdprobe.collectors.metric_spec import HIST_SUFFIXES as HIST_SUFFIXES
from pdprobe.collectors.metrics_map import MetricsMap

# The families found on the server live in promql_families; their public names are re-exported
# here, the module callers plan queries with.
from pdprobe.collectors.promql_families import ENGINE_NAME_RE as ENGINE_NAME_RE
from pdprobe.collectors.promql_families import NETWORK_NAME_RE as NETWORK_NAME_RE
from pdprobe.collectors.promql_families import RENAMES as RENAMES
from pdprobe.collectors.promql_families import Family as Family
from pdprobe.collectors.promql_families import SpecIndex as SpecIndex
from pdprobe.collectors.promql_families import families_from_names as families_from_names

# Matchers/escaping and the time grid live in promql_text and promql_window; their public names
# are re-exported here, the module callers plan queries with.
from pdprobe.collectors.promql_text import Matcher as Matcher
from pdprobe.collectors.promql_text import combine_selectors as combine_selectors
from pdprobe.collectors.promql_text import parse_matchers as parse_matchers
from pdprobe.collectors.promql_text import promql_string, re2_escape, selector_text
from pdprobe.collectors.promql_window import MAX_POINTS_PER_SERIES as MAX_POINTS_PER_SERIES
from pdprobe.collectors.promql_window import TARGET_POINTS as TARGET_POINTS
from pdprobe.collectors.promql_window import Window
from pdprobe.collectors.promql_window import choose_window as choose_window
from pdprobe.collectors.promql_window import chunk_ranges as chunk_ranges
from pdprobe.signals import Role

# --- steps and sizes -------------------------------------------------------------------------
# Families per gauge/counter query: few enough that one slow or refused query loses little,
# many enough that a cluster's ~40 families take a handful of round trips.
BATCH_FAMILIES: Final = 8
# Instances whose counters dropped in the window (restarts) are re-read sample by sample; beyond
# this many the raw reads would cost more than the aggregated queries saved.
MAX_RAW_INSTANCES: Final = 32

# The backend labels of the routers whose /metrics re-export engine metric names per backend
# (production-stack `server`, SGLang's gateway `worker_addr`, SGLang's router `worker`; see
# metric_catalog.BACKEND_LABELS): kept in every engine query so that those series are named by
# their backend (metric_names.name_instances), not summed into the router's own instance. The
# generic proxy labels of BACKEND_LABELS are left out: `endpoint` is on every series that
# prometheus-operator scrapes, and grouping by a label that splits an engine's own series would
# average a mean gauge per part.
ROUTER_BACKEND_LABELS: Final = ("server", "worker_addr", "worker")
# Labels read for roles and names (besides the instance label and ROLE_LABELS).
NAME_LABELS: Final = ("job", "pod", "pod_name")
NODE_LABELS: Final = ("node", "kubernetes_node", "nodename")
# Virtual and container interfaces carry no inter-node KV traffic; leaving them out keeps the
# netdev query to the physical NICs (a Kubernetes node has one veth per pod).
VIRTUAL_NETDEVS: Final = "lo|veth.*|cali.*|flannel.*|cni.*|docker.*|br-.*|virbr.*|tun.*|tap.*|vxlan.*|kube-.*|cilium.*|lxc.*"


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------

_PROMQL_OP: Final = {"sum": "sum", "mean": "avg", "max": "max"}


@dataclass(frozen=True)
class Batch:
    """One server-side aggregated range query over a few families."""

    id: str
    kind: str  # gauge | counter | histogram
    scope: str  # instance | network | deployment
    engine: str
    aggregate: str  # sum | mean | max (gauges); sum for cumulative kinds
    instance_label: str
    by_labels: tuple[str, ...]  # kept besides __name__ and the instance label
    families: tuple[Family, ...]
    step_s: float
    extra_matchers: str = ""  # e.g. SGLang tp_rank="0"
    label_filter: tuple[tuple[str, str], ...] = ()  # the specs this batch serves (server-side)

    @property
    def cumulative(self) -> bool:
        return self.kind in ("counter", "histogram")

    def _matchers(self, selector: str, *more: str) -> str:
        filters = ", ".join(
            f"{label}=~{promql_string('|'.join(re2_escape(v) for v in allowed.split('|')))}"
            for label, allowed in self.label_filter)
        return selector_text(f"__name__=~{promql_string(self.name_regex())}", selector,
                         self.extra_matchers, filters, *more)

    def series_names(self) -> tuple[str, ...]:
        return tuple(n for f in self.families for n in f.series_names())

    def name_regex(self) -> str:
        return "|".join(re2_escape(n) for n in self.series_names())

    def promql(self, selector: str, *, aggregate: bool = True) -> str:
        """The aggregated query: one series per instance (and label kept) per name.

        Node counters are asked for as they are: a host's series are already one per device
        and port, so ``sum by`` would return as many series while costing the server six times
        the evaluation, and summing before the wrap correction of 32-bit hardware counters
        would hide wraps. ``batch_groups`` adds up any duplicates (a host scraped twice).

        ``aggregate=False`` asks an engine batch for its series as they are too: when every
        instance has one series per name (``prometheus_roles.InstanceFacts.multi_series``
        says), ``sum by`` returns the same series and values, and Prometheus 2.x spends ~1.5x
        the CPU building each step's groups; ``batch_groups`` then combines any sub-series the
        way the server would have.
        """
        if self.scope == "network" or (not aggregate and self.scope == "instance"):
            return self._matchers(selector)
        op = _PROMQL_OP[self.aggregate]
        labels = ", ".join(("__name__", self.instance_label, *self.by_labels))
        return f"{op} by ({labels}) ({self._matchers(selector)})"

    @property
    def kept_labels(self) -> tuple[str, ...]:
        """The labels the aggregated query keeps (``__name__``, the instance label, ``by``)."""
        return ("__name__", self.instance_label, *self.by_labels)

    def raw_promql(self, selector: str, instances: Sequence[str]) -> str:
        """The un-aggregated series of a few instances (their raw samples are re-read)."""
        regex = "|".join(re2_escape(i) for i in instances)
        return self._matchers(selector, f"{self.instance_label}=~{promql_string(regex)}")


def _engine_matchers(engine: str) -> str:
    if engine == "sglang":
        # SGLang writes scheduler metrics from every TP rank with
        # --enable-metrics-for-all-schedulers (the same numbers); priority="" is the total.
        return 'tp_rank=~"0|", priority=""'
    return ""


def analysed(families: Sequence[Family]) -> list[Family]:
    """The families worth querying: without the specs of ``signals.UNANALYSED_SIGNALS``."""
    out = []
    for fam in families:
        specs = tuple(s for s in fam.specs if s.signal not in S.UNANALYSED_SIGNALS)
        if specs:
            out.append(fam if len(specs) == len(fam.specs) else replace(fam, specs=specs))
    return out


def plan_batches(families: Sequence[Family], window: Window,
                 instance_label: str | None = None) -> list[Batch]:
    """Group families into aggregated range queries (see the module docstring).

    Batches share scope, engine, kind, aggregation, instance label and label filter; gauges and
    counters go up to ``BATCH_FAMILIES`` families per query, histograms one family per query.
    """
    groups: dict[tuple[str, str, str, str, str, tuple[tuple[str, str], ...]], list[Family]] = {}
    for fam in families:
        inst = fam.spec.instance_label or instance_label or "instance"
        if fam.scope == "network":
            inst = "instance"
        elif fam.scope == "deployment":
            inst = DEPLOYMENT_LABELS[0]  # the rest go in `by`; batch_groups picks the first
        for flt in dict.fromkeys(s.label_filter for s in fam.specs):
            specs = [s for s in fam.specs if s.label_filter == flt]
            aggregate: str = specs[0].aggregate if fam.kind == S.GAUGE else "sum"
            groups.setdefault((fam.scope, fam.engine, fam.kind, aggregate, inst, flt),
                              []).append(fam)
    out: list[Batch] = []
    for (scope, engine, kind, aggregate, inst, flt), fams in sorted(groups.items()):
        if kind == "histogram":
            chunks = [[f] for f in fams]
        elif scope == "network":
            netdev = [f for f in fams if f.exposed.startswith("node_network_")]
            other = [f for f in fams if not f.exposed.startswith("node_network_")]
            chunks = [other[i:i + BATCH_FAMILIES] for i in range(0, len(other), BATCH_FAMILIES)]
            if netdev:
                chunks.append(netdev)
        else:
            chunks = [fams[i:i + BATCH_FAMILIES] for i in range(0, len(fams), BATCH_FAMILIES)]
        for i, chunk in enumerate(chunks):
            by: tuple[str, ...] = ()
            if scope == "instance" and not chunk[0].spec.instance_label:
                # A router's per-backend series carry the router's `instance`: keeping the
                # backend label lets them be named by their backend, as the file reader does.
                by = ROUTER_BACKEND_LABELS
            if kind == "histogram":
                by = (*by, "le")
            if scope == "network":
                by = ("device", "port", *by)
            elif scope == "deployment":
                by = (*DEPLOYMENT_LABELS[1:], *by)
            extra = _engine_matchers(engine)
            if scope == "network" and chunk[0].exposed.startswith("node_network_"):
                extra = f"device!~{promql_string(VIRTUAL_NETDEVS)}"
            # Node counters stay on the fine grid: link-rate peaks (KV-transfer bandwidth) are
            # judged from short bins, and a host has only a handful of them.
            coarse = kind in ("counter", "histogram") and scope == "instance"
            suffix = "".join(f".{k}" for k, _ in flt)
            out.append(Batch(
                id=f"{scope}.{engine}.{kind}.{aggregate}.{inst}{suffix}.{i}", kind=kind,
                scope=scope, engine=engine, aggregate=aggregate, instance_label=inst,
                by_labels=by, families=tuple(chunk),
                step_s=window.coarse_step_s if coarse else window.step_s,
                extra_matchers=extra, label_filter=flt))
    return out


# Rough series per family and scrape target, for ordering queries by cost: a histogram has a
# series per bucket (vLLM's have 10-40), a host a few InfiniBand devices and ports.
SERIES_PER_HISTOGRAM: Final = 14.0
SERIES_PER_HOST: Final = 4.0


def batch_cost(batch: Batch, window: Window) -> float:
    """A relative guess of a batch's query cost (series x points returned), used to start the
    costliest queries first so that no large one is left running alone at the end."""
    per_family = SERIES_PER_HISTOGRAM if batch.kind == "histogram" else 1.0
    if batch.scope == "network":
        per_family *= SERIES_PER_HOST
    return len(batch.families) * per_family * (window.span_s / batch.step_s + 1.0)


# --------------------------------------------------------------------------------------------
# Roles and resets
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoleQuery:
    """Label sets of one engine's instances: their role labels, names and nodes."""

    engine: str
    instance_label: str
    family: str  # the representative series name queried
    labels: tuple[str, ...]  # grouped by (the instance label first)
    promql: str
    role: Role | None = None  # set for a metrics-map role selector: every match has this role
    how: str = ""


def _representative(fams: Sequence[Family]) -> str:
    """A cheap series name every instance of the engine exposes: the running-requests gauge
    (registered unconditionally by every engine), else a gauge, a counter, a histogram count."""
    ordered = sorted(fams, key=lambda f: (f.spec.signal != S.REQUESTS_RUNNING, f.rank, f.exposed))
    for kind in (S.GAUGE, S.COUNTER, "histogram"):
        for fam in ordered:
            if fam.kind == kind:
                return fam.exposed + ("_count" if kind == "histogram" else "")
    raise ValueError("no family")


def plan_role_queries(families: Sequence[Family], window: Window, selector: str,
                      metrics_map: MetricsMap | None = None) -> list[RoleQuery]:
    """One ``count by`` instant query per (engine, instance label), plus map role selectors."""
    groups: dict[tuple[str, str], list[Family]] = {}
    default_inst = (metrics_map.instance_label if metrics_map else None) or "instance"
    for fam in families:
        if fam.scope != "instance":
            continue
        inst = fam.spec.instance_label or default_inst
        groups.setdefault((fam.engine, inst), []).append(fam)
    extra_roles = metrics_map.role_labels if metrics_map else ()
    node_labels = ((metrics_map.node_label,) if metrics_map and metrics_map.node_label
                   else ()) + NODE_LABELS
    out: list[RoleQuery] = []
    span = f"{max(1, round(window.span_s))}s"
    for (engine, inst), fams in sorted(groups.items()):
        rep = _representative(fams)
        backends = ROUTER_BACKEND_LABELS if inst == default_inst else ()
        labels = tuple(dict.fromkeys((inst, *extra_roles, *mc.ROLE_LABELS, *NAME_LABELS,
                                      "instance", *node_labels, *backends)))
        sel = selector_text(f"__name__={promql_string(rep)}", selector)
        # count, not group: the value is the instance's number of series of the family in
        # the window, which tells whether its engine queries need the server's `sum by`.
        promql = f"count by ({', '.join(labels)}) (last_over_time({sel}[{span}]))"
        out.append(RoleQuery(engine, inst, rep, labels, promql))
        for rs in (metrics_map.role_selectors if metrics_map else ()):
            sel = selector_text(f"__name__={promql_string(rep)}", selector, rs.matchers)
            out.append(RoleQuery(engine, inst, rep, (inst,),
                                 f"group by ({inst}) (last_over_time({sel}[{span}]))",
                                 role=rs.role, how=f"metrics map selector {{{rs.matchers}}}"))
    return out


def network_host_matcher(hosts: Iterable[str]) -> str:
    """``instance=~"(h1|h2)(:[0-9]+)?"``: node_exporter series of the engines' hosts."""
    alts = "|".join(re2_escape(h) for h in sorted(set(hosts)))
    return f"instance=~{promql_string(f'({alts})(:[0-9]+)?')}"


def discovery_matchers(selector: str, network_selector: str | None,
                       index: SpecIndex) -> tuple[str, str]:
    """``match[]`` selectors for the engine and network families (label-values discovery)."""
    custom = index.custom_names()
    engine_re = ENGINE_NAME_RE + "".join("|" + re2_escape(n) for n in custom)
    engine = selector_text(f"__name__=~{promql_string(engine_re)}", selector)
    network = selector_text(f"__name__=~{promql_string(NETWORK_NAME_RE)}", network_selector or "")
    return engine, network
