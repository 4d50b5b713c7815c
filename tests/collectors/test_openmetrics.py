"""The Prometheus text / OpenMetrics reader, on hand-written fixtures of every metric family."""

from __future__ import annotations

import gzip
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zstandard

from pdprobe import signals as S
from pdprobe.analysis.promql import counter_increase_by_instance, histogram_window
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.fuse import fuse
from pdprobe.collectors.io import sniff
from pdprobe.collectors.openmetrics import read_openmetrics
from pdprobe.collectors.openmetrics_time import DEFAULT_SCRAPE_INTERVAL_S
from pdprobe.dataset import (
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    ROLE_FROM_EVIDENCE,
    ROLE_FROM_LABEL,
    ROLE_FROM_NAME,
    Partial,
)
from pdprobe.errors import InputError

T0 = 1_750_000_000.0
T1 = T0 + 15.0
INF = math.inf
CTX = ReadContext()


@pytest.fixture
def metrics_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "metrics"


def read(path: Path, ctx: ReadContext = CTX) -> Partial:
    return read_openmetrics(path, ctx)


def series(frame: pd.DataFrame | None, instance: str, signal: str, kind: str,
           le: float | None = None) -> list[tuple[float, float]]:
    """(ts, value) pairs of one identity, in time order."""
    assert frame is not None
    sel = (frame["instance"] == instance) & (frame["signal"] == signal) & (frame["kind"] == kind)
    if le is not None:
        sel &= frame["le"] == le
    part = frame[sel.to_numpy(dtype=bool)].sort_values("ts")
    return list(zip(part["ts"].tolist(), part["value"].tolist(), strict=True))


def values(frame: pd.DataFrame | None, instance: str, signal: str, kind: str = S.GAUGE,
           le: float | None = None) -> list[float]:
    return [v for _, v in series(frame, instance, signal, kind, le)]


def buckets(frame: pd.DataFrame | None, instance: str, signal: str, ts: float) -> dict[float, float]:
    assert frame is not None
    sel = ((frame["instance"] == instance) & (frame["signal"] == signal)
           & (frame["kind"] == S.BUCKET) & (frame["ts"] == ts)).to_numpy(dtype=bool)
    part = frame[sel]
    return dict(zip(part["le"].tolist(), part["value"].tolist(), strict=True))


def hints(p: Partial) -> set[tuple[str, str, int, str]]:
    return {(h.instance, h.role, h.strength, h.how) for h in p.role_hints}


# --- vLLM -------------------------------------------------------------------------------------


def test_vllm_033_prefill_decode_pair(metrics_dir: Path) -> None:
    p = read(metrics_dir / "vllm_033_pd.prom")
    m = p.metrics
    assert p.network is None
    assert list(m.columns) == list(METRIC_COLUMNS)
    P, D = "10.0.0.1:8000", "10.0.0.2:8000"
    assert series(m, P, S.REQUESTS_RUNNING, S.GAUGE) == [(T0, 4.0), (T1, 6.0)]
    # decode: two DP engines summed, KV usage averaged
    assert values(m, D, S.REQUESTS_RUNNING) == [58.0, 62.0]
    assert values(m, D, S.REQUESTS_WAITING) == [4.0, 6.0]
    assert values(m, D, S.KV_USAGE_RATIO) == pytest.approx([0.55, 0.65])
    # waiting_by_reason: only reason="deferred"; kv_fetch_by_stage: summed over stages and engines
    assert values(m, D, S.REQUESTS_DEFERRED) == [3.0, 3.0]
    assert values(m, P, S.REQUESTS_DEFERRED) == [0.0, 0.0]
    assert values(m, D, S.KV_FETCH_WAITING) == [3.0, 3.0]
    assert values(m, P, S.KV_FETCH_WAITING) == []
    # prompt_tokens_by_source: only source="external_kv_transfer"
    assert values(m, D, S.KV_RECEIVED_TOKENS_TOTAL, S.COUNTER) == [12000.0, 18000.0]
    assert values(m, P, S.KV_RECEIVED_TOKENS_TOTAL, S.COUNTER) == [0.0, 0.0]
    assert values(m, D, S.GENERATION_TOKENS_TOTAL, S.COUNTER) == [8000.0, 14000.0]
    # request_success_total: all reasons finished, abort|error failed
    assert values(m, P, S.REQUESTS_FINISHED_TOTAL, S.COUNTER) == [10.0, 52.0]
    assert values(m, P, S.REQUESTS_FAILED_TOTAL, S.COUNTER) == [0.0, 2.0]
    assert values(m, D, S.REQUESTS_FAILED_TOTAL, S.COUNTER) == []
    assert buckets(m, P, S.TTFT_S, T1) == {0.1: 20.0, 0.5: 40.0, 1.0: 48.0, INF: 52.0}
    assert values(m, P, S.TTFT_S, S.HSUM) == [3.0, 20.0]
    assert values(m, P, S.TTFT_S, S.HCOUNT) == [10.0, 52.0]
    # connectors: Mooncake on P (push), NIXL on D; bounds printed like prometheus_client
    assert buckets(m, P, S.KV_TRANSFER_S, T1) == {0.005: 4.0, 0.01: 10.0, 0.025: 30.0, INF: 52.0}
    assert buckets(m, P, S.KV_TRANSFER_BYTES, T1) == {2048.0: 0.0, 8388608.0: 6.0,
                                                      8589934592.0: 52.0, INF: 52.0}
    assert values(m, P, S.KV_TRANSFER_BYTES, S.HSUM) == [2.5e7, 2.6e8]
    assert values(m, P, S.KV_TRANSFER_FAILURES_TOTAL, S.COUNTER) == [0.0, 1.0]
    assert buckets(m, D, S.KV_TRANSFER_S, T1) == {0.005: 2.0, 0.01: 6.0, 0.025: 12.0, INF: 14.0}
    assert values(m, D, S.KV_TRANSFER_S, S.HSUM) == [0.08, 0.25]
    assert values(m, D, S.KV_TRANSFER_FAILURES_TOTAL, S.COUNTER) == [0.0, 1.0]
    # histogram rows carry le only on buckets
    assert m.loc[m["kind"] != S.BUCKET, "le"].isna().all()

    assert p.source.format == "prometheus-text"
    # samples used per scrape: 29 on P (an abort line feeds finished and failed), 27 on D
    assert len(m) == 86 and p.source.rows == 2 * (29 + 27)
    assert p.source.skipped == 0
    assert "sample timestamps read as milliseconds (by their magnitude)" in p.source.notes
    # _created series are dropped silently; unknown names are summarised, not fatal
    assert any("ignored 4 sample(s) of 2 metric name(s)" in n
               and "python_gc_objects_collected_total (2)" in n for n in p.source.notes)
    assert p.warnings == ()
    assert hints(p) == {
        (P, "prefill", ROLE_FROM_NAME, "name pattern in pod 'vllm-prefill-0'"),
        (D, "decode", ROLE_FROM_NAME, "name pattern in pod 'vllm-decode-0'"),
        (P, "prefill", ROLE_FROM_EVIDENCE, "about one generated token per finished request"),
        (D, "decode", ROLE_FROM_EVIDENCE,
         "vllm:num_requests_kv_fetch_by_stage is exposed (KV consumers only)"),
    }
    assert dict(p.engines) == {P: "vllm", D: "vllm"}
    assert dict(p.nodes) == {P: "10.0.0.1", D: "10.0.0.2"}


