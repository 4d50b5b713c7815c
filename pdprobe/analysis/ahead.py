"""A value computed once, by whichever caller (of any thread) asks for it first.

Two uses. The diagnosis's judge re-plans with the window-calibrated waits when the check
against the window says so (``capacity.estimate.CapacityPlan.recalibrated``); the band and
the windows of that plan do not depend on the count the check sets, so the analysis' pool
thread, idle by then, makes them while the main thread runs the rules
(``services.diagnose.analyse``), and the judge makes them itself when it needs them first.
And evidence some rule reads only in some diagnoses is computed at its first read, if any
(``evidence.model.Later``). Either way the value is made once, by the same call, so it is
the same whoever made it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")


class Ahead(Generic[T]):
    """``make()``'s value, made once by the first of ``prepare`` and ``get``.

    A ``ValueError`` from ``make`` (the capacity model's "no count meets the objective") is
    kept and raised by every ``get``, as ``make`` would raise it; any other error is raised
    to the caller that made the attempt and nothing is kept, so ``get`` tries again and
    raises it where it always did (a failed ``prepare`` on another thread is never lost)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._made: tuple[T | None, ValueError | None] | None = None

    def prepare(self) -> None:
        """Make the value now unless it is made (waits while another thread makes it)."""
        with self._lock:
            if self._made is None:
                try:
                    self._made = (self._make(), None)
                except ValueError as exc:
                    self._made = (None, exc)

    def get(self) -> T:
        """The value (made now if nothing made it yet)."""
        self.prepare()
        assert self._made is not None
        value, error = self._made
        if error is not None:
            raise error
        return value  # type: ignore[return-value]  # (made without error: a T)

    @property
    def made(self) -> bool:
        """Whether the value (or its ValueError) is made."""
        return self._made is not None
