"""Errors that end a command with exit code 3 (UNKNOWN) and one clear line on stderr.

Every layer raises these instead of letting a library exception escape; the CLI is the
only place that turns them into an exit code.
"""

from __future__ import annotations


class PdprobeError(Exception):
    """A problem pdprobe cannot judge past: bad input, bad arguments, unreachable server.

    The message is one line that names the file (and line or metric) and says what to do.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message.rstrip(".")
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """The message and its hint on one line, as the CLI prints it."""
        return f"{self.message}: {self.hint}" if self.hint else self.message


class InputError(PdprobeError):
    """An input file (or its content) cannot be used."""


class UsageError(PdprobeError):
    """The command line is inconsistent or names something that does not exist."""


class SourceError(PdprobeError):
    """A live data source (Prometheus) is unreachable or answers with an error."""


class InsufficientDataError(PdprobeError):
    """The input is readable but holds too little to judge anything."""
