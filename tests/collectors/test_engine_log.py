"""Engine-log reader: timestamps and years, sub-series combining, reading files of every kind."""

from __future__ import annotations

import gzip
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.collectors import engine_log
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.engine_log import instance_for, read_engine_log, scan_lines
from pdprobe.collectors.log_time import TimeParts, assign_years, extract_time_parts, unix_seconds
from pdprobe.collectors.log_toolkit import SignalSpec, as_lines, combine_subseries, parse_key_values
from pdprobe.dataset import EVENT_COLUMNS, METRIC_COLUMNS

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def series(partial, signal: str) -> pd.Series:
    m = partial.metrics
    rows = m[m["signal"] == signal]
    return pd.Series(rows["value"].to_numpy(), index=rows["ts"].to_numpy())


# --- timestamps ------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "year", "month", "day", "second"), [
    ("INFO 04-01 17:26:35 metrics.py:455] Avg prompt", np.nan, 4, 1, 17 * 3600 + 26 * 60 + 35),
    ("INFO 04-17 11:27:55 [metrics.py:481] Engine", np.nan, 4, 17, 11 * 3600 + 27 * 60 + 55),
    ("(APIServer pid=3322894) INFO 10-27 11:21:40 [loggers.py:208] x", np.nan, 10, 27, 40900),
    ("[decode-0] (APIServer pid=1) DEBUG 06-11 12:33:49 [v1/metrics/loggers.py:259] x",
     np.nan, 6, 11, 45229),
    ("(APIServer pid=1) INFO 06-11 12:33:49 [[loggers.py:259](http://loggers.py:259/)] x",
     np.nan, 6, 11, 45229),
    ("[2025-05-18 08:57:28 DP15 TP15] Prefill batch", 2025, 5, 18, 32248),
    ("[2025-05-18 08:57:28.125 DP15 TP15] Prefill batch", 2025, 5, 18, 32248.125),
    ("2025-10-29 02:27:35 INFO 8900 [ DP15 TP15 EP15 scheduler_metrics_mixin.py:222] Decode",
     2025, 10, 29, 8855),
    ("(SGLangEngine pid=1, ip=10.0.0.3) [2026-04-05 20:02:51] Prefill", 2026, 4, 5, 72171),
    ("E0603 20:16:59.104586 27322 worker_pool.cpp:271] Worker", np.nan, 6, 3, 73019.104586),
    ("I20251113 17:04:35.119301 22885017610048 client_metric.cpp:76] x", 2025, 11, 13,
     61475.119301),
    ("2025-07-01T12:00:10.123456789Z (APIServer pid=1) INFO 07-01 12:00:10 [loggers.py:1] x",
     2025, 7, 1, 43210.123456789),
    ("Decode batch. #running-req: 5, timestamp: 2025-07-01T10:00:02.250000", 2025, 7, 1, 36002.25),
])
def test_timestamp_of_every_prefix(line, year, month, day, second):
    parts = extract_time_parts([line])
    np.testing.assert_allclose(parts.year, [year])
    assert parts.month[0] == month and parts.day[0] == day
    assert parts.second_of_day[0] == pytest.approx(second, abs=1e-6)


def test_line_without_timestamp_has_none():
    parts = extract_time_parts(["Avg prompt throughput: 1.0 tokens/s", "99:99:99 nonsense"])
    assert not parts.found.any()


def test_unix_seconds_rejects_impossible_dates():
    out = unix_seconds(np.array([2025.0, 2024.0, 2025.0, np.nan]), np.array([2.0, 2.0, 13.0, 1.0]),
                       np.array([29.0, 29.0, 1.0, 1.0]), np.zeros(4))
    assert np.isnan(out[0])  # 2025 is no leap year
    assert out[1] == utc("2024-02-29T00:00:00")
    assert np.isnan(out[2]) and np.isnan(out[3])