def test_vllm_v0_scrapes_with_scrape_time_markers(metrics_dir: Path) -> None:
    p = read(metrics_dir / "vllm_v0_scrapes.prom")
    m = p.metrics
    inst = "vllm_v0_scrapes"  # no instance label: the file name stands in
    assert set(m["instance"]) == {inst}
    assert series(m, inst, S.KV_USAGE_RATIO, S.GAUGE) == [(1_700_000_000.0, 0.1),
                                                           (1_700_000_010.5, 0.2)]
    assert values(m, inst, S.PREFIX_QUERIES_TOTAL, S.COUNTER) == [100.0, 300.0]
    assert values(m, inst, S.PREFIX_HITS_TOTAL, S.COUNTER) == [50.0, 200.0]
    assert values(m, inst, S.PREFIX_HIT_RATIO) == [0.5, 0.625]
    assert values(m, inst, S.GENERATION_THROUGHPUT_TPS) == [12.5, 20.0]
    # time_per_output_token_seconds (deprecated name) feeds ITL
    assert buckets(m, inst, S.ITL_S, 1_700_000_010.5) == {0.01: 3.0, 0.025: 6.0, INF: 8.0}
    assert values(m, inst, S.ITL_S, S.HSUM) == [0.1, 0.3]
    assert any("scrape times taken from '# pdprobe-scrape-ts' lines (2 scrapes)" in n
               for n in p.source.notes)
    assert any("assigned to instance 'vllm_v0_scrapes' (the file name)" in n
               for n in p.source.notes)
    # V0's swapped gauge is read (issue 13), no longer an unknown name
    assert values(m, inst, S.REQUESTS_SWAPPED) == [0.0, 0.0]
    assert not any("vllm:num_requests_swapped" in n for n in p.source.notes)
    assert dict(p.engines) == {inst: "vllm"}

    named = read(metrics_dir / "vllm_v0_scrapes.prom", ReadContext(instance="gpu7:8000"))
    assert set(named.metrics["instance"]) == {"gpu7:8000"}
    assert any("'gpu7:8000' (--instance)" in n for n in named.source.notes)


def test_restart_resets_are_corrected(metrics_dir: Path) -> None:
    p = read(metrics_dir / "vllm_restart.prom")
    m = p.metrics
    inst = "10.0.0.9:8000"
    assert values(m, inst, S.GENERATION_TOKENS_TOTAL, S.COUNTER) == [100.0, 200.0, 250.0, 320.0]
    assert values(m, inst, S.E2E_S, S.BUCKET, le=1.0) == [5.0, 9.0, 11.0, 13.0]
    assert values(m, inst, S.E2E_S, S.BUCKET, le=INF) == [6.0, 10.0, 12.0, 15.0]
    assert values(m, inst, S.E2E_S, S.HSUM) == [3.0, 5.0, 6.0, 7.5]
    assert values(m, inst, S.E2E_S, S.HCOUNT) == [6.0, 10.0, 12.0, 15.0]
    # last - first is the increase across the restart
    assert counter_increase_by_instance(m, S.GENERATION_TOKENS_TOTAL).to_dict() == {inst: 220.0}
    h = histogram_window(m, S.E2E_S)
    assert h["count"].tolist() == [8.0, 9.0]
    assert h.attrs["sum"] == pytest.approx(4.5)


