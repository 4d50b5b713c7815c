"""The live options are declared once and given to every live command as one ``target``."""

from __future__ import annotations

import inspect

import pytest

from pdprobe.cli.app import run
from pdprobe.cli.check import check_command
from pdprobe.cli.collect import collect_command
from pdprobe.cli.diagnose import diagnose_command
from pdprobe.cli.live_options import LIVE_OPTIONS, build_target, live_options
from pdprobe.collectors.prometheus_target import PrometheusTarget


@pytest.mark.parametrize("command", [diagnose_command, collect_command, check_command])
def test_every_live_command_takes_the_same_options(command: object) -> None:
    params = inspect.signature(command).parameters  # type: ignore[arg-type]
    assert "target" not in params
    live = [name for name, _, _ in LIVE_OPTIONS]
    assert [name for name in params if name in live] == live


def test_the_options_reach_the_command_as_the_target_build_target_makes() -> None:
    seen: list[PrometheusTarget | None] = []

    @live_options
    def probe(name: str = "x", target: PrometheusTarget | None = None) -> int:
        seen.append(target)
        return 0

    probe(name="y", prometheus="http://prom:9090/", since="2h", until="1796047200",
          header=["X-Scope-OrgID: t1"], timeout=12.0)
    expected = build_target("http://prom:9090/", since="2h", until="1796047200",
                            header=["X-Scope-OrgID: t1"], timeout=12.0)
    assert seen == [expected]
    probe()
    assert seen[-1] is None  # no --prometheus: no target


def test_bad_live_option_is_a_usage_error_through_the_cli(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["check", "--prometheus", "http://127.0.0.1:9", "--header", "no-colon"])
    assert code == 3
    err = capsys.readouterr().err
    assert "--header 'no-colon'" in err and len(err.strip().splitlines()) == 1