def _parts(months, days, years=None):
    n = len(months)
    return TimeParts(year=np.array(years if years else [np.nan] * n, dtype=float),
                     month=np.array(months, dtype=float), day=np.array(days, dtype=float),
                     second_of_day=np.zeros(n))


def test_years_from_option_with_rollover_and_a_late_line():
    parts = _parts([12, 12, 1, 12, 1], [31, 31, 1, 31, 1])
    choice = assign_years(parts, np.arange(1, 6), given_year=2025, mtime_s=None)
    assert choice.year.tolist() == [2025, 2025, 2026, 2025, 2026]
    assert "year 2025 for log lines without one taken from --year" in choice.notes
    assert "timestamps cross into a new year at line 3" in choice.notes


def test_year_from_modification_time_is_the_year_of_the_last_line():
    parts = _parts([12, 1], [30, 2])
    choice = assign_years(parts, np.array([1, 2]), given_year=None,
                          mtime_s=utc("2026-01-03T00:00:00"))
    assert choice.year.tolist() == [2025, 2026]
    assert "year 2025 taken from the file's modification time; pass --year" in choice.notes


def test_year_from_modification_time_never_puts_lines_after_the_last_write():
    # Copied on 2 January: a log that ends on 31 December belongs to the previous year.
    parts = _parts([12], [31])
    choice = assign_years(parts, np.array([1]), given_year=None,
                          mtime_s=utc("2026-01-02T10:00:00"))
    assert choice.year.tolist() == [2025]


def test_year_from_dated_lines_of_the_same_file():
    parts = _parts([5, 5, 5], [18, 18, 18], years=[2024, np.nan, np.nan])
    choice = assign_years(parts, np.array([1, 2, 3]), given_year=None,
                          mtime_s=utc("2030-01-01T00:00:00"))
    assert choice.year.tolist() == [2024, 2024, 2024]
    assert any("taken from dated lines in the same file (line 1)" in n for n in choice.notes)


def test_dated_anchor_across_new_year():
    # The undated line is from December, the dated one from January of the next year.
    parts = _parts([12, 1], [31, 1], years=[np.nan, 2026])
    choice = assign_years(parts, np.array([1, 2]), given_year=None, mtime_s=None)
    assert choice.year.tolist() == [2025, 2026]


def test_year_from_the_capture_span_beats_a_fresh_modification_time():
    # A `cp -r` of a capture made today: mtime is now, the lines are from last December and the
    # request records of the capture span 2025-12-01 .. 2025-12-02.
    parts = _parts([12, 12], [1, 1])
    span = (utc("2025-12-01T00:00:00"), utc("2025-12-02T00:00:00"))
    choice = assign_years(parts, np.array([1, 2]), given_year=None,
                          mtime_s=utc("2026-11-30T09:00:00"), reference_s=span,
                          reference_source="requests.jsonl")
    assert choice.year.tolist() == [2025, 2025]
    assert ("year 2025 taken from the other inputs of the capture (requests.jsonl); pass --year "
            "to override" in choice.notes)


def test_year_from_the_capture_span_across_new_year():
    parts = _parts([12, 12, 1, 1], [31, 31, 1, 1])
    span = (utc("2025-12-31T20:00:00"), utc("2026-01-01T04:00:00"))
    choice = assign_years(parts, np.arange(1, 5), given_year=None,
                          mtime_s=utc("2027-06-01T00:00:00"), reference_s=span)
    assert choice.year.tolist() == [2025, 2025, 2026, 2026]
    assert "timestamps cross into a new year at line 3" in choice.notes


def test_year_nearest_the_capture_span_when_the_log_lies_outside_it():
    # The log ends a day before the records start: the year that puts it nearest wins.
    parts = _parts([3], [10])
    span = (utc("2024-03-11T00:00:00"), utc("2024-03-12T00:00:00"))
    choice = assign_years(parts, np.array([1]), given_year=None, mtime_s=None, reference_s=span)
    assert choice.year.tolist() == [2024]


