"""Read engine logs (vLLM, SGLang, Mooncake) into metric rows, events and role hints.

An unprefixed file is one instance, named by ``--instance`` or the file name; a file merged by
a log tool (``kubectl logs --prefix``, ``docker compose logs``, stern, journalctl, JSON-lines
exports) is split into one instance per stream by ``log_streams``. A file may mix line kinds
(``kubectl logs`` of a pod: stats lines, Mooncake glog lines, HTTP access logs, startup chatter):
lines are routed by one regular-expression filter over pyarrow arrays, each kind is parsed by its
family module (``vllm_log``, ``sglang_log``, ``mooncake_log``) and assembled here: timestamps
(with the year inferred where the log prints none), sub-series (engines, DP ranks, transfer-engine
threads) combined into one series per instance (per stream), per-interval counts accumulated
into counters.

Nothing in a log is fatal: lines that are not understood, carry a malformed value or no timestamp
are counted in ``SourceInfo.skipped`` and reported with their line numbers in a warning.

The family modules import the shared helpers below; this module imports them lazily inside
``read_engine_log`` so there is no import cycle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe import signals as S
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.io import GZIP_MAGIC, open_binary
from pdprobe.collectors.roles import name_hints
from pdprobe.dataset import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    ROLE_FROM_LABEL,
    InstanceKey,
    Partial,
    RoleHint,
    SourceInfo,
    conform,
    empty_frame,
)
from pdprobe.signals import Role

# Read this many (decompressed) bytes at a time so a multi-GB log never sits in memory whole;
# only the lines a route matches are kept.
CHUNK_BYTES: Final = 32 * 2**20
# ... gathered from reads this small, so a truncated gzip/zstd loses at most this much.
READ_BYTES: Final = 256 * 2**10
# Lines parsed per call: bounds the memory of the vectorised intermediates on multi-GB logs.
PARSE_BATCH_LINES: Final = 200_000
# A sub-series (engine, DP rank, transfer-engine thread) silent for longer than this is left out
# of the instance total: vLLM logs stats at DEBUG when idle and SGLang logs only when it runs
# batches, so carrying an old value forward would overstate the load. Six default vLLM intervals.
STALE_AFTER_S: Final = 60.0
# A line cannot postdate the file's last write; one day of slack covers clock skew and the log
# being in local time (up to UTC+14) while the modification time is UTC.
MTIME_SLACK_S: Final = 86400.0
# Month-of-year jumping back by at least this much between consecutive year-less lines means the
# log crossed a new year (Dec -> Jan); jumping forward as much is a late line from the old year.
ROLLOVER_MONTHS: Final = 6
# The timestamp sits in the prefix: search this many leading characters first (a long
# VLLM_LOGGING_PREFIX or Ray prefix still fits; lines without a match are searched whole).
TIMESTAMP_HEAD_CHARS: Final = 160
# Warnings list at most this many line numbers.
MAX_LISTED_LINES: Final = 5
# Notes name at most this many streams of a merged log.
MAX_LISTED_STREAMS: Final = 8
# PD-only fields in stats lines (SGLang #bootstrap-req, vLLM "KV fetch:") are printed only by an
# engine running in that PD mode, so they outrank a name pattern; an explicit label is the
# operator's declared intent and still wins, hence just below ROLE_FROM_LABEL.
ROLE_FROM_ENGINE_FIELDS: Final = ROLE_FROM_LABEL - 5
# Behavioural role evidence (e.g. no generation at all) needs at least this many active stats
# lines, so a short or idle log does not decide a role.
MIN_EVIDENCE_LINES: Final = 5

MIB: Final = float(2**20)
_NUMBER: Final = r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$"
# One leftmost match finds the line's timestamp wherever the prefix puts it: ISO date with year
# (SGLang, kubectl --timestamps, custom formats), glog ``Lmmdd``/``Lyyyymmdd`` (Mooncake), or the
# year-less ``mm-dd HH:MM:SS`` of vLLM.
_TIMESTAMP: Final = (
    r"(?P<iy>\d{4})-(?P<imo>\d\d)-(?P<id>\d\d)[ T](?P<iH>\d\d):(?P<iM>\d\d):(?P<iS>\d\d)"
    r"(?:[.,](?P<if>\d{1,9}))?"
    r"|\b[IWEF](?P<gy>\d{4})?(?P<gmo>\d\d)(?P<gd>\d\d) (?P<gH>\d\d):(?P<gM>\d\d):(?P<gS>\d\d)"
    r"\.(?P<gf>\d{1,9})"
    r"|\b(?P<vmo>\d\d)-(?P<vd>\d\d) (?P<vH>\d\d):(?P<vM>\d\d):(?P<vS>\d\d)"
)


# --- shared pieces for the family modules ------------------------------------------------------


@dataclass(frozen=True)
class SignalSpec:
    """How one column of a parsed frame becomes one instance signal."""

    column: str
    signal: str
    kind: str = S.GAUGE  # GAUGE, COUNTER, BUCKET or HCOUNT
    combine: Literal["sum", "mean"] = "sum"  # across sub-series (engines, DP ranks, threads)
    per_interval: bool = False  # the value counts what happened since the last line: cumsum it
    zero_if_absent: bool = False  # printed only when non-zero: absent means 0 once seen in the file
    le: float = math.nan  # bucket bound in seconds for kind == BUCKET


@dataclass(frozen=True)
class LineKind:
    """One kind of log line: how to route it (an RE2 regex) and how to parse it."""

    name: str
    family: str  # vllm | sglang | mooncake
    label: str  # for messages: "vLLM stats", "SGLang failure", ...
    route: str
    parse: Callable[[pa.Array], pd.DataFrame]  # -> frame with `row` and `error` columns
    high_volume: bool = False  # periodic stats: routed first, so rare kinds scan what is left


@dataclass(frozen=True)
class FamilyOutput:
    """What a family made of its parsed lines (no instance yet; engine_log adds it)."""

    metrics: pd.DataFrame | None = None  # ts, signal, kind, le, value
    events: pd.DataFrame | None = None  # ts, event, detail, line
    hints: tuple[tuple[Role, str, int], ...] = ()  # (role, how, strength)
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    lines_used: int = 0


class EventRows:
    """The frame an event line kind's ``parse`` returns, built one (rare) line at a time:
    columns ``row``, ``error`` (always None: an event line has no value to be malformed),
    ``event``, ``detail`` and, with ``request_ids``, ``request_id``."""

    def __init__(self, *, request_ids: bool = True) -> None:
        self.columns: dict[str, list[object]] = {"row": [], "error": [], "event": [],
                                                 "detail": []}
        if request_ids:
            self.columns["request_id"] = []

    def add(self, i: int, event: str, detail: str, rid: str | None = None) -> None:
        """One event of line ``i``; ``rid`` is the request it names, if any."""
        c = self.columns
        c["row"].append(i)
        c["error"].append(None)
        c["event"].append(event)
        c["detail"].append(detail)
        if "request_id" in c:
            c["request_id"].append(rid)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns)


def literal_route(markers: Iterable[str]) -> str:
    """An RE2 alternation matching any of ``markers`` literally."""
    return "|".join(re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", m) for m in markers)


def as_lines(lines: Sequence[str] | pa.Array | pa.ChunkedArray) -> pa.Array:
    """A pyarrow string array from a list of lines (tests) or an array (the reader)."""
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if isinstance(lines, pa.Array):
        return lines if pa.types.is_large_string(lines.type) else lines.cast(pa.large_string())
    return pa.array(list(lines), type=pa.large_string())


def extract(lines: pa.Array, pattern: str) -> pa.StructArray:
    """``pc.extract_regex`` (leftmost match, named groups; null where nothing matched)."""
    return pc.extract_regex(lines, pattern)


def group(struct: pa.StructArray, name: str) -> pa.Array:
    """A named group as strings: '' where the group did not take part or the row did not match."""
    return pc.fill_null(pc.struct_field(struct, name), "")


def matched(struct: pa.StructArray) -> np.ndarray:
    return np.asarray(struct.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def numeric(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Floats from strings; '' or null is NaN (absent), anything else but a finite number is NaN
    and flagged bad (``nan`` and ``inf`` included: no engine prints them for a real value)."""
    values = pc.utf8_trim_whitespace(values)
    present = pc.fill_null(pc.not_equal(values, ""), False)
    clean = pc.if_else(present, values, pa.scalar(None, values.type))
    try:  # the common case: every present value is a number
        out = pc.cast(clean, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ok = pc.fill_null(pc.match_substring_regex(values, _NUMBER), False)
        out = pc.cast(pc.if_else(ok, values, pa.scalar(None, values.type)), pa.float64())
    result = np.array(out.to_numpy(zero_copy_only=False), dtype=float)
    present_np = np.asarray(present.to_numpy(zero_copy_only=False), dtype=bool)
    bad = present_np & ~np.isfinite(result)
    result[bad] = np.nan
    return result, bad


def first_bad(names: Sequence[str], raw: Mapping[str, pa.Array], bad: Mapping[str, np.ndarray],
              n: int, labels: Mapping[str, str] | None = None) -> list[str | None]:
    """Per row, a message naming the first field with a malformed value (None if all are fine).

    ``labels`` gives the field's name as the log prints it, for the message.
    """
    errors: list[str | None] = [None] * n
    any_bad = np.zeros(n, dtype=bool)
    for name in names:
        any_bad |= bad[name]
    for i in np.flatnonzero(any_bad):  # rare rows only
        for name in names:
            if bad[name][i]:
                label = (labels or {}).get(name, name)
                errors[i] = f"{label} {raw[name][i].as_py()!r} is not a number"
                break
    return errors


@dataclass(frozen=True)
class KeyValues:
    """``key: value`` pairs parsed generically from one body per row."""

    columns: dict[str, np.ndarray]  # column -> scaled float values, NaN where absent
    known: np.ndarray  # per row: how many known keys were found
    unknown_per_row: np.ndarray  # per row: how many items had a key no mapping names
    errors: list[str | None]  # per row: first known key whose value is not a number
    unknown_keys: tuple[str, ...]  # distinct keys that no mapping names (tolerated)


def parse_key_values(bodies: pa.Array, *, separator: str, assign: str,
                     keys: Mapping[str, tuple[str, float]], strip: str = " ") -> KeyValues:
    """Split each body into items at ``separator``, items into key and value at the first
    ``assign``, and map known keys to columns.

    ``keys`` maps a key to (column, scale); keys are stripped of the characters in ``strip``
    (and whitespace). All work is vectorised over the flattened items
    (plain substring splits, no regex); only rows with a malformed value get a Python message.
    """
    n = len(bodies)
    items = pc.split_pattern(bodies, separator)
    parents = np.asarray(pc.list_parent_indices(items).to_numpy(zero_copy_only=False))
    pairs = pc.split_pattern(pc.list_flatten(items), assign, max_splits=1)
    ok = np.asarray(pc.fill_null(pc.equal(pc.list_value_length(pairs), 2), False)
                    .to_numpy(zero_copy_only=False), dtype=bool)
    pairs = pairs.filter(pa.array(ok))
    k = pc.utf8_trim(pc.list_element(pairs, 0), characters=strip + " \t")
    v = pc.list_element(pairs, 1)
    parents = parents[ok]
    key_names = list(keys)
    index = pc.index_in(k, value_set=pa.array(key_names, type=k.type))
    idx = np.asarray(pc.fill_null(index, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    column_names = list(dict.fromkeys(col for col, _ in keys.values()))
    col_of_key = np.array([column_names.index(keys[name][0]) for name in key_names], dtype=np.int64)
    scale_of_key = np.array([keys[name][1] for name in key_names], dtype=float)
    sel = np.flatnonzero(idx >= 0)
    values, bad = numeric(v.take(pa.array(sel)))
    rows = parents[sel]
    wide = np.full((n, len(column_names)), np.nan)
    wide[rows, col_of_key[idx[sel]]] = values * scale_of_key[idx[sel]]
    known = np.bincount(rows, minlength=n) if n else np.zeros(0, dtype=np.int64)
    errors: list[str | None] = [None] * n
    for j in np.flatnonzero(bad):  # rare: malformed values only
        row = int(rows[j])
        if errors[row] is None:
            key = key_names[int(idx[sel[j]])]
            errors[row] = f"{key} {v[int(sel[j])].as_py()!r} is not a number"
    unknown_mask = idx < 0
    unknown_rows = (np.bincount(parents[unknown_mask], minlength=n) if n
                    else np.zeros(0, dtype=np.int64))
    unknown = pc.unique(k.filter(pa.array(unknown_mask))).to_pylist() if unknown_mask.any() else []
    return KeyValues(
        columns={name: wide[:, i] for i, name in enumerate(column_names)},
        known=known,
        unknown_per_row=unknown_rows,
        errors=errors,
        unknown_keys=tuple(sorted(str(x) for x in unknown if x)),
    )


# --- timestamps ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeParts:
    """Timestamp fields found in each line; NaN where absent (``year`` alone for year-less logs)."""

    year: np.ndarray
    month: np.ndarray
    day: np.ndarray
    second_of_day: np.ndarray  # with the fraction

    @property
    def found(self) -> np.ndarray:
        return ~np.isnan(self.month)


def extract_time_parts(lines: Sequence[str] | pa.Array) -> TimeParts:
    """The leftmost timestamp of each line (ISO with year, glog, or vLLM ``mm-dd HH:MM:SS``).

    The prefix carrying it is short, so the regex first runs over the lines' heads; only lines
    without a timestamp there (SGLang 0.4.9's trailing ``timestamp:`` field) are searched whole.
    """
    arr = as_lines(lines)
    if len(arr) > PARSE_BATCH_LINES:  # keep the 19-group match structs small
        batches = [extract_time_parts(arr.slice(i, PARSE_BATCH_LINES))
                   for i in range(0, len(arr), PARSE_BATCH_LINES)]
        return TimeParts(*(np.concatenate([getattr(b, f) for b in batches])
                           for f in ("year", "month", "day", "second_of_day")))
    m = extract(pc.utf8_slice_codeunits(arr, 0, TIMESTAMP_HEAD_CHARS), _TIMESTAMP)
    ok = matched(m)
    if len(arr) and not ok.all():
        retry = np.flatnonzero(~ok)
        again = extract(arr.take(pa.array(retry)), _TIMESTAMP)
        order = np.concatenate([np.flatnonzero(ok), retry])
        merged = pa.concat_arrays([m.filter(pa.array(ok)), again])
        m = merged.take(pa.array(np.argsort(order, kind="stable")))

    def num(*names: str) -> np.ndarray:
        out = np.full(len(arr), np.nan)
        for name in names:
            values, _ = numeric(group(m, name))
            out = np.where(np.isnan(out), values, out)
        return out

    frac = pc.binary_join_element_wise(group(m, "if"), group(m, "gf"),
                                       pa.scalar("", pa.large_string()))
    frac = pc.utf8_slice_codeunits(pc.utf8_rpad(frac, 9, "0"), 0, 9)
    fraction = np.asarray(pc.cast(frac, pa.int64()).to_numpy(zero_copy_only=False)) / 1e9
    hour, minute, sec = num("iH", "gH", "vH"), num("iM", "gM", "vM"), num("iS", "gS", "vS")
    valid = (hour < 24) & (minute < 60) & (sec < 61)
    month = np.where(valid, num("imo", "gmo", "vmo"), np.nan)
    return TimeParts(
        year=np.where(valid, num("iy", "gy"), np.nan),
        month=month,
        day=np.where(valid, num("id", "gd", "vd"), np.nan),
        second_of_day=np.where(valid, hour * 3600 + minute * 60 + sec + fraction, np.nan),
    )


def unix_seconds(year: np.ndarray, month: np.ndarray, day: np.ndarray,
                 second_of_day: np.ndarray) -> np.ndarray:
    """UTC Unix seconds; NaN for missing parts or impossible dates (Feb 30, Feb 29 of 2025)."""
    year = np.asarray(year, dtype=float)
    ok = ~(np.isnan(year) | np.isnan(month) | np.isnan(day) | np.isnan(second_of_day))
    ok &= (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31)
    out = np.full(len(year), np.nan)
    if not ok.any():
        return out
    months = ((year[ok] - 1970) * 12 + month[ok] - 1).astype(np.int64).astype("datetime64[M]")
    days = months.astype("datetime64[D]") + (day[ok].astype(np.int64) - 1)
    same_month = days.astype("datetime64[M]") == months
    seconds = days.astype(np.int64) * 86400.0 + second_of_day[ok]
    out[ok] = np.where(same_month, seconds, np.nan)
    return out


@dataclass(frozen=True)
class YearChoice:
    """The year of every line and what was assumed to get it."""

    year: np.ndarray
    notes: tuple[str, ...] = ()


def assign_years(parts: TimeParts, line_numbers: np.ndarray, *, given_year: int | None,
                 mtime_s: float | None, reference_s: tuple[float, float] | None = None,
                 reference_source: str = "") -> YearChoice:
    """Years for year-less lines (vLLM, old glog), in file order, across Dec -> Jan rollovers.

    The base year comes from, in order: ``--year`` (the year of the first year-less line);
    lines of the same file that carry a year (a collector's RFC 3339 stamp included); the
    capture's other inputs (``reference_s``, their time span: the year that puts the year-less
    lines inside or nearest it); the file's modification time (the last year-less line is
    taken to be no later than the last write).
    """
    year = parts.year.copy()
    undated = np.flatnonzero(np.isnan(year) & parts.found)
    if not len(undated):
        return YearChoice(year)
    month = parts.month[undated]
    step = np.zeros(len(undated), dtype=np.int64)
    jump = np.diff(month)
    step[1:] = (jump <= -ROLLOVER_MONTHS).astype(np.int64) - (jump >= ROLLOVER_MONTHS)
    offset = np.cumsum(step)
    notes: list[str] = []
    dated = np.flatnonzero(~np.isnan(year) & parts.found)
    spanned = (_year_in_span(parts, undated, offset, reference_s)
               if reference_s is not None and given_year is None and not len(dated) else None)
    if given_year is not None:
        base = int(given_year)
        notes.append(f"year {base} for log lines without one taken from --year")
    elif len(dated):
        anchor = int(dated[0])
        before = undated[undated < anchor]
        pos = len(before) - 1 if len(before) else 0
        gap = month[pos] - parts.month[anchor]
        guess = int(year[anchor]) - (gap >= ROLLOVER_MONTHS) + (gap <= -ROLLOVER_MONTHS)
        base = guess - int(offset[pos])
        notes.append(f"year {base} for log lines without one taken from dated lines in the same "
                     f"file (line {int(line_numbers[anchor])}); pass --year to override")
    elif spanned is not None:
        base = spanned
        notes.append(f"year {base} taken from the other inputs of the capture "
                     f"({reference_source or 'their time span'}); pass --year to override")
    else:
        mtime = mtime_s if mtime_s is not None else datetime.now(UTC).timestamp()
        last_year = datetime.fromtimestamp(mtime, UTC).year
        last = int(undated[-1])
        end = unix_seconds(np.array([float(last_year)]), parts.month[[last]], parts.day[[last]],
                           parts.second_of_day[[last]])[0]
        if not np.isnan(end) and end > mtime + MTIME_SLACK_S:
            last_year -= 1
        base = last_year - int(offset[-1])
        notes.append(f"year {base} taken from the file's modification time; pass --year")
    year[undated] = base + offset
    # Only a first entry into a later year is a crossing (not the return after a late line).
    reached = np.maximum.accumulate(np.concatenate([[0], offset[:-1]]))
    crossings = np.flatnonzero(offset > reached)
    if len(crossings):
        where = ", ".join(str(int(line_numbers[undated[i]])) for i in crossings[:MAX_LISTED_LINES])
        notes.append(f"timestamps cross into a new year at line {where}")
    return YearChoice(year, tuple(notes))


def _year_in_span(parts: TimeParts, undated: np.ndarray, offset: np.ndarray,
                  span: tuple[float, float]) -> int | None:
    """The base year that puts the year-less lines inside ``span`` or, failing that, nearest
    to it (most overlap first, then smallest gap); None if no candidate gives a valid date."""
    lo, hi = float(min(span)), float(max(span))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    first = datetime.fromtimestamp(lo, UTC).year - int(offset.max()) - 1
    last = datetime.fromtimestamp(hi, UTC).year - int(offset.min()) + 1
    best: tuple[float, float, int] | None = None
    for base in range(first, last + 1):  # a handful of candidate years
        ts = unix_seconds((base + offset).astype(float), parts.month[undated], parts.day[undated],
                          parts.second_of_day[undated])
        if np.isnan(ts).all():
            continue
        start, end = float(np.nanmin(ts)), float(np.nanmax(ts))
        overlap = max(0.0, min(end, hi) - max(start, lo))
        gap = max(0.0, lo - end, start - hi)
        rank = (-overlap, gap, base)
        if best is None or rank < best:
            best = rank
    return None if best is None else best[2]


# --- combining sub-series into instance series ---------------------------------------------------


def combine_subseries(frame: pd.DataFrame, specs: Iterable[SignalSpec],
                      stale_s: float = STALE_AFTER_S) -> pd.DataFrame:
    """Long metric rows (ts, signal, kind, le, value) from a frame with ``ts``, ``sub`` and values.

    Gauges: at every time any sub-series reports, the sum (or mean) of each sub-series' latest
    value, leaving out those silent for more than ``stale_s``. Counters: per-interval values are
    accumulated per sub-series (time order), cumulative ones reset-corrected; the instance total
    is the sum of the latest cumulative value of each sub-series.
    """
    parts = []
    for spec in specs:
        if spec.column not in frame.columns:
            continue
        values = pd.to_numeric(frame[spec.column], errors="coerce").astype(float)
        if not values.notna().any():
            continue
        sel = pd.DataFrame({"ts": frame["ts"].to_numpy(dtype=float),
                            "sub": frame["sub"].to_numpy(), "v": values.to_numpy()})
        sel = sel[sel["ts"].notna()]
        sel = sel.assign(v=sel["v"].fillna(0.0)) if spec.zero_if_absent else sel[sel["v"].notna()]
        if sel.empty:
            continue
        sel = sel.sort_values("ts", kind="stable")
        if spec.kind == S.GAUGE:
            series = _gauge_total(sel, spec.combine, stale_s)
        else:
            if spec.per_interval:
                sel = sel.assign(v=sel.groupby("sub", sort=False)["v"].cumsum())
            else:
                sel = sel.assign(v=_reset_corrected(sel))
            series = _counter_total(sel)
        parts.append(pd.DataFrame({"ts": series.index.to_numpy(dtype=float), "signal": spec.signal,
                                   "kind": spec.kind, "le": spec.le,
                                   "value": series.to_numpy(dtype=float)}))
    if not parts:
        return pd.DataFrame({"ts": [], "signal": [], "kind": [], "le": [], "value": []})
    return pd.concat(parts, ignore_index=True)


def _gauge_total(sel: pd.DataFrame, how: str, stale_s: float) -> pd.Series:
    if sel["sub"].nunique() == 1:
        return sel.groupby("ts", sort=True)["v"].mean()
    wide = sel.groupby(["ts", "sub"], sort=True)["v"].mean().unstack("sub")
    index = wide.index.to_numpy(dtype=float)
    seen = pd.DataFrame(np.where(wide.notna().to_numpy(), index[:, None], np.nan)).ffill()
    fresh = (index[:, None] - seen.to_numpy()) <= stale_s
    filled = wide.ffill().where(fresh)
    total = filled.sum(axis=1, min_count=1) if how == "sum" else filled.mean(axis=1)
    return total.dropna()


def _counter_total(sel: pd.DataFrame) -> pd.Series:
    if sel["sub"].nunique() == 1:
        return sel.groupby("ts", sort=True)["v"].last()
    wide = sel.groupby(["ts", "sub"], sort=True)["v"].last().unstack("sub")
    return wide.ffill().fillna(0.0).sum(axis=1)


def _reset_corrected(sel: pd.DataFrame) -> pd.Series:
    """Cumulative values made monotonic: a drop is a restart counting again from zero."""
    step = sel.groupby("sub", sort=False)["v"].diff()
    step = step.where(step.notna() & (step >= 0), sel["v"])
    return step.groupby(sel["sub"], sort=False).cumsum()


def interval_events(frame: pd.DataFrame, column: str, event: str,
                    detail: Callable[[pd.DataFrame], pd.Series]) -> pd.DataFrame:
    """One event row per line whose ``column`` is positive (e.g. preemptions in an interval)."""
    hit = frame[pd.to_numeric(frame[column], errors="coerce").fillna(0) > 0]
    return pd.DataFrame({"ts": hit["ts"].to_numpy(dtype=float), "event": event,
                         "detail": detail(hit).to_numpy(dtype=object),
                         "line": hit["line"].to_numpy()})


# --- the reader ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScannedLines:
    """The lines a route matched, with their 1-based line numbers, and counts of the rest."""

    lines: pa.Array
    line_numbers: np.ndarray
    total: int
    blank: int
    truncated: str | None = None


def instance_for(path: Path, ctx: ReadContext) -> tuple[str, str]:
    """The instance name of an unprefixed log file and a note saying where it came from."""
    from pdprobe.collectors.log_streams import file_key

    key, note = file_key(path, ctx.instance)
    return key.name, note


def scan_lines(path: Path, route: str) -> ScannedLines:
    """Read ``path`` (gzip/zstd too) in chunks and keep only the lines ``route`` matches."""
    pieces: list[pa.Array] = []
    numbers: list[np.ndarray] = []
    total = blank = 0
    truncated: Exception | None = None
    carry = b""

    def scan(block: bytes) -> None:
        nonlocal total, blank
        arr = pa.array(block.decode("utf-8", errors="replace").split("\n"), type=pa.large_string())
        hit = np.asarray(pc.fill_null(pc.match_substring_regex(arr, route), False)
                         .to_numpy(zero_copy_only=False), dtype=bool)
        empty = pc.match_substring_regex(arr, r"^\s*$")
        blank += int(pc.sum(pc.cast(empty, pa.int64())).as_py() or 0)
        keep = np.flatnonzero(hit)
        if len(keep):
            pieces.append(pc.utf8_rtrim(arr.take(pa.array(keep)), characters="\r"))
            numbers.append(keep + total + 1)
        total += len(arr)

    buffered: list[bytes] = []
    size = 0
    with open_binary(path) as fh:
        while True:
            try:
                piece = fh.read(READ_BYTES)
            except Exception as exc:  # truncated gzip/zstd: keep what was intact
                if not _is_decompression_error(exc):
                    raise
                truncated = exc
                piece = b""
            if piece:
                buffered.append(piece)
                size += len(piece)
                if size < CHUNK_BYTES:
                    continue
            if not buffered:
                break
            data = carry + b"".join(buffered)
            buffered, size = [], 0
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
            else:
                carry = data[cut + 1:]
                scan(data[:cut])
            if not piece:
                break
    message = None
    if truncated is not None:
        # The last line is cut in the middle: a number in it may be cut too, so drop it.
        message = (f"{path}: compressed data ends early ({truncated}); used the {total} complete "
                   f"lines before the damage")
    elif carry:
        scan(carry)
    lines = pa.concat_arrays(pieces) if pieces else pa.array([], type=pa.large_string())
    line_numbers = np.concatenate(numbers) if numbers else np.zeros(0, dtype=np.int64)
    return ScannedLines(lines, line_numbers, total, blank, message)


def _is_decompression_error(exc: Exception) -> bool:
    import zlib

    return isinstance(exc, EOFError | zlib.error | OSError) or type(exc).__name__ == "ZstdError"


@dataclass
class _Problems:
    """Skipped lines by reason, for SourceInfo.skipped and the warnings."""

    by_reason: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def add(self, reason: str, line: int, text: str, detail: str = "") -> None:
        shown = text if len(text) <= 160 else text[:157] + "..."
        example = f"{detail} in {shown!r}" if detail else repr(shown)
        self.by_reason.setdefault(reason, []).append((line, example))

    def add_lines(self, reason: str, lines: np.ndarray) -> None:
        """More lines skipped for ``reason`` (after one ``add`` that gave the example)."""
        first = self.by_reason.setdefault(reason, [(0, "")])[0][1]
        self.by_reason[reason].extend((int(n), first) for n in lines)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.by_reason.values())

    def warnings(self, path: Path) -> list[str]:
        out = []
        for reason, items in self.by_reason.items():
            items.sort()
            shown = ", ".join(str(n) for n, _ in items[:MAX_LISTED_LINES])
            more = ", ..." if len(items) > MAX_LISTED_LINES else ""
            out.append(f"{path}: {len(items)} line(s) {reason}, skipped (line {shown}{more}); "
                       f"first: {items[0][1]}")
        return out


def read_engine_log(path: Path, ctx: ReadContext) -> Partial:
    """Read one engine log (plain, gzip or zstd) into a ``Partial``; never fatal for its lines.

    A log merged by a collector (``kubectl logs --prefix``, ``docker compose logs``, stern,
    journalctl, JSON exports) is split into streams by its prefix (``log_streams``), one instance
    each; an unprefixed log is one instance named by ``--instance`` or the file name.
    """
    from pdprobe.collectors import mooncake_log, sglang_log, vllm_log

    families = {"vllm": vllm_log, "sglang": sglang_log, "mooncake": mooncake_log}
    kinds = sorted((k for module in families.values() for k in module.LINE_KINDS),
                   key=lambda k: not k.high_volume)
    # A JSON export escapes the quotes of its log text: let a route's quote follow a backslash.
    route = "|".join(f"(?:{k.route})" for k in kinds).replace('"', r'\\?"')
    scanned = scan_lines(path, route)
    problems = _Problems()
    streams = _split(path, ctx, scanned, problems)
    lines, line_numbers = streams.message, streams.line_numbers

    # Route each candidate to the first kind whose pattern matches it (each kind only looks at
    # the lines no earlier kind took: the stats kinds come first and take most), and parse.
    remaining = np.arange(len(lines))
    parsed: dict[str, pd.DataFrame] = {}
    for kind in kinds:
        if not len(remaining):
            break
        pool = lines if len(remaining) == len(lines) else lines.take(pa.array(remaining))
        mask = np.asarray(pc.fill_null(pc.match_substring_regex(pool, kind.route), False)
                          .to_numpy(zero_copy_only=False), dtype=bool)
        positions = remaining[mask]
        remaining = remaining[~mask]
        if not len(positions):
            continue
        frame = _parse_in_batches(kind, pool.filter(pa.array(mask)))
        rows = frame["row"].to_numpy(dtype=np.int64)
        understood = np.zeros(len(positions), dtype=bool)
        understood[rows] = True
        for i in np.flatnonzero(~understood):
            problems.add(f"looking like {kind.label} lines but not understood",
                         int(line_numbers[positions[i]]), lines[int(positions[i])].as_py())
        frame = frame.assign(cand=positions[rows], line=line_numbers[positions[rows]])
        parsed[kind.name] = frame

    # Timestamps for every parsed row, in file order, so years roll over correctly; a
    # collector's stamp (UTC, with a year) stands for the line's own.
    recognised = np.zeros(len(lines), dtype=bool)
    for frame in parsed.values():
        recognised[frame["cand"].to_numpy(dtype=np.int64)] = True
    cand = np.flatnonzero(recognised)
    parts = _with_stamps(extract_time_parts(lines.take(pa.array(cand))), streams.stamp_s[cand])
    choice = assign_years(parts, line_numbers[cand], given_year=ctx.year, mtime_s=_mtime(path),
                          reference_s=ctx.reference_span_s,
                          reference_source=ctx.reference_source)
    ts_of_cand = np.full(len(lines), np.nan)
    ts_of_cand[cand] = unix_seconds(choice.year, parts.month, parts.day, parts.second_of_day)

    by_kind = {k.name: k for k in kinds}
    by_family: dict[str, dict[str, pd.DataFrame]] = {name: {} for name in families}
    for name, frame in parsed.items():
        cands = frame["cand"].to_numpy(dtype=np.int64)
        frame = frame.assign(ts=ts_of_cand[cands])
        if len(streams.keys) > 1:
            frame = frame.assign(stream=streams.stream[cands])
        errors = frame["error"].notna().to_numpy()
        for _, row in frame[errors].iterrows():  # rare: malformed lines only
            problems.add(f"of {by_kind[name].label} with a malformed value", int(row["line"]),
                         lines[int(row["cand"])].as_py(), str(row["error"]))
        no_ts = ~errors & frame["ts"].isna().to_numpy()
        for line_no, c in zip(frame["line"][no_ts], frame["cand"][no_ts], strict=True):
            problems.add("without a usable timestamp", int(line_no), lines[int(c)].as_py())
        good = frame[~errors & ~no_ts].drop(columns=["error", "cand"]).reset_index(drop=True)
        by_family[by_kind[name].family][name] = good

    # Each stream is assembled on its own: sub-series (engines, ranks, threads) combine within
    # an instance, never across instances.
    outputs: list[dict[str, FamilyOutput]] = []
    for sid in range(len(streams.keys)):
        per_stream: dict[str, FamilyOutput] = {}
        for name, frames in by_family.items():
            mine = {k: _stream_rows(f, sid, len(streams.keys)) for k, f in frames.items()}
            if any(len(f) for f in mine.values()):
                per_stream[name] = families[name].assemble(mine)
        outputs.append(per_stream)
    return _partial(path, streams, scanned, problems, choice, outputs)


@dataclass(frozen=True)
class _Streams:
    """The candidate lines left after removing the collector prefix, by stream."""

    message: pa.Array
    line_numbers: np.ndarray
    stream: np.ndarray  # index into keys
    stamp_s: np.ndarray  # collector stamp, NaN where none
    keys: tuple[InstanceKey, ...]
    notes: tuple[str, ...]
    label: str


def _split(path: Path, ctx: ReadContext, scanned: ScannedLines,
           problems: _Problems) -> _Streams:
    """Split the candidate lines by their collector prefix; malformed prefixes are skipped."""
    from pdprobe.collectors import log_streams

    default, note = log_streams.file_key(path, ctx.instance)
    raw = log_streams.strip_ansi(scanned.lines)
    fmt = log_streams.detect_format(raw)
    split = log_streams.split_streams(raw, fmt, default)
    keys, notes = split.keys, [note]
    if fmt not in ("none", "timestamps"):
        if ctx.instance and len(keys) == 1:  # one stream: the option names it
            keys = (InstanceKey(ctx.instance, keys[0].facts, "--instance"),)
        else:
            shown = ", ".join(k.name for k in keys[:MAX_LISTED_STREAMS])
            more = ", ..." if len(keys) > MAX_LISTED_STREAMS else ""
            notes = [f"lines split into {len(keys)} instance(s) by their {split.label} prefix "
                     f"({shown}{more})"]
            if ctx.instance:
                notes.append(f"--instance {ctx.instance!r} not used: the file names "
                             f"{len(keys)} instances in its prefixes")
    bad = split.stream < 0
    if bad.any():
        reason = (f"not valid {split.label} JSON objects with a log text" if fmt == "json"
                  else f"without the {split.label} prefix of the other lines")
        numbers = scanned.line_numbers[bad]
        first = int(np.flatnonzero(bad)[0])
        problems.add(reason, int(numbers[0]), str(raw[first].as_py()))
        problems.add_lines(reason, numbers[1:])
        keep = pa.array(~bad)
        return _Streams(split.message.filter(keep), scanned.line_numbers[~bad],
                        split.stream[~bad], split.stamp_s[~bad], keys, tuple(notes), split.label)
    return _Streams(split.message, scanned.line_numbers, split.stream, split.stamp_s, keys,
                    tuple(notes), split.label)


def _with_stamps(parts: TimeParts, stamp_s: np.ndarray) -> TimeParts:
    """``parts`` with the date and time of the lines that carry a collector stamp replaced by
    it (UTC, exact, with its year)."""
    has = ~np.isnan(stamp_s)
    if not has.any():
        return parts
    whole = np.floor(np.where(has, stamp_s, 0.0) / 86400.0)
    days = whole.astype(np.int64).astype("datetime64[D]")
    months = days.astype("datetime64[M]")
    year = months.astype("datetime64[Y]").astype(np.int64) + 1970.0
    month = months.astype(np.int64) % 12 + 1.0
    day = (days - months.astype("datetime64[D]")).astype(np.int64) + 1.0
    second = np.where(has, stamp_s, 0.0) - whole * 86400.0
    return TimeParts(np.where(has, year, parts.year), np.where(has, month, parts.month),
                     np.where(has, day, parts.day), np.where(has, second, parts.second_of_day))


def _stream_rows(frame: pd.DataFrame, sid: int, n_streams: int) -> pd.DataFrame:
    if n_streams == 1:  # the common case: no stream column, no copy
        return frame
    return frame[frame["stream"].to_numpy() == sid].drop(columns=["stream"]).reset_index(
        drop=True)


def _parse_in_batches(kind: LineKind, lines: pa.Array) -> pd.DataFrame:
    """``kind.parse`` over slices of ``lines``, so its intermediates stay small on huge logs."""
    if len(lines) <= PARSE_BATCH_LINES:
        return kind.parse(lines)
    frames = []
    for start in range(0, len(lines), PARSE_BATCH_LINES):
        frame = kind.parse(lines.slice(start, PARSE_BATCH_LINES))
        frames.append(frame.assign(row=frame["row"].to_numpy(dtype=np.int64) + start))
    return pd.concat(frames, ignore_index=True)


def _mtime(path: Path) -> float | None:
    """When the log was last written: the gzip header's time if set, else the file's mtime.

    ``gzip`` stores the original file's modification time, which survives copies that reset the
    file system's one.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
        if head[:2] == GZIP_MAGIC and len(head) == 8:
            stamp = int.from_bytes(head[4:8], "little")
            if stamp > 0:
                return float(stamp)
        return path.stat().st_mtime
    except OSError:
        return None


def _partial(path: Path, streams: _Streams, scanned: ScannedLines, problems: _Problems,
             choice: YearChoice, outputs: Sequence[Mapping[str, FamilyOutput]]) -> Partial:
    warnings: list[str] = []
    if scanned.truncated:
        warnings.append(scanned.truncated)
    warnings.extend(problems.warnings(path))
    notes: list[str] = list(streams.notes)
    used = sum(o.lines_used for out in outputs for o in out.values())
    ignored = scanned.total - scanned.blank - len(scanned.lines)
    if used:
        if np.isnan(streams.stamp_s).all():
            notes.append("log times are read as UTC (the logs carry no time zone)")
        else:
            notes.append(f"log times taken from the {streams.label} time stamps where a line "
                         f"has one, else read as UTC")
        notes.extend(choice.notes)
    if ignored > 0:
        notes.append(f"{ignored} unrelated line(s) ignored (access logs, startup messages, ...)")

    metric_parts: list[pd.DataFrame] = []
    event_parts: list[pd.DataFrame] = []
    hints: list[RoleHint] = []
    engines: dict[str, str] = {}
    families_seen: set[str] = set()
    for key, out in zip(streams.keys, outputs, strict=True):
        instance = key.name
        families_seen.update(out)
        for output in out.values():
            notes.extend(output.notes)
            warnings.extend(output.warnings)
        metric_parts.extend(m.assign(instance=instance) for m in _stream_metrics(out, notes))
        event_parts.extend(o.events.assign(instance=instance) for o in out.values()
                           if o.events is not None and len(o.events))
        where = {"file name": "log file name", "--instance": "instance"}.get(
            key.origin, f"{streams.label} stream")
        hints.extend(name_hints([instance], where, str(path)))
        hints.extend(_engine_hints(instance, path, out, warnings))
        engine = _engine_of(instance, path, out, warnings)
        if engine:
            engines[instance] = engine

    metric_frame = (conform(pd.concat(metric_parts, ignore_index=True), METRIC_COLUMNS)
                    if metric_parts else empty_frame(METRIC_COLUMNS))
    # Sorting on the instance strings costs as much as the rest: only when there are several.
    order = ["ts", "instance", "signal", "le"] if len(streams.keys) > 1 else ["ts", "signal", "le"]
    metric_frame = metric_frame.sort_values(order, kind="stable", ignore_index=True)
    if event_parts:
        ev = pd.concat(event_parts, ignore_index=True)
        ev = ev.assign(source=[f"{path.name}:{int(n)}" for n in ev["line"].to_numpy()])
        event_frame = conform(ev.sort_values(["ts", "line"], kind="stable"), EVENT_COLUMNS)
    else:
        event_frame = empty_frame(EVENT_COLUMNS)

    formats = "+".join(f"{name}-log" for name in ("vllm", "sglang", "mooncake")
                       if name in families_seen)
    if not used:
        warnings.append(f"{path}: no vLLM, SGLang or Mooncake stats, transfer or failure lines "
                        f"found ({max(ignored, 0)} other line(s)); is this an engine log?")
    source = SourceInfo(path=str(path), kind="engine-log", format=formats or "log", rows=used,
                        skipped=problems.count, notes=tuple(dict.fromkeys(notes)))
    return Partial(
        source=source,
        metrics=metric_frame if len(metric_frame) else None,
        events=event_frame if len(event_frame) else None,
        role_hints=tuple(hints),
        engines=engines,
        warnings=tuple(dict.fromkeys(warnings)),
        keys=streams.keys,
    )


def _stream_metrics(outputs: Mapping[str, FamilyOutput], notes: list[str]) -> list[pd.DataFrame]:
    """One stream's metric frames, with Mooncake's KV throughput preferred over vLLM's."""
    metrics = [o.metrics for o in outputs.values() if o.metrics is not None and len(o.metrics)]
    if "mooncake" in outputs and "vllm" in outputs:
        # Mooncake's TE throughput is wall-clock aggregate; vLLM's is per transfer and
        # under-reports with concurrency (vllm issue 48224): keep the better one only.
        te_out, vllm_out = outputs["mooncake"].metrics, outputs["vllm"].metrics
        if (te_out is not None and vllm_out is not None
                and (te_out["signal"] == S.KV_TRANSFER_THROUGHPUT_LOG).any()
                and (vllm_out["signal"] == S.KV_TRANSFER_THROUGHPUT_LOG).any()):
            notes.append("KV transfer throughput taken from the Mooncake transfer engine lines "
                         "rather than vLLM's per-transfer 'Throughput (MB/s)'")
            metrics = [m for m in metrics if m is not vllm_out]
            metrics.append(vllm_out[vllm_out["signal"] != S.KV_TRANSFER_THROUGHPUT_LOG])
    return metrics


def _engine_of(instance: str, path: Path, outputs: Mapping[str, FamilyOutput],
               warnings: list[str]) -> str | None:
    engines = [name for name in ("vllm", "sglang") if name in outputs]
    if len(engines) > 1:
        engines.sort(key=lambda name: -outputs[name].lines_used)
        warnings.append(f"{path}: {instance!r} holds both vLLM and SGLang stats lines; taking "
                        f"the engine to be {engines[0]} (more lines); split the file per "
                        f"instance")
    return engines[0] if engines else ("mooncake" if "mooncake" in outputs else None)


def _engine_hints(instance: str, path: Path, outputs: Mapping[str, FamilyOutput],
                  warnings: list[str]) -> list[RoleHint]:
    """Role hints from the log's content; contradictory hints of one strength cancel out."""
    raw = [h for o in outputs.values() for h in o.hints]
    out = []
    for strength in sorted({s for _, _, s in raw}, reverse=True):
        same = [(role, how) for role, how, s in raw if s == strength]
        roles = {role for role, _ in same}
        if len(roles) > 1:
            detail = "; ".join(f"{role}: {how}" for role, how in same)
            warnings.append(f"{path}: the log shows both prefill and decode behaviour ({detail}); "
                            f"not using it for the role")
            continue
        role, how = same[0]
        out.append(RoleHint(instance, role, how, strength, str(path)))
    return out


__all__ = [
    "EventRows",
    "FamilyOutput",
    "LineKind",
    "SignalSpec",
    "TimeParts",
    "YearChoice",
    "assign_years",
    "combine_subseries",
    "extract_time_parts",
    "instance_for",
    "parse_key_values",
    "read_engine_log",
    "scan_lines",
    "unix_seconds",
]
