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
    env,
    write_output,
)
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


class CheckFormat(StrEnum):
    text = "text"
    json = "json"


CheckFormatOpt = Annotated[CheckFormat, typer.Option(
    "--format", "-f", envvar=env("format"), help="Output format: text or json.")]


def check_command(
    prometheus: PrometheusOpt = None,
    fmt: CheckFormatOpt = CheckFormat.text,
    output: OutputOpt = None,
    prefill_match: PrefillMatchOpt = None,
    decode_match: DecodeMatchOpt = None,
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
    """Check that pdprobe can diagnose a live cluster, and what it will be able to judge."""
    from pdprobe.collectors.roles import RoleOptions
    from pdprobe.services.check import check, render_text, to_json

    target = require_target("check", build_target(
        prometheus, since, until, step, selector, metrics_map, bearer_token_file, basic_auth_user,
        basic_auth_password_file, header, ca_bundle, insecure, timeout))
    result = check(target, roles=RoleOptions(prefill_match=prefill_match,
                                             decode_match=decode_match))
    text = to_json(result) if fmt == CheckFormat.json else render_text(result)
    write_output(text, output)
    return EXIT_OK if result.usable else EXIT_UNKNOWN


def register(app: typer.Typer) -> None:
    app.command("check")(check_command)