def test_option_and_dated_lines_outrank_the_capture_span():
    span = (utc("2020-05-01T00:00:00"), utc("2020-05-02T00:00:00"))
    parts = _parts([5, 5], [18, 18], years=[2024, np.nan])
    dated = assign_years(parts, np.array([1, 2]), given_year=None, mtime_s=None, reference_s=span)
    assert dated.year.tolist() == [2024, 2024]
    given = assign_years(_parts([5], [1]), np.array([1]), given_year=2023, mtime_s=None,
                         reference_s=span)
    assert given.year.tolist() == [2023]


def test_copied_capture_reads_last_decembers_log_in_the_records_year(tmp_path):
    path = tmp_path / "copy" / "decode-0.log"
    path.parent.mkdir()
    path.write_text("(APIServer pid=1) INFO 12-30 10:00:00 [loggers.py:208] Engine 000: Avg "
                    "prompt throughput: 0.0 tokens/s, Avg generation throughput: 10.0 tokens/s, "
                    "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%\n")
    now = datetime.now(UTC).timestamp()
    os.utime(path, (now, now))  # cp -r without -p: modified now
    last_year = datetime.now(UTC).year - 1
    span = (utc(f"{last_year}-12-30T09:00:00"), utc(f"{last_year}-12-30T11:00:00"))
    partial = read_engine_log(path, ReadContext(reference_span_s=span,
                                                reference_source="records.jsonl"))
    assert partial.metrics["ts"].min() == utc(f"{last_year}-12-30T10:00:00")
    assert any(f"year {last_year} taken from the other inputs of the capture (records.jsonl)"
               in n for n in partial.source.notes)


# --- generic key: value parsing ----------------------------------------------------------------


def test_parse_key_values_maps_scales_and_tolerates():
    kv = parse_key_values(
        as_lines(["a=1, b (ms)=2.5, zzz=9", "b (ms)=oops, a=3", "nothing here", ""]),
        separator=", ", assign="=", keys={"a": ("a", 1.0), "b (ms)": ("b_s", 1e-3)})
    np.testing.assert_allclose(kv.columns["a"], [1, 3, np.nan, np.nan])
    np.testing.assert_allclose(kv.columns["b_s"], [0.0025, np.nan, np.nan, np.nan])
    assert kv.known.tolist() == [2, 2, 0, 0]
    assert kv.unknown_per_row.tolist() == [1, 0, 0, 0]
    assert kv.unknown_keys == ("zzz",)
    assert kv.errors[1] == "b (ms) 'oops' is not a number"
    assert kv.errors[0] is None


# --- combining sub-series ----------------------------------------------------------------------


def _frame(rows):
    return pd.DataFrame(rows, columns=["ts", "sub", "v"])


def test_gauges_sum_latest_fresh_values_of_each_sub_series():
    frame = _frame([(0, "a", 1.0), (0, "b", 10.0), (5, "a", 2.0), (100, "a", 3.0)])
    out = combine_subseries(frame, [SignalSpec("v", "sig")], stale_s=60)
    assert out["ts"].tolist() == [0, 5, 100]
    assert out["value"].tolist() == [11.0, 12.0, 3.0]  # b is stale at t=100
    mean = combine_subseries(frame, [SignalSpec("v", "sig", combine="mean")], stale_s=60)
    assert mean["value"].tolist() == [5.5, 6.0, 3.0]


def test_per_interval_counts_accumulate_per_sub_series_in_time_order():
    frame = _frame([(10, "a", 1.0), (0, "a", 2.0), (5, "b", 4.0), (20, "b", np.nan)])
    out = combine_subseries(frame, [SignalSpec("v", "c", kind=S.COUNTER, per_interval=True,
                                               zero_if_absent=True)])
    assert out["ts"].tolist() == [0, 5, 10, 20]
    assert out["value"].tolist() == [2.0, 6.0, 7.0, 7.0]
    assert (out["kind"] == S.COUNTER).all()


