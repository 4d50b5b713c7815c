"""Live collection: fill the dataset from the Prometheus HTTP API (Prometheus, Thanos, Mimir,
VictoriaMetrics) with a bounded number of server-side aggregated queries.

Phases (docs/live.md): (1) server time and discovery of the metric families that exist,
(2) in parallel: role labels and the aggregated range queries of ``promql_plan``, then the
network queries for the engines' hosts, (3) sample-by-sample re-reads of the few instances whose
counters dropped (restarts). Everything runs under one deadline (``target.timeout_s``);
credentials never appear in messages (``redact``).

The result is a ``Partial`` in the offline readers' layout (cumulative, reset-corrected counter
and histogram rows per instance), fused with the same role resolution.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.metric_roles import (
    ROLE_FROM_MAP,
    LabelRoles,
    engine_rank,
    evidence_hints,
)
from pdprobe.collectors.metrics_map import MetricsMap, load_metrics_map
from pdprobe.collectors.prometheus_client import (
    MAX_RAW_PIECES,
    MAX_STEP_DOUBLINGS,
    RAW_PIECE_S,
    PromClient,
    PrometheusAuthError,
    PrometheusUnreachable,
    QueryRecord,
    Runner,
    ServerInfo,
    discover_names,
    display_url,
    server_info,
)
from pdprobe.collectors.prometheus_decode import HttpError, SeriesSet, TooLarge
from pdprobe.collectors.prometheus_rows import (
    Groups,
    batch_groups,
    deployment_rows,
    select_and_flatten,
)
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.roles import RoleOptions, node_of, resolve_roles, role_from_name
from pdprobe.dataset import (
    ROLE_FROM_EVIDENCE,
    ROLE_FROM_NAME,
    Dataset,
    InstanceInfo,
    Partial,
    RoleHint,
    SourceInfo,
)
from pdprobe.errors import InsufficientDataError, SourceError, UsageError
from pdprobe.redact import redact as redact  # re-exported for callers of this module

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.collectors.identity import AliasMap

__all__ = [
    "LiveMeta", "LiveResult", "Probe", "PromClient", "PrometheusAuthError", "PrometheusUnreachable",
    "collect_live", "collect_partial", "display_url", "probe", "redact",
]
# services.check catches these by their former private names.
_HttpError = HttpError
_TooLarge = TooLarge


# --- data checks -----------------------------------------------------------------------------
# A server clock further from ours than this makes "now" ambiguous: warn (the window follows the
# server's clock). NTP-synced hosts agree within milliseconds.
CLOCK_SKEW_WARN_S: Final = 10.0
# No sample in the last this-many seconds of the window: the cluster or its scraping stopped.
STALE_WARN_S: Final = 300.0
# An instance without samples for this long inside the window had a scrape gap worth a warning
# (four 15 s scrapes).
GAP_WARN_S: Final = 60.0
SHOWN: Final = 5  # instances/names a warning lists



# --------------------------------------------------------------------------------------------
# Roles
# --------------------------------------------------------------------------------------------


@dataclass
class _InstanceFacts:
    hints: list[RoleHint] = field(default_factory=list)
    engines: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)  # hosts of `instance` labels (network join)
    notes: list[str] = field(default_factory=list)


def role_facts(results: Sequence[tuple[pp.RoleQuery, list[dict[str, Any]]]],
               metrics_map: MetricsMap | None, source: str) -> _InstanceFacts:
    """Role hints, engines and nodes from the ``group by`` answers (same rules as offline)."""
    facts = _InstanceFacts()
    seen: set[tuple[str, str, str]] = set()
    reader = LabelRoles(source, metrics_map.role_of_value if metrics_map else None)
    role_labels = (*(metrics_map.role_labels if metrics_map else ()), *mc.ROLE_LABELS)
    default_inst = (metrics_map.instance_label if metrics_map else None) or "instance"
    node_label = metrics_map.node_label if metrics_map else None
    for rq, vector in results:
        for item in vector:
            lab = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            inst = lab.get(rq.instance_label, "")
            if not inst:
                continue
            if rq.role is not None:
                facts.hints.append(RoleHint(inst, rq.role, rq.how, ROLE_FROM_MAP, source))
                continue
            cur = facts.engines.get(inst)
            if cur is None or engine_rank(rq.engine) < engine_rank(cur):
                facts.engines[inst] = rq.engine
            for label in role_labels:
                value = lab.get(label)
                hint = reader.add(inst, label, value) if value else None
                if hint is not None:
                    facts.hints.append(hint)
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


# --------------------------------------------------------------------------------------------
# The collection
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveMeta:
    """How a live collection went (for the capture file, ``check`` and the benchmark)."""

    url: str  # without credentials
    window: pp.Window
    selector: str
    network_selector: str | None
    server_version: str | None
    clock_skew_s: float
    discovery: str
    found: pp.Found
    queries: tuple[QueryRecord, ...]
    elapsed_s: float
    metrics_map: str | None = None


@dataclass(frozen=True)
class LiveResult:
    partial: Partial
    meta: LiveMeta


@dataclass(frozen=True)
class Probe:
    """What ``pdprobe check`` needs: reachability, families, roles, without the data queries."""

    meta: LiveMeta
    instances: tuple[InstanceInfo, ...]
    role_warnings: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    batches: tuple[pp.Batch, ...]


class _Session:
    """Shared setup of ``collect_partial`` and ``probe``: client, window, discovery, plan."""

    def __init__(self, target: PrometheusTarget, ctx: ReadContext) -> None:
        # Imported here, once: worker threads importing pandas on first use would queue
        # behind the import lock and their query timings would include it.
        import pandas  # noqa: F401

        self.t0 = time.monotonic()
        self.target = target
        self.ctx = ctx
        self.mmap = load_metrics_map(target.metrics_map) if target.metrics_map else None
        self.selector = pp.combine_selectors(target.selector,
                                             self.mmap.selector if self.mmap else "")
        net = self.mmap.network_selector if self.mmap else None
        self.network_selector = pp.combine_selectors(net) if net else None
        self.client = PromClient(target, self.t0 + target.timeout_s)
        self.warnings: list[str] = []
        self.notes: list[str] = []
        if target.insecure:
            self.warnings.append("TLS certificate verification is off (--insecure)")

    def close(self) -> None:
        self.client.close()

    def prepare(self) -> tuple[ServerInfo, pp.Window, list[pp.Family], str]:
        self.ctx.report("contacting Prometheus", 0.0)
        info = server_info(self.client)
        until = self.target.until_ts if self.target.until_ts is not None else info.now_ts
        if abs(info.clock_skew_s) > CLOCK_SKEW_WARN_S:
            ahead = "ahead of" if info.clock_skew_s > 0 else "behind"
            self.warnings.append(f"Prometheus' clock is {abs(info.clock_skew_s):.0f} s {ahead} "
                                 f"this machine's: the window follows the server's clock")
        if until > info.now_ts:
            # No data exists after the server's "now"; a clamp beyond clock noise is worth a note.
            if until - info.now_ts > CLOCK_SKEW_WARN_S:
                self.notes.append(f"window end moved from {_iso(until)} to the server's time "
                                  f"{_iso(info.now_ts)} (no data exists after it)")
            until = info.now_ts
        window = pp.choose_window(self.target.since_s, until, self.target.step_s)
        if self.target.step_s is not None and abs(window.span_s - self.target.since_s) > 1e-6:
            self.notes.append(f"window shortened to {window.span_s:g} s, a whole number of "
                              f"--step {self.target.step_s:g} s steps")
        index = pp.SpecIndex.build(self.mmap)
        engine_match, net_match = pp.discovery_matchers(self.selector, self.network_selector,
                                                        index)
        self.ctx.report("discovering metric families", 0.05)
        names, how = discover_names(self.client, window, engine_match, net_match)
        families = pp.families_from_names(names, index)
        return info, window, families, how

    def meta(self, info: ServerInfo, window: pp.Window, families: Sequence[pp.Family],
             how: str) -> LiveMeta:
        return LiveMeta(
            url=self.client.shown_url, window=window, selector=self.selector,
            network_selector=self.network_selector, server_version=info.version,
            clock_skew_s=info.clock_skew_s, discovery=how, found=pp.summarise(families),
            queries=tuple(self.client.records), elapsed_s=time.monotonic() - self.t0,
            metrics_map=self.target.metrics_map)


def collect_partial(target: PrometheusTarget, ctx: ReadContext | None = None) -> LiveResult:
    """Query Prometheus and build the ``Partial`` (see the module docstring)."""
    ctx = ctx or ReadContext()
    session = _Session(target, ctx)
    try:
        return _collect(session)
    except (SourceError, UsageError, InsufficientDataError):
        raise
    except TooLarge as exc:
        raise SourceError(f"Prometheus at {session.client.shown_url} refuses the queries as too "
                          f"large ({session.client._clean(str(exc))[:160]})",
                          hint="shorten --since, raise --step or narrow --selector") from None
    except HttpError as exc:
        raise SourceError(f"Prometheus at {session.client.shown_url} answered with an error: "
                          f"{session.client._clean(exc.message)[:200]} (HTTP {exc.status})",
                          hint="check --selector and the metrics map") from None
    finally:
        session.close()


def _collect(session: _Session) -> LiveResult:
    client, ctx, mmap = session.client, session.ctx, session.mmap
    info, window, families, how = session.prepare()
    found = pp.summarise(families)
    if not found.engines:
        where = f" matching {{{session.selector}}}" if session.selector else ""
        raise InsufficientDataError(
            f"Prometheus at {client.shown_url} has no vLLM, SGLang or Dynamo metrics{where} "
            f"between {_iso(window.start_ts)} and {_iso(window.end_ts)}",
            hint="check --selector, --since/--until, or map custom names with --metrics-map")
    batches = pp.plan_batches(pp.analysed(families), window,
                              mmap.instance_label if mmap else None)
    engine_batches = [b for b in batches if b.scope == "instance"]
    deployment_batches = [b for b in batches if b.scope == "deployment"]
    net_batches = [b for b in batches if b.scope == "network"]
    role_queries = pp.plan_role_queries(families, window, session.selector, mmap)
    source = f"Prometheus {client.shown_url}"
    failed: list[str] = []
    node_label = mmap.node_label if mmap else None

    def run_batch(batch: pp.Batch, promql: str) -> SeriesSet | None:
        step, start_ts = batch.step_s, _batch_start(batch, window)
        for doubling in range(MAX_STEP_DOUBLINGS + 1):
            try:
                return client.query_range(promql, start_ts, window.end_ts, step)
            except TooLarge:
                if doubling == MAX_STEP_DOUBLINGS:
                    raise
                n = math.floor((window.end_ts - start_ts) / (2 * step) + 1e-9)
                step *= 2
                start_ts = window.end_ts - max(1, n) * step
                client.warn(f"Prometheus found the query for {_families_text(batch)} too large; "
                            f"read it at a {step:g} s step instead")
            except HttpError as exc:
                if exc.status in (400, 422) or exc.error_type in ("bad_data", "execution"):
                    with client._lock:
                        failed.append(f"{_families_text(batch)} "
                                      f"({client._clean(exc.message)[:120]})")
                    return None
                raise
        return None

    def run_raw(batch: pp.Batch, instances: Sequence[str]) -> SeriesSet | None:
        selector = batch.raw_promql(session.selector, instances)
        if window.span_s <= RAW_PIECE_S * MAX_RAW_PIECES:
            return client.raw_samples(selector, window.start_ts, window.end_ts)
        return run_batch(replace(batch, step_s=window.step_s), selector)

    def run_grouped(batch: pp.Batch, promql: str) -> Groups | None:
        # Grouped in the worker, so that it overlaps the queries still running.
        sset = run_batch(batch, promql)
        return batch_groups(batch, sset, node_label=node_label) if sset is not None else None

    runner = Runner(client, session.target.max_concurrency, ctx)
    try:
        # The role queries are quick and tell the hosts the network queries need: run them
        # first, then every data query at once, the costliest first so none trails alone.
        role_futs = [(rq, runner.submit(partial(client.query, rq.promql, window.end_ts)))
                     for rq in role_queries]
        runner.wait([f for _, f in role_futs], "the role queries")
        facts = role_facts([(rq, f.result()) for rq, f in role_futs], mmap, source)
        net_matcher = session.network_selector
        if net_batches and not net_matcher and facts.hosts:
            net_matcher = pp.network_host_matcher(facts.hosts)
        planned = [(b, b.promql(session.selector))
                   for b in (*engine_batches, *deployment_batches)]
        planned += [(b, b.promql(net_matcher)) for b in net_batches if net_matcher]
        planned.sort(key=lambda bq: pp.batch_cost(bq[0], window), reverse=True)
        futs = {b.id: runner.submit(partial(run_grouped, b, q)) for b, q in planned}
        net_asked = bool(net_batches and net_matcher)
        if ctx.while_waiting is not None:
            ctx.while_waiting()
        runner.wait(list(futs.values()), "the data queries")
        ctx.report("assembling the dataset", 0.9)
        groups: dict[str, Groups] = {}
        restarted: dict[str, set[str]] = {}  # instance label -> instances
        for b in batches:
            fut = futs.get(b.id)
            g = fut.result() if fut is not None else None
            if g is None:
                continue
            groups[b.id] = g
            if b.cumulative and b.scope == "instance":
                restarted.setdefault(b.instance_label, set()).update(g.reset_idents)
        n_restarted = sum(len(v) for v in restarted.values())
        raw_futs: dict[str, cf.Future[SeriesSet | None]] = {}
        if 0 < n_restarted <= pp.MAX_RAW_INSTANCES:
            # Between two grid points a restart hides what was counted before it; the raw
            # samples of these few instances give exactly what the offline reader sees.
            raw_futs = {b.id: runner.submit(partial(run_raw, b, sorted(restarted[b.instance_label])))
                        for b in engine_batches
                        if b.cumulative and restarted.get(b.instance_label)}
            runner.wait(list(raw_futs.values()), "the re-reads of restarted instances")
    finally:
        runner.close()

    warnings = list(session.warnings)
    notes = list(session.notes) + facts.notes
    shown = _shown(i for v in restarted.values() for i in v)
    if raw_futs:
        notes.append(f"{n_restarted} instance(s) restarted or had a counter reset in the window; "
                     f"their counters and histograms were re-read sample by sample: {shown}")
    elif n_restarted:
        warnings.append(f"{n_restarted} instances restarted in the window; above "
                        f"{pp.MAX_RAW_INSTANCES} they are not re-read sample by sample, so what "
                        f"they counted between the last grid point and the restart is missing: "
                        f"{shown}")
    group_list: list[Groups] = []
    for b in batches:
        g = groups.get(b.id)
        if g is None:
            continue
        raw_fut = raw_futs.get(b.id)
        raw = raw_fut.result() if raw_fut is not None else None
        if raw is not None:
            g.present[g.keys["ident"].isin(restarted[b.instance_label]).to_numpy()] = False
            rg = batch_groups(b, raw, node_label=node_label, raw=True)
            if rg is not None:
                group_list.append(rg)
        group_list.append(g)
    metrics, network, kept = select_and_flatten(group_list)
    deployment = deployment_rows(group_list, kept)
    if failed:
        warnings.append(f"Prometheus refused {len(failed)} quer{'y' if len(failed) == 1 else 'ies'}"
                        f"; those signals are missing: {'; '.join(failed[:SHOWN])}")
    miss_w, miss_n = pp.missing_warnings(found)
    warnings.extend(miss_w)
    notes.extend(miss_n)
    if net_batches and not net_asked:
        warnings.append("node_infiniband_*/netdev series exist but the engine instances' hosts "
                        "are unknown: network findings will be inconclusive (set [scope] "
                        "network_selector in --metrics-map)")
    elif net_batches and network.empty:
        warnings.append("node_infiniband_*/netdev series exist but none on the engine instances' "
                        "hosts: network findings will be inconclusive (set [scope] "
                        "network_selector in --metrics-map)")
    if metrics.empty:
        raise InsufficientDataError(
            f"Prometheus at {client.shown_url} returned no samples of the {len(families)} metric "
            f"families found between {_iso(window.start_ts)} and {_iso(window.end_ts)}",
            hint="check --since/--until and --selector")
    warnings.extend(_gap_warnings(metrics, window))
    hints = list(facts.hints)
    hints.extend(_frontend_hints(kept, source))
    hints.extend(_evidence(metrics, source, warnings))
    warnings.extend(client.warnings)
    notes.extend(client.infos)
    meta = session.meta(info, window, families, how)
    notes[0:0] = _summary_notes(meta)
    src = SourceInfo(path=client.shown_url, kind="prometheus", format="prometheus-api",
                     rows=len(metrics) + len(network), notes=tuple(dict.fromkeys(notes)))
    piece = Partial(source=src, metrics=metrics, network=network if len(network) else None,
                    role_hints=tuple(dict.fromkeys(hints)), nodes=facts.nodes,
                    engines=facts.engines, warnings=tuple(dict.fromkeys(warnings)),
                    deployment=deployment if len(deployment) else None)
    ctx.report("collected", 1.0)
    return LiveResult(piece, meta)


def _batch_start(batch: pp.Batch, window: pp.Window) -> float:
    return window.end_ts - round(window.span_s / batch.step_s) * batch.step_s


def _families_text(batch: pp.Batch) -> str:
    names = [f.exposed for f in batch.families]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _shown(items: Any) -> str:
    lst = sorted(set(items))
    return ", ".join(lst[:SHOWN]) + (f" and {len(lst) - SHOWN} more" if len(lst) > SHOWN else "")


def _frontend_hints(kept: pd.DataFrame, source: str) -> list[RoleHint]:
    if kept.empty:
        return []
    fronts = kept.loc[kept["frontend"].astype(bool) & (kept["scope"] == "instance"), "ident"]
    return [RoleHint(str(i), "frontend", "Dynamo frontend metrics (dynamo_frontend_*)",
                     ROLE_FROM_EVIDENCE, source) for i in sorted(set(fronts))]


def _evidence(metrics: pd.DataFrame, source: str, warnings: list[str]) -> list[RoleHint]:
    """Behavioural role evidence, with the offline reader's rules."""
    return evidence_hints(metrics, source, warnings)


