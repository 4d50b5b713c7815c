"""Read Prometheus text exposition and OpenMetrics files into the dataset's metric tables.

Accepted inputs (gzip/zstd too): ``promtool tsdb dump-openmetrics`` output (seconds with
fractions, ``# EOF``), ``promtool tsdb dump`` output of older promtools
(``{__name__="...", ...} value ts_ms``), Prometheus text with millisecond timestamps, and
concatenated ``/metrics`` scrapes without timestamps. Only metric names in
``metric_catalog`` are kept; everything else is counted and summarised.

Parsing is columnar: line and token boundaries are found with numpy over the raw bytes, the
tokens become pyarrow arrays (cast to floats, dictionary-encoded series keys), and labels are
pulled with ``pyarrow.compute.extract_regex`` from the (few) distinct series only. Lines the
fast path cannot split (exemplars, odd whitespace, ``#`` inside label values) go through a
per-line regular expression.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe import signals as S
from pdprobe.collectors import metric_catalog as mc
from pdprobe.collectors import metric_names as mn
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.io import read_all_bytes
from pdprobe.collectors.metric_roles import (
    ENGINE_PREFERENCE,
    ENGINE_PRIORITY,
    UNLISTED_ENGINE_PRIORITY,
    LabelRoles,
    evidence_hints,
)
from pdprobe.collectors.metric_spec import HIST_SUFFIXES
from pdprobe.collectors.names import name_from_file
from pdprobe.collectors.roles import node_of, role_from_name
from pdprobe.collectors.validate import MAX_METRIC_VALUE, check_times, implausible
from pdprobe.dataset import (
    DEPLOYMENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    ROLE_FROM_EVIDENCE,
    ROLE_FROM_NAME,
    Partial,
    RoleHint,
    SourceInfo,
    conform,
)
from pdprobe.errors import InputError
from pdprobe.promql_math import correct_counters_grouped

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# Concatenated /metrics scrapes carry no time: Prometheus' default scrape_interval is 15 s.
DEFAULT_SCRAPE_INTERVAL_S: Final = 15.0
# Sample timestamps above this are milliseconds: 1e11 s is the year 5138, 1e11 ms is 1973.
MS_TIMESTAMP_THRESHOLD: Final = 1e11
# The unit of sample timestamps by the magnitude of their median (checked from the largest
# down): exporters and scripts also write microseconds and nanoseconds (time.time_ns()).
TIMESTAMP_UNIT_BOUNDS: Final = ((1e17, 1e-9, "nanoseconds"), (1e14, 1e-6, "microseconds"),
                                (MS_TIMESTAMP_THRESHOLD, 1e-3, "milliseconds"))
# How many offending line numbers / metric names a warning lists.
SHOWN_EXAMPLES: Final = 5
SCRAPE_TS_MARKER: Final = "pdprobe-scrape-ts"

# Labels whose value names the node an instance runs on (Kubernetes relabelling conventions).
NODE_LABELS: Final = ("node", "kubernetes_node", "nodename")
# SGLang writes scheduler metrics from every TP rank with --enable-metrics-for-all-schedulers;
# the ranks report the same batch, so only rank 0 is kept. `priority=""` is SGLang's total.
TP_RANK_LABEL: Final = "tp_rank"
PRIORITY_LABEL: Final = "priority"

_CUMULATIVE_KINDS: Final = frozenset({S.COUNTER, S.BUCKET, S.HSUM, S.HCOUNT})
# `# TYPE` of a sample that may be a catalog counter exported without its `_total` suffix:
# declared a counter, or not declared at all (None, "untyped", OpenMetrics "unknown").
_COUNTER_OR_UNTYPED: Final = (S.COUNTER, None, "untyped", "unknown")

_NAME_RE: Final = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABELS_RE: Final = r'(?:[^"}]|"(?:[^"\\]|\\.)*")*'
_NUM_RE: Final = (r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                  r"|[Ii]nf(?:inity)?|NaN|nan)")
_SERIES_LINE: Final = re.compile(
    rf"^\s*((?:{_NAME_RE})?(?:\{{{_LABELS_RE}\}})?)\s+({_NUM_RE})(?:\s+({_NUM_RE}))?\s*(?:#.*)?$")
_SERIES_KEY: Final = re.compile(rf"^({_NAME_RE})?(?:\{{({_LABELS_RE})\}})?$")
_TYPE_LINE: Final = re.compile(r"^#\s*TYPE\s+(\S+)\s+(\S+)")
_MARKER_LINE: Final = re.compile(rf"^#\s*{SCRAPE_TS_MARKER}\s+(\S+)")
_EOF_LINE: Final = re.compile(r"^#\s*EOF\s*$")


def _label_pattern(label: str) -> str:
    """A regex taking ``label``'s value, consuming whole ``k="v"`` pairs from the start so a
    comma or ``x=`` inside another label's quoted value cannot fake a match."""
    pair = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"\s*,'
    return rf'^(?:{pair})*?\s*{re.escape(label)}\s*=\s*"(?P<v>(?:[^"\\]|\\.)*)"'


_ESCAPES: Final = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPES.sub(lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), value)


@dataclass
class _Lines:
    """Line boundaries of the decompressed content."""

    data: bytes
    buf: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


@dataclass
class _Samples:
    """Every sample line in file order (known and unknown names)."""

    line: np.ndarray  # 1-based line numbers
    sid: np.ndarray  # index into keys
    value_tok: pa.Array  # binary tokens
    ts_tok: pa.Array  # binary tokens; empty when absent
    keys: list[str]  # distinct series keys (name{labels})


@dataclass
class _Notes:
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: int = 0


