"""The interface every benchmark-output reader fills: parallel per-request arrays -> ``Partial``.

A reader (one module per load generator) parses its writer's layout into a ``Runs`` object:
numpy arrays of equal length (arrival, token counts, latencies in seconds, status) and, where
the writer keeps them, per-request inter-token latency lists as a ``Ragged`` array. ``to_partial``
turns that into the canonical request table (``pdprobe.dataset.REQUEST_COLUMNS``): ``tpot_s``
from the ITL lists, one summary note on the ITL spread, rows sorted by arrival.

Everything here is columnar; only the per-line JSON parsing in the readers touches Python
objects, once per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Final

import numpy as np

from pdprobe.dataset import REQUEST_COLUMNS, Partial, SourceInfo
from pdprobe.errors import InputError

# A median gap between two streamed tokens above this many "seconds" is milliseconds: real
# engines stream tokens every few ms to a few hundred ms, so 1 s medians do not happen, while
# the same numbers in ms (5-100) are ordinary.
ITL_SECONDS_MAX: Final = 1.0
# A median TTFT or end-to-end latency above this many "seconds" (10 minutes) is milliseconds:
# a load test whose typical request waits ten minutes has no meaningful latency left to read.
LATENCY_SECONDS_MAX: Final = 600.0
# Quantiles of all per-token gaps quoted in the source notes (the per-request ITL spread).
ITL_NOTE_QUANTILES: Final = (50.0, 90.0, 99.0)
# How many examples a warning quotes.
QUOTE_FIRST: Final = 3


@dataclass(frozen=True)
class Ragged:
    """Per-request lists of numbers, flattened: ``values`` split by ``lengths``."""

    values: np.ndarray  # float64, all lists concatenated
    lengths: np.ndarray  # int64, one per request

    @staticmethod
    def from_lists(lists: Sequence[Any]) -> Ragged:
        """From a sequence of lists (``None`` or a non-list counts as an empty list)."""
        clean = [x if isinstance(x, list) else () for x in lists]
        lengths = np.fromiter(map(len, clean), dtype=np.int64, count=len(clean))
        try:
            values = np.fromiter(chain.from_iterable(clean), dtype=np.float64,
                                 count=int(lengths.sum()))
        except (TypeError, ValueError):  # a non-number inside a list: keep only the numbers
            values = np.array([_num(v) for v in chain.from_iterable(clean)], dtype=np.float64)
        return Ragged(values, lengths)

    @staticmethod
    def concat(parts: Iterable[Ragged]) -> Ragged:
        """Join ragged arrays end to end (an empty input gives an empty array)."""
        parts = list(parts)
        if not parts:
            return Ragged(np.zeros(0), np.zeros(0, dtype=np.int64))
        return Ragged(np.concatenate([p.values for p in parts]),
                      np.concatenate([p.lengths for p in parts]))

    def take(self, n: int) -> Ragged:
        """The first ``n`` lists."""
        lengths = self.lengths[:n]
        return Ragged(self.values[: int(lengths.sum())], lengths)

    def sums(self) -> np.ndarray:
        """Sum of each list (0 for an empty one), ignoring NaN entries."""
        ids = np.repeat(np.arange(self.lengths.size), self.lengths)
        vals = np.nan_to_num(self.values, nan=0.0)
        return np.bincount(ids, weights=vals, minlength=self.lengths.size)

    def scaled(self, factor: float) -> Ragged:
        """The same lengths with every value multiplied by ``factor`` (a unit change)."""
        return Ragged(self.values * factor, self.lengths)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a null or a wrong type)."""
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


@dataclass
class Runs:
    """Parallel per-request arrays (seconds, tokens) a reader collected from one file."""

    arrival_ts: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    status: np.ndarray  # object array of canonical statuses
    ttft_s: np.ndarray | None = None
    tpot_s: np.ndarray | None = None  # when the writer saves it; else from ``itl_s``
    e2e_s: np.ndarray | None = None
    request_id: np.ndarray | None = None
    cached_tokens: np.ndarray | None = None
    itl_s: Ragged | None = None  # per-token gaps after the first token, per request
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0


def num_array(values: Sequence[Any], n: int | None = None) -> np.ndarray:
    """float64 array from a list of numbers (``None`` and non-numbers become NaN)."""
    try:
        out = np.array(values, dtype=np.float64)
        if out.ndim != 1:
            raise ValueError
    except (TypeError, ValueError):
        out = np.array([_num(v) for v in values], dtype=np.float64)
    return out if n is None else out[:n]


