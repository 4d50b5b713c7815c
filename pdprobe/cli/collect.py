"""``pdprobe collect --prometheus URL -o FILE``: capture a live cluster for offline diagnosis."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pdprobe.cli.common import StderrProgress, env, info
from pdprobe.cli.live_options import (
    BasicAuthPasswordFileOpt,
    BasicAuthUserOpt,
    BearerTokenFileOpt,
    CaBundleOpt,
    HeaderOpt,
    InsecureOpt,
    MetricsMapOpt,
    PrometheusOpt,
    SelectorOpt,
    SinceOpt,
    StepOpt,
    TimeoutOpt,
    UntilOpt,
    build_target,
    require_target,
)

CaptureOpt = Annotated[Path, typer.Option(
    "--output", "-o", envvar=env("output"),
    help="Capture file to write (Parquet), or a folder to put a timestamped one in.")]


def collect_command(
    output: CaptureOpt,
    prometheus: PrometheusOpt = None,
    since: SinceOpt = "30m",
    until: UntilOpt = None,
    step: StepOpt = None,
    selector: SelectorOpt = "",
    metrics_map: MetricsMapOpt = None,
    bearer_token_file: BearerTokenFileOpt = None,
    basic_auth_user: BasicAuthUserOpt = None,
    basic_auth_password_file: BasicAuthPasswordFileOpt = None,
    header: HeaderOpt = None,
    ca_bundle: CaBundleOpt = None,
    insecure: InsecureOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> int:
    """Capture what diagnose needs from a live cluster into one file ('pdprobe diagnose FILE')."""
    from pdprobe.collectors.base import ReadContext
    from pdprobe.services.collect import collect

    target = require_target("collect", build_target(
        prometheus, since, until, step, selector, metrics_map, bearer_token_file, basic_auth_user,
        basic_auth_password_file, header, ca_bundle, insecure, timeout))
    progress = StderrProgress()
    try:
        result = collect(target, output, ReadContext(progress=progress))
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
    app.command("collect")(collect_command)