def read_openmetrics(path: Path, ctx: ReadContext) -> Partial:
    """Read one Prometheus text / OpenMetrics file (see the module docstring)."""
    out = _Notes()
    ctx.report(f"reading {path.name}", 0.0)
    data = read_all_bytes(path)
    lines = _split_lines(data)
    comments = _comment_lines(lines)
    ctx.report(f"parsing {path.name}", 0.2)
    samples, bad_lines = _parse_samples(lines, path)
    fmt = "openmetrics" if comments.eof_lines.size else "prometheus-text"
    if bad_lines.size:
        out.skipped += int(bad_lines.size)
        shown = ", ".join(str(n) for n in np.sort(bad_lines)[:SHOWN_EXAMPLES])
        out.warnings.append(f"{path}: skipped {bad_lines.size} malformed line(s) "
                            f"(first at line {shown})")
    if samples.line.size == 0:
        if bad_lines.size:
            raise InputError(f"{path}: no metric sample line could be parsed "
                             f"(first bad line {int(np.min(bad_lines))})",
                             hint="expected Prometheus text or OpenMetrics "
                                  "('name{labels} value [timestamp]')")
        out.warnings.append(f"{path}: no metric samples in the file")
        return _partial(path, fmt, 0, out)

    ts_all = _timestamps(path, samples, comments, out)
    ctx.report(f"mapping {path.name}", 0.5)
    smap = _series_table(samples.keys, comments.types, path, ctx, out)
    expanded = _expand(samples, smap, ts_all, out, path)
    _summarise_unknown(samples, smap, out)
    if expanded is None or expanded[0].empty:
        out.warnings.append(f"{path}: no vLLM/SGLang/Dynamo/node_exporter metrics (none of its "
                            f"metric names is one pdprobe reads)")
        return _partial(path, fmt, 0, out)
    ctx.report(f"combining {path.name}", 0.8)
    used, series = expanded
    metrics, network, deployment = _combine(used, series)
    hints, engines, nodes = _instance_facts(series, metrics, path, out)
    keys = mn.instance_keys(series[series["scope"] == "instance"])
    ctx.report(f"read {path.name}", 1.0)
    metrics_df = conform(metrics, METRIC_COLUMNS) if len(metrics) else None
    network_df = conform(network, NETWORK_COLUMNS) if len(network) else None
    deployment_df = conform(deployment, DEPLOYMENT_COLUMNS) if len(deployment) else None
    rows = len(used)  # samples read into the tables (one per signal they feed)
    source = SourceInfo(path=str(path), kind="metrics", format=fmt, rows=rows,
                        skipped=out.skipped, notes=tuple(dict.fromkeys(out.notes)))
    return Partial(source=source, metrics=metrics_df, network=network_df,
                   role_hints=tuple(hints), nodes=nodes, engines=engines,
                   warnings=tuple(dict.fromkeys(out.warnings)), keys=keys,
                   deployment=deployment_df)


def _partial(path: Path, fmt: str, rows: int, out: _Notes) -> Partial:
    source = SourceInfo(path=str(path), kind="metrics", format=fmt, rows=rows,
                        skipped=out.skipped, notes=tuple(dict.fromkeys(out.notes)))
    return Partial(source=source, warnings=tuple(dict.fromkeys(out.warnings)))


# --------------------------------------------------------------------------------------------
# Lines and tokens
# --------------------------------------------------------------------------------------------


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


def _split_lines(data: bytes) -> _Lines:
    buf = np.frombuffer(data, dtype=np.uint8)
    (nl,) = _positions(buf, [10])
    starts = np.concatenate(([0], nl + 1)).astype(np.int64)
    ends = np.concatenate((nl, [len(buf)])).astype(np.int64)
    if data.startswith(b"\xef\xbb\xbf"):
        starts[0] = 3
    cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13) if len(buf) else ends > starts
    ends = ends - cr.astype(np.int64)
    return _Lines(data, buf, starts, ends)


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
class _Comments:
    types: dict[str, str]
    marker_lines: np.ndarray  # line numbers of `# pdprobe-scrape-ts` lines
    marker_ts: np.ndarray
    eof_lines: np.ndarray


def _comment_lines(lines: _Lines) -> _Comments:
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
    return _Comments(types, np.asarray(marker_lines, dtype=np.int64),
                     np.asarray(marker_ts, dtype=np.float64),
                     np.asarray(eof_lines, dtype=np.int64))


def _parse_samples(lines: _Lines, path: Path) -> tuple[_Samples, np.ndarray]:
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
    key_ok = np.array([_SERIES_KEY.match(k) is not None for k in keys], dtype=bool)
    if keys:
        good_np &= key_ok[sid]
    if not good_np.all():
        bad.extend(line_no[~good_np].tolist())
        keep = pa.array(good_np)
        val_tok, ts_tok = val_tok.filter(keep), ts_tok.filter(keep)
        sid, line_no = sid[good_np], line_no[good_np]
    return (_Samples(line_no, sid, val_tok, ts_tok, keys),
            np.asarray(sorted(bad), dtype=np.int64))


def _to_float(tokens: pa.Array) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(tokens) == 0:
        return np.empty(0, dtype=np.float64)
    empty = pc.equal(pc.binary_length(tokens), 0)
    filled = pc.if_else(empty, pa.scalar(b"nan", type=pa.large_binary()), tokens)
    arr = pc.cast(filled.cast(pa.large_string()), pa.float64())
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Timestamps
# --------------------------------------------------------------------------------------------


def _most_common(names: np.ndarray) -> str:
    """``name (count), ...`` for the most frequent metric names, most frequent first."""
    uniq, cnt = np.unique(names.astype(str), return_counts=True)
    top = sorted(zip(uniq.tolist(), cnt.tolist(), strict=True), key=lambda x: -x[1])
    return ", ".join(f"{n} ({c})" for n, c in top[:SHOWN_EXAMPLES])


