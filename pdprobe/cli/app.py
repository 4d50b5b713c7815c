"""The ``pdprobe`` command. Thin: parses options, calls a service, renders, exits.

This module is the only place that exits. Every ``PdprobeError`` becomes one line on stderr
and exit code 3 (UNKNOWN); so does any unexpected error (the traceback only with
``PDPROBE_DEBUG=1``). Heavy libraries are imported inside commands so ``--help`` stays fast.
"""

from __future__ import annotations

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


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and map every failure to exit code 3 with one line."""
    from pdprobe.errors import PdprobeError

    try:
        result = app(args=argv, standalone_mode=False, prog_name="pdprobe")
    except PdprobeError as exc:
        sys.stderr.write(f"pdprobe: error: {exc.one_line()}\n")
        sys.exit(EXIT_UNKNOWN)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.stderr.write("pdprobe: aborted\n")
        sys.exit(EXIT_UNKNOWN)
    except typer.TyperException as exc:  # bad arguments: UNKNOWN per the contract
        msg = exc.format_message().replace("\n", " ")
        sys.stderr.write(f"pdprobe: error: {msg} (see 'pdprobe --help')\n")
        sys.exit(EXIT_UNKNOWN)
    except KeyboardInterrupt:
        sys.stderr.write("pdprobe: interrupted\n")
        sys.exit(EXIT_UNKNOWN)
    except BrokenPipeError:
        sys.exit(EXIT_UNKNOWN)
    except Exception as exc:
        if os.environ.get("PDPROBE_DEBUG"):
            raise
        where = type(exc).__name__
        sys.stderr.write(f"pdprobe: error: internal error ({where}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                         "rerun with PDPROBE_DEBUG=1 and report the traceback\n")
        sys.exit(EXIT_UNKNOWN)
    sys.exit(result if isinstance(result, int) else 0)
