"""Counts per capacity window from every request: window edges, each window's run of sorted
arrivals and its length sums, the instances seen in it, the requests completed in it.

Memory: these are passes over every request record (10 million at scale), so each runs in
chunks of ``sampling.PASS_CHUNK`` rows: a window index, an instance key or a completion time
exists for one chunk at a time, never for the whole capture (each would be 80 MB of fresh
pages, about a quarter CPU-second of page faults). Counts are added chunk by chunk (exact);
sums are added in the order ``np.bincount`` adds them (``chunked.run_sums``), so the figures
are bit for bit those of whole-array passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis import sampling
from pdprobe.analysis.capacity.perf_columns import category_codes
from pdprobe.analysis.completion_runs import completion_runs, ok_places
from pdprobe.analysis.table_facts import column_ascending

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.dataset import Dataset

# A trailing window shorter than this share of the window length is merged into the previous.
MIN_TAIL_FRACTION: Final = 0.5
# Cap on the number of windows (a week at 5 minutes is 2016); wider windows beyond it.
MAX_WINDOWS: Final = 2000
# Instances × windows beyond which presence is found from the distinct pairs, not a full table.
MAX_PRESENCE_CELLS: Final = 4_000_000


def window_edges(start: float, end: float, window_s: float) -> np.ndarray:
    """Window boundaries covering [start, end]; a short tail joins the last full window."""
    span = end - start
    if span <= 0:
        return np.array([start, start + window_s])
    width = max(window_s, span / MAX_WINDOWS)
    n = max(int(span // width), 1)
    edges = start + width * np.arange(n + 1)
    tail = end - edges[-1]
    if tail > MIN_TAIL_FRACTION * width or n == 0:
        edges = np.append(edges, end)
    else:
        edges[-1] = end
    return edges


def window_index(times: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each time's window ``w`` with ``edges[w] <= t < edges[w + 1]``, or -1 outside all."""
    t = np.asarray(times, dtype=np.float64)
    idx = np.searchsorted(edges, t, side="right") - 1
    idx[(idx >= len(edges) - 1) | ~np.isfinite(t)] = -1
    return idx


