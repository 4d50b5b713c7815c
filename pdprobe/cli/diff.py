"""``pdprobe diff BEFORE.json AFTER.json``: what changed between two saved reports."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from pdprobe.cli.common import (
    OutputOpt,
    env,
    info,
    is_stdout,
    shared_format_default,
    write_output,
)


class DiffFormat(StrEnum):
    """``pdprobe diff --format``: text, Markdown (for a pull request) or JSON."""
    text = "text"
    markdown = "markdown"
    json = "json"


def diff_command(
    before: Annotated[Path, typer.Argument(metavar="BEFORE.json",
                                           help="The earlier report ('pdprobe diagnose -f json').")],
    after: Annotated[Path, typer.Argument(metavar="AFTER.json",
                                          help="The later report, e.g. after a scale-out.")],
    fmt: Annotated[DiffFormat, typer.Option(
        "--format", "-f", envvar=env("diff-format"),
        default_factory=shared_format_default(DiffFormat, DiffFormat.text),
        show_default="text, or PDPROBE_FORMAT when it is one of these",
        help="Output format: text, markdown (for a ticket) or json.")],
    output: OutputOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", envvar=env("diff-quiet"),
                                        help="Print only the verdict line (-o still writes "
                                             "the full diff).")] = False,
) -> int:
    """Compare two saved reports: findings gone/new/worse, key figures, instances that moved.

    Exit code for deploy checks: 0 nothing new or worse, 1 a new or worse warning, 2 a new or
    worse critical finding, 3 a report is unreadable or AFTER could not judge the cluster.
    """
    from pdprobe.report.diff_format import RENDERERS
    from pdprobe.report.load import load_report
    from pdprobe.services.diff import diff_reports

    result = diff_reports(load_report(before), load_report(after),
                          before_label=before.name, after_label=after.name)
    text = RENDERERS[fmt.value](result)
    if quiet and is_stdout(output):
        write_output(result.verdict + "\n", None)
    else:
        write_output(text, output, inputs=[before, after])
        if quiet:
            write_output(result.verdict + "\n", None)
        if not is_stdout(output):
            info(f"wrote {fmt.value} diff to {output}")
    return result.exit_code


def register(app: typer.Typer) -> None:
    """Add ``pdprobe diff`` to the application."""
    app.command("diff")(diff_command)
