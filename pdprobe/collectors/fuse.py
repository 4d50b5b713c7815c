"""Merge the ``Partial`` pieces of all inputs into one time-aligned ``Dataset``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Final

from pdprobe.collectors.identity import AliasMap, SourceKeys, keys_from_names, resolve
from pdprobe.collectors.request_blocks import distinct_in_order
from pdprobe.collectors.roles import RoleOptions, node_of, resolve_roles
from pdprobe.dataset import (
    DEPLOYMENT_COLUMNS,
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    REQUEST_COLUMNS,
    Dataset,
    Identity,
    InstanceInfo,
    Partial,
    RoleHint,
    concat_frames,
    renamed_values,
)

if TYPE_CHECKING:
    import pandas as pd

# Two inputs whose time ranges are further apart than this probably use different clocks.
CLOCK_GAP_WARNING_S = 6 * 3600.0


def fuse(partials: Sequence[Partial], roles: RoleOptions | None = None,
         aliases: AliasMap | None = None) -> Dataset:
    """One dataset from many inputs: instance names unified across sources (the identity step),
    the same quantity of one instance taken from one source, concatenated, sorted by time, with
    roles resolved."""
    roles = roles or RoleOptions()
    resolution = resolve([_source_keys(p) for p in partials], aliases)
    partials = [_renamed(p, r) if r else p for p, r in zip(partials, resolution.renames,
                                                            strict=True)]
    partials, umbrella_notes = _without_umbrellas(partials, resolution.umbrellas)
    partials, precedence_notes = _one_source_per_quantity(partials)
    precedence_notes = umbrella_notes + precedence_notes
    requests = concat_frames((p.requests for p in partials), REQUEST_COLUMNS)
    metrics = concat_frames((p.metrics for p in partials), METRIC_COLUMNS)
    network = concat_frames((p.network for p in partials), NETWORK_COLUMNS)
    events = concat_frames((p.events for p in partials), EVENT_COLUMNS)
    deployment = (_sorted_by(concat_frames((p.deployment for p in partials),
                                           DEPLOYMENT_COLUMNS), "ts")
                  if any(p.deployment is not None for p in partials) else None)
    warnings: list[str] = [w for p in partials for w in p.warnings]
    warnings.extend(resolution.warnings)

    requests = _sorted_by(requests, "arrival_ts")
    metrics = _sorted_by(metrics, "ts")
    network = _sorted_by(network, "ts")
    events = _sorted_by(events, "ts")

    warnings.extend(_clock_warnings(partials))

    names: set[str] = set()
    if len(metrics):
        names.update(metrics["instance"].dropna().unique().tolist())
    for col in ("prefill_instance", "decode_instance"):
        if len(requests):
            names.update(distinct_in_order(requests[col]))  # codes, not rows
    if len(events):
        names.update(events["instance"].dropna().unique().tolist())
    names.discard("")
    nodes = _merged_facts(partials, "nodes")
    engines = _merged_facts(partials, "engines")
    hints = [h for p in partials for h in p.role_hints]
    hints.extend(_alias_name_hints(resolution.identities, hints))
    instances, role_warnings = resolve_roles(names - resolution.umbrellas,
                                             [h for h in hints
                                              if h.instance not in resolution.umbrellas],
                                             roles, nodes, engines)
    warnings.extend(role_warnings)
    instances = _nodes_named_as_network(instances, partials, network)

    request_columns = frozenset().union(*(p.request_columns for p in partials)) if partials else frozenset()
    return Dataset(
        requests=requests,
        metrics=metrics,
        network=network,
        events=events,
        instances=instances,
        sources=tuple(p.source for p in partials),
        request_columns=request_columns,
        warnings=tuple(dict.fromkeys(warnings)),
        notes=tuple(precedence_notes),
        identities=tuple(i for i in resolution.identities if i.name in names),
        deployment=deployment,
    )


def _source_keys(p: Partial) -> SourceKeys:
    """The partial's own keys plus a bare key for every other name its rows or facts use."""
    reported = {k.name for k in p.keys}
    rest = _names_in(p) - reported
    return SourceKeys(p.source.path, p.source.kind, p.keys + keys_from_names(rest))


