"""Grouped (many-series-at-once) window math over frames of cumulative samples.

Sorts a frame's rows by series key, then time (``group_sorted``), and computes every series'
increase over one window (``window_increase``) or over many back-to-back windows at once
(``increases_by_window``), and interpolates each point against its own series
(``interp_grouped``). Like ``pdprobe.promql_math`` (the scalar and per-array forms) it imports
nothing from pdprobe: it sits in the bottom layer; ``pdprobe.analysis.promql`` re-exports it.

Window convention (``window_increase``, ``increases_by_window``): the increase of a cumulative
series over ``[start_ts, end_ts]`` is the value of its last sample at or before ``end_ts`` minus
its *baseline*: the last sample at or before ``start_ts`` if there is one, else the first sample
inside the window. Back-to-back windows therefore add up exactly. A series with a single usable
sample has no known increase (NaN) unless ``from_zero`` is set, which takes 0 as the baseline (a
counter that started inside the window, e.g. a single ``/metrics`` snapshot of a freshly started
server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class SortedGroups:
    """Rows of a frame sorted by group key, then time: ``order`` into the frame, group bounds."""

    order: np.ndarray
    starts: np.ndarray  # first sorted position of each group
    ends: np.ndarray  # one past its last
    ts: np.ndarray  # sorted
    values: np.ndarray  # sorted

    @property
    def sizes(self) -> np.ndarray:
        return self.ends - self.starts

    def key_frame(self, frame: pd.DataFrame, cols: list[str], positions: np.ndarray
                  ) -> pd.DataFrame:
        """The key columns at sorted ``positions``, dtypes kept."""
        rows = self.order[positions]
        return frame[cols].take(rows).reset_index(drop=True)


def group_sorted(frame: pd.DataFrame, cols: list[str], *, dropna: bool) -> SortedGroups:
    """Stable sort by the key columns (each ascending, missing last) then ``ts``."""
    import pandas as pd

    codes = []
    keep = np.ones(len(frame), dtype=bool)
    for col in cols:
        c, uniques = pd.factorize(frame[col], sort=True, use_na_sentinel=True)
        missing = c < 0
        if dropna:
            keep &= ~missing
        codes.append(np.where(missing, len(uniques), c))
    ts = frame["ts"].to_numpy(dtype=np.float64)
    # lexsort's last key is the primary one: the first key column.
    order = np.lexsort((ts, *reversed(codes)))
    if not keep.all():
        order = order[keep[order]]
    n = len(order)
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
        for c in codes:
            cs = c[order]
            change[1:] |= cs[1:] != cs[:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n).astype(starts.dtype)
    return SortedGroups(order=order, starts=starts, ends=ends, ts=ts[order],
                   values=frame["value"].to_numpy(dtype=np.float64)[order])


def window_increase(frame: pd.DataFrame, group_cols: list[str], start_ts: float | None,
                     end_ts: float | None, from_zero: bool) -> pd.DataFrame:
    """Per group: increase over the window (see the module docstring); NaN when unknown.

    ``frame`` holds no missing values (``_select`` drops them). Groups come out sorted by key.
    """
    import pandas as pd

    if end_ts is not None:
        frame = frame[frame["ts"].to_numpy(dtype=np.float64) <= end_ts]
    if frame.empty:
        return pd.DataFrame(columns=[*group_cols, "increase"])
    g = group_sorted(frame, group_cols, dropna=False)
    counts = None
    if start_ts is not None:
        # Per group, samples at or before the start and strictly before it (time-sorted).
        counts = (np.add.reduceat((g.ts <= start_ts).astype(np.int64), g.starts),
                  np.add.reduceat((g.ts < start_ts).astype(np.int64), g.starts))
    inc = increase_within(g.values, g.ts, g.starts, g.sizes, start_ts, counts, from_zero)
    out = g.key_frame(frame, group_cols, g.starts)
    out["increase"] = inc
    return out


def increase_within(values: np.ndarray, ts: np.ndarray, starts: np.ndarray, size: np.ndarray,
                    start_ts: float | None, counts: tuple[np.ndarray, np.ndarray] | None,
                    from_zero: bool) -> np.ndarray:
    """Per group of time-sorted samples (``values[starts[i]:starts[i] + size[i]]``, every
    ``size`` > 0), the increase from the window's base to the last sample; NaN when unknown.

    With ``start_ts``, ``counts`` gives per group the samples at or before it and strictly
    before it; the base is the last sample at or before the start, else the first inside.
    """
    last_pos = starts + size - 1
    last, last_ts = values[last_pos], ts[last_pos]
    if start_ts is None or counts is None:
        base = values[starts]
        n_used = size
        in_window = size > 0
    else:
        n_at_or_before, n_before = counts
        n_inside = size - n_before
        has_before = n_at_or_before > 0
        base_before = values[np.maximum(starts + n_at_or_before - 1, 0)]
        base_inside = values[np.minimum(starts + n_before, last_pos)]
        base = np.where(has_before, base_before, np.where(n_inside > 0, base_inside, np.nan))
        n_used = n_inside + has_before.astype(np.int64)
        # A series whose last sample precedes the window has ended: its increase is unknown.
        in_window = (last_ts >= start_ts) & (n_inside > 0)
    inc = last - base
    inc = np.where(n_used < 2, last, inc) if from_zero else np.where(n_used >= 2, inc, np.nan)
    return np.where(in_window, inc, np.nan)


def increases_by_window(g: SortedGroups, edges: np.ndarray,
                         from_zero: bool) -> tuple[np.ndarray, np.ndarray]:
    """``window_increase`` of the groups ``g`` over every window ``[edges[w], edges[w + 1]]``.

    Returns two ``[group, window]`` arrays: the increase (NaN when unknown) and whether the
    group has any sample at or before the window's end (``window_increase`` leaves the others
    out altogether). Callers pass blocks of windows (``_window_blocks``) to bound the memory.
    """
    e = np.asarray(edges, dtype=np.float64)
    n_groups, n_win = len(g.starts), len(e) - 1
    if n_groups == 0 or n_win < 1:
        empty = np.zeros((n_groups, max(n_win, 0)))
        return empty * np.nan, empty.astype(bool)
    # Count samples at/before and before each edge, for all groups at once, by searching a key
    # that orders by group, then by time since the group's first sample. Edges are clipped to
    # just outside each group's span, which leaves the counts unchanged.
    origin = g.ts[g.starts]
    span = g.ts[g.ends - 1] - origin
    width = float(span.max()) + 2.0
    sample_group = np.repeat(np.arange(n_groups), g.sizes)
    sample_key = sample_group * width + (g.ts - origin[sample_group])
    offset = np.clip(e[None, :] - origin[:, None], -0.5, span[:, None] + 0.5)
    edge_key = np.arange(n_groups)[:, None] * width + offset
    starts = g.starts[:, None]
    at_or_before = np.searchsorted(sample_key, edge_key, side="right") - starts
    before = np.searchsorted(sample_key, edge_key, side="left") - starts
    n_le_lo, n_lt_lo, n_le_hi = at_or_before[:, :-1], before[:, :-1], at_or_before[:, 1:]
    present = n_le_hi > 0
    last_pos = np.maximum(starts + n_le_hi - 1, 0)
    last, last_ts = g.values[last_pos], g.ts[last_pos]
    n_inside = n_le_hi - n_lt_lo
    has_before = n_le_lo > 0
    base_before = g.values[np.maximum(starts + n_le_lo - 1, 0)]
    base_inside = g.values[np.minimum(starts + n_lt_lo, g.ends[:, None] - 1)]
    base = np.where(has_before, base_before, np.where(n_inside > 0, base_inside, np.nan))
    n_used = n_inside + has_before
    inc = last - base
    inc = np.where(n_used < 2, last, inc) if from_zero else np.where(n_used >= 2, inc, np.nan)
    inc = np.where((last_ts >= e[None, :-1]) & (n_inside > 0) & present, inc, np.nan)
    return inc, present


def interp_grouped(g: SortedGroups, group_of_point: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``np.interp(x, t, v)`` of each point against its own group's samples (x within range)."""
    t, v = g.ts, g.values
    # Search all groups at once on a composite key: group number, then time since the group's
    # first sample (differences of nearby doubles are exact, so ties stay ties).
    origin = t[g.starts]
    width = float(np.max(t[g.ends - 1] - origin)) + 1.0
    sample_group = np.repeat(np.arange(len(g.starts)), g.sizes)
    sample_key = sample_group * width + (t - origin[sample_group])
    point_key = group_of_point * width + (x - origin[group_of_point])
    j = np.searchsorted(sample_key, point_key, side="right") - 1
    j = np.clip(j, g.starts[group_of_point], g.ends[group_of_point] - 1)
    at_end = j == g.ends[group_of_point] - 1
    nxt = np.where(at_end, j, j + 1)
    exact = at_end | (t[j] == x)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = (v[nxt] - v[j]) / (t[nxt] - t[j])
        inside = slope * (x - t[j]) + v[j]
    return np.where(exact, v[j], inside)
