"""run_to_dir: atomic captures, nothing written on failure, the summary's numbers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pdprobe.errors import UsageError
from pdprobe.sim.config import SimConfig, parse_fault
from pdprobe.sim.model import run_simulation, run_to_dir, summarize
from pdprobe.values import Missing


def test_run_to_dir_writes_a_complete_capture(tmp_path: Path, small_config: SimConfig) -> None:
    out = tmp_path / "capture"
    summary = run_to_dir(small_config, out)
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == sorted(summary.files)
    assert {"requests.jsonl", "metrics.om", "node_metrics.om", "scenario.toml"} <= set(names)
    assert sum(1 for n in names if n.startswith("logs/")) == 5
    # scenario.toml reproduces the run
    again = run_to_dir(SimConfig.from_toml(out / "scenario.toml"), tmp_path / "again")
    assert (out / "requests.jsonl").read_bytes() == (tmp_path / "again" / "requests.jsonl").read_bytes()
    assert again.completed == summary.completed
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary folder left behind


def test_nothing_is_written_when_the_run_is_impossible(tmp_path: Path, small_config: SimConfig) -> None:
    out = tmp_path / "capture"
    with pytest.raises(UsageError):
        run_to_dir(replace(small_config, decode=0), out)
    with pytest.raises(UsageError):
        run_to_dir(replace(small_config, faults=(parse_fault("no-rdma"), parse_fault("tcp"))), out)
    assert not out.exists() and not any(tmp_path.iterdir())


def test_an_existing_folder_is_kept_unless_overwrite(tmp_path: Path, small_config: SimConfig) -> None:
    out = tmp_path / "capture"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        run_to_dir(small_config, out, overwrite=False)
    assert (out / "keep.txt").read_text() == "mine"
    run_to_dir(small_config, out, overwrite=True)
    assert not (out / "keep.txt").exists() and (out / "metrics.om").exists()


def test_summary_matches_the_request_records(small_config: SimConfig) -> None:
    res = run_simulation(small_config)
    s = summarize(res)
    r = res.requests
    ttft = r["t_first"] - r["arrival_s"]
    assert s.requests == r["arrival_s"].size == s.completed
    assert not isinstance(s.ttft_s, Missing)
    assert s.ttft_s.p90 == pytest.approx(np.percentile(ttft, 90))
    assert s.ttft_attainment == pytest.approx(float((ttft <= small_config.slo_ttft_s).mean()))
    assert not isinstance(s.prefill_utilisation, Missing) and 0 < s.prefill_utilisation < 1
    text = s.render()
    assert "TTFT" in text and "TPOT" in text and "KV transfer" in text and "3P/2D" in text
