"""The analysis threads of ``services.diagnose.analyse``: the transfer-path series goes to
whichever thread is free first, with the same result either way."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import pdprobe.analysis.capacity as capacity
import pdprobe.analysis.evidence.build as build
import pdprobe.analysis.series as series_module
from pdprobe.services.diagnose import DiagnoseRequest, diagnose


def _series_thread(monkeypatch: pytest.MonkeyPatch, slow: str) -> tuple[Any, str]:
    """The report of the bundled sample with ``slow`` (the capacity model or the evidence)
    held until the series has started, and the name of the thread that computed the series.
    Held by an event, not a sleep: on a loaded machine the other thread's work can outlast
    any fixed delay."""
    seen: list[str] = []
    started = threading.Event()
    real_series = series_module.transfer_path_series

    def series(dataset: Any) -> Any:
        seen.append(threading.current_thread().name)
        started.set()
        return real_series(dataset)

    monkeypatch.setattr(series_module, "transfer_path_series", series)
    module, name = (capacity, "estimate_plan") if slow == "capacity" else \
        (build, "compute_evidence")
    real = getattr(module, name)

    def delayed(*args: Any, **kwargs: Any) -> Any:
        assert started.wait(timeout=60), "the other thread never started the series"
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, delayed)
    report = diagnose(DiagnoseRequest())
    return report, seen[0]


def test_series_runs_on_the_thread_free_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the capacity model slow, this thread takes the series back; with the evidence
    slow, the pool computes it; the reports are the same."""
    by_main, main_thread = _series_thread(monkeypatch, "capacity")
    monkeypatch.undo()
    by_pool, pool_thread = _series_thread(monkeypatch, "evidence")
    assert main_thread == "MainThread"
    assert pool_thread.startswith("analysis")
    assert repr(by_main.series) == repr(by_pool.series)  # NaN gaps: compared as text
    assert [f.code for f in by_main.findings] == [f.code for f in by_pool.findings]


def test_kv_bytes_measured_beside_the_plan_is_the_plans_own() -> None:
    """``estimate_plan`` given ``measured_kv_bytes`` from a task before it plans as it does
    measuring them itself (the bundled sample has measured transfers)."""
    from pdprobe.analysis.capacity.transfer import KvBytes, measured_kv_bytes
    from pdprobe.analysis.workload import summarize_workload
    from pdprobe.services.diagnose import load_dataset
    from pdprobe.services.verify import capacity_options

    request = DiagnoseRequest()
    dataset, _ = load_dataset(request)
    workload = summarize_workload(dataset)
    measured = measured_kv_bytes(dataset)
    assert isinstance(measured, KvBytes)
    given = capacity.estimate_plan(dataset, workload, capacity_options(request),
                                   measured=measured)
    own = capacity.estimate_plan(dataset, workload, capacity_options(request))
    assert repr(given.result) == repr(own.result)  # type: ignore[union-attr]


def test_a_failed_kv_measure_fails_the_plan_not_the_run(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """An error measuring the KV bytes (the pool's first task) reaches the plan that reads
    them and is raised where the plan is read, with no thread left waiting."""
    import pdprobe.analysis.capacity.transfer as transfer

    def broken(dataset: Any) -> Any:
        raise RuntimeError("measuring failed")

    monkeypatch.setattr(transfer, "measured_kv_bytes", broken)
    with pytest.raises(RuntimeError, match="measuring failed"):
        diagnose(DiagnoseRequest())
    assert [t.name for t in threading.enumerate() if t.name.startswith("analysis")] == []
