"""Validation of numbers at the collector edge: what no real capture can hold is dropped here.

Readers parse whatever a file says; these functions decide which values can be true of a
serving cluster and count the rest, so the analysis never sees a 1e300 s TTFT, a negative
token count, a 1970 arrival in a 2025 capture or a counter of 1e308. Everything is vectorised
(numpy masks); each function returns what it dropped so the reader can warn with a count.
See docs/safety.md ("Input").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.dataset import Partial

# Token counts per request above this are not real: the longest context windows offered are
# ~1e7 tokens, and a count beyond 2**53 would not even survive the float64 round trip.
MAX_TOKENS: Final = 1e9
# Durations per request (TTFT, TPOT, e2e, queue, ...) above a week are not latencies: batch
# APIs promise answers within 24 h; anything longer is a unit or export error (1e300 s).
MAX_DURATION_S: Final = 7 * 86400.0
# KV bytes moved for one request above 100 TB are not real: a million-token context of a
# model without GQA (OPT-175B, 4.7 MB/token) is ~5e12 bytes.
MAX_KV_BYTES: Final = 1e14
# Per prompt token: the largest models hold ~0.5 MB (Llama-3.1-405B with GQA) to ~5 MB
# (OPT-175B without) of KV per token; 100 MB is no model.
MAX_KV_BYTES_PER_TOKEN: Final = 1e8
# Unix seconds beyond 1e10 (the year 2286) are not wall-clock times of a capture; negative
# ones are before 1970. Relative traces count from 0 and stay inside this range too.
MAX_EPOCH_S: Final = 1e10
# Time points separated from the bulk of a file's times by a gap longer than this are not part
# of the capture (one arrival of 1970, rows in milliseconds among rows in seconds): a real
# capture has no month without a sample.
OUTLIER_GAP_S: Final = 30 * 86400.0
# Metric values: no 64-bit counter exceeds 2**64; gauges and rates are far below.
MAX_METRIC_VALUE: Final = float(2**64)


@dataclass(frozen=True)
class Dropped:
    """What a check removed: a mask over the input and a phrase for the warning."""

    mask: np.ndarray  # True where the value was dropped
    why: str  # e.g. "negative", "above 1e+09"

    @property
    def count(self) -> int:
        """How many values were dropped."""
        return int(np.count_nonzero(self.mask))


def implausible(values: np.ndarray, low: float, high: float) -> tuple[np.ndarray, str]:
    """Mask of finite values outside ``[low, high]``, and how they were out of range.

    NaN (missing) is not implausible: the caller already knows what is missing. The reason is
    empty exactly when the mask is all False; that mask is then a read-only view of one False
    (no memory: a zeroed mask of the column's length was a 10 MB memset per column at 10M
    rows under the CLI's heap settings, where calloc reuses written pages).
    """
    if np.isfinite(low) and np.isfinite(high) and _within(values, low, high):
        # an infinity is below or above finite bounds: there is none either
        return np.broadcast_to(np.False_, values.shape), ""
    with np.errstate(invalid="ignore"):
        below = values < low
        above = values > high
    inf = np.isinf(values)
    parts = []
    n_inf = int(np.count_nonzero(inf))
    if n_inf:
        parts.append(f"{n_inf} infinite")
    n_below = int(np.count_nonzero(below & ~inf))
    if n_below:
        parts.append(f"{n_below} negative" if low == 0 else f"{n_below} below {low:g}")
    n_above = int(np.count_nonzero(above & ~inf))
    if n_above:
        parts.append(f"{n_above} above {high:g}")
    return below | above | inf, ", ".join(parts)


def _within(values: np.ndarray, low: float, high: float) -> bool:
    """Whether every value is a number in ``[low, high]``: two reductions, no mask as long
    as ``values`` (half the work of the masks). False when a value is NaN (the smallest is
    then NaN): the masks decide."""
    if values.size == 0:
        return True
    return bool(values.min() >= low) and bool(values.max() <= high)


def time_outliers(ts: np.ndarray, gap_s: float = OUTLIER_GAP_S,
                  span: tuple[float, float] | None = None) -> np.ndarray:
    """Mask of finite times outside the largest cluster of times (clusters split by gaps
    longer than ``gap_s``).

    O(n) when the times lie within ``gap_s`` of each other (the usual case); otherwise one
    sort. On a tie between clusters the earliest wins. ``span``, when known, is the smallest
    and largest finite time (then not searched for).
    """
    out = np.zeros(ts.shape, dtype=bool)
    lo, hi = _finite_range(ts) if span is None else span
    if lo is None or hi is None or hi - lo <= gap_s:
        return out
    finite = np.isfinite(ts)
    vals = ts[finite]
    order = np.argsort(vals, kind="stable")
    s = vals[order]
    breaks = np.flatnonzero(np.diff(s) > gap_s) + 1
    bounds = np.concatenate(([0], breaks, [s.size]))
    sizes = np.diff(bounds)
    best = int(np.argmax(sizes))
    first, last = s[bounds[best]], s[bounds[best + 1] - 1]
    keep = (vals >= first) & (vals <= last)
    out[np.flatnonzero(finite)[~keep]] = True
    return out


def _finite_range(ts: np.ndarray) -> tuple[float | None, float | None]:
    """The smallest and largest finite value (None without one), without copying the finite
    values out: NaN is skipped by ``fmin``/``fmax``; only infinities need a closer look."""
    if ts.size == 0:
        return None, None
    with np.errstate(invalid="ignore"):
        lo, hi = float(np.fmin.reduce(ts)), float(np.fmax.reduce(ts))
    if np.isfinite(lo) and np.isfinite(hi):
        return lo, hi
    if not (np.isinf(lo) or np.isinf(hi)):  # no finite value, no infinity: all NaN
        return None, None
    vals = ts[np.isfinite(ts)]  # rare: infinities among the times
    if not vals.size:
        return None, None
    return float(vals.min()), float(vals.max())


def check_times(ts: np.ndarray, gap_s: float = OUTLIER_GAP_S,
                span: tuple[float, float] | None = None) -> list[Dropped]:
    """Times that cannot belong to the capture: out of Unix range, then far from the bulk.

    ``span``, when known (a Parquet footer's statistics), is the smallest and largest time
    that is not NaN: when it lies in Unix range it answers both range questions without a
    pass over the times; otherwise the times are scanned as without it."""
    drops: list[Dropped] = []
    if span is not None and span[0] >= 0.0 and span[1] <= MAX_EPOCH_S:
        far = time_outliers(ts, gap_s, span)  # every time in range: finite, none dropped
    else:
        bad, why = implausible(ts, 0.0, MAX_EPOCH_S)
        if why:  # something out of range
            drops.append(Dropped(bad, f"not a Unix time in seconds between 1970 and 2286 "
                                      f"({why})"))
        rest = np.where(bad, np.nan, ts) if drops else ts  # no copy when every time is in range
        far = time_outliers(rest, gap_s)
    if far.any():
        drops.append(Dropped(far, f"more than {gap_s / 86400:g} days away from the other "
                                  "times (a wrong clock or unit, e.g. milliseconds)"))
    return drops


def describe(drops: Sequence[Dropped]) -> str:
    """The reasons of the drops that dropped anything, joined for one warning."""
    return "; ".join(f"{d.why}" for d in drops if d.count)


def sanitize_metrics(frame: pd.DataFrame, what: str) -> tuple[pd.DataFrame, list[str]]:
    """Drop metric rows (``ts``, ``value`` columns) that no engine or exporter produces:
    non-finite or negative values, values beyond ``MAX_METRIC_VALUE``, times outside Unix
    range or far from the file's other times. ``what`` names the file for the warnings.

    Every signal pdprobe reads is a count, a duration, a size, a ratio or a rate: none is
    negative.
    """
    values = frame["value"].to_numpy(dtype=np.float64, na_value=np.nan)
    ts = frame["ts"].to_numpy(dtype=np.float64, na_value=np.nan)
    warnings: list[str] = []
    bad_value, why = implausible(values, 0.0, MAX_METRIC_VALUE)
    nan = np.isnan(values)
    drop = bad_value | nan
    if drop.any():
        parts = ([f"{int(nan.sum())} NaN"] if nan.any() else []) + ([why] if why else [])
        warnings.append(f"{what}: dropped {int(drop.sum())} metric sample(s) that no engine "
                        f"reports ({', '.join(parts)})")
    time_drops = check_times(np.where(drop, np.nan, ts) if drop.any() else ts)
    bad_ts = np.isnan(ts) & ~drop
    for d in time_drops:
        warnings.append(f"{what}: dropped {d.count} metric sample(s) whose time is {d.why}")
        drop |= d.mask
    if bad_ts.any():
        drop |= bad_ts
        warnings.append(f"{what}: dropped {int(bad_ts.sum())} metric sample(s) without a time")
    if not drop.any():
        return frame, []
    return frame.loc[~drop].reset_index(drop=True), warnings


def checked_partial(partial: Partial) -> Partial:
    """The partial with metric, network and event rows no engine produces dropped (every
    reader's output passes here: engine logs, captures and live answers as well as metric
    dumps)."""
    frames: dict[str, Any] = {}
    warnings: list[str] = []
    what = partial.source.path
    for name in ("metrics", "network"):
        frame = getattr(partial, name)
        if frame is not None and len(frame):
            kept, said = sanitize_metrics(frame, what)
            if said:
                frames[name] = kept
                warnings.extend(said)
    if partial.events is not None and len(partial.events):
        # Events are single lines (a failure months before the rest is still a failure):
        # only times that are no Unix time at all go.
        ts = partial.events["ts"].to_numpy(dtype=np.float64, na_value=np.nan)
        bad = np.isnan(ts) | implausible(ts, 0.0, MAX_EPOCH_S)[0]
        if bad.any():
            frames["events"] = partial.events.loc[~bad].reset_index(drop=True)
            warnings.append(f"{what}: dropped {int(bad.sum())} event(s) whose time is missing "
                            "or not a Unix time between 1970 and 2286")
    if not frames:
        return partial
    return replace(partial, **frames, warnings=partial.warnings + tuple(warnings))
