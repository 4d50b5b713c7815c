"""Output arrays committed ahead of their first write, on another core.

A 10M-row read writes ~1 GB of fresh output arrays (``request_assemble``). The first write to
each page of fresh memory faults: the kernel finds and zeroes a page (on a virtual machine the
host may back it first), and that cost lands on the thread doing the copy — at 10M rows most
of the reading loop's time on a 2-core VM (the copies themselves are a fraction). ``Prefault``
asks Linux to commit the pages of arrays about to be written (``madvise(MADV_POPULATE_WRITE)``,
Linux 5.14+: the pages are faulted in as by a write, their content untouched) from a thread of
its own, walking the arrays a slice of rows at a time in the order the writer fills them, so
the writer finds them committed. ``madvise`` runs through ctypes, which releases the GIL.

Only for arrays whose every row will be written (a reservation sized from a Parquet footer):
committing reserved rows never written would cost memory they otherwise never take. Where the
call is not available (another system, an older kernel, a failing call) the thread stops and
the writer faults its pages as before: nothing else changes.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Final

import numpy as np

# madvise advice: fault pages in as by a write, without writing (Linux 5.14+).
MADV_POPULATE_WRITE: Final = 23
# Rows committed per array per step: close enough ahead of the writer to matter early, large
# enough that one call covers whole huge pages (1M float64 rows = 8 MB).
PREFAULT_ROWS: Final = 1 << 20
# Arrays below this size are left to the writer: a thread costs more than their faults.
PREFAULT_MIN_BYTES: Final = 64 << 20
_PAGE: Final = 4096


def _madvise() -> Any:
    """libc's ``madvise`` through ctypes, or None where there is none to call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.madvise
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    call.restype = ctypes.c_int
    return call


class Prefault:
    """Commits the pages of ``arrays`` (1-D, C-contiguous, every row to be written) in a
    thread, ``PREFAULT_ROWS`` rows of each array at a time. ``close`` stops and joins it."""

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.arrays = [a for a in arrays if a.flags.c_contiguous and a.ndim == 1]
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        total = sum(a.nbytes for a in self.arrays)
        call = _madvise() if total >= PREFAULT_MIN_BYTES else None
        if call is not None:
            self.thread = threading.Thread(target=self._run, args=(call,),
                                           name="pdprobe-prefault", daemon=True)
            self.thread.start()

    def _run(self, madvise: Any) -> None:
        longest = max((a.size for a in self.arrays), default=0)
        for start in range(0, longest, PREFAULT_ROWS):
            for a in self.arrays:
                if self.stop.is_set():
                    return
                if start >= a.size:
                    continue
                first = a.ctypes.data + start * a.itemsize
                last = a.ctypes.data + min(start + PREFAULT_ROWS, a.size) * a.itemsize
                lo = first // _PAGE * _PAGE  # page-aligned: the page holding the first row
                if madvise(lo, last - lo, MADV_POPULATE_WRITE) != 0:
                    return  # not supported here (or failing): the writer faults as before

    def close(self) -> None:
        """Stop committing (whatever is left is faulted by the writer) and join the thread."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self.thread = None
