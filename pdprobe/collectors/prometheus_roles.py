"""Role facts of a live collection: roles, engines, nodes and hosts of the instances.

The ``count by`` role queries of ``promql_plan.plan_role_queries`` give each instance's role labels,
names and node (and whether its engine's series are one per instance); a router's series about a backend name the backend (as the file reader does).
What a label value or a behaviour says is decided by the shared stage ``metric_roles``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.metric_names import backend_address
from pdprobe.collectors.metric_roles import (
    ROLE_FROM_MAP,
    LabelRoles,
    engine_rank,
    evidence_hints,
)
from pdprobe.collectors.metrics_map import MetricsMap
from pdprobe.collectors.roles import node_of, role_from_name
from pdprobe.dataset import (
    ROLE_FROM_EVIDENCE,
    ROLE_FROM_NAME,
    RoleHint,
)
from pdprobe.redact import redact as redact  # re-exported for callers of this module

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class InstanceFacts:
    hints: list[RoleHint] = field(default_factory=list)
    engines: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)  # hosts of `instance` labels (network join)
    notes: list[str] = field(default_factory=list)
    # (engine, instance label) of the role queries where some instance has more than one series
    # of the queried family in the window (DP ranks, a router's backends, relabelled restarts)
    # or an unreadable count: those engine batches keep the server's `sum by`.
    multi_series: set[tuple[str, str]] = field(default_factory=set)


def role_facts(results: Sequence[tuple[pp.RoleQuery, list[dict[str, Any]]]],
               metrics_map: MetricsMap | None, source: str) -> InstanceFacts:
    """Role hints, engines and nodes from the ``count by`` answers (same rules as offline)."""
    facts = InstanceFacts()
    seen: set[tuple[str, str, str]] = set()
    reader = LabelRoles(source, metrics_map.role_of_value if metrics_map else None)
    role_labels = (*(metrics_map.role_labels if metrics_map else ()), *mc.ROLE_LABELS)
    default_inst = (metrics_map.instance_label if metrics_map else None) or "instance"
    node_label = metrics_map.node_label if metrics_map else None
    for rq, vector in results:
        if rq.role is None and _several_series(rq, vector):
            facts.multi_series.add((rq.engine, rq.instance_label))
        for item in vector:
            lab = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            inst = lab.get(rq.instance_label, "")
            backend = _backend_of(lab) if rq.instance_label == default_inst else None
            if backend is not None:
                # A router's series about one backend: the backend is the instance (as
                # offline); the router's own pod/job/instance/node labels are not its facts.
                _backend_facts(facts, backend, rq, lab, role_labels, reader, seen, source)
                continue
            if not inst:
                continue
            if rq.role is not None:
                facts.hints.append(RoleHint(inst, rq.role, rq.how, ROLE_FROM_MAP, source))
                continue
            _engine_and_role_labels(facts, inst, rq, lab, role_labels, reader)
            if rq.instance_label == default_inst:
                for label in ("pod", "instance", "job"):
                    value = lab.get(label)
                    role = role_from_name(value) if value else None
                    if role and (inst, "name", label) not in seen:
                        seen.add((inst, "name", label))
                        facts.hints.append(RoleHint(inst, role, f"name pattern in {label} "
                                                    f"{value!r}", ROLE_FROM_NAME, source))
                        break
            node = ""
            for label in (*((node_label,) if node_label else ()), *pp.NODE_LABELS):
                if lab.get(label):
                    node = lab[label]
                    break
            host = node_of(lab.get("instance", "")) if lab.get("instance") else None
            if host:
                facts.hosts.add(host)
            if node:
                facts.nodes.setdefault(inst, node)
                facts.hosts.add(node)
            elif host and rq.instance_label == "instance":
                facts.nodes.setdefault(inst, host)
    # A `backend`/`worker` Dynamo component is decode only beside a prefill one (as offline).
    facts.hints.extend(reader.generic_hints())
    facts.notes.extend(reader.notes())
    # One hint per (instance, how): several engines may repeat a label.
    facts.hints = list(dict.fromkeys(facts.hints))
    return facts


def _several_series(rq: pp.RoleQuery, vector: Sequence[dict[str, Any]]) -> bool:
    """Whether some instance of a ``count by`` role answer has more than one series (its rows'
    counts added up), or a count is not a number."""
    per_instance: dict[str, float] = {}
    for item in vector:
        inst = str((item.get("metric") or {}).get(rq.instance_label, ""))
        try:
            count = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            return True
        per_instance[inst] = per_instance.get(inst, 0.0) + count
    return any(not n <= 1.0 for n in per_instance.values())


def _engine_and_role_labels(facts: InstanceFacts, inst: str, rq: pp.RoleQuery,
                            lab: dict[str, str], role_labels: Sequence[str],
                            reader: LabelRoles) -> None:
    """The instance's engine (the highest-precedence one seen) and its role-label hints: the
    same for an engine's own series and a router's series about one backend."""
    cur = facts.engines.get(inst)
    if cur is None or engine_rank(rq.engine) < engine_rank(cur):
        facts.engines[inst] = rq.engine
    for label in role_labels:
        value = lab.get(label)
        hint = reader.add(inst, label, value) if value else None
        if hint is not None:
            facts.hints.append(hint)


def _backend_of(lab: dict[str, str]) -> tuple[str, str, str] | None:
    """(label, value, host:port) of the first router backend label naming an address."""
    for label in pp.ROUTER_BACKEND_LABELS:
        value = lab.get(label)
        addr = backend_address(value) if value else None
        if addr:
            return label, str(value), addr
    return None


def _backend_facts(facts: InstanceFacts, backend: tuple[str, str, str], rq: pp.RoleQuery,
                   lab: dict[str, str], role_labels: Sequence[str], reader: LabelRoles,
                   seen: set[tuple[str, str, str]], source: str) -> None:
    """Engine, role labels, name pattern in the backend URL and node of a router's backend."""
    label, value, inst = backend
    _engine_and_role_labels(facts, inst, rq, lab, role_labels, reader)
    role = role_from_name(value)
    if role and (inst, "name", label) not in seen:
        seen.add((inst, "name", label))
        facts.hints.append(RoleHint(inst, role, f"name pattern in {label} {value!r}",
                                    ROLE_FROM_NAME, source))
    host = node_of(inst)
    if host:
        facts.nodes.setdefault(inst, host)
        facts.hosts.add(host)


def frontend_hints(kept: pd.DataFrame, source: str) -> list[RoleHint]:
    if kept.empty:
        return []
    fronts = kept.loc[kept["frontend"].astype(bool) & (kept["scope"] == "instance"), "ident"]
    return [RoleHint(str(i), "frontend", "Dynamo frontend metrics (dynamo_frontend_*)",
                     ROLE_FROM_EVIDENCE, source) for i in sorted(set(fronts))]


def behaviour_hints(metrics: pd.DataFrame, source: str, warnings: list[str]) -> list[RoleHint]:
    """Behavioural role evidence, with the offline reader's rules."""
    return evidence_hints(metrics, source, warnings)
