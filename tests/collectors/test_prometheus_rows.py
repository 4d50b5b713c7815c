"""Live rows name a router's backends the way the file reader does.

The fixture is a Prometheus dump of vLLM production-stack's router beside one directly scraped
engine: the router re-exports engine metric names with ``server="http://<pod ip>:<port>"``
(vllm-project/production-stack ``src/vllm_router/services/metrics_service/__init__.py`` and
``src/vllm_router/routers/metrics_router.py``; the same fixture backs
tests/collectors/test_openmetrics_identity.py). The live collector asks Prometheus for
``sum by (__name__, instance, server, worker_addr, worker) (...)``; here that aggregation is done
on the dump's series, and the result must name and count instances as ``read_openmetrics`` does.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.openmetrics import read_openmetrics
from pdprobe.collectors.prometheus_decode import SeriesSet
from pdprobe.collectors.prometheus_roles import role_facts
from pdprobe.collectors.prometheus_rows import Groups, batch_groups, select_and_flatten

DUMP = (Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "identity"
        / "production_stack_router_dump.om")
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+) (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
STEP_S = 15.0


def _dump_series() -> list[tuple[dict[str, str], float, float]]:
    out = []
    for line in DUMP.read_text().splitlines():
        m = _LINE.match(line)
        if m:
            labels = dict(_LABEL.findall(m.group(2)), __name__=m.group(1))
            out.append((labels, float(m.group(4)), float(m.group(3))))
    return out


def _server_side(batch: pp.Batch, start: float) -> SeriesSet:
    """What Prometheus answers to ``batch.promql``: the dump summed by the batch's labels."""
    keep = ("__name__", batch.instance_label, *batch.by_labels)
    names = set(batch.series_names())
    sums: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    for labels, ts, value in _dump_series():
        if labels["__name__"] not in names:
            continue
        key = tuple((k, labels[k]) for k in keep if labels.get(k))
        sums.setdefault(key, {}).setdefault(ts, 0.0)
        sums[key][ts] += value
    lab, ts_all, vals, counts = [], [], [], []
    for key, points in sums.items():
        lab.append(dict(key))
        ts_all.extend(sorted(points))
        vals.extend(points[t] for t in sorted(points))
        counts.append(len(points))
    return SeriesSet(lab, np.asarray(ts_all), np.asarray(vals),
                     np.concatenate(([0], np.cumsum(counts))).astype(np.int64), start, STEP_S)


def test_engine_queries_keep_the_router_backend_labels() -> None:
    fams = pp.families_from_names(["vllm:num_requests_running"], pp.SpecIndex.build())
    (batch,) = pp.plan_batches(fams, pp.choose_window(60.0, 60.0))
    assert batch.promql("").startswith(
        "sum by (__name__, instance, server, worker_addr, worker) (")


def test_live_rows_name_router_backends_as_the_file_reader_does() -> None:
    names = sorted({labels["__name__"] for labels, _, _ in _dump_series()})
    fams = pp.families_from_names(names, pp.SpecIndex.build())
    window = pp.choose_window(STEP_S, 1750000015.0, STEP_S)
    groups = [batch_groups(b, _server_side(b, window.start_ts))
              for b in pp.plan_batches(fams, window) if b.scope == "instance"]
    live, _, _ = select_and_flatten([g for g in groups if g is not None])
    offline = read_openmetrics(DUMP, ReadContext()).metrics
    assert offline is not None

    def table(frame: object) -> set[tuple[str, str, float, float]]:
        rows = frame[frame["signal"].isin([S.PREFIX_HITS_TOTAL, S.PREFIX_QUERIES_TOTAL,  # type: ignore[index]
                                           S.REQUESTS_RUNNING])]
        return {(str(r.instance), str(r.signal), float(r.ts), float(r.value))
                for r in rows.itertuples()}

    assert table(live) == table(offline) and len(table(live)) == 10
    assert set(live["instance"]) == {"10.0.0.5:8000", "10.0.0.6:8000"}  # never the router
    notes = [n for g in groups if g is not None for n in g.notes]
    assert any("router's own view" in n for n in notes)
    assert any("from the engine's own scrape" in n for n in notes)


def test_role_queries_give_backend_facts_not_the_routers() -> None:
    fams = pp.families_from_names(["vllm:gpu_prefix_cache_hits_total"], pp.SpecIndex.build())
    (rq,) = pp.plan_role_queries(fams, pp.choose_window(60.0, 60.0), "")
    assert "server" in rq.labels and "worker_addr" in rq.labels
    vector = [{"metric": {"instance": "10.0.0.9:8001", "job": "pd-decode-router",
                          "pod": "vllm-router-0", "server": "http://vllm-prefill-0.llm:8000"}},
              {"metric": {"instance": "10.0.0.5:8000", "job": "vllm", "pod": "vllm-decode-0"}}]
    facts = role_facts([(rq, vector)], None, "test")
    by_inst = {(h.instance, h.role) for h in facts.hints}
    assert by_inst == {("vllm-prefill-0.llm:8000", "prefill"), ("10.0.0.5:8000", "decode")}
    assert "10.0.0.9:8001" not in facts.engines and "10.0.0.9" not in facts.hosts
    assert facts.nodes["vllm-prefill-0.llm:8000"] == "vllm-prefill-0.llm"


def test_an_answer_read_as_is_gives_the_rows_of_its_sum_by() -> None:
    # One series per instance and name: `sum by (__name__, instance, ...)` returns the same
    # series with fewer labels; a label the aggregation drops (a metrics map's node label)
    # must not name groups when the series are asked for as they are.
    fams = pp.families_from_names(["vllm:num_requests_running"], pp.SpecIndex.build())
    window = pp.choose_window(30.0, 1750000030.0, STEP_S)
    (batch,) = pp.plan_batches(fams, window)
    ts = window.start_ts + np.arange(3) * STEP_S
    full = [{"__name__": "vllm:num_requests_running", "instance": f"10.0.0.{i}:8000",
             "job": "vllm", "node": f"n{i}"} for i in (1, 2)]
    kept = [{k: v for k, v in lab.items() if k in batch.kept_labels} for lab in full]
    offsets = np.array([0, 3, 6])
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])

    def groups(labels: list[dict[str, str]], **kw: bool) -> Groups:
        g = batch_groups(batch, SeriesSet(labels, np.tile(ts, 2), values, offsets,
                                          window.start_ts, STEP_S), node_label="node", **kw)
        assert g is not None
        return g

    summed, as_is = groups(kept), groups(full, as_aggregated=True)
    assert summed.keys.equals(as_is.keys)
    assert np.array_equal(summed.values, as_is.values)
    assert select_and_flatten([summed])[0].equals(select_and_flatten([as_is])[0])
    # Read as raw series (a restart's re-read), the node label names the groups' node.
    assert groups(full).keys["node"].tolist() == ["n1", "n2"]
