"""``pdprobe watch --prometheus URL``: re-diagnose every interval, print changes only."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pdprobe.cli.common import (
    DecodeMatchOpt,
    PrefillMatchOpt,
    SloTpotOpt,
    SloTtftOpt,
    env,
    info,
)
from pdprobe.cli.live_options import live_options, parse_duration, require_target
from pdprobe.collectors.prometheus_target import PrometheusTarget

# Shortest interval: a round of live queries takes seconds; faster would only load Prometheus.
MIN_INTERVAL_S = 10.0


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` -> (host, port); the host defaults to loopback."""
    from pdprobe.errors import UsageError

    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise UsageError(f"--listen {text!r} is not HOST:PORT",
                         hint="e.g. --listen 127.0.0.1:9464 (see 'pdprobe watch --help')")
    return host, number


@live_options
def watch_command(
    interval: Annotated[str, typer.Option(
        "--interval", envvar=env("watch-interval"),
        help="Time between diagnoses, e.g. 90s, 5m, 6m30s.")] = "5m",
    listen: Annotated[str | None, typer.Option(
        "--listen", envvar=env("watch-listen"),
        help="Serve the findings and key figures on http://HOST:PORT/metrics "
             "(':PORT' listens on 127.0.0.1 only).")] = None,
    count: Annotated[int | None, typer.Option(
        "--count", envvar=env("watch-count"), min=1,
        help="Stop after this many diagnoses (default: until stopped).")] = None,
    slo_ttft: SloTtftOpt = None,
    slo_tpot: SloTpotOpt = None,
    prefill_match: PrefillMatchOpt = None,
    decode_match: DecodeMatchOpt = None,
    target: PrometheusTarget | None = None,
) -> int:
    """Re-diagnose a live cluster every --interval; print a line only when the verdict or a
    finding changes. Stop with Ctrl-C or SIGTERM (exit 130/143)."""
    from pdprobe.collectors.roles import RoleOptions
    from pdprobe.errors import UsageError
    from pdprobe.services.diagnose import DiagnoseRequest
    from pdprobe.services.watch import Exposition, serve_metrics, watch

    live = require_target("watch", target)
    interval_s = parse_duration(interval, "--interval")
    if interval_s < MIN_INTERVAL_S:
        raise UsageError(f"--interval {interval} is shorter than {MIN_INTERVAL_S:.0f}s",
                         hint="a round of live queries takes seconds; use e.g. 1m")
    request = DiagnoseRequest(prometheus=live, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot,
                              roles=RoleOptions(prefill_match=prefill_match,
                                                decode_match=decode_match))
    exposition = Exposition() if listen else None
    server = None
    if listen:
        host, port = parse_listen(listen)
        try:
            server = serve_metrics(host, port, exposition)  # type: ignore[arg-type]
        except OSError as exc:
            raise UsageError(f"--listen {listen}: cannot listen ({exc.strerror})",
                             hint="choose a free port") from None
        info(f"serving /metrics on http://{host}:{server.server_address[1]}/metrics")

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        watch(request, interval_s, say=say, exposition=exposition, rounds=count)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return 0


def register(app: typer.Typer) -> None:
    """Add ``pdprobe watch`` to the application."""
    app.command("watch")(watch_command)
