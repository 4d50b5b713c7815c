"""The identity step: one instance per engine process, whatever each source calls it.

Sources name the same engine differently (``h100-node-3`` in a gateway's request records,
``instance="h100-node-3:8000"`` in a metrics dump, ``[pod/vllm-decode-0/vllm]`` in a merged log).
Every source reports its names as ``InstanceKey`` s with the facts it has (address, pod,
namespace, ...; ``collectors/names.py`` adds what a name says by its shape). ``resolve`` unifies
keys across sources, records how each match was made, and refuses to guess:

1. a user mapping (``--alias NAME=INSTANCE``, ``--aliases FILE.toml``) is applied first;
2. the same name, the same ``host:port``, or the same pod (within one namespace) is one instance;
3. a name without a port (``10.0.0.5``, ``h100-node-3``) joins the one instance on that host, or
   on a host whose DNS name starts with it (``h100-node-3.cluster.local:8000``), only when the
   host runs exactly one instance; with two ports it stays apart and a warning asks for an alias;
4. two keys with different addresses or different pods are never merged, whatever links them
   (a pod name shared by two namespaces is ambiguous and reported, not guessed).

Context facts (``node``, ``job``) never merge anything: many engines share a node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pdprobe.collectors.aliases import AliasMap as AliasMap  # re-exported
from pdprobe.collectors.aliases import parse_aliases as parse_aliases  # re-exported
from pdprobe.collectors.names import address as make_address
from pdprobe.collectors.names import facts_of, is_ip, split_address
from pdprobe.dataset import Alias, Identity, InstanceKey
from pdprobe.errors import InputError

# Which source names a unified instance, best first: the Prometheus ``instance`` label is what
# live queries and node_exporter joins use, so a metrics source's name wins; logs name pods and
# request records whatever the gateway knew.
SOURCE_RANK: Final = {"prometheus": 0, "capture": 0, "metrics": 1, "engine-log": 2, "requests": 3}
# Facts that identify one engine process; a group holding two different values of one of these
# would be two engines merged, so such a union is refused.
IDENTITY_FACTS: Final = ("address", "pod", "pod_key")
# The port of a templated systemd unit (vllm@8001.service, vllm-decode@8001).
_UNIT_PORT: Final = re.compile(r"@(\d{2,5})(?:\.service)?$")
# Inputs listed by name in one warning; the rest are counted.
MAX_LISTED_SOURCES: Final = 3


@dataclass(frozen=True)
class SourceKeys:
    """The instance keys one input (a file or a live query set) reported."""

    source: str  # path or query, for messages
    kind: str  # SourceInfo.kind: requests | metrics | engine-log | capture | prometheus
    keys: tuple[InstanceKey, ...]


@dataclass(frozen=True)
class Resolution:
    """The outcome: per source, the rename of its names; the identity table; warnings."""

    renames: tuple[Mapping[str, str], ...]  # per SourceKeys, in order: name -> canonical
    identities: tuple[Identity, ...]
    warnings: tuple[str, ...] = ()
    # Names that stand for several instances (a machine running two engines, a pod name in two
    # namespaces): their rows stay as they are, but they are not counted as instances.
    umbrellas: frozenset[str] = frozenset()


@dataclass
class _Key:
    """A key being resolved: which source, its name, every fact (explicit and parsed)."""

    index: int  # position in the flat list
    source: int  # SourceKeys index
    key: InstanceKey
    facts: dict[str, str]
    how: str = "only name"


def resolve(sources: Sequence[SourceKeys], aliases: AliasMap | None = None) -> Resolution:
    """Unify the keys of all sources; see the module docstring for the rules."""
    aliases = aliases or AliasMap()
    keys = _flatten(sources)
    uf = _UnionFind(keys)
    _check_aliases(keys, aliases)
    _apply_aliases(keys, aliases, uf)
    _join_on(keys, uf, "name", "same name")
    _join_on(keys, uf, "address", "same host:port")
    warnings = _join_pods(keys, uf)
    warnings += _join_hosts(keys, uf)
    warnings += uf.refused
    warnings += _unmatched_sources(sources, keys, uf)
    return _result(sources, keys, uf, warnings)


def _flatten(sources: Sequence[SourceKeys]) -> list[_Key]:
    out: list[_Key] = []
    for s_index, src in enumerate(sources):
        seen: set[str] = set()
        for key in src.keys:
            if not key.name or key.name in seen:
                continue
            seen.add(key.name)
            facts = dict(facts_of(key.name))
            for kind, value in key.facts:
                if value:
                    facts[kind] = value
            unit_port = _UNIT_PORT.search(facts.get("unit", ""))
            if unit_port and "port" not in facts:  # vllm@8001.service: a templated unit
                facts["port"] = str(int(unit_port.group(1)))
            if "address" in facts:
                parsed = split_address(facts["address"])
                if parsed is not None and parsed[1] is not None:
                    facts["address"] = make_address(parsed[0], parsed[1])
                    facts.setdefault("host", parsed[0])
                    facts.setdefault("port", str(int(parsed[1])))
            if "pod" in facts and facts.get("namespace"):
                facts["pod_key"] = f"{facts['namespace']}/{facts['pod']}"
            out.append(_Key(len(out), s_index, key, facts))
    return out


class _UnionFind:
    """Groups of keys; a union that would put two engines in one group is refused."""

    def __init__(self, keys: Sequence[_Key]) -> None:
        self.parent = list(range(len(keys)))
        self.values: list[dict[str, set[str]]] = [
            {f: {k.facts[f]} for f in IDENTITY_FACTS if f in k.facts} for k in keys]
        self.refused: list[str] = []
        self.keys = keys
        self.ambiguous: set[int] = set()  # sources with a name reported as ambiguous
        self.umbrella: set[int] = set()  # keys naming several instances (a machine, a pod name)

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int, how: str, *, forced: bool = False) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        va, vb = self.values[ra], self.values[rb]
        if not forced:
            for fact in IDENTITY_FACTS:
                if fact in va and fact in vb and va[fact] != vb[fact]:
                    ka, kb = self.keys[a], self.keys[b]
                    self.refused.append(
                        f"instance names {ka.key.name!r} and {kb.key.name!r} look alike ({how}) "
                        f"but name different engines ({fact.replace('_key', '')} "
                        f"{sorted(va[fact])[0]!r} vs {sorted(vb[fact])[0]!r}); kept apart — "
                        f"use --alias to join them if they are one")
                    return False
        self.parent[rb] = ra
        for fact, values in vb.items():
            va.setdefault(fact, set()).update(values)
        key_b = self.keys[b]
        if key_b.how == "only name":
            key_b.how = how
        if self.keys[a].how == "only name":
            self.keys[a].how = how
        return True


def _check_aliases(keys: Sequence[_Key], aliases: AliasMap) -> None:
    """Every alias and every target must be a name (or address, pod) some input uses."""
    if aliases.empty:
        return
    known: set[str] = set()
    for k in keys:
        known.add(k.key.name)
        known.update(v for f, v in k.facts.items() if f in ("address", "pod", "pod_key"))
    for alias, target in aliases.names.items():
        for name, role in ((target, "instance"), (alias, "name")):
            if name not in known:
                raise InputError(
                    f"{aliases.origin[alias]}: {role} {name!r} is not named by any input",
                    hint="use a name from the report's identity table (pdprobe diagnose -v)")


def _apply_aliases(keys: Sequence[_Key], aliases: AliasMap, uf: _UnionFind) -> None:
    if aliases.empty:
        return
    by_name: dict[str, list[int]] = {}
    for k in keys:
        for name in {k.key.name, k.facts.get("address"), k.facts.get("pod"),
                     k.facts.get("pod_key")}:
            if name:
                by_name.setdefault(name, []).append(k.index)
    for alias, target in aliases.names.items():
        for a in by_name.get(alias, []):
            for t in by_name.get(target, []):
                uf.union(t, a, f"{aliases.origin[alias]}", forced=True)


def _join_on(keys: Sequence[_Key], uf: _UnionFind, fact: str, how: str) -> None:
    first: dict[str, int] = {}
    for k in keys:
        value = k.key.name if fact == "name" else k.facts.get(fact)
        if not value:
            continue
        if value in first:
            uf.union(first[value], k.index, how)
        else:
            first[value] = k.index


def _join_pods(keys: Sequence[_Key], uf: _UnionFind) -> list[str]:
    """Same pod in the same namespace; a pod named without namespace joins the one namespace
    that has it (or the other namespace-less names of it), and is reported when two do."""
    _join_on(keys, uf, "pod_key", "same pod")
    namespaces: dict[str, dict[str, int]] = {}  # pod -> namespace -> a key index
    for k in keys:
        if "pod_key" in k.facts:
            namespaces.setdefault(k.facts["pod"], {}).setdefault(k.facts["namespace"], k.index)
    warnings: list[str] = []
    bare: dict[str, int] = {}
    for k in keys:
        pod = k.facts.get("pod")
        if not pod or "pod_key" in k.facts:
            continue
        spaces = namespaces.get(pod, {})
        if len(spaces) > 1:
            uf.ambiguous.add(k.source)
            uf.umbrella.add(k.index)
            warnings.append(f"pod {pod!r} exists in namespaces {', '.join(sorted(spaces))}; "
                            f"{k.key.name!r} could be either: kept apart — pass "
                            f"--alias {k.key.name}=NAMESPACE/POD or an --aliases file")
            continue
        if spaces:
            uf.union(next(iter(spaces.values())), k.index, "same pod")
        elif pod in bare:
            uf.union(bare[pod], k.index, "same pod")
        else:
            bare[pod] = k.index
    return warnings


def _join_hosts(keys: Sequence[_Key], uf: _UnionFind) -> list[str]:
    """A name without an address joins the one instance on its machine: the machine is a host of
    an address, or a ``node``/``hostname`` the metrics give an address (the gateway's
    ``h100-node-3`` for ``instance="10.0.0.5:8000", node="h100-node-3"``), or a host whose DNS
    name starts with it. With a port (a journald unit ``vllm@8001``) the port picks one of
    several; without, several instances on the machine are ambiguous and reported."""
    machines: dict[str, dict[str, int]] = {}  # host or node -> address -> a key index
    for k in keys:
        if "address" in k.facts:
            for fact in ("host", "node", "hostname"):
                if k.facts.get(fact):
                    machines.setdefault(k.facts[fact], {}).setdefault(k.facts["address"], k.index)
    short: dict[str, set[str]] = {}  # first DNS label -> full host names
    for full in machines:
        if not is_ip(full) and "." in full:
            short.setdefault(full.split(".", 1)[0], set()).add(full)
    warnings: list[str] = []
    for k in keys:
        host = k.facts.get("host")
        if not host or uf.values[uf.find(k.index)].get("address"):
            continue  # has an address, or already joined to an engine with one
        hosts = [host] if host in machines else sorted(short.get(host, ()))
        if len(hosts) > 1:
            uf.ambiguous.add(k.source)
            warnings.append(f"{k.key.name!r} could be any of the hosts {', '.join(hosts)}; kept "
                            f"apart — pass --alias {k.key.name}=HOST:PORT")
            continue
        if not hosts:
            continue
        found = machines[hosts[0]]
        port = k.facts.get("port")
        addresses = sorted(a for a in found if port is None or a.rsplit(":", 1)[-1] == port)
        where = "host" if hosts[0] == host else f"short host name of {hosts[0]},"
        if len(addresses) == 1:
            how = f"same {where} and port" if port else f"same {where} with one instance"
            uf.union(found[addresses[0]], k.index, how)
        elif addresses:
            uf.ambiguous.add(k.source)
            uf.umbrella.add(k.index)
            warnings.append(f"{k.key.name!r} names host {hosts[0]}, which runs "
                            f"{len(addresses)} instances ({', '.join(addresses[:4])}); kept "
                            f"apart — pass --alias {k.key.name}=HOST:PORT or an --aliases file")
    return warnings


def _unmatched_sources(sources: Sequence[SourceKeys], keys: Sequence[_Key],
                       uf: _UnionFind) -> list[str]:
    """Inputs none of whose names matched any other input's: the same engines under names no
    rule links (pods in the records, IP addresses in the metrics), or unrelated inputs."""
    named = {k.source for k in keys}
    if len(named) < 2 or uf.ambiguous:  # an ambiguity warning already asks for aliases
        return []
    sources_of: dict[int, set[int]] = {}
    for k in keys:
        sources_of.setdefault(uf.find(k.index), set()).add(k.source)
    alone = sorted(s for s in named
                   if all(sources_of[uf.find(k.index)] == {s} for k in keys if k.source == s))
    if not alone:
        return []
    shown = ", ".join(sources[s].source for s in alone[:MAX_LISTED_SOURCES])
    more = f" and {len(alone) - MAX_LISTED_SOURCES} more" if len(alone) > MAX_LISTED_SOURCES else ""
    return [f"no instance name of {shown}{more} matches a name in the other inputs: they may name "
            f"the same engines differently (pods vs addresses?), which would count each engine "
            f"twice — pass --alias NAME=INSTANCE or --aliases FILE (docs/inputs/identity.md)"]


def _result(sources: Sequence[SourceKeys], keys: Sequence[_Key], uf: _UnionFind,
            warnings: list[str]) -> Resolution:
    groups: dict[int, list[_Key]] = {}
    for k in keys:
        groups.setdefault(uf.find(k.index), []).append(k)
    canonical: dict[int, str] = {}
    taken: dict[str, int] = {}  # canonical name -> group root
    identities: list[Identity] = []
    for root, members in groups.items():
        chosen = _canonical(members, sources)
        name = chosen.key.name
        taken[name] = root
        canonical[root] = name
        aliases = tuple(Alias(sources[m.source].source, m.key.name, _describe(m, chosen))
                        for m in members)
        identities.append(Identity(name, aliases))
    renames: list[dict[str, str]] = [{} for _ in sources]
    for k in keys:
        target = canonical[uf.find(k.index)]
        if target != k.key.name:
            renames[k.source][k.key.name] = target
    identities.sort(key=lambda i: i.name)
    umbrellas = frozenset(canonical[root] for root, members in groups.items()
                          if all(m.index in uf.umbrella for m in members))
    return Resolution(tuple(renames), tuple(i for i in identities if i.name not in umbrellas),
                      tuple(dict.fromkeys(warnings)), umbrellas)


def _canonical(members: Sequence[_Key], sources: Sequence[SourceKeys]) -> _Key:
    """The metrics source's address name if any, else any address, else a pod, else the best
    source's name."""
    def rank(k: _Key) -> tuple[int, int, int, str]:
        is_address = k.key.name == k.facts.get("address")
        is_pod = k.key.name == k.facts.get("pod")
        return (0 if is_address else 1 if is_pod else 2,
                SOURCE_RANK.get(sources[k.source].kind, 9), k.source, k.key.name)

    return min(members, key=rank)


def _describe(k: _Key, chosen: _Key) -> str:
    """How ``k`` matches the canonical key: the most telling fact they share, else the rule
    that joined it (a chain such as name -> pod -> address says the last link)."""
    origin = f"; named by {k.key.origin}" if k.key.origin else ""
    if k is chosen:
        return f"canonical name{origin}"
    if k.how.startswith(("--alias", "/")) or ".toml" in k.how:
        how = k.how
    elif k.key.name == chosen.key.name:
        how = "same name"
    elif k.facts.get("address") and k.facts.get("address") == chosen.facts.get("address"):
        how = "same host:port"
    elif k.facts.get("pod") and k.facts.get("pod") == chosen.facts.get("pod"):
        how = "same pod"
    else:
        how = "same name" if k.how == "only name" else k.how
    return f"{how}{origin}"


def keys_from_names(names: Iterable[str], origin: str = "") -> tuple[InstanceKey, ...]:
    """Keys for a source that reported none: its names alone (facts come from their shape)."""
    return tuple(InstanceKey(n, (), origin) for n in sorted(set(names)) if n)


__all__ = [
    "AliasMap",
    "Resolution",
    "SourceKeys",
    "keys_from_names",
    "parse_aliases",
    "resolve",
]