def test_promtool_242_tsdb_dump(metrics_dir: Path) -> None:
    """Real output of Debian's promtool 2.42 ``tsdb dump``: the name is a __name__ label."""
    p = read(metrics_dir / "promtool_242_tsdb_dump.txt")
    m = p.metrics
    inst = "10.3.0.1:8000"
    assert series(m, inst, S.REQUESTS_RUNNING, S.GAUGE) == [(T0, 7.0), (T1, 9.0)]
    assert values(m, inst, S.GENERATION_TOKENS_TOTAL, S.COUNTER) == [1000.0, 1600.0]
    assert buckets(m, inst, S.E2E_S, T1) == {1.0: 5.0, INF: 8.0}
    assert values(m, inst, S.E2E_S, S.HSUM) == [3.5, 9.25]
    assert hints(p) == {(inst, "decode", ROLE_FROM_NAME, "name pattern in pod 'vllm-decode-0'")}


def test_openmetrics_with_family_type_lines(metrics_dir: Path) -> None:
    """The OpenMetrics file promtool backfilled from (``# TYPE vllm:generation_tokens counter``)."""
    p = read(metrics_dir / "promtool_backfill_input.om")
    assert p.source.format == "openmetrics"
    assert "sample timestamps read as seconds (by their magnitude)" in p.source.notes
    assert values(p.metrics, "10.3.0.1:8000", S.GENERATION_TOKENS_TOTAL, S.COUNTER) == [
        1000.0, 1600.0]
    assert len(p.metrics) == 12


# --- SGLang -----------------------------------------------------------------------------------


def test_sglang_0523_prefill_decode_pair(metrics_dir: Path) -> None:
    p = read(metrics_dir / "sglang_0523_pd.prom")
    m = p.metrics
    P, D = "10.1.0.1:30000", "10.1.0.2:30000"
    # tp_rank="1" repeats rank 0 (all-schedulers metrics): not double counted
    assert values(m, P, S.REQUESTS_RUNNING) == [2.0, 3.0]
    assert any("kept the lowest SGLang tp_rank only: 1 series" in n for n in p.source.notes)
    # priority="" is SGLang's total; per-priority parts are not added again
    assert values(m, D, S.REQUESTS_WAITING) == [6.0, 8.0]
    assert values(m, P, S.PREFILL_BOOTSTRAP_QUEUE) == [1.0, 2.0]
    assert values(m, P, S.PREFILL_INFLIGHT_QUEUE) == [4.0, 0.0]
    assert values(m, D, S.DECODE_PREALLOC_QUEUE) == [2.0, 3.0]
    assert values(m, D, S.DECODE_TRANSFER_QUEUE) == [1.0, 0.0]
    assert values(m, D, S.REQUESTS_RETRACTED) == [0.0, 1.0]
    assert values(m, D, S.PREEMPTIONS_TOTAL, S.COUNTER) == [3.0, 4.0]
    # kv_transfer_latency_ms: bounds and sum in seconds; counts unscaled
    assert buckets(m, P, S.KV_TRANSFER_S, T1) == pytest.approx(
        {0.001: 1.0, 0.005: 6.0, 0.025: 10.0, INF: 12.0})
    assert values(m, P, S.KV_TRANSFER_S, S.HSUM) == pytest.approx([0.12, 0.16])
    assert values(m, P, S.KV_TRANSFER_S, S.HCOUNT) == [10.0, 12.0]
    # kv_transfer_speed_gb_s: GiB/s -> bytes/s
    gib = float(2**30)
    assert buckets(m, P, S.KV_TRANSFER_BYTES_PER_S, T0) == {5 * gib: 1.0, 25 * gib: 9.0,
                                                            INF: 10.0}
    assert values(m, P, S.KV_TRANSFER_BYTES_PER_S, S.HSUM) == [150 * gib, 180 * gib]
    # transfer + bootstrap failures, and is_streaming sub-series, are summed
    assert values(m, P, S.KV_TRANSFER_FAILURES_TOTAL, S.COUNTER) == [1.0, 2.0]
    assert values(m, P, S.PROMPT_TOKENS_TOTAL, S.COUNTER) == [1500.0, 2600.0]
    assert buckets(m, P, S.TTFT_S, T1) == {0.1: 3.0, 0.2: 7.0, INF: 8.0}
    assert values(m, P, S.TTFT_S, S.HSUM) == pytest.approx([0.65, 1.1])
    assert hints(p) == {
        (P, "prefill", ROLE_FROM_LABEL, "label engine_type='prefill'"),
        (D, "decode", ROLE_FROM_LABEL, "label engine_type='decode'"),
        (P, "prefill", ROLE_FROM_EVIDENCE,
         "SGLang PD prefill queues (bootstrap/inflight) are in use"),
        (D, "decode", ROLE_FROM_EVIDENCE, "SGLang PD decode queues (prealloc/transfer) are in use"),
    }
    assert dict(p.engines) == {P: "sglang", D: "sglang"}


