"""Tests for pdprobe/analysis/workload_metrics.py: the workload from length histograms and
request counters when there are no request records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.analysis.promql import histogram_quantile
from pdprobe.analysis.workload import summarize_workload
from pdprobe.dataset import InstanceInfo
from pdprobe.values import Missing
from tests.analysis.test_workload import _dataset, _dist, _summary

PROMPT_LE = [10.0, 100.0, 1000.0, 10000.0, np.inf]
OUTPUT_LE = [1.0, 10.0, 100.0, 1000.0, np.inf]


def _hist_rows(instance: str, signal: str, le: list[float], per_bucket_rate: list[float],
               mean_value: float, ts: np.ndarray) -> list[dict[str, object]]:
    """Cumulative histogram samples growing linearly in time."""
    rows: list[dict[str, object]] = []
    cum_rate = np.cumsum(per_bucket_rate)
    elapsed = ts - ts[0]
    for bound, r in zip(le, cum_rate, strict=True):
        rows += [{"ts": t, "instance": instance, "signal": signal, "kind": "bucket", "le": bound,
                  "value": r * e} for t, e in zip(ts, elapsed, strict=True)]
    total = cum_rate[-1]
    rows += [{"ts": t, "instance": instance, "signal": signal, "kind": "count", "le": np.nan,
              "value": total * e} for t, e in zip(ts, elapsed, strict=True)]
    rows += [{"ts": t, "instance": instance, "signal": signal, "kind": "sum", "le": np.nan,
              "value": total * mean_value * e} for t, e in zip(ts, elapsed, strict=True)]
    return rows


def _counter_rows(instance: str, signal: str, rate: float, ts: np.ndarray
                  ) -> list[dict[str, object]]:
    return [{"ts": t, "instance": instance, "signal": signal, "kind": "counter", "le": np.nan,
             "value": 1000.0 + rate * (t - ts[0])} for t in ts]


def _pd_metrics() -> tuple[pd.DataFrame, tuple[InstanceInfo, ...]]:
    ts = np.arange(0.0, 601.0, 15.0) + 1.7e9
    rows: list[dict[str, object]] = []
    # Prefill instances see the real prompt mix and a one-token output per request.
    for name in ("p0", "p1"):
        rows += _hist_rows(name, S.PROMPT_TOKENS, PROMPT_LE, [0.1, 0.4, 0.3, 0.2, 0.0], 900.0, ts)
        rows += _hist_rows(name, S.OUTPUT_TOKENS, OUTPUT_LE, [1.0, 0.0, 0.0, 0.0, 0.0], 1.0, ts)
        rows += _counter_rows(name, S.REQUESTS_FINISHED_TOTAL, 1.0, ts)
    # The decode instance records the same requests again, and the real output lengths.
    rows += _hist_rows("d0", S.PROMPT_TOKENS, PROMPT_LE, [0.0, 0.0, 1.0, 1.0, 0.0], 5000.0, ts)
    rows += _hist_rows("d0", S.OUTPUT_TOKENS, OUTPUT_LE, [0.0, 0.5, 1.0, 0.5, 0.0], 120.0, ts)
    rows += _counter_rows("d0", S.REQUESTS_FINISHED_TOTAL, 1.9, ts)
    rows += _counter_rows("d0", S.REQUESTS_FAILED_TOTAL, 0.01, ts)
    instances = (InstanceInfo("p0", "prefill", "test"), InstanceInfo("p1", "prefill", "test"),
                 InstanceInfo("d0", "decode", "test"))
    return pd.DataFrame(rows), instances


def test_metrics_only_prefers_role_that_owns_the_quantity() -> None:
    metrics, instances = _pd_metrics()
    summary = _summary(_dataset(pd.DataFrame(), set(), metrics, instances))
    assert summary.source == ("metric histograms (prompt lengths from prefill instances, "
                              "output lengths from decode instances)")
    prompt, output = _dist(summary.prompt_tokens), _dist(summary.output_tokens)
    assert prompt.quantiles.estimated and output.quantiles.estimated
    # Prompt from prefill only: 2 instances x 1 req/s x 600 s.
    assert summary.requests == 1200
    assert summary.arrival_rate_rps == pytest.approx(2.0)
    cum = np.cumsum([0.2, 0.8, 0.6, 0.4, 0.0]) * 600  # p0 + p1
    assert prompt.quantiles.p50 == pytest.approx(histogram_quantile(0.5, np.array(PROMPT_LE), cum))
    assert prompt.quantiles.p50 == pytest.approx(10 + 90 * (600 - 120) / 480)
    assert prompt.quantiles.p90 == pytest.approx(1000 + 9000 * (1080 - 960) / 240)
    assert prompt.quantiles.mean == pytest.approx(900.0)
    assert prompt.quantiles.max is None
    # Output from decode, not the prefill legs' one-token outputs.
    assert output.quantiles.p50 == pytest.approx(10 + 90 * (600 - 300) / 600)
    assert output.quantiles.mean == pytest.approx(120.0)
    assert output.quantiles.count == 1200
    assert summary.completed_rate_rps == pytest.approx(1.9)
    assert summary.failed_requests == 6
    assert summary.offered_rate_rps == Missing(f"no {S.REQUESTS_STARTED_TOTAL} counter")
    assert isinstance(summary.prompt_output_corr, Missing)
    assert summary.arrival_series is not None
    assert summary.arrival_series.values[0] == pytest.approx(2.0)


def test_metrics_only_frontend_wins() -> None:
    metrics, instances = _pd_metrics()
    ts = np.arange(0.0, 601.0, 15.0) + 1.7e9
    front = pd.DataFrame(
        _hist_rows("fe", S.PROMPT_TOKENS, PROMPT_LE, [0.0, 0.0, 3.0, 0.0, 0.0], 500.0, ts)
        + _counter_rows("fe", S.REQUESTS_STARTED_TOTAL, 3.0, ts)
        + _counter_rows("fe", S.REQUESTS_FINISHED_TOTAL, 2.5, ts))
    instances = (*instances, InstanceInfo("fe", "frontend", "test"))
    summary = _summary(_dataset(pd.DataFrame(), set(), pd.concat([metrics, front]), instances))
    assert summary.requests == 1800
    assert _dist(summary.prompt_tokens).quantiles.p50 == pytest.approx(550.0)
    assert summary.offered_rate_rps == pytest.approx(3.0)
    assert summary.completed_rate_rps == pytest.approx(2.5)
    # No output histogram on the frontend: outputs still come from decode.
    assert _dist(summary.output_tokens).quantiles.mean == pytest.approx(120.0)


def test_metrics_only_without_roles_uses_all_instances() -> None:
    metrics, _ = _pd_metrics()
    summary = _summary(_dataset(pd.DataFrame(), set(), metrics, ()))
    assert summary.requests == 1200 + 1200  # p0 + p1 + d0 (d0 has 2 req/s)
    assert _dist(summary.prompt_tokens).quantiles.mean == pytest.approx((900 + 5000) / 2)


def test_nothing_usable_is_missing() -> None:
    result = summarize_workload(_dataset(pd.DataFrame(), set()))
    assert result == Missing("no request records and no length histograms")
    ts = np.arange(0.0, 100.0, 15.0)
    gauges = pd.DataFrame([{"ts": t, "instance": "x", "signal": S.KV_USAGE_RATIO, "kind": "gauge",
                            "le": np.nan, "value": 0.5} for t in ts])
    assert isinstance(summarize_workload(_dataset(pd.DataFrame(), set(), gauges)), Missing)
