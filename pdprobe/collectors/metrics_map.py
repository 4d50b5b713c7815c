"""``--metrics-map FILE.toml``: teach pdprobe the metric names, labels and roles of an in-house stack.

The live collector (and ``pdprobe check``) read this file; see docs/live.md for the format.
Example::

    version = 1

    [scope]
    selector = 'cluster="pd-prod"'        # ANDed with --selector for engine metrics
    network_selector = 'job="node"'       # node_exporter series (default: the engine hosts)

    [instances]
    label = "pod"                         # label naming an instance (default: instance)
    node_label = "node"                   # label naming its host (default: host of `instance`)

    [roles]
    labels = ["tier"]                     # read before the built-in role labels
    prefill_values = ["ctx-server"]
    decode_values = ["gen-server"]

    [[roles.selector]]
    role = "prefill"
    match = 'dynamo_component="prefill"'

    [rename]                              # your name = the catalog name it stands for
    "acme:num_running" = "vllm:num_requests_running"

    [[metric]]
    name = "acme_kv_transfer_ms"          # histograms: the family name, without _bucket
    signal = "kv_transfer_s"
    type = "histogram"                    # gauge | counter | histogram
    scale = 0.001                         # to base units (s, bytes, ratio 0-1)
    labels = { direction = "send" }       # keep only series with these label values (a|b = either)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, cast, get_args

from pdprobe import signals as S
from pdprobe.collectors.metric_catalog import (
    ALL_SPECS,
    Aggregation,
    Engine,
    MetricSpec,
    Scope,
    normalise_name,
)
from pdprobe.collectors.metric_spec import HIST_SUFFIXES
from pdprobe.errors import InputError
from pdprobe.signals import Role

FORMAT_VERSION: Final = 1
METRIC_TYPES: Final = ("gauge", "counter", "histogram")
_NAME_RE: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_TOP_KEYS: Final = frozenset({"version", "scope", "instances", "roles", "rename", "metric"})
_METRIC_KEYS: Final = frozenset({"name", "signal", "type", "scale", "aggregate", "labels",
                                 "engine", "scope", "instance_label", "counter_bits", "note"})


def known_signals() -> frozenset[str]:
    """Every metric/network signal name of ``pdprobe.signals`` (not kinds, roles or events)."""
    out = set()
    for key, value in vars(S).items():
        if (key.isupper() and isinstance(value, str) and not key.startswith("EV_")
                and value not in S.KINDS and value not in S.ROLES):
            out.add(value)
    return frozenset(out)


@dataclass(frozen=True)
class RoleSelector:
    """Instances whose series match ``matchers`` (PromQL label matchers) have ``role``."""

    role: Role
    matchers: str


@dataclass(frozen=True)
class MetricsMap:
    """The parsed ``--metrics-map`` file."""

    path: str
    specs: tuple[MetricSpec, ...] = ()  # custom and renamed names, consulted before the catalog
    selector: str = ""
    network_selector: str | None = None
    instance_label: str | None = None
    node_label: str | None = None
    role_labels: tuple[str, ...] = ()
    prefill_values: frozenset[str] = frozenset()
    decode_values: frozenset[str] = frozenset()
    role_selectors: tuple[RoleSelector, ...] = ()

    def role_of_value(self, value: str) -> Role | None:
        v = value.strip().lower()
        if v in self.prefill_values:
            return "prefill"
        if v in self.decode_values:
            return "decode"
        return None


class _Reader:
    """Typed access to the TOML tables with one-line errors naming the file and key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, what: str, hint: str = "see docs/live.md for the format") -> InputError:
        return InputError(f"{self.path}: {where}: {what}", hint=hint)

    def table(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"[{key}]", "must be a table")
        return value

    def string(self, data: dict[str, Any], key: str, where: str, default: str | None = None) -> str | None:
        value = data.get(key, default)
        if value is not None and not isinstance(value, str):
            raise self.fail(where, f"{key} must be a string")
        return value

    def strings(self, data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
        value = data.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(where, f"{key} must be a list of strings")
        return tuple(value)


def load_metrics_map(path: str | Path) -> MetricsMap:
    """Parse and validate a metrics map; raises ``InputError`` with one line naming the problem."""
    import tomllib

    p = Path(path)
    r = _Reader(p)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot read the metrics map ({exc.strerror})",
                         hint="check the --metrics-map path") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8", errors="replace"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{p}: not valid TOML ({exc})", hint="fix the syntax at that line") from exc
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise r.fail("top level", f"key {unknown[0]!r} is not part of the metrics-map format")
    version = data.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise r.fail("version", f"{version!r} is not supported (this pdprobe reads version "
                                f"{FORMAT_VERSION})", hint="upgrade pdprobe or rewrite the file")

    scope = r.table(data, "scope")
    selector = r.string(scope, "selector", "[scope]", "") or ""
    net_selector = r.string(scope, "network_selector", "[scope]")
    for key, value in (("selector", selector), ("network_selector", net_selector)):
        if value:
            _matchers(value, f"{p}: [scope] {key}")

    inst = r.table(data, "instances")
    instance_label = r.string(inst, "label", "[instances]")
    node_label = r.string(inst, "node_label", "[instances]")
    for key, value in (("label", instance_label), ("node_label", node_label)):
        if value is not None and not _LABEL_RE.match(value):
            raise r.fail("[instances]", f"{key} {value!r} is not a label name")

    roles = r.table(data, "roles")
    role_labels = r.strings(roles, "labels", "[roles]")
    for label in role_labels:
        if not _LABEL_RE.match(label):
            raise r.fail("[roles] labels", f"{label!r} is not a label name")
    prefill_values = frozenset(v.strip().lower() for v in r.strings(roles, "prefill_values", "[roles]"))
    decode_values = frozenset(v.strip().lower() for v in r.strings(roles, "decode_values", "[roles]"))
    both = prefill_values & decode_values
    if both:
        raise r.fail("[roles]", f"value {sorted(both)[0]!r} is listed for both prefill and decode")
    selectors = []
    raw_selectors = roles.get("selector", [])
    if not isinstance(raw_selectors, list):
        raise r.fail("[roles] selector", "must be an array of tables ([[roles.selector]])")
    for i, item in enumerate(raw_selectors, start=1):
        where = f"[[roles.selector]] #{i}"
        if not isinstance(item, dict):
            raise r.fail(where, "must be a table with role and match")
        role = item.get("role")
        if role not in ("prefill", "decode", "frontend"):
            raise r.fail(where, f"role {role!r} must be prefill, decode or frontend")
        match = r.string(item, "match", where)
        if not match:
            raise r.fail(where, "needs match = 'label=\"value\"'")
        _matchers(match, f"{p}: {where} match")
        selectors.append(RoleSelector(cast(Role, role), match.strip().strip("{}")))

    specs: list[MetricSpec] = []
    specs.extend(_renames(r, r.table(data, "rename")))
    raw_metrics = data.get("metric", [])
    if not isinstance(raw_metrics, list):
        raise r.fail("[[metric]]", "must be an array of tables")
    for i, item in enumerate(raw_metrics, start=1):
        specs.append(_custom_spec(r, item, f"[[metric]] #{i}"))
    return MetricsMap(
        path=str(p), specs=tuple(specs), selector=selector.strip().strip("{}"),
        network_selector=net_selector.strip().strip("{}") if net_selector else None,
        instance_label=instance_label, node_label=node_label, role_labels=role_labels,
        prefill_values=prefill_values, decode_values=decode_values,
        role_selectors=tuple(selectors),
    )


