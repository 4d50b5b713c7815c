"""The OpenMetrics / Prometheus text lexer: lines, comments and samples of a whole file at once.

Vectorised over the file's bytes (numpy for line and token boundaries, pyarrow for the string
slices and number parsing); no Python loop runs per sample line. ``parse_samples`` returns the
sample lines' series keys, values and timestamps; what a series *means* (names, labels, roles)
is the series policy's business (``openmetrics_series``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa


# How many offending line numbers / metric names a warning lists.
SHOWN_EXAMPLES: Final = 5


SCRAPE_TS_MARKER: Final = "pdprobe-scrape-ts"


_NAME_RE: Final = r"[a-zA-Z_:][a-zA-Z0-9_:]*"


_LABELS_RE: Final = r'(?:[^"}]|"(?:[^"\\]|\\.)*")*'


_NUM_RE: Final = (r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                  r"|[Ii]nf(?:inity)?|NaN|nan)")


_SERIES_LINE: Final = re.compile(
    rf"^\s*((?:{_NAME_RE})?(?:\{{{_LABELS_RE}\}})?)\s+({_NUM_RE})(?:\s+({_NUM_RE}))?\s*(?:#.*)?$")


SERIES_KEY: Final = re.compile(rf"^({_NAME_RE})?(?:\{{({_LABELS_RE})\}})?$")


_TYPE_LINE: Final = re.compile(r"^#\s*TYPE\s+(\S+)\s+(\S+)")


_MARKER_LINE: Final = re.compile(rf"^#\s*{SCRAPE_TS_MARKER}\s+(\S+)")


_EOF_LINE: Final = re.compile(r"^#\s*EOF\s*$")


def label_pattern(label: str) -> str:
    """A regex taking ``label``'s value, consuming whole ``k="v"`` pairs from the start so a
    comma or ``x=`` inside another label's quoted value cannot fake a match."""
    pair = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"\s*,'
    return rf'^(?:{pair})*?\s*{re.escape(label)}\s*=\s*"(?P<v>(?:[^"\\]|\\.)*)"'


_ESCAPES: Final = re.compile(r"\\(.)")


def unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPES.sub(lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), value)


@dataclass
class Lines:
    """Line boundaries of the decompressed content."""

    data: bytes
    buf: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


@dataclass
class Samples:
    """Every sample line in file order (known and unknown names)."""

    line: np.ndarray  # 1-based line numbers
    sid: np.ndarray  # index into keys
    value_tok: pa.Array  # binary tokens
    ts_tok: pa.Array  # binary tokens; empty when absent
    keys: list[str]  # distinct series keys (name{labels})


@dataclass
class Notes:
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: int = 0


# Byte scans run over chunks of this size so the temporary masks stay small (a whole-buffer
# mask of a 200 MB file costs more in page faults than the comparison itself).
SCAN_CHUNK_BYTES: Final = 8 << 20


def _positions(buf: np.ndarray, byte_values: Sequence[int]) -> list[np.ndarray]:
    """Sorted offsets of each of ``byte_values`` in ``buf``."""
    found: list[list[np.ndarray]] = [[] for _ in byte_values]
    for lo in range(0, len(buf), SCAN_CHUNK_BYTES):
        chunk = buf[lo:lo + SCAN_CHUNK_BYTES]
        for i, value in enumerate(byte_values):
            found[i].append(np.flatnonzero(chunk == value) + lo)
    return [np.concatenate(parts) if parts else np.empty(0, dtype=np.int64) for parts in found]


def split_lines(data: bytes) -> Lines:
    buf = np.frombuffer(data, dtype=np.uint8)
    (nl,) = _positions(buf, [10])
    starts = np.concatenate(([0], nl + 1)).astype(np.int64)
    ends = np.concatenate((nl, [len(buf)])).astype(np.int64)
    if data.startswith(b"\xef\xbb\xbf"):
        starts[0] = 3
    cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13) if len(buf) else ends > starts
    ends = ends - cr.astype(np.int64)
    return Lines(data, buf, starts, ends)


