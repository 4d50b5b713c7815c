"""PD303 kv-transfer-failures: failed, timed-out and abandoned KV hand-offs, their share, rate,
TTFT tail and the NIC/peer they gather on.

The failure-only logs are tests/fixtures/logs/failures/ (real lines from upstream threads and
format strings; tests/collectors/test_failure_lines.py cites each source).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd303_kv_transfer_failures import KvTransferFailures
from tests.rules.builders import (
    T0,
    Cluster,
    counter,
    event_rows,
    make_context,
    make_dataset,
    only,
    scenario_context,
)

RULE = KvTransferFailures()
FAILURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "failures"


@pytest.mark.parametrize("mix", ["all", "requests", "metrics", "logs"])
def test_healthy_cluster_has_no_failures(mix: str) -> None:
    assert only(RULE.evaluate(scenario_context("healthy", mix)), "PD303") == []


def test_nothing_to_read_is_inconclusive() -> None:
    [res] = RULE.evaluate(make_context(make_dataset()))
    assert isinstance(res, Inconclusive) and "failure" in res.needs


@pytest.mark.parametrize("name", sorted(p.name for p in FAILURES.glob("*.log")))
def test_a_log_of_only_failure_lines_gives_a_finding_through_diagnose(name: str) -> None:
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose

    report = diagnose(DiagnoseRequest(paths=(FAILURES / name,)))
    assert report.status in ("warning", "critical")  # never "could not judge"
    [f] = [f for f in report.findings if f.cause == "kv-transfer-failures"]
    assert f.severity is Severity.WARNING
    assert f.instances == (Path(name).stem,)


def _events(n_bad: int, n_other: int) -> list[pd.DataFrame]:
    """Transfer failures on prefill-0; the NIC marked inactive is mlx5_1 n_bad times."""
    ts = T0 + np.linspace(60, 540, n_bad + n_other)
    frames = [event_rows(ts[i:i + 1], "prefill-0", S.EV_KV_TRANSFER_FAILED,
                         S.event_detail("Mooncake transfer failed", request=f"r{i}"))
              for i in range(n_bad + n_other)]
    nics = ["mlx5_1"] * n_bad + [f"mlx5_{2 + i % 3}" for i in range(n_other)]
    frames += [event_rows(ts[i:i + 1], "prefill-0", S.EV_RDMA_NIC_INACTIVE,
                          S.event_detail("local RNIC marked inactive", nic=nic))
               for i, nic in enumerate(nics)]
    return frames


def test_one_bad_nic_is_named() -> None:
    [f] = only(RULE.evaluate(make_context(make_dataset(events=_events(5, 2)))), "PD303")
    assert f.severity is Severity.WARNING  # no denominator: 7 failures, below the critical 10
    assert "NIC mlx5_1 on prefill-0" in f.summary
    spread = next(e for e in f.evidence if e.what.startswith("failures naming NIC"))
    assert float(spread.value) == pytest.approx(100 * 5 / 7, rel=1e-3)
    assert "2 other NICs named" in spread.source
    assert any(e.what.startswith("failure rate") for e in f.evidence)


def test_failures_spread_evenly_name_no_nic() -> None:
    [f] = only(RULE.evaluate(make_context(make_dataset(events=_events(2, 8)))), "PD303")
    assert "NIC" not in f.summary
    assert f.severity is Severity.CRITICAL  # 10 failed transfers without a denominator


def _records_with_failures(share: float) -> pd.DataFrame:
    """Healthy records where ``share`` failed at the hand-off (prefill done, no first token),
    and requests arriving in the second half wait longer for their first token."""
    req = Cluster(duration_s=600).requests()
    rng = np.random.default_rng(3)
    late = req["arrival_ts"].to_numpy() > T0 + 300
    fail = late & (rng.random(len(req)) < 2 * share)
    req.loc[fail, "status"] = "error"
    req.loc[fail, ["ttft_s", "tpot_s", "e2e_s", "kv_transfer_s"]] = np.nan
    req.loc[late & ~fail, "ttft_s"] *= 3.0  # retries and timeouts: the TTFT tail
    return req


@pytest.mark.parametrize(("share", "severity"), [(0.003, Severity.INFO), (0.02, Severity.WARNING),
                                                 (0.1, Severity.CRITICAL)])
def test_severity_follows_the_share_of_requests(share: float, severity: Severity) -> None:
    req = _records_with_failures(share)
    failed = req[req["status"] == "error"]
    events = [event_rows(failed["arrival_ts"].to_numpy() + 1.0, "decode-0",
                         S.EV_KV_TRANSFER_FAILED)]
    [f] = only(RULE.evaluate(make_context(make_dataset(req, events=events))), "PD303")
    assert f.severity is severity
    got = next(e for e in f.evidence if e.what.startswith("share of requests"))
    assert float(got.value) == pytest.approx(100 * len(failed) / len(req), rel=0.01)
    if severity is not Severity.INFO:
        tail = next(e for e in f.evidence if e.what.startswith("TTFT p90 of requests arriving"))
        assert float(tail.value) > 1.5 * float(tail.baseline)
        assert "TTFT is higher while they happen" in f.summary


def test_records_alone_count_only_errors_at_the_hand_off() -> None:
    req = _records_with_failures(0.05)
    [f] = only(RULE.evaluate(make_context(make_dataset(req))), "PD303")
    assert f.severity is Severity.CRITICAL and f.confidence <= 0.5
    # timeouts (overload, drain) are not transfer failures
    req = Cluster(duration_s=600).requests()
    req.loc[req.index[::10], "status"] = "timeout"
    assert only(RULE.evaluate(make_context(make_dataset(req))), "PD303") == []


def test_failure_counters_against_finished_requests() -> None:
    ts = T0 + np.arange(0.0, 601.0, 15.0)
    frames = [counter("decode-0", S.REQUESTS_FINISHED_TOTAL, ts, np.arange(ts.size) * 20.0),
              counter("decode-0", S.KV_TRANSFER_FAILURES_TOTAL, ts, np.arange(ts.size) * 1.0)]
    [f] = only(RULE.evaluate(make_context(make_dataset(metrics=frames))), "PD303")
    assert f.severity is Severity.CRITICAL  # one in 20
    assert "finished-request counters" in next(
        e.source for e in f.evidence if e.what.startswith("share of requests"))