def test_sglang_dp_attention_ranks_are_summed_not_deduplicated(tmp_path: Path) -> None:
    """With DP attention each DP group's leader has its own tp_rank: all are kept and summed."""
    lab = 'engine_type="decode",instance="d:1",model_name="m"'
    text = "\n".join([
        f'sglang:num_running_reqs{{dp_rank="0",{lab},tp_rank="0"}} 10 1750000000000',
        f'sglang:num_running_reqs{{dp_rank="1",{lab},tp_rank="1"}} 12 1750000000000',
        f'sglang:num_running_reqs{{dp_rank="1",{lab},tp_rank="2"}} 12 1750000000000',
    ]) + "\n"
    p = read(_write(tmp_path, text))
    assert values(p.metrics, "d:1", S.REQUESTS_RUNNING) == [22.0]


def test_sglang_0510_dump_openmetrics(metrics_dir: Path) -> None:
    """``promtool tsdb dump-openmetrics`` layout: %g values, seconds with 3 decimals, # EOF."""
    p = read(metrics_dir / "sglang_0510.om")
    m = p.metrics
    P, D = "10.1.1.1:30000", "10.1.1.2:30000"
    assert p.source.format == "openmetrics"
    # <=0.5.10 prealloc queue on the prefill side is the bootstrap queue
    assert series(m, P, S.PREFILL_BOOTSTRAP_QUEUE, S.GAUGE) == [(T0, 3.0), (T1, 4.0)]
    assert values(m, D, S.DECODE_PREALLOC_QUEUE) == [0.0, 1.0]
    mib = float(2**20)
    assert buckets(m, P, S.KV_TRANSFER_BYTES, T1) == {1 * mib: 0.0, 5 * mib: 2.0,
                                                      50 * mib: 5.0, INF: 5.0}
    assert values(m, P, S.KV_TRANSFER_BYTES, S.HSUM) == [60 * mib, 110 * mib]
    assert values(m, D, S.GENERATION_THROUGHPUT_TPS) == [1500.0, 1600.0]
    assert values(m, D, S.PREFIX_HIT_RATIO) == [0.2, 0.3]
    assert values(m, P, S.REQUESTS_FINISHED_TOTAL, S.COUNTER) == [1_000_000.0, 1_000_025.0]
    assert p.source.notes == ("sample timestamps read as seconds (by their magnitude)",)
    assert (P, "prefill", ROLE_FROM_LABEL, "label engine_type='prefill'") in hints(p)


def test_sglang_053_unified_gauges_and_behaviour(metrics_dir: Path) -> None:
    p = read(metrics_dir / "sglang_053_unified.prom")
    m = p.metrics
    A, B = "node-a:30000", "node-b:30001"
    # kv_transfer_* were gauges in <=0.5.3: averaged over DP ranks, converted to base units
    assert values(m, A, S.KV_TRANSFER_LATENCY_S_GAUGE) == pytest.approx([0.015])
    assert values(m, A, S.KV_TRANSFER_SPEED_GAUGE) == [3.0 * 2**30]
    assert values(m, A, S.KV_TRANSFER_S, S.BUCKET) == []
    assert values(m, A, S.PREFILL_BOOTSTRAP_QUEUE) == [3.0]
    # engine_type="unified" gives no role; the PD queues do
    assert hints(p) == {
        (A, "prefill", ROLE_FROM_EVIDENCE,
         "SGLang PD prefill queues (bootstrap/inflight) are in use"),
        (B, "decode", ROLE_FROM_EVIDENCE, "SGLang PD decode queues (prealloc/transfer) are in use"),
    }
    assert any('engine_type="unified" names no role' in n for n in p.source.notes)


def test_sglang_04x_concatenated_scrapes_without_timestamps(metrics_dir: Path,
                                                            tmp_path: Path) -> None:
    path = tmp_path / "sglang-prefill-0.prom"
    shutil.copy(metrics_dir / "sglang_04x_scrapes.prom", path)
    end = 1_700_000_100.0
    os.utime(path, (end, end))
    p = read(path)
    m = p.metrics
    inst = "sglang-prefill-0"
    step = DEFAULT_SCRAPE_INTERVAL_S
    t = [end - 2 * step, end - step, end]
    # the bootstrap (prealloc) queue is missing from the second scrape: still the third's time
    assert series(m, inst, S.PREFILL_BOOTSTRAP_QUEUE, S.GAUGE) == [(t[0], 4.0), (t[2], 1.0)]
    # 0.4.x spelling "infight"
    assert series(m, inst, S.PREFILL_INFLIGHT_QUEUE, S.GAUGE) == [(t[0], 2.0), (t[1], 5.0),
                                                                  (t[2], 0.0)]
    assert values(m, inst, S.KV_TRANSFER_FAILURES_TOTAL, S.COUNTER) == [0.0, 1.0, 3.0]
    assert any("read as 3 concatenated scrape(s)" in n and "15 s apart" in n
               for n in p.source.notes)
    assert not any("ignored" in n for n in p.source.notes)  # _created lines are not "unknown"
    assert (inst, "prefill", ROLE_FROM_EVIDENCE,
            "SGLang PD prefill queues (bootstrap/inflight) are in use") in hints(p)