def test_cumulative_counters_are_reset_corrected():
    frame = _frame([(0, "a", 100.0), (10, "a", 150.0), (20, "a", 5.0), (30, "a", 25.0)])
    out = combine_subseries(frame, [SignalSpec("v", "c", kind=S.COUNTER)])
    assert out["value"].tolist() == [100.0, 150.0, 155.0, 175.0]


def test_absent_column_or_all_nan_gives_no_rows():
    frame = _frame([(0, "a", np.nan)])
    assert combine_subseries(frame, [SignalSpec("v", "g"), SignalSpec("missing", "g")]).empty


# --- reading files -----------------------------------------------------------------------------


def test_instance_name_from_file_name_or_option():
    assert instance_for(Path("/x/decode-2.log.gz"), ReadContext())[0] == "decode-2"
    assert instance_for(Path("prefill-0.txt.zst"), ReadContext())[0] == "prefill-0"
    assert instance_for(Path("decode-0.log.1"), ReadContext())[0] == "decode-0"
    name, note = instance_for(Path("10.0.1.10_8000.log.gz"), ReadContext())
    assert name == "10.0.1.10:8000" and "host_port read as host:port" in note
    assert instance_for(Path("decode_2.log"), ReadContext())[0] == "decode_2"
    name, note = instance_for(Path("decode-2.log"), ReadContext(instance="10.0.0.5:8000"))
    assert name == "10.0.0.5:8000" and "--instance" in note


def test_year_from_option_and_from_mtime(tmp_path):
    path = tmp_path / "decode-1.log"
    shutil.copy(LOGS / "vllm_0.8.0_early_v1.log", path)
    with_year = read_engine_log(path, ReadContext(year=2024))
    assert with_year.metrics["ts"].min() == utc("2024-03-20T10:00:05")
    os.utime(path, (utc("2026-05-01T00:00:00"),) * 2)
    from_mtime = read_engine_log(path, ReadContext())
    assert from_mtime.metrics["ts"].min() == utc("2026-03-20T10:00:05")
    assert ("year 2026 taken from the file's modification time; pass --year"
            in from_mtime.source.notes)
    assert "log times are read as UTC (the logs carry no time zone)" in from_mtime.source.notes
    assert from_mtime.metrics["instance"].unique().tolist() == ["decode-1"]
    assert ("instance name 'decode-1' taken from the file name; pass --instance to set it"
            in from_mtime.source.notes)


def test_rollover_file_is_sorted_and_crosses_the_year():
    partial = read_engine_log(LOGS / "vllm_rollover.log", ReadContext(year=2025))
    running = series(partial, S.REQUESTS_RUNNING)
    assert list(running.index) == [utc("2025-12-31T23:59:40"), utc("2025-12-31T23:59:50"),
                                   utc("2025-12-31T23:59:59"), utc("2026-01-01T00:00:00"),
                                   utc("2026-01-01T00:00:10")]
    # Engine 001's late line (4 running) joins engine 000's latest value each time.
    assert running.tolist() == [1, 2, 6, 7, 9]
    assert partial.metrics["ts"].is_monotonic_increasing
    assert "timestamps cross into a new year at line 3" in partial.source.notes


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_compressed_logs_read_like_plain_ones(tmp_path, compression):
    plain = read_engine_log(LOGS / "vllm_0.14.0_decode.log", ReadContext(year=2025))
    raw = (LOGS / "vllm_0.14.0_decode.log").read_bytes()
    if compression == "gzip":
        path = tmp_path / "vllm_0.14.0_decode.log.gz"
        path.write_bytes(gzip.compress(raw))
    else:
        import zstandard

        path = tmp_path / "vllm_0.14.0_decode.log.zst"
        path.write_bytes(zstandard.ZstdCompressor().compress(raw))
    packed = read_engine_log(path, ReadContext(year=2025))
    pd.testing.assert_frame_equal(plain.metrics, packed.metrics)
    assert packed.source.rows == plain.source.rows == 6
    assert packed.metrics["instance"].iloc[0] == "vllm_0.14.0_decode"


