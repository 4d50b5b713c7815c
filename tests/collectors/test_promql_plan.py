"""Query planning: windows and steps, families found, batches, role queries, what is missing."""

from __future__ import annotations

import pytest

from pdprobe import signals as S
from pdprobe.collectors import promql_found as pf
from pdprobe.collectors import promql_plan as pp
from pdprobe.errors import UsageError

VLLM_033 = [
    "vllm:num_requests_running", "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason", "vllm:kv_cache_usage_perc",
    "vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_bucket",
    "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count",
    "vllm:iteration_tokens_total_bucket", "process_cpu_seconds_total",
]


def test_window_default_step_is_exact_and_bounded() -> None:
    w = pp.choose_window(1800.0, 10_000.0)
    assert (w.start_ts, w.end_ts, w.step_s) == (8200.0, 10_000.0, 15.0)
    assert w.points == 121
    assert w.coarse_step_s == 150.0 and w.coarse_points == 13  # 120 steps / 10
    hour = pp.choose_window(3600.0, 10_000.0)
    assert hour.step_s == 30.0 and hour.points == 121 and hour.coarse_step_s == 300.0
    day = pp.choose_window(86400.0, 100_000.0)
    assert day.step_s == 720.0 and day.points == pp.TARGET_POINTS + 1


def test_window_with_explicit_step_keeps_it_and_shortens_the_window() -> None:
    w = pp.choose_window(100.0, 1000.0, 15.0)
    assert w.step_s == 15.0 and w.start_ts == 1000.0 - 6 * 15.0
    assert w.coarse_step_s == 15.0  # 6 steps: fewer than COARSE_TARGET_POINTS, histograms at the step
    with pytest.raises(UsageError, match="--step"):
        pp.choose_window(100.0, 1000.0, -1.0)


def test_chunk_ranges_keeps_the_grid() -> None:
    pieces = pp.chunk_ranges(0.0, 25.0, 1.0, max_points=10)
    assert pieces == [(0.0, 9.0), (10.0, 19.0), (20.0, 25.0)]
    assert pp.chunk_ranges(0.0, 9.0, 1.0, max_points=10) == [(0.0, 9.0)]


def test_parse_matchers_accepts_promql_and_rejects_the_rest() -> None:
    ms = pp.parse_matchers('{namespace="llm", job=~\'vllm-.*\',pod!=`x"y`}')
    assert [m.render() for m in ms] == ['namespace="llm"', 'job=~"vllm-.*"', 'pod!="x\\"y"']
    assert pp.combine_selectors('namespace="llm"', "", None, 'job="a"') == \
        'namespace="llm", job="a"'
    with pytest.raises(UsageError, match=r"--selector 'namespace=llm' is not a list of PromQL"):
        pp.parse_matchers("namespace=llm")


def test_families_from_names_reads_both_spellings_and_skips_unknown() -> None:
    index = pp.SpecIndex.build()
    fams = {f.exposed: f for f in pp.families_from_names(VLLM_033, index)}
    assert "vllm:time_to_first_token_seconds" in fams
    assert fams["vllm:time_to_first_token_seconds"].kind == "histogram"
    assert "vllm:iteration_tokens_total" not in fams and "process_cpu_seconds_total" not in fams
    assert len(fams["vllm:request_success_total"].specs) == 2  # finished, and failed (abort|error)
    underscored = pp.families_from_names(["vllm_num_requests_running"], index)
    assert underscored[0].spec.signal == S.REQUESTS_RUNNING and underscored[0].rank == 1


def test_rename_chains_rank_older_names_lower() -> None:
    index = pp.SpecIndex.build()
    fams = {f.exposed: f for f in pp.families_from_names(
        ["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
         "sglang:num_prefill_infight_queue_reqs"], index)}
    new, old = fams["vllm:kv_cache_usage_perc"], fams["vllm:gpu_cache_usage_perc"]
    assert new.chain == old.chain == "vllm_kv_cache_usage_perc"
    assert (new.rank, old.rank) == (0, 2)
    assert fams["sglang:num_prefill_infight_queue_reqs"].chain == \
        "sglang_num_prefill_inflight_queue_reqs"


