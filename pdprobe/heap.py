"""The process keeps the memory it frees for its next allocations (glibc's heap; Arrow's).

pdprobe allocates and frees many large arrays: at 10M request rows hundreds of full-length
temporaries of 40-80 MB each; on the live path the answers, their CSV text and the group
matrices (1-60 MB) in several query threads. glibc serves every block above its mmap threshold
with a fresh ``mmap`` and returns it with ``munmap`` when freed, and gives each thread its own
arena that the other threads never reuse, so each temporary's pages are faulted in and zeroed
by the kernel again: 0.5-0.7 s of system time of a 10M Parquet diagnose, and the live path
touched ~850 MB of fresh pages for a 167 MB dataset. With the heap kept (no mmap for large
blocks, no trimming of the heap's top, one arena so the threads reuse each other's freed
blocks) the next array lands in pages already faulted in: 10M Parquet system time
1.1-1.8 s -> 0.7-0.9 s, peak RSS +30 to +90 MB (docs/performance.md, "The heap kept").

Applied once per process, before the large allocations (it acts on later ones only): by the
console entry for every command (``cli/app.entry``: the process is left with ``os._exit`` as
soon as the command is done, so the memory kept is never wanted back by anyone else). Not by
the library's own calls: a long-running process that collects live data keeps glibc's
defaults, since it would never get the memory back. Nothing here changes a result. Another C library (musl, macOS) has no ``mallopt``: nothing is changed there.
A user who tunes glibc's allocator (any ``MALLOC_*`` variable or ``GLIBC_TUNABLES``) keeps
their setting.

Arrow allocates the decoded batches of a read with its own allocator: the CLI has it use
jemalloc, which keeps freed pages for reuse as the heap above does (``arrow_pool_default``).
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

# mallopt's parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD: Final = -1
M_TOP_PAD: Final = -2
M_MMAP_MAX: Final = -4
M_ARENA_MAX: Final = -8

# What ``keep_freed_memory`` sets, in order. One arena first: with several, a thread's arena
# is a set of 64 MB heaps that cannot hold an 80 MB block without mmap, which is switched off
# next, and a block one thread freed would be fresh pages for another. The heap's top is never
# given back (trim threshold 2 GiB - 1, mallopt's int limit) and grows 64 MB at a time (fewer
# brk calls; pages never touched cost no memory).
HEAP_SETTINGS: Final = (
    (M_ARENA_MAX, 1),
    (M_MMAP_MAX, 0),
    (M_TRIM_THRESHOLD, 2**31 - 1),
    (M_TOP_PAD, 64 << 20),
)
# A user's own allocator settings, read by glibc at start: any of them means hands off.
USER_TUNING_PREFIXES: Final = ("MALLOC_",)
USER_TUNING_NAMES: Final = ("GLIBC_TUNABLES",)

_applied: list[bool] = []  # the first call's answer, for every later call


def keep_freed_memory() -> bool:
    """Set ``HEAP_SETTINGS`` through glibc's ``mallopt`` once per process; True if every
    setting was taken.

    False, changing nothing, where the C library is not glibc or the user tunes the allocator
    themselves. Later calls return the first call's answer and change nothing.
    """
    if not _applied:
        _applied.append(_apply())
    return _applied[0]


def _apply() -> bool:
    if not _glibc() or _user_tunes_malloc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return all([mallopt(param, value) == 1 for param, value in HEAP_SETTINGS])


def _glibc() -> bool:
    # confstr answers from libc itself; platform.libc_ver() would scan the interpreter's binary
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False


def _user_tunes_malloc() -> bool:
    return any(name.startswith(USER_TUNING_PREFIXES) or name in USER_TUNING_NAMES
               for name in os.environ)


# Arrow's allocator for the CLI's process: jemalloc where the installed pyarrow was built with
# it. pyarrow's default (mimalloc, in its Linux wheels since 13) hands the pages of the decoded
# batches it frees back to the kernel within milliseconds, so the next batch faults them in
# again: a 10M-row Parquet read decodes ~150 batches of ~8 MB per column, and on the 2-core VM
# of docs/performance.md it spent 0.9-1.3 s of system time against 0.6-0.7 s with jemalloc,
# which keeps freed pages about a second (read 2.23-2.55 s -> 1.96-1.98 s; the whole diagnose
# 4.88-5.33 s -> 4.63-4.86 s, peak RSS 1,434-1,449 -> 1,383-1,395 MB, alternated). Set
# through Arrow's own variable, read when pyarrow first allocates, so the CLI imports nothing
# to set it; a value the user exported wins. A build without jemalloc would warn about the
# variable on every run, so it is only set where the build's configuration header says
# jemalloc is in (nothing is set where the header is not installed).
ARROW_POOL_VARIABLE: Final = "ARROW_DEFAULT_MEMORY_POOL"
ARROW_POOL: Final = "jemalloc"
_ARROW_BUILD_FLAG: Final = "#define ARROW_JEMALLOC"


def arrow_pool_default() -> tuple[tuple[str, str], ...]:
    """``((ARROW_POOL_VARIABLE, ARROW_POOL),)`` when the installed pyarrow was built with
    jemalloc (its ``include/arrow/util/config.h`` defines ``ARROW_JEMALLOC``), else ``()``.
    Finds pyarrow without importing it."""
    try:
        spec = importlib.util.find_spec("pyarrow")
    except (ImportError, ValueError):
        return ()
    places = list(spec.submodule_search_locations or ()) if spec is not None else []
    for place in places:
        header = Path(place, "include", "arrow", "util", "config.h")
        try:
            text = header.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if any(line.strip() == _ARROW_BUILD_FLAG for line in text.splitlines()):
            return ((ARROW_POOL_VARIABLE, ARROW_POOL),)
    return ()


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs (back on after it, if it was
    on before): for a block that creates many long-lived objects and few cycles, such as
    importing modules. Each collection walks every young object, and an import creates
    hundreds of thousands that all survive: importing the analysis modules, pandas and pyarrow
    ran ~230 collections for ~0.04 CPU-s and freed nothing worth it. Cycles made meanwhile are
    collected by the next collection after the block."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
