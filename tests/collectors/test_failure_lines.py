"""Logs that hold only failure lines are read into events (issue 13, item 3's evidence).

Fixtures in tests/fixtures/logs/failures/ are real lines from upstream threads, or built from the
upstream format strings where no thread quotes them:

- sglang_decode_failures.log: sgl-project/sglang issue 12688 ("Aborted by AbortReq."), the
  heartbeat failure of python/sglang/srt/disaggregation/common/conn.py (``_handle_node_failure``:
  "Losing connection with prefill instance (bootstrap_addr: ...), affected N requests") and
  mooncake/conn.py's "Failed to get kvcache from prefill instance, it might be dead".
- sglang_prefill_failures.log: sgl-project/sglang issue 37022's prefill lines ("Decode instance
  could be dead, remote mooncake session <ip:port> is not alive"), mooncake/conn.py's
  "Session %s failed." and "Failed to send kv chunk of <room> to <ip:port>".
- mooncake_rdma_failures.log: kvcache-ai/Mooncake mooncake-transfer-engine/src/transport/
  rdma_transport/worker_pool.cpp before PR 2155 ("Too many errors found in local RNIC %s, mark it
  inactive", "Cannot make connection for endpoint: %s, mark it inactive") and after it ("Rail
  paused: peer=%s error_count=%d pause_ms=%d", worker_pool.h "All rails failed for context %s for
  %d consecutive attempts, marking inactive", "Cannot redispatch slice because all peer rails are
  paused ...", "Context %s is now inactive due to fatal event: %d").
- mooncake_store_failures.log: kvcache-ai/Mooncake issue 919 (transfer_task.cpp "Failed to
  complete transfers after 60 seconds for batch ...", client.cpp "Transfer failed for key: ...
  with error: TRANSFER_FAIL"), client.cpp (2025) "Transfer failed for key %s: %s (%s)",
  client_service.cpp "Transfer failed for key: %s with error: %d" and "Transfer failed, error
  code is %s", vllm-project/vllm-ascend issue 7846 (transfer_engine_py.cpp "Sync batch data
  transfer timeout after %dns").
- vllm_decode_failures.log: vllm/v1/core/sched/scheduler.py ("Recovered from KV load failure: %d
  request(s) rescheduled (%d tokens affected).", "Failing %d request(s) due to KV load failure
  (failure_policy=fail, %d tokens affected). Request IDs: %s"), vllm-project/vllm-ascend issue
  7846 (mooncake_connector.py "Mooncake transfer failed for request %s", once per TP worker, and
  "Failed to transfer KV cache for request %s: Mooncake transfer failed, ret: -1"),
  vllm/v1/engine/async_llm.py "Aborted request(s) %s.".
- vllm_prefill_expired.log: vllm-project/vllm PR 21753 / llm-d/llm-d issue 187 (nixl_connector.py
  "... retrieved by 0 decode worker(s) within 120 seconds.") and aws-samples/aws-do-eks PR 84
  (nixl/worker.py "... retrieved by 0 remote worker(s) before lease expired.", "Potentially
  invalid KV blocks for unrecognized request ...").
- vllm_v0_redo.log: the V0 connectors' "[rank%d]: Failed to receive all KVs and hidden states,
  redo model forwarding." (vllm/distributed/kv_transfer/kv_connector/simple_connector.py).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.collectors import io as pd_io
from pdprobe.collectors import log_markers, mooncake_log, vllm_log
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.engine_log import read_engine_log

FAILURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "failures"
ALL_FILES = sorted(p.name for p in FAILURES.glob("*.log"))
# Files io.sniff recognises by the markers it has held since before issue 13.
SNIFFED_BEFORE = ("mooncake_rdma_failures.log", "sglang_decode_failures.log",
                  "sglang_prefill_failures.log", "vllm_prefill_expired.log")


def read(name: str):
    return read_engine_log(FAILURES / name, ReadContext(year=2025))


def field(events: pd.DataFrame, key: str) -> pd.Series:
    return events["detail"].str.extract(S.detail_field_pattern(key))[0]


@pytest.mark.parametrize("name", ALL_FILES)
def test_a_log_of_only_failure_lines_is_read(name: str):
    partial = read(name)
    assert partial.events is not None and len(partial.events)
    assert partial.source.rows > 0
    assert not any("no vLLM, SGLang or Mooncake" in w for w in partial.warnings)
    assert partial.source.skipped == 0, partial.warnings
    # the instance is the file's (no prefix names another), every event has a time and a line
    assert set(partial.events["instance"]) == {Path(name).stem}
    assert partial.events["ts"].notna().all()
    assert partial.events["source"].str.startswith(f"{name}:").all()


def test_sglang_decode_failures_name_the_prefill_peer():
    ev = read("sglang_decode_failures.log").events
    assert ev["event"].tolist() == [S.EV_KV_TRANSFER_FAILED, S.EV_KV_PEER_LOST,
                                    S.EV_KV_TRANSFER_FAILED, S.EV_KV_TRANSFER_FAILED]
    # TP0 and TP2 log the same aborted request once each: one event
    assert field(ev, S.DETAIL_REQUEST).tolist()[0] == "78fde411d57a4d7791b63963eac74968"
    assert "Aborted by AbortReq" in ev["detail"].iloc[0]
    lost = ev[ev["event"] == S.EV_KV_PEER_LOST]
    assert field(lost, S.DETAIL_PEER).tolist() == ["10.6.131.6:8998"]
    assert field(lost, S.DETAIL_REQUESTS).tolist() == ["3"]
    assert field(ev, S.DETAIL_PEER).iloc[2] == "10.6.131.6:8998"
    assert pd.isna(field(ev, S.DETAIL_PEER).iloc[3])  # "it might be dead" names no peer


def test_sglang_prefill_failures_name_the_decode_peer():
    ev = read("sglang_prefill_failures.log").events
    assert ev["event"].tolist() == [S.EV_KV_TRANSFER_FAILED, S.EV_SESSION_FAILED,
                                    S.EV_KV_TRANSFER_FAILED]
    assert field(ev, S.DETAIL_PEER).tolist() == ["10.99.91.49:15993", "10.99.91.49:15993",
                                                 "10.0.1.11:33137"]
    assert ev["ts"].iloc[0] == pd.Timestamp("2026-02-26 17:44:23", tz="UTC").timestamp()


def test_mooncake_rdma_failures_single_out_one_nic_and_one_peer():
    ev = read("mooncake_rdma_failures.log").events
    assert ev["event"].value_counts().to_dict() == {
        S.EV_RDMA_SLICE_FAILED: 3, S.EV_RDMA_RETRY_EXCEEDED: 2, S.EV_RDMA_NIC_INACTIVE: 3,
        S.EV_RDMA_CONNECT_FAILED: 1, S.EV_RDMA_RAIL_PAUSED: 1}
    # one local NIC and one peer NIC stand out in every line that names them
    assert set(field(ev, S.DETAIL_NIC).dropna()) == {"mlx5_2"}
    assert set(field(ev, S.DETAIL_PEER).dropna()) == {"10.0.0.7:15003@mlx5_4"}
    inactive = ev[ev["event"] == S.EV_RDMA_NIC_INACTIVE]
    assert inactive["source"].tolist() == ["mooncake_rdma_failures.log:3",
                                           "mooncake_rdma_failures.log:6",
                                           "mooncake_rdma_failures.log:8"]
    # glog with the year (Lyyyymmdd) and without it read alike
    assert ev["ts"].iloc[-1] == pd.Timestamp("2026-06-10 10:01:05.000001", tz="UTC").timestamp()


def test_mooncake_store_transfer_fail_and_timeouts():
    ev = read("mooncake_store_failures.log").events
    # in time order: the year-less glog line (March, --year 2025) comes first
    assert ev["event"].tolist() == [S.EV_KV_TRANSFER_TIMEOUT, S.EV_KV_TRANSFER_TIMEOUT,
                                    S.EV_KV_TRANSFER_FAILED, S.EV_KV_TRANSFER_FAILED,
                                    S.EV_KV_TRANSFER_FAILED, S.EV_KV_TRANSFER_FAILED]
    failed = ev[ev["event"] == S.EV_KV_TRANSFER_FAILED]
    assert failed["detail"].str.contains("TRANSFER_FAIL").all()  # -800 named as such
    assert field(failed, S.DETAIL_KEY).tolist()[:3] == [
        "60000000000016915750082507519516", "60000000000016915750082507519517",
        "70000000000016915750082507519518"]
    assert "(Transfer 0 failed)" in failed["detail"].iloc[1]
    assert "33.1 s" in ev["detail"].iloc[0]


def test_vllm_decode_failures_recompute_abort_and_one_failure_per_request():
    ev = read("vllm_decode_failures.log").events
    assert ev["event"].tolist() == [
        S.EV_KV_LOAD_RECOMPUTED, S.EV_KV_TRANSFER_FAILED, S.EV_KV_TRANSFER_FAILED,
        S.EV_KV_TRANSFER_FAILED, S.EV_REQUEST_ABORTED, S.EV_REQUEST_ABORTED]
    recompute = ev.iloc[0]
    assert field(ev.iloc[[0]], S.DETAIL_REQUESTS).tolist() == ["3"]
    assert field(ev.iloc[[0]], S.DETAIL_TOKENS).tolist() == ["4096"]
    assert "recompute" in recompute["detail"]
    failed = ev[ev["event"] == S.EV_KV_TRANSFER_FAILED]
    # "Failing 2 request(s) ... Request IDs: {...}" gives one event per request; the Mooncake
    # connector's three lines (two TP workers, then the reason) about one request give one
    assert field(failed, S.DETAIL_REQUEST).tolist() == [
        "cmpl-a1-0", "cmpl-b2-0", "chatcmpl-ba310df4-f600-441c-a0b5-0cb772aaf8ed-8b8ee10a"]
    assert failed["source"].iloc[2] == "vllm_decode_failures.log:4"
    aborted = ev[ev["event"] == S.EV_REQUEST_ABORTED]
    assert field(aborted, S.DETAIL_REQUEST).tolist() == ["cmpl-c3-0", "cmpl-d4-0"]


def test_vllm_expired_blocks_of_both_generations():
    partial = read("vllm_prefill_expired.log")
    ev = partial.events
    # in time order: the August lines (newer wording) before the September ones
    assert ev["event"].tolist() == [S.EV_KV_EXPIRED, S.EV_NIXL_WARNING, S.EV_KV_EXPIRED,
                                    S.EV_KV_EXPIRED]
    assert field(ev, S.DETAIL_REQUEST).tolist() == [
        "8f07dfc0-5b1e-4d0a-9c3e-7a1fa2f0e657", "8f07dfc0-5b1e-4d0a-9c3e-7a1fa2f0e657",
        "cmpl-3da205a6-1c3c-41b5-aeaa-b8421e81fd5c-0", "cmpl-efed6d02-710d-4f07-b643-ffb9a14f0858-0"]
    assert "read by 0 remote worker(s) within 120 s" in ev["detail"].iloc[2]
    assert "read by 0 remote worker(s))" in ev["detail"].iloc[0]  # "before lease expired" form
    assert partial.engines == {"vllm_prefill_expired": "vllm"}


def test_vllm_v0_redo_is_a_recompute():
    ev = read("vllm_v0_redo.log").events
    assert ev["event"].tolist() == [S.EV_KV_LOAD_RECOMPUTED]
    assert ev["detail"].iloc[0].startswith("rank 0: not all KV received")


def test_detail_fields_round_trip():
    detail = S.event_detail("x failed (a b)", request="r 1", peer="10.0.0.1:80@mlx5_0", nic=None,
                            requests=3)
    assert detail == "x failed (a b) [request=r_1 peer=10.0.0.1:80@mlx5_0 requests=3]"
    frame = pd.DataFrame({"detail": [detail, "no fields", "y [nic=mlx5_1]"]})
    assert field(frame, S.DETAIL_PEER).tolist()[0] == "10.0.0.1:80@mlx5_0"
    assert field(frame, S.DETAIL_NIC).tolist()[2] == "mlx5_1"
    assert field(frame, S.DETAIL_REQUEST).tolist()[0] == "r_1"  # not confused with requests=
    assert field(frame, S.DETAIL_REQUESTS).tolist()[0] == "3"
    assert S.event_detail("plain") == "plain"


def test_every_failure_marker_is_a_sniff_marker():
    families = (*vllm_log.NIXL_MARKERS, *mooncake_log.FAILURE_MARKERS)
    assert set(families) - set(log_markers.SNIFF_MARKERS) == set()
    for name in ALL_FILES:  # sniffing needs one marked line among the first 200
        text = (FAILURES / name).read_text()
        assert any(m in text for m in log_markers.SNIFF_MARKERS), name


def test_sniffing_reads_the_shared_markers():
    assert set(log_markers.SNIFF_MARKERS) <= set(pd_io._LOG_MARKERS)


@pytest.mark.parametrize("name", ALL_FILES)
def test_failure_only_logs_are_sniffed_as_engine_logs(name: str):
    assert pd_io.sniff(FAILURES / name).kind == "engine-log"


@pytest.mark.parametrize("name", ALL_FILES)
def test_diagnose_loads_a_dataset_with_the_events(name: str):
    """No "no known format" and no "nothing usable" dead end: the events reach the dataset.

    (The rules that turn them into findings are kv-transfer-failures / not-disaggregated.)
    """
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose, load_dataset

    request = DiagnoseRequest(paths=(FAILURES / name,), read=ReadContext(year=2025))
    dataset, _ = load_dataset(request)
    assert len(dataset.events) == len(read(name).events)
    assert set(dataset.events["instance"]) == {Path(name).stem}
    report = diagnose(request)  # runs end to end on events alone
    assert report.sources[0].rows > 0
