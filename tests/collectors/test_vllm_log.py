"""vLLM log lines: stats of every version, KV Transfer metrics, NIXL events, assembly."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.engine_log import read_engine_log
from pdprobe.collectors.log_toolkit import ROLE_FROM_ENGINE_FIELDS
from pdprobe.collectors.vllm_log import (
    parse_events,
    parse_kv_transfer,
    parse_prefix_cache,
    parse_stats,
)
from pdprobe.dataset import ROLE_FROM_EVIDENCE

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
MIB = 2**20

V0 = ("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 21.8 tokens/s, Running: 0 "
      "reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, CPU KV cache usage: 0.0%.")
V033 = ("Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 812.4 tokens/s, "
        "Running: 48 reqs, Waiting: 5 reqs, Deferred: 3 reqs, KV fetch: 1 waiting to start, 2 in "
        "progress, 0 completed waiting, GPU KV cache usage: 61.2%, Prefix cache hit rate: 0.0%, "
        "External prefix cache hit rate: 99.1%")


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def at(partial, signal: str) -> dict[float, float]:
    m = partial.metrics
    rows = m[m["signal"] == signal]
    return dict(zip(rows["ts"].tolist(), rows["value"].tolist(), strict=True))


# --- stats lines -------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [
    "INFO 04-01 17:26:35 metrics.py:455] ",  # 0.6.x
    "INFO 04-17 11:27:55 [metrics.py:481] ",  # ~0.7-0.10
    "(APIServer pid=3322894) INFO 10-27 11:21:40 [loggers.py:208] ",  # 0.11+
    "[decode-0] (APIServer pid=1) INFO 06-11 12:33:49 [loggers.py:259] ",  # VLLM_LOGGING_PREFIX
    "(APIServer pid=1) DEBUG 06-11 12:33:49 [v1/metrics/loggers.py:259] ",  # DEBUG fileinfo
    "(APIServer pid=1) INFO 06-11 12:33:49 [[loggers.py:259](http://loggers.py:259/)] ",  # GitHub
    "",
])
def test_stats_found_behind_every_logger_prefix(prefix):
    frame = parse_stats([prefix + V033])
    assert frame["running"].tolist() == [48] and frame["engine"].tolist() == ["000"]


def test_v0_line_with_swapped_pending_and_cpu_usage():
    frame = parse_stats([V0, V0.replace("Pending: 0", "Pending: 7").replace("0.1%", "45.6%")])
    assert frame["format"].tolist() == ["v0", "v0"]
    assert frame["waiting"].tolist() == [0, 7]  # V0 Pending is waiting
    assert frame["swapped"].tolist() == [0, 0]
    assert frame["gen_tps"].iloc[0] == pytest.approx(21.8)
    assert frame["kv_usage"].tolist() == pytest.approx([0.001, 0.456])
    assert frame["cpu_kv_usage"].tolist() == [0.0, 0.0]
    assert frame["engine"].tolist() == ["", ""]
    assert frame["error"].isna().all()


def test_v0_prefix_cache_line():
    frame = parse_prefix_cache(["INFO 04-01 17:26:45 metrics.py:471] Prefix cache hit rate: "
                                "GPU: 37.50%, CPU: 0.00%"])
    assert frame["prefix_hit"].tolist() == [0.375] and frame["cpu_prefix_hit"].tolist() == [0.0]


def test_early_v1_without_engine_prefix():
    frame = parse_stats(["INFO 03-20 10:00:05 [loggers.py:80] Avg prompt throughput: 512.0 "
                         "tokens/s, Avg generation throughput: 64.5 tokens/s, Running: 4 reqs, "
                         "Waiting: 2 reqs, GPU KV cache usage: 12.3%, Prefix cache hit rate: 50.0%"])
    row = frame.iloc[0]
    assert (row["format"], row["engine"], row["prompt_tps"], row["waiting"]) == ("v1-early", "",
                                                                                  512.0, 2)
    assert row["prefix_hit"] == 0.5 and row["kv_usage"] == pytest.approx(0.123)


def test_real_0_9_line():
    line = ("INFO 07-03 13:32:10 [loggers.py:123] Engine 000: Avg prompt throughput: 53.2 tokens/s, "
            "Avg generation throughput: 0.1 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache "
            "usage: 0.3%, Prefix cache hit rate: 0.0%")
    row = parse_stats([line]).iloc[0]
    assert (row["format"], row["prompt_tps"], row["gen_tps"]) == ("v1", 53.2, 0.1)
    assert row["kv_usage"] == pytest.approx(0.003)
    assert np.isnan(row["preemptions"]) and np.isnan(row["external_hit"])


def test_0_14_optional_parts():
    line = ("Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 980.0 "
            "tokens/s, Running: 50 reqs, Waiting: 3 reqs, Preemptions: 4, GPU KV cache usage: "
            "90.0%, Prefix cache hit rate: 0.0%, Corrupted: 1 reqs, External prefix cache hit "
            "rate: 96.0%, MM cache hit rate: 20.0%")
    row = parse_stats([line]).iloc[0]
    assert (row["preemptions"], row["corrupted"], row["external_hit"], row["mm_hit"]) == (
        4, 1, 0.96, 0.2)


def test_0_33_every_part_and_device_word():
    row = parse_stats([V033]).iloc[0]
    assert (row["running"], row["waiting"], row["deferred"]) == (48, 5, 3)
    assert (row["kv_fetch_waiting_to_start"], row["kv_fetch_in_progress"],
            row["kv_fetch_completed_waiting"], row["kv_fetch_waiting"]) == (1, 2, 0, 3)
    assert row["kv_usage"] == pytest.approx(0.612)
    assert (row["prefix_hit"], row["external_hit"], row["device"]) == (0.0, 0.991, "GPU")
    npu = parse_stats([V033.replace("GPU KV", "NPU KV").replace(", Prefix cache hit rate: 0.0%",
                                                                 "")]).iloc[0]
    assert npu["device"] == "NPU" and np.isnan(npu["prefix_hit"])
    assert npu["external_hit"] == 0.991


def test_aggregated_line():
    row = parse_stats(["2 Engines Aggregated: Avg prompt throughput: 100.0 tokens/s, Avg "
                       "generation throughput: 2000.0 tokens/s, Running: 90 reqs, Waiting: 3 reqs, "
                       "GPU KV cache usage: 70.0%"]).iloc[0]
    assert (row["format"], row["engines_aggregated"], row["running"]) == ("aggregated", 2, 90)


def test_malformed_and_truncated_stats():
    frame = parse_stats([V033.replace("Running: 48", "Running: many"),
                         V033[:80],
                         "Avg prompt throughput: nothing else"])
    assert frame["row"].tolist() == [0]  # the other two are not understood
    assert frame["error"].tolist() == ["Running 'many' is not a number"]


# --- KV Transfer metrics -----------------------------------------------------------------------


def test_kv_transfer_every_key_set():
    lines = [
        "KV Transfer metrics: num_successful_transfers=3",  # 0.11.0
        # real (vllm PR 25388), ~0.11.1-0.14
        "(APIServer pid=205253) INFO 09-22 13:28:53 [metrics.py:98] KV Transfer metrics: Num "
        "successful transfers=1, Avg xfer time (ms)=9.862, P90 xfer time (ms)=9.862, Avg post time "
        "(ms)=5.693, P90 post time (ms)=5.693, Avg MB per transfer=70.0, Throughput (MB/s)=7097.952,"
        " Avg number of descriptors=56.0",
        # 0.33 NIXL
        "KV Transfer metrics: Num successful transfers=10, Avg xfer time (ms)=12.5, P90 xfer time "
        "(ms)=30.0, Avg post time (ms)=2.0, P90 post time (ms)=3.0, Avg MB per transfer=128.0, "
        "Throughput (MB/s)=10240.0, Avg number of descriptors=64.0, Num failed transfers=1, Num KV "
        "expired reqs=2, Num notifs after expiry=5",
        # 0.33 Mooncake
        "KV Transfer metrics: Num successful transfers=20, Avg xfer time (ms)=50.0, P90 xfer time "
        "(ms)=120.0, Avg MB per transfer=256.0, Throughput (MB/s)=5120.0, Avg number of "
        "descriptors=80.0, Num failed transfers=1, Num failed recvs=2, Num KV expired reqs=3",
    ]
    frame = parse_kv_transfer(lines)
    assert frame["transfers"].tolist() == [3, 1, 10, 20]
    assert frame["avg_xfer_s"].iloc[1] == pytest.approx(0.009862)
    assert frame["p90_xfer_s"].iloc[3] == pytest.approx(0.120)
    assert frame["avg_post_s"].iloc[1] == pytest.approx(0.005693)
    assert frame["avg_bytes"].iloc[1] == pytest.approx(70.0 * MIB)  # MB is MiB
    assert frame["throughput_bytes_per_s"].iloc[1] == pytest.approx(7097.952 * MIB)
    np.testing.assert_allclose(frame["failures"], [np.nan, np.nan, 1, 3])
    np.testing.assert_allclose(frame["expired"], [np.nan, np.nan, 2, 3])
    assert frame["notifs_after_expiry"].iloc[2] == 5
    assert frame["unknown_keys"].tolist() == [0, 0, 0, 0]


def test_kv_transfer_renamed_and_unknown_keys_and_draft():
    frame = parse_kv_transfer([
        "KV Transfer metrics: Num successful transfers=6, Avg per-transfer throughput (MB/s)=128.0, "
        "Num handshake retries=3",
        "KV Transfer metrics: KVTransferAggregatedStats(num_successful_transfers=6, avg=1.0)",
        "KV Transfer metrics: Num successful transfers=x",
        "KV Transfer metrics: Something else=1",
    ])
    assert frame["row"].tolist() == [0, 2]  # the draft and the all-unknown line are not understood
    assert frame["throughput_bytes_per_s"].iloc[0] == 128.0 * MIB
    assert frame["unknown_keys"].tolist() == [1, 0]
    assert frame["error"].isna().tolist() == [True, False]
    assert frame["error"].iloc[1] == "Num successful transfers 'x' is not a number"


# --- NIXL events -------------------------------------------------------------------------------


def test_nixl_events_of_both_generations():
    frame = parse_events([
        "WARNING 10-27 11:21:45 [nixl_connector.py:1234] Releasing expired KV blocks for request "
        "cmpl-abc-0 which were retrieved by 0 decode worker(s) within 120 seconds.",
        "Releasing expired KV blocks for request cmpl-p-1 which were retrieved by 2 remote "
        "worker(s) before lease expired.",
        "Potentially invalid KV blocks for unrecognized request cmpl-p-2 were retrieved by a decode "
        "worker. They may have expired.",
        "NIXL transfer failure: NIXL_ERR_BACKEND | Context: {'request_id': 'cmpl-x', 'op': 'read'}",
        "Declining expired remote read for cmpl-p-3 from engine decode-7.",
        "Skipping KV post-processing for failed request cmpl-x",
        "Local NIXL metadata for remote engine prefill-1 was invalidated; re-handshaking after "
        "reads drain.",
        "Got invalid KVTransferParams: {'remote_host': None}. This request will not utilize "
        "KVTransfer",
        "NIXL transfer failure:",
    ])
    assert frame["event"].tolist() == [
        S.EV_KV_EXPIRED, S.EV_KV_EXPIRED, S.EV_NIXL_WARNING, S.EV_KV_TRANSFER_FAILED,
        S.EV_NIXL_WARNING, S.EV_NIXL_WARNING, S.EV_NIXL_WARNING, S.EV_NIXL_WARNING,
        S.EV_KV_TRANSFER_FAILED]
    assert frame["request_id"].tolist()[:6] == ["cmpl-abc-0", "cmpl-p-1", "cmpl-p-2", "cmpl-x",
                                                "cmpl-p-3", "cmpl-x"]
    assert frame["detail"].iloc[0] == ("request cmpl-abc-0: KV blocks released after the lease "
                                       "expired (read by 0 remote worker(s) within 120 s) "
                                       "[request=cmpl-abc-0]")
    assert frame["detail"].iloc[3].startswith("request cmpl-x: NIXL transfer failure: "
                                              "NIXL_ERR_BACKEND")
    assert "prefill-1" in frame["detail"].iloc[6]


# --- assembled from files ----------------------------------------------------------------------


def test_two_engines_combine_per_interval():
    partial = read_engine_log(LOGS / "vllm_0.33_decode.log", ReadContext(year=2025))
    t10, t20, t21 = (utc("2025-07-01T12:00:10"), utc("2025-07-01T12:00:20"),
                     utc("2025-07-01T12:00:21"))
    assert at(partial, S.REQUESTS_RUNNING) == {t10: 88, t20: 90, t21: 92}
    assert at(partial, S.REQUESTS_WAITING) == {t10: 7, t20: 6, t21: 5}
    assert at(partial, S.REQUESTS_DEFERRED) == {t10: 3, t20: 0, t21: 0}
    assert at(partial, S.KV_FETCH_WAITING) == {t10: 3, t20: 2, t21: 2}
    assert at(partial, S.KV_USAGE_RATIO) == pytest.approx({t10: 0.556, t20: 0.565, t21: 0.575})
    assert at(partial, S.PREFIX_HIT_RATIO) == {t10: 0.0, t20: 0.0}  # engine 001 never reports it
    assert at(partial, S.EXTERNAL_HIT_RATIO) == pytest.approx({t10: 0.9855, t20: 0.985,
                                                               t21: 0.98})
    assert at(partial, S.GENERATION_THROUGHPUT_TPS) == pytest.approx({t10: 1512.4, t20: 1550.0,
                                                                      t21: 1570.0})
    assert at(partial, S.PREEMPTIONS_TOTAL) == {t10: 1, t20: 3, t21: 3}
    kinds = partial.metrics.drop_duplicates("signal").set_index("signal")["kind"]
    assert kinds[S.PREEMPTIONS_TOTAL] == S.COUNTER and kinds[S.REQUESTS_RUNNING] == S.GAUGE
    preempt = partial.events[partial.events["event"] == S.EV_PREEMPTION]
    assert preempt["detail"].tolist() == ["1 preemption(s) in the stats interval (Engine 001)",
                                          "2 preemption(s) in the stats interval (Engine 000)"]


def test_kv_transfer_counters_and_gauges_from_file():
    partial = read_engine_log(LOGS / "vllm_0.33_decode.log", ReadContext(year=2025))
    t10, t20 = utc("2025-07-01T12:00:10"), utc("2025-07-01T12:00:20")
    assert at(partial, S.KV_TRANSFERS_TOTAL) == {t10: 10, t20: 16}
    assert at(partial, S.KV_TRANSFER_FAILURES_TOTAL) == {t10: 1, t20: 3}
    assert at(partial, S.KV_EXPIRED_TOTAL) == {t10: 0, t20: 1}
    assert at(partial, S.KV_TRANSFER_AVG_S_LOG) == pytest.approx({t10: 0.0125, t20: 0.010})
    assert at(partial, S.KV_TRANSFER_P90_S_LOG) == pytest.approx({t10: 0.030, t20: 0.020})
    assert at(partial, S.KV_TRANSFER_AVG_BYTES_LOG) == {t10: 128 * MIB, t20: 128 * MIB}
    assert at(partial, S.KV_TRANSFER_THROUGHPUT_LOG) == {t10: 10240 * MIB, t20: 12800 * MIB}
    assert any("under-reports" in n and "48224" in n for n in partial.source.notes)
    assert any("keys pdprobe does not know" in n for n in partial.source.notes)
    # the draft KVTransferAggregatedStats line is counted as not understood
    assert partial.source.skipped == 1
    assert any("(line 12)" in w and "not understood" in w for w in partial.warnings)


def test_nixl_events_from_file_with_crlf_continuation():
    partial = read_engine_log(LOGS / "vllm_0.33_decode.log", ReadContext(year=2025))
    ev = partial.events[partial.events["event"] != S.EV_PREEMPTION]
    assert ev["event"].tolist() == [S.EV_KV_TRANSFER_FAILED, S.EV_NIXL_WARNING,
                                    S.EV_NIXL_WARNING, S.EV_NIXL_WARNING]
    assert ev["source"].tolist() == ["vllm_0.33_decode.log:5", "vllm_0.33_decode.log:7",
                                     "vllm_0.33_decode.log:8", "vllm_0.33_decode.log:9"]
    assert ev["ts"].iloc[0] == utc("2025-07-01T12:00:15")
    assert "cmpl-xyz-0" in ev["detail"].iloc[0]


def test_kv_fetch_means_decode():
    partial = read_engine_log(LOGS / "vllm_0.33_decode.log", ReadContext(year=2025))
    hints = {(h.role, h.strength) for h in partial.role_hints}
    assert ("decode", ROLE_FROM_ENGINE_FIELDS) in hints
    assert ROLE_FROM_ENGINE_FIELDS == 25


def test_prefill_evidence_and_mooncake_connector_keys():
    partial = read_engine_log(LOGS / "vllm_0.33_prefill_mooncake.log", ReadContext(year=2025))
    evidence = [h for h in partial.role_hints if h.strength == ROLE_FROM_EVIDENCE]
    assert [h.role for h in evidence] == ["prefill"]
    t10, t30 = utc("2025-08-02T09:00:10"), utc("2025-08-02T09:00:30")
    assert at(partial, S.KV_TRANSFERS_TOTAL) == {t10: 20, t30: 50}
    assert at(partial, S.KV_TRANSFER_FAILURES_TOTAL) == {t10: 3, t30: 3}  # failed + failed recvs
    assert at(partial, S.KV_EXPIRED_TOTAL) == {t10: 3, t30: 3}
    assert at(partial, S.KV_USAGE_RATIO)[t10] == pytest.approx(0.20)  # NPU KV cache usage
    assert partial.events["event"].tolist() == [S.EV_KV_EXPIRED, S.EV_NIXL_WARNING,
                                                S.EV_NIXL_WARNING]


def test_colocated_instance_gets_no_prefill_evidence():
    partial = read_engine_log(LOGS / "vllm_0.8.5.log", ReadContext(year=2025))
    assert partial.role_hints == ()


def test_aggregated_lines_replace_per_engine_lines():
    partial = read_engine_log(LOGS / "vllm_aggregated.log", ReadContext(year=2025))
    t10, t20 = utc("2025-05-05T10:00:10"), utc("2025-05-05T10:00:20")
    assert at(partial, S.REQUESTS_RUNNING) == {t10: 90, t20: 92}
    assert at(partial, S.PREEMPTIONS_TOTAL) == {t10: 0, t20: 4}
    assert any("per-engine stats lines left out" in n for n in partial.source.notes)


def test_v0_file_with_prefix_cache_line():
    partial = read_engine_log(LOGS / "vllm_0.6.6_v0.log", ReadContext(year=2025))
    t35, t45 = utc("2025-04-01T17:26:35"), utc("2025-04-01T17:26:45")
    assert at(partial, S.REQUESTS_WAITING) == {t35: 0, t45: 3}
    assert at(partial, S.PREFIX_HIT_RATIO) == {t45: 0.375}
    assert at(partial, S.KV_USAGE_RATIO) == pytest.approx({t35: 0.001, t45: 0.456})
    # V0 prints no Preemptions/Deferred/KV fetch: those stay missing, never a silent 0
    assert not {S.PREEMPTIONS_TOTAL, S.REQUESTS_DEFERRED, S.KV_FETCH_WAITING} & set(
        partial.metrics["signal"])


def test_preemptions_missing_until_the_field_is_seen():
    partial = read_engine_log(LOGS / "vllm_0.14.0_decode.log", ReadContext(year=2025))
    values = pd.Series(at(partial, S.PREEMPTIONS_TOTAL))
    assert values.tolist() == [2, 2, 5, 5]
    partial = read_engine_log(LOGS / "vllm_0.8.0_early_v1.log", ReadContext(year=2025))
    assert S.PREEMPTIONS_TOTAL not in set(partial.metrics["signal"])


def _stats_log(tmp_path, prompt_tps: float, gen_tps: float, lines: int):  # type: ignore[no-untyped-def]
    text = "".join(
        f"(APIServer pid=7) INFO 07-01 12:00:{10 * (i + 1):02d} [loggers.py:259] Engine 000: "
        f"Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: "
        f"{gen_tps:.1f} tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.0%, "
        f"Prefix cache hit rate: 0.0%, External prefix cache hit rate: 100.0%\n"
        for i in range(lines))
    path = tmp_path / "10.0.2.11_8000.log"
    path.write_text(text)
    return read_engine_log(path, ReadContext(year=2025))


def test_generation_without_prompt_work_means_decode(tmp_path):  # type: ignore[no-untyped-def]
    """A decode instance that never prints 'KV fetch' is still told apart by its throughput."""
    evidence = [h for h in _stats_log(tmp_path, 0.0, 350.0, 5).role_hints
                if h.strength == ROLE_FROM_EVIDENCE]
    assert [h.role for h in evidence] == ["decode"]
    assert "prompt throughput is 0.00% of generation" in evidence[0].how


@pytest.mark.parametrize(("prompt_tps", "gen_tps", "lines"), [
    (2400.0, 350.0, 5),  # colocated: prompts computed here
    (0.0, 350.0, 4),  # too few active lines to judge
])
def test_no_decode_evidence_when_prompts_are_computed_or_the_log_is_short(
        tmp_path, prompt_tps: float, gen_tps: float, lines: int) -> None:  # type: ignore[no-untyped-def]
    partial = _stats_log(tmp_path, prompt_tps, gen_tps, lines)
    assert not [h for h in partial.role_hints if h.role == "decode"]
