"""The toolkit the engine-log family parsers (vllm_log, sglang_log, mooncake_log, vllm_events)
are written with: what a family declares (``SignalSpec``, ``LineKind``, ``FamilyOutput``), vectorised
regex extraction over pyarrow string arrays, numeric parsing with the first bad value named,
``key=value`` bodies, event rows, and the sub-series totals (DP ranks, engines, threads).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pdprobe import signals as S
from pdprobe.dataset import (
    ROLE_FROM_LABEL,
)
from pdprobe.signals import Role

# A sub-series (engine, DP rank, transfer-engine thread) silent for longer than this is left out
# of the instance total: vLLM logs stats at DEBUG when idle and SGLang logs only when it runs
# batches, so carrying an old value forward would overstate the load. Six default vLLM intervals.
STALE_AFTER_S: Final = 60.0


# PD-only fields in stats lines (SGLang #bootstrap-req, vLLM "KV fetch:") are printed only by an
# engine running in that PD mode, so they outrank a name pattern; an explicit label is the
# operator's declared intent and still wins, hence just below ROLE_FROM_LABEL.
ROLE_FROM_ENGINE_FIELDS: Final = ROLE_FROM_LABEL - 5


# Behavioural role evidence (e.g. no generation at all) needs at least this many active stats
# lines, so a short or idle log does not decide a role.
MIN_EVIDENCE_LINES: Final = 5


MIB: Final = float(2**20)


_NUMBER: Final = r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$"


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
