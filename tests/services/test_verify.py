"""``--verify``: the recommendation replayed by the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pdprobe.analysis.base import CapacityResult, SloAttainment
from pdprobe.analysis.capacity import build_model, plan_capacity
from pdprobe.analysis.capacity.mix import mix_from_summary
from pdprobe.analysis.capacity.recommend import Slo
from pdprobe.profiles import load_profile
from pdprobe.services.verify import (
    model_profile,
    verify_recommendation,
    write_replay_trace,
)
from pdprobe.values import Missing

pytest.importorskip("pdprobe.sim.engine")


def _plan(rate: float) -> tuple[object, object, Slo, CapacityResult]:
    mix = mix_from_summary(prompt_mean=1500, prompt_p90=3500, output_mean=150, output_p90=350,
                           rate_rps=rate, hit_rate=0.0, arrival_cv2=1.0,
                           max_prompt_tokens=131072)
    built = build_model(None, mix, load_profile("llama3-8b-h100"))
    slo = Slo.of(1.0, 0.05)
    return mix, built, slo, plan_capacity(mix, built, slo)


def test_replay_trace_is_a_poisson_sample(tmp_path: Path) -> None:
    mix, *_ = _plan(4.0)
    path = tmp_path / "t.jsonl"
    span = write_replay_trace(mix, path)  # type: ignore[arg-type]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 4000
    assert len(rows) / span == pytest.approx(4.0, rel=0.1)
    assert np.mean([r["prompt_tokens"] for r in rows]) == pytest.approx(1500, rel=0.05)


def test_verified_recommendation_meets_the_objectives() -> None:
    mix, built, slo, plan = _plan(6.0)
    result = verify_recommendation(mix, built, slo, plan)  # type: ignore[arg-type]
    assert isinstance(result, SloAttainment)
    assert result.method.startswith("simulation of")
    assert f"{plan.recommended_prefill}P/{plan.recommended_decode}D" in result.method
    assert not isinstance(result.ttft, Missing) and result.ttft >= 0.85
    assert not isinstance(result.tpot, Missing) and result.tpot >= 0.85
    assert model_profile(built).prefill_b_s_per_token == built.inputs.prefill.b_s_per_token  # type: ignore[attr-defined]