def _timestamps(path: Path, samples: _Samples, comments: _Comments, out: _Notes) -> np.ndarray:
    """Unix seconds per sample: from the samples, from scrape markers, or assumed scrapes."""
    import pyarrow.compute as pc

    n = samples.line.size
    has_ts = ~pc.equal(pc.binary_length(samples.ts_tok), 0).to_numpy(zero_copy_only=False)
    if has_ts.any():
        ts = _to_float(samples.ts_tok)
        if not has_ts.all():
            missing = int((~has_ts).sum())
            out.warnings.append(f"{path}: {missing} sample(s) without a timestamp in a file whose "
                                f"other samples have one were dropped")
            out.skipped += missing
        finite = np.isfinite(ts)
        ts = _to_seconds(ts, out, path)
        ts = np.where(has_ts & finite, ts, np.nan)
        bad_ts = has_ts & ~finite
        if bad_ts.any():
            out.warnings.append(f"{path}: dropped {int(bad_ts.sum())} sample(s) whose timestamp "
                                "is not a number")
            out.skipped += int(bad_ts.sum())
        for drop in check_times(ts):
            out.warnings.append(f"{path}: dropped {drop.count} sample(s) whose timestamp is "
                                f"{drop.why}")
            out.skipped += drop.count
            ts = np.where(drop.mask, np.nan, ts)
        return ts

    if comments.marker_lines.size:
        marks = comments.marker_ts
        if marks.size and float(np.median(marks)) > MS_TIMESTAMP_THRESHOLD:
            marks = marks / 1000.0
        pos = np.searchsorted(comments.marker_lines, samples.line, side="left") - 1
        ts = np.where(pos >= 0, marks[np.maximum(pos, 0)], np.nan)
        before = int((pos < 0).sum())
        if before:
            out.warnings.append(f"{path}: {before} sample(s) before the first "
                                f"'# {SCRAPE_TS_MARKER}' line were dropped (time unknown)")
            out.skipped += before
        out.notes.append(f"no sample timestamps: scrape times taken from "
                         f"'# {SCRAPE_TS_MARKER}' lines ({comments.marker_lines.size} scrapes)")
        return ts

    scrape = _scrape_index(samples.sid, samples.line, comments.eof_lines)
    n_scrapes = int(scrape.max()) + 1 if n else 0
    try:
        anchor = path.stat().st_mtime
    except OSError:
        anchor = 0.0
    first = anchor - (n_scrapes - 1) * DEFAULT_SCRAPE_INTERVAL_S
    out.notes.append(
        f"no sample timestamps: read as {n_scrapes} concatenated scrape(s) (a repeated series "
        f"starts a new scrape), assumed {DEFAULT_SCRAPE_INTERVAL_S:g} s apart and ending at the "
        f"file's modification time; add '# {SCRAPE_TS_MARKER} <unix>' lines for real times")
    return first + scrape.astype(np.float64) * DEFAULT_SCRAPE_INTERVAL_S


