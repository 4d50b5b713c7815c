"""The three input kinds a run writes agree with each other and with the simulation.

Read back with pdprobe's own readers (``read_paths``), like ``pdprobe diagnose`` would.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.collectors.files import read_paths
from pdprobe.dataset import REQUEST_COLUMNS, Dataset
from pdprobe.sim.config import SimConfig, parse_fault
from pdprobe.sim.model import SimSummary, run_to_dir

LOG_RATE_DECIMALS = 1  # vLLM prints throughputs with one decimal (tokens/s over 10 s)


def _capture(tmp_path_factory: pytest.TempPathFactory, config: SimConfig,
             name: str) -> tuple[Path, SimSummary, Dataset]:
    out = tmp_path_factory.mktemp(name) / "capture"
    summary = run_to_dir(config, out)
    return out, summary, read_paths([out])


@pytest.fixture(scope="module")
def vllm_capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimSummary, Dataset]:
    from pdprobe.profiles import BUILTIN_PROFILES
    from tests.sim.conftest import CHAT_OUTPUT, CHAT_PROMPT

    config = SimConfig(profile=BUILTIN_PROFILES["llama3-70b-h100-tp4"], prefill=3, decode=2,
                       duration_s=150.0, rate_rps=8.0, prompt=CHAT_PROMPT, output=CHAT_OUTPUT,
                       prefix_hit_rate=0.3, seed=9,
                       faults=(parse_fault("rdma-retransmits:rate=0.1"),))
    return _capture(tmp_path_factory, config, "vllm")


def _last(ds: Dataset, signal: str, names: list[str]) -> float:
    m = ds.metrics
    sel = m[(m["signal"] == signal) & m["instance"].isin(names)]
    return float(sel.sort_values("ts").groupby("instance")["value"].last().sum())


def _names(ds: Dataset, role: str) -> list[str]:
    """Instances of a role (the logs, named host_port, join their host:port metrics)."""
    return [i.name for i in ds.instances if i.role == role]


def test_records_carry_every_canonical_column(vllm_capture: tuple[Path, SimSummary, Dataset]) -> None:
    _out, summary, ds = vllm_capture
    assert set(REQUEST_COLUMNS) <= ds.request_columns
    req = ds.requests
    assert len(req) == summary.requests
    assert set(req["status"]) <= {"ok", "error"}
    assert (req["status"] == "error").sum() == summary.failed > 0
    assert req["arrival_ts"].min() >= 1748858400.0  # the documented default start
    ok = req[req["status"] == "ok"]
    assert (ok["ttft_s"] >= ok["queue_s"] + ok["prefill_s"] + ok["kv_transfer_s"] - 1e-5).all()
    assert ok["cached_tokens"].sum() > 0


def test_token_totals_agree_across_records_counters_and_logs(
        vllm_capture: tuple[Path, SimSummary, Dataset]) -> None:
    _out, _, ds = vllm_capture
    req = ds.requests
    prefill, decode = _names(ds, "prefill"), _names(ds, "decode")
    assert len(prefill) == 3 and len(decode) == 2
    # records vs engine counters (final scrape)
    assert _last(ds, S.GENERATION_TOKENS_TOTAL, decode) == req["output_tokens"].sum()
    assert _last(ds, S.PROMPT_TOKENS_TOTAL, prefill) == req["prompt_tokens"].sum()
    assert _last(ds, S.CACHED_TOKENS_TOTAL, prefill) == req["cached_tokens"].sum()
    assert _last(ds, S.REQUESTS_FINISHED_TOTAL, decode) == len(req)  # ok + error finishes
    # records vs the logs' 10 s throughputs (one decimal of tokens/s: <= 0.5 token per line);
    # only the logs carry these signals in vLLM 0.33
    m = ds.metrics
    log_dec = m[(m["signal"] == S.GENERATION_THROUGHPUT_TPS) & m["instance"].isin(decode)]
    assert (log_dec["value"] * 10).sum() == pytest.approx(req["output_tokens"].sum(), abs=0.5 * len(log_dec) + 1)
    log_pre = m[(m["signal"] == S.PROMPT_THROUGHPUT_TPS) & m["instance"].isin(prefill)]
    computed = (req["prompt_tokens"] - req["cached_tokens"]).sum()
    assert (log_pre["value"] * 10).sum() == pytest.approx(computed, abs=0.5 * len(log_pre) + 1)
    # histogram observations: one TTFT per completed request on the decode side
    ttft = m[(m["signal"] == S.TTFT_S) & (m["kind"] == S.HCOUNT) & m["instance"].isin(decode)]
    assert ttft.sort_values("ts").groupby("instance")["value"].last().sum() == (req["status"] == "ok").sum()


def test_network_counters_carry_the_kv_bytes_and_the_loss(
        vllm_capture: tuple[Path, SimSummary, Dataset]) -> None:
    _out, _, ds = vllm_capture
    net = ds.network
    req = ds.requests
    prefill_nodes = sorted({n.split(":")[0] for n in _names(ds, "prefill")})
    tx = net[(net["signal"] == S.RDMA_TX_BYTES_TOTAL) & net["node"].isin(prefill_nodes)]
    last_tx = tx.sort_values("ts").groupby(["node", "device"])["value"].last().sum()
    assert last_tx == pytest.approx(req["kv_bytes"].sum(), rel=1e-6)
    retrans = net[net["signal"].isin(S.RETRANSMIT_SIGNALS)]
    assert retrans.sort_values("ts").groupby(["node", "device", "signal"])["value"].last().sum() > 1000
    rate = net[net["signal"] == S.LINK_RATE_BYTES_PER_S]["value"].unique()
    assert rate.tolist() == [pytest.approx(400e9 / 8)]
    assert (ds.events["event"] == S.EV_RDMA_SLICE_FAILED).sum() > 0


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_the_openmetrics_files(vllm_capture: tuple[Path, SimSummary, Dataset],
                                                tmp_path: Path) -> None:
    out, _, _ = vllm_capture
    for name in ("metrics.om", "node_metrics.om"):
        text = (out / name).read_text()
        assert text.endswith("# EOF\n")
        done = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                               str(out / name), str(tmp_path / name)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr


def test_metric_families_are_contiguous_and_buckets_real(
        vllm_capture: tuple[Path, SimSummary, Dataset]) -> None:
    out, _, _ = vllm_capture
    seen: list[str] = []
    for line in (out / "metrics.om").read_text().splitlines():
        if line.startswith("# TYPE"):
            family = line.split()[2]
            assert family not in seen, f"family {family} split"
            seen.append(family)
    assert "vllm:time_to_first_token_seconds" in seen and "vllm:prompt_tokens_total" in seen
    text = (out / "metrics.om").read_text()
    les = {x.split('"')[1] for x in text.split("vllm:inter_token_latency_seconds_bucket{")[1:]
           for x in [x[x.index('le="'):]]}
    assert les == {"0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5",
                   "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"}


@pytest.mark.parametrize("naming", ["role-label", "name", "engine-type", "pod", "dynamo"])
def test_every_naming_style_gives_the_roles(tmp_path: Path, naming: str) -> None:
    config = SimConfig(prefill=2, decode=3, duration_s=40.0, rate_rps=4.0, naming=naming, seed=1)
    run_to_dir(config, tmp_path / "c")
    ds = read_paths([tmp_path / "c" / "metrics.om"])
    roles = pd.Series({i.name: i.role for i in ds.instances})
    assert (roles == "prefill").sum() == 2 and (roles == "decode").sum() == 3
    if naming == "name":
        assert sorted(roles.index)[0].startswith("decode-0:")


def test_tcp_transport_has_no_infiniband_series(tmp_path: Path) -> None:
    config = SimConfig(prefill=2, decode=1, duration_s=60.0, rate_rps=3.0, seed=2,
                       faults=(parse_fault("no-rdma"),))
    run_to_dir(config, tmp_path / "c")
    text = (tmp_path / "c" / "node_metrics.om").read_text()
    assert "node_infiniband_" not in text and "node_network_transmit_bytes_total" in text
    ds = read_paths([tmp_path / "c"])
    assert set(ds.network["signal"]) <= {S.NODE_TCP_TX_BYTES_TOTAL, S.NODE_TCP_RX_BYTES_TOTAL}
    assert (ds.events["event"] == S.EV_TRANSPORT_TCP).any()


def test_sglang_capture_reads_back(tmp_path: Path) -> None:
    from tests.sim.conftest import CHAT_OUTPUT, CHAT_PROMPT

    config = SimConfig(prefill=2, decode=1, duration_s=90.0, rate_rps=5.0, engine="sglang",
                       prompt=CHAT_PROMPT, output=CHAT_OUTPUT, seed=3,
                       faults=(parse_fault("small-kv:fraction=0.05"),))
    summary = run_to_dir(config, tmp_path / "c")
    ds = read_paths([tmp_path / "c"])
    text = (tmp_path / "c" / "metrics.om").read_text()
    for name in ("sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_decode_prealloc_queue_reqs",
                 "sglang:kv_transfer_latency_ms_bucket", "sglang:time_to_first_token_seconds_bucket"):
        assert name in text
    signals = set(ds.metrics["signal"])
    assert {S.DECODE_PREALLOC_QUEUE, S.PREFILL_BOOTSTRAP_QUEUE, S.KV_TRANSFER_S} <= signals
    assert _last(ds, S.GENERATION_TOKENS_TOTAL, _names(ds, "decode")) == ds.requests["output_tokens"].sum()
    # memory pressure: the decode prealloc queue fills and the logs say so
    logs = (tmp_path / "c" / "logs")
    decode_log = next(p for p in logs.iterdir() if p.name.startswith("10.0.2."))
    lines = decode_log.read_text().splitlines()
    assert any("Decode batch, #running-req:" in ln and "#prealloc-req: 0," not in ln for ln in lines)
    prefill_log = next(p for p in logs.iterdir() if p.name.startswith("10.0.1."))
    assert any(ln.startswith("[2025-06-02 10:0") and "Prefill batch, #new-seq:" in ln
               for ln in prefill_log.read_text().splitlines())
    assert summary.preemptions >= 0 and summary.requests == len(ds.requests)


def test_gzip_and_parquet_outputs_read_back(tmp_path: Path) -> None:
    config = replace(SimConfig(prefill=2, decode=1, duration_s=40.0, rate_rps=3.0, seed=4),
                     compress=True, requests_format="parquet")
    summary = run_to_dir(config, tmp_path / "c")
    names = set(summary.files)
    assert {"requests.parquet", "metrics.om.gz", "node_metrics.om.gz"} <= names
    assert all(n.endswith(".gz") for n in names if n.startswith("logs/"))
    ds = read_paths([tmp_path / "c"])
    assert len(ds.requests) == summary.requests and not ds.metrics.empty


def test_files_are_stamped_with_the_simulated_end(vllm_capture: tuple[Path, SimSummary, Dataset]) -> None:
    out, summary, _ = vllm_capture
    mtimes = np.array([p.stat().st_mtime for p in out.rglob("*") if p.is_file()])
    assert mtimes.size == len(summary.files)
    np.testing.assert_allclose(mtimes, 1748858400.0 + summary.simulated_s, atol=1e-3)
