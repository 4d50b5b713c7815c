"""Read ahead of a consumer: the next items of an iterator produced in a thread.

A reading loop alternates decoding (pyarrow's Parquet decode, which releases the GIL) with
converting what was decoded (numpy copies into the output columns). ``prefetch`` runs the
decoding iterator in one worker thread, ``depth`` items ahead at most, so the two overlap on
a machine with more than one core; memory holds at most ``depth`` + 2 items (the queue, the
one the worker is producing and the one the consumer holds).

The consumer sees exactly the iterator's items in order. An exception raised by the
iterator (an ``InputError`` of a broken file, too) is raised in the consumer where the items
stop: after every item produced before it. When the consumer stops early (``close()``, an
exception, the generator dropped), the worker is told to stop, the queue is drained so it
cannot block, the source iterator is closed in the worker's thread and the worker is joined:
no thread outlives the iteration.

``imported_meanwhile`` imports modules ahead of their use the same way: in a thread, while the
caller's block runs.
"""

from __future__ import annotations

import importlib
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

# How long the consumer waits for the worker at a time while stopping it, draining the queue
# between waits (a worker blocked on a full queue is freed by the drain, not by the wait).
JOIN_POLL_S: Final = 0.05


class _Failed:
    """The exception the source iterator raised, queued in its place."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Done:
    """The end of the source iterator."""


class _Worker(Generic[T]):
    """The thread that pulls ``items`` into ``out`` until they end, fail, or ``stop`` is set."""

    def __init__(self, items: Iterable[T], depth: int) -> None:
        self.items = items
        self.out: queue.Queue[T | _Failed | _Done] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pdprobe-prefetch", daemon=True)

    def _run(self) -> None:
        source = iter(self.items)
        try:
            for item in source:
                if self.stop.is_set():
                    return
                self.out.put(item)
            self.out.put(_Done())
        except BaseException as exc:  # handed to the consumer, raised there
            self.out.put(_Failed(exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()  # a generator's cleanup runs in the thread that ran it

    def shutdown(self) -> None:
        """Stop the worker and wait for it; the queue is drained so a put cannot block."""
        self.stop.set()
        while self.thread.is_alive():
            _drain(self.out)
            self.thread.join(JOIN_POLL_S)
        _drain(self.out)


def _drain(q: queue.Queue[Any]) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


def prefetch(items: Iterable[T], depth: int) -> Iterator[T]:
    """The items of ``items`` in order, produced by a worker thread at most ``depth`` ahead
    (see the module docstring). The worker starts at the first ``next()``: an iterator never
    iterated starts no thread."""
    if depth < 1:
        raise ValueError(f"prefetch depth must be at least 1, not {depth}")
    return _prefetched(items, depth)


def _prefetched(items: Iterable[T], depth: int) -> Iterator[T]:
    worker = _Worker(items, depth)
    worker.thread.start()
    try:
        while True:
            got = worker.out.get()
            if isinstance(got, _Done):
                return
            if isinstance(got, _Failed):
                raise got.exc
            yield got
            del got  # the consumer holds the item, not this frame
    finally:
        worker.shutdown()


def import_quietly(*modules: str) -> None:
    """Import ``modules`` now; a failure is left for the real import to report."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # reported where the module is really imported
            continue


@contextmanager
def imported_meanwhile(*modules: str) -> Iterator[None]:
    """``modules`` imported in a thread of its own while the block runs (joined when the block
    ends, whatever happens); no thread when they are all imported already. For modules needed
    after a long step that releases the GIL (pyarrow's decode): their import overlaps the step
    instead of following it. A failed import is left for the real one to report."""
    wanted = [m for m in modules if m not in sys.modules]
    if not wanted:
        yield
        return

    thread = threading.Thread(target=import_quietly, args=wanted, name="pdprobe-import",
                              daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
