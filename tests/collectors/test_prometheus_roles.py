"""The role answers tell which engines have one series per instance (their batches may be read
without the server's ``sum by``)."""

from __future__ import annotations

from typing import Any

from pdprobe.collectors import promql_plan as pp
from pdprobe.collectors.prometheus_roles import role_facts

WINDOW = pp.choose_window(3600.0, 1_750_003_600.0)


def _role_query() -> pp.RoleQuery:
    fams = pp.families_from_names(["vllm:num_requests_running"], pp.SpecIndex.build())
    (rq,) = pp.plan_role_queries(fams, WINDOW, "")
    return rq


def _row(instance: str, count: object, **labels: str) -> dict[str, Any]:
    return {"metric": {"instance": instance, **labels}, "value": [1_750_003_600.0, count]}


def test_role_queries_count_the_series_of_each_instance() -> None:
    assert _role_query().promql.startswith("count by (instance, ")


def test_one_series_per_instance_lets_the_engine_be_read_as_is() -> None:
    rq = _role_query()
    facts = role_facts([(rq, [_row("a:8000", "1"), _row("b:8000", "1")])], None, "test")
    assert facts.multi_series == set()


def test_several_series_of_one_instance_keep_the_aggregation() -> None:
    rq = _role_query()
    # Two data-parallel engines of one instance (one row: same role labels), or one instance
    # relabelled by a restart (two rows): either way two series.
    for rows in ([_row("a:8000", "2"), _row("b:8000", "1")],
                 [_row("a:8000", "1", pod="p-1"), _row("a:8000", "1", pod="p-2")],
                 [_row("a:8000", "one")]):
        facts = role_facts([(rq, rows)], None, "test")
        assert facts.multi_series == {("vllm", "instance")}, rows


def test_a_router_re_exporting_backends_keeps_the_aggregation() -> None:
    rq = _role_query()
    rows = [_row("router:8001", "1", server="http://10.0.0.1:8000"),
            _row("router:8001", "1", server="http://10.0.0.2:8000")]
    assert role_facts([(rq, rows)], None, "test").multi_series == {("vllm", "instance")}