def _matchers(text: str, where: str) -> None:
    from pdprobe.collectors.promql_plan import parse_matchers
    from pdprobe.errors import UsageError

    try:
        parse_matchers(text, where)
    except UsageError as exc:
        raise InputError(exc.message, hint=exc.hint) from None


def _renames(r: _Reader, table: dict[str, Any]) -> list[MetricSpec]:
    by_key: dict[str, list[MetricSpec]] = {}
    for spec in ALL_SPECS:
        by_key.setdefault(spec.key, []).append(spec)
    out: list[MetricSpec] = []
    for custom, catalog in table.items():
        where = f"[rename] {custom!r}"
        if not isinstance(catalog, str):
            raise r.fail(where, "must name a catalog metric as a string")
        if not _NAME_RE.match(custom):
            raise r.fail(where, "is not a valid metric name")
        base = catalog
        for suffix, _ in HIST_SUFFIXES:
            if base.endswith(suffix) and normalise_name(base) not in by_key:
                base = base[: -len(suffix)]
        targets = by_key.get(normalise_name(base))
        if not targets:
            raise r.fail(where, f"{catalog!r} is not a metric pdprobe knows",
                         hint="use a name from docs/live.md's catalog, or a [[metric]] entry")
        new_name = custom
        if targets[0].kind == "histogram":
            for suffix, _ in HIST_SUFFIXES:
                if new_name.endswith(suffix):
                    new_name = new_name[: -len(suffix)]
        out.extend(replace(t, name=new_name, note=f"renamed from {t.name} by the metrics map",
                           aliases=()) for t in targets)
    return out


