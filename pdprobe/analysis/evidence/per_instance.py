"""Per-instance evidence straight from the request records (gauges, counters and histograms:
``metric_figures``).

Each producer fills the columns the registry declares for it (``REQUEST_QUANTILES`` ...) in
one grouped pass over its input: a groupby on integer codes, never a loop over rows or
samples.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.analysis.evidence.columns import (
    ROLE_COLUMN,
    InstanceColumns,
    arrival_bins,
    reindex_bins,
)
from pdprobe.analysis.evidence.registry import (
    REQUEST_QUANTILES,
    ROLE_COUNT_BINS,
)
from pdprobe.analysis.row_slices import has_values

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.ahead import Ahead
    from pdprobe.analysis.evidence.bin_figures import BinSample
    from pdprobe.analysis.evidence.cell_sums import CellSums
    from pdprobe.analysis.evidence.cells import CellGroups
    from pdprobe.analysis.evidence.frame_bins import FrameBins
    from pdprobe.analysis.evidence.model import Window
    from pdprobe.analysis.grouped import Column, Groups, Rows
    from pdprobe.dataset import Dataset

# Request-record columns summarised per instance (one is derived per request below), in the
# order their quantiles are computed. Not kv_bytes / kv_transfer_s: its one reader, the cluster's
# achieved bandwidth (``transfer_figures``), reads the same records' sums whenever they hold a
# transfer, so a per-instance median of it was never read (at 10M rows it cost the ratio at
# every row, for its NaN count, and a sort of the sampled rows: ~0.07 CPU-s).
_QUANTILE_INPUTS = ("ttft_s", "tpot_s", "queue_s", "kv_transfer_s", "prefill_s_per_token")
# Request columns whose per-instance figures rules read for some roles' instances only: PD601
# compares prefill time per token among prefill instances; TPOT (tpot_p50/p90/mean) is read
# only on decode rows (PD601, PD501, the cluster's TPOT p90, the instance table's estimated
# TPOT); the per-instance wait before prefill (queue_s_p50/p90) only on prefill rows, where
# the instance summaries compute it anyway (no rule reads it; the cluster's queue figures come
# from the rows, not from this table). Another role column (which fills only its own role's
# and unknown-role rows) is not summarised for them: at 10M rows the decode column's prefill
# time per token was a gather of three columns at 800,000 sampled rows and their sort, the
# prefill column's TPOT a gather and partition of 6M sampled rows plus its sum and maximum
# over every row (~0.3 CPU-s), the decode column's wait a gather of 2M rows (~0.1).
_READ_FOR_ROLES: Final[Mapping[str, frozenset[str]]] = {
    "prefill_s_per_token": frozenset({"prefill"}), "tpot_s": frozenset({"decode"}),
    "queue_s": frozenset({"prefill"})}
# The columns whose per-instance mean is evidence (REQUEST_QUANTILES' "mean" statistics).
_MEAN_INPUTS = frozenset(s.source for s in REQUEST_QUANTILES if s.stat == "mean")
# The columns whose per-instance p90 is evidence (REQUEST_QUANTILES' "p90" statistics).
_P90_INPUTS = frozenset(s.source for s in REQUEST_QUANTILES if s.stat == "p90")
# Per-bin medians of request columns, per instance: (request column, bins name, the role whose
# instances PD601's persistence check compares in it). Only frames a rule reads, and only from
# a role column naming some instance of that role (or of unknown role): each costs a gather of
# every cell's sample rows and a partition per cell (at 10M rows ~0.03 CPU-s, the decode
# column's prefill time per token ~0.08: three columns gathered).
_REQUEST_BIN_MEDIANS = (("tpot_s", "req_tpot", "decode"),
                        ("prefill_s_per_token", "req_prefill_per_token", "prefill"))


@dataclass(frozen=True)
class ArrivalBinFigures:
    """What ``request_figures`` finds for the cluster series' arrival bins on its way, handed
    to ``series._request_series`` (through ``cluster_series``) so it is not found again."""

    # each arrival bin's sample, drawn from the draws of the first role column whose cells
    # are sampled bin by bin (only when every row's draw was handed over); None: drawn there
    sample: BinSample | None = None
    # each bin's prompt tokens, summed beside the prefix-hit cells' when exact (``cell_sums``:
    # the very floats of the exact sums ``Groups.sums`` adds); None: summed there
    prompt_sums: np.ndarray | None = None


def request_figures(ds: Dataset, window: Window, cols: InstanceColumns,
                    bins: FrameBins) -> ArrivalBinFigures:
    """Per-instance request figures, grouped by the column that names the instance's role.

    One grouping per role column (``analysis.grouped``, shared with the instance summaries)
    and one per (bin, instance) cell; no copy of the request table. Returns the arrival bins'
    sample and prompt-token sums found on the way, for ``cluster_series``.
    """
    import pandas as pd

    from pdprobe.analysis.evidence.bin_figures import BinSample
    from pdprobe.analysis.evidence.cell_sums import cell_hit_sums, joint_cells
    from pdprobe.analysis.evidence.cells import BinCells, cell_groups
    from pdprobe.analysis.evidence.picks import picked_medians
    from pdprobe.analysis.grouped import (
        CELL_SAMPLE_MAX,
        GROUP_SAMPLE_MAX,
        Derived,
        column_values,
        group_sums,
        key_groups,
        sample_max,
    )
    from pdprobe.analysis.table_facts import known_whole

    req = ds.requests
    if req.empty:
        return ArrivalBinFigures()
    present = ds.request_columns

    def has(c: str) -> bool:
        return c in present and c in req.columns and has_values(req, c)

    # Derived per-request columns as row getters (``grouped.Column``): computed per slice for
    # the counts and sums, and at the sampled rows for the quantiles, never at full length.
    derived: dict[str, Column] = {}
    if has("prefill_s"):
        prompt = req["prompt_tokens"].to_numpy()
        prefill = req["prefill_s"].to_numpy(dtype=np.float64)
        cached_col = req["cached_tokens"].to_numpy(dtype=np.float64) if has("cached_tokens") \
            else None
        # whole numbers from 0 up, none NaN (the instance summaries' token sums tested every
        # value): no finite test of every row's (at 10M rows ~10 ms)
        cached_finite = cached_col is not None and known_whole(req, "cached_tokens")

        def per_token(rows: Rows) -> np.ndarray:
            # prefill_s / (prompt - cached (0 where unknown), at least 1)
            if cached_col is None:
                uncached = prompt[rows].astype(np.float64)
            else:
                cached_rows = cached_col[rows]
                # nan_to_num (NaN -> 0, +-inf -> the largest finite) copies: only when needed
                if not (cached_finite or np.isfinite(cached_rows).all()):
                    cached_rows = np.nan_to_num(cached_rows, nan=0.0)
                # the prompt lengths converted to float64 within the subtraction (as astype
                # converts them: the same values), not in a pass of their own
                uncached = np.subtract(prompt[rows], cached_rows, dtype=np.float64)
            np.maximum(uncached, 1.0, out=uncached)
            return np.divide(prefill[rows], uncached, out=uncached)

        # NaN exactly where prefill_s is when the prompt lengths are integers (the divisor is
        # then a finite number >= 1): the counts test prefill_s instead of computing this
        derived["prefill_s_per_token"] = Derived(
            per_token, nan_like=prefill if prompt.dtype.kind in "iu" else None)

    def values(c: str) -> Column | None:
        if c in derived:
            return derived[c]
        return column_values(req, c) if c in req.columns else None

    bin_of_row = arrival_bins(ds, window)
    roles = pd.Series(cols.text["role"], index=cols.index)
    cached = has("cached_tokens")
    # the cluster series' sample of each arrival bin (``series._request_series``), drawn
    # from the draws of the first role column whose cells are sampled bin by bin
    per_bin_max = sample_max(len(req), GROUP_SAMPLE_MAX)
    bin_sample = None if per_bin_max is None else \
        BinSample(bin_of_row, window.n_bins, per_bin_max)
    # Both role columns' rows per cell and, when exact, the prefix-hit cells' token sums and
    # each bin's prompt tokens from one pass (``cell_sums``); else a pass per role column
    # (``cell_groups``, ``sums_of`` below) and per bin (``series``).
    token_columns = ("cached_tokens", "prompt_tokens") if cached else ()
    tokens = tuple(column_values(req, c) for c in token_columns)
    # (the instance summaries' token sums tested every value: not again per bin)
    whole = tuple(known_whole(req, c) for c in token_columns)
    groupings = (key_groups(req, ROLE_COLUMN["prefill"]), key_groups(req, ROLE_COLUMN["decode"]))
    # the prefix-hit frames summed when read (``cell_sums.cell_hit_sums``) where the sums are exact
    # whatever the order: here only the cells' rows, and each bin's prompt tokens
    later = bool(tokens) and all(whole)
    joint = joint_cells(bin_of_row, window.n_bins, groupings, () if later else tokens, whole,
                        per_bin=tokens[1:] if later else ()) \
        if all(has(c) for c in ROLE_COLUMN.values()) else None
    hits = cell_hit_sums(bin_of_row, window.n_bins, groupings, tokens, whole) \
        if later and joint is not None else None
    hit_sums = None if joint is None or not tokens or hits is not None else joint.sums
    prompt_sums = joint.bin_sums[-1] \
        if joint is not None and tokens and joint.bin_sums is not None else None
    for role, col in ROLE_COLUMN.items():
        if not has(col):
            continue
        groups = key_groups(req, col)
        if not groups.n_groups:
            continue
        labels = np.asarray(groups.labels, dtype=object)
        counts = groups.totals
        # Only instances of this role (or of unknown role) take figures from this column.
        allowed = set(roles.index[roles.isin([role, "unknown"])].astype(str))
        keep = np.fromiter((name in allowed for name in groups.labels), dtype=bool,
                           count=groups.n_groups)
        index = pd.Index(labels[keep], dtype=object)
        # the columns whose per-bin medians a rule compares among some of these instances
        # (those of the frame's reader role, or of unknown role)
        bin_read = {c for c, _name, reader in _REQUEST_BIN_MEDIANS
                    if any(roles.get(label, "unknown") in (reader, "unknown")
                           for label in groups.labels)}
        cols.put("req_count", pd.Series(counts[keep].astype(np.float64), index=index))
        cols.put("req_share", pd.Series(counts[keep] / float(counts.sum()), index=index))
        # the non-NaN values per group of each column summarised here (``Groups.counts``):
        # the per-bin medians below need only know whether any is left, not a pass to count
        counted: dict[str, np.ndarray] = {}
        # Per-bin, per-instance series for persistence checks: one grouping of the cells.
        n = groups.n_groups
        cells = cell_groups(bin_of_row, groups, window.n_bins,
                            sample_max(len(req), CELL_SAMPLE_MAX),
                            beside=None if bin_sample is None or bin_sample.fed else bin_sample,
                            counted=None if joint is None else
                            joint.counts[0 if role == "prefill" else 1])
        for c in _QUANTILE_INPUTS:
            data = values(c)
            if data is None or role not in _READ_FOR_ROLES.get(c, {role}):
                continue
            # every declared p90, at every table size: the transfer time's is read only when
            # the records hold none (``transfer_figures``), but left out with them it let the
            # xfer_s_p90 choice fall back to a gauge on sampled tables alone
            p90 = c in _P90_INPUTS
            if c in derived and groups.sampled and not p90 and c not in _MEAN_INPUTS:
                # a derived column's medians at the sampled rows, computed a slice of rows at
                # a time (``picks``), not a block of the gather's at a time (``Groups``)
                count = counted[c] = groups.counts(data)
                if not count.sum():
                    continue  # (no value: no figures, as below)
                by_stat = {"count": count, "p50": picked_medians(
                    groups, data, no_nan=_no_nan(groups, count))}
            else:
                by_stat = _quantiles(req, col, c, data, p90=p90)
            counted[c] = by_stat["count"]
            if not by_stat["count"].sum():
                continue
            for s in REQUEST_QUANTILES:
                if s.source == c:
                    cols.put(s.name, pd.Series(by_stat[s.stat][keep], index=index))
        if cached:
            ratio = _ratio(group_sums(req, col, "cached_tokens"),
                           group_sums(req, col, "prompt_tokens"))
            cols.put("req_hit_ratio", pd.Series(ratio[keep], index=index))
        bin_seen = np.zeros(window.n_bins, dtype=bool)
        bin_seen[cells.ids // n] = True
        sizes = _cell_frame(cells.ids, cells.totals.astype(np.float64), n, window)
        sizes[bin_seen] = np.nan_to_num(sizes[bin_seen], nan=0.0)
        bins[ROLE_COUNT_BINS[role]] = _bins_frame(sizes, groups.labels, window)
        for c, name, _reader in _REQUEST_BIN_MEDIANS:
            data = values(c)
            if c not in bin_read:
                continue  # no instance a rule compares in this frame (e.g. TPOT per prefill)
            if data is None:
                continue
            count = counted[c] if c in counted else groups.counts(data)
            if not count.sum():
                continue  # (a count, no figures)
            medians = _cell_medians(cells, data, _no_nan(groups, count), groups, window)
            if isinstance(cells, BinCells) and not cells.sampled:
                # computed if a rule reads the frame (``frame_bins``): these cells hold no
                # sample, only a few arrays per cell, so keeping them costs little
                bins.defer(name, medians)
            else:
                bins.merge(name, medians())
        if cached and hits is not None:
            bins.defer("req_hit", _hit_frame(hits, 0 if role == "prefill" else 1, cells.ids,
                                             groups, window))
        elif cached:
            hit = _ratio(*(cells.sums_of((column_values(req, "cached_tokens"),
                                          column_values(req, "prompt_tokens")))
                           if hit_sums is None else
                           [per_cell[cells.ids] for per_cell
                            in hit_sums[0 if role == "prefill" else 1]]))
            bins.merge("req_hit", _bins_frame(_cell_frame(cells.ids, hit, n, window),
                                              groups.labels, window))
        # released before the next role column groups its cells (60 MB at 10M rows), but
        # for a deferred frame's (cells without a sample: a few arrays per cell)
        del cells
    return ArrivalBinFigures(
        sample=bin_sample if bin_sample is not None and bin_sample.complete else None,
        prompt_sums=prompt_sums)


def _quantiles(req: pd.DataFrame, key: str, column: str, data: Column,
               p90: bool = True) -> dict[str, np.ndarray]:
    """Per value of ``key``: ``count``, ``p50`` (the median), ``p90`` (when ``p90`` or the
    figures are shared) and, for a column whose mean is evidence, ``mean`` of ``column``
    (``data``: its values or a derived getter).

    A column the instance summaries also summarise per value of ``key`` is read from their
    computation (``grouped.figures``, cached per table: whichever analysis asks first computes
    it, the other reads it), as is a mean (two passes over every row); the others, which only
    the evidence reads, from ``selection.quantile_figures`` (the same figures, cheaper)."""
    from pdprobe.analysis.evidence.selection import quantile_figures
    from pdprobe.analysis.grouped import figures
    from pdprobe.analysis.instances import DECODE_LATENCIES, PREFILL_LATENCIES

    summarised = {ROLE_COLUMN["prefill"]: PREFILL_LATENCIES,
                  ROLE_COLUMN["decode"]: DECODE_LATENCIES}.get(key, {})
    if column in _MEAN_INPUTS or column in summarised.values():
        figs = figures(req, key, column, data, moments=column in _MEAN_INPUTS)
        return {"count": figs.count, "p50": figs.median, "p90": figs.p90, "mean": figs.mean}
    found = quantile_figures(req, key, column, data, p90=p90)
    return {"count": found["count"], "p50": found["median"],
            **({"p90": found["p90"]} if "p90" in found else {})}


def _cell_medians(cells: CellGroups, data: Column, no_nan: bool, groups: Groups,
                  window: Window) -> Callable[[], pd.DataFrame]:
    """The per-bin frame of each cell's median of ``data`` (``CellGroups.medians``; cells of
    ``groups``' keys), as the function that computes it: called at once, or when a rule first
    reads the frame (``frame_bins.FrameBins.defer``)."""
    n, labels = groups.n_groups, groups.labels

    def frame() -> pd.DataFrame:
        return _bins_frame(_cell_frame(cells.ids, cells.medians(data, no_nan=no_nan), n,
                                       window), labels, window)
    return frame


def _hit_frame(hits: Ahead[CellSums], grouping: int, ids: np.ndarray, groups: Groups,
               window: Window) -> Callable[[], pd.DataFrame]:
    """The per-bin frame of each cell's prefix-hit ratio (cached over prompt tokens) of the
    cells ``ids`` of ``groups``' keys, as the function computing it when read."""
    def frame() -> pd.DataFrame:
        hit = _ratio(*(per_cell[ids] for per_cell in hits.get()[grouping]))
        return _bins_frame(_cell_frame(ids, hit, groups.n_groups, window), groups.labels,
                           window)
    return frame


def _no_nan(groups: Groups, count: np.ndarray) -> bool:
    """Whether a column whose non-NaN values per group of ``groups`` are ``count`` has no NaN
    at all: the groups cover every row and count every one (the cells' medians then skip
    their NaN test of every value)."""
    return groups.complete and int(count.sum()) == groups.codes.size


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` where ``den > 0``, else NaN."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _cell_frame(ids: np.ndarray, per_cell: np.ndarray, n_keys: int, window: Window) -> np.ndarray:
    """A (bin x key) matrix of one figure per (bin, key) cell (``ids``: the cells with rows),
    NaN where a cell has no rows."""
    out = np.full((window.n_bins, n_keys), np.nan)
    out[ids // n_keys, ids % n_keys] = per_cell
    return out


def _bins_frame(matrix: np.ndarray, labels: tuple[str, ...], window: Window) -> pd.DataFrame:
    """A (bin x key) matrix as a per-bin frame: bin starts down, instance names across."""
    import pandas as pd

    frame = pd.DataFrame(matrix, columns=list(labels))
    return reindex_bins(frame, window)
