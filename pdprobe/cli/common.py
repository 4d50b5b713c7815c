"""Shared CLI plumbing: common options, atomic output, exit codes, progress on stderr."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from pdprobe.redact import scrub
from pdprobe.safe_text import clean

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
    """Report output formats, each a renderer registered in ``report/base.py``."""
    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"
    prometheus = "prometheus"


class FailOn(StrEnum):
    """``--fail-on``: the lowest finding severity that makes the exit code non-zero."""
    warning = "warning"
    critical = "critical"


def format_envvars(command: str) -> list[str]:
    """``PDPROBE_<COMMAND>_FORMAT`` first, then the shared ``PDPROBE_FORMAT``: for commands that
    take every report format, so any value of the shared variable is valid for them."""
    return [env(f"{command}-format"), env("format")]


def shared_format_default(choices: type[StrEnum], fallback: StrEnum) -> Callable[[], StrEnum]:
    """A default that takes the shared ``PDPROBE_FORMAT`` when it names one of ``choices``
    (``PDPROBE_FORMAT=html`` is for the report commands, and must not break ``diff`` or
    ``ratio``), else ``fallback``. The command's own variable is the option's envvar."""
    def default() -> StrEnum:
        value = os.environ.get(env("format"), "").strip().lower()
        return choices(value) if value in {c.value for c in choices} else fallback
    return default


REPORT_FORMAT_HELP: Final = ("Report format: text (rich terminal view), json, markdown, html, "
                             "or prometheus (node_exporter textfile format).")
FormatOpt = Annotated[OutputFormat, typer.Option(
    "--format", "-f", envvar=format_envvars("diagnose"), help=REPORT_FORMAT_HELP)]
RenderFormatOpt = Annotated[OutputFormat, typer.Option(
    "--format", "-f", envvar=format_envvars("render"), help=REPORT_FORMAT_HELP)]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", envvar=env("output"),
    help="Write the report to this file (atomically; never onto an input, a link or a device) "
         "instead of stdout ('-' is stdout).")]
# The objectives' defaults as --help states them; analysis/slo.py's DEFAULT_SLO_TTFT_S and
# DEFAULT_SLO_TPOT_S hold them (not imported here: it loads pandas, and --help stays fast;
# tests/cli/test_app.py checks the two agree).
SLO_TTFT_DEFAULT_HELP: Final = "2 s"
SLO_TPOT_DEFAULT_HELP: Final = "0.1 s"
SloTtftOpt = Annotated[float | None, typer.Option(
    "--slo-ttft", envvar=env("slo-ttft"), min=0.0, show_default=SLO_TTFT_DEFAULT_HELP,
    help="TTFT objective in seconds (for SLO attainment and the capacity model).")]
SloTpotOpt = Annotated[float | None, typer.Option(
    "--slo-tpot", envvar=env("slo-tpot"), min=0.0, show_default=SLO_TPOT_DEFAULT_HELP,
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
TextfileOpt = Annotated[Path | None, typer.Option(
    "--textfile", envvar=env("textfile"),
    help="Also write the Prometheus textfile (node_exporter's textfile collector) here, on "
         "every run: an UNKNOWN run writes status 3 and the reason, so alerts never read the "
         "previous run's findings.")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", envvar=env("quiet"),
    help="Print only the verdict line on stdout (for runbooks); -o still gets the full report.")]


def textfile_targets(fmt: str, output: Path | None, textfile: Path | None) -> list[Path | None]:
    """Where this run writes a Prometheus textfile: ``-o`` (or stdout) with ``-f prometheus``,
    and ``--textfile``."""
    targets: list[Path | None] = [output] if fmt == "prometheus" else []
    if textfile is not None:
        targets.append(textfile)
    return targets


@contextlib.contextmanager
def textfile_on_error(targets: Sequence[Path | None],
                      inputs: Sequence[str | Path] = ()) -> Iterator[None]:
    """A run that ends with a ``PdprobeError`` (exit 3 before a report exists) still writes
    its Prometheus textfiles: status 3, the reason and the time, replacing the previous run's
    (atomically, with ``write_output``'s checks). The error then ends the run as usual."""
    from pdprobe.errors import PdprobeError

    try:
        yield
    except PdprobeError as exc:
        if targets:
            from pdprobe.report.prometheus_format import render_unknown

            text = render_unknown(exc.one_line())
            for target in targets:
                with contextlib.suppress(PdprobeError):  # e.g. -o is refused: the error stands
                    write_output(text, target, inputs)
        raise


def exit_code_for(report: Report, fail_on: FailOn) -> int:
    """Nagios convention: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; honours --fail-on."""
    if report.status == "unknown":
        return EXIT_UNKNOWN
    if report.status == "critical":
        return EXIT_CRITICAL
    if report.status == "warning" and fail_on == FailOn.warning:
        return EXIT_WARNING
    return EXIT_OK


def is_stdout(output: Path | None) -> bool:
    """No ``-o``, or ``-o -``: the report goes to stdout."""
    return output is None or str(output) == "-"


# Temp files being written, removed by ``remove_pending_temps`` when a run ends any way at all
# (a signal can interrupt the writer's own cleanup; ``cli/app.py`` calls it last).
_pending_temps: set[str] = set()
_stdout_closed = False
# Temp names keep this much of the output's name, so a 255-byte name still leaves room.
_TEMP_NAME_KEEP: Final = 100
_SPECIAL_KINDS: Final = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def mark_stdout_closed() -> None:
    """The process started without a stdout (``>&-``): reports for stdout fail cleanly."""
    global _stdout_closed
    _stdout_closed = True


@contextlib.contextmanager
def track_temp(path: str | Path) -> Iterator[None]:
    """Remove ``path`` when the block is left (if it still exists), signals included."""
    name = str(path)
    _pending_temps.add(name)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
        _pending_temps.discard(name)


def remove_pending_temps() -> None:
    """Delete temp files whose writer was interrupted before its own cleanup ran."""
    for name in list(_pending_temps):
        with contextlib.suppress(OSError):
            os.unlink(name)
        _pending_temps.discard(name)


def check_output(output: Path, inputs: Sequence[str | Path] = (), option: str = "--output") -> None:
    """Refuse an output path that is not a regular file to replace, or is an input of the run.

    Symbolic links, FIFOs, devices (``/dev/null``, ``/dev/full``), sockets and folders are
    refused: renaming a file onto them would replace them. An input is matched by inode, also
    when it is a file inside an input folder or reached through another name.
    """
    from pdprobe.errors import UsageError

    shown = f"{option} {clean(str(output))}"
    try:
        st = os.lstat(output)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{shown}: cannot inspect it ({exc.strerror})",
                         hint="check the path and permissions") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{shown} is a symbolic link, which pdprobe does not replace",
                             hint="name the file it points to, or another file")
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{shown} is a folder", hint="name a file inside it")
        for test, kind in _SPECIAL_KINDS:
            if test(st.st_mode):
                raise UsageError(f"{shown} is {kind}, not a regular file",
                                 hint="write to a regular file, or leave out -o for stdout")
        if _is_input((st.st_dev, st.st_ino), inputs):
            raise UsageError(f"{shown} is one of this run's inputs; writing it would destroy it",
                             hint="write the output to another file")
    directory = output.parent if str(output.parent) else Path(".")
    if not directory.is_dir():
        raise UsageError(f"{shown}: folder {clean(str(directory))} does not exist",
                         hint="create it first")


