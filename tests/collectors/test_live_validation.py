"""Live answers pass the same edge checks as files (issue 14): an exporter's negative sample is
dropped with a warning, never turned into a negative rate."""

from __future__ import annotations

import pandas as pd
import pytest

from pdprobe.collectors import prometheus
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.prometheus_target import PrometheusTarget
from pdprobe.collectors.roles import RoleOptions
from pdprobe.dataset import Partial, SourceInfo


def test_collect_live_drops_negative_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = pd.DataFrame({"ts": [1.75e9, 1.75e9 + 15, 1.75e9 + 30],
                            "instance": "10.0.0.5:8000", "signal": "requests_running",
                            "kind": "gauge", "le": float("nan"), "value": [3.0, -820.0, 4.0]})
    partial = Partial(source=SourceInfo("prometheus http://127.0.0.1:9", "prometheus", "live", 3),
                      metrics=metrics)

    class Result:
        def __init__(self) -> None:
            self.partial = partial

    monkeypatch.setattr(prometheus, "collect_partial", lambda target, ctx: Result())
    ds = prometheus.collect_live(PrometheusTarget(url="http://127.0.0.1:9"), ReadContext(),
                                 RoleOptions())
    assert ds.metrics["value"].tolist() == [3.0, 4.0]
    assert any("dropped 1 metric sample" in w for w in ds.warnings)