def error_status(texts: Sequence[Any]) -> np.ndarray:
    """Canonical status from per-request error texts ('' or None means the request succeeded).

    A text naming a timeout (``TimeoutError``, HTTP 408/504) is ``timeout``; one naming a
    cancellation (``CancelledError``, HTTP 499) is ``aborted``; any other text is ``error``.
    """
    import pandas as pd

    s = pd.Series(list(texts), dtype=object).fillna("").astype(str).str.lower()
    out = np.where(s.str.len() > 0, "error", "ok").astype(object)
    timeout = s.str.contains(r"timeout|timed out|time out|\b408\b|\b504\b", regex=True)
    aborted = s.str.contains(r"cancel|abort|\b499\b", regex=True)
    out[(out == "error") & timeout.to_numpy()] = "timeout"
    out[(out == "error") & aborted.to_numpy() & ~timeout.to_numpy()] = "aborted"
    return out


def to_seconds(values: np.ndarray, what: str, limit_s: float, notes: list[str]) -> np.ndarray:
    """``values`` in seconds: a median above ``limit_s`` means they were written in ms (noted)."""
    finite = values[np.isfinite(values) & (values > 0)]
    if finite.size and float(np.median(finite)) > limit_s:
        notes.append(f"{what} read as milliseconds: their median {float(np.median(finite)):.4g} "
                     f"is too large for seconds (detected by magnitude)")
        return values / 1e3
    return values


def itl_to_seconds(itl: Ragged, what: str, notes: list[str]) -> Ragged:
    """Per-token gaps in seconds; a median above ``ITL_SECONDS_MAX`` means ms (noted)."""
    finite = itl.values[np.isfinite(itl.values) & (itl.values > 0)]
    if finite.size and float(np.median(finite)) > ITL_SECONDS_MAX:
        notes.append(f"{what} read as milliseconds: their median {float(np.median(finite)):.4g} "
                     f"is too large for seconds between tokens (detected by magnitude)")
        return itl.scaled(1e-3)
    return itl


def equal_lengths(lists: dict[str, Sequence[Any] | None], where: str,
                  warnings: list[str]) -> int:
    """The common length of the per-request lists; unequal lengths give a warning with counts
    and the shortest wins (the lists are parallel: index i is one request in every list)."""
    sizes = {k: len(v) for k, v in lists.items() if v is not None}
    if not sizes:
        return 0
    n = min(sizes.values())
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"{k} {v}" for k, v in sizes.items())
        warnings.append(f"{where}: per-request lists of unequal length ({shown}); read the first "
                        f"{n} requests, {max(sizes.values()) - n} dropped")
    return n


def spread_arrivals(n: int, start_ts: float, duration_s: float) -> np.ndarray:
    """Evenly spaced arrivals over ``[start_ts, start_ts + duration_s)`` (a documented guess
    for writers that keep no send times)."""
    if n == 0:
        return np.zeros(0)
    step = duration_s / n if duration_s > 0 and np.isfinite(duration_s) else 0.0
    return start_ts + step * np.arange(n, dtype=np.float64)


def file_end_ts(path: Path) -> float:
    """The file's modification time: writers save their results when the run ends."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def load_json_document(path: Path, data: bytes, what: str) -> Any:
    """Parse a whole JSON document; a file cut short is one line naming the byte offset."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not a complete {what} JSON document ({exc}); the file may "
                         f"have been cut in the middle ({len(data)} bytes)",
                         hint="copy the file again, or re-run the benchmark") from exc


def json_lines(path: Path, data: bytes, what: str, warnings: list[str]) -> list[Any]:
    """Parse JSON lines; broken lines are skipped with a warning (count and line numbers)."""
    import orjson

    out = []
    bad: list[int] = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            bad.append(number)
    if bad:
        cut = " (the last line is cut: the file was copied or written only in part)" \
            if bad[-1] == len(data.splitlines()) and not data.endswith(b"\n") else ""
        warnings.append(f"{path.name}: {len(bad)} broken {what} line(s) skipped, first at line "
                        f"{', '.join(map(str, bad[:QUOTE_FIRST]))}{cut}")
    if not out:
        raise InputError(f"{path}: no readable {what} line ({len(bad)} broken)",
                         hint="copy the file again, or re-run the benchmark")
    return out


def itl_note(itl: Ragged) -> str | None:
    """One line on the spread of all per-token gaps (the per-request ITL spread)."""
    values = itl.values[np.isfinite(itl.values)]
    if not values.size:
        return None
    qs = np.percentile(values, ITL_NOTE_QUANTILES)
    shown = ", ".join(f"p{q:g} {v * 1e3:.1f} ms" for q, v in zip(ITL_NOTE_QUANTILES, qs,
                                                                     strict=True))
    return f"per-token ITLs: {values.size} gaps over {int((itl.lengths > 0).sum())} requests ({shown})"