def _custom_spec(r: _Reader, item: object, where: str) -> MetricSpec:
    if not isinstance(item, dict):
        raise r.fail(where, "must be a table")
    unknown = sorted(set(item) - _METRIC_KEYS)
    if unknown:
        raise r.fail(where, f"unknown key {unknown[0]!r}")
    name = r.string(item, "name", where)
    if not name or not _NAME_RE.match(name):
        raise r.fail(where, f"name {name!r} is not a valid metric name")
    signal = r.string(item, "signal", where)
    if signal not in known_signals():
        raise r.fail(where, f"signal {signal!r} is not a pdprobe signal",
                     hint="pick one of the signals listed in docs/live.md")
    kind = r.string(item, "type", where)
    if kind not in METRIC_TYPES:
        raise r.fail(where, f"type {kind!r} must be gauge, counter or histogram")
    if kind == "histogram":
        for suffix, _ in HIST_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
    scale = item.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not scale > 0:
        raise r.fail(where, f"scale {scale!r} must be a positive number")
    aggregate = item.get("aggregate", "sum")
    if aggregate not in get_args(Aggregation):
        raise r.fail(where, f"aggregate {aggregate!r} must be sum, max or mean")
    engine = item.get("engine", "custom")
    if engine not in (*get_args(Engine), "custom"):
        raise r.fail(where, f"engine {engine!r} must be one of "
                            f"{', '.join((*get_args(Engine), 'custom'))}")
    scope = item.get("scope", "instance")
    if scope not in get_args(Scope):
        raise r.fail(where, f"scope {scope!r} must be instance or network")
    labels = item.get("labels", {})
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and _LABEL_RE.match(k) and isinstance(v, str) for k, v in labels.items()):
        raise r.fail(where, "labels must be a table of label = \"value\" (a|b for either)")
    instance_label = r.string(item, "instance_label", where)
    if instance_label is not None and not _LABEL_RE.match(instance_label):
        raise r.fail(where, f"instance_label {instance_label!r} is not a label name")
    bits = item.get("counter_bits")
    if bits is not None and bits not in (32, 64):
        raise r.fail(where, f"counter_bits {bits!r} must be 32 or 64")
    return MetricSpec(
        name=name, signal=str(signal), kind=str(kind), engine=cast(Engine, engine),
        scale=float(scale), label_filter=tuple(sorted(labels.items())),
        aggregate=cast(Aggregation, aggregate), scope=cast(Scope, scope),
        instance_label=instance_label, counter_bits=bits,
        note=str(item.get("note", "from the metrics map")),
    )
