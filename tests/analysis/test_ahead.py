"""``analysis.ahead.Ahead``: a value made once, by whichever of ``prepare`` and ``get`` comes
first, whatever thread calls them."""

from __future__ import annotations

import threading
import time

import pytest

from pdprobe.analysis.ahead import Ahead


def test_made_once_by_prepare_and_read_by_get() -> None:
    calls: list[int] = []
    ahead = Ahead(lambda: calls.append(1) or len(calls))
    assert not ahead.made
    ahead.prepare()
    ahead.prepare()
    assert ahead.made and ahead.get() == 1 and ahead.get() == 1
    assert calls == [1]


def test_get_makes_it_when_nothing_prepared() -> None:
    ahead = Ahead(lambda: "value")
    assert ahead.get() == "value" and ahead.made


def test_a_value_error_is_kept_and_raised_by_every_get() -> None:
    calls: list[int] = []

    def make() -> int:
        calls.append(1)
        raise ValueError("no count meets the objective")

    ahead = Ahead(make)
    ahead.prepare()  # (on the pool thread: nothing raised there)
    for _ in range(2):
        with pytest.raises(ValueError, match="no count"):
            ahead.get()
    assert calls == [1]


def test_another_error_is_raised_where_it_happens_and_tried_again() -> None:
    """A bug in ``make`` is not swallowed by a prepare nobody reads: ``get`` raises it."""
    calls: list[int] = []

    def make() -> int:
        calls.append(1)
        raise KeyError("bug")

    ahead = Ahead(make)
    with pytest.raises(KeyError):
        ahead.prepare()
    assert not ahead.made
    with pytest.raises(KeyError):
        ahead.get()
    assert calls == [1, 1]


def test_get_waits_for_a_prepare_under_way_instead_of_making_it_again() -> None:
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def make() -> str:
        calls.append(threading.current_thread().name)
        started.set()
        release.wait(5)
        return "made"

    ahead = Ahead(make)
    worker = threading.Thread(target=ahead.prepare, name="pool")
    worker.start()
    assert started.wait(5)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(ahead.get()), name="main")
    reader.start()
    time.sleep(0.05)
    assert not got  # waiting for the pool's
    release.set()
    worker.join(5)
    reader.join(5)
    assert got == ["made"] and calls == ["pool"]
