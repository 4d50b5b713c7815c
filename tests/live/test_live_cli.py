"""``diagnose --prometheus``, ``collect`` and ``check`` end to end against a real Prometheus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdprobe.cli.app import main
from tests.live.conftest import LiveCluster

pytestmark = pytest.mark.live

TOKEN = "tok-9f8e7d6c5b4a"  # Prometheus ignores it; pdprobe must never print or store it


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def _summary(report: dict) -> dict:
    return {
        "status": report["status"],
        "instances": report["instances"],
        "findings": sorted((f["code"], f["cause"], f["severity"], tuple(sorted(f["instances"])))
                           for f in report["findings"]),
    }


@pytest.mark.slow
def test_live_capture_and_offline_reports_agree(live_cluster: LiveCluster, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDPROBE_BEARER_TOKEN", TOKEN)
    live_json = tmp_path / "live.json"
    code_live, _, err_live = _run(["diagnose", *live_cluster.cli_args(), "--format", "json",
                                   "-o", str(live_json)], capsys)
    capture = tmp_path / "capture.parquet"
    code_collect, _, err_collect = _run(["collect", *live_cluster.cli_args(), "-o", str(capture)],
                                        capsys)
    assert code_collect == 0 and capture.is_file()
    assert "wrote " in err_collect and "4 decode, 2 prefill" in err_collect
    code_cap, cap_out, _ = _run(["diagnose", str(capture), "--format", "json"], capsys)
    code_off, off_out, _ = _run(["diagnose", str(live_cluster.openmetrics), "--format", "json"],
                                capsys)
    live = json.loads(live_json.read_text())
    cap, off = json.loads(cap_out), json.loads(off_out)
    assert code_live == code_cap == code_off
    assert _summary(live) == _summary(cap) == _summary(off)
    assert live["instances"] == {"prefill": 2, "decode": 4, "unknown": 0}
    assert live["ratio"] == cap["ratio"]
    assert live["ratio"]["actual"] == off["ratio"]["actual"] == 0.5
    assert live["ratio"]["recommended"] == off["ratio"]["recommended"]
    assert live["ratio"]["theoretical"] == pytest.approx(off["ratio"]["theoretical"], rel=0.01)
    # The credential is in no output and not in the capture file.
    for text in (err_live, err_collect, live_json.read_text(), cap_out):
        assert TOKEN not in text
    assert TOKEN.encode() not in capture.read_bytes()


def test_check_reports_families_roles_and_capabilities(live_cluster: LiveCluster,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["check", *live_cluster.cli_args(), "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["usable"] and doc["reachable"] and doc["authenticated"]
    assert len(doc["engines"]["vllm"]["families"]) == 24
    assert doc["engines"]["vllm"]["version"] == "vLLM 0.33-era names"
    assert {k: len(v) for k, v in doc["roles"].items()} == {"decode": 4, "prefill": 2}
    verdicts = {c["code"]: c["verdict"] for c in doc["capabilities"]}
    assert verdicts["PD401"] == "yes" and verdicts["PD601"] == "yes"
    assert verdicts["PD402"] == "partial"  # no Mooncake TENT transport counters
    assert doc["issued_queries"] <= 5  # time, build info, discovery, one role query


def test_check_without_rdma_says_what_cannot_be_judged(live_cluster: LiveCluster,
                                                       capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    nomap = tmp_path / "no-network.toml"
    nomap.write_text("[scope]\nnetwork_selector = 'job=\"no-such-job\"'\n", encoding="utf-8")
    code, out, _ = _run(["check", *live_cluster.cli_args(), "--metrics-map", str(nomap)], capsys)
    assert code == 0
    assert "no node_infiniband_* or RDMA-exporter series" in out
    assert "no      PD401 rdma-retransmits (rdma-retransmits): lacks RDMA retransmission" in out


def test_check_unreachable_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, _ = _run(["check", "--prometheus", f"http://127.0.0.1:{port}", "--timeout", "2"],
                        capsys)
    assert code == 3
    assert "NOT usable" in out and "connectivity    FAILED" in out and "connection refused" in out


def test_diagnose_unreachable_is_one_line_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = _run(["diagnose", "--prometheus", f"http://127.0.0.1:{port}", "--timeout", "2"],
                          capsys)
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and "cannot reach Prometheus" in err and "Traceback" not in err


def test_collect_needs_prometheus(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(["collect", "-o", str(tmp_path / "x.parquet")], capsys)
    assert code == 3 and "collect needs --prometheus URL" in err
