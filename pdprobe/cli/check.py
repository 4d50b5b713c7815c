"""``pdprobe check --prometheus URL``: a doctor for the live path (exit 0 usable, 3 not)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from pdprobe.cli.common import (
    EXIT_OK,
    EXIT_UNKNOWN,
    DecodeMatchOpt,
    OutputOpt,
    PrefillMatchOpt,
    check_output,
    env,
    is_stdout,
    write_output,
)
from pdprobe.cli.live_options import live_options, require_target
from pdprobe.collectors.prometheus_target import PrometheusTarget


class CheckFormat(StrEnum):
    """``pdprobe check --format``: text for people, JSON for scripts."""
    text = "text"
    json = "json"


CheckFormatOpt = Annotated[CheckFormat, typer.Option(
    # Its own variable: the shared PDPROBE_FORMAT may hold a report format (html, prometheus)
    # that check does not have, which made every `check` fail in such an environment.
    "--format", "-f", envvar=env("check-format"), help="Output format: text or json.")]


@live_options
def check_command(
    fmt: CheckFormatOpt = CheckFormat.text,
    output: OutputOpt = None,
    prefill_match: PrefillMatchOpt = None,
    decode_match: DecodeMatchOpt = None,
    target: PrometheusTarget | None = None,
) -> int:
    """Check that pdprobe can diagnose a live cluster, and what it will be able to judge."""
    from pdprobe.collectors.roles import RoleOptions
    from pdprobe.report.check_view import render_text, to_json
    from pdprobe.services.check import check

    live = require_target("check", target)
    if output is not None and not is_stdout(output):
        check_output(output, live.files)  # before querying: a refused -o fails fast
    result = check(live, roles=RoleOptions(prefill_match=prefill_match, decode_match=decode_match))
    text = to_json(result) if fmt == CheckFormat.json else render_text(result)
    write_output(text, output, inputs=live.files)
    return EXIT_OK if result.usable else EXIT_UNKNOWN


def register(app: typer.Typer) -> None:
    """Add ``pdprobe check`` to the application."""
    app.command("check")(check_command)
