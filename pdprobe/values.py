"""Missing data as a value with a reason, never a silent 0 or a crash.

A field that could not be computed holds ``Missing("why")``; renderers print the reason and
JSON carries ``null`` plus the reason under ``missing``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, TypeVar, Union

T = TypeVar("T")


@dataclass(frozen=True)
class Missing:
    """A value that is not known, and why (e.g. ``"no ttft_s column in request records"``)."""

    reason: str

    def __bool__(self) -> bool:  # so `if value:` treats it as absent
        return False

    def __str__(self) -> str:
        return f"n/a ({self.reason})"


Maybe: TypeAlias = Union[T, Missing]  # noqa: UP007 (mypy needs Union for a generic alias)


def known(value: Maybe[T], default: T) -> T:
    """The value, or ``default`` when it is missing (use only where a default is meaningful)."""
    return default if isinstance(value, Missing) else value