def test_sglang_kv_transfer_gauge_variant() -> None:
    index = pp.SpecIndex.build()
    (gauge,) = pp.families_from_names(["sglang:kv_transfer_latency_ms"], index)
    assert gauge.kind == S.GAUGE and gauge.spec.signal == S.KV_TRANSFER_LATENCY_S_GAUGE
    hist = pp.families_from_names(["sglang:kv_transfer_latency_ms_bucket",
                                   "sglang:kv_transfer_latency_ms_count"], index)
    assert [f.kind for f in hist] == ["histogram"]
    assert pp.families_from_names(["sglang:kv_transfer_latency_ms_count"], index) == []


def test_batches_aggregate_on_the_server_and_do_not_depend_on_instances() -> None:
    fams = pp.families_from_names([*VLLM_033, "node_infiniband_port_data_received_bytes_total",
                                   "node_network_receive_bytes_total"], pp.SpecIndex.build())
    w = pp.choose_window(1800.0, 10_000.0)
    batches = pp.plan_batches(fams, w)
    by_kind = {(b.scope, b.kind, b.aggregate, b.label_filter): b for b in batches}
    gauge_sum = by_kind[("instance", "gauge", "sum", ())]
    assert gauge_sum.promql('namespace="llm"') == (
        'sum by (__name__, instance, server, worker_addr, worker) ({__name__=~"vllm:num_requests_running|'
        'vllm:num_requests_waiting", namespace="llm"})')
    assert gauge_sum.step_s == w.step_s
    deferred = by_kind[("instance", "gauge", "sum", (("reason", "deferred"),))]
    assert deferred.promql("") == ('sum by (__name__, instance, server, worker_addr, worker) ({__name__=~'
                                   '"vllm:num_requests_waiting_by_reason", reason=~"deferred"})')
    assert by_kind[("instance", "gauge", "mean", ())].promql("").startswith(
        'avg by (__name__, instance, server, worker_addr, worker) ({__name__=~"vllm:kv_cache_usage_perc"')
    hists = [b for b in batches if b.kind == "histogram"]
    assert len(hists) == 2 and all(b.step_s == w.coarse_step_s for b in hists)
    assert hists[0].promql("").startswith("sum by (__name__, instance, server, worker_addr, worker, le) (")
    counters = by_kind[("instance", "counter", "sum", ())]
    assert counters.by_labels == pp.ROUTER_BACKEND_LABELS and counters.step_s == w.coarse_step_s
    assert "vllm:request_success_total" in counters.name_regex()
    failed = by_kind[("instance", "counter", "sum", (("finished_reason", "abort|error"),))]
    assert failed.name_regex() == "vllm:request_success_total"
    net = [b for b in batches if b.scope == "network"]
    assert {b.by_labels for b in net} == {("device", "port")}
    assert all(b.step_s == w.step_s for b in net)
    netdev = next(b for b in net if "node_network_receive_bytes_total" in b.name_regex())
    assert 'device!~"lo|veth.*' in netdev.promql("")
    # gauges sum/mean/deferred, counters, failed counters, 2 histograms, IB, netdev
    assert len(batches) == 9


def test_engine_batches_can_be_asked_without_aggregation() -> None:
    fams = pp.families_from_names([*VLLM_033, "node_infiniband_port_data_received_bytes_total"],
                                  pp.SpecIndex.build())
    for b in pp.plan_batches(fams, pp.choose_window(3600.0, 1_750_003_600.0)):
        plain = b.promql('job="x"', aggregate=False)
        if b.scope == "instance":
            assert plain.startswith("{__name__=~") and 'job="x"' in plain
            assert b.promql('job="x"').endswith(f"({plain})")
        else:
            assert plain == b.promql('job="x"')


def test_sglang_batches_keep_tp_rank_0_and_priority_total() -> None:
    fams = pp.families_from_names(["sglang:num_running_reqs"], pp.SpecIndex.build())
    (b,) = pp.plan_batches(fams, pp.choose_window(600.0, 1000.0))
    assert b.promql("") == ('sum by (__name__, instance, server, worker_addr, worker) ({__name__=~"sglang:num_running_reqs", '
                            'tp_rank=~"0|", priority=""})')