def _gap_warnings(metrics: pd.DataFrame, window: pp.Window) -> list[str]:
    """Instances without samples for a while inside the window, and data that stops early."""
    import pandas as pd

    out: list[str] = []
    base = metrics[metrics["kind"] == S.GAUGE]  # the gauges are on the fine grid
    if base.empty:
        return out
    col = np.rint((base["ts"].to_numpy() - window.start_ts) / window.step_s).astype(np.int64)
    inst_codes, insts = pd.factorize(base["instance"])
    n_cols = window.points
    seen = np.zeros((len(insts), n_cols), dtype=bool)
    ok = (col >= 0) & (col < n_cols)
    seen[inst_codes[ok], col[ok]] = True
    gaps: list[tuple[str, float]] = []
    for k, name in enumerate(insts):
        cols = np.flatnonzero(seen[k])
        if len(cols) < 2:
            continue
        longest = int(np.max(np.diff(cols))) - 1
        if longest * window.step_s >= GAP_WARN_S:
            gaps.append((str(name), longest * window.step_s))
    if gaps:
        gaps.sort(key=lambda g: -g[1])
        shown = ", ".join(f"{n} ({s:.0f} s)" for n, s in gaps[:SHOWN])
        out.append(f"{len(gaps)} instance(s) have no samples for a stretch of the window (scrape "
                   f"gaps or restarts; rates across a gap are averages): {shown}")
    last = float(metrics["ts"].max())
    if window.end_ts - last >= STALE_WARN_S:
        out.append(f"the newest sample is {(window.end_ts - last) / 60:.0f} min before the window "
                   f"end {_iso(window.end_ts)}: the cluster or its scraping may have stopped "
                   f"(pass --until for a past incident)")
    return out