def test_truncated_gzip_keeps_the_intact_lines(tmp_path):
    lines = [f"(APIServer pid=1) INFO 05-01 10:{i // 60:02d}:{i % 60:02d} [loggers.py:1] Engine "
             f"000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
             f"Running: {i} reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit "
             f"rate: 0.0%" for i in range(3000)]
    data = gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) // 2])
    partial = read_engine_log(path, ReadContext(year=2025))
    assert any("compressed data ends early" in w for w in partial.warnings)
    running = series(partial, S.REQUESTS_RUNNING)
    assert 0 < len(running) < 3000
    assert running.tolist() == list(range(len(running)))


def test_mixed_kubectl_log():
    partial = read_engine_log(LOGS / "kubectl_decode-3.log", ReadContext(year=2025))
    assert partial.source.format == "vllm-log+mooncake-log"
    assert partial.source.rows == 3  # two stats lines and one slice failure
    assert partial.source.skipped == 2  # malformed value + truncated line
    assert partial.engines == {"kubectl_decode-3": "vllm"}
    assert series(partial, S.REQUESTS_RUNNING).to_dict() == {utc("2025-11-02T08:01:00"): 12,
                                                             utc("2025-11-02T08:01:20"): 14}
    assert partial.events["event"].tolist() == [S.EV_RDMA_SLICE_FAILED, S.EV_RDMA_RETRY_EXCEEDED]
    assert partial.events["source"].tolist() == ["kubectl_decode-3.log:7"] * 2
    malformed = [w for w in partial.warnings if "malformed" in w]
    assert len(malformed) == 1 and "(line 8)" in malformed[0]
    assert "Avg generation throughput 'abc' is not a number in '(APIServer" in malformed[0]
    truncated = [w for w in partial.warnings if "not understood" in w]
    assert len(truncated) == 1 and "(line 10)" in truncated[0]
    assert "5 unrelated line(s) ignored (access logs, startup messages, ...)" in partial.source.notes
    assert [h.role for h in partial.role_hints] == ["decode"]  # name pattern only


def test_garbage_file_is_a_warning_not_an_error():
    partial = read_engine_log(LOGS / "garbage.txt", ReadContext())
    assert partial.metrics is None and partial.events is None
    assert partial.source.rows == 0 and partial.source.skipped == 1
    assert any("no vLLM, SGLang or Mooncake" in w for w in partial.warnings)
    assert any("(line 4)" in w and "not understood" in w for w in partial.warnings)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    partial = read_engine_log(path, ReadContext())
    assert partial.source.rows == 0 and partial.metrics is None
    assert any("no vLLM, SGLang or Mooncake" in w for w in partial.warnings)


def test_many_garbage_lines_list_only_the_first_few(tmp_path):
    path = tmp_path / "noise.log"
    path.write_text("".join(f"Avg prompt throughput: junk {i}\n" for i in range(9)))
    partial = read_engine_log(path, ReadContext())
    assert partial.source.skipped == 9
    (warning,) = [w for w in partial.warnings if "not understood" in w]
    assert "9 line(s)" in warning and "(line 1, 2, 3, 4, 5, ...)" in warning


def test_out_of_order_lines_are_sorted(tmp_path):
    text = (LOGS / "vllm_0.8.0_early_v1.log").read_text().splitlines()
    path = tmp_path / "swapped.log"
    path.write_text("\n".join(reversed(text)) + "\n")
    partial = read_engine_log(path, ReadContext(year=2025))
    assert partial.metrics["ts"].is_monotonic_increasing
    assert series(partial, S.REQUESTS_RUNNING).tolist() == [4, 5]


