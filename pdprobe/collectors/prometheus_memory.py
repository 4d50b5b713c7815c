"""Allocator settings for a live collection: reuse freed memory instead of asking for fresh pages.

A live diagnosis allocates and frees many arrays of 1-60 MB (answers, their CSV text, group
matrices, the long tables' columns) in several query threads. With glibc's defaults each of
those is its own ``mmap`` (returned to the system when freed) or lands in a per-thread arena
that the other threads never reuse, so the process touched ~850 MB of fresh pages for a 167 MB
dataset (512 instances x 1 h): page faults and zeroing were 1-2 CPU-s of system time on the
benchmark machine. Keeping big blocks in the heap, not trimming it, and sharing two arenas
between the threads halves the pages touched (and lowers the peak). Nothing here changes a
result; on a C library without ``mallopt`` (macOS, Windows, musl's stub) it does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Final

# glibc's mallopt parameter numbers (malloc.h).
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8

# Blocks up to this size come from the heap (reused after a free) instead of their own mmap:
# above the largest array of a 512-instance hour (an answer of ~61 MB at most).
MMAP_THRESHOLD_BYTES: Final = 128 << 20
# Free memory at the heap's top is kept (not returned to the system) up to this much: the next
# stage's arrays reuse it instead of faulting fresh pages in.
TRIM_THRESHOLD_BYTES: Final = 1 << 30
# Arenas the query threads share: with one per thread (glibc's default, 8 per core) memory one
# thread freed is fresh pages again for the next; two keep lock contention low on 2-8 cores.
ARENA_MAX: Final = 2

_applied: list[bool] = []


def reuse_freed_memory() -> bool:
    """Apply the settings above once per process (before the query threads start); whether the
    C library took them."""
    if _applied:
        return _applied[0]
    ok = False
    if sys.platform.startswith("linux"):
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            mallopt = None
        if mallopt is not None:
            mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            mallopt.restype = ctypes.c_int
            ok = all([mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1,
                      mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1,
                      mallopt(_M_ARENA_MAX, ARENA_MAX) == 1])
    _applied.append(ok)
    return ok
