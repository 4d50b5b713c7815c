"""How a capture reaches pdprobe: which names each source gives an instance, and file layouts.

The simulator's default capture agrees with itself: every source names an instance
``host:port``. Real captures do not, so ``SimConfig.delivery`` (``[delivery]`` in
``scenario.toml``, ``pdprobe simulate --delivery``) chooses how each source is delivered:

================  ================================================================================
key               values
================  ================================================================================
platform          ``plain`` (default: no orchestration), ``k8s`` (Deployment pods, hostNetwork:
                  the scrape target is node IP and port), ``compose`` (one compose service per
                  instance, ``decode-1``; the scrape target is ``decode-1:8000``), ``bare-metal``
                  (systemd units ``vllm-decode-<k>.service`` on the node)
requests          what the gateway's request records name an instance: ``address``
                  (``host:port``, default), ``host`` (host or IP only; with ``host_aliases`` the
                  node's DNS name ``h100-node-3``), ``pod`` (pod or compose service name)
metrics           ``dump`` (one promtool-style ``metrics.om``; on ``k8s`` series also carry the
                  ``pod``/``namespace``/``node``/``container`` labels Kubernetes service discovery
                  relabelling gives them, on ``bare-metal`` with aliases a ``hostname`` target
                  label), ``per-target`` (``metrics/<host>_<port>.prom``, ``<pod>.prom`` on k8s
                  as a ``kubectl exec`` loop saves them; one per engine target:
                  concatenated scrapes with timestamps, no ``instance``/``job`` labels, which
                  Prometheus adds only at scrape time)
logs              ``per-instance`` (``logs/<host>_<port>.log``, default), ``per-pod``
                  (``logs/<pod>.log``) or one merged ``logs/cluster.log``: ``kubectl-prefix``,
                  ``kubectl-prefix-timestamps``, ``stern``, ``loki-jsonl``, ``fluent-bit-jsonl``,
                  ``vector-jsonl`` (``k8s``), ``compose``, ``journald`` (``bare-metal``); the
                  formats are in ``pdprobe/sim/writers/merged_log.py``
host_aliases      ``true``: the node's DNS name (``h100-node-3``) stands for its IP in the
                  request records (``requests=host``) and journald; allowed only where a metrics
                  label links the two (``k8s``: ``node``; ``bare-metal``: ``hostname``)
================  ================================================================================

Which names a resolver can match (the benchmark ``bench/identity_matrix.py`` relies on this):

- ``requests=host`` names a host, not an instance; when a node runs several instances
  (``gpus_per_node`` / GPUs per instance > 1) the request records alone cannot tell them apart,
  and the exact instance count needs metrics or logs.
- ``host_aliases`` without a linking label would be unmatchable, so it is refused.
- On ``compose`` the engine's scrape target is the service, while node_exporter is scraped by
  node IP: engine instances and network series share no name.
- journald units (``vllm-decode-0``) name no port: on a node with several instances they match
  a metrics instance only through behaviour, not by name.

Every non-default delivery also writes ``truth.toml``: the true instance count per role and each
instance's name in each source.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.errors import UsageError

if TYPE_CHECKING:
    from pdprobe.sim.cluster import Layout
    from pdprobe.sim.config import SimConfig

PLATFORMS: Final = ("plain", "k8s", "compose", "bare-metal")
REQUESTS_NAMINGS: Final = ("address", "host", "pod")
METRICS_DELIVERIES: Final = ("dump", "per-target")
MERGED_LOGS: Final = ("kubectl-prefix", "kubectl-prefix-timestamps", "stern", "loki-jsonl",
                      "fluent-bit-jsonl", "vector-jsonl", "compose", "journald")
LOG_DELIVERIES: Final = ("per-instance", "per-pod", *MERGED_LOGS)
MERGED_LOG_NAME: Final = "cluster.log"
TRUTH_FILE: Final = "truth.toml"
# Which platform each log tool belongs to (per-instance files fit every platform).
LOG_PLATFORMS: Final = {
    "per-pod": ("k8s", "compose"),
    "kubectl-prefix": ("k8s",), "kubectl-prefix-timestamps": ("k8s",), "stern": ("k8s",),
    "loki-jsonl": ("k8s",), "fluent-bit-jsonl": ("k8s",), "vector-jsonl": ("k8s",),
    "compose": ("compose",), "journald": ("bare-metal",),
}
K8S_NAMESPACE: Final = "llm"  # the namespace of the simulated Deployments
# Kubernetes' SafeEncodeString alphabet (no vowels, no 0/1/3): pod-template hashes and pod suffixes.
K8S_SAFE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
POD_HASH_CHARS: Final = 9  # pod-template-hash length in current Kubernetes releases (9-10)
POD_SUFFIX_CHARS: Final = 5
NAME_SEED: Final = 53  # RNG stream of the delivery names (independent of the simulation's)


@dataclass(frozen=True)
class Delivery:
    """How each source of the capture names instances and lays out its files (module table)."""

    platform: str = "plain"
    requests: str = "address"
    metrics: str = "dump"
    logs: str = "per-instance"
    host_aliases: bool = False

    @property
    def is_default(self) -> bool:
        """True for the default delivery (every file written in the engines' own layout)."""
        return self == Delivery()

    def describe(self) -> str:
        """The delivery in the ``--delivery`` syntax (``key=value,...``), for scenario files."""
        return ",".join(f"{f.name}={str(getattr(self, f.name)).lower()}" for f in fields(self))


# The benchmark's delivery mixes (bench/identity_matrix.py); also accepted as --delivery NAME.
PRESETS: Final = {
    "default": Delivery(),
    "k8s": Delivery("k8s", "pod", "dump", "kubectl-prefix"),
    "compose": Delivery("compose", "host", "per-target", "compose"),
    "bare-metal": Delivery("bare-metal", "host", "dump", "journald", host_aliases=True),
    "files-per-pod": Delivery("k8s", "pod", "per-target", "per-pod"),
    "loki": Delivery("k8s", "address", "dump", "loki-jsonl"),
    "stern": Delivery("k8s", "host", "dump", "stern", host_aliases=True),
    "kubectl-timestamps": Delivery("k8s", "pod", "per-target", "kubectl-prefix-timestamps"),
    "fluent-bit": Delivery("k8s", "pod", "dump", "fluent-bit-jsonl"),
    "vector": Delivery("k8s", "address", "dump", "vector-jsonl"),
}
_CHOICES: Final = {"platform": PLATFORMS, "requests": REQUESTS_NAMINGS,
                   "metrics": METRICS_DELIVERIES, "logs": LOG_DELIVERIES}


def parse_delivery(text: str, base: Delivery | None = None) -> Delivery:
    """``k8s`` (a preset), ``logs=stern,requests=host`` or ``preset=k8s,logs=stern``."""
    values: dict[str, Any] = {}
    current = base or Delivery()
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        key, raw = key.strip().replace("-", "_").lower(), raw.strip().lower()
        if not sep:
            key, raw = "preset", key.replace("_", "-")
        if key == "preset":
            if raw not in PRESETS:
                raise UsageError(f"--delivery {text!r}: unknown preset {raw!r}",
                                 hint=f"use one of {', '.join(PRESETS)}")
            current = PRESETS[raw]
        elif key == "host_aliases":
            if raw not in ("true", "false", "yes", "no", "1", "0"):
                raise UsageError(f"--delivery {text!r}: host_aliases must be true or false",
                                 hint="e.g. host_aliases=true")
            values[key] = raw in ("true", "yes", "1")
        elif key in _CHOICES:
            values[key] = raw
        else:
            raise UsageError(f"--delivery {text!r}: unknown key {key!r}",
                             hint="keys: preset, platform, requests, metrics, logs, host_aliases")
    delivery = replace(current, **values)
    validate_delivery(delivery)
    return delivery


def delivery_from_mapping(data: Any, where: str) -> Delivery:
    """``[delivery]`` of a scenario.toml."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: [delivery] must be a table", hint="see docs/simulator.md")
    allowed = {f.name for f in fields(Delivery)}
    unknown = set(data) - allowed
    if unknown:
        raise UsageError(f"{where}: unknown [delivery] keys {sorted(unknown)}",
                         hint=f"allowed: {', '.join(sorted(allowed))}")
    delivery = Delivery(**data)
    validate_delivery(delivery)
    return delivery


def validate_delivery(d: Delivery) -> None:
    """Refuse unknown values and combinations no real deployment produces."""
    for key, choices in _CHOICES.items():
        if getattr(d, key) not in choices:
            raise UsageError(f"unknown delivery {key} {getattr(d, key)!r}",
                             hint=f"use one of {', '.join(choices)}")
    if not isinstance(d.host_aliases, bool):
        raise UsageError("delivery host_aliases must be true or false", hint="e.g. true")
    platforms = LOG_PLATFORMS.get(d.logs)
    if platforms is not None and d.platform not in platforms:
        raise UsageError(f"delivery logs={d.logs} needs platform {' or '.join(platforms)} "
                         f"(got {d.platform})", hint=f"add platform={platforms[0]}")
    if d.requests == "pod" and d.platform not in ("k8s", "compose"):
        raise UsageError(f"delivery requests=pod needs pods (platform k8s or compose, got "
                         f"{d.platform})", hint="add platform=k8s")
    if d.host_aliases and d.platform not in ("k8s", "bare-metal"):
        raise UsageError("delivery host_aliases needs a metrics label linking the DNS name to "
                         "the IP (platform k8s: node, bare-metal: hostname); without one no "
                         "tool could match them", hint="add platform=k8s or platform=bare-metal")


def to_toml_lines(d: Delivery) -> list[str]:
    """The ``[delivery]`` table (written only for a non-default delivery)."""
    out = ["", "[delivery]"]
    for f in fields(d):
        value = getattr(d, f.name)
        out.append(f"{f.name} = " + (("true" if value else "false") if isinstance(value, bool)
                                     else f'"{value}"'))
    return out


# --- names ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InstanceNames:
    """Every name one instance has in a capture (empty when the platform has no such name)."""

    index: int
    role: str
    address: str  # the scrape target, host:port (Prometheus' instance label)
    host: str
    port: int
    node: str  # Kubernetes node / the machine's DNS name
    pod: str  # Kubernetes pod or compose service
    container: str
    unit: str  # systemd unit (bare-metal)
    requests: str  # the name in the request records
    metrics: str  # the instance label, or the per-target file
    log: str  # the log file, or the merged file's source prefix


def node_name(index: int, gpu: str) -> str:
    """A node's DNS name, ``h100-node-3`` (Kubernetes node name, journald host): the GPU
    family of the profile (``H100-SXM`` -> ``h100``) and the node's index."""
    return f"{gpu.split('-')[0].lower() or 'gpu'}-node-{index}"


def instance_names(config: SimConfig, layout: Layout) -> tuple[InstanceNames, ...]:
    """The names of every instance of ``layout`` under ``config.delivery``."""
    d = config.delivery
    rng = np.random.default_rng([config.seed, NAME_SEED])
    engine = config.engine
    template = {role: _rand(rng, POD_HASH_CHARS) for role in ("prefill", "decode")}
    port0 = layout.instances[0].port if layout.instances else 0
    out = []
    for spec in layout.instances:
        labels = dict(spec.labels)
        node = node_name(spec.node, config.profile.gpu) if d.platform in ("k8s", "bare-metal") else ""
        suffix = _rand(rng, POD_SUFFIX_CHARS)
        pod = container = unit = ""
        host, port = spec.host, spec.port
        if d.platform == "k8s":
            pod = labels.get("pod") or f"{engine}-{spec.role}-{template[spec.role]}-{suffix}"
            container = engine
        elif d.platform == "compose":
            pod = host = f"{spec.role}-{spec.role_index + 1}"  # compose's <service>-<replica>
            port = port0  # every container has its own network namespace
            container = pod
        elif d.platform == "bare-metal":
            unit = f"{engine}-{spec.role}-{spec.role_index}.service"
        address = f"{host}:{port}"
        shown_host = node if d.host_aliases else host
        requests = {"address": address, "host": shown_host, "pod": pod}[d.requests]
        # Per-target files are saved by whatever the user looped over: pods in Kubernetes
        # (`kubectl exec POD -- curl localhost:8000/metrics > POD.prom`), targets elsewhere.
        stem = pod if d.platform == "k8s" else f"{host}_{port}"
        metrics = (address if d.metrics == "dump" else f"metrics/{stem}.prom")
        if d.logs == "per-instance":
            log = f"logs/{host}_{port}.log"
        elif d.logs == "per-pod":
            log = f"logs/{pod}.log"
        else:
            log = f"logs/{MERGED_LOG_NAME}"
        out.append(InstanceNames(spec.index, spec.role, address, host, port, node, pod,
                                 container, unit, requests, metrics, log))
    return tuple(out)


def delivered_layout(config: SimConfig, layout: Layout,
                     names: tuple[InstanceNames, ...]) -> Layout:
    """``layout`` with the hosts, ports and extra labels the metrics writer should print."""
    from pdprobe.sim.cluster import Layout

    d = config.delivery
    if d.is_default:
        return layout
    specs = []
    for spec, nm in zip(layout.instances, names, strict=True):
        labels = dict(spec.labels)
        if d.metrics == "dump" and d.platform == "k8s":
            # kubernetes_sd_configs (role pod/endpoints) relabelled the usual way
            labels.update(pod=nm.pod, namespace=labels.get("namespace", K8S_NAMESPACE),
                          node=nm.node, container=nm.container)
        if d.metrics == "dump" and d.platform == "bare-metal" and d.host_aliases:
            labels["hostname"] = nm.node  # a static_configs target label
        specs.append(replace(spec, host=nm.host, port=nm.port, labels=tuple(labels.items())))
    return Layout(layout.nodes, tuple(specs))


def _rand(rng: np.random.Generator, n: int) -> str:
    return "".join(K8S_SAFE_ALPHABET[int(i)] for i in rng.integers(0, len(K8S_SAFE_ALPHABET), n))


# --- ground truth -----------------------------------------------------------------------------

def truth_toml(config: SimConfig, layout: Layout, names: tuple[InstanceNames, ...]) -> str:
    """``truth.toml``: true instance counts per role and each instance's name in each source."""
    d = config.delivery
    roles = [nm.role for nm in names]
    hosts = [nm.requests for nm in names]
    shared = d.requests == "host" and len(set(hosts)) < len(hosts)
    lines = [
        "# Ground truth of this simulated capture's instance names (pdprobe simulate).",
        "# counts: every instance that ever ran; [[instances]]: its name in each source.",
        "", "[counts]",
        f'prefill = {roles.count("prefill")}',
        f'decode = {roles.count("decode")}',
        "", "[matchable]",
        "# requests alone name every instance apart (false: several instances share a host name)",
        f"requests_alone = {'false' if shared else 'true'}",
        *to_toml_lines(d),
    ]
    for nm, spec in zip(names, layout.instances, strict=True):
        lines += ["", "[[instances]]"]
        for key in ("role", "address", "host", "port", "node", "pod", "container", "unit",
                    "requests", "metrics", "log"):
            value = getattr(nm, key)
            lines.append(f"{key} = {value}" if isinstance(value, int) else f'{key} = "{value}"')
        lines.append(f"start_s = {spec.start_s!r}")
    return "\n".join(lines) + "\n"


__all__ = ["LOG_DELIVERIES", "MERGED_LOGS", "PRESETS", "Delivery", "InstanceNames",
           "delivered_layout", "delivery_from_mapping", "instance_names", "parse_delivery",
           "truth_toml", "validate_delivery"]
