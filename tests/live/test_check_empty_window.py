"""``pdprobe check`` on a window without samples says where in time the data lies (issue 15)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from pdprobe.cli.app import main
from tests.live.conftest import LiveCluster

pytestmark = pytest.mark.live


def _check(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as info:
        main(["check", *args, "--format", "json"])
    out, _ = capsys.readouterr()
    return int(info.value.code or 0), json.loads(out)


def _minute(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def test_a_window_after_the_data_names_the_newest_sample(live_cluster: LiveCluster,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    # the fixture's data ends three hours ago: the last 30 minutes hold nothing (a window across
    # midnight names both dates)
    code, doc = _check(["--prometheus", live_cluster.url, "--since", "30m", "--timeout", "60"],
                       capsys)
    assert code == 3 and not doc["usable"]
    problem = doc["problem"]
    assert re.match(r"no samples in the window \d{4}-\d\d-\d\d \d\d:\d\d–(\d{4}-\d\d-\d\d )?"
                    r"\d\d:\d\d UTC; the "
                    r"newest sample of vllm:num_requests_running is from ", problem), problem
    # the newest sample's minute, within one subquery step (5 min) of the truth
    end = live_cluster.generated.end_ts
    assert any(_minute(end - d) in problem for d in range(0, 301, 60)), (problem, _minute(end))
    assert "before the window's start): move --since/--until" in problem


def test_a_window_before_the_data_names_the_oldest_sample(live_cluster: LiveCluster,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    start = live_cluster.generated.end_ts - live_cluster.spec.duration_s
    code, doc = _check(["--prometheus", live_cluster.url, "--since", "10m",
                        "--until", f"{start - 3600:.0f}", "--timeout", "60"], capsys)
    assert code == 3
    problem = doc["problem"]
    assert "the oldest sample of vllm:num_requests_running in the last 30 days is from" in problem
    assert "after the window's end): move --since/--until" in problem


def test_a_selector_matching_nothing_ever_says_so(live_cluster: LiveCluster,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _check([*live_cluster.cli_args(), "--selector", 'job="no-such-job"'], capsys)
    assert code == 3
    assert "nor any vLLM, SGLang or Dynamo metric matching {job=\"no-such-job\"} in the " \
        "last 30 days" in doc["problem"], doc["problem"]