def test_sglang_names_rewritten_with_underscores(metrics_dir: Path) -> None:
    p = read(metrics_dir / "sglang_rewritten.prom")
    m = p.metrics
    inst = "10.1.2.1:30000"
    assert values(m, inst, S.PREFILL_BOOTSTRAP_QUEUE) == [6.0]
    assert values(m, inst, S.REQUESTS_RUNNING) == [2.0]
    assert buckets(m, inst, S.KV_TRANSFER_S, T0) == {0.01: 3.0, INF: 4.0}
    assert values(m, inst, S.KV_TRANSFER_S, S.HSUM) == [0.04]
    assert dict(p.engines) == {inst: "sglang"}


# --- Dynamo -----------------------------------------------------------------------------------


def test_dynamo_frontend_and_workers(metrics_dir: Path) -> None:
    p = read(metrics_dir / "dynamo.om")
    m = p.metrics
    F, OLD, NEW = "10.2.0.1:8000", "10.2.0.2:8081", "10.2.0.3:8081"
    WP, WD = "7587888160958628000", "7587888160958628001"
    assert values(m, F, S.REQUESTS_FINISHED_TOTAL, S.COUNTER) == [102.0, 155.0]
    assert values(m, F, S.REQUESTS_FAILED_TOTAL, S.COUNTER) == [2.0, 5.0]
    assert values(m, F, S.REQUESTS_WAITING) == [3.0, 4.0]
    # ~1 output token per request on the frontend is not "prefill" behaviour: it is no worker
    assert values(m, F, S.GENERATION_TOKENS_TOTAL, S.COUNTER) == [100.0, 150.0]
    assert buckets(m, F, S.TTFT_S, T1) == {0.0: 0.0, 0.1: 60.0, 1.0: 140.0, INF: 155.0}
    # per-worker gauges are keyed by worker_id; dp_ranks summed
    assert values(m, WD, S.ACTIVE_DECODE_BLOCKS) == [150.0, 180.0]
    assert values(m, WD, S.ITL_LAST_S) == [0.02, 0.025]
    assert values(m, WP, S.TTFT_LAST_S) == [0.21, 0.3]
    # component KV stats, old (kvstats_) and new names
    assert values(m, OLD, S.KV_USAGE_RATIO) == [0.4, 0.5]
    assert values(m, OLD, S.PREFIX_HIT_RATIO) == [0.1, 0.2]
    assert values(m, NEW, S.KV_USAGE_RATIO) == [0.2, 0.3]
    assert values(m, NEW, S.PREFIX_HIT_RATIO) == [0.5, 0.6]
    assert values(m, NEW, S.REQUESTS_RUNNING) == [2.0, 3.0]
    assert hints(p) == {
        (WD, "decode", ROLE_FROM_LABEL, "label worker_type='decode'"),
        (WP, "prefill", ROLE_FROM_LABEL, "label worker_type='prefill'"),
        (NEW, "prefill", ROLE_FROM_LABEL, "label dynamo_component='prefill'"),
        (OLD, "decode", ROLE_FROM_EVIDENCE + 5,
         "label dynamo_component='backend' beside a prefill component"),
        (F, "frontend", ROLE_FROM_EVIDENCE, "Dynamo frontend metrics (dynamo_frontend_*)"),
    }
    # the engine behind a Dynamo worker wins over "dynamo"
    assert p.engines[NEW] == "vllm"
    assert p.engines[OLD] == "dynamo"
    # worker_id instances are not on the frontend's node
    assert WD not in p.nodes and p.nodes[F] == "10.2.0.1"


# --- node_exporter ----------------------------------------------------------------------------


def test_node_exporter_infiniband_counters(metrics_dir: Path) -> None:
    p = read(metrics_dir / "node_infiniband.om")
    assert p.metrics is None
    net = p.network
    assert list(net.columns) == list(NETWORK_COLUMNS)

    def col(signal: str, device: str = "mlx5_0") -> list[tuple[float, float]]:
        sel = ((net["signal"] == signal) & (net["device"] == device)).to_numpy(dtype=bool)
        part = net[sel].sort_values("ts")
        assert set(part["node"]) == {"10.0.0.1"} and set(part["port"]) == {"1"}
        return list(zip(part["ts"].tolist(), part["value"].tolist(), strict=True))

    t2 = T0 + 30.0
    # mlx5 Q-counter wraps at 2**32: 4294967290 -> 200 is +206
    assert col(S.RDMA_OUT_OF_SEQUENCE_TOTAL) == [(T0, 4_294_967_000.0), (T1, 4_294_967_290.0),
                                                 (t2, 4_294_967_496.0)]
    # a 64-bit counter that drops was reset (driver reload): counts again from 0
    assert col(S.RDMA_ADP_RETRANS_TOTAL) == [(T0, 500.0), (T1, 600.0), (t2, 700.0)]
    assert col(S.RDMA_TX_BYTES_TOTAL) == [(T0, 1e12), (T1, 1.0025e12), (t2, 1.005e12)]
    assert col(S.RDMA_RX_BYTES_TOTAL, "mlx5_1") == [(T0, 2e9), (T1, 3e9), (t2, 4e9)]
    assert col(S.LINK_RATE_BYTES_PER_S) == [(T0, 5e10)]
    assert col(S.PORT_STATE) == [(T0, 4.0)]
    assert p.role_hints == () and dict(p.engines) == {}
    assert any("node_cpu_seconds_total (2), node_infiniband_info (1)" in n
               for n in p.source.notes)


