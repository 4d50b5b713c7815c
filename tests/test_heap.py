"""``heap.py``: the process keeps freed memory for reuse (glibc's ``mallopt``), once."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdprobe import heap

GLIBC = (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")

# Allocates an 80 MB array, frees it, and prints what glibc's mallinfo2 saw: whether the
# array was mmapped (hblkhd) and whether the heap still holds its pages after the free (arena).
PROBE = """
import ctypes, sys
from pdprobe.heap import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
import numpy as np
block = np.ones(10_000_000)
mapped = libc.mallinfo2().hblkhd >= 80e6
del block
print(kept, mapped, libc.mallinfo2().arena >= 80e6)
"""


def _probe(mode: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    proc = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          env={**environ, **env}, check=True, timeout=60)
    return proc.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_large_blocks_come_from_the_heap_and_stay_there_once_kept() -> None:
    assert _probe("default") == "False True False"  # glibc: mmapped, unmapped on free
    assert _probe("keep") == "True False True"  # kept: from the heap, still there after free


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
@pytest.mark.parametrize("name", ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_a_users_own_allocator_tuning_is_left_alone(name: str) -> None:
    value = "glibc.malloc.arena_max=2" if name == "GLIBC_TUNABLES" else "4"
    assert _probe("keep", **{name: value}).startswith("False True")


def test_nothing_is_set_where_the_c_library_is_not_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_applied", [])
    monkeypatch.setattr(heap.os, "confstr", lambda name: None)
    assert heap.keep_freed_memory() is False
    assert heap._applied == [False]


def test_once_per_process_the_first_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(heap, "_applied", [])
    monkeypatch.setattr(heap, "_apply", lambda: calls.append(1) or True)
    assert heap.keep_freed_memory() is True
    assert heap.keep_freed_memory() is True
    assert calls == [1]


def test_a_library_live_collection_leaves_the_allocator_alone() -> None:
    """Only the CLI's process keeps its freed memory (it exits when done); a library caller's
    long-running process collecting live data keeps glibc's defaults."""
    from pdprobe.collectors import prometheus

    assert not hasattr(prometheus, "keep_freed_memory")
    assert "keep_freed_memory" not in inspect.getsource(prometheus.collect_partial)


def test_entry_keeps_freed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdprobe.cli import app as app_module

    calls: list[str] = []

    def leave(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(app_module, "keep_freed_memory", lambda: calls.append("kept") or True)
    monkeypatch.setattr(app_module, "run", lambda: 0)
    monkeypatch.setattr(app_module.os, "_exit", leave)
    with pytest.raises(SystemExit):
        app_module.entry()
    assert calls == ["kept"]


def test_collection_paused_turns_the_collector_back_on_only_if_it_was_on() -> None:
    import gc

    from pdprobe.heap import collection_paused

    assert gc.isenabled()
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("the block failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()


def test_load_dataset_reads_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from pdprobe.services import diagnose

    seen: list[bool] = []

    def read(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        raise RuntimeError("stop here")

    monkeypatch.setattr("pdprobe.collectors.files.read_paths", read)
    with pytest.raises(RuntimeError, match="stop here"):
        diagnose.load_dataset(diagnose.DiagnoseRequest())
    assert seen == [False]
    assert gc.isenabled()


def _fake_pyarrow(tmp_path: Path, header: str | None) -> Path:
    """A package folder laid out as pyarrow's wheel, with ``header`` as its build's
    ``include/arrow/util/config.h`` (none when None)."""
    package = tmp_path / "pyarrow"
    package.mkdir()
    (package / "__init__.py").write_text("")
    if header is not None:
        (package / "include" / "arrow" / "util").mkdir(parents=True)
        (package / "include" / "arrow" / "util" / "config.h").write_text(header)
    return package


@pytest.mark.parametrize(("header", "expected"), [
    ("#define ARROW_JEMALLOC\n#define ARROW_JEMALLOC_VENDORED\n#define ARROW_MIMALLOC\n",
     ((heap.ARROW_POOL_VARIABLE, "jemalloc"),)),
    ("#define ARROW_MIMALLOC\n/* #undef ARROW_JEMALLOC */\n", ()),
    ("#define ARROW_JEMALLOC_VENDORED\n", ()),  # only the exact flag counts
    (None, ()),  # no header installed: Arrow's own default is kept
])
def test_arrow_pool_is_jemalloc_only_where_the_build_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, header: str | None,
        expected: tuple[tuple[str, str], ...]) -> None:
    """Set where the build's header defines ARROW_JEMALLOC: a build without it would warn
    about the variable on every run."""
    import importlib.machinery

    package = _fake_pyarrow(tmp_path, header)
    spec = importlib.machinery.ModuleSpec("pyarrow", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.setattr(heap.importlib.util, "find_spec",
                        lambda name: spec if name == "pyarrow" else None)
    assert heap.arrow_pool_default() == expected


def test_arrow_pool_is_left_alone_without_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap.importlib.util, "find_spec", lambda name: None)
    assert heap.arrow_pool_default() == ()


# Prints the pool Arrow allocates from after the CLI's process defaults (or without them) and
# whether pyarrow was imported to choose it.
ARROW_PROBE = """
import sys
from pathlib import Path
if sys.argv[1] == "defaults":
    from pdprobe.cli.app import set_process_defaults
    set_process_defaults()
    print("pyarrow" in sys.modules)
import pyarrow
print(pyarrow.default_memory_pool().backend_name)
"""


@pytest.mark.parametrize(("exported", "expected"), [(None, "jemalloc"), ("system", "system")])
def test_cli_process_allocates_arrow_from_jemalloc_unless_exported(
        exported: str | None, expected: str) -> None:
    """Against a control run of the same interpreter: without the defaults Arrow picks its
    own (mimalloc), with them jemalloc, and pyarrow is not imported to set it; a user's export
    wins."""
    import pyarrow

    if "jemalloc" not in pyarrow.supported_memory_backends():
        pytest.skip("this pyarrow is built without jemalloc")
    environ = {k: v for k, v in os.environ.items() if k != heap.ARROW_POOL_VARIABLE}
    env = {} if exported is None else {heap.ARROW_POOL_VARIABLE: exported}

    def run(mode: str) -> list[str]:
        proc = subprocess.run([sys.executable, "-c", ARROW_PROBE, mode], capture_output=True,
                              text=True, env={**environ, **env}, check=True, timeout=60)
        assert "Unsupported backend" not in proc.stderr
        return proc.stdout.split()

    if exported is None:
        assert run("control") != ["jemalloc"]  # else the test could not tell
    assert run("defaults") == ["False", expected]
