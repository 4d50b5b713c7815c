"""``pdprobe check --prometheus URL``: can pdprobe diagnose this cluster, and what will it say?

A doctor for the live path: connectivity, authentication, clock, which metric families exist
per engine, which instance roles could be decided, and per rule whether the live metrics are
enough to judge it. It issues only the cheap queries (time, discovery, roles), never the data
queries.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.roles import RoleOptions
from pdprobe.errors import PdprobeError
from pdprobe.redact import Redactor
from pdprobe.report.check_view import Capability, CheckResult
from pdprobe.safe_text import clean
from pdprobe.units import fmt_duration

if TYPE_CHECKING:
    from pdprobe.collectors.promql_plan import Window

# How far back ``check`` looks for an engine's samples when the window holds none: a month, at
# a subquery step no longer than Prometheus' default 5-minute lookback, so every scrape of a
# continuously scraped series is seen (8,640 steps per series).
LOCATE_SPAN_S: Final = 30 * 86400
LOCATE_STEP_S: Final = 300
LOCATE_SPAN_TEXT: Final = "30 days"
# The engine family whose samples say where the data lies, when present: every engine exports it.
_PREFERRED: Final = re.compile(r"num_requests_running|requests_running|num_running_reqs")

# How a role was decided, without the value: "label tier='ctx'" counts as "label tier".
_ROLE_HOW: Final = re.compile(r"(label [\w-]+|name pattern in \w+|metrics map selector|--\w+-match|"
                              r"no label, name pattern or evidence)")


def check(target: PrometheusTarget, ctx: ReadContext | None = None,
          roles: RoleOptions | None = None) -> CheckResult:
    """Probe ``target``; never raises for server problems (they make the result unusable)."""
    from pdprobe.collectors.prometheus import (
        PrometheusAuthError,
        PrometheusUnreachable,
        display_url,
        probe,
    )

    redactor = Redactor(target.secrets(), target.basic_credentials())

    def tidy(text: str) -> str:  # server text: no secret in any spelling, no escapes
        return clean(redactor(text))

    url = display_url(target.url)
    try:
        p = probe(target, ctx, roles)
    except PrometheusUnreachable as exc:
        return CheckResult(url=url, usable=False, reachable=False, authenticated=False,
                           problem=tidy(exc.one_line()))
    except PrometheusAuthError as exc:
        return CheckResult(url=url, usable=False, reachable=True, authenticated=False,
                           problem=tidy(exc.one_line()))
    except PdprobeError as exc:
        return CheckResult(url=url, usable=False, reachable=True, authenticated=True,
                           problem=tidy(exc.one_line()))
    meta = p.meta
    found = meta.found
    by_role: dict[str, list[str]] = {}
    sources: dict[str, int] = {}
    for inst in p.instances:
        by_role.setdefault(inst.role, []).append(tidy(inst.name))
        m = _ROLE_HOW.match(inst.role_source)
        how = m.group(1) if m else inst.role_source
        sources[how] = sources.get(how, 0) + 1
    engines: dict[str, dict[str, Any]] = {}
    for engine, names in sorted(found.by_engine().items()):
        engines[engine] = {"families": sorted(names), "version": found.versions.get(engine)}
    caps = capabilities(found.signals, by_role)
    problem = None
    if not found.engines:
        where = f" matching {{{meta.selector}}}" if meta.selector else ""
        located = locate_data(target, meta.window, meta.selector, meta.clock_skew_s)
        problem = tidy(located or (f"no vLLM, SGLang or Dynamo metrics{where} in the window: "
                                   "check --selector, --since/--until or --metrics-map"))
    elif not p.instances:
        problem = "metric families exist but no instance could be named: check --metrics-map"
    w = meta.window
    return CheckResult(
        url=url, usable=problem is None, reachable=True, authenticated=True, problem=problem,
        server_version=tidy(meta.server_version) if meta.server_version else None,
        clock_skew_s=round(meta.clock_skew_s, 3),
        window={"start": _iso(w.start_ts), "end": _iso(w.end_ts), "step_s": w.step_s,
                "coarse_step_s": w.coarse_step_s},
        discovery=meta.discovery, engines=engines,
        roles={k: sorted(v) for k, v in sorted(by_role.items())}, role_sources=sources,
        capabilities=caps, planned_queries=len(p.batches) + len(engines),
        issued_queries=len(meta.queries), elapsed_s=round(meta.elapsed_s, 3),
        warnings=tuple(dict.fromkeys(tidy(w) for w in (*p.warnings, *p.role_warnings))),
        notes=tuple(tidy(n) for n in p.notes),
    )


def locate_data(target: PrometheusTarget, window: Window, selector: str,
                clock_skew_s: float) -> str | None:
    """Where in time the engine data lies, when the window holds none: "no samples in the
    window 10:00–10:30 UTC; the newest sample of vllm:num_requests_running is from 2026-11-30
    03:12 UTC (7 h 0 min before the window's start)". Two cheap calls: the engine metric names
    of the last ``LOCATE_SPAN_S``, then the newest and oldest sample time of one of them.
    None when the server cannot say (the caller keeps its generic line)."""
    from pdprobe.collectors import prometheus as prom
    from pdprobe.collectors import promql_plan as pp
    from pdprobe.collectors.metrics_map import load_metrics_map

    now = time.time() + clock_skew_s
    span = f"no samples in the window {_span_text(window.start_ts, window.end_ts)}"
    mmap = load_metrics_map(target.metrics_map) if target.metrics_map else None
    engine_match, _ = pp.discovery_matchers(selector, None, pp.SpecIndex.build(mmap))
    client = prom.PromClient(target, time.monotonic() + target.timeout_s)
    try:
        names = sorted(client.label_values("__name__", [engine_match], now - LOCATE_SPAN_S, now))
        if not names:
            where = f" matching {{{selector}}}" if selector else ""
            return (f"{span}, nor any vLLM, SGLang or Dynamo metric{where} in the last "
                    f"{LOCATE_SPAN_TEXT}: check --selector or --metrics-map")
        name = next((n for n in names if _PREFERRED.search(n)), names[0])
        series = f'{{__name__="{name}"{", " + selector if selector else ""}}}'
        sub = f"timestamp({series})[{LOCATE_SPAN_S}s:{LOCATE_STEP_S}s]"
        edges = {str((item.get("metric") or {}).get("edge")): float(item["value"][1])
                 for item in client.query(
                     f'label_replace(max(max_over_time({sub})), "edge", "newest", "", "") or '
                     f'label_replace(min(min_over_time({sub})), "edge", "oldest", "", "")', now)}
    except (PdprobeError, OSError, ValueError, KeyError, IndexError, TypeError,
            prom._HttpError, prom._TooLarge):
        return None  # a courtesy: the generic line stays
    finally:
        client.close()
    newest, oldest = edges.get("newest"), edges.get("oldest")
    if newest is None or oldest is None:
        return None
    if newest < window.start_ts:
        return (f"{span}; the newest sample of {name} is from {_when(newest)} "
                f"({_ago(window.start_ts - newest)} before the window's start): "
                "move --since/--until")
    if oldest > window.end_ts:
        return (f"{span}; the oldest sample of {name} in the last {LOCATE_SPAN_TEXT} is from "
                f"{_when(oldest)} ({_ago(oldest - window.end_ts)} after the window's end): "
                "move --since/--until")
    return (f"{span}; {name} has samples from {_when(oldest)} to {_when(newest)}, none in "
            "the window (a gap in scraping?): move --since/--until")


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _span_text(start_ts: float, end_ts: float) -> str:
    """``2026-12-01 10:00–10:30 UTC`` (the date once when both ends share it)."""
    a, b = (datetime.fromtimestamp(t, tz=UTC) for t in (start_ts, end_ts))
    if a.date() == b.date():
        return f"{a:%Y-%m-%d %H:%M}–{b:%H:%M} UTC"
    return f"{a:%Y-%m-%d %H:%M}–{b:%Y-%m-%d %H:%M} UTC"


def _ago(seconds: float) -> str:
    """A distance in time in the units module's wording: ``45s``, ``12m30s``, ``3h05m``."""
    return fmt_duration(max(0.0, seconds))


def capabilities(signals: frozenset[str], by_role: dict[str, list[str]]) -> tuple[Capability, ...]:
    """Per rule: can the live metrics judge it (yes), in part (partial), or not (no)?

    Reads each rule's ``inputs`` declaration (``Inputs.live``, ``roles``, ``peers``).
    """
    from pdprobe.rules.catalog import ALL_RULES

    out: list[Capability] = []
    for rule in ALL_RULES:
        req = rule.inputs  # the rule's own declaration: live metrics, roles, peers
        if not req.live:
            out.append(Capability(rule.code, rule.name, rule.cause, "no",
                                  "needs inputs live metrics do not carry: "
                                  + "; ".join(req.needs)))
            continue
        missing_roles = [r for r in req.roles if not by_role.get(r)]
        if missing_roles:
            out.append(Capability(rule.code, rule.name, rule.cause, "no",
                                  f"no instance's role is {' or '.join(missing_roles)} (set "
                                  f"--prefill-match/--decode-match or a metrics-map role selector)"))
            continue
        if req.peers and max((len(by_role.get(r, [])) for r in ("prefill", "decode")),
                             default=0) < 2:
            out.append(Capability(rule.code, rule.name, rule.cause, "no",
                                  "needs two or more instances of one role to compare"))
            continue
        met = [n for n in req.live if any(s in signals for s in n.signals)]
        unmet = [n for n in req.live if n not in met]
        if not unmet:
            verdict, reason = "yes", "has " + ", ".join(n.label for n in met)
        elif met:
            verdict = "partial"
            reason = (f"has {', '.join(n.label for n in met)}; lacks "
                      f"{', '.join(n.label for n in unmet)}")
        else:
            verdict = "no"
            reason = f"lacks {', '.join(n.label for n in unmet)}"
        out.append(Capability(rule.code, rule.name, rule.cause, verdict, reason))
    return tuple(out)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
