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
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import promql_found as pf
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.prometheus_client import (
    MAX_RAW_PIECES,
    MAX_STEP_DOUBLINGS,
    RAW_PIECE_S,
    PromClient,
    PrometheusAuthError,
    PrometheusUnreachable,
    display_url,
)
from pdprobe.collectors.prometheus_decode import HttpError, SeriesSet, TooLarge
from pdprobe.collectors.prometheus_roles import behaviour_hints, frontend_hints, role_facts
from pdprobe.collectors.prometheus_rows import (
    Groups,
    batch_groups,
    deployment_rows,
    select_and_flatten,
)
from pdprobe.collectors.prometheus_session import (
    LiveMeta,
    LiveResult,
    Probe,
    Runner,
    Session,
    iso_time,
    summary_notes,
)
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.roles import RoleOptions, resolve_roles
from pdprobe.dataset import (
    Dataset,
    Partial,
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
# No sample in the last this-many seconds of the window: the cluster or its scraping stopped.
STALE_WARN_S: Final = 300.0
# An instance without samples for this long inside the window had a scrape gap worth a warning
# (four 15 s scrapes).
GAP_WARN_S: Final = 60.0
SHOWN: Final = 5  # instances/names a warning lists


# --------------------------------------------------------------------------------------------
# The collection
# --------------------------------------------------------------------------------------------


def collect_partial(target: PrometheusTarget, ctx: ReadContext | None = None) -> LiveResult:
    """Query Prometheus and build the ``Partial`` (see the module docstring)."""
    ctx = ctx or ReadContext()
    session = Session(target, ctx)
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


def _collect(session: Session) -> LiveResult:
    client, ctx, mmap = session.client, session.ctx, session.mmap
    info, window, families, how = session.prepare()
    found = pf.summarise(families)
    if not found.engines:
        where = f" matching {{{session.selector}}}" if session.selector else ""
        raise InsufficientDataError(
            f"Prometheus at {client.shown_url} has no vLLM, SGLang or Dynamo metrics{where} "
            f"between {iso_time(window.start_ts)} and {iso_time(window.end_ts)}",
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

    def run_grouped(batch: pp.Batch, promql: str, aggregated: bool) -> Groups | None:
        # Grouped in the worker, so that it overlaps the queries still running.
        sset = run_batch(batch, promql)
        if sset is None:
            return None
        return batch_groups(batch, sset, node_label=node_label, as_aggregated=not aggregated)

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
        # An engine whose instances have one series per name is asked without `sum by`.
        planned = [(b, (b.engine, b.instance_label) in facts.multi_series)
                   for b in (*engine_batches, *deployment_batches)]
        planned += [(b, True) for b in net_batches if net_matcher]
        planned.sort(key=lambda ba: pp.batch_cost(ba[0], window), reverse=True)
        futs = {b.id: runner.submit(partial(
                    run_grouped, b, b.promql((net_matcher or "") if b.scope == "network"
                                             else session.selector, aggregate=agg), agg))
                for b, agg in planned}
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
    notes.extend(n for g in group_list for n in g.notes)
    metrics, network, kept = select_and_flatten(group_list)
    deployment = deployment_rows(group_list, kept)
    if failed:
        warnings.append(f"Prometheus refused {len(failed)} quer{'y' if len(failed) == 1 else 'ies'}"
                        f"; those signals are missing: {'; '.join(failed[:SHOWN])}")
    miss_w, miss_n = pf.missing_warnings(found)
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
            f"families found between {iso_time(window.start_ts)} and {iso_time(window.end_ts)}",
            hint="check --since/--until and --selector")
    warnings.extend(_gap_warnings(metrics, window))
    hints = list(facts.hints)
    hints.extend(frontend_hints(kept, source))
    hints.extend(behaviour_hints(metrics, source, warnings))
    warnings.extend(client.warnings)
    notes.extend(client.infos)
    meta = session.meta(info, window, families, how)
    notes[0:0] = summary_notes(meta)
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
                   f"end {iso_time(window.end_ts)}: the cluster or its scraping may have stopped "
                   f"(pass --until for a past incident)")
    return out


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
    session = Session(target, ctx)
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
        found = pf.summarise(families)
        miss_w, miss_n = pf.missing_warnings(found)
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