# --- sniffing and fusing ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vllm_033_pd.prom", "sglang_0523_pd.prom", "sglang_0510.om",
                                  "sglang_053_unified.prom", "sglang_04x_scrapes.prom",
                                  "sglang_rewritten.prom", "dynamo.om", "node_infiniband.om",
                                  "vllm_restart.prom", "promtool_backfill_input.om",
                                  "vllm_v0_scrapes.prom", "promtool_242_tsdb_dump.txt"])
def test_fixtures_sniff_as_metrics(metrics_dir: Path, name: str) -> None:
    assert sniff(metrics_dir / name).kind == "openmetrics"


def test_fused_roles_from_all_families(metrics_dir: Path) -> None:
    partials = [read(metrics_dir / n) for n in ("vllm_033_pd.prom", "sglang_0523_pd.prom",
                                                "dynamo.om", "node_infiniband.om")]
    ds = fuse(partials)
    roles = {i.name: i.role for i in ds.instances}
    assert roles["10.0.0.1:8000"] == "prefill" and roles["10.0.0.2:8000"] == "decode"
    assert roles["10.1.0.1:30000"] == "prefill" and roles["10.1.0.2:30000"] == "decode"
    assert roles["10.2.0.2:8081"] == "decode" and roles["10.2.0.3:8081"] == "prefill"
    assert roles["10.2.0.1:8000"] == "frontend"
    node = {i.name: i.node for i in ds.instances}
    assert node["10.0.0.1:8000"] == "10.0.0.1"  # joins node_exporter's network rows
    assert set(ds.network["node"]) == {"10.0.0.1"}


# --- compression and bad input ----------------------------------------------------------------


def test_gzip_and_zstd(metrics_dir: Path, tmp_path: Path) -> None:
    raw = (metrics_dir / "vllm_033_pd.prom").read_bytes()
    gz = tmp_path / "m.prom.gz"
    gz.write_bytes(gzip.compress(raw))
    zst = tmp_path / "m.prom.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(raw))
    plain = read(metrics_dir / "vllm_033_pd.prom").metrics
    for path in (gz, zst):
        got = read(path).metrics
        pd.testing.assert_frame_equal(got, plain)


def test_truncated_gzip_is_one_input_error(metrics_dir: Path, tmp_path: Path) -> None:
    data = gzip.compress((metrics_dir / "vllm_033_pd.prom").read_bytes())
    path = tmp_path / "cut.prom.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        read(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def _write(tmp_path: Path, text: str, name: str = "m.prom") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


L = 'instance="h:1"'


def test_malformed_lines_are_counted_with_line_numbers(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([
        f"vllm:num_requests_running{{{L}}} 1 1750000000000",
        "this is { not a metric",
        f"vllm:num_requests_running{{{L}}} 2 1750000015000",
        f"vllm:num_requests_running{{{L}}} abc 1750000030000",
        f'vllm:num_requests_running{{{L},pod="x"  1 1750000030000',
    ]) + "\n")
    p = read(path)
    assert values(p.metrics, "h:1", S.REQUESTS_RUNNING) == [1.0, 2.0]
    assert p.source.skipped == 3
    assert any("skipped 3 malformed line(s) (first at line 2, 4, 5)" in w for w in p.warnings)


def test_nothing_parses_is_an_input_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "hello world { nope\n=== ===\n")
    with pytest.raises(InputError) as err:
        read(path)
    assert "no metric sample line could be parsed (first bad line 1)" in str(err.value)


def test_no_known_metric_names_is_a_warning_not_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, 'go_goroutines{instance="h:1"} 12 1750000000000\n')
    p = read(path)
    assert p.metrics is None and p.network is None
    assert any("no vLLM/SGLang/Dynamo/node_exporter metrics" in w for w in p.warnings)
    assert any("go_goroutines (1)" in n for n in p.source.notes)
    empty = read(_write(tmp_path, "# HELP x y\n# EOF\n", "empty.om"))
    assert empty.metrics is None and any("no metric samples" in w for w in empty.warnings)


def test_nan_and_inf_values_are_dropped_but_inf_le_is_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([
        f"vllm:num_requests_running{{{L}}} 1 1750000000000",
        f"vllm:num_requests_running{{{L}}} NaN 1750000015000",
        f"vllm:num_requests_running{{{L}}} +Inf 1750000030000",
        f'vllm:e2e_request_latency_seconds_bucket{{{L},le="+Inf"}} 3 1750000000000',
        f'vllm:e2e_request_latency_seconds_bucket{{{L},le="1.0"}} 2 1750000000000',
    ]) + "\n")
    p = read(path)
    assert values(p.metrics, "h:1", S.REQUESTS_RUNNING) == [1.0]
    assert buckets(p.metrics, "h:1", S.E2E_S, T0) == {1.0: 2.0, INF: 3.0}
    assert any("dropped 2 NaN/Inf sample value(s)" in w and "vllm:num_requests_running (2)" in w
               for w in p.warnings)


