"""Open inputs whatever their compression, and sniff what they hold from their content."""

from __future__ import annotations

import gzip
import io
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from pdprobe.collectors.log_markers import SNIFF_MARKERS
from pdprobe.errors import InputError

GZIP_MAGIC: Final = b"\x1f\x8b"
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
PARQUET_MAGIC: Final = b"PAR1"
SNIFF_BYTES: Final = 64 * 1024
CAPTURE_METADATA_KEY: Final = b"pdprobe.capture"

# A sample line; older `promtool tsdb dump` prints `{__name__="x", ...} value ts` with no name.
_METRIC_SAMPLE = re.compile(
    r"^([a-zA-Z_:][a-zA-Z0-9_:]*)?(\{[^}]*\})?\s+[-+]?([0-9.eE+-]+|NaN|[+-]?Inf)(\s+[-+]?[0-9.eE+-]+)?\s*$"
)
_METRIC_COMMENTS = ("# HELP", "# TYPE", "# EOF", "# UNIT", "# pdprobe-scrape-ts")
# Substrings that mark engine-log lines, stats and failure-only lines alike (one list, kept beside
# the line parsers that read them).
_LOG_MARKERS: Final = SNIFF_MARKERS
# JSON-lines log exports: where the log text is (Vector/CloudWatch `message`, Fluent Bit/Docker
# `log`, Loki logcli `line`, journald `MESSAGE`) and metadata keys no request record carries.
_LOG_TEXT_FIELDS: Final = ("message", "log", "line", "MESSAGE")
_LOG_METADATA_FIELDS: Final = ("kubernetes", "labels", "stream", "logStreamName", "_HOSTNAME",
                               "SYSLOG_IDENTIFIER", "_SYSTEMD_UNIT", "container_name",
                               "source_type", "file")


def default_file_mode() -> int:
    """The mode ``open()`` gives a new file (0666 less the umask); temp files are 0600."""
    import os

    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def compression_of(head: bytes) -> str | None:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for reading bytes, transparently decompressing gzip and zstd."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror})",
                         hint="check the path and permissions") from exc
    head = raw.read(4)
    raw.seek(0)
    kind = compression_of(head)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return raw


