"""--since/--until on captured files (cli/window.py, collectors/time_window.py): the window
selects what is diagnosed, the live default does not cut a capture, and the report says what
was outside."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe.cli.app import run
from pdprobe.cli.live_options import build_target
from pdprobe.cli.window import file_window, parse_since
from pdprobe.errors import UsageError

T0 = 1796040000.0  # 2026-11-30T12:00:00Z
QUIET_HOUR = "2026-11-30T13:00:00Z"


def _block(rng: np.random.Generator, t0: float, rps: float, queue_s: float) -> pd.DataFrame:
    n = int(3600 * rps)
    prompt = rng.integers(500, 1500, n)
    queue = rng.exponential(queue_s, n)
    ttft = queue + prompt / 20000 + 0.06
    tpot = rng.normal(0.03, 0.002, n)
    out = rng.integers(100, 300, n)
    return pd.DataFrame({
        "arrival_ts": np.sort(t0 + rng.uniform(0, 3600, n)), "prompt_tokens": prompt,
        "output_tokens": out, "prefill_instance": rng.choice(["prefill-0", "prefill-1"], n),
        "decode_instance": rng.choice(["decode-0", "decode-1"], n), "queue_s": queue,
        "prefill_s": prompt / 20000, "kv_transfer_s": 0.01, "ttft_s": ttft, "tpot_s": tpot,
        "e2e_s": ttft + tpot * (out - 1), "status": "ok"})


@pytest.fixture(scope="module")
def burst_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two hours of request records: a quiet hour (2 req/s, prefill queues of 10 ms), then a
    burst hour (6 req/s, prefill queues of 4 s: TTFT misses its objective)."""
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("burst") / "requests.csv"
    pd.concat([_block(rng, T0, 2, 0.01), _block(rng, T0 + 3600, 6, 4.0)]).to_csv(
        path, index=False)
    return path


def _diagnose(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = run(["diagnose", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _causes(report: dict) -> set[str]:
    return {f["cause"] for f in report["findings"]}


def test_a_burst_outside_the_window_does_not_fire(burst_capture: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _diagnose(capsys, str(burst_capture), "--until", QUIET_HOUR)
    assert code == 0 and "prefill-bound" not in _causes(report)
    assert report["workload"]["requests"] == 7200
    assert ("window 2026-11-30T12:00:00Z to 2026-11-30T13:00:00Z (--until "
            "2026-11-30T13:00:00Z); outside it: 21,600 of 28,800 request records"
            ) in report["notes"]


def test_a_burst_inside_the_window_fires(burst_capture: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _diagnose(capsys, str(burst_capture), "--since", QUIET_HOUR)
    assert code == 2 and "prefill-bound" in _causes(report)
    assert report["workload"]["requests"] == 21600
    # a length ends at the capture's end: the last half hour is inside the burst
    code, report = _diagnose(capsys, str(burst_capture), "--since", "30m")
    assert "prefill-bound" in _causes(report)
    assert report["window"]["start"] >= "2026-11-30T13:29"
    assert any("--since 30m before the capture's end" in n for n in report["notes"])


def test_without_the_flags_the_whole_capture_is_diagnosed(
        burst_capture: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PDPROBE_SINCE", raising=False)
    _, report = _diagnose(capsys, str(burst_capture))
    assert report["workload"]["requests"] == 28800  # the live default (30m) cuts nothing
    assert not any(n.startswith("window ") for n in report["notes"])


def test_a_window_outside_the_capture_exits_3_in_one_line(
        burst_capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["diagnose", str(burst_capture), "--since", "2026-12-01T00:00:00Z"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1
    assert "nothing in the window" in err[0] and "the capture spans" in err[0]


def test_since_is_a_duration_or_a_time() -> None:
    assert parse_since("90m") == (5400.0, None)
    assert parse_since("900") == (900.0, None)
    assert parse_since("2026-11-30T13:00:00Z") == (None, T0 + 3600)
    for bad in ("soon", "-5m", "0"):
        with pytest.raises(UsageError):
            parse_since(bad)
    assert file_window(None, None) is None
    with pytest.raises(UsageError, match="not before --until"):
        file_window("2026-11-30T14:00:00Z", "2026-11-30T13:00:00Z")


def test_live_takes_an_absolute_since_as_the_same_window() -> None:
    by_length = build_target("http://prom:9090", since="1h", until="2026-11-30T14:00:00Z")
    by_start = build_target("http://prom:9090", since="2026-11-30T13:00:00Z",
                            until="2026-11-30T14:00:00Z")
    assert by_length is not None and by_start is not None
    assert by_start.since_s == by_length.since_s == 3600
    default = build_target("http://prom:9090", since=None)
    assert default is not None and default.since_s == 1800