def _names_in(p: Partial) -> set[str]:
    names: set[str] = set()
    if p.metrics is not None and len(p.metrics):
        names.update(p.metrics["instance"].dropna().unique().tolist())
    if p.events is not None and len(p.events):
        names.update(p.events["instance"].dropna().unique().tolist())
    if p.requests is not None and len(p.requests):
        for col in ("prefill_instance", "decode_instance"):
            if col in p.requests.columns:
                names.update(distinct_in_order(p.requests[col]))
    names.update(h.instance for h in p.role_hints)
    names.update(p.nodes)
    names.update(p.engines)
    names.discard("")
    return {str(n) for n in names}


def _renamed(p: Partial, rename: Mapping[str, str]) -> Partial:
    """The partial with its instance names replaced by the unified ones (vectorised: only the
    distinct values are mapped)."""
    def column(frame: pd.DataFrame | None, *cols: str) -> pd.DataFrame | None:
        if frame is None or not len(frame):
            return frame
        out = {}
        for col in cols:
            if col in frame.columns:
                uniques = frame[col].dropna().unique()
                mapping = {u: rename[u] for u in uniques if u in rename}
                if mapping:
                    out[col] = renamed_values(frame[col], mapping)
        return frame.assign(**out) if out else frame

    return replace(
        p,
        requests=column(p.requests, "prefill_instance", "decode_instance"),
        metrics=column(p.metrics, "instance"),
        events=column(p.events, "instance"),
        role_hints=tuple(replace(h, instance=rename.get(h.instance, h.instance))
                         for h in p.role_hints),
        nodes={rename.get(k, k): v for k, v in p.nodes.items()},
        engines={rename.get(k, k): v for k, v in p.engines.items()},
        keys=tuple(replace(k, name=rename.get(k.name, k.name)) for k in p.keys),
    )


def _without_umbrellas(partials: Sequence[Partial],
                       umbrellas: frozenset[str]) -> tuple[list[Partial], list[str]]:
    """Numbers under a name that stands for several instances (a machine running two engines)
    belong to no one instance: request records keep their row with the instance unknown, and
    metric series under such a name are left out (their engine's own series, under its real
    name, are what per-instance analyses compare). Events keep the name as a detail."""
    if not umbrellas:
        return list(partials), []
    out: list[Partial] = []
    in_requests: set[str] = set()
    in_metrics: set[str] = set()
    cleared = dropped = 0
    for p in partials:
        requests, metrics = p.requests, p.metrics
        if requests is not None and len(requests):
            changes = {}
            for col in ("prefill_instance", "decode_instance"):
                if col in requests.columns:
                    named = requests[col].dropna()
                    hit = set(named.unique().tolist()) & umbrellas
                    if hit:
                        # A partly attributed column would make the attributed instances look
                        # busier than their peers (false skew): the whole column goes unknown.
                        in_requests.update(hit)
                        cleared += len(named)
                        changes[col] = requests[col].mask(requests[col].notna())
            requests = requests.assign(**changes) if changes else requests
        if metrics is not None and len(metrics):
            mask = metrics["instance"].isin(umbrellas).to_numpy()
            if mask.any():
                in_metrics.update(metrics.loc[mask, "instance"].unique().tolist())
                dropped += int(mask.sum())
                metrics = metrics[~mask].reset_index(drop=True)
        out.append(replace(p, requests=requests, metrics=metrics))
    notes = []
    if cleared:
        notes.append(f"request records name {_listed(in_requests)}, which stand for several "
                     f"instances each: their instance columns ({cleared} values) were read as "
                     f"unknown, so per-instance figures come from metrics and logs; --alias "
                     f"attributes them")
    if dropped:
        notes.append(f"{dropped} metric sample(s) under {_listed(in_metrics)}, which stand for "
                     f"several instances each, were left out of per-instance analyses; --alias "
                     f"attributes them")
    return out, notes