def _is_input(key: tuple[int, int], inputs: Sequence[str | Path]) -> bool:
    for item in inputs:
        if str(item) == "-":
            continue
        try:
            st = os.stat(item)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == key:
            return True
        if stat.S_ISDIR(st.st_mode):
            for root, _dirs, files in os.walk(item):
                for name in files:
                    with contextlib.suppress(OSError):
                        inner = os.stat(os.path.join(root, name))
                        if (inner.st_dev, inner.st_ino) == key:
                            return True
    return False


def write_output(text: str, output: Path | None, inputs: Sequence[str | Path] = ()) -> None:
    """Write a report to stdout (no ``-o`` or ``-o -``) or atomically to ``output``.

    The text passes the redaction layer first. A file is written to a temp file in the same
    folder and renamed into place, so a reader never sees half a report and a failure leaves
    the old file; the temp file is removed on any exit. ``inputs`` are the run's input paths
    (files or folders): ``output`` may not be one of them (``check_output``).
    """
    from pdprobe.errors import PdprobeError

    text = scrub(text)
    if is_stdout(output):
        _write_stdout(text)
        return
    assert output is not None
    check_output(output, inputs)
    data = text.encode("utf-8", "backslashreplace")
    directory = output.parent if str(output.parent) else Path(".")
    tmp = directory / f".{output.name[:_TEMP_NAME_KEEP]}.{secrets.token_hex(6)}.tmp"
    shown = clean(str(output))
    with track_temp(tmp):
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            from pdprobe.collectors.io import default_file_mode

            os.chmod(tmp, default_file_mode())  # 0600 above; a report is for sharing
            check_output(output, inputs)  # still a regular file (or absent) before the rename
            os.replace(tmp, output)
        except OSError as exc:
            raise PdprobeError(f"cannot write {shown} ({_os_reason(exc, directory)})",
                               hint="choose another folder with -o, or free space") from None


