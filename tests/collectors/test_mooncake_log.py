"""Mooncake transfer-engine lines: metrics, latency histogram, TENT totals, failures, TCP."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from pdprobe import signals as S
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.engine_log import read_engine_log
from pdprobe.collectors.mooncake_log import (
    LATENCY_EDGES_US,
    latency_buckets,
    parse_events,
    parse_metrics,
)

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
MIB = 2**20
STATS = ("I20251113 17:04:30.119301 22885 transfer_engine_impl.cpp:520] [Metrics] Transfer Engine "
         "Stats (over last 5s): Throughput: 100.00 MB/s | Latency Distribution (count=200): "
         "10-20μs:1.0%, 20-50μs:49.0%, 1000-2000μs:49.5%, >10000000μs:0.5%")


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def at(partial, signal: str, le: float | None = None) -> dict[float, float]:
    m = partial.metrics
    rows = m[m["signal"] == signal]
    if le is not None:
        rows = rows[np.isclose(rows["le"], le) | ((rows["le"] == le) & np.isinf(le))]
    return dict(zip(rows["ts"].tolist(), rows["value"].tolist(), strict=True))


def test_current_stats_line():
    row = parse_metrics([STATS]).iloc[0]
    assert (row["format"], row["tid"], row["window_s"]) == ("te-stats", "22885", 5)
    assert row["throughput_bytes_per_s"] == 100.0 * MIB  # MB is MiB
    assert row["latency_count"] == 200
    assert row[2e-5] == pytest.approx(2.0)
    assert row[5e-5] == pytest.approx(100.0)
    assert row[2e-3] == pytest.approx(199.0)
    assert row[10.0] == pytest.approx(199.0)
    assert row[np.inf] == 200.0  # >10000000μs lands in +Inf only


def test_latency_buckets_cover_every_edge_and_other_micro_signs():
    frame, errors = latency_buckets(
        ["0-10µs:10.0%, 10-20us:20.0%, 20-50μs:70.0%", "", "100-200μs:oops%"],
        np.array([10.0, np.nan, 4.0]))
    assert list(frame.columns) == [e / 1e6 for e in LATENCY_EDGES_US] + [np.inf]
    assert frame.iloc[0, :4].tolist() == pytest.approx([1.0, 3.0, 10.0, 10.0])
    assert frame.iloc[0, -1] == 10.0
    assert frame.iloc[1].isna().all()
    assert errors == [None, None, "latency share '100-200μs:oops%' is not a number"]


def test_old_throughput_line_real():
    row = parse_metrics(["I0518 08:57:30.157097 104603 transfer_engine.cpp:364] [Metrics] Transfer "
                         "Engine Throughput: 4.87 MB/s (over last 5s)"]).iloc[0]
    assert (row["format"], row["tid"], row["window_s"]) == ("te-throughput", "104603", 5)
    assert row["throughput_bytes_per_s"] == pytest.approx(4.87 * MIB)
    assert np.isnan(row["latency_count"])


def test_tent_summary_uses_decimal_units_and_counts_failures():
    row = parse_metrics(["I20251113 17:04:40.000000 22885 tent_metrics.cpp:70] TENT Metrics: Read: "
                         "1.00 MB (100 reqs, 2 fails) | Write: 512.00 KB (50 reqs, 1 fails)"]).iloc[0]
    assert (row["read_bytes"], row["write_bytes"]) == (1e6, 512e3)
    assert (row["tent_transfers"], row["tent_failures"]) == (147, 3)


def test_malformed_metric_line():
    frame = parse_metrics([STATS.replace("100.00 MB/s", "fast MB/s"), "Transfer Engine Stats x"])
    assert frame["row"].tolist() == [0]
    assert frame["error"].iloc[0] == "Throughput 'fast' is not a number"


def test_failure_and_tcp_lines():
    frame = parse_events([
        "E0603 20:16:59.104586 27322 worker_pool.cpp:271] Worker: Process failed for slice (opcode: "
        "0, source_addr: 0x7f5a2c000000, length: 65536, dest_addr: 0x7f1b40000000, local_nic: "
        "mlx5_1, peer_nic: 192.168.0.12:17001@mlx5_1, dest_rkey: 2113, retry_cnt: 1): RNR retry "
        "counter exceeded",
        "E20251113 17:04:36.000001 22900 worker_pool.cpp:271] Worker: Process failed for slice "
        "(opcode: 1, source_addr: 0x7f, length: 65536, dest_addr: 0x7e, local_nic: mlx5_0, "
        "peer_nic: 10.0.0.2:15000@mlx5_3, dest_rkey: 4242, retry_cnt: 8, max_retry_cnt: 8): "
        "transport retry counter exceeded",
        "W1113 17:04:36.000500 22900 worker_pool.cpp:305] Worker: WR flush error (peer_nic: "
        "10.0.0.2:15000@mlx5_3), redispatching if retry allows",
        "I0603 20:17:00.000000 1 transfer_engine_impl.cpp:200] MC_FORCE_TCP is set, using TCP "
        "transport only",
        "I0603 20:17:00.000000 1 transfer_engine_impl.cpp:300] installTransport, type=tcp",
        "I0603 20:17:00.000000 1 client.cpp:120] transport_type=tcp",
        "I0603 20:17:00.000000 1 transfer_engine_impl.cpp:210] Topology discovery complete. Found "
        "0 HCAs.",
        'tent_read_bytes_total{transport="tcp"} 524288',
    ])
    assert frame["event"].tolist() == [
        S.EV_RDMA_SLICE_FAILED, S.EV_RDMA_SLICE_FAILED, S.EV_RDMA_RETRY_EXCEEDED,
        S.EV_RDMA_SLICE_FAILED] + [S.EV_TRANSPORT_TCP] * 5
    assert frame["row"].tolist() == [0, 1, 1, 2, 3, 4, 5, 6, 7]
    assert frame["detail"].iloc[0] == ("RNR retry counter exceeded (local_nic mlx5_1, peer_nic "
                                       "192.168.0.12:17001@mlx5_1, opcode 0, retry_cnt 1) "
                                       "[nic=mlx5_1 peer=192.168.0.12:17001@mlx5_1]")
    assert frame["detail"].iloc[1].endswith("retry_cnt 8/8) [nic=mlx5_0 peer=10.0.0.2:15000@mlx5_3]")
    assert frame["detail"].iloc[3] == ("WR flush error (peer_nic 10.0.0.2:15000@mlx5_3) "
                                       "[peer=10.0.0.2:15000@mlx5_3]")


def test_histogram_and_throughput_across_reports_and_threads():
    partial = read_engine_log(LOGS / "mooncake_te.log", ReadContext())
    t1, t2, t3 = (utc("2025-11-13T17:04:30.119301"), utc("2025-11-13T17:04:30.5"),
                  utc("2025-11-13T17:04:35.119301"))
    # two transfer engines (thread ids 22885, 22886): throughput summed over fresh reports
    assert at(partial, S.KV_TRANSFER_THROUGHPUT_LOG) == pytest.approx(
        {t1: 100 * MIB, t2: 150 * MIB, t3: 250 * MIB})
    # cumulative histogram rows, accumulated over reports and summed over engines
    assert at(partial, S.KV_TRANSFER_S, le=2e-4) == pytest.approx({t1: 100, t2: 200, t3: 200})
    assert at(partial, S.KV_TRANSFER_S, le=2e-3) == pytest.approx({t1: 199, t2: 299, t3: 299})
    assert at(partial, S.KV_TRANSFER_S, le=np.inf) == {t1: 200, t2: 300, t3: 300}
    counts = partial.metrics[partial.metrics["kind"] == S.HCOUNT]
    assert counts["value"].tolist() == [200, 300, 300]
    buckets = partial.metrics[partial.metrics["kind"] == S.BUCKET]
    assert buckets["le"].nunique() == len(LATENCY_EDGES_US) + 1


def test_tent_totals_are_reset_corrected():
    partial = read_engine_log(LOGS / "mooncake_te.log", ReadContext())
    t40, t70, t100 = (utc("2025-11-13T17:04:40"), utc("2025-11-13T17:05:10"),
                      utc("2025-11-13T17:05:40"))
    assert at(partial, S.KV_TRANSFERS_TOTAL) == {t40: 147, t70: 324, t100: 334}
    assert at(partial, S.KV_TRANSFER_FAILURES_TOTAL) == {t40: 3, t70: 6, t100: 6}
    assert partial.events["event"].tolist() == [S.EV_RDMA_SLICE_FAILED, S.EV_RDMA_RETRY_EXCEEDED,
                                                S.EV_RDMA_SLICE_FAILED]
    assert partial.engines == {"mooncake_te": "mooncake"}
    assert partial.source.rows == 8  # the "Found 2 HCAs" line is not evidence of TCP


def test_year_less_glog_with_and_without_year_option(tmp_path):
    path = tmp_path / "te.log"
    shutil.copy(LOGS / "mooncake_old_tcp.log", path)
    os.utime(path, (utc("2025-08-01T00:00:00"),) * 2)
    partial = read_engine_log(path, ReadContext())
    assert at(partial, S.KV_TRANSFER_THROUGHPUT_LOG) == pytest.approx(
        {utc("2025-05-18T08:57:30.157097"): 4.87 * MIB,
         utc("2025-05-18T08:57:35.157097"): 9.74 * MIB})
    assert "year 2025 taken from the file's modification time; pass --year" in partial.source.notes
    given = read_engine_log(path, ReadContext(year=2024))
    assert given.events["ts"].iloc[0] == utc("2024-06-03T20:16:59.104586")
    assert given.events["event"].tolist() == [S.EV_RDMA_SLICE_FAILED, S.EV_TRANSPORT_TCP,
                                              S.EV_TRANSPORT_TCP]
