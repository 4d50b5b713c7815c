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


def test_the_recalibrated_plans_parts_are_made_on_the_pool_meanwhile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool thread, done with the plan and the series, makes the recalibrated plan's band
    and windows (``CapacityPlan.prepare_recalibrated``) while this thread is still on the
    evidence: here the evidence waits for it, so the test fails if the pool never runs it.
    The report is the one without it."""
    from dataclasses import replace

    plain = diagnose(DiagnoseRequest())
    prepared = threading.Event()
    seen: list[str] = []
    real_plan = capacity.estimate_plan

    def plan_with_a_prepare(*args: Any, **kwargs: Any) -> Any:
        plan = real_plan(*args, **kwargs)

        def prepare() -> None:
            seen.append(threading.current_thread().name)
            prepared.set()

        return replace(plan, prepare_recalibrated=prepare)

    real_evidence = build.compute_evidence

    def evidence_after_the_prepare(*args: Any, **kwargs: Any) -> Any:
        assert prepared.wait(timeout=60), "the pool never made the recalibrated plan's parts"
        return real_evidence(*args, **kwargs)

    monkeypatch.setattr(capacity, "estimate_plan", plan_with_a_prepare)
    monkeypatch.setattr(build, "compute_evidence", evidence_after_the_prepare)
    report = diagnose(DiagnoseRequest())
    assert len(seen) == 1 and seen[0].startswith("analysis")
    assert [f.code for f in report.findings] == [f.code for f in plain.findings]
    assert repr(report.capacity) == repr(plain.capacity)