def _os_reason(exc: OSError, directory: Path) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"folder {clean(str(directory))} is not writable: {exc.strerror}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    return exc.strerror or type(exc).__name__


def _write_stdout(text: str) -> None:
    from pdprobe.errors import PdprobeError

    if _stdout_closed or sys.stdout is None:
        raise PdprobeError("cannot write the report: stdout is closed",
                           hint="pass -o FILE, or run pdprobe with a stdout")
    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:
            encoding = sys.stdout.encoding or "utf-8"
            sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # the reader left (| head): cli/app.py ends quietly
    except OSError as exc:
        raise PdprobeError(f"cannot write the report to stdout ({exc.strerror})",
                           hint="pass -o FILE, or check what stdout is connected to") from None


MAX_WIDTH: Final = 100  # the text view is laid out for 100 columns; narrower terminals fold


def render_options(output: Path | None, *, verbose: bool = False, quiet: bool = False) -> RenderOptions:
    """Presentation for stdout (a TTY: its width, colour unless NO_COLOR) or a file (plain)."""
    import shutil

    from pdprobe.report.base import RenderOptions

    to_terminal = is_stdout(output) and sys.stdout.isatty()
    width = min(MAX_WIDTH, shutil.get_terminal_size().columns) if to_terminal else MAX_WIDTH
    return RenderOptions(width=width, color=use_color() and is_stdout(output), verbose=verbose,
                         quiet=quiet)


def write_report(report: Report, fmt: str, output: Path | None,
                 inputs: Sequence[str | Path], *, verbose: bool, quiet: bool) -> None:
    """The report in ``fmt`` to ``-o`` (or stdout). With ``-q`` stdout gets only the verdict
    line, whatever the format, while ``-o`` still gets the full report: a runbook reads line
    one and keeps the file."""
    from pdprobe.report.base import renderer_for

    if not (quiet and is_stdout(output)):
        text = renderer_for(fmt)(report, render_options(output, verbose=verbose))
        write_output(text, output, inputs=inputs)
    if quiet:
        write_output(renderer_for("text")(report, render_options(None, quiet=True)), None)


def use_color() -> bool:
    """Whether to colour standard output: a terminal, without ``NO_COLOR`` and not ``TERM=dumb``."""
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
        """Stop the progress display (idempotent)."""
        if self._progress is not None:
            self._progress.stop()


def info(message: str) -> None:
    """A log line on stderr (never on stdout, which carries the report): redacted, and one
    line without escape sequences whatever names or server text it quotes."""
    line = clean(scrub(message))
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(f"pdprobe: {line}\n")
