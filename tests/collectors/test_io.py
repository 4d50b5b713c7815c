"""Content sniffing and compressed-file opening."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard

from pdprobe.collectors.io import read_all_bytes, sniff
from pdprobe.errors import InputError

PROM = '# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 3 1700000000000\n'
VLLM_LOG = "(APIServer pid=1) INFO 06-11 12:33:49 [loggers.py:259] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%\n"


@pytest.mark.parametrize(
    ("name", "content", "kind", "fmt"),
    [
        ("a.data", '{"arrival_ts": 1, "prompt_tokens": 2, "output_tokens": 3}\n', "requests", "jsonl"),
        ("a.txt", "arrival_ts,prompt_tokens,output_tokens\n1,2,3\n", "requests", "csv"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.9799600,4808,10", "requests", "csv"),
        ("m.txt", PROM, "openmetrics", "openmetrics"),
        ("bare", 'vllm:num_requests_running{instance="a"} 3\nvllm:num_requests_waiting 1\n', "openmetrics", "openmetrics"),
        ("x.log", VLLM_LOG, "engine-log", "log"),
        ("empty.jsonl", "", "empty", ""),
        ("blank.csv", "\n\n  \n", "empty", ""),
        ("notes.txt", "hello world\nthis is prose\n", "unknown", ""),
        # merged logs: collector prefixes in front of the engine's line
        ("merged.log", "[pod/vllm-decode-0/vllm] " + VLLM_LOG, "engine-log", "log"),
        ("merged.log", "decode-1   | 2026-11-30T10:00:00.000000000Z " + VLLM_LOG, "engine-log", "log"),
        ("merged.log", "2026-11-30T10:00:00+0000 gpu1 vllm[7]: " + VLLM_LOG, "engine-log", "log"),
        # JSON-lines log exports (Fluent Bit, Vector, Loki logcli) are logs, not request records
        ("export.jsonl", json.dumps({"log": VLLM_LOG, "kubernetes": {"pod_name": "p0"}}) + "\n",
         "engine-log", "jsonl"),
        ("export.json", json.dumps({"message": "startup", "kubernetes": {"pod_name": "p0"},
                                    "timestamp": "2026-11-30T10:00:00Z"}) + "\n", "engine-log", "jsonl"),
        ("loki.jsonl", json.dumps({"labels": {"pod": "p0"}, "line": VLLM_LOG,
                                   "timestamp": "2026-11-30T10:00:00Z"}) + "\n", "engine-log", "jsonl"),
        # a request record that happens to carry a `message` string stays a request file
        ("req.jsonl", json.dumps({"arrival_ts": 1, "prompt_tokens": 2, "output_tokens": 3,
                                  "message": "ok"}) + "\n", "requests", "jsonl"),
    ],
)
def test_sniff_by_content_not_name(tmp_path: Path, name: str, content: str, kind: str, fmt: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    sniffed = sniff(path)
    assert (sniffed.kind, sniffed.format) == (kind, fmt)


def test_sniff_binary(tmp_path: Path) -> None:
    path = tmp_path / "blob.csv"
    path.write_bytes(b"\x00\x01\x02garbage\x00" * 10)
    assert sniff(path).kind == "binary"


def test_sniff_and_read_gzip_and_zstd(tmp_path: Path) -> None:
    gz = tmp_path / "m.prom.gz"
    gz.write_bytes(gzip.compress(PROM.encode()))
    zs = tmp_path / "m.prom.zst"
    zs.write_bytes(zstandard.ZstdCompressor().compress(PROM.encode()))
    for path, compression in ((gz, "gzip"), (zs, "zstd")):
        sniffed = sniff(path)
        assert sniffed.kind == "openmetrics"
        assert sniffed.compression == compression
        assert read_all_bytes(path).decode() == PROM


def test_truncated_gzip_is_one_clear_error(tmp_path: Path) -> None:
    data = gzip.compress((PROM * 2000).encode())
    path = tmp_path / "cut.prom.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        read_all_bytes(path)
    assert "cut.prom.gz" in err.value.one_line()
    assert "truncated or corrupt" in err.value.one_line()
    assert "\n" not in err.value.one_line()


def test_parquet_magic(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "requests.bin"
    pq.write_table(pa.table({"arrival_ts": [1.0], "prompt_tokens": [2], "output_tokens": [3]}), path)
    assert sniff(path).kind == "requests"
    pq.write_table(
        pa.table({"x": [1]}).replace_schema_metadata({b"pdprobe.capture": b"1"}), path
    )
    assert sniff(path).kind == "capture"


# --- issue 14: decompression bombs, blank heads, long first lines ---------------------------


def test_gzip_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    """A gzip of 300 MiB of spaces (300 KiB compressed) stops at the ratio cap, not in memory."""
    from pdprobe.collectors.io import DECOMPRESS_FREE_BYTES, DECOMPRESS_MAX_RATIO

    path = tmp_path / "spaces.jsonl.gz"
    comp = zlib_gzip(b" " * (1 << 20), 300)
    path.write_bytes(comp)
    assert DECOMPRESS_FREE_BYTES < (300 << 20) and DECOMPRESS_MAX_RATIO * len(comp) < (300 << 20)
    with pytest.raises(InputError, match=r"expands more than 200x .*decompression bomb"):
        read_all_bytes(path)


def test_zstd_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "spaces.log.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=19).compress(b" " * (256 << 20)))
    with pytest.raises(InputError, match=r"expands more than 200x"):
        read_all_bytes(path)


def zlib_gzip(block: bytes, times: int) -> bytes:
    """gzip of ``block`` repeated ``times`` times, compressed in a stream (no big buffer)."""
    import io

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as fh:
        for _ in range(times):
            fh.write(block)
    return buf.getvalue()


def test_concatenated_zstd_frames_read_whole(tmp_path: Path) -> None:
    a = zstandard.ZstdCompressor().compress(b"hello\n" * 50_000)
    b = zstandard.ZstdCompressor().compress(b"world\n")
    path = tmp_path / "x.zst"
    path.write_bytes(a + b + a)
    assert read_all_bytes(path) == b"hello\n" * 50_000 + b"world\n" + b"hello\n" * 50_000


@pytest.mark.parametrize("compress", [False, True])
def test_sniff_reads_past_a_blank_head(tmp_path: Path, compress: bool) -> None:
    body = b"\n" * (70 << 10) + b'{"arrival_ts": 1, "prompt_tokens": 2, "output_tokens": 3}\n'
    path = tmp_path / ("a.jsonl.gz" if compress else "a.jsonl")
    path.write_bytes(gzip.compress(body) if compress else body)
    got = sniff(path)
    assert (got.kind, got.format) == ("requests", "jsonl")


def test_sniff_skips_comment_lines_but_keeps_metric_comments(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text("# exported by hand\n# columns below\n"
                    '{"arrival_ts": 1, "prompt_tokens": 2, "output_tokens": 3}\n')
    assert sniff(path).kind == "requests"
    only = tmp_path / "only.txt"
    only.write_text("# nothing but a comment\n")
    assert sniff(only).kind == "unknown"
    prom = tmp_path / "m.prom"
    prom.write_text(PROM)
    assert sniff(prom).kind == "openmetrics"


def test_sniff_says_how_much_was_blank(tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b" \n" * (9 << 20))
    got = sniff(path)
    assert got.kind == "empty" and "first 16 MiB are blank" in got.why


def test_sniff_classifies_a_50_mb_first_line(tmp_path: Path) -> None:
    line = json.dumps({"arrival_ts": 1, "prompt_tokens": 2, "output_tokens": 3,
                       "junk": "x" * (50 << 20)})
    path = tmp_path / "long.jsonl"
    path.write_text(line + "\n")
    assert (sniff(path).kind, sniff(path).format) == ("requests", "jsonl")
