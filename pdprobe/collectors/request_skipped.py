"""What a streamed CSV/TSV or JSON Lines read skips, placed in the file: the line ends before
a piece (counted only for a piece with something skipped) and the malformed CSV rows, worded as
the whole-file reader words them (``request_formats._read_delimited``). The JSON Lines
counterpart is ``request_jsonl.SkippedLines``; the reading itself is ``request_stream``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.collectors.request_values import QUOTE_FIRST

if TYPE_CHECKING:
    import pyarrow as pa

# Bytes read at a time to count line ends (error path only; as large as a streamed piece).
COUNT_BYTES: Final = 16 << 20


class LinesBefore:
    """Line ends in ``source`` before an offset, counted only when asked (a piece with broken
    lines), from where the last count stopped: offsets must not decrease."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.offset = 0
        self.lines = 0

    def before(self, offset: int) -> int:
        while self.offset < offset:
            n = min(COUNT_BYTES, offset - self.offset)
            buf = self.source.read_at(n, self.offset)  # no seek: the pieces' reads go on
            self.lines += int(np.count_nonzero(np.frombuffer(buf, dtype=np.uint8) == 0x0A))
            self.offset += n
        return self.lines


def verified_rows(piece: pa.Buffer, rows: list[tuple[int | None, str]]
              ) -> list[tuple[int, str]] | None:
    """The malformed ``rows`` pyarrow reported for ``piece`` as (line in the piece, text) when
    each text is its line's bytes (less a final CR), as ``request_formats._line_of`` finds a
    row by its text in the whole file; None when one is not (the whole-file reader words it)."""
    buf = np.frombuffer(piece, dtype=np.uint8)
    ends = np.flatnonzero(buf == 0x0A)
    if buf.size and buf[-1] != 0x0A:  # the file's last line, without a line end
        ends = np.append(ends, buf.size)
    out: list[tuple[int, str]] = []
    for number, text in rows:
        if number is None or not 1 <= number <= ends.size:
            return None
        lo = int(ends[number - 2]) + 1 if number > 1 else 0
        raw = bytes(buf[lo:int(ends[number - 1])])
        wanted = text.encode("utf-8", errors="replace")
        if raw not in (wanted, wanted + b"\r"):
            return None
        out.append((number, text))
    return out


class MalformedRows:
    """The malformed rows (the wrong number of fields) a streamed CSV/TSV read skipped after
    its first piece, worded as ``request_formats._read_delimited`` words them: the count, and
    the line of the first ``QUOTE_FIRST`` rows, each given as the first line holding the
    same text (the whole-file reader searches the file for the text). Memory holds one piece,
    and a file with one bad row is parsed once instead of again whole."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.shown: list[int] = []
        self._first: dict[str, int] = {}  # text -> its first line, among the shown rows

    def add(self, rows: list[tuple[int, str]]) -> None:
        """Rows of one piece as (line in the file, text), pieces in file order."""
        for line, text in rows:
            if self.count < QUOTE_FIRST:
                self.shown.append(self._first.setdefault(text, line))
            self.count += 1

    def outcome(self) -> tuple[list[str], int]:
        """The warnings and the number of rows skipped, as ``_read_delimited`` returns them."""
        if not self.count:
            return [], 0
        where = ", ".join(str(n) for n in self.shown)
        more = ", ..." if self.count > QUOTE_FIRST else ""
        return [f"{self.path}: skipped {self.count} malformed row(s) with the wrong number of "
                f"fields (line {where}{more})"], self.count