def test_line_numbers_survive_chunked_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_log, "CHUNK_BYTES", 64)
    path = tmp_path / "chunks.log"
    body = [f"filler line number {i} with some padding text" for i in range(40)]
    body[7] = "Avg prompt throughput: marker seven"
    body[33] = "Avg prompt throughput: marker thirty-three"
    path.write_text("\r\n".join(body))  # CRLF endings, no final newline
    scanned = scan_lines(path, "Avg prompt throughput")
    assert scanned.line_numbers.tolist() == [8, 34]
    assert scanned.lines.to_pylist() == [body[7], body[33]]
    assert scanned.total == 40


def test_frames_match_the_dataset_schema():
    partial = read_engine_log(LOGS / "vllm_0.33_decode.log", ReadContext(year=2025))
    assert list(partial.metrics.columns) == list(METRIC_COLUMNS)
    assert {c: str(t) for c, t in partial.metrics.dtypes.items()} == dict(METRIC_COLUMNS)
    assert list(partial.events.columns) == list(EVENT_COLUMNS)
    assert set(partial.metrics["kind"]) <= set(S.KINDS)


def test_read_through_the_offline_collector(tmp_path):
    from pdprobe.collectors.files import read_paths

    for name in ("vllm_0.33_decode.log", "sglang_0.5.3_pd_prefill.log"):
        shutil.copy(LOGS / name, tmp_path / name)
    dataset = read_paths([tmp_path], ReadContext(year=2025))
    roles = {i.name: (i.role, i.engine) for i in dataset.instances}
    assert roles == {"vllm_0.33_decode": ("decode", "vllm"),
                     "sglang_0.5.3_pd_prefill": ("prefill", "sglang")}
    assert {s.format for s in dataset.sources} == {"vllm-log", "sglang-log"}


def test_mooncake_throughput_wins_over_vllm_per_transfer_throughput(tmp_path):
    path = tmp_path / "prefill-0.log"
    path.write_text((LOGS / "vllm_0.14.0_decode.log").read_text()
                    + "I0922 13:28:55.000000 42 transfer_engine.cpp:364] [Metrics] Transfer Engine "
                      "Throughput: 2048.00 MB/s (over last 5s)\n")
    partial = read_engine_log(path, ReadContext(year=2025))
    throughput = series(partial, S.KV_TRANSFER_THROUGHPUT_LOG)
    assert throughput.to_dict() == {utc("2025-09-22T13:28:55"): 2048.0 * 2**20}
    assert not series(partial, S.KV_TRANSFER_AVG_S_LOG).empty  # vLLM's other KV gauges stay
    assert any("taken from the Mooncake transfer engine" in n for n in partial.source.notes)
    assert partial.engines == {"prefill-0": "vllm"}


def test_batched_parsing_gives_the_same_result(monkeypatch):
    whole = read_engine_log(LOGS / "sglang_0.5.3_pd_prefill.log", ReadContext())
    monkeypatch.setattr(engine_log, "PARSE_BATCH_LINES", 2)
    batched = read_engine_log(LOGS / "sglang_0.5.3_pd_prefill.log", ReadContext())
    pd.testing.assert_frame_equal(whole.metrics, batched.metrics)
    assert batched.source.rows == 5


def test_year_from_the_gzip_header_time(tmp_path):
    raw = (LOGS / "vllm_0.8.0_early_v1.log").read_bytes()
    path = tmp_path / "prefill-3.log.gz"
    path.write_bytes(gzip.compress(raw, mtime=int(utc("2023-04-01T00:00:00"))))
    os.utime(path, (utc("2026-05-01T00:00:00"),) * 2)  # copied later: the fs time is wrong
    partial = read_engine_log(path, ReadContext())
    assert partial.metrics["ts"].min() == utc("2023-03-20T10:00:05")
