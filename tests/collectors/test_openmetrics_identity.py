"""How the metrics-file reader names instances and which InstanceKeys it reports.

Fixtures are in ``tests/fixtures/metrics/identity/`` (its README names the upstream writer of
each format):

- production-stack router: vllm-project/production-stack
  ``src/vllm_router/services/metrics_service/__init__.py`` and
  ``src/vllm_router/routers/metrics_router.py`` (gauges labelled ``server="http://ip:port"``);
- SGLang model gateway ``/engine_metrics``: lightseekorg/smg
  ``model_gateway/src/core/worker_manager.rs`` (``worker_addr``) and
  ``model_gateway/src/core/metrics_aggregator.rs`` (``:`` -> ``_``);
- SGLang router ``worker=`` labels: sgl-project/sglang ``sgl-router/src/metrics.rs``;
- vLLM engine scrapes: vllm-project/vllm ``vllm/v1/metrics/loggers.py`` (``engine=`` per DP
  engine).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.metric_names import backend_address
from pdprobe.collectors.openmetrics import read_openmetrics
from pdprobe.dataset import FACT_KINDS, InstanceKey, Partial

CTX = ReadContext()


@pytest.fixture
def identity_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "metrics" / "identity"


def read(path: Path, ctx: ReadContext = CTX) -> Partial:
    return read_openmetrics(path, ctx)


def instances(p: Partial) -> set[str]:
    assert p.metrics is not None
    return set(p.metrics["instance"].unique().tolist())


def values(p: Partial, instance: str, signal: str) -> list[float]:
    assert p.metrics is not None
    m = p.metrics
    part = m[(m["instance"] == instance) & (m["signal"] == signal)].sort_values("ts")
    return part["value"].tolist()


def key(p: Partial, name: str) -> InstanceKey:
    found = [k for k in p.keys if k.name == name]
    assert len(found) == 1, (name, p.keys)
    return found[0]


def facts(p: Partial, name: str) -> set[tuple[str, str]]:
    return set(key(p, name).facts)


def assert_keys_cover_instances(p: Partial) -> None:
    """Every instance the reader emits is reported once as a key; fact kinds are known ones."""
    assert {k.name for k in p.keys} == instances(p)
    assert len({k.name for k in p.keys}) == len(p.keys)
    for k in p.keys:
        assert all(kind in FACT_KINDS for kind, _ in k.facts), k
        assert k.origin


# --------------------------------------------------------------------------------------------
# Per-target files (a raw /metrics scrape has no `instance` label)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("file_name", "name", "node", "expected"), [
    ("10.0.0.5_8000.prom", "10.0.0.5:8000", "10.0.0.5",
     {("address", "10.0.0.5:8000"), ("host", "10.0.0.5"), ("port", "8000")}),
    ("[2001:db8::5]_8000.prom", "[2001:db8::5]:8000", "2001:db8::5",
     {("address", "[2001:db8::5]:8000"), ("host", "2001:db8::5"), ("port", "8000")}),
    ("2001:DB8:0::6_8000.prom.gz", "[2001:db8::6]:8000", "2001:db8::6",
     {("address", "[2001:db8::6]:8000"), ("host", "2001:db8::6"), ("port", "8000")}),
    ("h100-node-3_8000.prom", "h100-node-3:8000", "h100-node-3",
     {("address", "h100-node-3:8000"), ("host", "h100-node-3"), ("port", "8000")}),
    ("vllm-decode-6d8f9c7b5-x2k4q.metrics.prom", "vllm-decode-6d8f9c7b5-x2k4q", None,
     {("host", "vllm-decode-6d8f9c7b5-x2k4q"), ("pod", "vllm-decode-6d8f9c7b5-x2k4q")}),
])
def test_per_target_file_names_the_instance(identity_dir: Path, tmp_path: Path, file_name: str,
                                            name: str, node: str | None,
                                            expected: set[tuple[str, str]]) -> None:
    src = identity_dir / "vllm_raw_scrape.prom"
    path = tmp_path / file_name
    if file_name.endswith(".gz"):
        import gzip
        path.write_bytes(gzip.compress(src.read_bytes()))
    else:
        shutil.copy(src, path)
    p = read(path)
    assert instances(p) == {name}
    assert p.nodes.get(name) == node
    k = key(p, name)
    assert set(k.facts) == expected
    assert "file name" in k.origin and file_name in k.origin
    assert any(f"assigned to instance {name!r}" in n for n in p.source.notes)
    assert_keys_cover_instances(p)


def test_two_per_target_files_are_two_instances_not_one(identity_dir: Path,
                                                        tmp_path: Path) -> None:
    """The bug: `path.stem.split(".")[0]` named both `10`."""
    parts = []
    for target in ("10.0.0.5_8000", "10.0.0.6_8000"):
        path = tmp_path / f"{target}.prom"
        shutil.copy(identity_dir / "vllm_raw_scrape.prom", path)
        parts.append(read(path))
    ds = fuse(parts)
    assert {i.name for i in ds.instances} == {"10.0.0.5:8000", "10.0.0.6:8000"}
    assert {i.name: i.node for i in ds.instances} == {"10.0.0.5:8000": "10.0.0.5",
                                                       "10.0.0.6:8000": "10.0.0.6"}


def test_instance_option_still_wins_over_the_file_name(identity_dir: Path,
                                                       tmp_path: Path) -> None:
    path = tmp_path / "10.0.0.5_8000.prom"
    shutil.copy(identity_dir / "vllm_raw_scrape.prom", path)
    p = read(path, ReadContext(instance="decode-a"))
    assert instances(p) == {"decode-a"}
    assert key(p, "decode-a").origin == "--instance"


def test_node_exporter_per_target_file_gets_the_host_as_node(tmp_path: Path) -> None:
    path = tmp_path / "10.0.0.5_9100.prom"
    path.write_text(
        "# pdprobe-scrape-ts 1750000000\n"
        'node_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} 100\n'
        "# pdprobe-scrape-ts 1750000015\n"
        'node_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} 400\n')
    p = read(path)
    assert p.network is not None
    assert set(p.network["node"]) == {"10.0.0.5"}
    assert p.keys == ()  # network series are not instances


# --------------------------------------------------------------------------------------------
# Engine sub-labels are sub-series of one instance
# --------------------------------------------------------------------------------------------


def test_vllm_dp_engines_on_one_target_are_one_instance(identity_dir: Path,
                                                        tmp_path: Path) -> None:
    path = tmp_path / "10.0.0.5_8000.prom"
    shutil.copy(identity_dir / "vllm_raw_scrape.prom", path)
    p = read(path)
    assert instances(p) == {"10.0.0.5:8000"}
    assert values(p, "10.0.0.5:8000", S.REQUESTS_RUNNING) == [12.0, 14.0]  # engine 0 + 1
    assert values(p, "10.0.0.5:8000", S.KV_USAGE_RATIO) == pytest.approx([0.3, 0.4])  # mean
    assert values(p, "10.0.0.5:8000", S.PROMPT_TOKENS_TOTAL) == [1600.0, 2400.0]


def test_rank_labels_do_not_make_instances(tmp_path: Path) -> None:
    path = tmp_path / "dump.om"
    lines = []
    for dp in (0, 1):
        for tp in (0, 1):
            for pp in (0, 1):
                lines.append(f'sglang:num_running_reqs{{dp_rank="{dp}",instance="10.1.0.1:30000",'
                             f'job="sglang",pp_rank="{pp}",tp_rank="{tp}"}} 3 1750000000.000')
    path.write_text("\n".join(lines) + "\n# EOF\n")
    p = read(path)
    assert instances(p) == {"10.1.0.1:30000"}
    assert [k.name for k in p.keys] == ["10.1.0.1:30000"]


# --------------------------------------------------------------------------------------------
# Routers: one series per backend
# --------------------------------------------------------------------------------------------


def test_production_stack_router_scrape_names_its_backends(identity_dir: Path,
                                                           tmp_path: Path) -> None:
    """A raw router scrape saved per target: backends are instances, the router is not."""
    path = tmp_path / "10.0.0.9_8001.prom"
    shutil.copy(identity_dir / "production_stack_router.prom", path)
    p = read(path)
    assert instances(p) == {"10.0.0.5:8000", "10.0.0.6:8000"}
    # The engine's counters, copied by the router's engine_stats scraper, are read per backend.
    assert values(p, "10.0.0.5:8000", S.PREFIX_HITS_TOTAL) == [500.0, 600.0]
    assert values(p, "10.0.0.6:8000", S.PREFIX_QUERIES_TOTAL) == [2000.0, 2200.0]
    # The router's own in-flight count is not the engine's scheduler gauge: not read.
    assert values(p, "10.0.0.5:8000", S.REQUESTS_RUNNING) == []
    assert values(p, "10.0.0.5:8000", S.PREFIX_HIT_RATIO) == []
    assert any("router's own view" in n and "vllm:num_requests_running" in n
               for n in p.source.notes)
    assert any("router's backend label" in n and "server='http://10.0.0.5:8000'" in n
               for n in p.source.notes)
    assert facts(p, "10.0.0.5:8000") == {
        ("address", "10.0.0.5:8000"), ("host", "10.0.0.5"), ("port", "8000"),
        ("url", "http://10.0.0.5:8000")}
    assert key(p, "10.0.0.5:8000").origin == "label server (router backend)"
    assert p.nodes == {"10.0.0.5:8000": "10.0.0.5", "10.0.0.6:8000": "10.0.0.6"}
    assert p.engines == {"10.0.0.5:8000": "vllm", "10.0.0.6:8000": "vllm"}
    assert_keys_cover_instances(p)


def test_router_dump_keeps_router_labels_out_of_backend_keys(identity_dir: Path) -> None:
    p = read(identity_dir / "production_stack_router_dump.om")
    assert instances(p) == {"10.0.0.5:8000", "10.0.0.6:8000"}
    assert "10.0.0.9:8001" not in instances(p)  # the router's own target
    # 10.0.0.5:8000 is also scraped directly: its own counter is used, not added to the copy.
    assert values(p, "10.0.0.5:8000", S.PREFIX_HITS_TOTAL) == [500.0, 600.0]
    assert values(p, "10.0.0.5:8000", S.REQUESTS_RUNNING) == [2.0, 3.0]  # the engine's gauge
    assert values(p, "10.0.0.6:8000", S.PREFIX_HITS_TOTAL) == [1000.0, 1100.0]
    assert any("also has from the engine's own scrape" in n for n in p.source.notes)
    # The backend known only through the router carries no router pod/namespace/job/node.
    assert facts(p, "10.0.0.6:8000") == {
        ("address", "10.0.0.6:8000"), ("host", "10.0.0.6"), ("port", "8000"),
        ("url", "http://10.0.0.6:8000")}
    assert p.nodes["10.0.0.6:8000"] == "10.0.0.6"
    # The directly scraped engine has its own labels plus the router's URL for it.
    assert facts(p, "10.0.0.5:8000") == {
        ("address", "10.0.0.5:8000"), ("host", "10.0.0.5"), ("port", "8000"),
        ("pod", "vllm-decode-0"), ("namespace", "llm"), ("job", "vllm"),
        ("url", "http://10.0.0.5:8000")}
    assert key(p, "10.0.0.5:8000").origin == "label instance; label server (router backend)"
    assert all(v != "vllm-router-5d8f7c9b6-qx2lp" for k in p.keys for _, v in k.facts)
    assert_keys_cover_instances(p)


def test_router_name_pattern_is_not_given_to_backends(tmp_path: Path) -> None:
    """The router's job/pod say nothing about a backend's role; the backend URL may."""
    path = tmp_path / "router.om"
    path.write_text(
        'vllm:gpu_prefix_cache_hits_total{instance="10.0.0.9:8001",job="pd-decode-router",'
        'server="http://10.0.0.5:8000"} 1 1750000000.000\n'
        'vllm:gpu_prefix_cache_hits_total{instance="10.0.0.9:8001",job="pd-decode-router",'
        'server="http://vllm-prefill-0.vllm-prefill.llm.svc:8000"} 1 1750000000.000\n# EOF\n')
    p = read(path)
    assert instances(p) == {"10.0.0.5:8000", "vllm-prefill-0.vllm-prefill.llm.svc:8000"}
    roles = {h.instance: h.role for h in p.role_hints}
    assert "10.0.0.5:8000" not in roles
    assert roles["vllm-prefill-0.vllm-prefill.llm.svc:8000"] == "prefill"


def test_sglang_gateway_engine_metrics_are_per_worker(identity_dir: Path) -> None:
    p = read(identity_dir / "sgl_gateway_engine_metrics.prom")
    assert instances(p) == {"10.0.0.7:30000", "10.0.0.8:30000"}
    # tp_rank 1 repeats rank 0 (--enable-metrics-for-all-schedulers): kept once.
    assert values(p, "10.0.0.7:30000", S.REQUESTS_RUNNING) == [4.0, 5.0]
    assert values(p, "10.0.0.8:30000", S.REQUESTS_RUNNING) == [14.0, 15.0]
    assert values(p, "10.0.0.8:30000", S.GENERATION_TOKENS_TOTAL) == [200.0, 250.0]
    roles = {(h.instance, h.role) for h in p.role_hints if h.how.startswith("label")}
    assert roles == {("10.0.0.7:30000", "prefill"), ("10.0.0.8:30000", "decode")}
    assert p.engines == {"10.0.0.7:30000": "sglang", "10.0.0.8:30000": "sglang"}
    assert facts(p, "10.0.0.7:30000") == {
        ("address", "10.0.0.7:30000"), ("host", "10.0.0.7"), ("port", "30000"),
        ("url", "http://10.0.0.7:30000")}
    assert key(p, "10.0.0.7:30000").origin == "label worker_addr (router backend)"
    assert_keys_cover_instances(p)


@pytest.mark.parametrize("label", [b.label for b in mc.BACKEND_LABELS])
def test_every_backend_label_keeps_backends_apart(tmp_path: Path, label: str) -> None:
    path = tmp_path / "router.om"
    path.write_text("".join(
        f'vllm:kv_cache_usage_perc{{instance="10.0.0.9:8001",job="router",{label}="{b}"}} '
        f'{v} 1750000000.000\n'
        for b, v in (("http://10.0.0.5:8000/", 1), ("10.0.0.6:8000", 2),
                     ("http://[2001:DB8::7]:8000", 3))) + "# EOF\n")
    p = read(path)
    assert instances(p) == {"10.0.0.5:8000", "10.0.0.6:8000", "[2001:db8::7]:8000"}
    assert values(p, "[2001:db8::7]:8000", S.KV_USAGE_RATIO) == [3.0]
    assert ("url", "http://[2001:DB8::7]:8000") in facts(p, "[2001:db8::7]:8000")
    assert p.nodes["[2001:db8::7]:8000"] == "2001:db8::7"


def test_sglang_router_worker_label_and_engine_series(tmp_path: Path) -> None:
    """sgl-router's own series (`sgl_router_*{worker=...}`) are not read (no catalog entry);
    engine-named series with `worker=` go to the worker, never to the router."""
    path = tmp_path / "router.prom"
    path.write_text(
        '# TYPE sgl_router_running_requests gauge\n'
        'sgl_router_running_requests{worker="http://10.0.0.7:30000"} 4\n'
        '# TYPE sglang:num_queue_reqs gauge\n'
        'sglang:num_queue_reqs{worker="http://10.0.0.7:30000"} 2\n')
    p = read(path)
    assert instances(p) == {"10.0.0.7:30000"}


def test_prometheus_operator_endpoint_port_name_is_not_a_backend(tmp_path: Path) -> None:
    """kube-prometheus ServiceMonitors add `endpoint="<port name>"`: not an address."""
    path = tmp_path / "dump.om"
    path.write_text(
        'vllm:num_requests_running{endpoint="http",instance="10.0.0.5:8000",job="vllm",'
        'namespace="llm",pod="vllm-decode-0",service="vllm"} 3 1750000000.000\n# EOF\n')
    p = read(path)
    assert instances(p) == {"10.0.0.5:8000"}
    assert key(p, "10.0.0.5:8000").origin == "label instance"


def test_backend_address() -> None:
    assert backend_address("http://10.0.0.5:8000") == "10.0.0.5:8000"
    assert backend_address("https://Vllm-0.Example.com/v1") == "vllm-0.example.com:443"
    assert backend_address("http://vllm-svc") == "vllm-svc:80"
    assert backend_address("[2001:db8:0::5]:8000") == "[2001:db8::5]:8000"
    assert backend_address("10.0.0.5") == "10.0.0.5"
    assert backend_address("http-metrics") is None
    assert backend_address("vllm_backend") is None
    assert backend_address("") is None


def test_catalog_router_series_name_engine_metrics_it_knows() -> None:
    for r in mc.ROUTER_SERIES:
        assert mc.lookup(r.name), r.name
        assert r.label in mc.BACKEND_LABEL_NAMES
    read_names = {r.name for r in mc.ROUTER_SERIES if r.read}
    assert read_names == {"vllm:gpu_prefix_cache_hits_total",
                          "vllm:gpu_prefix_cache_queries_total"}


# --------------------------------------------------------------------------------------------
# Pods, namespaces and the facts of keys
# --------------------------------------------------------------------------------------------


def test_same_pod_name_in_two_namespaces_is_two_instances(identity_dir: Path) -> None:
    p = read(identity_dir / "namespaced_pods.om")
    assert instances(p) == {"team-a/vllm-decode-0", "team-b/vllm-decode-0", "vllm-prefill-0"}
    assert values(p, "team-b/vllm-decode-0", S.REQUESTS_RUNNING) == [9.0, 10.0]
    assert facts(p, "team-a/vllm-decode-0") == {
        ("pod", "vllm-decode-0"), ("namespace", "team-a"), ("container", "vllm"),
        ("node", "gpu-node-1")}
    assert facts(p, "team-b/vllm-decode-0") == {
        ("pod", "vllm-decode-0"), ("namespace", "team-b"), ("container", "vllm"),
        ("node", "gpu-node-2")}
    assert key(p, "team-a/vllm-decode-0").origin == "labels namespace, pod"
    # A pod name no other namespace uses keeps its plain name (logs name pods so).
    assert facts(p, "vllm-prefill-0") == {
        ("pod", "vllm-prefill-0"), ("namespace", "team-a"), ("container", "vllm"),
        ("node", "gpu-node-3")}
    assert key(p, "vllm-prefill-0").origin == "label pod"
    assert p.nodes == {"team-a/vllm-decode-0": "gpu-node-1", "team-b/vllm-decode-0": "gpu-node-2",
                       "vllm-prefill-0": "gpu-node-3"}
    roles = {h.instance: h.role for h in p.role_hints}
    assert roles == {"team-a/vllm-decode-0": "decode", "team-b/vllm-decode-0": "decode",
                     "vllm-prefill-0": "prefill"}
    assert any("more than one namespace" in n for n in p.source.notes)
    assert_keys_cover_instances(p)


def test_instance_label_key_carries_every_kubernetes_fact(tmp_path: Path) -> None:
    path = tmp_path / "dump.om"
    path.write_text(
        'vllm:num_requests_running{container="vllm",engine="0",instance="10.0.0.5:8000",'
        'job="kubernetes-pods",kubernetes_node="gpu-node-1",namespace="llm",pod="vllm-decode-0",'
        'pod_ip="10.0.0.5"} 3 1750000000.000\n'
        'vllm:num_requests_running{container="vllm",engine="0",instance="[2001:DB8::5]:8000",'
        'job="kubernetes-pods",namespace="llm",pod="vllm-decode-1"} 3 1750000000.000\n'
        '# EOF\n')
    p = read(path)
    assert key(p, "10.0.0.5:8000") == InstanceKey(
        "10.0.0.5:8000",
        (("address", "10.0.0.5:8000"), ("host", "10.0.0.5"), ("port", "8000"),
         ("pod", "vllm-decode-0"), ("namespace", "llm"), ("pod_ip", "10.0.0.5"),
         ("container", "vllm"), ("node", "gpu-node-1"), ("job", "kubernetes-pods")),
        "label instance")
    # The instance name is the label as written; its address fact is normalised.
    assert ("address", "[2001:db8::5]:8000") in facts(p, "[2001:DB8::5]:8000")
    assert p.nodes == {"10.0.0.5:8000": "gpu-node-1", "[2001:DB8::5]:8000": "2001:DB8::5"}
    assert_keys_cover_instances(p)


def test_dynamo_worker_ids_get_no_facts_of_the_frontend(fixtures_dir: Path) -> None:
    p = read(fixtures_dir / "metrics" / "dynamo.om")
    worker_keys = [k for k in p.keys if k.origin == "label worker_id"]
    assert worker_keys and all(k.facts == () for k in worker_keys)
    assert_keys_cover_instances(p)


def test_keys_come_from_the_distinct_series_not_the_samples(tmp_path: Path) -> None:
    """Many samples of few series: one key per instance, each fact once."""
    path = tmp_path / "dump.om"
    lines = [f'vllm:num_requests_running{{engine="{e}",instance="10.0.0.{i}:8000",job="vllm",'
             f'pod="vllm-decode-{i}"}} {t % 7} {1750000000 + 15 * t}.000'
             for i in range(8) for e in range(2) for t in range(500)]
    path.write_text("\n".join(lines) + "\n# EOF\n")
    p = read(path)
    assert len(p.keys) == 8
    for k in p.keys:
        assert len(k.facts) == len(set(k.facts)) == 5
