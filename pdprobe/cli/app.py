"""The ``pdprobe`` command. Thin: parses options, calls a service, renders, exits.

This module is the only place that exits. Every ``PdprobeError`` becomes one line on stderr
and exit code 3 (UNKNOWN); so does any unexpected error (the traceback only with
``PDPROBE_DEBUG=1``). Every line passes the redaction layer (``pdprobe.redact``) and
``safe_text.clean``. SIGINT/SIGTERM/SIGHUP unwind the run like an exception, so temp files are
removed, and end it with one line and exit code 128 + the signal number. Heavy libraries are imported inside commands so ``--help`` stays fast.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Final

import typer

from pdprobe import __version__
from pdprobe.cli.common import EXIT_UNKNOWN, mark_stdout_closed, remove_pending_temps
from pdprobe.heap import arrow_pool_default, keep_freed_memory
from pdprobe.redact import scrub
from pdprobe.safe_text import clean

# A run ended by signal N exits 128 + N (130 for Ctrl-C, 143 for SIGTERM), as shells report.
EXIT_SIGNAL_BASE: Final = 128

app = typer.Typer(
    name="pdprobe",
    help="Diagnose prefill/decode imbalance in disaggregated LLM serving clusters.",
    no_args_is_help=False,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Each module defines `register(app)`; one module per command (group).
COMMAND_MODULES: Final = (
    "pdprobe.cli.diagnose",
    "pdprobe.cli.explain",
    "pdprobe.cli.ratio",
    "pdprobe.cli.render",
    "pdprobe.cli.simulate",
    "pdprobe.cli.collect",
    "pdprobe.cli.check",
    "pdprobe.cli.diff",
    "pdprobe.cli.watch",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pdprobe {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version and exit."),
) -> None:
    """Diagnose prefill/decode imbalance in disaggregated LLM serving clusters."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


class Signalled(BaseException):
    """SIGTERM, SIGINT or SIGHUP arrived: unwinds like Ctrl-C so every ``finally`` runs (temp
    files go), but is not a ``KeyboardInterrupt`` (typer turns those into a silent exit 130)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# The signals that end a run cleanly, and the word each gets on stderr. Exit code 128 + signal
# number, as shells report a process killed by it.
_SIGNALS: Final = ((signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated"),
                   (signal.SIGHUP, "hung up"))


def _raise_signalled(signum: int, _frame: object) -> None:
    raise Signalled(signum)


@contextlib.contextmanager
def _signals_as_exceptions() -> Iterator[None]:
    """Turn the ending signals into ``Signalled`` for the run (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum, _ in _SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            previous[signum] = signal.signal(signum, _raise_signalled)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, handler)


def _guard_std_fds() -> None:
    """Occupy closed fds 0-2 with /dev/null so no file pdprobe opens becomes its "stdout".

    A process started with ``>&-`` would otherwise get fd 1 for the first file it opens (an
    input, a temp file) and print the report into it. Reports for stdout then fail cleanly.
    """
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if 1 in closed or sys.stdout is None:
        mark_stdout_closed()
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the process)
    if 2 in closed or sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115


def say(line: str) -> None:
    """One line on stderr, redacted and without escape sequences; never raises."""
    text = clean(scrub(line))
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(f"pdprobe: {text}\n")
        sys.stderr.flush()


def run(argv: list[str] | None = None) -> int:
    """Run the app; every failure becomes one line on stderr and exit code 3 (a signal:
    128 + its number, with one line)."""
    _guard_std_fds()
    try:
        with _signals_as_exceptions():
            try:
                return _run(argv)
            finally:
                remove_pending_temps()
    except Signalled as exc:
        remove_pending_temps()
        say({int(n): w for n, w in _SIGNALS}.get(exc.signum, "stopped by a signal"))
        return EXIT_SIGNAL_BASE + exc.signum


def _run(argv: list[str] | None) -> int:
    from pdprobe.errors import PdprobeError

    try:
        result = app(args=argv, standalone_mode=False, prog_name="pdprobe")
    except PdprobeError as exc:
        say(f"error: {exc.one_line()}")
        return EXIT_UNKNOWN
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        say("aborted")
        return EXIT_UNKNOWN
    except typer.TyperException as exc:  # bad arguments: UNKNOWN per the contract
        # point to the help of the command that was run ('pdprobe diagnose --help')
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None and ctx.command_path else "pdprobe"
        say(f"error: {exc.format_message()} (see '{where} --help')")
        return EXIT_UNKNOWN
    except KeyboardInterrupt:
        say("interrupted")
        return EXIT_SIGNAL_BASE + signal.SIGINT
    except BrokenPipeError:
        # The reader of stdout left (| head): nothing more to say there; later flushes go nowhere.
        with contextlib.suppress(OSError, ValueError):
            sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
        return EXIT_UNKNOWN
    except RecursionError:
        say("error: input nested too deeply to read; rerun with PDPROBE_DEBUG=1 and report it")
        return EXIT_UNKNOWN
    except Exception as exc:
        if os.environ.get("PDPROBE_DEBUG"):
            raise
        text = str(exc)
        first = text.splitlines()[0] if text.strip() else ""
        say(f"error: internal error ({type(exc).__name__}: {first[:300]}); "
            "rerun with PDPROBE_DEBUG=1 and report the traceback")
        return EXIT_UNKNOWN
    return result if isinstance(result, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Run and exit normally (raises SystemExit; used by tests and embedding code)."""
    sys.exit(run(argv))


# numpy asks the kernel for transparent huge pages (madvise) on every array of 4 MB or more.
# pdprobe's large arrays are short-lived full-length temporaries, written once or twice and
# freed, so the 2 MB pages' fault cost (zeroing, and compaction under the usual
# defrag=madvise) is paid per array while the TLB reach they buy is barely used: on the
# 2-core VM of docs/performance.md a 10M-row diagnose spent 2.7-3.7 s of system time with
# them and 1.4-1.9 s without (wall 9.3-10.2 s against 8.1-8.6 s). The CLI owns its process,
# so it sets numpy's documented switch before numpy is imported; a value the user exported
# (NUMPY_MADVISE_HUGEPAGE=1) wins. Library callers keep numpy's own default.
# numpy and scipy each load their own OpenBLAS with a thread per core. After a BLAS call (the
# capacity fits' products over a few hundred thousand sampled rows) those threads spin,
# waiting for more, on the cores pdprobe's own threads and pyarrow's decode are using: a 10M
# Parquet diagnose took 7.1 CPU-s with them and 6.7 without, wall 4.2-4.3 s against
# 4.0-4.2 s (docs/performance.md, eighth session). One BLAS thread is what the CLI wants.
PROCESS_DEFAULTS: Final = (("NUMPY_MADVISE_HUGEPAGE", "0"), ("OPENBLAS_NUM_THREADS", "1"))


def set_process_defaults() -> None:
    """Apply ``PROCESS_DEFAULTS`` and Arrow's allocator (``heap.arrow_pool_default``) to the
    environment where the user has not set them; only effective before numpy and pyarrow are
    first imported, which no module of the CLI's start does."""
    for name, value in (*PROCESS_DEFAULTS, *arrow_pool_default()):
        os.environ.setdefault(name, value)


def entry() -> None:
    """Console-script entry: run, flush, and leave without interpreter teardown.

    pyarrow's C++ thread pools can still be winding down when Python finalises, which aborts
    the process ("terminate called without an active exception") and would turn exit code 3
    into a signal. Everything pdprobe writes is flushed or renamed into place before this.
    """
    set_process_defaults()
    keep_freed_memory()
    code = run()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError, OSError, AttributeError):
            stream.flush()
    os._exit(code)