def _nodes_named_as_network(instances: tuple[InstanceInfo, ...], partials: Sequence[Partial],
                            network: pd.DataFrame) -> tuple[InstanceInfo, ...]:
    """Each instance's node spelled as the network series spell it.

    node_exporter is scraped as ``instance="10.0.1.10:9100"`` (its node is the IP) while the
    engine's series may say ``node="h100-node-0"`` (a Kubernetes node name), or the other way
    round: of every name the inputs give the instance's machine (node label, hostname, host of
    its address), the one the network series use joins them.
    """
    if not len(network):
        return instances
    net_nodes = set(network["node"].dropna().unique().tolist())
    machine: dict[str, list[str]] = {}
    for p in partials:
        for key in p.keys:
            names = machine.setdefault(key.name, [])
            names.extend(v for k, v in key.facts if k in ("node", "hostname", "host") and v)
    out = []
    for info in instances:
        if info.node in net_nodes:
            out.append(info)
            continue
        host = node_of(info.name)
        found = next((n for n in [*machine.get(info.name, ()), *([host] if host else [])]
                      if n in net_nodes), None)
        out.append(replace(info, node=found) if found else info)
    return tuple(out)


def _listed(names: set[str], most: int = 3) -> str:
    shown = sorted(names)
    return ", ".join(shown[:most]) + (f" and {len(shown) - most} more" if len(shown) > most else "")


def _merged_facts(partials: Sequence[Partial], attr: str) -> dict[str, str]:
    """instance -> node/engine over all partials; a metrics source's fact wins over a log's."""
    out: dict[str, str] = {}
    for p in sorted(partials, key=lambda q: -_PRECEDENCE.get(q.source.kind, 0)):
        for k, v in getattr(p, attr).items():
            out.setdefault(k, v)
    return out


def _alias_name_hints(identities: Sequence[Identity], hints: Sequence[RoleHint]) -> list[RoleHint]:
    """Name-pattern role hints from every alias of a unified instance (``decode-1`` in a compose
    log names the role of ``10.0.0.7:8000``), where the source did not give one already."""
    from pdprobe.collectors.roles import name_hints

    have = {(h.instance, h.how) for h in hints}
    out: list[RoleHint] = []
    for ident in identities:
        for alias in ident.aliases:
            if alias.name == ident.name:
                continue
            for h in name_hints([alias.name], f"{alias.source}: name", alias.source):
                hint = replace(h, instance=ident.name)
                if (hint.instance, hint.how) not in have:
                    have.add((hint.instance, hint.how))
                    out.append(hint)
    return out


# Which source kind's numbers are used when two measure the same quantity of one instance:
# scraped metrics are the engine's own cumulative counters; log-derived series restart at the
# start of the log and are sampled less often, so they would break increases if mixed in.
_PRECEDENCE: Final = {"prometheus": 3, "capture": 3, "metrics": 2, "engine-log": 1, "requests": 0}


