"""``pdprobe watch``: re-diagnose a live cluster every interval, report changes only, and
optionally serve the last verdict on ``/metrics`` for Prometheus to scrape.

Memory stays bounded over days: only the previous report (for the comparison) and the last
exposition text are kept. The exporter is the stdlib ``http.server`` serving the same text as
``--format prometheus`` (``report/prometheus_format.py``) plus two watch counters, so the metric
names match the textfile runbook exactly and no dependency is added (``prometheus_client``
would need every family re-declared as collectors for the same output).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from pdprobe.errors import PdprobeError
from pdprobe.report.base import RenderOptions
from pdprobe.report.model import Report
from pdprobe.report.prometheus_format import render as render_textfile
from pdprobe.report.prometheus_format import render_unknown
from pdprobe.report.verdict import verdict_line
from pdprobe.services.diagnose import DiagnoseRequest, diagnose
from pdprobe.services.diff import diff_reports

# Content type of the Prometheus text exposition format 0.0.4.
EXPOSITION_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


class Exposition:
    """The text ``/metrics`` serves, replaced whole after each round (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._text = "# pdprobe watch: no round finished yet\n"

    def set(self, text: str) -> None:
        """Replace the exposition served on ``/metrics`` (thread-safe)."""
        with self._lock:
            self._text = text

    def get(self) -> str:
        """The exposition served on ``/metrics`` now."""
        with self._lock:
            return self._text


def serve_metrics(host: str, port: int, exposition: Exposition) -> ThreadingHTTPServer:
    """Start ``/metrics`` on a daemon thread; the caller shuts the returned server down."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = exposition.get().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", EXPOSITION_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes are not news; stderr carries the changes

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="pdprobe-metrics", daemon=True).start()
    return server


@dataclass
class WatchState:
    """What one round leaves for the next: the last report (or why there is none)."""

    report: Report | None = None
    reason: str | None = None  # why the last round could not judge
    rounds: int = 0
    failed_rounds: int = 0


def _stamp() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def watch_round(request: DiagnoseRequest, state: WatchState) -> tuple[str | None, str]:
    """Diagnose once: (the line to print when something changed, else None; the exposition)."""
    started = time.monotonic()
    state.rounds += 1
    try:
        report = diagnose(request)
    except PdprobeError as exc:
        state.failed_rounds += 1
        reason = exc.one_line()
        changed = state.report is not None or reason != state.reason
        state.report, state.reason = None, reason
        line = f"{_stamp()}  UNKNOWN  could not judge: {reason}" if changed else None
        return line, render_unknown(reason) + _watch_metrics(state, started)
    previous = state.report
    state.report, state.reason = report, None
    text = render_textfile(report, RenderOptions()) + _watch_metrics(state, started)
    if previous is None:
        return f"{_stamp()}  {verdict_line(report)}", text
    d = diff_reports(previous, report)
    if previous.status == report.status and all(f.change == "same" for f in d.findings):
        return None, text
    return f"{_stamp()}  {d.verdict} — now {verdict_line(report)}", text


def _watch_metrics(state: WatchState, started: float) -> str:
    return ("# HELP pdprobe_watch_rounds_total Diagnoses run by this watch.\n"
            "# TYPE pdprobe_watch_rounds_total counter\n"
            f"pdprobe_watch_rounds_total {state.rounds}\n"
            "# HELP pdprobe_watch_failed_rounds_total Rounds that could not judge the cluster.\n"
            "# TYPE pdprobe_watch_failed_rounds_total counter\n"
            f"pdprobe_watch_failed_rounds_total {state.failed_rounds}\n"
            "# HELP pdprobe_watch_round_duration_seconds How long the last round took.\n"
            "# TYPE pdprobe_watch_round_duration_seconds gauge\n"
            f"pdprobe_watch_round_duration_seconds {time.monotonic() - started:.3f}\n")


def watch(request: DiagnoseRequest, interval_s: float, *, say: Callable[[str], None],
          exposition: Exposition | None = None, rounds: int | None = None,
          sleep: Callable[[float], None] = time.sleep) -> WatchState:
    """Rounds every ``interval_s`` (from one start to the next) until ``rounds`` or a signal."""
    state = WatchState()
    assert request.prometheus is not None
    while rounds is None or state.rounds < rounds:
        started = time.monotonic()
        line, text = watch_round(replace(request), state)
        if exposition is not None:
            exposition.set(text)
        if line is not None:
            say(line)
        if rounds is not None and state.rounds >= rounds:
            break
        sleep(max(0.0, interval_s - (time.monotonic() - started)))
    return state
