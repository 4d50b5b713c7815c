"""Decompression-bomb guard: a decompressed stream that stops when it expands like a bomb.

``BoundedStream`` wraps a gzip or zstd reader for ``pdprobe.collectors.io.open_binary``;
``check_ratio`` is the same test for whole-file decompression (``read_all_bytes``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Any, Final

from pdprobe.errors import InputError

# Decompression bombs: once past DECOMPRESS_FREE_BYTES of output, a compressed input may not
# expand more than DECOMPRESS_MAX_RATIO times the compressed bytes read so far. Real captures
# compress 10-40x (text metrics ~30x, logs ~15x); gzip tops out at ~1030x, which only runs
# of one byte reach (a 2.5 MB gzip of spaces is 2.5 GB).
DECOMPRESS_FREE_BYTES: Final = 64 << 20
DECOMPRESS_MAX_RATIO: Final = 200
# Chunks read when a whole decompressed stream is wanted.
READ_CHUNK_BYTES: Final = 4 << 20


def mib_text(n: int) -> str:
    """A byte count for messages: whole MiB from 1 MiB up, else whole KiB."""
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def _bomb(path: Path, out: int, consumed: int) -> InputError:
    return InputError(
        f"{path}: expands more than {DECOMPRESS_MAX_RATIO}x when decompressed "
        f"({mib_text(out)} from {mib_text(consumed)}): not a capture "
        "(a decompression bomb?)",
        hint="decompress it yourself if it is genuine and pass the result")


def check_ratio(path: Path, out: int, consumed: int) -> None:
    """Raise ``InputError`` when ``out`` decompressed bytes from ``consumed`` compressed ones
    look like a decompression bomb (see ``DECOMPRESS_MAX_RATIO``)."""
    if out > DECOMPRESS_FREE_BYTES and out > DECOMPRESS_MAX_RATIO * max(consumed, 1):
        raise _bomb(path, out, consumed)


class BoundedStream(io.RawIOBase):
    """A decompressed stream that stops with ``InputError`` when it expands like a bomb."""

    def __init__(self, inner: IO[bytes], raw: IO[bytes], path: Path) -> None:
        super().__init__()
        self._inner, self._raw, self._path = inner, raw, path
        self._out = 0

    def readable(self) -> bool:
        return True

    _pending: BaseException | None = None

    def readinto(self, b: Any) -> int:
        if self._pending is not None:
            raise self._pending
        try:
            # read1: one step of the decompressor, so an error loses nothing read before it
            data = self._inner.read1(len(b))  # type: ignore[attr-defined]
            n = len(data)
            b[:n] = data
        except InputError:
            raise
        except Exception as exc:  # truncated or corrupt: first hand over what came before
            if self._out == 0:
                raise
            # A buffered read() that gathers several raw reads would drop them with the error:
            # end this read here (0 = end of data) and raise on the next one.
            self._pending = exc
            return 0
        self._out += n
        check_ratio(self._path, self._out, self._raw.tell())
        return n

    def readall(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            buf = bytearray(READ_CHUNK_BYTES)
            n = self.readinto(buf)
            if not n:
                if self._pending is not None:
                    raise self._pending
                return b"".join(chunks)
            chunks.append(bytes(memoryview(buf)[:n]))

    def close(self) -> None:
        try:
            self._inner.close()
            self._raw.close()
        finally:
            super().close()