def test_raw_query_selects_the_instances_escaped() -> None:
    fams = pp.families_from_names(["vllm:prompt_tokens_total"], pp.SpecIndex.build())
    (b,) = pp.plan_batches(fams, pp.choose_window(600.0, 1000.0))
    assert b.raw_promql('job="x"', ["10.0.0.1:8000"]) == (
        '{__name__=~"vllm:prompt_tokens_total", job="x", instance=~"10\\\\.0\\\\.0\\\\.1:8000"}')


def test_role_queries_one_per_engine_with_role_and_name_labels() -> None:
    fams = pp.families_from_names([*VLLM_033, "dynamo_frontend_worker_active_decode_blocks"],
                                  pp.SpecIndex.build())
    rqs = pp.plan_role_queries(fams, pp.choose_window(600.0, 1000.0), 'namespace="llm"')
    by_engine = {(r.engine, r.instance_label): r for r in rqs}
    vllm = by_engine[("vllm", "instance")]
    assert vllm.family == "vllm:num_requests_running"
    assert vllm.promql.startswith("count by (instance, role, engine_type, worker_type,")
    assert vllm.promql.endswith('(last_over_time({__name__="vllm:num_requests_running", '
                                'namespace="llm"}[600s]))')
    assert ("dynamo", "worker_id") in by_engine


def test_network_host_matcher_and_discovery() -> None:
    assert pp.network_host_matcher(["10.0.0.2", "10.0.0.1"]) == \
        'instance=~"(10\\\\.0\\\\.0\\\\.1|10\\\\.0\\\\.0\\\\.2)(:[0-9]+)?"'
    engine, network = pp.discovery_matchers('namespace="llm"', None, pp.SpecIndex.build())
    assert engine.endswith(', namespace="llm"}') and "vllm[:_].+|sglang[:_].+" in engine
    assert network.startswith('{__name__=~"node_infiniband_') and "namespace" not in network


def test_missing_warnings_name_the_consequence() -> None:
    found = pf.summarise(pp.families_from_names(VLLM_033, pp.SpecIndex.build()))
    warnings, notes = pf.missing_warnings(found)
    assert any("no node_infiniband_*" in w and "rdma-retransmits and no-rdma" in w
               for w in warnings)
    assert any("no KV-connector transfer metrics" in n for n in notes)
    assert "vllm: vLLM 0.33-era names" in notes
    port_only = pf.summarise(pp.families_from_names(
        [*VLLM_033, "node_infiniband_port_data_received_bytes_total"], pp.SpecIndex.build()))
    assert any("no hw_counters" in w for w in pf.missing_warnings(port_only)[0])


def test_version_hints() -> None:
    index = pp.SpecIndex.build()
    old = pp.families_from_names(["vllm:gpu_cache_usage_perc"], index)
    assert pf.version_hints(old) == {"vllm": "vLLM < 0.9.2 names"}
    sg = pp.families_from_names(["sglang:num_prefill_infight_queue_reqs"], index)
    assert pf.version_hints(sg) == {"sglang": "SGLang 0.4.x names"}


def test_analysed_drops_only_what_no_analysis_reads() -> None:
    names = ["vllm:e2e_request_latency_seconds_bucket", "vllm:request_decode_time_seconds_bucket",
             "vllm:time_to_first_token_seconds_bucket", "vllm:num_requests_running"]
    fams = pp.families_from_names(names, pp.SpecIndex.build())
    kept = pp.analysed(fams)
    assert {f.exposed for f in kept} == {"vllm:time_to_first_token_seconds",
                                         "vllm:num_requests_running"}
    assert all(s.signal not in S.UNANALYSED_SIGNALS for f in kept for s in f.specs)


def test_costliest_batches_are_ordered_first() -> None:
    fams = pp.families_from_names([*VLLM_033, "node_infiniband_port_data_received_bytes_total"],
                                  pp.SpecIndex.build())
    w = pp.choose_window(3600.0, 10_000.0)
    batches = sorted(pp.plan_batches(fams, w), key=lambda b: pp.batch_cost(b, w), reverse=True)
    # The per-port network counters on the fine grid outweigh a coarse per-instance counter batch.
    first_net = next(i for i, b in enumerate(batches) if b.scope == "network")
    coarse_counters = next(i for i, b in enumerate(batches)
                           if b.kind == "counter" and b.scope == "instance")
    assert first_net < coarse_counters
