"""Workloads: synthetic mixes, length shifts, and trace replay (rescaled, looped, hash_ids)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe.errors import PdprobeError
from pdprobe.sim.config import LengthDist, SimConfig, parse_fault
from pdprobe.sim.workload import build_workload, poisson_arrivals, sample_lengths


def test_poisson_arrivals_have_the_rate_and_exponential_gaps() -> None:
    rng = np.random.default_rng(1)
    t = poisson_arrivals(20.0, 1000.0, rng)
    assert t.size == pytest.approx(20_000, abs=4 * np.sqrt(20_000))
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.05, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)  # CV of an exponential
    assert t.min() >= 0 and t.max() < 1000.0


@pytest.mark.parametrize(("dist", "median", "mean"), [
    (LengthDist("fixed", median=512, sigma=0, max_tokens=512), 512, 512),
    (LengthDist("lognormal", median=1000, sigma=0.8, max_tokens=10**6), 1000, 1000 * np.exp(0.32)),
])
def test_length_samples_match_their_distribution(dist: LengthDist, median: float, mean: float) -> None:
    values = sample_lengths(dist, 50_000, np.random.default_rng(2))
    assert np.median(values) == pytest.approx(median, rel=0.03)
    assert values.mean() == pytest.approx(mean, rel=0.03)


def test_bimodal_mix_weights_its_modes() -> None:
    dist = LengthDist("bimodal", median=500, sigma=0.2, median2=8000, sigma2=0.2, weight2=0.25,
                      max_tokens=10**6)
    values = sample_lengths(dist, 40_000, np.random.default_rng(3))
    assert (values > 2000).mean() == pytest.approx(0.25, abs=0.01)


def test_length_shift_scales_later_requests() -> None:
    config = SimConfig(rate_rps=20.0, duration_s=200.0,
                       faults=(parse_fault("length-shift:at_s=100,prompt_scale=3,output_scale=0.5"),))
    wl = build_workload(config, np.random.default_rng(4))
    before, after = wl.arrival_s < 100, wl.arrival_s >= 100
    assert np.median(wl.prompt[after]) / np.median(wl.prompt[before]) == pytest.approx(3.0, rel=0.1)
    assert np.median(wl.output[after]) / np.median(wl.output[before]) == pytest.approx(0.5, rel=0.1)
    assert any("shifted" in n for n in wl.notes)


def test_synthetic_prefix_blocks_share_leading_ids() -> None:
    config = SimConfig(rate_rps=10.0, duration_s=100.0, prefix_hit_rate=0.5, prefix_groups=4)
    wl = build_workload(config, np.random.default_rng(5))
    assert wl.block_ids is not None and wl.block_off is not None
    blocks = np.diff(wl.block_off)
    np.testing.assert_array_equal(blocks, -(-wl.prompt // 512))  # ceil(prompt / 512) per prompt
    firsts = wl.block_ids[wl.block_off[:-1][blocks > 1]]
    # the first block of a prompt with a shared prefix is one of the 4 groups' first blocks
    assert len(set(firsts[firsts >= 0].tolist())) <= 4


def test_azure_trace_is_rescaled_and_looped(traces_dir: Path) -> None:
    trace = traces_dir / "AzureLLMInferenceTrace_code.csv"
    config = SimConfig(trace=str(trace), rate_rps=20.0, duration_s=1200.0)
    wl = build_workload(config, np.random.default_rng(6))
    # 8,819 rows at 2.57 req/s, replayed at 20 req/s: 441 s per pass, so ~2.7 passes
    t = pd.read_csv(trace, parse_dates=["TIMESTAMP"])["TIMESTAMP"]
    rel = (t - t.min()).dt.total_seconds().to_numpy()
    rel = rel * (rel.size / rel.max()) / 20.0
    period = rel.max() + rel.max() / (rel.size - 1)
    expected = sum(int((rel + k * period < 1200.0).sum()) for k in range(3))
    assert wl.n == expected
    assert np.diff(wl.arrival_s).min() >= 0
    assert any("looped 3 times" in n for n in wl.notes)
    assert wl.prompt.max() <= 7437 and wl.prompt.min() >= 3  # the trace's own lengths
    assert wl.block_ids is None


def test_mooncake_hash_ids_drive_the_prefix_caches(traces_dir: Path) -> None:
    trace = traces_dir / "mooncake_conversation_trace.jsonl"
    config = SimConfig(trace=str(trace), rate_rps=None, duration_s=120.0)
    wl = build_workload(config, np.random.default_rng(7))
    assert wl.block_ids is not None and wl.block_off is not None
    # first rows share hash id 0 as their first block (a common system prompt)
    assert wl.block_ids[wl.block_off[0]] == wl.block_ids[wl.block_off[1]] == 0
    assert wl.n == 339  # rows with timestamp < 120,000 ms: the trace's own rate


def test_bad_traces_are_input_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("arrival_ts,prompt_tokens,output_tokens\n")
    negative = tmp_path / "negative.csv"
    negative.write_text("arrival_ts,prompt_tokens,output_tokens\n1.0,100,10\n2.0,-5,10\n")
    for path in (empty, negative):
        with pytest.raises(PdprobeError):
            build_workload(replace(SimConfig(), trace=str(path)), np.random.default_rng(0))