def to_partial(path: Path, fmt: str, runs: Runs, limits: str) -> Partial:
    """The canonical request table of ``runs``; ``limits`` is the source note saying what the
    format cannot tell (no instance names, guessed arrival times, ...)."""
    import pandas as pd

    n = runs.arrival_ts.size
    notes = list(runs.notes)
    ok = runs.status == "ok"
    out_tokens = runs.output_tokens.astype(np.float64)
    tpot = runs.tpot_s
    if runs.itl_s is not None:
        itl = runs.itl_s
        if tpot is None:
            # TPOT is the decode time per output token after the first: the sum of the gaps over
            # (tokens - 1). That is the mean ITL when each streamed chunk holds one token.
            tpot = np.where(out_tokens > 1, itl.sums() / np.maximum(out_tokens - 1, 1), np.nan)
            multi = ok & (itl.lengths > 0) & (itl.lengths != out_tokens - 1)
            if multi.any():
                notes.append(f"{int(multi.sum())} request(s) streamed a chunk count other than "
                             f"their tokens - 1: TPOT is the ITL sum / (tokens - 1), not the mean "
                             f"ITL")
        note = itl_note(itl)
        if note:
            notes.append(note)
    columns: dict[str, Any] = {
        "arrival_ts": runs.arrival_ts,
        "prompt_tokens": runs.prompt_tokens,
        "output_tokens": runs.output_tokens,
        "status": runs.status,
    }
    for name, values in (("ttft_s", runs.ttft_s), ("tpot_s", tpot), ("e2e_s", runs.e2e_s),
                         ("cached_tokens", runs.cached_tokens), ("request_id", runs.request_id)):
        if values is not None:
            columns[name] = values
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        if name in columns:  # failed requests keep their status and lengths, not latencies
            v = np.asarray(columns[name], dtype=np.float64)
            columns[name] = np.where(ok & np.isfinite(v) & (v >= 0), v, np.nan)
    frame = pd.DataFrame(columns)
    for name in ("prompt_tokens", "output_tokens"):
        # a failed request often has no length: it counts as 0 tokens rather than vanishing
        lost = (~ok) & ~np.isfinite(frame[name].to_numpy(dtype=np.float64))
        if lost.any():
            frame.loc[lost, name] = 0.0
            if name == "prompt_tokens":
                notes.append(f"{int(lost.sum())} failed request(s) without a prompt length "
                             f"counted as 0 prompt tokens")
    keep = np.isfinite(frame["arrival_ts"].to_numpy(dtype=np.float64)) \
        & np.isfinite(frame["prompt_tokens"].to_numpy(dtype=np.float64)) \
        & np.isfinite(frame["output_tokens"].to_numpy(dtype=np.float64)) \
        & (frame["prompt_tokens"].to_numpy(dtype=np.float64) >= 0) \
        & (frame["output_tokens"].to_numpy(dtype=np.float64) >= 0)
    dropped = int(n - keep.sum())
    warnings = list(runs.warnings)
    if dropped:
        warnings.append(f"{path.name}: {dropped} request(s) without arrival time or token counts "
                        f"dropped")
        frame = frame[keep]
    if frame.empty:
        raise InputError(f"{path}: no usable request in this {fmt} file ({n} listed)",
                         hint="check that the benchmark saved per-request details")
    frame["prompt_tokens"] = frame["prompt_tokens"].round()
    frame["output_tokens"] = frame["output_tokens"].round()
    frame = frame.sort_values("arrival_ts", kind="stable")
    present = frozenset(c for c in frame.columns if c in REQUEST_COLUMNS
                        and frame[c].notna().any())
    frame = frame.astype({c: REQUEST_COLUMNS[c] for c in frame.columns if c in REQUEST_COLUMNS})
    from pdprobe.dataset import conform

    frame = conform(frame, REQUEST_COLUMNS)
    counts = pd.Series(frame["status"]).value_counts()
    failed = ", ".join(f"{int(counts[s])} {s}" for s in ("error", "timeout", "aborted")
                       if s in counts.index)
    if failed:
        notes.append(f"failed requests kept with their status: {failed}")
    notes.append(limits)
    source = SourceInfo(path=str(path), kind="requests", format=fmt, rows=len(frame),
                        skipped=runs.skipped + dropped, notes=tuple(notes))
    return Partial(source=source, requests=frame, request_columns=present,
                   warnings=tuple(warnings))


NO_INSTANCES: Final = ("no instance names: per-instance analysis, stragglers and skew cannot "
                       "be judged from these records (add the engines' metrics or logs)")