def _to_seconds(ts: np.ndarray, out: _Notes, path: Path) -> np.ndarray:
    """Sample timestamps in seconds, each unit told by magnitude: Unix seconds are ~1.7e9,
    milliseconds ~1.7e12, microseconds ~1.7e15, nanoseconds ~1.7e18 (ranges that cannot
    overlap before the year 5138), so a file mixing units is read right sample by sample."""
    factor = np.ones_like(ts)
    counts: dict[str, int] = {}
    assigned = np.zeros(ts.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        for bound, f, unit in TIMESTAMP_UNIT_BOUNDS:
            sel = (ts > bound) & ~assigned & np.isfinite(ts)
            if sel.any():
                factor[sel] = f
                assigned |= sel
                counts[unit] = int(sel.sum())
    rest = int(np.count_nonzero(np.isfinite(ts) & ~assigned))
    if rest:
        counts["seconds"] = rest
    if len(counts) <= 1:
        out.notes.append(f"sample timestamps read as {next(iter(counts), 'seconds')} "
                         "(by their magnitude)")
    else:
        shown = ", ".join(f"{n} in {u}" for u, n in counts.items())
        out.warnings.append(f"{path}: sample timestamps in mixed units ({shown}): each read by its "
                            "magnitude")
    return ts * factor


def _scrape_index(sid: np.ndarray, line: np.ndarray, eof_lines: np.ndarray) -> np.ndarray:
    """Scrape number of each sample: a series seen again since the scrape began starts a new one.

    The loop runs once per scrape; each step searches forward in growing chunks, so the total
    work stays linear in the number of samples.
    """
    n = sid.size
    order = np.argsort(sid, kind="stable")
    prev = np.full(n, -1, dtype=np.int64)
    same = sid[order][1:] == sid[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    bounds = [0]
    b = 0
    width = 4096
    while b < n:
        found = -1
        lo = b + 1
        w = width
        while lo < n:
            hi = min(n, lo + w)
            hit = np.flatnonzero(prev[lo:hi] >= b)
            if hit.size:
                found = lo + int(hit[0])
                break
            lo = hi
            w *= 2
        if found < 0:
            break
        width = max(1024, 2 * (found - b))
        bounds.append(found)
        b = found
    starts = np.asarray(bounds, dtype=np.int64)
    if eof_lines.size:
        # `# EOF` ends an OpenMetrics exposition: the next sample starts a new scrape.
        after = np.searchsorted(line, eof_lines, side="left")
        starts = np.union1d(starts, after[after < n])
    return np.searchsorted(starts, np.arange(n), side="right") - 1


# --------------------------------------------------------------------------------------------
# Names, specs and labels per distinct series
# --------------------------------------------------------------------------------------------


def _resolve_name(name: str, types: dict[str, str]) -> tuple[list[tuple[mc.MetricSpec, str]], bool]:
    """Specs (with the row kind) an exposed sample name feeds; second item: a ``_created`` row."""
    direct = mc.lookup(name, types.get(name))
    found = [(s, s.kind) for s in direct if s.kind != mc.H]
    if not found and direct:
        # A sample named like a histogram family without suffix is a gauge (SGLang <=0.5.3).
        found = [(s, s.kind) for s in mc.lookup(name, "gauge") if s.kind != mc.H]
    if found:
        return found, False
    for suffix, kind in HIST_SUFFIXES:
        if name.endswith(suffix):
            family = name[: -len(suffix)]
            specs = [s for s in mc.lookup(family, types.get(family)) if s.kind == mc.H]
            if specs:
                return [(s, kind) for s in specs], False
    if not name.endswith("_total") and types.get(name) in _COUNTER_OR_UNTYPED:
        # A counter exported without `_total` (old client libraries, Rust prometheus crate,
        # exporters that strip suffixes), with or without `# TYPE`: still the catalog's counter.
        counters = [(s, S.COUNTER) for s in mc.lookup(name + "_total") if s.kind == S.COUNTER]
        if counters:
            return counters, False
    if name.endswith("_created"):
        base = name[: -len("_created")]
        if (types.get(base) in ("counter", "histogram", "summary")
                or mc.lookup(base + "_total") or mc.lookup(base)):
            return [], True
    return [], False


def _needed_labels() -> tuple[str, ...]:
    labels: dict[str, None] = dict.fromkeys(
        ("le", "device", "port", TP_RANK_LABEL, PRIORITY_LABEL, *mn.labels_read(),
         *mc.ROLE_LABELS, *NODE_LABELS, "hostname", *mc.DEPLOYMENT_LABELS))
    for spec in mc.ALL_SPECS:
        for lab, _ in spec.label_filter:
            labels[lab] = None
        if spec.instance_label:
            labels[spec.instance_label] = None
    return tuple(labels)


@dataclass
class _SeriesMap:
    """The spec rows of the distinct series, plus what the summary needs about the others."""

    frame: pd.DataFrame
    names: list[str]  # metric name per distinct series key
    unknown_sids: np.ndarray  # series whose name pdprobe does not read


def _series_table(keys: list[str], types: dict[str, str], path: Path, ctx: ReadContext,
                  out: _Notes) -> _SeriesMap:
    """One row per (distinct series, spec it feeds): identity, kind, le, labels used for roles.

    Columns: sid, name, kind, signal, scope, engine, scale, bits, aggregate, instance_label,
    frontend, le, instance, node_label, node, device, port, and ``l_<label>`` for the labels
    roles are read from.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    parsed = [_SERIES_KEY.match(k) for k in keys]
    names = [(m.group(1) or "") if m else "" for m in parsed]
    blocks = [(m.group(2) or "") if m else "" for m in parsed]
    block_arr = pa.array(blocks, type=pa.large_string())
    # promtool's older `tsdb dump` prints the name as a __name__ label.
    if any(n == "" for n in names):
        dunder = pc.extract_regex(block_arr, _label_pattern("__name__")).field("v").to_pylist()
        names = [n or (_unescape(d) if d is not None else "") for n, d in zip(names, dunder,
                                                                              strict=True)]
    resolved: dict[str, tuple[list[tuple[mc.MetricSpec, str]], bool]] = {
        n: _resolve_name(n, types) for n in set(names)}

    rows_sid: list[int] = []
    rows_spec: list[mc.MetricSpec] = []
    rows_kind: list[str] = []
    unknown: list[int] = []
    for sid, name in enumerate(names):
        specs, is_created = resolved[name]
        if not specs and not is_created:
            unknown.append(sid)
        for spec, kind in specs:
            rows_sid.append(sid)
            rows_spec.append(spec)
            rows_kind.append(kind)
    frame = pd.DataFrame({"sid": np.asarray(rows_sid, dtype=np.int64)})
    unknown_sids = np.asarray(unknown, dtype=np.int64)
    if frame.empty:
        return _SeriesMap(frame, names, unknown_sids)
    frame["name"] = [names[i] for i in rows_sid]
    frame["kind"] = rows_kind
    frame["signal"] = [s.signal for s in rows_spec]
    frame["scope"] = [s.scope for s in rows_spec]
    frame["engine"] = [s.engine for s in rows_spec]
    frame["scale"] = [s.scale for s in rows_spec]
    frame["bits"] = [s.counter_bits or 0 for s in rows_spec]
    frame["aggregate"] = [s.aggregate for s in rows_spec]
    frame["instance_label"] = [s.instance_label or "" for s in rows_spec]
    frame["frontend"] = [s.name.startswith("dynamo_frontend_") and s.instance_label is None
                         for s in rows_spec]

    # Labels, from the distinct known series only; absent labels are None.
    known_sids = np.unique(frame["sid"].to_numpy())
    sub = block_arr.take(pa.array(known_sids))
    row_pos = np.searchsorted(known_sids, frame["sid"].to_numpy())
    labels: dict[str, pd.Series] = {}
    for label in _needed_labels():
        if not pc.any(pc.match_substring(sub, f"{label}=")).as_py():
            continue
        vals = pc.extract_regex(sub, _label_pattern(label)).field("v").to_pylist()
        col = np.array([_unescape(v) if v is not None else None for v in vals], dtype=object)
        labels[label] = pd.Series(col[row_pos], dtype=object)
    absent = pd.Series(np.full(len(frame), None, dtype=object), dtype=object)

    def lab(name: str) -> pd.Series:
        """Values of label ``name`` per row; None where absent (or empty)."""
        col = labels.get(name, absent)
        return col.where(col != "", None)

    # Filters: spec label filters, SGLang tp_rank != 0 duplicates, SGLang per-priority parts.
    keep = np.ones(len(frame), dtype=bool)
    spec_ids = np.array([id(sp) for sp in rows_spec])
    for spec in {id(sp): sp for sp in rows_spec if sp.label_filter}.values():
        rows = spec_ids == id(spec)
        for label, allowed in spec.label_filter:
            keep[rows] &= lab(label)[rows].isin(allowed.split("|")).to_numpy()
    tp_drop = _tp_rank_duplicates(frame, lab(TP_RANK_LABEL), blocks, spec_ids)
    if tp_drop.any():
        out.notes.append(f"kept the lowest SGLang tp_rank only: {int(tp_drop.sum())} series of "
                         f"other TP ranks repeat its scheduler numbers")
    keep &= ~tp_drop & ~_priority_parts(frame, labels.get(PRIORITY_LABEL), blocks, spec_ids)

    # Buckets need a numeric `le`.
    le = pd.to_numeric(lab("le"), errors="coerce").to_numpy(dtype=np.float64)
    is_bucket = frame["kind"].to_numpy() == S.BUCKET
    bad_le = is_bucket & np.isnan(le)
    if bad_le.any():
        out.warnings.append(f"{path}: {int(bad_le.sum())} histogram bucket series without a "
                            f"numeric 'le' label were dropped (e.g. "
                            f"{frame['name'].to_numpy()[bad_le][0]})")
    keep &= ~bad_le
    frame["le"] = np.where(is_bucket, le * frame["scale"].to_numpy(), np.nan)

    # Instance: spec label, router backend, instance-like label, --instance or the file name
    # (metric_names says how and why).
    fallback, fallback_how = ((ctx.instance, "--instance") if ctx.instance
                              else name_from_file(path))
    named, naming_notes = mn.name_instances(
        frame, lab, fallback, fallback_how if ctx.instance else f"{fallback_how} {path.name}")
    for name_col in named.columns:
        frame[name_col] = named[name_col].to_numpy()
    by_fallback = frame["name_kind"].to_numpy() == mn.BY_FALLBACK
    if (by_fallback & keep & (frame["scope"].to_numpy() == "instance")).any():
        said = "--instance" if ctx.instance else (
            "the file name" if fallback_how == "file name" else fallback_how)
        out.notes.append(f"series without an instance/pod/job label were assigned to instance "
                         f"{fallback!r} ({said})")
    out.notes.extend(naming_notes)

    # Node of a network series: host part of `instance`, else a node label, else the host part
    # of the instance name (a per-target file 10.0.0.5_9100.prom is node 10.0.0.5).
    host = lab("instance").map(lambda v: node_of(v) if v else None)
    node_label = absent.copy()
    for label in NODE_LABELS:
        node_label = node_label.fillna(lab(label))
    frame["node_label"] = node_label.to_numpy()
    frame["node"] = host.fillna(node_label).fillna(lab("hostname")).fillna(
        frame["instance"].map(node_of)).to_numpy()
    frame["device"] = lab("device").fillna("").to_numpy()
    frame["port"] = lab("port").fillna("").to_numpy()
    for label in (*mc.ROLE_LABELS, "job", "pod", "instance"):
        frame[f"l_{label}"] = lab(label).to_numpy()
    # A deployment-scope series belongs to its deployment, never to an instance: its `instance`
    # column holds the deployment's name (so the per-instance steps below work per deployment).
    is_dep = frame["scope"].to_numpy() == "deployment"
    if is_dep.any():
        deployment = absent.copy()
        for label in mc.DEPLOYMENT_LABELS:
            deployment = deployment.fillna(lab(label))
        frame.loc[is_dep, "instance"] = deployment.fillna("").to_numpy()[is_dep]
    frame = frame[keep].reset_index(drop=True)
    router_drop, router_notes = mn.router_rows_to_drop(frame)
    out.notes.extend(router_notes)
    frame = frame[~router_drop].reset_index(drop=True)
    frame = _engine_own_first(frame)
    return _SeriesMap(_drop_superseded(frame, out), names, unknown_sids)


def _engine_own_first(frame: pd.DataFrame) -> pd.DataFrame:
    """Where several engines feed one signal of an instance (a Dynamo TRT-LLM worker exposes
    trtllm_request_success_total and dynamo_component_requests_total), keep the engine's own
    series only, as the live collector does (``metric_roles.ENGINE_PRIORITY``)."""
    import pandas as pd


    if frame.empty:
        return frame
    prio = frame["engine"].map(ENGINE_PRIORITY).fillna(UNLISTED_ENGINE_PRIORITY).to_numpy()
    key = [frame["scope"], frame["instance"], frame["signal"], frame["kind"]]
    best = pd.Series(prio).groupby(key, dropna=False, sort=False).transform("min").to_numpy()
    return frame[prio == best].reset_index(drop=True) if (prio != best).any() else frame


_TP_RANK_PAIR: Final = re.compile(rf'(^|,)\s*{TP_RANK_LABEL}\s*=\s*"[^"]*"')


def _tp_rank_duplicates(frame: pd.DataFrame, tp_rank: pd.Series, blocks: list[str],
                        spec_ids: np.ndarray) -> np.ndarray:
    """Rows that repeat a lower TP rank's series (all labels but ``tp_rank`` equal).

    With --enable-metrics-for-all-schedulers every TP rank of a DP group writes the same
    scheduler numbers. Series that differ in another label too (``dp_rank`` with DP attention,
    where each DP group's leader has its own tp_rank) are not duplicates and are all kept.
    """
    import pandas as pd

    has = tp_rank.notna().to_numpy()
    drop = np.zeros(len(frame), dtype=bool)
    if not has.any():
        return drop
    sid = frame["sid"].to_numpy()[has]
    rest = [_TP_RANK_PAIR.sub("", blocks[i]) for i in sid]
    rank = pd.to_numeric(tp_rank[has], errors="coerce").to_numpy(dtype=np.float64)
    groups = pd.DataFrame({"name": frame["name"].to_numpy()[has], "rest": rest,
                           "spec": spec_ids[has], "rank": rank})
    lowest = groups.groupby(["name", "rest", "spec"], sort=False)["rank"].transform("min")
    drop[np.flatnonzero(has)] = (groups["rank"] > lowest).to_numpy()
    return drop


_PRIORITY_PAIR: Final = re.compile(rf'(^|,)\s*{PRIORITY_LABEL}\s*=\s*"[^"]*"')


def _priority_parts(frame: pd.DataFrame, priority: pd.Series | None, blocks: list[str],
                    spec_ids: np.ndarray) -> np.ndarray:
    """Rows of a per-priority series whose ``priority=""`` total is also exposed."""
    import pandas as pd

    drop = np.zeros(len(frame), dtype=bool)
    if priority is None:
        return drop
    has = priority.notna().to_numpy()
    if not has.any():
        return drop
    sid = frame["sid"].to_numpy()[has]
    groups = pd.DataFrame({"name": frame["name"].to_numpy()[has],
                           "rest": [_PRIORITY_PAIR.sub("", blocks[i]) for i in sid],
                           "spec": spec_ids[has],
                           "total": (priority[has] == "").to_numpy()})
    has_total = groups.groupby(["name", "rest", "spec"], sort=False)["total"].transform("any")
    drop[np.flatnonzero(has)] = (has_total & ~groups["total"]).to_numpy(dtype=bool)
    return drop


def _family(name: str) -> str:
    """The catalog key of an exposed sample name (histogram suffixes stripped)."""
    key = mc.normalise_name(name)
    for suffix, _ in HIST_SUFFIXES:
        if key.endswith(suffix) and key[: -len(suffix)] in mc.SPECS_BY_KEY:
            return key[: -len(suffix)]
    return key


def _drop_superseded(frame: pd.DataFrame, out: _Notes) -> pd.DataFrame:
    """Drop an old metric name on instances that also expose its successor."""
    if frame.empty:
        return frame
    family = frame["name"].map(_family)
    present = set(zip(frame["instance"], family, strict=True))
    old_to_new = {mc.normalise_name(o): mc.normalise_name(n) for o, n in mc.SUPERSEDED_BY.items()}
    successor = family.map(old_to_new)
    drop = np.array([isinstance(new, str) and (inst, new) in present
                     for inst, new in zip(frame["instance"], successor, strict=True)], dtype=bool)
    if drop.any():
        names = sorted(set(frame.loc[drop, "name"].map(_family)))
        out.notes.append(f"ignored deprecated {', '.join(names)} where the successor name is "
                         f"also exposed (same quantity)")
    return frame[~drop].reset_index(drop=True)


def _summarise_unknown(samples: _Samples, smap: _SeriesMap, out: _Notes) -> None:
    unknown = smap.unknown_sids
    if not len(unknown):
        return
    names = smap.names
    counts = np.bincount(samples.sid, minlength=len(names))
    unknown_names = {names[sid] for sid in unknown.tolist()}

    def family(name: str) -> str:
        # An unknown histogram is listed once, by family, not as _bucket/_sum/_count.
        for suffix, _ in HIST_SUFFIXES:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and base + "_bucket" in unknown_names:
                return base
        return name

    per_name: dict[str, int] = {}
    for sid in unknown.tolist():
        fam = family(names[sid])
        per_name[fam] = per_name.get(fam, 0) + int(counts[sid])
    total = sum(per_name.values())
    top = sorted(per_name.items(), key=lambda kv: (-kv[1], kv[0]))[:SHOWN_EXAMPLES]
    shown = ", ".join(f"{n or '(no name)'} ({c})" for n, c in top)
    out.notes.append(f"ignored {total} sample(s) of {len(per_name)} metric name(s) pdprobe does "
                     f"not read (most: {shown})")


# --------------------------------------------------------------------------------------------
# Samples -> corrected, combined rows
# --------------------------------------------------------------------------------------------


def _expand(samples: _Samples, smap: _SeriesMap, ts_all: np.ndarray, out: _Notes,
            path: Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Samples as (row, ts, value) per spec row, sorted by (row, ts), corrected and scaled;
    with the spec rows (``row`` indexes them)."""
    import pandas as pd
    import pyarrow as pa

    series = smap.frame
    if series.empty:
        return None
    n_keys = len(smap.names)
    sid_rows = series["sid"].to_numpy()
    counts = np.bincount(sid_rows, minlength=n_keys)
    first = np.zeros(n_keys, dtype=np.int64)
    order = np.argsort(sid_rows, kind="stable")
    series = series.iloc[order].reset_index(drop=True)
    sid_rows = series["sid"].to_numpy()
    first[:] = np.searchsorted(sid_rows, np.arange(n_keys), side="left")

    known = counts[samples.sid] > 0
    idx = np.flatnonzero(known & ~np.isnan(ts_all))
    if idx.size == 0:
        return None
    values = _to_float(samples.value_tok.take(pa.array(idx)))
    sid = samples.sid[idx]
    ts = ts_all[idx]
    line = samples.line[idx]
    rep = counts[sid]
    take = np.repeat(np.arange(idx.size), rep)
    offs = np.arange(take.size) - np.repeat(np.cumsum(rep) - rep, rep)
    row = first[sid[take]] + offs
    values, ts, line = values[take], ts[take], line[take]

    # Drop NaN/Inf values (Prometheus staleness markers are NaN), naming the metrics; then
    # values no signal can take: every signal read is a count, duration, size, ratio or rate, so
    # a negative value or one beyond any 64-bit counter is not a reading (it would become
    # -820 req/s downstream).
    names_of_row = series["name"].to_numpy()
    finite = np.isfinite(values)
    bad_value, why = implausible(np.where(finite, values, np.nan), 0.0, MAX_METRIC_VALUE)
    for bad, what in ((~finite, "NaN/Inf sample value(s) (Prometheus staleness markers are NaN)"),
                      (bad_value,
                       f"sample value(s) no engine reports ({why})")):
        if bad.any():
            out.warnings.append(f"{path}: dropped {int(bad.sum())} {what}: "
                                f"{_most_common(names_of_row[row[bad]])}")
    keep = finite & ~bad_value
    if not keep.all():
        values, ts, line, row = values[keep], ts[keep], line[keep], row[keep]

    # Per raw series: time order (warn when the file was not), one sample per timestamp.
    by_row = np.argsort(row, kind="stable")
    r_sorted, t_sorted = row[by_row], ts[by_row]
    back = (r_sorted[1:] == r_sorted[:-1]) & (t_sorted[1:] < t_sorted[:-1])
    if back.any():
        n_series = np.unique(r_sorted[1:][back]).size
        out.warnings.append(f"{path}: timestamps out of order in {n_series} series; samples "
                            f"were sorted by time")
    o = np.lexsort((line, ts, row))
    values, ts, row = values[o], ts[o], row[o]
    dup = np.zeros(row.size, dtype=bool)
    dup[:-1] = (row[1:] == row[:-1]) & (ts[1:] == ts[:-1])
    if dup.any():
        out.warnings.append(f"{path}: {int(dup.sum())} sample(s) repeat a series' timestamp; "
                            f"the later line was kept")
        keep = ~dup
        values, ts, row = values[keep], ts[keep], row[keep]

    kind = series["kind"].to_numpy()[row]
    cumulative = np.isin(kind, list(_CUMULATIVE_KINDS))
    if cumulative.any():
        bits = series["bits"].to_numpy()[row[cumulative]]
        values[cumulative] = correct_counters_grouped(row[cumulative], values[cumulative],
                                                      bits if bits.any() else None)
    scaled = np.isin(kind, [S.GAUGE, S.COUNTER, S.HSUM])
    values = np.where(scaled, values * series["scale"].to_numpy()[row], values)
    return pd.DataFrame({"row": row, "ts": ts, "value": values}), series


def _combine(used: pd.DataFrame, series: pd.DataFrame
             ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Combine the sub-series of an instance (engine=, dp_rank=, ...) per timestamp; the
    third table holds the deployment-scope rows (their ``instance`` is the deployment)."""
    import pandas as pd

    ident_cols_i = ["scope", "instance", "signal", "kind", "le"]
    ident_cols_n = ["node", "device", "port", "signal", "kind"]
    scope = series["scope"].to_numpy()
    is_net = scope == "network"
    ident = np.zeros(len(series), dtype=np.int64)
    inst_part = series.loc[~is_net, ident_cols_i].copy()
    net_part = series.loc[is_net, ident_cols_n].copy()
    n_inst = 0
    if len(inst_part):
        codes = inst_part.groupby(ident_cols_i, sort=False, dropna=False).ngroup().to_numpy()
        ident[~is_net] = codes
        n_inst = int(codes.max()) + 1
    if len(net_part):
        codes = net_part.groupby(ident_cols_n, sort=False, dropna=False).ngroup().to_numpy()
        ident[is_net] = codes + n_inst
    row = used["row"].to_numpy()
    ts = used["ts"].to_numpy()
    val = used["value"].to_numpy()
    kind = series["kind"].to_numpy()[row]
    agg = series["aggregate"].to_numpy()[row]
    gid = ident[row]
    cumulative = np.isin(kind, list(_CUMULATIVE_KINDS)) & (agg == "sum")

    parts = []
    if cumulative.any():
        r, t, v, g = row[cumulative], ts[cumulative], val[cumulative], gid[cumulative]
        subs = pd.DataFrame({"g": g, "r": r}).drop_duplicates().groupby("g")["r"].size()
        multi = np.isin(g, subs.index[subs.to_numpy() > 1].to_numpy())
        if (~multi).any():
            parts.append(pd.DataFrame({"gid": g[~multi], "ts": t[~multi],
                                       "value": v[~multi]}))
        if multi.any():
            # The sum of the sub-series' latest values at each timestamp: add up increments per
            # raw series (its first sample adds its whole value) in time order per identity.
            r, t, v, g = r[multi], t[multi], v[multi], g[multi]
            inc = v.copy()
            same = np.zeros(r.size, dtype=bool)
            same[1:] = r[1:] == r[:-1]
            inc[same] = v[same] - v[np.flatnonzero(same) - 1]
            o = np.lexsort((t, g))
            g, t, inc = g[o], t[o], inc[o]
            total = pd.Series(inc).groupby(g).cumsum().to_numpy()
            last = np.ones(g.size, dtype=bool)
            last[:-1] = (g[1:] != g[:-1]) | (t[1:] != t[:-1])
            parts.append(pd.DataFrame({"gid": g[last], "ts": t[last], "value": total[last]}))
    other = ~cumulative
    if other.any():
        frame = pd.DataFrame({"gid": gid[other], "ts": ts[other], "value": val[other],
                              "agg": agg[other]})
        for how, part in frame.groupby("agg", sort=True):
            parts.append(part.groupby(["gid", "ts"], sort=True)["value"].agg(str(how))
                         .reset_index())
    combined = pd.concat(parts, ignore_index=True).sort_values(["gid", "ts"], kind="stable")

    first_row = pd.Series(np.arange(len(series))).groupby(ident).first()
    rep = first_row.reindex(combined["gid"].to_numpy()).to_numpy()
    net_rows = is_net[rep]
    dep_rows = scope[rep] == "deployment"
    inst_rows = ~net_rows & ~dep_rows
    cols = {c: series[c].to_numpy()[rep] for c in
            ("instance", "node", "device", "port", "signal", "kind", "le")}
    metrics = pd.DataFrame({
        "ts": combined["ts"].to_numpy()[inst_rows],
        "instance": cols["instance"][inst_rows],
        "signal": cols["signal"][inst_rows],
        "kind": cols["kind"][inst_rows],
        "le": cols["le"][inst_rows].astype(np.float64),
        "value": combined["value"].to_numpy()[inst_rows],
    })
    deployment = pd.DataFrame({
        "ts": combined["ts"].to_numpy()[dep_rows],
        "deployment": cols["instance"][dep_rows],
        "signal": cols["signal"][dep_rows],
        "kind": cols["kind"][dep_rows],
        "value": combined["value"].to_numpy()[dep_rows],
    })
    network = pd.DataFrame({
        "ts": combined["ts"].to_numpy()[net_rows],
        "node": cols["node"][net_rows],
        "device": cols["device"][net_rows],
        "port": cols["port"][net_rows],
        "signal": cols["signal"][net_rows],
        "kind": cols["kind"][net_rows],
        "value": combined["value"].to_numpy()[net_rows],
    })
    return metrics, network, deployment


# --------------------------------------------------------------------------------------------
# Roles, engines, nodes
# --------------------------------------------------------------------------------------------


def _instance_facts(series: pd.DataFrame, metrics: pd.DataFrame, path: Path,
                    out: _Notes) -> tuple[list[RoleHint], dict[str, str], dict[str, str]]:
    src = str(path)
    inst_rows = series[series["scope"] == "instance"]
    # Label by label (every instance's `role`, then `engine_type`, ...): the order decides
    # which of two agreeing hints names the role's source.
    reader = LabelRoles(src)
    hints: list[RoleHint] = []
    for label in mc.ROLE_LABELS:
        pairs = inst_rows[["instance", f"l_{label}"]].dropna().drop_duplicates()
        for inst, value in pairs.itertuples(index=False):
            hint = reader.add(str(inst), label, str(value))
            if hint is not None:
                hints.append(hint)
    hints.extend(reader.generic_hints())
    out.notes.extend(reader.notes())

    # Name patterns in pod, instance, job (most specific first), for instances named by them;
    # in the backend URL for a router's backends (the router's pod/instance/job are its own).
    named = inst_rows[inst_rows["instance_label"] == ""]
    for inst, grp in named.groupby("instance", sort=True):
        direct = grp[grp["name_kind"] != mn.BY_BACKEND]
        by_backend = direct.empty
        grp = grp if by_backend else direct
        for label in ("backend_url",) if by_backend else ("pod", "instance", "job"):
            values = grp[label if by_backend else f"l_{label}"].dropna().unique().tolist()
            roles = {r for r in (role_from_name(str(v)) for v in values) if r}
            if len(roles) == 1:
                role = roles.pop()
                hints.append(RoleHint(str(inst), role,
                                      f"name pattern in {label} {values[0]!r}", ROLE_FROM_NAME,
                                      src))
                break

    frontends = sorted(set(inst_rows.loc[inst_rows["frontend"].astype(bool), "instance"]))
    hints.extend(evidence_hints(metrics[~metrics["instance"].isin(frontends)], src,
                                out.warnings))
    for inst in frontends:
        hints.append(RoleHint(str(inst), "frontend", "Dynamo frontend metrics (dynamo_frontend_*)",
                              ROLE_FROM_EVIDENCE, src))

    engines: dict[str, str] = {}
    rank = {e: i for i, e in enumerate(ENGINE_PREFERENCE)}
    for inst, eng in inst_rows[["instance", "engine"]].drop_duplicates().itertuples(index=False):
        cur = engines.get(str(inst))
        if cur is None or rank.get(str(eng), 99) < rank.get(cur, 99):
            engines[str(inst)] = str(eng)
    nodes: dict[str, str] = {}
    for inst, node_label, inst_label, kind, addr_host in inst_rows[
            ["instance", "node_label", "l_instance", "name_kind", "addr_host"]] \
            .drop_duplicates().itertuples(index=False):
        node_label = node_label if isinstance(node_label, str) else None  # NaN when absent
        addr_host = addr_host if isinstance(addr_host, str) else None
        inst_label = inst_label if isinstance(inst_label, str) else None
        if kind == mn.BY_BACKEND:
            if addr_host:  # the backend's host; the node labels are the router's
                nodes[str(inst)] = addr_host
            continue
        if node_label:
            nodes[str(inst)] = node_label
        elif kind == mn.BY_FALLBACK and addr_host:
            nodes[str(inst)] = addr_host  # per-target file 10.0.0.5_8000.prom
        elif inst_label and str(inst) != inst_label:
            continue  # named by worker_id/pod: its node is not the scraping target's
        elif inst_label:
            host = node_of(inst_label)
            if host:
                nodes[str(inst)] = host
    return hints, engines, nodes
