"""Scenario configuration: mini-languages, validation and the scenario.toml round trip."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pdprobe.errors import UsageError
from pdprobe.profiles import BUILTIN_PROFILES, load_profile
from pdprobe.sim.config import (
    LengthDist,
    SimConfig,
    parse_fault,
    parse_length_dist,
    validate,
)


def test_parse_length_dists() -> None:
    assert parse_length_dist("fixed:512", "--prompt") == LengthDist(
        "fixed", median=512, sigma=0.0, min_tokens=1, max_tokens=512)
    d = parse_length_dist("lognormal:median=1500,sigma=0.9,max=8000", "--prompt")
    assert (d.kind, d.median, d.sigma, d.max_tokens) == ("lognormal", 1500.0, 0.9, 8000)
    b = parse_length_dist("bimodal:median=800,sigma=0.5,median2=9000,sigma2=0.3,weight2=0.2", "x")
    assert b.weight2 == 0.2 and b.median2 == 9000.0
    # mean of a lognormal: median * exp(sigma^2 / 2)
    assert LengthDist("lognormal", median=1000, sigma=1.0).mean_estimate() == pytest.approx(1648.72, rel=1e-4)


@pytest.mark.parametrize("text", ["uniform:1", "fixed:abc", "lognormal:median=0", "lognormal:mu=3",
                                  "bimodal:median=10", "lognormal:median=10,weight2=2",
                                  "lognormal:median=100,min=50,max=10"])
def test_bad_length_dists_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        parse_length_dist(text, "--prompt")


def test_parse_faults_fills_defaults_and_aliases() -> None:
    f = parse_fault("straggler:role=prefill,index=1,factor=3")
    assert (f.get("role"), f.get("index"), f.get("factor")) == ("prefill", 1.0, 3.0)
    assert parse_fault("tcp").kind == "no-rdma"
    assert parse_fault("rdma-retransmits").get("rate") == 0.1
    assert parse_fault("scale:at=30,decode=3").get("at_s") == 30.0
    for bad in ("nonsense", "straggler:speed=2", "small-kv:fraction=x"):
        with pytest.raises(UsageError):
            parse_fault(bad)


@pytest.mark.parametrize(("changes", "message"), [
    ({"decode": 0}, "impossible cluster: 0 decode"),
    ({"prefill": 0}, "impossible cluster: 0 prefill"),
    ({"faults": (parse_fault("no-rdma"), parse_fault("rdma-retransmits"))}, "contradictory"),
    ({"faults": (parse_fault("small-kv"), parse_fault("small-kv:fraction=0.5"))}, "given twice"),
    ({"faults": (parse_fault("straggler:index=5"),)}, "straggler decode index 5"),
    ({"faults": (parse_fault("routing-skew:targets=2"),)}, "routing-skew targets 2"),
    ({"faults": (parse_fault("ignore-kv-hits"),)}, "needs --router kv-aware"),
    ({"faults": (parse_fault("length-shift:at_s=999"),)}, "at_s must fall inside"),
    ({"faults": (parse_fault("scale:at_s=10,decode=0"),)}, "impossible cluster"),
    ({"faults": (parse_fault("thin-link:fraction=1.5"),)}, "fraction must be within"),
    ({"rate_rps": -1.0}, "--rate must be positive"),
])
def test_validation_rejects_impossible_runs(changes: dict, message: str) -> None:
    config = replace(SimConfig(decode=2, duration_s=60.0), **changes)
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        validate(config)


def test_scenario_toml_round_trip(tmp_path: Path) -> None:
    config = SimConfig(profile=BUILTIN_PROFILES["qwen3-235b-h20-tp8"], prefill=3, decode=5,
                       rate_rps=2.5, duration_s=900.0, seed=42, engine="sglang", naming="pod",
                       router="kv-aware", prefix_hit_rate=0.4,
                       prompt=parse_length_dist("bimodal:median=800,sigma=0.5,median2=9000,"
                                                "sigma2=0.3,weight2=0.2", "p"),
                       faults=(parse_fault("straggler:role=decode,index=2,factor=2"),
                               parse_fault("scale:at_s=300,prefill=5"),
                               parse_fault("ignore-kv-hits")))
    path = tmp_path / "scenario.toml"
    path.write_text(config.to_toml(), encoding="utf-8")
    assert SimConfig.from_toml(path) == config


def test_scenario_toml_keeps_a_custom_profile(tmp_path: Path) -> None:
    prof_path = tmp_path / "h800.toml"
    prof_path.write_text('base = "llama3-70b-h100-tp4"\nname = "h800"\ndecode_a_s = 0.02\n')
    config = SimConfig(profile=load_profile(str(prof_path)), seed=3)
    path = tmp_path / "scenario.toml"
    path.write_text(config.to_toml(), encoding="utf-8")
    loaded = SimConfig.from_toml(path)
    assert loaded.profile.name == "h800" and loaded.profile.decode_a_s == 0.02


def test_bad_scenario_files_are_usage_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("prefill = 2\nwarp_speed = 9\n")
    with pytest.raises(UsageError, match="unknown scenario keys"):
        SimConfig.from_toml(bad)
    with pytest.raises(UsageError, match="not found"):
        SimConfig.from_toml(tmp_path / "missing.toml")
