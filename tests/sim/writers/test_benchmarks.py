"""The simulator writes each load-generator layout, and pdprobe's readers read it back.

A simulated run (with KV-transfer failures) is written in every ``BENCHMARK_FORMATS`` layout
(``pdprobe/sim/writers/benchmarks.py``), sniffed and read like ``pdprobe diagnose`` does, and
compared with the run's canonical records (``request_frame``): request counts per status,
token totals, TTFT and TPOT means within rounding. The layouts themselves are checked against
the upstream writers by the reader tests (tests/collectors/benchmarks/, fixtures built from the
writers' code).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe.collectors.base import ReadContext, reader_for
from pdprobe.collectors.files import read_paths
from pdprobe.collectors.io import sniff
from pdprobe.sim.config import BENCHMARK_FORMATS, SimConfig, parse_fault
from pdprobe.sim.engine import SimResult
from pdprobe.sim.model import run_simulation, run_to_dir
from pdprobe.sim.writers.benchmarks import FORMATS, write_benchmark
from pdprobe.sim.writers.requests import request_frame

CONFIG = SimConfig(prefill=2, decode=2, duration_s=60.0, rate_rps=6.0, seed=3,
                   faults=(parse_fault("rdma-retransmits:rate=0.3"),))


@pytest.fixture(scope="module")
def run() -> tuple[SimResult, pd.DataFrame]:
    result = run_simulation(CONFIG)
    return result, request_frame(result)


def test_formats_agree() -> None:
    assert FORMATS == BENCHMARK_FORMATS


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("compress", [False, True])
def test_round_trip(run: tuple[SimResult, pd.DataFrame], tmp_path: Path, fmt: str,
                    compress: bool) -> None:
    result, truth = run
    path = write_benchmark(result, tmp_path, fmt, compress)
    sniffed = sniff(path)
    assert (sniffed.kind, sniffed.format) == ("benchmark", fmt)
    req = reader_for(sniffed.kind)(path, ReadContext()).requests
    assert len(req) == len(truth)
    assert (truth["status"] != "ok").sum() > 0  # the failures are there to be kept
    assert (req["status"] == "ok").sum() == (truth["status"] == "ok").sum()
    assert req["prompt_tokens"].sum() == truth["prompt_tokens"].sum()
    ok_t, ok_r = truth["status"] == "ok", req["status"] == "ok"
    assert req.loc[ok_r, "output_tokens"].sum() == truth.loc[ok_t, "output_tokens"].sum()
    assert req["ttft_s"].mean() == pytest.approx(truth["ttft_s"].mean(), rel=1e-6)
    assert req["tpot_s"].mean() == pytest.approx(truth["tpot_s"].mean(), rel=1e-6)
    assert req["e2e_s"].mean() == pytest.approx(truth["e2e_s"].mean(), rel=1e-3)
    if fmt in ("vllm-bench", "aiperf", "guidellm"):  # absolute or date-anchored arrivals
        assert np.sort(req["arrival_ts"].to_numpy()) == pytest.approx(
            np.sort(truth["arrival_ts"].to_numpy()), abs=1e-3)


def test_capture_with_a_benchmark_file(tmp_path: Path) -> None:
    """``simulate --benchmark-format`` puts the records in that layout, instead of
    requests.jsonl, next to the metrics and logs that do name the instances."""
    from dataclasses import replace

    out = tmp_path / "capture"
    summary = run_to_dir(replace(CONFIG, benchmark_format="aiperf"), out)
    assert "profile_export.jsonl" in summary.files
    assert not (out / "requests.jsonl").exists()
    ds = read_paths([out])
    assert len(ds.requests) == summary.requests
    assert "aiperf" in {s.format for s in ds.sources}
    assert len(ds.instances) == 4
