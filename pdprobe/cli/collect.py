"""``pdprobe collect --prometheus URL -o FILE``: capture a live cluster for offline diagnosis."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pdprobe.cli.common import StderrProgress, check_output, env, info
from pdprobe.cli.live_options import live_options, require_target
from pdprobe.collectors.prometheus_target import PrometheusTarget

CaptureOpt = Annotated[Path, typer.Option(
    "--output", "-o", envvar=env("output"),
    help="Capture file to write (Parquet), or a folder to put a timestamped one in; never a "
         "link, device or one of the run's input files.")]


@live_options
def collect_command(
    output: CaptureOpt,
    target: PrometheusTarget | None = None,
) -> int:
    """Capture what diagnose needs from a live cluster into one file ('pdprobe diagnose FILE')."""
    from pdprobe.collectors.base import ReadContext
    from pdprobe.collectors.capture import capture_path
    from pdprobe.services.collect import collect

    live = require_target("collect", target)
    path = capture_path(output)
    check_output(path, live.files)  # before querying: never onto an input, link or device
    progress = StderrProgress()
    try:
        result = collect(live, path, ReadContext(progress=progress))
    finally:
        progress.close()
    for warning in result.warnings:
        info(f"warning: {warning}")
    roles = ", ".join(f"{n} {r}" for r, n in sorted(result.instances.items()))
    rows = sum(result.rows.values())
    info(f"wrote {result.path} ({result.bytes / 1e6:.1f} MB): {roles or 'no instances'}, "
         f"{rows:,} rows from {result.queries} queries in {result.seconds:.1f} s; "
         f"diagnose it with 'pdprobe diagnose {result.path}'")
    return 0


def register(app: typer.Typer) -> None:
    """Add ``pdprobe collect`` to the application."""
    app.command("collect")(collect_command)