def _slices(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Byte ranges of ``buf`` (in increasing, non-overlapping order) as a binary array."""
    import pyarrow as pa

    n = len(starts)
    if n == 0:
        return pa.array([], type=pa.large_binary())
    offsets = np.empty(2 * n + 1, dtype=np.int64)
    offsets[0:2 * n:2] = starts
    offsets[1:2 * n:2] = ends
    offsets[2 * n] = ends[-1]
    if np.any(np.diff(offsets) < 0) or offsets[0] < 0 or offsets[-1] > len(buf):
        # Arrow trusts these offsets; a bad one would read out of bounds.
        raise RuntimeError("internal error: token ranges out of order")
    interleaved = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 2 * n, [None, pa.py_buffer(offsets), pa.py_buffer(buf)])
    return interleaved.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))


@dataclass
class Comments:
    types: dict[str, str]
    marker_lines: np.ndarray  # line numbers of `# pdprobe-scrape-ts` lines
    marker_ts: np.ndarray
    eof_lines: np.ndarray


def comment_lines(lines: Lines) -> Comments:
    """``# TYPE`` declarations, scrape-time markers and ``# EOF`` lines (distinct lines only)."""
    buf, starts, ends = lines.buf, lines.starts, lines.ends
    nonblank = ends > starts
    is_comment = np.zeros(len(starts), dtype=bool)
    is_comment[nonblank] = buf[starts[nonblank]] == ord("#")
    idx = np.flatnonzero(is_comment)
    types: dict[str, str] = {}
    marker_lines: list[int] = []
    marker_ts: list[float] = []
    eof_lines: list[int] = []
    if idx.size:
        enc = _slices(buf, starts[idx], ends[idx]).dictionary_encode()
        codes = enc.indices.to_numpy(zero_copy_only=False)
        uniq = [b.decode("utf-8", "replace") for b in enc.dictionary.to_pylist()]
        marker_codes: dict[int, float] = {}
        eof_codes: set[int] = set()
        for code, text in enumerate(uniq):
            if m := _TYPE_LINE.match(text):
                types[m.group(1)] = m.group(2).lower()
            elif m := _MARKER_LINE.match(text):
                try:
                    marker_codes[code] = float(m.group(1))
                except ValueError:
                    continue
            elif _EOF_LINE.match(text):
                eof_codes.add(code)
        if marker_codes:
            sel = np.isin(codes, list(marker_codes))
            marker_lines = (idx[sel] + 1).tolist()
            marker_ts = [marker_codes[int(c)] for c in codes[sel]]
        if eof_codes:
            eof_lines = (idx[np.isin(codes, list(eof_codes))] + 1).tolist()
    return Comments(types, np.asarray(marker_lines, dtype=np.int64),
                     np.asarray(marker_ts, dtype=np.float64),
                     np.asarray(eof_lines, dtype=np.int64))


def parse_samples(lines: Lines, path: Path) -> tuple[Samples, np.ndarray]:
    """Split sample lines into series key, value and timestamp tokens.

    Fast path (numpy over bytes): the value and timestamp are the last whitespace-separated
    tokens; the line has a timestamp when the text before the value token is a complete series
    (ends with ``}`` or has no ``{``). Everything else goes through ``_SERIES_LINE``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    buf, starts, ends = lines.buf, lines.starts, lines.ends
    nonblank = ends > starts
    first = np.zeros(len(starts), dtype=np.uint8)
    first[nonblank] = buf[starts[nonblank]]
    cand = np.flatnonzero(nonblank & (first != ord("#")))
    s, e = starts[cand], ends[cand]

    # Tabs are rare: skip scanning for them when there are none.
    tabs = b"\t" in lines.data
    ws, hashes, braces, *tab = _positions(buf, [32, ord("#"), ord("{"), *([9] if tabs else [])])
    if tab:
        ws = np.sort(np.concatenate((ws, tab[0])), kind="stable")
    k = np.searchsorted(ws, e, side="left") - 1
    p1 = np.where(k >= 0, ws[np.maximum(k, 0)], -1) if ws.size else np.full(len(s), -1)
    ok = (p1 > s) & (p1 < e - 1)
    p2 = np.where(k >= 1, ws[np.maximum(k - 1, 0)], -1) if ws.size else np.full(len(s), -1)
    has_p2 = ok & (p2 > s)
    double_ws = has_p2 & (p2 == p1 - 1)
    first_ws = ws[np.minimum(np.searchsorted(ws, s), max(ws.size - 1, 0))] if ws.size else e
    leading_ws = first_ws == s
    j = np.searchsorted(hashes, s)
    has_hash = (j < hashes.size) & (hashes[np.minimum(j, max(hashes.size - 1, 0))] < e) \
        if hashes.size else np.zeros(len(s), dtype=bool)
    jb = np.searchsorted(braces, s)
    first_brace = braces[np.minimum(jb, max(braces.size - 1, 0))] if braces.size else e
    brace_before_p2 = (jb < braces.size) & (first_brace < p2) if braces.size else \
        np.zeros(len(s), dtype=bool)
    closed = buf[np.maximum(p2 - 1, 0)] == ord("}")
    has_ts = has_p2 & ~double_ws & (closed | ~brace_before_p2)
    fast = ok & ~double_ws & ~has_hash & ~leading_ws
    # A no-timestamp line whose key still has whitespace before the value (`x{a="b c"}  1`)
    # is fine; one with two spaces before the value is not split here.
    series_end = np.where(has_ts, p2, p1)
    val_start = np.where(has_ts, p2 + 1, p1 + 1)
    val_end = np.where(has_ts, p1, e)
    fast &= series_end > s
    fast &= ~((~has_ts) & (buf[np.maximum(series_end - 1, 0)] == 32))

    fi = np.flatnonzero(fast)
    key_tok = _slices(buf, s[fi], series_end[fi])
    val_tok = _slices(buf, val_start[fi], val_end[fi])
    ts_s = np.where(has_ts[fi], p1[fi] + 1, e[fi])
    ts_tok = _slices(buf, ts_s, e[fi])
    line_no = cand[fi] + 1

    # Slow path: per-line regular expression for what the fast path left.
    slow = cand[~fast]
    bad: list[int] = []
    if slow.size:
        sk: list[bytes] = []
        sv: list[bytes] = []
        st: list[bytes] = []
        sl: list[int] = []
        raw = lines.data
        for li in slow.tolist():
            text = raw[starts[li]:ends[li]].decode("utf-8", "replace")
            if not text.strip():
                continue
            m = _SERIES_LINE.match(text)
            if m is None or not m.group(1):
                bad.append(li + 1)
                continue
            sk.append(m.group(1).encode())
            sv.append(m.group(2).encode())
            st.append((m.group(3) or "").encode())
            sl.append(li + 1)
        if sl:
            key_tok = pa.concat_arrays([key_tok, pa.array(sk, type=pa.large_binary())])
            val_tok = pa.concat_arrays([val_tok, pa.array(sv, type=pa.large_binary())])
            ts_tok = pa.concat_arrays([ts_tok, pa.array(st, type=pa.large_binary())])
            line_no = np.concatenate((line_no, np.asarray(sl, dtype=np.int64)))
            order = np.argsort(line_no, kind="stable")
            take = pa.array(order)
            key_tok, val_tok, ts_tok = key_tok.take(take), val_tok.take(take), ts_tok.take(take)
            line_no = line_no[order]

    # Validate numbers (all rows, so garbage does not pass as an unknown metric).
    num = rf"^{_NUM_RE}$"
    good = pc.match_substring_regex(val_tok, num)
    ts_empty = pc.equal(pc.binary_length(ts_tok), 0)
    good = pc.and_(good, pc.or_(ts_empty, pc.match_substring_regex(ts_tok, num)))
    good_np = good.to_numpy(zero_copy_only=False)
    enc = key_tok.dictionary_encode()
    sid = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    keys = [b.decode("utf-8", "replace") for b in enc.dictionary.to_pylist()]
    key_ok = np.array([SERIES_KEY.match(k) is not None for k in keys], dtype=bool)
    if keys:
        good_np &= key_ok[sid]
    if not good_np.all():
        bad.extend(line_no[~good_np].tolist())
        keep = pa.array(good_np)
        val_tok, ts_tok = val_tok.filter(keep), ts_tok.filter(keep)
        sid, line_no = sid[good_np], line_no[good_np]
    return (Samples(line_no, sid, val_tok, ts_tok, keys),
            np.asarray(sorted(bad), dtype=np.int64))


def to_float(tokens: pa.Array) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(tokens) == 0:
        return np.empty(0, dtype=np.float64)
    empty = pc.equal(pc.binary_length(tokens), 0)
    filled = pc.if_else(empty, pa.scalar(b"nan", type=pa.large_binary()), tokens)
    arr = pc.cast(filled.cast(pa.large_string()), pa.float64())
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