def test_out_of_order_and_duplicate_timestamps(tmp_path: Path) -> None:
    path = _write(tmp_path, "\n".join([
        f"vllm:generation_tokens_total{{{L}}} 30 1750000030000",
        f"vllm:generation_tokens_total{{{L}}} 10 1750000000000",
        f"vllm:generation_tokens_total{{{L}}} 20 1750000015000",
        f"vllm:generation_tokens_total{{{L}}} 21 1750000015000",
    ]) + "\n")
    p = read(path)
    # sorted by time before reset detection: no false reset
    assert series(p.metrics, "h:1", S.GENERATION_TOKENS_TOTAL, S.COUNTER) == [
        (T0, 10.0), (T1, 21.0), (T0 + 30.0, 30.0)]
    assert any("timestamps out of order in 1 series" in w for w in p.warnings)
    assert any("1 sample(s) repeat a series' timestamp" in w for w in p.warnings)


def test_escaped_label_values_exemplars_tabs_and_crlf(tmp_path: Path) -> None:
    text = "\r\n".join([
        '# TYPE vllm:num_requests_running gauge',
        'vllm:num_requests_running{model_name="my \\"model\\", v2,pod=\\"fake-prefill\\"",'
        'pod="vllm-decode-3",instance="h:1"} 7 1750000000000',
        'vllm:num_requests_running{instance="h:1",model_name="a b",pod="vllm-decode-3"}\t8\t'
        '1750000015000',
        'vllm:generation_tokens_total{instance="h:1",pod="vllm-decode-3"} 5 1750000000.0 '
        '# {trace_id="abc"} 1 1750000000.0',
        '',
    ])
    p = read(_write(tmp_path, text))
    assert values(p.metrics, "h:1", S.REQUESTS_RUNNING) == [7.0, 8.0]
    assert values(p.metrics, "h:1", S.GENERATION_TOKENS_TOTAL, S.COUNTER) == [5.0]
    # the quoted `pod=\"fake-prefill\"` inside model_name is not the pod label
    assert hints(p) == {("h:1", "decode", ROLE_FROM_NAME, "name pattern in pod 'vllm-decode-3'")}
    assert p.source.skipped == 0


def test_space_inside_a_label_value_without_timestamp(tmp_path: Path) -> None:
    text = ('# pdprobe-scrape-ts 1700000000\n'
            'vllm:num_requests_running{instance="h:1",model_name="a b"} 3\n'
            '# pdprobe-scrape-ts 1700000015\n'
            'vllm:num_requests_running{instance="h:1",model_name="a b"} 4\n')
    p = read(_write(tmp_path, text))
    assert series(p.metrics, "h:1", S.REQUESTS_RUNNING, S.GAUGE) == [(1_700_000_000.0, 3.0),
                                                                     (1_700_000_015.0, 4.0)]


def test_deprecated_name_beside_its_successor_is_not_double_counted(tmp_path: Path) -> None:
    lines = []
    for name, value in (("vllm:gpu_cache_usage_perc", 0.5), ("vllm:kv_cache_usage_perc", 0.5),
                        ("vllm:gpu_prefix_cache_hits_total", 40),
                        ("vllm:prefix_cache_hits_total", 40),
                        ('vllm:time_per_output_token_seconds_bucket{le="+Inf",', 9),
                        ('vllm:inter_token_latency_seconds_bucket{le="+Inf",', 9)):
        if "{" in name:
            lines.append(f"{name}{L}}} {value} 1750000000000")
        else:
            lines.append(f"{name}{{{L}}} {value} 1750000000000")
    lines.append('vllm:gpu_cache_usage_perc{instance="old:1"} 0.25 1750000000000')
    p = read(_write(tmp_path, "\n".join(lines) + "\n"))
    m = p.metrics
    assert values(m, "h:1", S.PREFIX_HITS_TOTAL, S.COUNTER) == [40.0]
    assert buckets(m, "h:1", S.ITL_S, T0) == {INF: 9.0}
    assert values(m, "h:1", S.KV_USAGE_RATIO) == [0.5]
    assert values(m, "old:1", S.KV_USAGE_RATIO) == [0.25]  # alone, the old name is used
    assert any("ignored deprecated" in n and "vllm_time_per_output_token_seconds" in n
               for n in p.source.notes)


def test_samples_without_timestamp_in_a_timestamped_file_are_dropped(tmp_path: Path) -> None:
    path = _write(tmp_path, f"vllm:num_requests_running{{{L}}} 1 1750000000000\n"
                            f"vllm:num_requests_running{{{L}}} 2\n")
    p = read(path)
    assert values(p.metrics, "h:1", S.REQUESTS_RUNNING) == [1.0]
    assert p.source.skipped == 1
    assert any("1 sample(s) without a timestamp" in w for w in p.warnings)