def window_bounds(sorted_ts: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Where each window's run of sorted (finite) arrival times starts, and the end: the
    bounds of ``np.clip(window_index(ts, edges), 0, n_windows - 1)`` (arrivals outside the
    edges join the first or last window) without an index per arrival."""
    inner = np.searchsorted(sorted_ts, edges[1:-1], side="left")
    return np.concatenate([[0], inner, [len(sorted_ts)]]).astype(np.int64)


def record_firsts(dataset: Dataset, edges: np.ndarray) -> np.ndarray | None:
    """The first request record at or after each edge when the records' arrivals are float64
    and never decrease (each window's requests are then a run of rows), else None. Whether
    they are in order is ``table_facts.column_ascending``'s cached answer (the workload
    summary asks it first on the same thread, so no pass over every arrival is made here)."""
    arrival = dataset.requests.get("arrival_ts")
    if arrival is None or arrival.dtype != np.float64:
        return None
    if not column_ascending(dataset.requests, "arrival_ts"):
        return None
    return np.searchsorted(arrival.to_numpy(), edges, side="left")  # (a view, no copy)


def active_instances(dataset: Dataset, role: str, edges: np.ndarray,
                     firsts: np.ndarray | None) -> list[int | None]:
    """Per window: instances of ``role`` that reported samples or served requests in it.

    Metric samples count for instances known to have the role; request records name the
    instance directly. All windows at once: each source's labels become integer codes (a
    categorical column's own codes: no string per row) and (window, instance) pairs are marked
    in a presence table, never per-window scans; request records a chunk at a time.
    ``firsts``: ``record_firsts(dataset, edges)``, which the caller finds once for both
    roles (None: the records are read a chunk at a time, each arrival's window indexed).
    """
    import pandas as pd

    from pdprobe.analysis.tables import column_codes

    n_win = len(edges) - 1
    names = {i.name for i in dataset.instances_of(role)}  # type: ignore[arg-type]
    if not names:
        return [None] * n_win
    tables: list[tuple[np.ndarray, pd.Index]] = []
    m = dataset.metrics
    if len(m):
        # The metric rows' instance codes (shared by every analysis); codes of instances
        # without the role become -1 (decided per distinct name, not per row).
        codes, labels = column_codes(m, "instance")
        member = np.fromiter((str(u) in names for u in labels), dtype=bool, count=len(labels))
        renumber = np.append(np.where(member, np.cumsum(member) - 1, -1), -1)
        win = window_index(m["ts"].to_numpy(dtype=np.float64, na_value=np.nan), edges)
        tables.append((_presence(win, renumber[codes], int(member.sum()), n_win),
                       labels[member]))
    req = dataset.requests
    col = f"{role}_instance"
    if len(req) and dataset.has_request_column(col):
        column = req[col]
        if isinstance(column.dtype, pd.CategoricalDtype):  # the canonical dtype: its codes
            codes, labels = category_codes(column), pd.Index(column.cat.categories)
        else:
            codes, labels = pd.factorize(column.astype("string"))
        arrival = req["arrival_ts"]
        table = np.zeros((len(labels), n_win), dtype=bool)
        if firsts is not None:  # the usual case: each window's requests are a run of rows
            _run_presence(table, codes, firsts)
        for lo in range(0, len(req), sampling.PASS_CHUNK) if firsts is None else ():
            hi = lo + sampling.PASS_CHUNK
            win = window_index(arrival.iloc[lo:hi].to_numpy(dtype=np.float64,
                                                            na_value=np.nan), edges)
            table |= _presence(win, codes[lo:hi], len(labels), n_win)
        tables.append((table, labels))
    seen: dict[str, np.ndarray] = {}  # instance -> windows it was seen in
    for table, labels in tables:
        for i, label in enumerate(labels):  # loop over instances, not rows
            if table[i].any():
                key = str(label)
                seen[key] = seen[key] | table[i] if key in seen else table[i]
    if not seen:
        return [None] * n_win
    counts = np.sum(list(seen.values()), axis=0)
    return [int(c) if c else None for c in counts]


def _run_presence(table: np.ndarray, codes: np.ndarray, firsts: np.ndarray) -> None:
    """Marks in ``table`` (labels × windows) the label codes of each window's run of rows
    ``firsts[w]..firsts[w + 1] - 1`` (code -1, a missing label, skipped): with sorted times,
    ``firsts`` the first row at or after each edge, the rows ``window_index`` puts in window
    ``w``, found without an index per row."""
    for w in range(table.shape[1]):  # loop over windows (at most MAX_WINDOWS), not rows
        part = codes[int(firsts[w]):int(firsts[w + 1])]
        if len(part):
            seen = np.bincount(part.astype(np.intp) + 1, minlength=table.shape[0] + 1)
            table[:, w] = seen[1:] > 0


def _presence(win: np.ndarray, codes: np.ndarray, k: int, n_win: int) -> np.ndarray:
    """``(k, n_win)`` table: whether label code ``i`` occurs in window ``w`` (``win`` -1 and
    code -1, missing labels, skipped)."""
    table = np.zeros((k, n_win), dtype=bool)
    ok = (win >= 0) & (codes >= 0)
    if k == 0 or not ok.any():
        return table
    key = codes[ok].astype(np.int64)
    key *= n_win
    key += win[ok]
    if k * n_win <= MAX_PRESENCE_CELLS:
        table |= (np.bincount(key, minlength=k * n_win) > 0).reshape(k, n_win)
    else:  # many labels over many windows: mark only the pairs that occur
        pairs = np.unique(key)
        table[pairs // n_win, pairs % n_win] = True
    return table


def served_counts(dataset: Dataset, edges: np.ndarray) -> np.ndarray | None:
    """Per window: requests completed ``ok`` in it, from the records (None without ``e2e_s``).

    Each completion's place among the edges (a NaN or infinite time falls before the first
    or after the last), a run of rows at a time where the run's earliest and latest share it
    (``completion_runs.ok_places``, from the runs of completion times the workload summary's
    completed rate made: kept per table).
    """
    req = dataset.requests
    if not (len(req) and dataset.has_request_column("e2e_s")):
        return None
    runs = completion_runs(req)
    return None if runs is None else ok_places(runs, edges)[1:len(edges)]


def counter_served_rates(dataset: Dataset, edges: np.ndarray) -> np.ndarray | None:
    """Per window: completions per second from the decode instances' finished-requests
    counters (NaN where no increase is known); None without metrics."""
    if dataset.metrics.empty:
        return None
    from pdprobe import signals as S
    from pdprobe.analysis.promql import counter_increase_by_window

    inc = counter_increase_by_window(dataset.metrics, S.REQUESTS_FINISHED_TOTAL, edges)
    decode = [i.name for i in dataset.instances_of("decode")]
    if decode:
        inc = inc[inc.index.isin(decode)]
    return known_sum(inc.to_numpy(dtype=np.float64)) / np.diff(edges)


def known_sum(values: np.ndarray) -> np.ndarray:
    """Column sums over the known (non-NaN) cells; NaN for a column with none."""
    known = ~np.isnan(values)
    total = np.where(known, values, 0.0).sum(axis=0)
    return np.where(known.any(axis=0), total, np.nan)