def open_text(path: Path) -> IO[str]:
    """Open ``path`` as UTF-8 text (undecodable bytes replaced), decompressing if needed."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace", newline=None)


def _zstd_all(path: Path) -> bytes:
    """Decompress a whole .zst file; a frame cut short is an error (the stream reader would
    silently return only the intact blocks)."""
    import zstandard

    raw = path.read_bytes()
    out = []
    while raw:
        dobj = zstandard.ZstdDecompressor().decompressobj()
        out.append(dobj.decompress(raw))
        if not dobj.eof:
            raise InputError(f"{path}: zstd data is truncated (the last frame is incomplete)",
                             hint="copy the file again or decompress it to see how much is intact")
        raw = dobj.unused_data  # concatenated frames
    return b"".join(out)


def read_all_bytes(path: Path) -> bytes:
    """The whole decompressed content, with a clear error for truncated archives."""
    if _compression_of_file(path) == "zstd":
        try:
            return _zstd_all(path)
        except InputError:
            raise
        except Exception as exc:  # zstandard.ZstdError: corrupt data
            raise InputError(f"{path}: zstd data is corrupt ({exc})",
                             hint="copy the file again") from exc
    try:
        with open_binary(path) as fh:
            return fh.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(f"{path}: compressed data is truncated or corrupt ({exc})",
                         hint="copy the file again or decompress it to see how much is intact") from exc
    except Exception as exc:  # zstandard raises its own ZstdError
        if type(exc).__name__ == "ZstdError":
            raise InputError(f"{path}: zstd data is truncated or corrupt ({exc})",
                             hint="copy the file again") from exc
        raise


@dataclass(frozen=True)
class Sniffed:
    """What a file holds, decided from its first bytes."""

    kind: str  # requests | openmetrics | engine-log | capture | benchmark | unknown | empty | binary
    format: str  # parquet | jsonl | csv | openmetrics | log | a benchmark layout | ""
    compression: str | None
    why: str  # for messages: what made us decide


def _compression_of_file(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return compression_of(fh.read(4))
    except OSError:
        return None


def _head(path: Path) -> tuple[bytes, str | None]:
    with path.open("rb") as fh:
        raw_head = fh.read(SNIFF_BYTES)
    compression = compression_of(raw_head)
    if compression is None:
        return raw_head, None
    try:
        with open_binary(path) as fh:
            head = fh.read(SNIFF_BYTES)
        if not head and len(raw_head) > len(GZIP_MAGIC) + 8:
            # compressed bytes that decode to nothing: cut inside the first block
            raise InputError(f"{path}: {compression} data is truncated or corrupt "
                             "(no complete block)", hint="copy the file again")
        return head, compression
    except (EOFError, OSError, zlib.error) as exc:
        raise InputError(f"{path}: {compression} data is truncated or corrupt ({exc})",
                         hint="copy the file again") from exc
    except Exception as exc:
        if type(exc).__name__ == "ZstdError":
            raise InputError(f"{path}: zstd data is corrupt ({exc})", hint="copy the file again") from exc
        raise


def sniff(path: Path) -> Sniffed:
    """Classify ``path`` by content (magic bytes, then the shape of its first lines)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", hint="check the path") from exc
    if not stat.S_ISREG(mode):
        # a FIFO or device would block or stream forever; captures are regular files
        raise InputError(f"{path}: not a regular file", hint="copy the capture to a file first")
    try:
        head, compression = _head(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", hint="check the path") from exc
    if not head.strip():
        return Sniffed("empty", "", compression, "the file is empty")
    if head.startswith(PARQUET_MAGIC):
        if CAPTURE_METADATA_KEY in _parquet_footer(path):
            return Sniffed("capture", "parquet", compression, "parquet with pdprobe capture metadata")
        return Sniffed("requests", "parquet", compression, "parquet magic bytes")
    if b"\x00" in head:
        return Sniffed("binary", "", compression, "binary content (NUL bytes)")
    text = head.decode("utf-8", errors="replace")
    benchmark = _sniff_benchmark(text, complete=len(head) < SNIFF_BYTES, compression=compression)
    if benchmark is not None:
        return benchmark
    lines = [ln for ln in text.splitlines()[:200] if ln.strip()]
    if len(text) == SNIFF_BYTES and lines:
        lines = lines[:-1] or lines  # the last line may be cut in the middle
    first = lines[0].lstrip("\ufeff").strip()
    if first.startswith("{__name__="):
        return Sniffed("openmetrics", "openmetrics", compression, "promtool tsdb dump lines")
    if first.startswith("{"):
        # A log collector's JSON-lines export (Loki logcli, Vector, Fluent Bit, journalctl -o
        # json, CloudWatch) holds the log text with its source's metadata: an engine log.
        import json

        exported = 0
        sample = lines[:20]
        for ln in sample:
            try:
                obj = json.loads(ln)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            said = next((obj[k] for k in _LOG_TEXT_FIELDS if isinstance(obj.get(k), str)), None)
            if said is not None and (any(k in obj for k in _LOG_METADATA_FIELDS)
                                     or any(marker in said for marker in _LOG_MARKERS)):
                exported += 1
        if exported * 2 > len(sample):
            return Sniffed("engine-log", "jsonl", compression,
                           "JSON lines of a log export (log text with its source's metadata)")
        return Sniffed("requests", "jsonl", compression, "JSON object per line")
    if first.startswith(_METRIC_COMMENTS):
        return Sniffed("openmetrics", "openmetrics", compression, "# HELP/# TYPE lines")
    sample_lines = sum(1 for ln in lines[:50]
                       if ln.startswith(_METRIC_COMMENTS) or _METRIC_SAMPLE.match(ln.strip()))
    if sample_lines >= max(1, len(lines[:50]) // 2):
        return Sniffed("openmetrics", "openmetrics", compression, "metric sample lines")
    if any(marker in ln for ln in lines for marker in _LOG_MARKERS):
        return Sniffed("engine-log", "log", compression, "engine log lines")
    from pdprobe.collectors.requests_file import required_columns_named

    # One known request column is enough to call it a request file: the reader then names
    # exactly which required column is missing, which helps more than "unknown format".
    for fmt, delimiter in (("csv", ","), ("tsv", "\t")):
        if required_columns_named(first, delimiter) >= 1:
            return Sniffed("requests", fmt, compression, f"{fmt.upper()} header")
    return Sniffed("unknown", "", compression, "no known request, metric or log format")


def _sniff_benchmark(text: str, complete: bool, compression: str | None) -> Sniffed | None:
    """A load generator's output (vLLM, SGLang, AIPerf, guidellm, inference-perf), by its keys.

    A summary without per-request data is ``unknown`` with a reason saying how to re-run.
    """
    if text.lstrip("\ufeff \t\r\n")[:1] not in ("{", "["):
        return None
    from pdprobe.collectors.benchmarks.detect import RERUN_HINT, detect

    found = detect(text, complete)
    if found is None:
        return None
    fmt, why, detailed = found
    if not detailed:
        return Sniffed("unknown", "", compression, f"{why}: {RERUN_HINT[fmt]}")
    return Sniffed("benchmark", fmt, compression, why)


def _parquet_footer(path: Path) -> bytes:
    """The parquet footer (schema metadata lives there), read without pyarrow."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 8))
            tail = fh.read(8)
            if len(tail) < 8 or tail[4:] != PARQUET_MAGIC:
                return b""
            footer_len = int.from_bytes(tail[:4], "little")
            fh.seek(max(0, size - 8 - footer_len))
            return fh.read(footer_len)
    except OSError:
        return b""
