"""A live session's shared setup: client, window, discovery, plan; and what it reports.

``Session`` is what ``collect_partial`` and ``probe`` (``pdprobe check``) share: the client under one
deadline, the server's clock, the window, the discovered families. ``LiveMeta``/``LiveResult``/
``Probe`` are the results handed to the capture writer, ``check`` and the benchmark.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pdprobe import safe_text
from pdprobe.collectors import promql_found as pf
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.metrics_map import load_metrics_map
from pdprobe.collectors.prometheus_client import PromClient, QueryRecord
from pdprobe.collectors.prometheus_decode import HttpError, TooLarge
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.dataset import (
    InstanceInfo,
    Partial,
)
from pdprobe.errors import SourceError

if TYPE_CHECKING:

    pass


# A server clock further from ours than this makes "now" ambiguous: warn (the window follows the
# server's clock). NTP-synced hosts agree within milliseconds.
CLOCK_SKEW_WARN_S: Final = 10.0


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
    found: pf.Found
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


class Session:
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
                self.notes.append(f"window end moved from {iso_time(until)} to the server's time "
                                  f"{iso_time(info.now_ts)} (no data exists after it)")
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
            clock_skew_s=info.clock_skew_s, discovery=how, found=pf.summarise(families),
            queries=tuple(self.client.records), elapsed_s=time.monotonic() - self.t0,
            metrics_map=self.target.metrics_map)


def summary_notes(meta: LiveMeta) -> list[str]:
    w = meta.window
    out = [f"window {iso_time(w.start_ts)} to {iso_time(w.end_ts)} at a {w.step_s:g} s step "
           f"(counters and histograms {w.coarse_step_s:g} s)"]
    if meta.selector:
        out.append(f"selector {{{meta.selector}}}")
    by_engine = meta.found.by_engine()
    found = "; ".join(f"{e}: {len(v)}" for e, v in sorted(by_engine.items()))
    out.append(f"metric families found ({meta.discovery}): {found}")
    if meta.server_version:
        out.append(f"server version {meta.server_version}")
    return out


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


T = TypeVar("T")


class Runner:
    """A bounded thread pool whose waits end at the client's deadline."""

    def __init__(self, client: PromClient, workers: int, ctx: ReadContext) -> None:
        self.client = client
        self.pool = cf.ThreadPoolExecutor(max_workers=max(1, workers),
                                          thread_name_prefix="pdprobe-prom")
        self.ctx = ctx
        self.done = 0
        self.total = 0

    def submit(self, fn: Callable[[], T]) -> cf.Future[T]:
        self.total += 1
        return self.pool.submit(fn)

    def wait(self, futures: Sequence[cf.Future[Any]], what: str) -> None:
        pending = set(futures)
        while pending:
            remaining = self.client.remaining()
            if remaining <= 0:
                self.close()
                raise self.client._timeout_error(f"{what} ({self.done} of {self.total} queries "
                                                 f"done)")
            finished, pending = cf.wait(pending, timeout=remaining,
                                        return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                exc = fut.exception()
                if exc is not None:
                    self.close()
                    raise exc
                self.done += 1
                self.ctx.report(f"querying Prometheus ({self.done}/{self.total})",
                                min(0.95, self.done / max(1, self.total)))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True)
class ServerInfo:
    now_ts: float
    clock_skew_s: float  # server minus local
    version: str | None


def server_info(client: PromClient) -> ServerInfo:
    """Server time (connectivity, authentication, clock skew) and, when offered, the version."""
    t0 = time.time()
    try:
        result = client.query("time()")
    except HttpError as exc:
        raise SourceError(f"no Prometheus query API at {client.shown_url} (HTTP {exc.status} for "
                          f"/api/v1/query: {client._clean(exc.message)[:120]})",
                          hint="--prometheus is the base URL, e.g. http://prometheus:9090 or "
                               "https://mimir/prometheus, without /api/v1") from None
    t1 = time.time()
    try:
        now = float(result[0]["value"][0])
        if not (math.isfinite(now) and 0 < now < 253402300799.0):  # 1970 .. year 9999
            raise ValueError(now)
    except (IndexError, KeyError, TypeError, ValueError, OverflowError):
        raise SourceError(f"Prometheus at {client.shown_url} answered time() oddly",
                          hint="check that --prometheus is a Prometheus-compatible API") from None
    version = None
    try:
        env = client.api_json("/api/v1/status/buildinfo", [], "build info", allow_post=False)
        data = env.get("data")
        version = (safe_text.clean(str(data.get("version") or ""))[:60] or None
                   if isinstance(data, dict) else None)
    except (HttpError, SourceError):
        pass  # Thanos, Mimir and VictoriaMetrics do not all offer it
    return ServerInfo(now_ts=now, clock_skew_s=now - (t0 + t1) / 2, version=version)


def discover_names(client: PromClient, window: pp.Window, engine_match: str,
                   network_match: str) -> tuple[list[str], str]:
    """Metric names present in the window (engine names scoped by the selector).

    ``/api/v1/label/__name__/values`` with ``match[]``; when that endpoint is restricted (some
    multi-tenant gateways deny it), one ``group by (__name__)`` range query per scope.
    """
    try:
        names = client.label_values("__name__", [engine_match, network_match], window.start_ts,
                                    window.end_ts)
        return sorted(set(names)), "label values (/api/v1/label/__name__/values)"
    except HttpError:
        pass
    out: set[str] = set()
    step = max(window.step_s, window.span_s / 10)
    for match in (engine_match, network_match):
        try:
            sset = client.query_range(f"group by (__name__) ({match})", window.start_ts,
                                      window.end_ts, step)
        except (HttpError, TooLarge) as exc:
            raise SourceError(f"Prometheus at {client.shown_url} refused the discovery of metric "
                              f"names ({client._clean(str(exc))[:200]})",
                              hint="narrow --selector, or check the permissions of the "
                                   "credentials") from None
        out.update(lab.get("__name__", "") for lab in sset.labels)
    out.discard("")
    return sorted(out), "group by (__name__) range queries (label values endpoint unavailable)"
