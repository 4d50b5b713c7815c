"""``services/ratio.py`` and ``pdprobe ratio``: planning from traces and length options.

(They live here with the model they drive; the service and the CLI are thin.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdprobe.cli.app import app
from pdprobe.errors import InputError, UsageError
from pdprobe.services.ratio import RatioRequest, plan_ratio

runner = CliRunner()
TRACES = ("AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv",
          "mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl")


def test_plan_from_length_options() -> None:
    plan = plan_ratio(RatioRequest(prompt_mean=2000, prompt_p90=5000, output_mean=300,
                                   output_p90=600, rate_rps=20.0, slo_ttft_s=2.0,
                                   slo_tpot_s=0.1))
    c = plan.capacity
    assert plan.profile == "llama3-70b-h100-tp4"
    assert plan.workload.prompt_tokens.mean == pytest.approx(2000, rel=0.01)
    assert isinstance(c.recommended_prefill, int) and c.recommended_prefill >= 1
    assert c.slo_defaulted == ()
    # the distribution costs more prefill than its mean (Jensen)
    assert c.jensen_gap_prefill > 0
    assert any("gamma distributions" in n for n in c.notes)


def test_fixed_lengths_have_no_jensen_gap() -> None:
    plan = plan_ratio(RatioRequest(prompt_mean=2000, output_mean=300, rate_rps=5.0))
    assert plan.capacity.jensen_gap_prefill == pytest.approx(0.0, abs=1e-12)
    assert plan.capacity.mean_based_prefill == plan.capacity.mean_based_prefill
    assert any("taken as fixed" in n for n in plan.capacity.notes)
    assert plan.capacity.slo_defaulted == ("ttft", "tpot")


def test_more_load_and_hit_rate_options() -> None:
    base = RatioRequest(prompt_mean=4000, prompt_p90=9000, output_mean=200, output_p90=500,
                        rate_rps=10.0)
    low = plan_ratio(base).capacity
    high = plan_ratio(RatioRequest(**{**base.__dict__, "rate_rps": 40.0})).capacity
    cached = plan_ratio(RatioRequest(**{**base.__dict__, "hit_rate": 0.5})).capacity
    assert high.recommended_prefill > low.recommended_prefill
    assert high.recommended_decode >= low.recommended_decode
    assert cached.prefill_capacity_rps > low.prefill_capacity_rps
    assert any(b.label.startswith("hit rate 40%") for b in cached.band)


@pytest.mark.parametrize("bad", [
    RatioRequest(prompt_mean=100, output_mean=10),  # no rate
    RatioRequest(output_mean=10, rate_rps=1.0),  # no prompt
    RatioRequest(prompt_mean=100, output_mean=10, rate_rps=-1.0),
    RatioRequest(prompt_mean=100, output_mean=10, rate_rps=1.0, hit_rate=1.5),
    RatioRequest(prompt_mean=100, prompt_p90=50, output_mean=10, rate_rps=1.0),
    RatioRequest(trace=Path("x.csv"), prompt_mean=100),
    RatioRequest(prompt_mean=100, output_mean=10, rate_rps=1.0, profile="no-such-gpu"),
])
def test_bad_requests_raise_one_line_usage_errors(bad: RatioRequest) -> None:
    with pytest.raises(UsageError) as info:
        plan_ratio(bad)
    assert "\n" not in str(info.value)


def test_trace_without_requests_is_an_input_error(tmp_path: Path) -> None:
    f = tmp_path / "metrics.prom"
    f.write_text("# TYPE vllm:num_requests_running gauge\n"
                 'vllm:num_requests_running{instance="a:8000"} 1 1700000000000\n')
    with pytest.raises((InputError, UsageError)):
        plan_ratio(RatioRequest(trace=f))


def test_trace_timings_calibrate_the_plan(tmp_path: Path) -> None:
    from tests.analysis.capacity.test_estimate import capture

    path = tmp_path / "requests.jsonl"
    capture(slowdown=2.5).to_json(path, orient="records", lines=True)
    plan = plan_ratio(RatioRequest(trace=path))
    assert "fit to" in plan.capacity.model_source
    assert plan.capacity.fit_quality["prefill_scale_vs_profile"] == pytest.approx(2.5, rel=0.05)
    assert any("slower than profile" in n for n in plan.capacity.notes)


def test_cli_list_profiles_and_errors() -> None:
    res = runner.invoke(app, ["ratio", "--list-profiles"])
    assert res.exit_code == 0
    assert "llama3-70b-h100-tp4 (default)" in res.output
    res = runner.invoke(app, ["ratio", "--prompt-mean", "100"])
    assert isinstance(res.exception, UsageError)


def test_cli_writes_output_file(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    res = runner.invoke(app, ["ratio", "--prompt-mean", "3000", "--prompt-p90", "7000",
                              "--output-mean", "250", "--rate", "12", "--format", "json",
                              "--output", str(out), "--profile", "qwen3-235b-h20-tp8"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["profile"] == "qwen3-235b-h20-tp8"
    assert data["capacity"]["kv_bytes_per_token"] == 385_024


@pytest.fixture(scope="module")
def trace_plans(traces_dir: Path) -> dict[str, dict]:
    plans = {}
    for name in TRACES:
        res = runner.invoke(app, ["ratio", "--trace", str(traces_dir / name), "--format", "json"])
        assert res.exit_code == 0, res.output
        plans[name] = json.loads(res.output)
    return plans


@pytest.mark.parametrize("name", TRACES)
def test_real_traces_give_sane_plans(trace_plans: dict[str, dict], name: str) -> None:
    data = trace_plans[name]
    ratio = data["ratio"]
    assert 1 <= ratio["recommended"]["prefill"] <= 50
    assert 1 <= ratio["recommended"]["decode"] <= 20
    assert 0.05 < ratio["theoretical"] < 200
    assert ratio["binding"] in ("prefill", "decode", "transfer")
    assert ratio["mean_based"]["prefill"] <= ratio["recommended"]["prefill"] + 1
    wl = data["workload"]
    assert wl["requests"] > 3000
    assert 2.0 < wl["arrival_rate_rps"] < 6.0


def test_long_prompt_traces_need_a_larger_prefill_share(trace_plans: dict[str, dict]) -> None:
    def share(name: str) -> float:
        r = trace_plans[name]["ratio"]["theoretical"]
        return r / (1 + r)

    conv = share("AzureLLMInferenceTrace_conv.csv")
    assert share("mooncake_conversation_trace.jsonl") > conv
    assert share("mooncake_synthetic_trace.jsonl") > conv
    # and Mooncake's long prompts show a real Jensen gap on prefill work
    assert trace_plans["mooncake_conversation_trace.jsonl"]["capacity"]["jensen_gap_prefill"] > 0.1


def test_trace_replayed_at_another_rate(traces_dir: Path) -> None:
    res = runner.invoke(app, ["ratio", "--trace",
                              str(traces_dir / "AzureLLMInferenceTrace_conv.csv"),
                              "--rate", "22", "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["workload"]["arrival_rate_rps"] == pytest.approx(22.0, rel=1e-3)
    assert any("replayed at 22" in n for n in data["notes"])


