"""The live collector against a real Prometheus agrees with the offline reader of the same data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.analysis.promql import histogram_quantiles_by_instance, histogram_window
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.prometheus import LiveResult, collect_live, collect_partial
from pdprobe.collectors.roles import RoleOptions
from pdprobe.dataset import Dataset
from pdprobe.errors import InsufficientDataError, UsageError
from tests.live.conftest import LiveCluster

pytestmark = pytest.mark.live


def _increases(ds: Dataset, table: str = "metrics", key: str = "instance") -> pd.Series:
    frame = getattr(ds, table)
    # The live collector leaves out what no analysis reads (signals.UNANALYSED_SIGNALS).
    frame = frame[frame["kind"].isin([S.COUNTER, S.HCOUNT, S.HSUM])
                  & ~frame["signal"].isin(list(S.UNANALYSED_SIGNALS))].sort_values(
                      "ts", kind="stable")
    grouped = frame.groupby([key, "signal", "kind"])["value"]
    return grouped.last() - grouped.first()


def _assert_same_dataset(live: Dataset, offline: Dataset) -> None:
    facts = [(i.name, i.role, i.node, i.engine) for i in live.instances]
    assert facts == [(i.name, i.role, i.node, i.engine) for i in offline.instances]
    assert [i.role for i in live.instances].count("prefill") == 2
    assert [i.role for i in live.instances].count("decode") == 4
    a, b = _increases(live), _increases(offline)
    assert sorted(a.index) == sorted(b.index)
    np.testing.assert_allclose(a.sort_index().to_numpy(), b.sort_index().to_numpy(), rtol=1e-9)
    na, nb = _increases(live, "network", "node"), _increases(offline, "network", "node")
    assert len(na) == len(nb) > 0
    np.testing.assert_allclose(na.sort_index().to_numpy(), nb.sort_index().to_numpy(), rtol=1e-9)
    for signal in (S.TTFT_S, S.ITL_S, S.TPOT_S, S.KV_TRANSFER_S, S.PROMPT_TOKENS):
        for q in (0.5, 0.9, 0.99):
            ql = histogram_quantiles_by_instance(
                histogram_window(live.metrics, signal, by_instance=True), q)
            qo = histogram_quantiles_by_instance(
                histogram_window(offline.metrics, signal, by_instance=True), q)
            assert len(ql) == len(qo) > 0
            np.testing.assert_allclose(ql.sort_index(), qo.sort_index(), rtol=1e-9)


def test_live_dataset_equals_the_offline_reading(live_cluster: LiveCluster,
                                                  offline_dataset: Dataset) -> None:
    live = collect_live(live_cluster.target(), ReadContext(), RoleOptions())
    _assert_same_dataset(live, offline_dataset)
    # What no analysis reads is in the files but not asked of Prometheus.
    assert set(offline_dataset.metrics["signal"]) & S.UNANALYSED_SIGNALS
    assert not set(live.metrics["signal"]) & S.UNANALYSED_SIGNALS
    # Gauges: identical wherever both have a sample (the step equals the scrape interval).
    gl = live.metrics[live.metrics["kind"] == S.GAUGE]
    go = offline_dataset.metrics[offline_dataset.metrics["kind"] == S.GAUGE]
    both = gl.merge(go, on=["ts", "instance", "signal"], suffixes=("_l", "_o"))
    assert len(both) == len(go)
    assert float((both["value_l"] - both["value_o"]).abs().max()) == 0.0


def test_a_coarser_step_keeps_increases_and_quantiles_exact(live_cluster: LiveCluster,
                                                              offline_dataset: Dataset) -> None:
    result = collect_partial(live_cluster.target(step_s=60.0))
    assert result.meta.window.step_s == 60.0
    live = collect_live(live_cluster.target(step_s=60.0), ReadContext(), RoleOptions())
    _assert_same_dataset(live, offline_dataset)
    gauges = live.metrics[live.metrics["kind"] == S.GAUGE]
    assert gauges.groupby(["instance", "signal"]).size().max() == 31  # 30 steps + both ends


def test_restarts_are_re_read_sample_by_sample(live_cluster: LiveCluster) -> None:
    result = collect_partial(live_cluster.target(step_s=60.0))
    notes = " ".join(result.partial.source.notes)
    restarted = [i for i in live_cluster.generated.instances
                 if i.index == live_cluster.spec.restart[0] or len(i.engines) > 1]
    assert f"{len(restarted)} instance(s) restarted" in notes
    for inst in restarted:
        assert inst.name in notes
    raw = [q for q in result.meta.queries if q.endpoint == "/api/v1/query" and "ms]" in q.promql]
    assert raw and all("instance=~" in q.promql for q in raw)


def test_query_count_is_bounded_by_families_not_instances(live_cluster: LiveCluster) -> None:
    result = collect_partial(live_cluster.target())
    ranges = [q for q in result.meta.queries if q.endpoint == "/api/v1/query_range"]
    batches = pp.plan_batches(pp.analysed(result.meta.found.families), result.meta.window)
    assert len(ranges) == len(batches)
    assert all(q.status == "ok" for q in result.meta.queries)
    # Server-side aggregation: one series per instance and name (and label kept), no raw ones.
    counters = [q for q in ranges if "finished_reason" in q.promql]
    assert counters[0].series <= len(live_cluster.generated.instances) * 12


def test_engine_series_are_asked_as_they_are_only_when_one_per_instance(
        live_cluster: LiveCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from pdprobe.collectors import prometheus_roles

    def engine_ranges(result: LiveResult) -> list[str]:
        return [q.promql for q in result.meta.queries
                if q.endpoint == "/api/v1/query_range" and "vllm:" in q.promql]

    # The fixture's data-parallel instance has two series per name (engine="0"/"1"): its
    # engine's batches keep the server's aggregation.
    aggregated = collect_partial(live_cluster.target())
    assert all(q.startswith(("sum by", "avg by", "max by")) for q in engine_ranges(aggregated))
    # Read as they are (as for an engine with one series per instance and name), the series
    # give the same rows: sub-series are added up and reset-corrected by the collector.
    monkeypatch.setattr(prometheus_roles, "_several_series", lambda rq, vector: False)
    as_they_are = collect_partial(live_cluster.target())
    assert engine_ranges(as_they_are)
    assert not any(q.startswith(("sum by", "avg by", "max by"))
                   for q in engine_ranges(as_they_are))
    a, b = (r.partial.metrics.sort_values(["instance", "signal", "kind", "le", "ts"],
                                          ignore_index=True)
            for r in (aggregated, as_they_are))
    assert a.drop(columns="value").equals(b.drop(columns="value"))
    # avg of the two engines' gauges: the server's running mean vs the collector's sum / n.
    np.testing.assert_allclose(a["value"].to_numpy(), b["value"].to_numpy(), rtol=1e-12)


def test_selector_scopes_every_engine_query(live_cluster: LiveCluster) -> None:
    result = collect_partial(live_cluster.target(selector='job="vllm-decode"'))
    names = {str(i) for i in result.partial.metrics["instance"].unique()}
    decode = {i.name for i in live_cluster.generated.instances if i.role == "decode"}
    assert names == decode
    engine_queries = [q for q in result.meta.queries
                      if q.endpoint.endswith(("query", "query_range")) and "vllm:" in q.promql]
    assert engine_queries and all('job="vllm-decode"' in q.promql for q in engine_queries)
    network = result.partial.network
    assert network is not None and set(network["node"]) == {n.split(":")[0] for n in decode}


def test_unknown_selector_is_insufficient_data(live_cluster: LiveCluster) -> None:
    with pytest.raises(InsufficientDataError, match=r'no vLLM, SGLang or Dynamo metrics matching '
                                                    r'\{namespace="nope"\}'):
        collect_partial(live_cluster.target(selector='namespace="nope"'))
    with pytest.raises(UsageError, match="is not a list of PromQL label matchers"):
        collect_partial(live_cluster.target(selector="namespace=nope"))


def test_metrics_map_reads_an_in_house_stack(live_cluster: LiveCluster, fixtures_dir) -> None:
    target = live_cluster.target(selector='job="acme"',
                                 metrics_map=str(fixtures_dir / "live" / "acme-map.toml"))
    result = collect_partial(target)
    ds = collect_live(target, ReadContext(), RoleOptions())
    roles = {i.name: (i.role, i.role_source) for i in ds.instances}
    assert roles["10.9.0.1:9000"] == ("prefill", "label tier='ctx'")
    assert roles["10.9.0.2:9000"][0] == "decode"
    assert roles["10.9.0.2:9000"][1] == 'metrics map selector {acme_pool="decode-pool"}'
    m = ds.metrics
    les = sorted(m.loc[(m["signal"] == S.TTFT_S) & (m["kind"] == S.BUCKET), "le"].unique())
    assert les == [0.01, 0.05, 0.1, 0.5, 1.0, float("inf")]
    fin = _increases(ds).xs(S.REQUESTS_FINISHED_TOTAL, level="signal")
    failed = _increases(ds).xs(S.REQUESTS_FAILED_TOTAL, level="signal")
    assert (failed < fin).all() and (failed > 0).all()
    assert set(m.loc[m["signal"] == S.REQUESTS_RUNNING, "instance"]) == {"10.9.0.1:9000",
                                                                        "10.9.0.2:9000"}
    # The map's network selector takes every node_exporter series.
    assert result.partial.network is not None and len(result.partial.network["node"].unique()) == 6


def test_missing_families_are_reported(live_cluster: LiveCluster) -> None:
    result = collect_partial(live_cluster.target())
    notes = result.partial.source.notes
    assert any("metric families found" in n and "vllm: 24" in n for n in notes)
    assert "vllm: vLLM 0.33-era names" in notes
    # NIXL histograms and node_infiniband hw_counters exist here: nothing to warn about them.
    assert not any("node_infiniband" in w for w in result.partial.warnings)


def test_work_for_the_waiting_thread_runs_once_while_queries_are_in_flight(
        live_cluster: LiveCluster) -> None:
    import threading

    calls: list[str] = []

    def work() -> None:
        # The data queries are in flight on the pool's threads meanwhile.
        calls.append(threading.current_thread().name)

    collect_live(live_cluster.target(), ReadContext(while_waiting=work), RoleOptions())
    assert calls == [threading.current_thread().name]
