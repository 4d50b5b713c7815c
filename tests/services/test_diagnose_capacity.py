"""``pdprobe diagnose``'s capacity section end to end: after the check against the window,
every count describes the model the recommendation comes from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pdprobe.analysis.base import CapacityResult
from tests.analysis.capacity._consistency import count_disagreements

scenarios = pytest.importorskip("pdprobe.sim.scenarios")


@pytest.mark.slow
def test_a_recalibrated_recommendation_brings_its_windows_band_and_estimates(
        tmp_path: Path) -> None:
    """12 prefill instances routed round-robin (each its own FIFO queue), 65 % busy for 15
    minutes, judged against a 0.6 s TTFT objective: the model's pooled queue predicts a p90
    well below the window's, the recalibration (a queue per instance) needs more prefill than
    the model, and the windows, the band and the TTFT estimates at the recommended count say
    the same (before, they were the pooled model's: 13 recommended beside windows of 9 and a
    band whose +20 % load row needed 11)."""
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose

    base = scenarios.build_scenario("healthy-high", seed=0)
    prefill = 12
    config = replace(base, prefill=prefill, decode=8, router="round-robin", duration_s=900.0,
                     rate_rps=round(base.rate_rps / base.prefill * prefill, 3))
    scenarios.run_to_dir(config, tmp_path / "rr")
    report = diagnose(DiagnoseRequest(paths=(tmp_path / "rr",), slo_ttft_s=0.6))
    cap = report.capacity
    assert isinstance(cap, CapacityResult) and cap.recalibrated
    assert cap.calibrated_prefill == cap.needed_prefill
    assert any("with the recalibrated waits" in n for n in cap.notes)
    assert count_disagreements(cap) == []
    assert cap.ttft_attainment_estimate >= 0.9  # type: ignore[operator]
    assert cap.ttft_estimate_p90_s <= 0.6  # type: ignore[operator]
