"""The read-ahead helper: order, errors raised where the items stop, no thread left behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pdprobe.collectors.prefetch import prefetch
from pdprobe.errors import InputError


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "pdprobe-prefetch"]


def _wait_until(condition, timeout_s: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_items_come_in_order(depth: int) -> None:
    assert list(prefetch(iter(range(1000)), depth)) == list(range(1000))
    assert not _workers()


def test_a_slow_consumer_still_gets_every_item_in_order() -> None:
    got = []
    for item in prefetch((i for i in range(20)), 2):
        time.sleep(0.001)
        got.append(item)
    assert got == list(range(20))


def test_empty_source() -> None:
    assert list(prefetch(iter([]), 2)) == []
    assert not _workers()


def test_producer_error_is_raised_after_the_items_before_it() -> None:
    error = InputError("f.parquet: not a readable Parquet file (boom)", hint="copy it again")

    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise error

    got = []
    with pytest.raises(InputError) as caught:
        for item in prefetch(source(), 1):
            got.append(item)
    assert got == [1, 2]
    assert caught.value is error
    assert not _workers()


def test_early_close_stops_and_closes_the_source() -> None:
    closed = threading.Event()
    produced = []

    def endless() -> Iterator[int]:
        try:
            i = 0
            while True:
                produced.append(i)
                yield i
                i += 1
        finally:
            closed.set()

    items = prefetch(endless(), 2)
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    items.close()  # type: ignore[attr-defined]
    assert closed.is_set()  # the worker closed it before it was joined
    assert not _workers()
    assert len(produced) <= 3 + 2 + 1  # taken, queued, one being produced


def test_consumer_error_stops_the_worker() -> None:
    def consume() -> None:
        for item in prefetch(iter(range(10_000)), 2):
            if item == 5:
                raise RuntimeError("consumer failed")

    with pytest.raises(RuntimeError, match="consumer failed"):
        consume()
    assert _wait_until(lambda: not _workers())


def test_the_worker_reads_at_most_depth_ahead() -> None:
    produced = []

    def counted() -> Iterator[int]:
        for i in range(100):
            produced.append(i)
            yield i

    items = prefetch(counted(), 3)
    assert next(items) == 0
    time.sleep(0.05)  # time for the worker to fill the queue
    # one held by the consumer, three queued, one produced and waiting to be queued
    assert len(produced) <= 1 + 3 + 1
    del items  # dropped unfinished: the generator's cleanup stops the worker
    assert _wait_until(lambda: not _workers())


def test_nothing_starts_before_the_first_item_is_asked_for() -> None:
    items = prefetch(iter(range(3)), 2)
    assert not _workers()
    assert list(items) == [0, 1, 2]


def test_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        prefetch(iter(range(3)), 0)


def test_imported_meanwhile_imports_in_a_thread_joined_at_the_end() -> None:
    import sys

    from pdprobe.collectors.prefetch import imported_meanwhile

    name = "tests.collectors._imported_meanwhile_probe"
    sys.modules.pop(name, None)
    with imported_meanwhile(name, "no_such_module_pdprobe", "sys"):  # a failure is skipped
        pass
    assert name in sys.modules  # imported by the thread, which was joined
    assert sys.modules[name].IMPORTED_IN.startswith("pdprobe-import")
    assert not [t for t in threading.enumerate() if t.name == "pdprobe-import"]
    with imported_meanwhile("sys"):  # imported already: no thread
        assert not [t for t in threading.enumerate() if t.name == "pdprobe-import"]


def test_deferred_imports_wait_for_the_welcome_and_for_a_held_block() -> None:
    import sys
    import time

    from pdprobe.collectors.prefetch import imported_meanwhile, imports_held, imports_welcome

    name = "tests.collectors._imported_meanwhile_probe"
    sys.modules.pop(name, None)
    with imported_meanwhile(name, deferred=True):
        time.sleep(0.05)
        assert name not in sys.modules  # not welcome yet
        with imports_held():
            imports_welcome()
            time.sleep(0.05)
            assert name not in sys.modules  # welcome, but held
        deadline = time.monotonic() + 10
        while name not in sys.modules and time.monotonic() < deadline:
            time.sleep(0.01)
        assert name in sys.modules  # imported once the hold ended, before the block did
    assert sys.modules[name].IMPORTED_IN.startswith("pdprobe-import")


def test_imports_are_joined_whatever_holds_them_when_the_block_ends() -> None:
    """A block that ends while a hold is active (or before its welcome) still gets its
    imports and its thread joined: no deadlock, no thread left."""
    import sys

    from pdprobe.collectors.prefetch import imported_meanwhile, imports_held

    name = "tests.collectors._imported_meanwhile_probe"
    sys.modules.pop(name, None)
    with imports_held(), imported_meanwhile(name, deferred=True):
        pass
    assert name in sys.modules
    assert not [t for t in threading.enumerate() if t.name == "pdprobe-import"]


def test_a_parquet_read_lets_deferred_imports_start_after_its_reading_loop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Modules imported meanwhile (deferred, as ``services.diagnose`` does) start once the
    Parquet reading loop is done, not beside it; pandas is imported by the first of that
    thread and the canonical step, after the loop."""
    import subprocess
    import sys

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "r.parquet"
    n = 1000
    pq.write_table(pa.table({"arrival_ts": 1.7e9 + np.arange(n, dtype=np.float64),
                             "prompt_tokens": np.arange(n) + 1, "output_tokens": np.arange(n) + 1,
                             "decode_instance": pa.array([f"d{i % 3}" for i in range(n)])}), path)
    code = (
        "import sys, threading\n"
        "events = []\n"
        "def hook(event, args):\n"
        "    if event == 'import' and str(args[0]).split('.')[0] == 'pandas':\n"
        "        events.append('pandas')\n"
        "sys.addaudithook(hook)\n"
        "from pathlib import Path\n"
        "from pdprobe.collectors import requests_file\n"
        "from pdprobe.collectors.base import ReadContext\n"
        "from pdprobe.collectors.prefetch import imported_meanwhile\n"
        "assemble = requests_file.assemble\n"
        "def assembled(*a, **k):\n"
        "    out = assemble(*a, **k)\n"
        "    events.append('loop done')\n"
        "    return out\n"
        "requests_file.assemble = assembled\n"
        "with imported_meanwhile('pandas', deferred=True):\n"
        f"    part = requests_file.read_requests(Path({str(path)!r}), ReadContext())\n"
        "print(events[0], len(part.requests))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split("\n")[0] == f"loop done {n}"


def test_a_failed_block_starts_no_more_imports() -> None:
    import sys

    from pdprobe.collectors.prefetch import imported_meanwhile

    name = "tests.collectors._imported_meanwhile_probe"
    sys.modules.pop(name, None)
    with pytest.raises(RuntimeError), imported_meanwhile(name, deferred=True):
        raise RuntimeError("the read failed")
    assert name not in sys.modules  # never welcome, then the block failed: not imported
    assert not [t for t in threading.enumerate() if t.name == "pdprobe-import"]


def test_imports_meanwhile_run_with_quick_switches_restored_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each import runs with the short switch interval (the caller's short numpy calls get the
    GIL back quickly); the interval is restored once no import runs, also when two blocks
    overlap in different threads."""
    import sys
    import threading

    from pdprobe.collectors import prefetch

    seen: list[float] = []
    monkeypatch.setattr(prefetch, "import_quietly", lambda *m: seen.append(sys.getswitchinterval()))
    before = sys.getswitchinterval()
    with prefetch.imported_meanwhile("pdprobe_no_such_module_for_switches"):
        pass
    quick = pytest.approx(prefetch.IMPORT_SWITCH_INTERVAL_S)  # held in microseconds
    assert seen == [quick]
    assert sys.getswitchinterval() == before
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with prefetch._quick_switches():
            inside.set()
            release.wait()

    t = threading.Thread(target=other)
    t.start()
    inside.wait()
    with prefetch._quick_switches():
        assert sys.getswitchinterval() == quick
    assert sys.getswitchinterval() == quick  # the other still runs
    release.set()
    t.join()
    assert sys.getswitchinterval() == before
