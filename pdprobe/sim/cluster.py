"""Where instances live and what they are called: nodes, ``host:port`` names, role labels.

Prefill and decode instances sit on separate nodes, ``instances_per_node`` to a node (GPUs per
node // GPUs per instance), as disaggregated deployments place them. Every instance owns one
RDMA NIC per GPU; a node's KV-transfer link is the sum of its instances' links.

Naming styles decide how a reader can tell the roles apart:

============  ==================================================================================
role-label    ``role="prefill"`` label; neutral ``10.0.x.y:port`` instance names
name          the role only in the host name: ``prefill-0:8000``, ``decode-1:8001``
engine-type   SGLang-style ``engine_type="prefill"`` label
pod           Kubernetes pod label ``pod="llm-prefill-7d9f5c6b8-x2kq9"`` (hostNetwork: the
              instance is the node IP and port)
dynamo        Dynamo-style ``worker_type="prefill"`` label
============  ==================================================================================
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Final

import numpy as np

from pdprobe.sim.config import SimConfig

VLLM_PORT: Final = 8000
SGLANG_PORT: Final = 30000
NODE_EXPORTER_PORT: Final = 9100
LINK_EFFICIENCY: Final = 0.8  # profiles derive usable bandwidth as 0.8 x line rate (profiles.py)


@dataclass(frozen=True)
class NodeSpec:
    """One machine: its host name, role and RDMA devices."""

    index: int
    host: str
    role: str
    devices: int  # RDMA NICs (mlx5_0 ...), one per GPU in use
    line_rate_bytes_per_s: float  # per device, as node_exporter's rate_bytes_per_second

    @property
    def exporter_instance(self) -> str:
        """The node_exporter target of this node (``host:9100``), as a Prometheus ``instance``
        label."""
        return f"{self.host}:{NODE_EXPORTER_PORT}"


@dataclass(frozen=True)
class InstanceSpec:
    """One engine instance: identity, placement and lifetime."""

    index: int  # position in the run's instance list
    role: str
    role_index: int  # 0.. within its role, in order of creation
    host: str
    port: int
    node: int  # NodeSpec.index
    start_s: float  # joins at this simulated time (0 for the initial cluster)
    labels: tuple[tuple[str, str], ...]  # extra labels the naming style adds

    @property
    def name(self) -> str:
        """The Prometheus ``instance`` label: ``host:port``."""
        return f"{self.host}:{self.port}"

    @property
    def file_stem(self) -> str:
        """Log file name (no ``:``, which some file systems and wheels reject)."""
        return f"{self.host}_{self.port}"


@dataclass(frozen=True)
class Layout:
    """Where every simulated engine runs: the nodes and the instances placed on them."""
    nodes: tuple[NodeSpec, ...]
    instances: tuple[InstanceSpec, ...]

    def of_role(self, role: str) -> tuple[InstanceSpec, ...]:
        """The instances of one role (``prefill`` or ``decode``), in placement order."""
        return tuple(i for i in self.instances if i.role == role)


def plan_counts(config: SimConfig) -> dict[str, list[tuple[float, int]]]:
    """Per role, the (time, active count) steps: the initial count and every scale event."""
    steps = {"prefill": [(0.0, config.prefill)], "decode": [(0.0, config.decode)]}
    for fault in sorted(config.faults_of("scale"), key=lambda f: float(f.get("at_s"))):
        for role in ("prefill", "decode"):
            target = int(fault.get(role))
            if target >= 0:
                steps[role].append((float(fault.get("at_s")), target))
    return steps


def build_layout(config: SimConfig) -> Layout:
    """Nodes and instances, including those that join later through ``scale`` faults."""
    rng = np.random.default_rng([config.seed, 7])
    per_node = config.instances_per_node
    devices_per_instance = max(1, config.profile.gpus_per_instance)
    line_rate = config.profile.link_bytes_per_s / devices_per_instance / LINK_EFFICIENCY
    thin = config.fault("thin-link")
    if thin is not None:  # slower NICs (or a narrower path): node_exporter shows the lower rate
        line_rate *= float(thin.get("fraction"))
    port0 = SGLANG_PORT if config.engine == "sglang" else VLLM_PORT
    nodes: list[NodeSpec] = []
    instances: list[InstanceSpec] = []
    replicaset = {role: _rand(rng, string.hexdigits.lower()[:16], 9) for role in ("prefill", "decode")}
    for role_no, (role, steps) in enumerate(plan_counts(config).items()):
        # every instance ever needed; scale-downs drain the newest, later joins are new ones
        count_now = 0
        join_times: list[float] = []
        for at, count in steps:
            if count > count_now:
                join_times.extend([at] * (count - count_now))
            count_now = count
        role_nodes: list[int] = []
        for k, start in enumerate(join_times):
            if k % per_node == 0:
                node_no = len(role_nodes)
                host = (f"{role}-{node_no}" if config.naming == "name"
                        else f"10.0.{role_no + 1}.{10 + node_no}")
                nodes.append(NodeSpec(index=len(nodes), host=host, role=role,
                                      devices=min(per_node, len(join_times) - k) * devices_per_instance,
                                      line_rate_bytes_per_s=line_rate))
                role_nodes.append(nodes[-1].index)
            node = nodes[role_nodes[k // per_node]]
            labels = _style_labels(config.naming, role, replicaset[role], rng)
            instances.append(InstanceSpec(index=len(instances), role=role, role_index=k,
                                          host=node.host, port=port0 + k % per_node,
                                          node=node.index, start_s=start, labels=labels))
    return Layout(tuple(nodes), tuple(instances))


def _style_labels(style: str, role: str, replicaset: str,
                  rng: np.random.Generator) -> tuple[tuple[str, str], ...]:
    if style == "role-label":
        return (("role", role),)
    if style == "engine-type":
        return (("engine_type", role),)
    if style == "dynamo":
        return (("worker_type", role),)
    if style == "pod":
        suffix = _rand(rng, "bcdfghjklmnpqrstvwxz2456789", 5)  # k8s' safe alphabet
        return (("pod", f"llm-{role}-{replicaset}-{suffix}"), ("namespace", "llm"))
    return ()  # name: the role is in the host name only


def _rand(rng: np.random.Generator, alphabet: str, n: int) -> str:
    return "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), n))
