"""``pdprobe watch`` rounds: a line for the first verdict and for each change only; the
exposition follows every round, an UNKNOWN round included."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.errors import SourceError
from pdprobe.report.model import Report
from pdprobe.services import watch as W
from pdprobe.services.diagnose import DiagnoseRequest
from tests.report import factory as F


def test_prints_changes_only_and_exposes_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    reports: Iterator[Report | Exception] = iter([
        F.healthy(), F.healthy(), F.prefill_bound(), SourceError("prometheus down"),
        SourceError("prometheus down"), F.prefill_bound()])

    def fake(_request: DiagnoseRequest) -> Report:
        item = next(reports)
        if isinstance(item, Exception):
            raise item
        return item

    monkeypatch.setattr(W, "diagnose", fake)
    lines: list[str] = []
    texts: list[str] = []

    class Spy(W.Exposition):
        def set(self, text: str) -> None:
            texts.append(text)

    state = W.watch(DiagnoseRequest(prometheus=PrometheusTarget(url="http://p:9090")), 60.0,
                    say=lines.append, exposition=Spy(), rounds=6, sleep=lambda _s: None)
    assert state.rounds == 6 and state.failed_rounds == 2
    verdicts = [line.split("  ", 1)[1] for line in lines]
    assert len(lines) == 4, lines  # first, worse, unknown, back (repeats are silent)
    assert verdicts[0].startswith("OK")
    assert verdicts[1].startswith("WORSE  new critical finding PD001")
    assert verdicts[2] == "UNKNOWN  could not judge: prometheus down"
    assert verdicts[3].startswith("CRITICAL")
    assert len(texts) == 6
    assert 'pdprobe_status{status="unknown"} 3' in texts[3]
    assert "pdprobe_watch_rounds_total 4" in texts[3]
    assert 'pdprobe_status{status="critical"} 2' in texts[5]


def test_listen_parsing_defaults_to_loopback() -> None:
    from pdprobe.cli.watch import parse_listen

    assert parse_listen(":9464") == ("127.0.0.1", 9464)
    assert parse_listen("9464") == ("127.0.0.1", 9464)
    assert parse_listen("0.0.0.0:80") == ("0.0.0.0", 80)
    with pytest.raises(Exception, match="not HOST:PORT"):
        parse_listen("localhost:http")
