"""``report/ratio_plan.py``: ``pdprobe ratio``'s plan as text, Markdown and JSON, and the
profile list."""

from __future__ import annotations

import json

import pytest

from pdprobe.report.ratio_plan import render_plan, render_profiles
from pdprobe.services.ratio import RatioRequest, list_profiles, plan_ratio


def test_render_formats() -> None:
    plan = plan_ratio(RatioRequest(prompt_mean=2000, prompt_p90=5000, output_mean=300,
                                   output_p90=600, rate_rps=20.0))
    text = render_plan(plan, "text")
    assert "theoretical ratio" in text and "Mean-based planner" in text and "Band" in text
    md = render_plan(plan, "markdown")
    assert md.startswith("# pdprobe ratio plan") and "| what-if |" in md
    data = json.loads(render_plan(plan, "json"))
    assert data["ratio"]["recommended"]["prefill"] == plan.capacity.recommended_prefill
    assert data["ratio"]["theoretical"] == pytest.approx(plan.capacity.theoretical_ratio)
    assert data["ratio"]["mean_based"]["prefill"] == plan.capacity.mean_based_prefill
    assert len(data["band"]) == len(plan.capacity.band)
    assert data["missing"]["capacity.verified"].startswith("not verified")
    assert "qwen3-235b-h20-tp8" in render_profiles(list_profiles(), "text")
    assert json.loads(render_profiles(list_profiles(), "json"))[0]["kv_bytes_per_token"] > 0
