"""Shared CLI plumbing: common options, atomic output, exit codes, progress on stderr."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from pdprobe.report.base import RenderOptions
    from pdprobe.report.model import Report

EXIT_OK: Final = 0
EXIT_WARNING: Final = 1
EXIT_CRITICAL: Final = 2
EXIT_UNKNOWN: Final = 3


def env(option: str) -> str:
    """``--slo-ttft`` reads ``PDPROBE_SLO_TTFT``."""
    return "PDPROBE_" + option.lstrip("-").replace("-", "_").upper()


class OutputFormat(StrEnum):
    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"
    prometheus = "prometheus"


class FailOn(StrEnum):
    warning = "warning"
    critical = "critical"


FormatOpt = Annotated[OutputFormat, typer.Option(
    "--format", "-f", envvar=env("format"),
    help="Report format: text (rich terminal view), json, markdown, html, or prometheus "
         "(node_exporter textfile format).")]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", envvar=env("output"),
    help="Write the report to this file (atomically) instead of stdout.")]
SloTtftOpt = Annotated[float | None, typer.Option(
    "--slo-ttft", envvar=env("slo-ttft"), min=0.0,
    help="TTFT objective in seconds (for SLO attainment and the capacity model).")]
SloTpotOpt = Annotated[float | None, typer.Option(
    "--slo-tpot", envvar=env("slo-tpot"), min=0.0,
    help="TPOT objective in seconds per output token.")]
FailOnOpt = Annotated[FailOn, typer.Option(
    "--fail-on", envvar=env("fail-on"),
    help="Lowest finding severity that makes the exit code non-zero.")]
PrefillMatchOpt = Annotated[str | None, typer.Option(
    "--prefill-match", envvar=env("prefill-match"),
    help="Regular expression: instances whose name matches are prefill (overrides labels).")]
DecodeMatchOpt = Annotated[str | None, typer.Option(
    "--decode-match", envvar=env("decode-match"),
    help="Regular expression: instances whose name matches are decode (overrides labels).")]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", "-v", envvar=env("verbose"), help="Add per-instance detail to the text view.")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", envvar=env("quiet"), help="Print only the verdict line (for runbooks).")]


def exit_code_for(report: Report, fail_on: FailOn) -> int:
    """Nagios convention: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; honours --fail-on."""
    if report.status == "unknown":
        return EXIT_UNKNOWN
    if report.status == "critical":
        return EXIT_CRITICAL
    if report.status == "warning" and fail_on == FailOn.warning:
        return EXIT_WARNING
    return EXIT_OK


def write_output(text: str, output: Path | None) -> None:
    """Write to stdout, or atomically to ``output`` (temp file renamed; nothing half-written)."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from pdprobe.errors import UsageError

    directory = output.parent if str(output.parent) else Path(".")
    if not directory.is_dir():
        raise UsageError(f"{output}: folder {directory} does not exist", hint="create it first")
    if output.is_dir():
        raise UsageError(f"--output {output} is a folder", hint="name a file inside it")
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        from pdprobe.collectors.io import default_file_mode

        os.chmod(tmp, default_file_mode())  # mkstemp makes 0600; a report is for sharing
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


MAX_WIDTH: Final = 100  # the text view is laid out for 100 columns; narrower terminals fold


def render_options(output: Path | None, *, verbose: bool = False, quiet: bool = False) -> RenderOptions:
    """Presentation for stdout (a TTY: its width, colour unless NO_COLOR) or a file (plain)."""
    import shutil

    from pdprobe.report.base import RenderOptions

    to_terminal = output is None and sys.stdout.isatty()
    width = min(MAX_WIDTH, shutil.get_terminal_size().columns) if to_terminal else MAX_WIDTH
    return RenderOptions(width=width, color=use_color() and output is None, verbose=verbose,
                         quiet=quiet)


def use_color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


class StderrProgress:
    """Progress on stderr, shown only on a TTY and only once work has taken over a second."""

    DELAY_S: Final = 1.0

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._enabled = sys.stderr.isatty() and "NO_COLOR" not in os.environ

    def __call__(self, what: str, fraction: float) -> None:
        if not self._enabled or time.monotonic() - self._start < self.DELAY_S:
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import Progress

            self._progress = Progress(console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(what, total=1.0)
        assert self._task is not None
        self._progress.update(self._task, completed=fraction, description=what)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def info(message: str) -> None:
    """A log line on stderr (never on stdout, which carries the report)."""
    sys.stderr.write(f"pdprobe: {message}\n")