def _one_source_per_quantity(partials: Sequence[Partial]) -> tuple[list[Partial], list[str]]:
    """Drop an instance's signal from every source but the best when several carry it.

    Counters from two sources (a metrics dump and a log, or two dumps of one target) cannot be
    mixed: each is cumulative from its own start. The best source is the higher kind in
    ``_PRECEDENCE``, then the one with more rows of that quantity.
    """
    if sum(p.metrics is not None and len(p.metrics) > 0 for p in partials) < 2:
        return list(partials), []  # one source of metrics (a live collection): nothing to drop
    owners: dict[tuple[str, str], tuple[int, int, int]] = {}  # (instance, signal) -> rank, rows, i
    counts: list[dict[tuple[str, str], int]] = []
    for i, p in enumerate(partials):
        if p.metrics is None or not len(p.metrics):
            counts.append({})
            continue
        size = p.metrics.groupby(["instance", "signal"], sort=False, observed=True).size()
        c = {(str(pair[0]), str(pair[1])): int(n)  # type: ignore[index]
             for pair, n in size.items()}
        counts.append(c)
        rank = _PRECEDENCE.get(p.source.kind, 0)
        for pair, n in c.items():
            best = owners.get(pair)
            if best is None or (rank, n) > best[:2]:
                owners[pair] = (rank, n, i)
    out: list[Partial] = []
    dropped: dict[tuple[str, str], set[str]] = {}
    for i, p in enumerate(partials):
        lose = [pair for pair in counts[i] if owners[pair][2] != i]
        if not lose:
            out.append(p)
            continue
        assert p.metrics is not None
        key = p.metrics["instance"].astype(str) + "\x00" + p.metrics["signal"].astype(str)
        drop = key.isin([f"{a}\x00{b}" for a, b in lose])
        out.append(replace(p, metrics=p.metrics[~drop.to_numpy()].reset_index(drop=True)))
        for inst, sig in lose:
            winner = partials[owners[(inst, sig)][2]].source.path
            dropped.setdefault((p.source.path, winner), set()).add(sig)
    by_winner: dict[str, tuple[list[str], set[str]]] = {}
    for (lose_src, win_src), sigs in dropped.items():
        losers, all_sigs = by_winner.setdefault(win_src, ([], set()))
        losers.append(PurePath(lose_src).name)
        all_sigs.update(sigs)
    notes = []
    for win_src, (losers, sigs) in by_winner.items():
        shown = ", ".join(sorted(sigs)[:4]) + (", ..." if len(sigs) > 4 else "")
        files = ", ".join(losers[:3]) + (f" and {len(losers) - 3} more" if len(losers) > 3 else "")
        whose = files if len(losers) == 1 else f"{len(losers)} inputs ({files})"
        notes.append(f"{len(sigs)} quantit{'y' if len(sigs) == 1 else 'ies'} ({shown}) of "
                     f"{whose} also measured by "
                     f"{PurePath(win_src).name}: taken from {PurePath(win_src).name} only, so "
                     f"nothing is counted twice")
    return out, notes


def _sorted_by(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Inputs may be out of order (concatenated scrapes, several files): sort stably."""
    if len(frame) and not frame[column].is_monotonic_increasing:
        return frame.sort_values(column, kind="stable", ignore_index=True)
    return frame


def _clock_warnings(partials: Sequence[Partial]) -> list[str]:
    if len(partials) < 2:
        return []  # no pair to compare: the spans (passes over every time) are not needed
    spans = []
    for p in partials:
        lo, hi = _time_span(p)
        if lo is not None and hi is not None:
            spans.append((lo, hi, p.source.path))
    out = []
    for i, (lo1, hi1, path1) in enumerate(spans):
        for lo2, hi2, path2 in spans[i + 1:]:
            gap = max(lo2 - hi1, lo1 - hi2)
            if gap > CLOCK_GAP_WARNING_S:
                out.append(f"{path1} and {path2} are {gap / 3600:.1f} h apart in time: different "
                           f"clocks or a wrong --year? Analyses that join them may be empty")
    return out


def time_span(p: Partial) -> tuple[float | None, float | None]:
    """The first and last time (Unix seconds) any row of ``p`` carries, or (None, None)."""
    return _time_span(p)


def _time_span(p: Partial) -> tuple[float | None, float | None]:
    los, his = [], []
    if p.requests is not None and len(p.requests):
        los.append(float(p.requests["arrival_ts"].min()))
        his.append(float(p.requests["arrival_ts"].max()))
    for frame in (p.metrics, p.network, p.events):
        if frame is not None and len(frame):
            los.append(float(frame["ts"].min()))
            his.append(float(frame["ts"].max()))
    return (min(los), max(his)) if los else (None, None)