def test_conflicting_behaviour_gives_no_evidence_hint(tmp_path: Path) -> None:
    lines = []
    for i, t in enumerate((T0, T1)):
        ms = int(t * 1000)
        lines += [
            f'sglang:num_prefill_inflight_queue_reqs{{{L}}} {i + 1} {ms}',
            f'sglang:num_decode_transfer_queue_reqs{{{L}}} {i + 1} {ms}',
        ]
    p = read(_write(tmp_path, "\n".join(lines) + "\n"))
    assert p.role_hints == ()
    assert any("behaviour points to both prefill and decode" in w for w in p.warnings)


def test_vectorised_parse_of_many_series(tmp_path: Path) -> None:
    """A few thousand series and scrapes: every value lands on its instance and time."""
    n_inst, n_steps = 50, 40
    rng = np.random.default_rng(7)
    running = rng.integers(0, 100, size=(n_inst, n_steps))
    tokens = np.cumsum(rng.integers(0, 1000, size=(n_inst, n_steps)), axis=1)
    out = []
    for s in range(n_steps):
        ms = 1_750_000_000_000 + s * 15_000
        for i in range(n_inst):
            lab = f'engine="0",instance="10.9.{i // 250}.{i % 250}:8000",job="vllm"'
            out.append(f"vllm:num_requests_running{{{lab}}} {running[i, s]} {ms}")
            out.append(f"vllm:generation_tokens_total{{{lab}}} {tokens[i, s]} {ms}")
    p = read(_write(tmp_path, "\n".join(out) + "\n"))
    m = p.metrics
    assert len(m) == 2 * n_inst * n_steps
    inst = "10.9.0.17:8000"
    assert values(m, inst, S.REQUESTS_RUNNING) == running[17].astype(float).tolist()
    assert values(m, inst, S.GENERATION_TOKENS_TOTAL, S.COUNTER) == tokens[17].astype(
        float).tolist()


# --- issue 14: timestamps in other units, values no engine reports --------------------------


def _om(tmp_path: Path, running: list[str], ts: list[str]) -> Path:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{instance="10.0.0.1:8000"}} {v} {t}'
              for v, t in zip(running, ts, strict=True)]
    lines += ["# TYPE vllm:generation_tokens counter"]
    lines += [f'vllm:generation_tokens_total{{instance="10.0.0.1:8000"}} {1000 * i} {t}'
              for i, t in enumerate(ts)]
    path = tmp_path / "m.om"
    path.write_text("\n".join([*lines, "# EOF"]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("factor", "unit"), [(10**9, "nanoseconds"), (10**6, "microseconds"),
                                              (10**3, "milliseconds")])
def test_timestamp_unit_by_magnitude(tmp_path: Path, factor: int, unit: str) -> None:
    """Nanosecond timestamps (time.time_ns()) crashed the report ("year 55421086")."""
    ts = [str(int(T0 + 15 * i) * factor) for i in range(8)]
    part = read(_om(tmp_path, ["3"] * 8, ts))
    assert f"sample timestamps read as {unit} (by their magnitude)" in part.source.notes
    got = series(part.metrics, "10.0.0.1:8000", S.REQUESTS_RUNNING, S.GAUGE)
    assert [t for t, _ in got] == [T0 + 15 * i for i in range(8)]


def test_sample_far_from_the_others_is_dropped(tmp_path: Path) -> None:
    ts = [f"{T0 + 15 * i:.3f}" for i in range(8)]
    ts[3] = "1.000"  # a 1970 sample among 2025 ones
    part = read(_om(tmp_path, ["3"] * 8, ts))
    assert any("dropped 2 sample(s) whose timestamp is more than 30 days away" in w
               for w in part.warnings), part.warnings
    assert len(values(part.metrics, "10.0.0.1:8000", S.REQUESTS_RUNNING)) == 7


def test_negative_and_huge_values_are_dropped_naming_the_metric(tmp_path: Path) -> None:
    """A negative counter gave -820 req/s and a 1387P recommendation; 1e308 overflowed sums."""
    ts = [f"{T0 + 15 * i:.3f}" for i in range(8)]
    running = ["3", "-5", "1e308", "4", "+Inf", "abc", "2", "2"]
    part = read(_om(tmp_path, running, ts))
    text = "\n".join(part.warnings)
    assert "dropped 2 sample value(s) no engine reports (1 negative, 1 above" in text
    assert "vllm:num_requests_running (2)" in text
    assert "1 NaN/Inf" in text and "skipped 1 malformed line" in text
    assert values(part.metrics, "10.0.0.1:8000", S.REQUESTS_RUNNING) == [3.0, 4.0, 2.0, 2.0]


def test_mixed_timestamp_units_are_read_sample_by_sample(tmp_path: Path) -> None:
    ts = [f"{int(T0 + 15 * i) * (1000 if i % 2 else 1)}" for i in range(8)]
    part = read(_om(tmp_path, ["3"] * 8, ts))
    assert any("mixed units (8 in milliseconds, 8 in seconds)" in w for w in part.warnings)
    got = series(part.metrics, "10.0.0.1:8000", S.REQUESTS_RUNNING, S.GAUGE)
    assert [t for t, _ in got] == [T0 + 15 * i for i in range(8)]
