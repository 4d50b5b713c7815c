"""The ``pdprobe`` command. Thin: parses options, calls a service, renders, exits.

This module is the only place that exits. Every ``PdprobeError`` becomes one line on stderr
and exit code 3 (UNKNOWN); so does any unexpected error (the traceback only with
``PDPROBE_DEBUG=1``). Heavy libraries are imported inside commands so ``--help`` stays fast.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import Final

import typer

from pdprobe import __version__
from pdprobe.cli.common import EXIT_UNKNOWN

app = typer.Typer(
    name="pdprobe",
    help="Diagnose prefill/decode imbalance in disaggregated LLM serving clusters.",
    no_args_is_help=False,
    add_completion=False,
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


def run(argv: list[str] | None = None) -> int:
    """Run the app; every failure becomes exit code 3 with one line on stderr."""
    from pdprobe.errors import PdprobeError

    try:
        result = app(args=argv, standalone_mode=False, prog_name="pdprobe")
    except PdprobeError as exc:
        sys.stderr.write(f"pdprobe: error: {exc.one_line()}\n")
        return EXIT_UNKNOWN
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        sys.stderr.write("pdprobe: aborted\n")
        return EXIT_UNKNOWN
    except typer.TyperException as exc:  # bad arguments: UNKNOWN per the contract
        msg = exc.format_message().replace("\n", " ")
        sys.stderr.write(f"pdprobe: error: {msg} (see 'pdprobe --help')\n")
        return EXIT_UNKNOWN
    except KeyboardInterrupt:
        sys.stderr.write("pdprobe: interrupted\n")
        return EXIT_UNKNOWN
    except BrokenPipeError:
        return EXIT_UNKNOWN
    except Exception as exc:
        if os.environ.get("PDPROBE_DEBUG"):
            raise
        where = type(exc).__name__
        sys.stderr.write(f"pdprobe: error: internal error ({where}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                         "rerun with PDPROBE_DEBUG=1 and report the traceback\n")
        return EXIT_UNKNOWN
    return result if isinstance(result, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Run and exit normally (raises SystemExit; used by tests and embedding code)."""
    sys.exit(run(argv))


def entry() -> None:
    """Console-script entry: run, flush, and leave without interpreter teardown.

    pyarrow's C++ thread pools can still be winding down when Python finalises, which aborts
    the process ("terminate called without an active exception") and would turn exit code 3
    into a signal. Everything pdprobe writes is flushed or renamed into place before this.
    """
    code = run()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            stream.flush()
    os._exit(code)
