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
from pdprobe.redact import clear


@pytest.fixture(autouse=True)
def _forget_secrets() -> object:
    """build_target registers secrets process-wide; later tests start without them."""
    yield
    clear()


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


@pytest.mark.parametrize(("args", "says"), [
    (["--prometheus", "http://bob:pw@/"], "has no host"),
    (["--prometheus", "http://host:99999"], "port"),
    (["--prometheus", "http://host:abc"], "port"),
    (["--prometheus", "http://host:9090/?x=1"], "query or fragment"),
    (["--prometheus", "ftp://host"], "not an http(s) URL"),
    (["--prometheus", "http://h:9090", "--until", "1e20"], "between 1970 and 9999"),
    (["--prometheus", "http://h:9090", "--until", "nan"], "between 1970 and 9999"),
    (["--prometheus", "http://h:9090", "--since", "inf"], "not a duration"),
    (["--prometheus", "http://h:9090", "--step", "0.0001s"], "1 ms resolution"),
    (["--prometheus", "http://h:9090", "--since", "30d", "--step", "1ms"], "points per series"),
    (["--prometheus", "http://h:9090", "--timeout", "nan"], "--timeout"),
    (["--prometheus", "http://h:9090", "-H", "X-Key: a\u0100b"], "outside Latin-1"),
    (["--prometheus", "http://h:9090", "-H", "Bad Name: v"], "not a valid header name"),
])
def test_bad_live_options_are_one_usage_line_before_any_query(
        args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["check", *args]) == 3
    err = capsys.readouterr().err
    assert says in err and len(err.splitlines()) == 1 and "internal error" not in err
    assert "pw@" not in err


@pytest.mark.parametrize("token", ["abc\ndef-secret", "tok\u0100en-secret"])
def test_unsendable_tokens_are_refused_without_showing_them(
        token: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from pdprobe.redact import clear

    path = tmp_path / "token"
    path.write_text(token, encoding="utf-8")
    try:
        assert run(["check", "--prometheus", "http://h:9090", "--bearer-token-file",
                    str(path)]) == 3
    finally:
        clear()
    err = capsys.readouterr().err
    assert "bearer token" in err and "secret" not in err and len(err.splitlines()) == 1


def test_url_passwords_with_hash_or_slash_become_basic_auth() -> None:
    target = build_target("http://bob:p#ss/w@prom:9090/")
    assert target is not None
    assert target.url == "http://prom:9090"
    assert (target.basic_auth_user, target.basic_auth_password) == ("bob", "p#ss/w")


def test_a_tenant_header_does_not_shred_the_report_but_a_key_header_is_redacted() -> None:
    """`-H 'X-Scope-OrgID: prod'` (README's example) must leave "prod-decode-0" readable;
    `-H 'X-Api-Key: ...'` is still redacted everywhere."""
    from pdprobe.redact import scrub

    build_target("http://prom:9090/", header=["X-Scope-OrgID: prod", "X-Api-Key: k3y-v4lue"])
    assert scrub("prod-decode-0 is slow") == "prod-decode-0 is slow"
    assert scrub("sent k3y-v4lue") == "sent ***"
