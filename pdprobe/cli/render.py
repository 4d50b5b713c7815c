"""``pdprobe render REPORT.json``: re-render a saved JSON report without collecting again."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pdprobe.cli.common import (
    FailOn,
    FailOnOpt,
    OutputFormat,
    OutputOpt,
    QuietOpt,
    RenderFormatOpt,
    VerboseOpt,
    exit_code_for,
    info,
    is_stdout,
    textfile_on_error,
    textfile_targets,
    write_report,
)


def render_command(
    report_file: Annotated[Path, typer.Argument(
        metavar="REPORT.json",
        help="A report written by 'pdprobe diagnose --format json' ('-' reads stdin).")],
    fmt: RenderFormatOpt = OutputFormat.text,
    output: OutputOpt = None,
    fail_on: FailOnOpt = FailOn.warning,
    verbose: VerboseOpt = False,
    quiet: QuietOpt = False,
) -> int:
    """Re-render a saved JSON report as text, Markdown, HTML or Prometheus textfile.

    Exits with the saved report's status code (0 ok, 1 warning, 2 critical, 3 unknown),
    honouring --fail-on, like 'pdprobe diagnose'.
    """
    from pdprobe.report.load import load_report

    # An unreadable report with -f prometheus still replaces the textfile (status 3, reason).
    with textfile_on_error(textfile_targets(fmt.value, output, None), [report_file]):
        report = load_report(report_file)
        write_report(report, fmt.value, output, [report_file], verbose=verbose, quiet=quiet)
    if not is_stdout(output):
        info(f"wrote {fmt.value} report to {output}")
    return exit_code_for(report, fail_on)


def register(app: typer.Typer) -> None:
    """Add ``pdprobe render`` to the application."""
    app.command("render")(render_command)
