"""Open inputs whatever their compression, and sniff what they hold from their content.

The decompression-bomb guard the readers go through is in ``bounded_stream``.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from pdprobe.collectors.bounded_stream import DECOMPRESS_FREE_BYTES as DECOMPRESS_FREE_BYTES
from pdprobe.collectors.bounded_stream import DECOMPRESS_MAX_RATIO as DECOMPRESS_MAX_RATIO
from pdprobe.collectors.bounded_stream import BoundedStream, check_ratio, mib_text
from pdprobe.collectors.log_markers import SNIFF_MARKERS
from pdprobe.errors import InputError

GZIP_MAGIC: Final = b"\x1f\x8b"
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
PARQUET_MAGIC: Final = b"PAR1"
SNIFF_BYTES: Final = 64 * 1024
# When the first SNIFF_BYTES hold only blank or comment lines, sniffing reads on (doubling)
# up to this much: a capture that starts with a screenful of blank lines is not "empty", and
# a file with nothing in its first 16 MiB is not worth reading further to classify.
SNIFF_MAX_BYTES: Final = 16 << 20
# Compressed bytes fed to the zstd decompressor per step when reading a whole file: one step
# can expand at most ~32x128 KiB per KiB, so the ratio check runs before memory runs out.
ZSTD_FEED_BYTES: Final = 4 << 10
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
    """Open ``path`` for reading bytes, transparently decompressing gzip and zstd (bounded:
    a stream that expands like a decompression bomb raises ``InputError``)."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror})",
                         hint="check the path and permissions") from exc
    head = raw.read(4)
    raw.seek(0)
    kind = compression_of(head)
    inner: IO[bytes]
    if kind == "gzip":
        inner = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
    elif kind == "zstd":
        import zstandard

        inner = zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
    else:
        return raw
    return io.BufferedReader(BoundedStream(inner, raw, path), buffer_size=1 << 20)


def open_text(path: Path) -> IO[str]:
    """Open ``path`` as UTF-8 text (undecodable bytes replaced), decompressing if needed."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace", newline=None)


def _zstd_all(path: Path) -> bytes:
    """Decompress a whole .zst file; a frame cut short is an error (the stream reader would
    silently return only the intact blocks)."""
    import zstandard

    raw = path.read_bytes()
    view = memoryview(raw)
    out: list[bytes] = []
    size = 0
    pos = 0
    while pos < len(view):
        dobj = zstandard.ZstdDecompressor().decompressobj()
        while pos < len(view) and not dobj.eof:
            # fed in small steps so a bomb is caught before it fills memory
            piece = dobj.decompress(view[pos:pos + ZSTD_FEED_BYTES])
            pos += ZSTD_FEED_BYTES
            size += len(piece)
            out.append(piece)
            check_ratio(path, size, min(pos, len(view)))
        if not dobj.eof:
            raise InputError(f"{path}: zstd data is truncated (the last frame is incomplete)",
                             hint="copy the file again or decompress it to see how much is intact")
        rest = dobj.unused_data  # concatenated frames: what was fed past this frame's end
        pos = min(pos, len(view)) - len(rest)
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


def _meaningful(text: str) -> bool:
    """Whether ``text`` holds a line that is neither blank nor a non-metric ``#`` comment."""
    return any(ln.strip() and (not ln.lstrip().startswith("#")
                               or ln.lstrip().startswith(_METRIC_COMMENTS))
               for ln in text.splitlines())


def _read_head(fh: IO[bytes]) -> bytes:
    """The first ``SNIFF_BYTES``; more (doubling, up to ``SNIFF_MAX_BYTES``) while what was
    read holds only blank or comment lines, or one line not yet ended."""
    head = fh.read(SNIFF_BYTES)
    want = SNIFF_BYTES
    while len(head) == want and want < SNIFF_MAX_BYTES:
        text = head.decode("utf-8", errors="replace")
        cut = text.rfind("\n")
        if cut >= 0 and _meaningful(text[:cut]):
            break
        if cut < 0 and text.strip():
            break  # one long first line: its start is enough to classify it
        more = fh.read(want)
        head += more
        want *= 2
        if not more:
            break
    return head


def _head(path: Path) -> tuple[bytes, str | None]:
    with path.open("rb") as fh:
        raw_head = fh.read(len(GZIP_MAGIC) + 8 + 1)
        compression = compression_of(raw_head)
        if compression is None:
            fh.seek(0)
            return _read_head(fh), None
    try:
        with open_binary(path) as fh:
            head = _read_head(fh)
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
        return Sniffed("empty", "", compression,
                       "the file is empty" if len(head) < SNIFF_BYTES
                       else f"the file is empty (its first {mib_text(len(head))} are blank)")
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
    # Blank lines and comments that are not metric comments say nothing about the format.
    lines = [ln for ln in text.splitlines() if ln.strip()
             and (not ln.lstrip().startswith("#") or ln.lstrip().startswith(_METRIC_COMMENTS))
             ][:200]
    if not lines:
        return Sniffed("unknown", "", compression, "only comment lines at the start")
    if len(head) >= SNIFF_BYTES and not text.endswith("\n"):
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
            except (ValueError, RecursionError):  # not JSON, or nested too deep
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
