"""Fusion with the identity step: names unified, each quantity from one source, files read once."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pdprobe.collectors.files import expand_paths, read_paths
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.identity import parse_aliases
from pdprobe.dataset import (
    ROLE_FROM_LABEL,
    ROLE_FROM_NAME,
    InstanceKey,
    Partial,
    RoleHint,
    SourceInfo,
)


def _metrics(instance: str, signal: str, values: list[float], kind: str = "counter",
             t0: float = 1000.0) -> pd.DataFrame:
    return pd.DataFrame({"ts": [t0 + 10 * i for i in range(len(values))], "instance": instance,
                         "signal": signal, "kind": kind, "value": values})


def _part(path: str, kind: str, *, requests: pd.DataFrame | None = None,
          metrics: pd.DataFrame | None = None, hints=(), keys=()) -> Partial:
    return Partial(source=SourceInfo(path=path, kind=kind, format="x", rows=0),
                   requests=requests, metrics=metrics, role_hints=tuple(hints), keys=tuple(keys),
                   request_columns=frozenset(requests.columns) if requests is not None
                   else frozenset())


def _requests(prefill: list[str], decode: list[str]) -> pd.DataFrame:
    n = len(prefill)
    return pd.DataFrame({"arrival_ts": [1000.0 + i for i in range(n)],
                         "prompt_tokens": [100] * n, "output_tokens": [10] * n,
                         "prefill_instance": prefill, "decode_instance": decode})


def test_gateway_host_names_and_scrape_addresses_are_one_cluster() -> None:
    # 2P:1D named by host in the records and host:port in the metrics: 2P:1D, not 4P:2D.
    req = _requests(["h100-node-1", "h100-node-2"], ["h100-node-3", "h100-node-3"])
    met = pd.concat([_metrics(f"h100-node-{i}:8000", "prompt_tokens_total", [0.0, 50.0])
                     for i in (1, 2, 3)])
    hints = [RoleHint("h100-node-1:8000", "prefill", "label role", ROLE_FROM_LABEL),
             RoleHint("h100-node-2:8000", "prefill", "label role", ROLE_FROM_LABEL),
             RoleHint("h100-node-3:8000", "decode", "label role", ROLE_FROM_LABEL)]
    ds = fuse([_part("requests.jsonl", "requests", requests=req),
               _part("metrics.om", "metrics", metrics=met, hints=hints)])
    assert [i.name for i in ds.instances_of("prefill")] == ["h100-node-1:8000", "h100-node-2:8000"]
    assert [i.name for i in ds.instances_of("decode")] == ["h100-node-3:8000"]
    assert ds.requests["prefill_instance"].tolist() == ["h100-node-1:8000", "h100-node-2:8000"]
    assert ds.requests["decode_instance"].tolist() == ["h100-node-3:8000"] * 2
    ident = {i.name: i for i in ds.identities}
    assert {a.name for a in ident["h100-node-3:8000"].aliases} == {"h100-node-3",
                                                                   "h100-node-3:8000"}


def test_alias_name_patterns_give_the_role() -> None:
    # A compose log names the service decode-1; the metrics only know 10.0.0.7:8000.
    met = _metrics("10.0.0.7:8000", "prompt_tokens_total", [0.0, 5.0])
    logs = _metrics("decode-1", "generation_tokens_total_log", [0.0, 5.0])
    aliases = parse_aliases(["decode-1=10.0.0.7:8000"], None)
    ds = fuse([_part("m.om", "metrics", metrics=met),
               _part("cluster.log", "engine-log", metrics=logs,
                     keys=[InstanceKey("decode-1", (("service", "decode-1"),), "compose prefix")])],
              aliases=aliases)
    (info,) = ds.instances
    assert info.name == "10.0.0.7:8000"
    assert info.role == "decode"
    assert "decode-1" in info.role_source


def test_one_quantity_of_one_instance_comes_from_one_source() -> None:
    # The engine's own counter starts at 5000 (since engine start); the log's restarts at 0.
    # Mixing them would make the increase over the window nonsense.
    met = _metrics("10.0.0.5:8000", "prompt_tokens_total", [5000.0, 5100.0, 5200.0])
    log = _metrics("10.0.0.5:8000", "prompt_tokens_total", [0.0, 100.0])
    ds = fuse([_part("logs/10.0.0.5_8000.log", "engine-log", metrics=log),
               _part("metrics.om", "metrics", metrics=met)])
    assert ds.metrics["value"].tolist() == [5000.0, 5100.0, 5200.0]
    assert any("taken from metrics.om" in n for n in ds.notes)


def test_two_dumps_of_one_target_keep_the_fuller_one() -> None:
    a = _metrics("10.0.0.5:8000", "prompt_tokens_total", [1.0, 2.0, 3.0])
    b = _metrics("10.0.0.5:8000", "prompt_tokens_total", [1.0, 2.0])
    ds = fuse([_part("b.om", "metrics", metrics=b), _part("a.om", "metrics", metrics=a)])
    assert ds.metrics["value"].tolist() == [1.0, 2.0, 3.0]


def test_conflicting_roles_of_one_unified_instance_name_both_sources() -> None:
    from pdprobe.errors import InputError

    hints_a = [RoleHint("h100-node-3", "prefill", "prefill_instance column", ROLE_FROM_LABEL,
                        "requests.jsonl")]
    hints_b = [RoleHint("h100-node-3:8000", "decode", "label role='decode'", ROLE_FROM_LABEL,
                        "metrics.om")]
    with pytest.raises(InputError, match=r"requests\.jsonl.*metrics\.om|metrics\.om.*requests"):
        fuse([_part("requests.jsonl", "requests", requests=_requests(["h100-node-3"], ["x"]),
                    hints=hints_a),
              _part("metrics.om", "metrics",
                    metrics=_metrics("h100-node-3:8000", "prompt_tokens_total", [1.0]),
                    hints=hints_b)])


def test_weaker_alias_name_pattern_does_not_override_a_label() -> None:
    met = _metrics("10.0.0.7:8000", "prompt_tokens_total", [0.0, 5.0])
    hints = [RoleHint("10.0.0.7:8000", "prefill", "label role='prefill'", ROLE_FROM_LABEL)]
    logs = _metrics("vllm-decode-abcde-fghij", "generation_tokens_total_log", [0.0, 1.0])
    keys = [InstanceKey("vllm-decode-abcde-fghij", (("pod", "vllm-decode-abcde-fghij"),))]
    ds = fuse([_part("m.om", "metrics", metrics=met, hints=hints,
                     keys=[InstanceKey("10.0.0.7:8000", (("pod", "vllm-decode-abcde-fghij"),))]),
               _part("x.log", "engine-log", metrics=logs, keys=keys)])
    (info,) = ds.instances
    assert info.role == "prefill"
    assert ROLE_FROM_NAME < ROLE_FROM_LABEL
    assert any("overrides" in w for w in ds.warnings)


@pytest.fixture
def sample_dir() -> Path:
    from pdprobe.services.diagnose import bundled_sample

    return bundled_sample()


def test_the_same_file_twice_is_read_once(tmp_path: Path, sample_dir: Path) -> None:
    req = sample_dir / "requests.jsonl.gz"
    folder = tmp_path / "cap"
    folder.mkdir()
    shutil.copy(req, folder / "requests.jsonl.gz")
    (folder / "link.jsonl.gz").symlink_to(folder / "requests.jsonl.gz")
    files = expand_paths([folder, folder / "requests.jsonl.gz", folder / "requests.jsonl.gz"])
    assert len(files) == 1
    assert files[0][1] is True  # named directly once: counts as named
    once = read_paths([folder / "requests.jsonl.gz"])
    twice = read_paths([folder, folder / "requests.jsonl.gz"])
    assert len(twice.requests) == len(once.requests)
    assert len(twice.sources) == 1


def test_a_copied_capture_keeps_its_log_year(tmp_path: Path, sample_dir: Path) -> None:
    """``cp -r`` of a capture today: vLLM lines carry no year and the copy's mtime is now, but
    the request records say when the capture is from."""
    import os
    import time

    folder = tmp_path / "copy"
    folder.mkdir()
    shutil.copy(sample_dir / "requests.jsonl.gz", folder / "requests.jsonl.gz")
    log = sample_dir / "logs" / "10.0.2.10_8000.log.gz"
    # Decompressed: no gzip header time survives, only the file system's (a fresh copy).
    (folder / "decode.log").write_bytes(gzip.decompress(log.read_bytes()))
    now = time.time() + 400 * 86400  # a copy made over a year after the capture
    os.utime(folder / "decode.log", (now, now))
    ds = read_paths([folder])
    req_lo = float(ds.requests["arrival_ts"].min())
    logged = ds.metrics["ts"]
    assert len(logged)
    assert abs(float(logged.min()) - req_lo) < 3600.0


def test_a_machine_name_for_two_engines_is_not_counted_as_an_instance() -> None:
    # The gateway names machines; each machine runs two engines: counts come from the metrics,
    # the machine names are reported (not guessed) and not counted as extra instances.
    req = _requests(["h100-node-0", "h100-node-0"], ["h100-node-1", "h100-node-1"])
    met = pd.concat([_metrics(f"10.0.{r}.10:{port}", "prompt_tokens_total", [0.0, 1.0])
                     for r in (1, 2) for port in (8000, 8001)])
    keys = [InstanceKey(f"10.0.{r}.10:{port}", (("hostname", f"h100-node-{r - 1}"),))
            for r in (1, 2) for port in (8000, 8001)]
    hints = [RoleHint(k.name, "prefill" if k.name.startswith("10.0.1.") else "decode",
                      "label role", ROLE_FROM_LABEL) for k in keys]
    ds = fuse([_part("requests.jsonl", "requests", requests=req),
               _part("metrics.om", "metrics", metrics=met, hints=hints, keys=keys)])
    assert len(ds.instances_of("prefill")) == 2
    assert len(ds.instances_of("decode")) == 2
    assert not ds.instances_of("unknown")
    assert sum("runs 2 instances" in w for w in ds.warnings) == 2


def test_numbers_under_a_machine_name_are_attributed_to_no_instance() -> None:
    # One decode machine runs two engines, another runs one. Records naming machines would make
    # the single-engine machine look twice as busy as each engine of the other (false skew):
    # the column goes unknown; a log stream under the machine's name leaves the per-instance
    # metrics.
    req = _requests(["p"] * 3, ["h100-node-1", "h100-node-1", "h100-node-2"])
    names = ["10.0.2.10:8000", "10.0.2.10:8001", "10.0.3.10:8000"]
    machine = {"10.0.2.10": "h100-node-1", "10.0.3.10": "h100-node-2"}
    met = pd.concat([_metrics(n, "prompt_tokens_total", [0.0, 1.0]) for n in names])
    keys = [InstanceKey(n, (("hostname", machine[n.split(":")[0]]),)) for n in names]
    log = _metrics("h100-node-1/vllm-decode-0", "generation_tokens_total_log", [0.0, 9.0])
    log_keys = [InstanceKey("h100-node-1/vllm-decode-0", (("host", "h100-node-1"),
                                                          ("unit", "vllm-decode-0")))]
    ds = fuse([_part("requests.jsonl", "requests", requests=req),
               _part("metrics.om", "metrics", metrics=met, keys=keys),
               _part("journal.log", "engine-log", metrics=log, keys=log_keys)])
    assert ds.requests["decode_instance"].isna().all()
    assert ds.requests["prefill_instance"].tolist() == ["p"] * 3
    assert set(ds.metrics["instance"]) == set(names)
    assert any("stand for several instances" in n and "h100-node-1" in n for n in ds.notes)


def test_instance_node_is_spelled_as_the_network_series_spell_it() -> None:
    # Engines labelled with the Kubernetes node name, node_exporter scraped by IP: the RDMA
    # counters of 10.0.1.10 belong to the engine on node h100-node-0 whose address is 10.0.1.10.
    met = _metrics("10.0.1.10:8000", "prompt_tokens_total", [0.0, 1.0])
    keys = [InstanceKey("10.0.1.10:8000", (("node", "h100-node-0"),), "label instance")]
    net = pd.DataFrame({"ts": [1000.0, 1010.0], "node": "10.0.1.10", "device": "mlx5_0",
                        "port": "1", "signal": "rdma_tx_bytes_total", "kind": "counter",
                        "value": [0.0, 1e9]})
    part = Partial(source=SourceInfo("metrics.om", "metrics", "x", 0), metrics=met,
                   keys=tuple(keys), nodes={"10.0.1.10:8000": "h100-node-0"})
    node_part = Partial(source=SourceInfo("node.om", "metrics", "x", 0), network=net)
    ds = fuse([part, node_part])
    (info,) = ds.instances
    assert info.node == "10.0.1.10"


def test_real_formats_with_three_namings_are_one_cluster(tmp_path: Path) -> None:
    """Real producers' layouts, each naming the engines its own way: a `kubectl logs --prefix
    --timestamps` export (tests/fixtures/logs/streams/, format from kubectl's logs.go), a
    promtool-style dump with the labels Kubernetes service discovery relabelling gives
    (`instance` = pod IP:port from `__address__`, `pod`/`namespace` from
    `__meta_kubernetes_pod_name`/`__meta_kubernetes_namespace`), and gateway records naming pod
    IPs without a port. Two engines come out, each with its three names."""
    fixture = Path(__file__).parents[1] / "fixtures" / "logs" / "streams"
    shutil.copy(fixture / "kubectl_prefix_timestamps.log", tmp_path / "cluster.log")
    t0 = 1_761_564_060.0  # 2025-10-27T11:21:00Z, the log's own time
    lines = ["# TYPE vllm:num_requests_running gauge"]
    for pod, ip, role in (("vllm-prefill-7c9d4-abcde", "10.1.0.5", "prefill"),
                          ("sglang-decode-0", "10.1.0.6", "decode")):
        lines += [f'vllm:num_requests_running{{instance="{ip}:8000",job="llm",namespace="llm",'
                  f'pod="{pod}",role="{role}"}} {k} {t0 + 15 * k}' for k in range(4)]
    (tmp_path / "metrics.om").write_text("\n".join(lines) + "\n# EOF\n")
    (tmp_path / "requests.jsonl").write_text("".join(
        f'{{"arrival_ts": {t0 + i}, "prompt_tokens": 100, "output_tokens": 10, '
        f'"prefill_instance": "10.1.0.5", "decode_instance": "10.1.0.6"}}\n' for i in range(20)))
    ds = read_paths([tmp_path])
    assert [i.name for i in ds.instances_of("prefill")] == ["10.1.0.5:8000"]
    assert [i.name for i in ds.instances_of("decode")] == ["10.1.0.6:8000"]
    names = {i.name: {a.name for a in i.aliases} for i in ds.identities}
    assert names["10.1.0.5:8000"] == {"10.1.0.5:8000", "10.1.0.5", "vllm-prefill-7c9d4-abcde"}
    assert names["10.1.0.6:8000"] == {"10.1.0.6:8000", "10.1.0.6", "sglang-decode-0"}
    assert set(ds.requests["decode_instance"]) == {"10.1.0.6:8000"}