def _summary_notes(meta: LiveMeta) -> list[str]:
    w = meta.window
    out = [f"window {_iso(w.start_ts)} to {_iso(w.end_ts)} at a {w.step_s:g} s step "
           f"(counters and histograms {w.coarse_step_s:g} s)"]
    if meta.selector:
        out.append(f"selector {{{meta.selector}}}")
    by_engine = meta.found.by_engine()
    found = "; ".join(f"{e}: {len(v)}" for e, v in sorted(by_engine.items()))
    out.append(f"metric families found ({meta.discovery}): {found}")
    if meta.server_version:
        out.append(f"server version {meta.server_version}")
    return out


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def collect_live(target: PrometheusTarget, ctx: ReadContext, roles: RoleOptions,
                 aliases: AliasMap | None = None) -> Dataset:
    """The dataset of a live cluster, with names and roles resolved like the offline path."""
    from pdprobe.collectors.fuse import fuse
    from pdprobe.collectors.validate import checked_partial

    result = collect_partial(target, ctx)
    # The same edge checks as files: a negative or absurd sample from an exporter is dropped
    # with a warning, not turned into a negative rate.
    return fuse([checked_partial(result.partial)], roles, aliases)


def probe(target: PrometheusTarget, ctx: ReadContext | None = None,
          roles: RoleOptions | None = None) -> Probe:
    """Connectivity, discovery and roles without the data queries (``pdprobe check``)."""
    ctx = ctx or ReadContext()
    session = _Session(target, ctx)
    try:
        info, window, families, how = session.prepare()
        mmap = session.mmap
        batches = pp.plan_batches(pp.analysed(families), window,
                              mmap.instance_label if mmap else None)
        role_queries = pp.plan_role_queries(families, window, session.selector, mmap)
        runner = Runner(session.client, target.max_concurrency, ctx)
        try:
            futs = [(rq, runner.submit(partial(session.client.query, rq.promql, window.end_ts)))
                    for rq in role_queries]
            runner.wait([f for _, f in futs], "the role queries")
            results = [(rq, f.result()) for rq, f in futs]
        finally:
            runner.close()
        facts = role_facts(results, mmap, f"Prometheus {session.client.shown_url}")
        names = {str((item.get("metric") or {}).get(rq.instance_label, ""))
                 for rq, vec in results if rq.role is None for item in vec}
        names.discard("")
        instances, role_warnings = resolve_roles(names, facts.hints, roles or RoleOptions(),
                                                 facts.nodes, facts.engines)
        found = pp.summarise(families)
        miss_w, miss_n = pp.missing_warnings(found)
        meta = session.meta(info, window, families, how)
        return Probe(meta=meta, instances=instances, role_warnings=role_warnings,
                     warnings=tuple(dict.fromkeys([*session.warnings, *miss_w,
                                                   *session.client.warnings])),
                     notes=tuple(dict.fromkeys([*session.notes, *miss_n, *facts.notes])),
                     batches=tuple(batches))
    except HttpError as exc:
        raise SourceError(f"Prometheus at {session.client.shown_url} answered with an error: "
                          f"{session.client._clean(exc.message)[:200]} (HTTP {exc.status})",
                          hint="check --selector and the metrics map") from None
    finally:
        session.close()
