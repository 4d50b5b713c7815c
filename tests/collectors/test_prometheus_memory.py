"""Allocator settings of a live collection (``prometheus_memory``)."""

from __future__ import annotations

import ctypes
import sys

import pytest

from pdprobe.collectors import prometheus_memory as pm


def _glibc() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None).gnu_get_libc_version)
    except (OSError, AttributeError):
        return False


@pytest.mark.skipif(not _glibc(), reason="mallopt settings are glibc's")
def test_settings_taken_by_glibc_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pm, "_applied", [])
    assert pm.reuse_freed_memory() is True
    assert pm._applied == [True]
    assert pm.reuse_freed_memory() is True  # once per process: the recorded answer
    assert pm._applied == [True]


def test_no_mallopt_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pm, "_applied", [])
    monkeypatch.setattr(pm.sys, "platform", "darwin")
    assert pm.reuse_freed_memory() is False
    assert pm._applied == [False]


def test_thresholds_cover_the_biggest_answer() -> None:
    # A 512-instance hour answers ~61 MB of JSON per query at most (the comment on
    # prometheus_http.MAX_BODY_BYTES): blocks that big must stay in the heap.
    assert pm.MMAP_THRESHOLD_BYTES >= 61 << 20
    assert pm.TRIM_THRESHOLD_BYTES >= pm.MMAP_THRESHOLD_BYTES
