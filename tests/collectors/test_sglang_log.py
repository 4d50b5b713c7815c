"""SGLang log lines: Prefill/Decode batch of every version and prefix, failures, assembly."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from pdprobe import signals as S
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.engine_log import read_engine_log
from pdprobe.collectors.log_toolkit import ROLE_FROM_ENGINE_FIELDS
from pdprobe.collectors.sglang_log import (
    leading_ranks,
    parse_batch_lines,
    parse_events,
)
from pdprobe.dataset import ROLE_FROM_EVIDENCE

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def at(partial, signal: str) -> dict[float, float]:
    m = partial.metrics
    rows = m[m["signal"] == signal]
    return dict(zip(rows["ts"].tolist(), rows["value"].tolist(), strict=True))


def one(line: str):
    frame = parse_batch_lines([line])
    assert len(frame) == 1, line
    return frame.iloc[0]


# --- Prefill batch, every version --------------------------------------------------------------


def test_prefill_0_4_6_pd_with_trailing_space():
    row = one("[2025-05-18 08:57:28 DP15 TP15] Prefill batch. #new-seq: 2, #new-token: 4096, "
              "#cached-token: 512, token usage: 0.10, #running-req: 0, #unbootstrapped-req: 1, "
              "#queue-req: 3, #transferring-req: 2 ")
    assert (row["kind"], row["dp"], row["tp"]) == ("prefill", 15, 15)
    assert (row["prompt_tokens"], row["cached_tokens"], row["kv_usage"]) == (4096, 512, 0.10)
    assert (row["running"], row["waiting"]) == (0, 3)
    assert (row["bootstrap_queue"], row["inflight_queue"]) == (1, 2)
    assert np.isnan(row["prompt_tps"])


def test_prefill_0_4_6_non_pd():
    row = one("[2025-05-18 08:57:28] Prefill batch. #new-seq: 1, #new-token: 9, #cached-token: 0, "
              "token usage: 0.01, #running-req: 2, #queue-req: 4")
    assert (row["waiting"], row["running"]) == (4, 2)
    assert np.isnan(row["bootstrap_queue"]) and np.isnan(row["dp"])


def test_prefill_0_4_9_with_token_and_timestamp_fields():
    row = one("[2025-07-01 10:00:00] Prefill batch. #new-seq: 1, #new-token: 100, #cached-token: 28, "
              "#token: 5000, token usage: 0.05, #running-req: 3, #queue-req: 0, timestamp: "
              "2025-07-01T10:00:00.123456")
    assert (row["prompt_tokens"], row["cached_tokens"], row["kv_used_tokens"]) == (100, 28, 5000)
    assert np.isnan(row["decode_context_tokens"])
    pd_row = one("[2025-07-02 11:00:00 TP0] Prefill batch. #new-seq: 2, #new-token: 3000, "
                 "#cached-token: 100, #token: 9000, token usage: 0.09, #unbootstrapped-req: 1, "
                 "#queue-req: 2, #transferring-req: 3, input throughput (token/s): 1234.50, "
                 "timestamp: 2025-07-02T11:00:00.000100")
    assert (pd_row["bootstrap_queue"], pd_row["inflight_queue"], pd_row["prompt_tps"]) == (
        1, 3, 1234.5)


def test_prefill_0_5_3_prealloc_means_bootstrap_and_trailing_comma():
    row = one("[2025-10-01 12:00:00 TP0] Prefill batch. #new-seq: 3, #new-token: 6000, "
              "#cached-token: 1000, token usage: 0.30, #running-req: 0, #queue-req: 5, "
              "#prealloc-req: 2, #inflight-req: 1, ")
    assert (row["bootstrap_queue"], row["inflight_queue"]) == (2, 1)
    assert np.isnan(row["prealloc_queue"])


def test_prefill_0_5_10_with_iteration_and_comma_separator():
    row = one("[2026-01-10 08:00:00 DP0 TP0] Prefill batch [1201], #new-seq: 1, #new-token: 10, "
              "#cached-token: 0, token usage: 0.55, #running-req: 64, #queue-req: 0, #prealloc-req: "
              "1, #inflight-req: 0, cuda graph: False, input throughput (token/s): 25.00")
    assert (row["iter"], row["prompt_tokens"], row["prompt_tps"], row["bootstrap_queue"]) == (
        1201, 10, 25.0, 1)


def test_prefill_0_5_23_pd_example_and_real_non_pd_line():
    row = one("[2026-06-01 10:00:00 DP0 TP0] Prefill batch, #new-seq: 2, #new-token: 8192, "
              "#cached-token: 1024, token usage: 0.05, #running-req: 2, #queue-req: 3, "
              "#pending-token: 12000, #bootstrap-req: 1, #inflight-req: 4, #optimistic-req: 0, "
              "cuda graph: False, input throughput (token/s): 12345.67")
    assert (row["bootstrap_queue"], row["inflight_queue"], row["prompt_tps"]) == (1, 4, 12345.67)
    assert row["#pending-token"] == 12000 and row["#optimistic-req"] == 0
    real = one("[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, "
               "token usage: 0.08, #running-req: 31, #queue-req: 0, cuda graph: True, input "
               "throughput (token/s): 559.53")
    assert (real["prompt_tokens"], real["running"], real["prompt_tps"]) == (158, 31, 559.53)


def test_prefill_hybrid_usage_and_extras():
    row = one("[2026-06-01 10:00:01.000 DP0 TP0] Prefill batch [77], #new-seq: 1, #new-token: "
              "2048, #cached-token: 2048, full token usage: 0.07, swa token usage: 0.02, "
              "mamba usage: 0.50, #running-req: 1, #queue-req: 0, #pending-token: 0, "
              "#replay-token: 16, waiting-image-req: 2, cuda graph: False, input throughput "
              "(token/s): 4096.00, est. prefill TFLOPS/s (per GPU): 312.50")
    assert row["kv_usage"] == 0.07 and row["mamba usage"] == 0.5
    assert row["#replay-token"] == 16 and row["waiting-image-req"] == 2


# --- Decode batch, every version ---------------------------------------------------------------


def test_decode_0_4_6_with_accept_len_and_pd_usage():
    row = one("[2025-05-18 09:00:00 TP0] Decode batch. #running-req: 32, #token: 65536, token "
              "usage: 0.25, accept len: 1.85, pre-allocated usage: 0.05, cuda graph: True, gen "
              "throughput (token/s): 1500.25, #queue-req: 2")
    assert (row["kind"], row["running"], row["decode_context_tokens"]) == ("decode", 32, 65536)
    assert (row["kv_usage"], row["gen_tps"], row["waiting"]) == (0.25, 1500.25, 2)
    assert row["accept len"] == 1.85 and row["pre-allocated usage"] == 0.05
    assert np.isnan(row["kv_used_tokens"])


def test_decode_0_4_9_pd_retracted_and_timestamp():
    row = one("[2025-07-02 11:00:05 TP0] Decode batch. #running-req: 20, #token: 40000, token "
              "usage: 0.40, pre-allocated usage: 0.10, #retracted-req: 1, cuda graph: True, gen "
              "throughput (token/s): 900.00, #queue-req: 2, timestamp: 2025-07-02T11:00:05.000000")
    assert (row["retracted"], row["waiting"], row["gen_tps"]) == (1, 2, 900.0)


def test_decode_0_5_3_pd_trailing_comma():
    row = one("[2025-10-01 12:00:01 TP0] Decode batch. #running-req: 16, #token: 30000, token "
              "usage: 0.35, pre-allocated usage: 0.04, #prealloc-req: 2, #transfer-req: 1, "
              "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 800.00, #queue-req: "
              "0, ")
    assert (row["prealloc_queue"], row["transfer_queue"], row["retracted"]) == (2, 1, 0)
    assert np.isnan(row["bootstrap_queue"])


def test_decode_0_5_10_spec_decoding_and_iteration():
    row = one("[2026-01-10 08:00:00 DP0 TP0] Decode batch [1200], #running-req: 64, #token: "
              "100000, token usage: 0.55, accept len: 2.10, accept rate: 0.70, pre-allocated "
              "usage: 0.08, #prealloc-req: 4, #transfer-req: 3, #retracted-req: 1, cuda graph: "
              "True, gen throughput (token/s): 3000.00, #queue-req: 0")
    assert (row["iter"], row["accept rate"], row["prealloc_queue"]) == (1200, 0.7, 4)


def test_decode_0_5_23_example_and_hybrid_variants():
    row = one("[2026-06-01 10:00:00 DP0 TP0] Decode batch, #running-req: 64, #token: 120000, token "
              "usage: 0.40, pre-allocated usage: 0.05, #prealloc-req: 3, #transfer-req: 2, "
              "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 2100.50, #queue-req: 0")
    assert (row["decode_context_tokens"], row["prealloc_queue"], row["gen_tps"]) == (120000, 3,
                                                                                      2100.5)
    swa = one("[2026-06-01 10:00:00] Decode batch, #running-req: 8, #full token: 9000, full token "
              "usage: 0.30, #swa token: 1000, swa token usage: 0.10, accept len: 3.00, accept "
              "rate: 0.75, cap len: 4.00, block accept len: 2.50, #host-receive-req: 1, npu graph: "
              "True, gen throughput (token/s): 100.00, #queue-req: 0")
    assert (swa["decode_context_tokens"], swa["kv_usage"]) == (9000, 0.30)
    mamba = one("[2026-06-01 10:00:00] Decode batch, #running-req: 8, #full token: 9000, full token "
                "usage: 0.30, mamba num: 8, mamba usage: 0.25, cuda graph: True, gen throughput "
                "(token/s): 100.00, #queue-req: 0")
    assert (mamba["kv_usage"], mamba["mamba usage"]) == (0.30, 0.25)
    hisparse = one("[2026-06-01 10:00:00] Decode batch, #running-req: 8, #gpu token: 700, gpu token "
                   "usage: 0.20, #cpu token: 9000, cpu token usage: 0.60, cuda graph: True, gen "
                   "throughput (token/s): 100.00, #queue-req: 0, est. decode TFLOPS/s (per GPU): "
                   "1.00, est. read BW (GB/s per GPU): 2.00, est. write BW (GB/s per GPU): 3.00")
    assert (hisparse["decode_context_tokens"], hisparse["kv_usage"]) == (700, 0.20)


# --- prefixes and ranks ------------------------------------------------------------------------


def test_ranks_and_prefixes():
    frame = parse_batch_lines([
        "2025-10-29 02:27:35 INFO 8900 [ DP15 TP15 EP15 scheduler_metrics_mixin.py:222] Decode "
        "batch. #running-req: 48, #token: 571264, token usage: 0.76, accept len: 1.91, "
        "pre-allocated usage: 0.36, #retracted-req: 0, cuda graph: True, gen throughput "
        "(token/s): 740.64, #queue-req: 13, ",
        "2025-12-04 20:35:53 INFO 151972 [scheduler_metrics_mixin.py:287] Decode batch. "
        "#running-req: 1, #token: 2, token usage: 0.01, cuda graph: True, gen throughput "
        "(token/s): 1.00, #queue-req: 0",
        "(SGLangEngine pid=1234, ip=10.0.0.3) [2025-10-29 02:27:45 PP1 TP0] Decode batch, "
        "#running-req: 5, #queue-req: 1",
        "[2025-10-29 02:27:45 MOE_DP3 TP2] Decode batch, #running-req: 5, #queue-req: 1",
    ])
    assert frame["dp"].tolist()[:1] == [15] and np.isnan(frame["dp"].iloc[1])
    assert np.isnan(frame["dp"].iloc[3])  # MOE_DP is not the attention DP rank
    assert frame["tp"].fillna(-1).tolist() == [15, -1, 0, 2]
    assert frame["pp"].fillna(-1).tolist() == [-1, -1, 1, -1]
    assert frame["ray"].tolist() == ["", "", "SGLangEngine pid=1234, ip=10.0.0.3", ""]
    assert frame["running"].tolist() == [48, 1, 5, 5]
    assert frame["gen_tps"].iloc[0] == 740.64 and frame["waiting"].iloc[0] == 13


def test_lines_not_understood_or_malformed():
    frame = parse_batch_lines([
        "Prefill batch size is configured to 8",
        "[2025-01-01 00:00:00] Decode batch, nothing: here",
        "[2025-01-01 00:00:00] Decode batch, #running-req: lots, #queue-req: 1",
        "[2025-01-01 00:00:00] Decode batch. #running-req: 5, #queue-req: 1",
    ])
    assert frame["row"].tolist() == [2, 3]
    assert frame["error"].iloc[0] == "#running-req 'lots' is not a number"
    assert frame["error"].isna().tolist() == [False, True]


def test_leading_ranks_keep_one_tp_rank_per_dp_group():
    frame = parse_batch_lines([
        "[2025-01-01 00:00:00 TP0] Decode batch, #running-req: 5, #queue-req: 1",
        "[2025-01-01 00:00:00 TP1] Decode batch, #running-req: 5, #queue-req: 1",
        "[2025-01-01 00:00:00 DP1 TP1] Decode batch, #running-req: 6, #queue-req: 1",
        "[2025-01-01 00:00:00 DP1 TP3] Decode batch, #running-req: 6, #queue-req: 1",
        "[2025-01-01 00:00:00 DP2 TP2] Decode batch, #running-req: 7, #queue-req: 1",
    ])
    assert leading_ranks(frame).tolist() == [True, False, True, False, True]


# --- failure lines -----------------------------------------------------------------------------


def test_failure_lines():
    frame = parse_events((LOGS / "sglang_failures.log").read_text().splitlines())
    assert frame["event"].tolist() == [
        S.EV_KV_TRANSFER_FAILED, S.EV_KV_TRANSFER_FAILED, S.EV_KV_TRANSFER_FAILED,
        S.EV_KV_BOOTSTRAP_FAILED, S.EV_KV_TRANSFER_FAILED, S.EV_SESSION_FAILED,
        S.EV_SESSION_RECOVERED, S.EV_SESSION_FAILED]
    assert frame["request_id"].tolist()[:5] == ["3ce84ffb82764f45b028dd8e6c4beed1"] * 2 + [
        "a1b2", "c3d4", "e5f6"]
    assert frame["detail"].iloc[0] == (
        "request 3ce84ffb82764f45b028dd8e6c4beed1: decode transfer failed (rank 1, bootstrap_room "
        "1655955501905217457): Failed due to an unknown reason from another rank "
        "[request=3ce84ffb82764f45b028dd8e6c4beed1]")
    assert frame["detail"].iloc[4].endswith("KV transfer failed (HiCache local restore failed "
                                            "on this rank) [request=e5f6]")
    assert frame["detail"].iloc[5] == "Mooncake session 10.0.0.9:15001 failed [peer=10.0.0.9:15001]"
    assert "10.0.0.9:8998" in frame["detail"].iloc[7]


def test_failure_line_without_rank_or_exception():
    frame = parse_events(["Prefill bootstrap failed for request req.rid='r9'"])
    assert frame["event"].tolist() == [S.EV_KV_BOOTSTRAP_FAILED]
    assert frame["detail"].iloc[0] == "request r9: prefill bootstrap failed [request=r9]"


# --- assembled from files ----------------------------------------------------------------------


def test_dp_ranks_combine_per_time_and_counters_accumulate():
    partial = read_engine_log(LOGS / "sglang_0.4.6_pd_prefill.log", ReadContext())
    t28, t29, t38 = (utc("2025-05-18T08:57:28"), utc("2025-05-18T08:57:29"),
                     utc("2025-05-18T08:57:38"))
    assert at(partial, S.PROMPT_TOKENS_TOTAL) == {t28: 4096, t29: 6144, t38: 7144}
    assert at(partial, S.CACHED_TOKENS_TOTAL) == {t28: 512, t29: 512, t38: 536}
    assert at(partial, S.PREFILL_BOOTSTRAP_QUEUE) == {t28: 1, t29: 1, t38: 2}
    assert at(partial, S.PREFILL_INFLIGHT_QUEUE) == {t28: 2, t29: 6, t38: 5}
    assert at(partial, S.REQUESTS_WAITING) == {t28: 3, t29: 4, t38: 1}
    assert at(partial, S.KV_USAGE_RATIO) == pytest.approx({t28: 0.10, t29: 0.15, t38: 0.16})
    # the year-less Mooncake glog line takes its year from the dated SGLang lines
    assert at(partial, S.KV_TRANSFER_THROUGHPUT_LOG) == pytest.approx(
        {utc("2025-05-18T08:57:30.157097"): 4.87 * 2**20})
    assert partial.engines == {"sglang_0.4.6_pd_prefill": "sglang"}
    hints = {(h.role, h.strength) for h in partial.role_hints}
    assert ("prefill", ROLE_FROM_ENGINE_FIELDS) in hints


def test_ms_prefix_and_dp_attention():
    partial = read_engine_log(LOGS / "sglang_0.5.23_dp.log", ReadContext())
    t0, t1, t2 = (utc("2026-06-01T10:00:00.100"), utc("2026-06-01T10:00:00.400"),
                  utc("2026-06-01T10:00:01"))
    assert list(at(partial, S.PROMPT_TOKENS_TOTAL).values()) == [8192, 12288, 14336]
    assert list(at(partial, S.PROMPT_TOKENS_TOTAL)) == pytest.approx([t0, t1, t2])
    assert list(at(partial, S.PROMPT_THROUGHPUT_TPS).values()) == pytest.approx(
        [12345.67, 17345.67, 9096.0])
    assert list(at(partial, S.KV_USAGE_RATIO).values()) == pytest.approx([0.05, 0.10, 0.11])


def test_tp_duplicates_do_not_double_count():
    partial = read_engine_log(LOGS / "sglang_tp_ranks.log", ReadContext())
    assert list(at(partial, S.PROMPT_TOKENS_TOTAL).values()) == [700, 1000]
    assert list(at(partial, S.REQUESTS_WAITING).values()) == [1, 0]
    assert any("2 batch line(s) from TP/PP ranks" in n for n in partial.source.notes)


def test_timestamp_field_used_when_the_prefix_has_none():
    partial = read_engine_log(LOGS / "sglang_0.4.9.log", ReadContext())
    running = at(partial, S.REQUESTS_RUNNING)
    assert running == {utc("2025-07-01T10:00:00"): 3, utc("2025-07-01T10:00:01"): 4,
                       utc("2025-07-01T10:00:02.25"): 5}


def test_role_hints_from_pd_fields_and_evidence():
    prefill = read_engine_log(LOGS / "sglang_0.5.3_pd_prefill.log", ReadContext())
    assert {(h.role, h.strength) for h in prefill.role_hints} == {
        ("prefill", 20), ("prefill", ROLE_FROM_ENGINE_FIELDS), ("prefill", ROLE_FROM_EVIDENCE)}
    decode = read_engine_log(LOGS / "sglang_0.4.6_pd_decode.log", ReadContext())
    assert {(h.role, h.strength) for h in decode.role_hints} == {
        ("decode", 20), ("decode", ROLE_FROM_ENGINE_FIELDS), ("decode", ROLE_FROM_EVIDENCE)}
    colocated = read_engine_log(LOGS / "sglang_0.4.9.log", ReadContext())
    assert colocated.role_hints == ()


def test_contradicting_pd_fields_give_no_role_and_a_warning(tmp_path):
    path = tmp_path / "both.log"
    path.write_text((LOGS / "sglang_0.4.9_pd.log").read_text()
                    + (LOGS / "sglang_0.4.9_pd_decode.log").read_text())
    partial = read_engine_log(path, ReadContext())
    assert partial.role_hints == ()
    assert any("both prefill and decode behaviour" in w for w in partial.warnings)


def test_failures_are_deduplicated_across_ranks():
    partial = read_engine_log(LOGS / "sglang_failures.log", ReadContext())
    ev = partial.events
    assert ev["event"].tolist() == [S.EV_KV_TRANSFER_FAILED, S.EV_KV_TRANSFER_FAILED,
                                    S.EV_KV_BOOTSTRAP_FAILED, S.EV_KV_TRANSFER_FAILED,
                                    S.EV_SESSION_FAILED, S.EV_SESSION_RECOVERED,
                                    S.EV_SESSION_FAILED]
    # rank 1 only relayed rank 0's failure: the original reason is kept
    assert ev["detail"].iloc[0].endswith("Failed to get kvcache from prefill instance, it might "
                                         "be dead [request=3ce84ffb82764f45b028dd8e6c4beed1]")
    assert ev["source"].iloc[0] == "sglang_failures.log:2"
    assert partial.source.rows == 8
