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
caller's block runs. A block that needs the GIL between many short calls (the Parquet reading
loop) runs under ``imports_held``: the importing thread, which holds the GIL all the time,
waits until it ends (the module being imported goes on). Beside the loop it kept the loop
waiting for the GIL while the decode's cores idled (at 10M rows ~1.6 cores busy while the
imports ran, against ~1.9 after); after it, it overlaps the row checks instead (whole-column
numpy work that releases the GIL). ``imported_meanwhile(deferred=True)`` starts held, until
the block calls ``imports_welcome``: a reader that knows no such loop comes calls it at once.
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
# The interpreter's switch interval while ``imported_meanwhile``'s thread imports (Python's
# default is 5 ms). An import holds the GIL all the time; a thread beside it that runs numpy
# a block at a time (the row checks after a Parquet read: ~130K rows, ~0.1 ms per call)
# waited up to a whole interval for the GIL after each call, so it ran at a fraction of its
# speed while its core idled. At 0.1 ms it gets the GIL back within that and the import goes
# on meanwhile (10M Parquet, alternating: the read's tail after the loop 0.43-0.46 ->
# 0.36-0.37 s, CPU unchanged).
IMPORT_SWITCH_INTERVAL_S: Final = 1e-4


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


class _Held:
    """Whether ``imported_meanwhile``'s imports must wait: how many ``imports_held`` blocks
    run, whether a deferred start is not yet welcome, and the condition a change notifies."""

    def __init__(self) -> None:
        self.count = 0
        self.deferred = False
        self.changed = threading.Condition()

    def update(self, count: int = 0, deferred: bool | None = None) -> None:
        """Add ``count`` held blocks, set ``deferred`` (unless None), wake the waiting."""
        with self.changed:
            self.count += count
            if deferred is not None:
                self.deferred = deferred
            self.changed.notify_all()

    def wait_free(self, ended: threading.Event) -> None:
        """Until nothing holds the imports, or ``ended`` (the caller's block is over: its
        thread is being joined, and a hold around that block must not keep it waiting)."""
        with self.changed:
            self.changed.wait_for(
                lambda: ended.is_set() or (self.count == 0 and not self.deferred))


_HELD: Final = _Held()


@contextmanager
def imports_held() -> Iterator[None]:
    """``imported_meanwhile``'s imports paused while the block runs (the module being imported
    goes on; the next waits for the block to end): for a block that needs the GIL most of its
    time."""
    _HELD.update(count=1)
    try:
        yield
    finally:
        _HELD.update(count=-1)


def imports_welcome() -> None:
    """Let a deferred ``imported_meanwhile`` start its imports now (no-op otherwise): called by
    a reader once it knows the GIL is no longer wanted most of the time."""
    _HELD.update(deferred=False)


def _import_when_free(modules: list[str], ended: threading.Event,
                      failed: threading.Event) -> None:
    """``import_quietly`` of each module once no ``imports_held`` block runs and a deferred
    start is welcome (or the caller's block has ended); none after the block has failed.
    Each import runs with quick switches (``IMPORT_SWITCH_INTERVAL_S``)."""
    for module in modules:
        _HELD.wait_free(ended)
        if failed.is_set():
            return
        with _quick_switches():
            import_quietly(module)


class _Switches:
    """How many ``_quick_switches`` blocks run (in any thread) and the switch interval to
    restore when the last one ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.saved = 0.0


_SWITCHES: Final = _Switches()


@contextmanager
def _quick_switches() -> Iterator[None]:
    """The interpreter's switch interval at most ``IMPORT_SWITCH_INTERVAL_S`` while the block
    runs (it is process-wide: the first block to start sets it, the last to end restores it)."""
    with _SWITCHES.lock:
        if not _SWITCHES.count:
            _SWITCHES.saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_SWITCHES.saved, IMPORT_SWITCH_INTERVAL_S))
        _SWITCHES.count += 1
    try:
        yield
    finally:
        with _SWITCHES.lock:
            _SWITCHES.count -= 1
            if not _SWITCHES.count:
                sys.setswitchinterval(_SWITCHES.saved)


def import_quietly(*modules: str) -> None:
    """Import ``modules`` now; a failure is left for the real import to report."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # reported where the module is really imported
            continue


@contextmanager
def imported_meanwhile(*modules: str, deferred: bool = False) -> Iterator[None]:
    """``modules`` imported in a thread of its own while the block runs (joined when the block
    ends, whatever happens); no thread when they are all imported already. For modules needed
    after a long step that releases the GIL (pyarrow's decode): their import overlaps the step
    instead of following it; they wait while an ``imports_held`` block runs. ``deferred``: they
    start only once the block calls ``imports_welcome`` (or ends), for a block that may start
    by holding the GIL. A block that raises stops them (the module being imported goes on, no
    other starts): the modules are for what would have followed it (``pdprobe diagnose`` of
    a missing file then ends in ~0.2 s, not after the analysis modules' ~0.4 s of imports).
    A failed import is left for the real one to report."""
    wanted = [m for m in modules if m not in sys.modules]
    if not wanted:
        yield
        return

    if deferred:
        _HELD.update(deferred=True)
    ended, failed = threading.Event(), threading.Event()
    thread = threading.Thread(target=_import_when_free, args=(wanted, ended, failed),
                              name="pdprobe-import", daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        failed.set()
        raise
    finally:
        if deferred:
            imports_welcome()
        ended.set()  # whatever holds the imports now, the thread imports and is joined
        _HELD.update()
        thread.join()
