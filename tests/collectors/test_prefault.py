"""Output arrays committed ahead of their writes (``collectors.prefault``)."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

from pdprobe.collectors import prefault
from pdprobe.collectors.prefault import Prefault


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "pdprobe-prefault"]


def test_committed_arrays_keep_their_values_and_the_thread_is_joined(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Committing pages never changes what is in them (written before, during or after), and
    ``close`` leaves no thread."""
    monkeypatch.setattr(prefault, "PREFAULT_MIN_BYTES", 0)
    monkeypatch.setattr(prefault, "PREFAULT_ROWS", 1000)
    arrays = [np.empty(100_000), np.empty(30_001, dtype=np.int8), np.empty(77_777, np.uint64)]
    arrays[0][:500] = 7.0  # written before
    committing = Prefault(arrays)
    for a in arrays:
        a[500:] = 3  # written while committing
    committing.close()
    assert not _threads()
    assert (arrays[0][:500] == 7.0).all() and (arrays[0][500:] == 3.0).all()
    assert (arrays[1][500:] == 3).all() and (arrays[2][500:] == 3).all()


def test_calls_cover_every_row_in_writing_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each array is committed a slice of rows at a time, the arrays interleaved in the order
    a batch-by-batch writer fills them, from the page holding the first row to the last row."""
    monkeypatch.setattr(prefault, "PREFAULT_MIN_BYTES", 0)
    monkeypatch.setattr(prefault, "PREFAULT_ROWS", 4096)
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(prefault, "_madvise",
                        lambda: lambda addr, size, advice: calls.append((addr, size, advice)) or 0)
    a, b = np.empty(10_000), np.empty(5_000, dtype=np.int8)
    Prefault([a, b]).close()
    assert [c[2] for c in calls] == [prefault.MADV_POPULATE_WRITE] * len(calls)
    assert all(c[0] % 4096 == 0 for c in calls)  # page-aligned starts
    a_end, b_end = a.ctypes.data + a.nbytes, b.ctypes.data + b.nbytes
    # owned by where a call ends (its page-aligned start may lie in a neighbour's last page)
    of_a = [a.ctypes.data < c[0] + c[1] <= a_end for c in calls]
    assert of_a == [True, False, True, False, True]  # a: 3 slices, b: 2, interleaved
    for mine, start, end in ((True, a.ctypes.data, a_end), (False, b.ctypes.data, b_end)):
        spans = sorted((c[0], c[0] + c[1]) for c, o in zip(calls, of_a, strict=True)
                       if o == mine)
        assert spans[0][0] <= start and spans[-1][1] == end  # every row, not past the end
        assert all(prev[1] >= nxt[0] for prev, nxt in itertools.pairwise(spans))  # no gap


def test_nothing_to_call_or_a_failing_call_stops_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without madvise (another system) no thread starts; a failing call ends the thread."""
    monkeypatch.setattr(prefault, "PREFAULT_MIN_BYTES", 0)
    monkeypatch.setattr(prefault, "_madvise", lambda: None)
    committing = Prefault([np.zeros(10)])
    assert committing.thread is None
    committing.close()
    calls: list[int] = []
    monkeypatch.setattr(prefault, "_madvise", lambda: lambda *a: calls.append(1) or -1)
    monkeypatch.setattr(prefault, "PREFAULT_ROWS", 10)
    Prefault([np.zeros(100)]).close()
    assert calls == [1]
    assert not _threads()


def test_small_arrays_are_left_to_the_writer() -> None:
    committing = Prefault([np.zeros(1000)])
    assert committing.thread is None
    committing.close()
