"""Merged logs split per instance: every collector prefix format, and through read_engine_log.

The fixtures in ``tests/fixtures/logs/streams/`` are vLLM 0.11 prefill and SGLang 0.5.3 PD
decode fixture lines, interleaved, with each tool's prefix as its source prints it (cited per
test).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.engine_log import read_engine_log
from pdprobe.collectors.io import sniff
from pdprobe.collectors.log_streams import (
    detect_format,
    file_key,
    split_streams,
    strip_ansi,
)
from pdprobe.collectors.roles import RoleOptions, resolve_roles
from pdprobe.dataset import InstanceKey

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
STREAMS = LOGS / "streams"
DEFAULT = InstanceKey("merged", (), "file name")
PREFILL_FIRST = "(APIServer pid=3322894) INFO 10-27 11:21:00 [api_server.py:1885] Starting vLLM"


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def split_file(name: str):
    lines = [ln for ln in (STREAMS / name).read_text().splitlines() if ln]
    arr = strip_ansi(pa.array(lines, pa.large_string()))
    fmt = detect_format(arr)
    return fmt, split_streams(arr, fmt, DEFAULT)


def by_name(keys):
    return {k.name: dict(k.facts) for k in keys}


def test_kubectl_prefix():
    """``kubectl logs --prefix``: ``[pod/NAME/CONTAINER] `` before each line
    (kubernetes/kubernetes staging/src/k8s.io/kubectl/pkg/cmd/logs/logs.go, addPrefixIfNeeded:
    ``fmt.Sprintf("[pod/%s/%s] ", ref.Name, containerName)``)."""
    fmt, split = split_file("kubectl_prefix.log")
    assert fmt == "kubectl" and split.label == "kubectl logs --prefix"
    assert by_name(split.keys) == {
        "vllm-prefill-7c9d4-abcde": {"pod": "vllm-prefill-7c9d4-abcde", "container": "vllm"},
        "sglang-decode-0": {"pod": "sglang-decode-0", "container": "sglang"}}
    assert {k.origin for k in split.keys} == {"kubectl --prefix"}
    pods = [ln.split("/")[1] for ln in (STREAMS / "kubectl_prefix.log").read_text().splitlines()]
    assert [split.keys[i].name for i in split.stream] == pods
    assert split.message[0].as_py().startswith(PREFILL_FIRST)
    assert np.isnan(split.stamp_s).all()


def test_kubectl_prefix_with_timestamps_puts_the_stamp_after_the_prefix():
    """``--prefix --timestamps``: kubectl's prefixing writer wraps the API server's stream, whose
    lines already start with the kubelet's RFC 3339 stamp, so the prefix comes first
    (logs.go: ``addPrefixIfNeeded(objRef, o.Out)`` around ``DefaultConsumeRequest``)."""
    fmt, split = split_file("kubectl_prefix_timestamps.log")
    assert fmt == "kubectl"
    assert split.message[0].as_py().startswith(PREFILL_FIRST)
    assert split.stamp_s[0] == utc("2025-10-27T11:21:00")
    assert split.stamp_s[1] == pytest.approx(utc("2025-10-01T12:00:01") + 1e-9)


def test_compose_padding_colours_and_timestamps():
    """``docker compose logs`` pads names to the longest + 1 and writes `` | `` (docker/compose
    cmd/formatter/logs.go, presenter.setPrefix ``%-<width>s | ``), colours that prefix on a TTY
    (colors.go), and with ``-t`` writes the RFC 3339 stamp after it (logConsumer.write)."""
    fmt, split = split_file("compose_tty_timestamps.log")
    assert fmt == "compose"
    assert by_name(split.keys) == {"prefill-1": {"service": "prefill-1"},
                                   "myproj-decode-1": {"service": "myproj-decode-1"}}
    assert split.message[0].as_py().startswith(PREFILL_FIRST)
    assert "\x1b" not in "".join(split.message.to_pylist())
    assert split.stamp_s[0] == utc("2025-10-27T11:21:00")
    plain_fmt, plain = split_file("compose.log")
    assert plain_fmt == "compose" and plain.message.equals(split.message)


def test_stern_default_template():
    """stern's default output is ``{{.PodName}} {{.ContainerName}} {{.Message}}``, with
    ``{{.Namespace}}`` first when several namespaces are tailed (stern/stern cmd/cmd.go,
    generateTemplate)."""
    fmt, split = split_file("stern.log")
    assert fmt == "stern"
    assert by_name(split.keys) == {
        "vllm-prefill-0": {"pod": "vllm-prefill-0", "container": "vllm"},
        "sglang-decode-0": {"pod": "sglang-decode-0", "container": "sglang"}}
    assert split.message[0].as_py().startswith(PREFILL_FIRST)
    fmt, split = split_file("stern_namespaces.log")
    assert fmt == "stern"
    assert by_name(split.keys)["sglang-decode-0"] == {"pod": "sglang-decode-0",
                                                      "container": "sglang", "namespace": "llm-b"}
    assert split.message[1].as_py().startswith("[2025-10-01 12:00:01 TP0] Decode batch")


def test_journalctl_short_iso_one_stream_per_unit_of_a_host():
    """``journalctl -o short-iso``: ``%Y-%m-%dT%H:%M:%S%z host identifier[pid]: message``
    (systemd src/shared/logs-show.c, output_short); the zone offset is applied."""
    fmt, split = split_file("journald_short_iso.log")
    assert fmt == "journald"
    assert by_name(split.keys) == {
        "gpu-node-3/vllm-prefill": {"host": "gpu-node-3", "unit": "vllm-prefill"},
        "gpu-node-3/sglang-decode": {"host": "gpu-node-3", "unit": "sglang-decode"}}
    assert split.stamp_s[0] == utc("2025-10-27T10:21:00")  # 11:21 at +0100
    assert split.message[0].as_py().startswith(PREFILL_FIRST)


def test_timestamps_alone_are_one_stream_named_after_the_file():
    """``kubectl logs --timestamps`` / ``docker logs -t``: an RFC 3339 stamp, a space, the line."""
    lines = pa.array([f"2025-10-27T11:21:0{i}.123456789Z {PREFILL_FIRST}" for i in range(3)],
                     pa.large_string())
    fmt = detect_format(lines)
    split = split_streams(lines, fmt, DEFAULT)
    assert fmt == "timestamps" and split.keys == (DEFAULT,)
    assert split.stream.tolist() == [0, 0, 0]
    assert split.stamp_s[2] == pytest.approx(utc("2025-10-27T11:21:02.123456789"))


@pytest.mark.parametrize(("name", "prefill", "facts"), [
    # Fluent Bit kubernetes filter (docs.fluentbit.io/manual/pipeline/filters/kubernetes): log,
    # kubernetes.pod_name/namespace_name/container_name/host; file output json_lines adds `date`.
    ("fluent_bit.jsonl", "vllm-prefill-0",
     {"pod": "vllm-prefill-0", "container": "vllm", "namespace": "llm", "node": "gpu-node-3"}),
    # Vector kubernetes_logs source (vector.dev/docs/reference/configuration/sources/
    # kubernetes_logs): message, kubernetes.pod_name/pod_namespace/container_name/pod_node_name.
    ("vector.jsonl", "vllm-prefill-0",
     {"pod": "vllm-prefill-0", "container": "vllm", "namespace": "llm", "node": "gpu-node-3",
      "pod_ip": "10.0.0.5"}),
    # Loki `logcli query --output=jsonl` (grafana/loki pkg/logcli/output/jsonl.go: timestamp,
    # line, labels), labels as Promtail's Kubernetes scrape config sets them.
    ("loki.jsonl", "vllm-prefill-0",
     {"pod": "vllm-prefill-0", "container": "vllm", "namespace": "llm", "node": "gpu-node-3"}),
    # CloudWatch events (aws logs filter-log-events: logStreamName, timestamp in ms, message)
    # whose message is Fluent Bit's record as JSON (Container Insights): nested JSON.
    ("cloudwatch.jsonl", "vllm-prefill-0",
     {"pod": "vllm-prefill-0", "container": "vllm", "namespace": "llm", "node": "gpu-node-3"}),
    # journalctl -o json: MESSAGE, _HOSTNAME, _SYSTEMD_UNIT, __REALTIME_TIMESTAMP (µs).
    ("journald.jsonl", "gpu-node-3/vllm-prefill.service",
     {"host": "gpu-node-3", "unit": "vllm-prefill.service"}),
])
def test_json_exports(name, prefill, facts):
    fmt, split = split_file(name)
    assert fmt == "json" and len(split.keys) == 2
    assert by_name(split.keys)[prefill] == facts
    assert split.message[0].as_py().startswith(PREFILL_FIRST)
    assert (split.stream >= 0).all() and np.isfinite(split.stamp_s).all()
    assert sniff(STREAMS / name).kind == "engine-log"


def test_unprefixed_file_is_one_stream_with_the_file_key():
    key, note = file_key(Path("/x/10.0.0.5_8000.log.gz"))
    assert key == InstanceKey("10.0.0.5:8000", key.facts, "file name")
    assert ("address", "10.0.0.5:8000") in key.facts and "host_port" in note
    lines = pa.array((LOGS / "vllm_0.11.0_prefill.log").read_text().splitlines(),
                     pa.large_string())
    assert detect_format(lines) == "none"
    partial = read_engine_log(LOGS / "vllm_0.11.0_prefill.log", ReadContext(year=2025))
    assert [k.name for k in partial.keys] == ["vllm_0.11.0_prefill"]
    assert partial.keys[0].origin == "file name"
    named = read_engine_log(LOGS / "vllm_0.11.0_prefill.log",
                            ReadContext(year=2025, instance="10.0.0.7:8100"))
    assert named.keys == (InstanceKey("10.0.0.7:8100", (("address", "10.0.0.7:8100"),
                                                        ("port", "8100"), ("host", "10.0.0.7")),
                                      "--instance"),)
    assert set(named.metrics["instance"]) == {"10.0.0.7:8100"}


def test_folder_of_per_pod_files_names_each_file_after_its_pod(tmp_path):
    for pod in ("vllm-decode-6d8f9-x2k4q", "vllm-prefill-6d8f9-a1b2c"):
        (tmp_path / f"{pod}.log").write_text((LOGS / "vllm_0.11.0_prefill.log").read_text())
    for path in sorted(tmp_path.iterdir()):
        partial = read_engine_log(path, ReadContext(year=2025))
        pod = path.name.removesuffix(".log")
        assert partial.keys[0].name == pod and partial.keys[0].fact("pod") == pod
        assert set(partial.metrics["instance"]) == {pod}


def _prefixed(pod: str, fixture: str) -> list[str]:
    return [f"[pod/{pod}/vllm] {ln}" for ln in (LOGS / fixture).read_text().splitlines() if ln]


def test_merged_two_prefill_two_decode_log_equals_four_separate_files(tmp_path):
    pods = {"vllm-prefill-0": "vllm_0.11.0_prefill.log",
            "vllm-prefill-1": "vllm_0.33_prefill_mooncake.log",
            "vllm-decode-0": "vllm_0.14.0_decode.log", "vllm-decode-1": "vllm_0.33_decode.log"}
    streams = [_prefixed(pod, fixture) for pod, fixture in pods.items()]
    merged: list[str] = []
    for i in range(max(map(len, streams))):  # interleaved as a tool tailing 4 pods writes them
        merged.extend(s[i] for s in streams if i < len(s))
    path = tmp_path / "cluster.log"
    path.write_text("\n".join(merged) + "\n")
    ctx = ReadContext(year=2025)
    partial = read_engine_log(path, ctx)
    assert sorted(k.name for k in partial.keys) == sorted(pods)
    assert partial.engines == dict.fromkeys(pods, "vllm")
    infos, _ = resolve_roles(list(pods), partial.role_hints, RoleOptions(), {}, partial.engines)
    assert {i.name: i.role for i in infos} == {p: ("prefill" if "prefill" in p else "decode")
                                               for p in pods}
    cols = ["ts", "signal", "kind", "le", "value"]
    for pod, fixture in pods.items():
        alone = read_engine_log(LOGS / fixture, ctx)
        mine = partial.metrics[partial.metrics["instance"] == pod]
        expected = alone.metrics.sort_values(cols).reset_index(drop=True)[cols]
        got = mine.sort_values(cols).reset_index(drop=True)[cols]
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)
        if alone.events is not None:
            assert (partial.events["instance"] == pod).sum() == len(alone.events)
    assert "lines split into 4 instance(s) by their kubectl logs --prefix prefix" in " ".join(
        partial.source.notes)


def test_mixed_vllm_and_sglang_streams_get_their_own_engine_and_roles():
    partial = read_engine_log(STREAMS / "kubectl_prefix.log", ReadContext(year=2025))
    assert partial.engines == {"vllm-prefill-7c9d4-abcde": "vllm", "sglang-decode-0": "sglang"}
    assert not any("both vLLM and SGLang" in w for w in partial.warnings)
    roles = {(h.instance, h.role) for h in partial.role_hints}
    assert ("vllm-prefill-7c9d4-abcde", "prefill") in roles
    assert ("sglang-decode-0", "decode") in roles
    assert not {("vllm-prefill-7c9d4-abcde", "decode"), ("sglang-decode-0", "prefill")} & roles


@pytest.mark.parametrize("name", ["kubectl_prefix_timestamps.log", "compose_tty_timestamps.log",
                                  "fluent_bit.jsonl", "vector.jsonl", "loki.jsonl"])
def test_collector_stamps_give_the_times_and_no_year_guess(name):
    partial = read_engine_log(STREAMS / name, ReadContext())
    assert len(partial.keys) == 2
    vllm = partial.metrics[partial.metrics["instance"].str.contains("prefill")]
    assert vllm["ts"].min() == pytest.approx(utc("2025-10-27T11:21:10"), abs=1e-3)
    assert not any("modification time" in n for n in partial.source.notes)


def test_malformed_prefix_lines_are_counted_and_skipped():
    partial = read_engine_log(STREAMS / "kubectl_prefix_malformed.log", ReadContext(year=2025))
    assert {k.name for k in partial.keys} == {"vllm-prefill-7c9d4-abcde", "sglang-decode-0"}
    warning = next(w for w in partial.warnings if "prefix of the other lines" in w)
    assert re.search(r"2 line\(s\) without the kubectl logs --prefix prefix of the other lines, "
                     r"skipped \(line 4, 7\)", warning)
    assert partial.source.skipped == 2
    good = read_engine_log(STREAMS / "kubectl_prefix.log", ReadContext(year=2025))
    assert partial.source.rows == good.source.rows - 2


def test_malformed_json_lines_are_counted_and_skipped(tmp_path):
    lines = (STREAMS / "vector.jsonl").read_text().splitlines()
    lines[3] = lines[3][:-1]  # the closing brace lost: a stats line that is not JSON
    path = tmp_path / "vector.jsonl"
    path.write_text("\n".join(lines) + "\n")
    partial = read_engine_log(path, ReadContext(year=2025))
    assert len(partial.keys) == 2 and partial.source.skipped == 1
    assert any("not valid JSON lines export JSON objects" in w for w in partial.warnings)
