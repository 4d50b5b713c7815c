"""The kv-transfer-failures and not-disaggregated faults (pdprobe/sim/faults.py and where they
apply: transfer.py, decode.py, the Mooncake and request writers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pdprobe.sim.config import parse_fault
from pdprobe.sim.faults import effective
from pdprobe.sim.scenarios import build_scenario, run_to_dir


def test_parameters_become_effective() -> None:
    from dataclasses import replace

    cfg = build_scenario("healthy-low")
    eff = effective(replace(cfg, faults=(parse_fault("kv-transfer-failures:rate=0.2,nic=mlx5_3"),
                                         parse_fault("not-disaggregated:share=0.5"))))
    assert (eff.xfer_fail_rate, eff.xfer_fail_nic, eff.local_prefill_share) == (0.2, 3, 0.5)
    assert effective(cfg).xfer_fail_rate == 0.0 and effective(cfg).xfer_fail_nic == -1


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def test_transfer_failures_gather_on_the_bad_nic(tmp_path: Path) -> None:
    summary = run_to_dir(build_scenario("kv-transfer-failures"), tmp_path)
    assert 0.04 < summary.failed / summary.requests < 0.15  # rate 0.08
    errors = [r for r in _records(tmp_path) if r["status"] == "error"]
    assert errors and all(r["ttft_s"] is None and r["prefill_s"] is not None for r in errors)
    nics = re.findall(r"Too many errors found in local RNIC (\S+)@(mlx5_\d+), mark it inactive",
                      "".join(p.read_text() for p in (tmp_path / "logs").glob("*.log")))
    assert len(nics) == summary.failed
    bad = sum(1 for _, nic in nics if nic == "mlx5_1")
    assert bad / len(nics) >= 0.8  # the first prefill instance's mlx5_1
    assert "num_failed_transfers_total" in (tmp_path / "metrics.om").read_text()


def test_not_disaggregated_decode_prefills_itself(tmp_path: Path) -> None:
    summary = run_to_dir(build_scenario("not-disaggregated"), tmp_path)
    assert summary.completed == summary.requests and summary.prefill_utilisation == 0.0
    records = _records(tmp_path)
    assert all(r["kv_bytes"] == 0 and not r["prefill_instance"] for r in records)
    metrics = (tmp_path / "metrics.om").read_text()
    local = re.findall(r'prompt_tokens_by_source_total\{[^}]*role="decode"[^}]*'
                       r'source="local_compute"[^}]*\} (\S+)', metrics)
    assert local and float(local[-1]) > 0


@pytest.mark.parametrize("share", [0.3])
def test_a_partial_share_keeps_some_requests_disaggregated(tmp_path: Path, share: float) -> None:
    from dataclasses import replace

    cfg = build_scenario("healthy-low")
    run_to_dir(replace(cfg, faults=(parse_fault(f"not-disaggregated:share={share}"),)), tmp_path)
    records = _records(tmp_path)
    local = sum(1 for r in records if not r["prefill_instance"]) / len(records)
    assert local == pytest.approx(share, abs=0.08)
