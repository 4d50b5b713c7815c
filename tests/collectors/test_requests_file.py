"""Tests for pdprobe/collectors/requests_file.py: layouts, formats, compression, validation."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pdprobe.collectors import request_formats
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.requests_file import (
    is_request_header,
    load_hash_ids,
    map_columns,
    read_requests,
)
from pdprobe.dataset import REQUEST_COLUMNS, ROLE_FROM_LABEL
from pdprobe.errors import InputError

CTX = ReadContext()


def _canonical_frame(n: int = 50, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "request_id": [f"req-{i}" for i in range(n)],
        "arrival_ts": 1_700_000_000.0 + np.arange(n) * 0.5,
        "prompt_tokens": rng.integers(10, 5000, n),
        "output_tokens": rng.integers(1, 800, n),
        "cached_tokens": np.zeros(n),
        "prefill_instance": [f"10.0.0.{i % 2}:8000" for i in range(n)],
        "decode_instance": [f"10.0.1.{i % 3}:8000" for i in range(n)],
        "queue_s": rng.uniform(0, 0.1, n),
        "prefill_s": rng.uniform(0.05, 0.5, n),
        "kv_transfer_s": rng.uniform(0.001, 0.02, n),
        "kv_bytes": rng.uniform(1e6, 1e8, n),
        "ttft_s": rng.uniform(0.1, 1.0, n),
        "tpot_s": rng.uniform(0.01, 0.05, n),
        "e2e_s": rng.uniform(1, 20, n),
        "status": ["ok"] * (n - 2) + ["error", "timeout"],
    })


# --- public traces --------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "rows", "fmt"), [
    ("AzureLLMInferenceTrace_code.csv", 8819, "azure-trace"),
    ("AzureLLMInferenceTrace_conv.csv", 19366, "azure-trace"),
    ("mooncake_conversation_trace.jsonl", 12031, "mooncake-trace"),
    ("mooncake_synthetic_trace.jsonl", 3993, "mooncake-trace"),
])
def test_public_traces_read_in_place(traces_dir: Path, name: str, rows: int, fmt: str) -> None:
    part = read_requests(traces_dir / name, CTX)
    assert part.source.rows == rows
    assert part.source.format == fmt
    assert part.source.skipped == 0
    assert part.warnings == ()
    assert part.request_columns == {"arrival_ts", "prompt_tokens", "output_tokens"}
    assert list(part.requests.columns) == list(REQUEST_COLUMNS)
    assert part.requests["arrival_ts"].is_monotonic_increasing


def test_azure_trace_wall_clock_utc(traces_dir: Path) -> None:
    part = read_requests(traces_dir / "AzureLLMInferenceTrace_code.csv", CTX)
    first = datetime(2023, 11, 16, 18, 17, 3, 979960, tzinfo=UTC).timestamp()
    assert part.requests["arrival_ts"].iloc[0] == pytest.approx(first, abs=1e-6)
    assert part.requests["arrival_ts"].iloc[-1] - first == pytest.approx(3435.948, abs=1e-3)
    assert any("assumed UTC" in n for n in part.source.notes)
    assert part.requests["prompt_tokens"].iloc[0] == 4808


def test_mooncake_trace_relative_seconds(traces_dir: Path) -> None:
    part = read_requests(traces_dir / "mooncake_conversation_trace.jsonl", CTX)
    arrival = part.requests["arrival_ts"]
    assert arrival.iloc[0] == 0.0
    assert arrival.iloc[-1] == pytest.approx(3536.999)
    assert any("relative timestamps" in n for n in part.source.notes)
    hashes = load_hash_ids(traces_dir / "mooncake_conversation_trace.jsonl")
    assert hashes is not None and len(hashes) == 12031
    lengths = np.asarray(hashes.value_lengths())
    expected = np.ceil(part.requests["prompt_tokens"].to_numpy() / 512)
    assert np.array_equal(lengths, expected)


# --- small fixtures: the trace layouts ------------------------------------------------------


def test_azure_snippet_crlf_without_final_newline(fixtures_dir: Path) -> None:
    part = read_requests(fixtures_dir / "requests" / "azure_snippet.csv", CTX)
    req = part.requests
    assert len(req) == 6
    assert req["output_tokens"].tolist() == [10, 20, 30, 40, 50, 60]
    t0 = datetime(2023, 11, 16, 18, 0, 0, tzinfo=UTC).timestamp()
    assert (req["arrival_ts"] - t0).round(6).tolist() == [0.0, 0.5, 1.25, 2.0, 3.75, 4.0]


def test_mooncake_snippet_sorted_and_hash_ids_aligned(fixtures_dir: Path) -> None:
    path = fixtures_dir / "requests" / "mooncake_snippet.jsonl"
    part = read_requests(path, CTX)
    req = part.requests
    assert req["arrival_ts"].tolist() == [0.0, 0.0, 2.997, 3.0, 6.0]
    assert req["prompt_tokens"].tolist() == [1100, 600, 100, 1536, 513]
    assert any("out of order at 1 place" in w for w in part.warnings)
    hashes = load_hash_ids(path)
    assert hashes is not None
    assert [len(h) for h in hashes.to_pylist()] == [3, 2, 1, 3, 2]
    assert hashes.to_pylist()[2] == [8]  # the 2,997 ms request, moved before the 3,000 ms one


def test_no_hash_ids_column_gives_none(fixtures_dir: Path) -> None:
    assert load_hash_ids(fixtures_dir / "requests" / "azure_snippet.csv") is None


# --- canonical records in each format -------------------------------------------------------


def _check_canonical(part, frame: pd.DataFrame) -> None:  # type: ignore[no-untyped-def]
    req = part.requests
    assert list(req.columns) == list(REQUEST_COLUMNS)
    assert {c: str(t) for c, t in req.dtypes.items()} == dict(REQUEST_COLUMNS)
    assert part.request_columns == set(REQUEST_COLUMNS)
    assert len(req) == len(frame)
    np.testing.assert_allclose(req["arrival_ts"], frame["arrival_ts"])
    assert req["prompt_tokens"].tolist() == frame["prompt_tokens"].tolist()
    np.testing.assert_allclose(req["ttft_s"], frame["ttft_s"])
    assert req["status"].tolist() == frame["status"].tolist()
    assert req["decode_instance"].tolist() == frame["decode_instance"].tolist()


def test_parquet_canonical(tmp_path: Path) -> None:
    frame = _canonical_frame()
    path = tmp_path / "req.parquet"
    frame.assign(extra_blob=["x" * 10] * len(frame)).to_parquet(path)
    part = read_requests(path, CTX)
    _check_canonical(part, frame)
    assert part.source.format == "parquet"
    assert any("ignored columns: extra_blob" in n for n in part.source.notes)
    hints = {(h.instance, h.role) for h in part.role_hints}
    assert hints == {("10.0.0.0:8000", "prefill"), ("10.0.0.1:8000", "prefill"),
                     ("10.0.1.0:8000", "decode"), ("10.0.1.1:8000", "decode"),
                     ("10.0.1.2:8000", "decode")}
    assert all(h.strength == ROLE_FROM_LABEL for h in part.role_hints)
    assert all(h.how == "prefill_instance column in req.parquet" for h in part.role_hints
               if h.role == "prefill")


def test_parquet_categorical_and_timestamp_types(tmp_path: Path) -> None:
    frame = _canonical_frame(10)
    stamped = frame.assign(
        arrival_ts=pd.to_datetime(frame["arrival_ts"], unit="s"),  # naive: assumed UTC
        decode_instance=frame["decode_instance"].astype("category"),
    )
    path = tmp_path / "typed.parquet"
    stamped.to_parquet(path)
    part = read_requests(path, CTX)
    np.testing.assert_allclose(part.requests["arrival_ts"], frame["arrival_ts"])
    assert part.requests["decode_instance"].tolist() == frame["decode_instance"].tolist()
    assert any("no time zone: assumed UTC" in n for n in part.source.notes)

    aware = frame.assign(arrival_ts=pd.to_datetime(frame["arrival_ts"], unit="s", utc=True)
                         .dt.tz_convert("Europe/Berlin"))
    aware.to_parquet(path)
    part = read_requests(path, CTX)
    np.testing.assert_allclose(part.requests["arrival_ts"], frame["arrival_ts"])
    assert not any("assumed UTC" in n for n in part.source.notes)


@pytest.mark.parametrize("compression", ["gzip", "zstd", None])
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "tsv", "parquet"])
def test_formats_and_compression_agree(tmp_path: Path, fmt: str, compression: str | None) -> None:
    frame = _canonical_frame(40, seed=3)
    if fmt == "parquet":
        raw = frame.to_parquet()
    elif fmt == "jsonl":
        raw = frame.to_json(orient="records", lines=True).encode()
    else:
        raw = frame.to_csv(index=False, sep="\t" if fmt == "tsv" else ",").encode()
    if compression == "gzip":
        raw = gzip.compress(raw)
    elif compression == "zstd":
        raw = zstandard.ZstdCompressor().compress(raw)
    path = tmp_path / "records.bin"  # the format comes from the content, not the name
    path.write_bytes(raw)
    part = read_requests(path, CTX)
    _check_canonical(part, frame)
    assert part.source.format == fmt
    if compression:
        assert part.source.notes[0] == f"{compression}-compressed {fmt}"


def test_truncated_gzip_is_one_line_error(tmp_path: Path) -> None:
    raw = gzip.compress(_canonical_frame(2000).to_csv(index=False).encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputError) as err:
        read_requests(path, CTX)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


# --- aliases and units ----------------------------------------------------------------------


def test_aliases_units_and_status(fixtures_dir: Path) -> None:
    part = read_requests(fixtures_dir / "requests" / "aliases.csv", CTX)
    req = part.requests
    t0 = datetime(2024, 5, 1, 10, tzinfo=UTC).timestamp()
    assert (req["arrival_ts"] - t0).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert req["prompt_tokens"].tolist() == [1000, 2000, 1500, 500]
    assert req["output_tokens"].tolist() == [100, 50, 80, 10]
    np.testing.assert_allclose(req["ttft_s"].iloc[:3], [0.25, 0.4, 0.3])
    np.testing.assert_allclose(req["tpot_s"].iloc[:3], [0.02, 0.025, 0.022])
    np.testing.assert_allclose(req["e2e_s"].iloc[:3], [2.23, 1.625, 2.038])
    assert np.isnan(req["e2e_s"].iloc[3])
    assert req["cached_tokens"].iloc[:3].tolist() == [500, 0, 750]
    assert req["request_id"].tolist() == ["7", "8", "9", "10"]
    assert req["status"].tolist() == ["ok", "ok", "aborted", "error"]  # stop, length, abort, 500
    assert part.request_columns == {"arrival_ts", "prompt_tokens", "output_tokens", "request_id",
                                    "cached_tokens", "prefill_instance", "decode_instance",
                                    "ttft_s", "tpot_s", "e2e_s", "status"}
    assert any("input_tokens->prompt_tokens" in n for n in part.source.notes)
    assert any("ignored columns: model" in n for n in part.source.notes)
    assert {h.instance for h in part.role_hints if h.role == "prefill"} == {"prefill-0",
                                                                              "prefill-1"}


@pytest.mark.parametrize(("scale", "unit"), [(1e3, "milliseconds"), (1e6, "microseconds"),
                                             (1e9, "nanoseconds")])
def test_epoch_unit_detected_by_magnitude(tmp_path: Path, scale: float, unit: str) -> None:
    seconds = 1_714_557_600.0 + np.arange(5)
    pd.DataFrame({"arrival_ts": (seconds * scale).astype("int64"), "prompt_tokens": 5,
                  "output_tokens": 7}).to_csv(tmp_path / "r.csv", index=False)
    part = read_requests(tmp_path / "r.csv", CTX)
    np.testing.assert_allclose(part.requests["arrival_ts"], seconds)
    assert any(f"epoch {unit} (detected by magnitude)" in n for n in part.source.notes)


def test_arrival_unit_from_column_name(tmp_path: Path) -> None:
    pd.DataFrame({"arrival_ms": [0, 1500, 4000], "input_length": [1, 2, 3],
                  "output_tokens": [1, 1, 1]}).to_csv(tmp_path / "r.csv", index=False)
    part = read_requests(tmp_path / "r.csv", CTX)
    assert part.requests["arrival_ts"].tolist() == [0.0, 1.5, 4.0]
    assert any("relative timestamps" in n for n in part.source.notes)


def test_iso_strings_with_mixed_offsets(tmp_path: Path) -> None:
    lines = ['{"arrival_ts": "2024-05-01T10:00:00+02:00", "prompt_tokens": 1, "output_tokens": 1}',
             '{"arrival_ts": "2024-05-01T08:00:01Z", "prompt_tokens": 1, "output_tokens": 1}',
             '{"arrival_ts": "2024-05-01 08:00:02", "prompt_tokens": 1, "output_tokens": 1}']
    (tmp_path / "r.jsonl").write_text("\n".join(lines))
    part = read_requests(tmp_path / "r.jsonl", CTX)
    t0 = datetime(2024, 5, 1, 8, tzinfo=UTC).timestamp()
    assert (part.requests["arrival_ts"] - t0).tolist() == [0.0, 1.0, 2.0]


def test_is_request_header() -> None:
    assert is_request_header("id,arrival_time,input_tokens,output_length\r\n", ",")
    assert is_request_header("TIMESTAMP\tContextTokens\tGeneratedTokens", "\t")
    assert not is_request_header("time,value,host", ",")
    assert not is_request_header("arrival_ts prompt_tokens output_tokens", ",")


def test_map_columns_prefers_canonical_name() -> None:
    cmap = map_columns(["input_tokens", "prompt_tokens", "Output Tokens", "TTFT_ms",
                        "arrival_ts"])
    assert cmap.sources["prompt_tokens"] == "prompt_tokens"
    assert cmap.sources["output_tokens"] == "Output Tokens"
    assert cmap.sources["ttft_s"] == "TTFT_ms" and cmap.scales["ttft_s"] == 1e-3
    assert cmap.layout == "records"
    assert cmap.ignored == ("input_tokens",)
    # A bare "prefill" column may be an instance name, "ttft" plainly is a duration.
    cmap = map_columns(["ts", "isl", "osl", "prefill", "ttft", "queue_ms"])
    assert "prefill_s" not in cmap.sources and "prefill" in cmap.ignored
    assert cmap.sources["ttft_s"] == "ttft" and cmap.scales["ttft_s"] == 1.0
    assert cmap.sources["queue_s"] == "queue_ms" and cmap.scales["queue_s"] == 1e-3


# --- broken and bad input -------------------------------------------------------------------


def test_broken_json_lines_are_skipped_with_line_numbers(fixtures_dir: Path) -> None:
    part = read_requests(fixtures_dir / "requests" / "canonical_broken.jsonl", CTX)
    req = part.requests
    assert req["request_id"].tolist() == ["r1", "r2", "r4", "r7"]
    assert req["status"].tolist() == ["ok", "ok", "timeout", "ok"]
    assert part.source.skipped == 3
    (warning,) = [w for w in part.warnings if "skipped" in w]
    assert "skipped 3 line(s)" in warning and "(line 3, 6, 7)" in warning


def test_many_broken_json_lines_found_by_bisection(tmp_path: Path) -> None:
    good = '{"arrival_ts": %d, "prompt_tokens": 10, "output_tokens": 2}'
    lines = []
    bad_at = {17, 500, 501, 1999}
    for i in range(2000):
        if i in bad_at:
            lines.append(f'{{"arrival_ts": {i}, "prompt_tokens": 10, "output_tokens": }}')
        else:
            lines.append(good % i)
    (tmp_path / "r.jsonl").write_text("\r\n".join(lines) + "\r\n")
    part = read_requests(tmp_path / "r.jsonl", CTX)
    assert len(part.requests) == 1996
    assert "(line 18, 501, 502, 2000)" in part.warnings[0]
    assert 17 not in part.requests["arrival_ts"].tolist()


def test_truncated_and_blank_crlf_lines(tmp_path: Path) -> None:
    good = '{{"arrival_ts": {}, "prompt_tokens": {}, "output_tokens": 2}}'
    lines = [good.format(i, 10 + i) for i in range(6)]
    lines[1] = lines[1][:20]  # truncated mid-object
    lines[3] = ""
    lines[4] = lines[4].replace("2}", "}")  # invalid inside: found by bisection
    lines.insert(5, "   ")
    (tmp_path / "r.jsonl").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    part = read_requests(tmp_path / "r.jsonl", CTX)
    assert part.requests["prompt_tokens"].tolist() == [10, 12, 15]
    assert part.source.skipped == 2
    assert "skipped 2 line(s)" in part.warnings[0] and "(line 2, 5)" in part.warnings[0]


def test_csv_malformed_rows_skipped(tmp_path: Path) -> None:
    text = ("arrival_ts,prompt_tokens,output_tokens\n1,10,1\n2,20\n3,30,3\n4,40,4,extra\n5,50,5\n")
    (tmp_path / "r.csv").write_text(text)
    part = read_requests(tmp_path / "r.csv", CTX)
    assert part.requests["prompt_tokens"].tolist() == [10, 30, 50]
    assert part.source.skipped == 2
    assert "skipped 2 malformed row(s)" in part.warnings[0] and "line 3, 5" in part.warnings[0]


def test_recoverable_problems_are_counted(tmp_path: Path) -> None:
    text = ("request_id,arrival_ts,prompt_tokens,output_tokens,ttft_s,status\n"
            "a,10,100,5,0.1,ok\n"
            "b,,200,5,0.1,ok\n"          # no arrival: dropped
            "c,12,-3,5,0.1,ok\n"          # negative length: dropped
            "d,11,abc,5,0.1,ok\n"         # non-numeric length: dropped
            "a,9,400,5,-1,weird\n"        # duplicate id, out of order, negative ttft, bad status
            "e,13,500,6,0.2,Cancelled\n")
    (tmp_path / "r.csv").write_text(text)
    part = read_requests(tmp_path / "r.csv", CTX)
    req = part.requests
    assert req["request_id"].tolist() == ["a", "a", "e"]
    assert req["arrival_ts"].tolist() == [9.0, 10.0, 13.0]
    assert req["status"].isna().tolist() == [True, False, False]
    assert req["status"].iloc[2] == "aborted"
    assert np.isnan(req["ttft_s"].iloc[0])
    assert part.source.rows == 3 and part.source.skipped == 3
    text_w = "\n".join(part.warnings)
    assert "dropped 1 row(s) with a missing or unreadable arrival_ts (data row 2)" in text_w
    assert "dropped 2 row(s) whose prompt_tokens is missing, not a number, negative or too " \
           "large (1 negative, 1 not numeric, data row 3, 4)" in text_w
    assert "1 negative or too large ttft_s value(s) treated as unknown (1 negative" in text_w
    assert "'weird' (1)" in text_w
    assert "out of order" in text_w
    assert "1 duplicate request_id" in text_w


def test_non_numeric_value_beyond_first_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    monkeypatch.setattr(request_formats, "CSV_BLOCK_BYTES", 64)
    rows = [f"{i},{i * 10},{i % 7 + 1}" for i in range(200)]
    rows[150] = "150,n/a-ish,3"
    (tmp_path / "r.csv").write_text("arrival_ts,prompt_tokens,output_tokens\n" + "\n".join(rows))
    part = read_requests(tmp_path / "r.csv", CTX)
    assert len(part.requests) == 199
    assert "1 not numeric" in part.warnings[0]


def test_dictionary_columns_across_csv_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    monkeypatch.setattr(request_formats, "CSV_BLOCK_BYTES", 128)
    statuses = ["OK", " error", "timeout", "499", "stop", "mystery"]
    rows = [f"{i},1,1,d{i % 7},{statuses[i % 6]}" for i in range(300)]
    (tmp_path / "r.csv").write_text("arrival_ts,prompt_tokens,output_tokens,decode_instance,"
                                    "status\n" + "\n".join(rows))
    part = read_requests(tmp_path / "r.csv", CTX)
    req = part.requests
    assert req["decode_instance"].tolist() == [f"d{i % 7}" for i in range(300)]
    expected = ["ok", "error", "timeout", "aborted", "ok", None]
    assert req["status"].astype("string").fillna("?").tolist() == [expected[i % 6] or "?" for i in range(300)]
    assert "'mystery' (50)" in part.warnings[0]


@pytest.mark.parametrize(("content", "message"), [
    (b"arrival_ts,prompt_tokens,output_tokens\n", "no data rows"),
    (b"arrival_ts,prompt_tokens,output_tokens\r\n\r\n", "no data rows"),
    (b"", "the file is empty"),
    (b"arrival_ts,prompt_tokens,output_tokens\n,1,2\nx,3,4\n", "no valid rows"),
    (b'{"arrival_ts": 1, "prompt_tokens": -1, "output_tokens": 2}\n', "no valid rows"),
])
def test_fatal_inputs_are_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        read_requests(path, CTX)
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


def test_truncated_parquet_and_all_bad_json(tmp_path: Path) -> None:
    raw = _canonical_frame(500).to_parquet()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(raw[: len(raw) - 100])
    with pytest.raises(InputError, match="not a readable Parquet file"):
        read_requests(cut, CTX)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"arrival_ts": [1], "prompt_tokens": 2, "output_tokens": 3}\n' * 3)
    with pytest.raises(InputError, match="none of its 3 line"):
        read_requests(broken, CTX)


def test_missing_required_column_lists_found_and_aliases(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("arrival_ts,prompt_tokens,tokens_out\n1,2,3\n")
    with pytest.raises(InputError) as err:
        read_requests(path, CTX)
    text = str(err.value)
    assert "no column for output_tokens (accepted: output_tokens, output_length" in text
    assert "found columns: arrival_ts, prompt_tokens, tokens_out" in text
    assert "docs/inputs/requests.md" in text


def test_not_a_request_file(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("hello world\nthis is not a table\n")
    with pytest.raises(InputError, match="not a per-request file"):
        read_requests(path, CTX)


def test_all_null_optional_column_is_not_reported_present(tmp_path: Path) -> None:
    table = pa.table({"arrival_ts": [1.0, 2.0], "prompt_tokens": [1, 2], "output_tokens": [3, 4],
                      "ttft_s": pa.array([None, None], pa.float64())})
    pq.write_table(table, tmp_path / "r.parquet")
    part = read_requests(tmp_path / "r.parquet", CTX)
    assert "ttft_s" not in part.request_columns
    assert any("columns with no values: ttft_s" in n for n in part.source.notes)


def test_cached_tokens_capped_at_prompt(tmp_path: Path) -> None:
    (tmp_path / "r.csv").write_text("arrival_ts,prompt_tokens,output_tokens,cached_tokens\n"
                                    "1,100,1,150\n2,100,1,50\n")
    part = read_requests(tmp_path / "r.csv", CTX)
    assert part.requests["cached_tokens"].tolist() == [100.0, 50.0]
    assert "capped at prompt_tokens" in part.warnings[0]


# --- issue 14: values no request can have, encodings, line ends, nesting ------------------------

T14 = 1_748_858_400.0


def _rows(n: int = 200) -> list[dict[str, float]]:
    return [{"request_id": f"r{i}", "arrival_ts": T14 + 0.25 * i, "prompt_tokens": 1000 + i,
             "output_tokens": 100 + i % 7, "ttft_s": 0.2, "kv_bytes": 3.3e8} for i in range(n)]


def _jsonl(path: Path, rows: list[dict[str, float]]) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_arrivals_far_from_the_capture_are_dropped_with_a_count(tmp_path: Path) -> None:
    rows = _rows()
    rows[5]["arrival_ts"] = 1.0  # 1970: one row took 12-24 GB in arrival_profile before
    rows[9]["arrival_ts"] = 1e300
    for r in rows[100::3]:
        r["arrival_ts"] *= 1000.0  # some rows in milliseconds
    part = read_requests(_jsonl(tmp_path / "r.jsonl", rows), CTX)
    text = "\n".join(part.warnings)
    assert "dropped 1 row(s) whose arrival_ts is more than 30 days away" in text
    assert "between 1970 and 2286 (35 above 1e+10)" in text
    assert part.source.rows == 200 - 36 and part.source.skipped == 36
    req = part.requests
    assert req["arrival_ts"].max() - req["arrival_ts"].min() < 3600


def test_impossible_lengths_and_latencies(tmp_path: Path) -> None:
    rows = _rows()
    for r in rows[::5]:
        r["ttft_s"] = 1e300
    rows[1]["prompt_tokens"] = 1e19  # overflowed to a mean prompt of -3.1e18 before
    rows[2]["output_tokens"] = -3
    rows[3]["kv_bytes"] = 1e17
    rows[4]["kv_bytes"] = 1e12  # 1e9 bytes per prompt token
    part = read_requests(_jsonl(tmp_path / "r.jsonl", rows), CTX)
    text = "\n".join(part.warnings)
    assert "40 negative or too large ttft_s value(s) treated as unknown (40 above 604800" in text
    assert "prompt_tokens is missing, not a number, negative or too large (1 above 1e+09" in text
    assert "output_tokens is missing, not a number, negative or too large (1 negative" in text
    assert "1 negative or too large kv_bytes value(s)" in text
    assert "1 kv_bytes value(s) above 1e+08 bytes per prompt token" in text
    req = part.requests
    assert len(req) == 198
    assert (req["prompt_tokens"] >= 0).all() and req["prompt_tokens"].max() < 1e9
    assert req["ttft_s"].max() == 0.2 and req["kv_bytes"].max() == 3.3e8


def test_invalid_utf8_in_jsonl_is_replaced_with_a_warning(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "r.jsonl", _rows(20))
    bad = (b'{"request_id": "\xff\xfe", "arrival_ts": 1748858401.1, "prompt_tokens": 5, '
           b'"output_tokens": 2}\n')
    path.write_bytes(path.read_bytes() + bad)
    part = read_requests(path, CTX)
    assert part.source.rows == 21
    assert any("1 text value(s) are not valid UTF-8" in w for w in part.warnings)
    assert "\ufffd\ufffd" in part.requests["request_id"].tolist()


def test_csv_invalid_utf8_and_wrong_field_count_is_one_skipped_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pyarrow cannot hand such a row to the invalid-row handler: it printed "Exception ignored
    ... Traceback" and failed the file; now the row is skipped like any malformed row."""
    lines = [b"arrival_ts,prompt_tokens,output_tokens"]
    lines += [f"{T14 + i},{100 + i},{10 + i}".encode() for i in range(50)]
    lines.insert(20, b"1748858400.5,\xff\xfe,3,4")
    lines.insert(30, b"1748858400.7,\xff,3")
    path = tmp_path / "r.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    part = read_requests(path, CTX)
    err = capsys.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err
    text = "\n".join(part.warnings)
    assert "skipped 1 malformed row(s) with the wrong number of fields" in text
    assert "invalid UTF-8" in text
    assert part.source.rows == 50  # the \xff prompt is not a number: dropped with a count


def test_csv_with_bare_cr_line_ends(tmp_path: Path) -> None:
    rows = [f"{T14 + i},{100 + i},{10 + i}" for i in range(30)]
    path = tmp_path / "r.csv"
    path.write_bytes(("arrival_ts,prompt_tokens,output_tokens\r" + "\r".join(rows) + "\r")
                     .encode())
    part = read_requests(path, CTX)
    assert part.source.rows == 30


def test_json_nested_100k_deep_is_a_skipped_line(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "r.jsonl", _rows(20))
    path.write_bytes(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n" + path.read_bytes()
                     + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    part = read_requests(path, CTX)
    assert part.source.rows == 20
    assert part.source.skipped == 2


def test_a_50_mb_first_line_is_read(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = list(_rows(20))
    rows[0] = {**rows[0], "junk": "x" * (50 << 20)}
    part = read_requests(_jsonl(tmp_path / "r.jsonl", rows), CTX)  # type: ignore[arg-type]
    assert part.source.rows == 20 and not part.warnings
