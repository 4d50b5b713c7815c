"""Delivery options: default captures unchanged, each delivery's layout, names and ground truth."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from pdprobe.errors import UsageError
from pdprobe.profiles import BUILTIN_PROFILES
from pdprobe.sim.config import LengthDist, SimConfig
from pdprobe.sim.delivery import PRESETS, Delivery, parse_delivery
from pdprobe.sim.model import run_to_dir

PROMPT = LengthDist("lognormal", median=1500.0, sigma=0.7, max_tokens=16384)
OUTPUT = LengthDist("lognormal", median=150.0, sigma=0.6, max_tokens=2048)
TINY = SimConfig(profile=BUILTIN_PROFILES["llama3-70b-h100-tp4"], prefill=2, decode=2,
                 duration_s=60.0, rate_rps=6.0, prompt=PROMPT, output=OUTPUT, seed=3)
# sha256 (first 16 hex digits) of TINY's files, written before deliveries existed.
BEFORE = {
    "logs/10.0.1.10_8000.log": "28aab6bf57537bcc",
    "logs/10.0.1.10_8001.log": "6eb2f908332e734f",
    "logs/10.0.2.10_8000.log": "3beb6275a3df2a19",
    "logs/10.0.2.10_8001.log": "e011243c98e3efac",
    "metrics.om": "9e4397fd19bd6365",
    "node_metrics.om": "57c5881a5b808489",
    "requests.jsonl": "eeb5046d73f1b4a0",
    "scenario.toml": "ac375f779db6798b",
}
# What each merged tool's line looks like: the instance's identity in group 1.
LINE = {
    "kubectl-prefix": re.compile(r"^\[pod/([a-z0-9-]+)/vllm\] \S"),
    "kubectl-prefix-timestamps": re.compile(
        r"^\[pod/([a-z0-9-]+)/vllm\] \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z \S"),
    "stern": re.compile(r"^([a-z0-9-]+) vllm \S"),
    "compose": re.compile(r"^((?:prefill|decode)-\d+) +\| \S"),
    "journald": re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000 h100-node-\d+ "
                           r"(vllm-(?:prefill|decode)-\d+)\[\d+\]: \S"),
}
JSON_POD = {"loki-jsonl": ("labels", "pod", "line"),
            "fluent-bit-jsonl": ("kubernetes", "pod_name", "log"),
            "vector-jsonl": ("kubernetes", "pod_name", "message")}


def _write(tmp_path: Path, delivery: Delivery, name: str = "cap", **changes: object) -> Path:
    out = tmp_path / name
    run_to_dir(replace(TINY, delivery=delivery, **changes), out)  # type: ignore[arg-type]
    return out


def _truth(capture: Path) -> dict:
    return tomllib.loads((capture / "truth.toml").read_text())


def test_default_delivery_writes_the_same_bytes_as_before(tmp_path: Path) -> None:
    out = _write(tmp_path, Delivery())
    got = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
           for p in out.rglob("*") if p.is_file()}
    assert got == BEFORE  # no truth.toml, no [delivery] table


@pytest.mark.parametrize("tool", [*LINE, *JSON_POD])
def test_merged_logs_interleave_every_instance_in_time_order(tmp_path: Path, tool: str) -> None:
    platform = "compose" if tool == "compose" else "bare-metal" if tool == "journald" else "k8s"
    out = _write(tmp_path, Delivery(platform=platform, logs=tool), compress=True)
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["cluster.log.gz"]
    lines = gzip.decompress((out / "logs" / "cluster.log.gz").read_bytes()).decode().splitlines()
    truth = _truth(out)
    want = {i["pod"] or i["unit"].removesuffix(".service") for i in truth["instances"]}
    seen = []
    for line in lines:
        if tool in JSON_POD:
            outer, key, body = JSON_POD[tool]
            record = json.loads(line)
            seen.append(record[outer][key])
            assert record[body] and not record[body].startswith(("{", "["))
        else:
            m = LINE[tool].match(line)
            assert m, line
            seen.append(m.group(1))
    assert set(seen) == want  # every instance's lines are there, under its own name
    switches = sum(a != b for a, b in itertools.pairwise(seen))
    assert switches > len(want)  # interleaved, not one instance after the other
    if tool == "kubectl-prefix-timestamps":
        stamps = [line.split("] ", 1)[1][:30] for line in lines]
        assert stamps == sorted(stamps)
    if tool == "compose":
        assert {line.index("|") for line in lines} == {len("prefill-1") + 1}  # padded


def test_per_target_metrics_have_no_instance_label_and_keep_every_sample(tmp_path: Path) -> None:
    dump = _write(tmp_path, Delivery(), "dump")
    split = _write(tmp_path, Delivery(metrics="per-target"), "split")
    files = sorted((split / "metrics").iterdir())
    assert [f.name for f in files] == ["10.0.1.10_8000.prom", "10.0.1.10_8001.prom",
                                       "10.0.2.10_8000.prom", "10.0.2.10_8001.prom"]
    assert not (split / "metrics.om").exists()
    samples = []
    for f in files:
        text = f.read_text()
        assert text.endswith("# EOF\n")
        assert "instance=" not in text and "job=" not in text
        rows = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        assert all(re.search(r" \d+\.\d+$", ln) for ln in rows)  # timestamps kept
        samples += rows
    strip = re.compile(r'(instance|job)="[^"]*",?')
    want = [strip.sub("", ln).replace(",}", "}") for ln in dump.joinpath("metrics.om")
            .read_text().splitlines() if ln and not ln.startswith("#")]
    assert sorted(samples) == sorted(want)


def test_k8s_pod_names_agree_across_sources(tmp_path: Path) -> None:
    out = _write(tmp_path, PRESETS["k8s"])
    truth = _truth(out)
    pods = {i["pod"] for i in truth["instances"]}
    assert all(re.fullmatch(r"vllm-(prefill|decode)-[a-z0-9]{9}-[a-z0-9]{5}", p) for p in pods)
    records = [json.loads(ln) for ln in (out / "requests.jsonl").read_text().splitlines()]
    assert {r["prefill_instance"] for r in records} | {r["decode_instance"] for r in records} == pods
    metrics = (out / "metrics.om").read_text()
    label_pods = set(re.findall(r'pod="([^"]+)"', metrics))
    assert label_pods == pods
    for i in truth["instances"]:
        assert f'instance="{i["address"]}"' in metrics
        assert re.search(rf'instance="{re.escape(i["address"])}",[^}}]*node="{i["node"]}",'
                         rf'pod="{i["pod"]}"', metrics)
    log_pods = set(re.findall(r"^\[pod/([^/]+)/", (out / "logs/cluster.log").read_text(), re.M))
    assert log_pods == pods


def test_files_per_pod_and_compose_names(tmp_path: Path) -> None:
    per_pod = _write(tmp_path, PRESETS["files-per-pod"], "pods")
    pods = {i["pod"] for i in _truth(per_pod)["instances"]}
    assert {p.name.removesuffix(".log") for p in (per_pod / "logs").iterdir()} == pods
    compose = _write(tmp_path, PRESETS["compose"], "compose")
    truth = _truth(compose)
    assert [i["requests"] for i in truth["instances"]] == ["prefill-1", "prefill-2",
                                                           "decode-1", "decode-2"]
    assert sorted(p.name for p in (compose / "metrics").iterdir()) == [
        "decode-1_8000.prom", "decode-2_8000.prom", "prefill-1_8000.prom", "prefill-2_8000.prom"]


def test_ground_truth_counts_and_aliases(tmp_path: Path) -> None:
    out = _write(tmp_path, PRESETS["bare-metal"], decode=3)
    truth = _truth(out)
    assert truth["counts"] == {"prefill": 2, "decode": 3}
    assert truth["delivery"]["logs"] == "journald"
    assert truth["matchable"]["requests_alone"] is False  # two instances per node
    hosts = {i["requests"] for i in truth["instances"]}
    assert hosts == {"h100-node-0", "h100-node-1", "h100-node-2"}
    metrics = (out / "metrics.om").read_text()
    for i in truth["instances"]:  # the alias is linked by a label of the same series
        assert re.search(rf'hostname="{i["node"]}",instance="{re.escape(i["address"])}"', metrics)
    # the scenario round-trips with its delivery
    again = SimConfig.from_toml(out / "scenario.toml")
    assert again.delivery == PRESETS["bare-metal"]


def test_parse_delivery_presets_keys_and_refusals() -> None:
    assert parse_delivery("k8s") == PRESETS["k8s"]
    assert parse_delivery("k8s,logs=stern").logs == "stern"
    assert parse_delivery("platform=k8s,host-aliases=true").host_aliases
    for bad in ("logs=stern", "logs=journald,platform=k8s", "requests=pod", "host_aliases=true",
                "nope", "colour=red"):
        with pytest.raises(UsageError):
            parse_delivery(bad)


def test_cli_delivery_option_writes_and_refuses(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from pdprobe.cli.app import main

    def run(*args: str) -> int:
        with pytest.raises(SystemExit) as exc:
            main(["simulate", "--prefill", "1", "--decode", "1", "--rate", "2", "--duration",
                  "30", *args])
        return int(exc.value.code or 0)

    assert run("-o", str(tmp_path / "ok"), "--delivery", "compose,logs=per-pod") == 0
    assert sorted(p.name for p in (tmp_path / "ok" / "logs").iterdir()) == ["decode-1.log",
                                                                           "prefill-1.log"]
    assert 'logs = "per-pod"' in (tmp_path / "ok" / "scenario.toml").read_text()
    assert run("-o", str(tmp_path / "bad"), "--delivery", "logs=stern") == 3
    assert "needs platform k8s" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
