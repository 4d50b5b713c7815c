"""A grouping of rows by integer codes before its rows are ordered (``Groups.of``).

``GroupPlan.of`` counts the rows per code, renumbers the used codes and picks each group's
sampling rate; ``fields`` orders the rows (all of them, or the sampled ones) into ``Groups``'
fields. Between the two, the samples of several groupings of one table can be drawn from one
stream of draws (``grouped.key_groupings``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pdprobe.analysis.row_gather import code_counts
from pdprobe.analysis.row_slices import (
    ascending,
    chunks,
    compact_dtype,
    index_dtype,
    take_rows,
)
from pdprobe.analysis.stable_order import stable_order, stable_take_counted


@dataclass(frozen=True)
class GroupPlan:
    """A grouping before its rows are ordered (``Groups.of``): the codes counted and renumbered
    and, for a sampled one, each group's sampling rate, so the samples of several groupings of
    one table can be drawn from one stream (``key_groupings``)."""

    raw: np.ndarray
    names: list[str]
    ids: np.ndarray
    totals: np.ndarray
    n_missing: int
    ordered: bool
    rate: np.ndarray | None  # float32 per group; None: every row

    @classmethod
    def of(cls, codes: np.ndarray, labels: Any, sample_max: int | None,
           counts: np.ndarray | None = None) -> GroupPlan:
        """Count the rows per code, drop the unused codes and pick the sampling rates.

        ``counts``: the rows per code (one per label) when another pass counted them over
        every row (``grouped.know_code_counts``); taken only when they add up to every row (so
        no row is without a code), instead of a count of every row (13 ms per 10M rows)."""
        raw = np.asarray(codes)
        if raw.dtype.kind not in "iu":
            raw = raw.astype(np.int64)
        names = [str(x) for x in labels]
        n = len(names)
        if counts is not None and len(counts) == n and int(counts.sum()) == raw.size:
            # a copy (a few labels long): the caller's array stays in the table cache and the
            # instance series, and Groups.totals must not share it with them
            totals = np.array(counts, dtype=np.int64)
        else:
            per_code = np.zeros(n + 1, dtype=np.int64)  # the last slot counts the -1 rows
            for part in chunks(raw.size):
                np.add.at(per_code, raw[part], 1)  # (compact codes: ``moments``)
            totals = per_code[:n]
        used = totals > 0
        ids = np.flatnonzero(used)
        if not used.all():  # renumber the used groups 0..k-1; unused and -1 rows go to -1
            lookup = np.append(np.where(used, np.cumsum(used) - 1, -1), -1)
            raw = lookup.astype(compact_dtype(int(used.sum())))[raw]
            names = [name for name, u in zip(names, used, strict=True) if u]
            totals = totals[used]
        elif raw.dtype.itemsize > np.dtype(compact_dtype(n)).itemsize:
            raw = raw.astype(compact_dtype(n))
        n_missing = int(raw.size - totals.sum())
        ordered = not n_missing and ascending(raw)  # a stable sort would change no position
        rate = None
        if sample_max is not None and (totals > sample_max).any():
            rate = np.minimum(1.0, sample_max / totals).astype(np.float32)
        return cls(raw=raw, names=names, ids=ids, totals=totals, n_missing=n_missing,
                   ordered=ordered, rate=rate)

    def draws(self) -> tuple[np.ndarray | int, np.ndarray]:
        """What ``row_sample.sample_rows`` draws this plan's sample from: ``(raw, rate)``, or
        ``(n_rows, rate[:1])`` (the row count) when every row has a group and every group the same rate (a
        round-robin router's instances): the same rows (one draw per row compared with the
        same rate) without looking up each row's rate (a gather per row, 1 ms per million)."""
        assert self.rate is not None
        if not self.n_missing and self.rate.size and bool((self.rate == self.rate[0]).all()):
            return self.raw.size, self.rate[:1]
        return self.raw, self.rate

    def fields(self, rows: np.ndarray | None) -> dict[str, Any]:
        """``Groups``' fields, ordered on the sampled ``rows`` (when ``rate`` is set) or on
        every row."""
        raw, names, totals, n_missing, ordered = (self.raw, self.names, self.totals,
                                                  self.n_missing, self.ordered)
        common = {"codes": raw, "labels": tuple(names), "ids": self.ids, "totals": totals,
                  "complete": not n_missing, "ordered": ordered}
        bounds = np.zeros(len(names) + 1, dtype=np.int64)
        positions = index_dtype(raw.size)
        if rows is not None:
            picked = take_rows(raw, rows)
            if ordered:
                order, sizes = rows, code_counts(picked, len(names))
            else:  # the sizes the ordering counted
                order, sizes = stable_take_counted(picked, len(names), rows)
            np.cumsum(sizes, out=bounds[1:])
            return {"order": order.astype(positions, copy=False), "bounds": bounds,
                    "sampled": True, **common}
        if n_missing:  # -1 rows first, then dropped
            shifted = raw.astype(compact_dtype(len(names) + 1)) + 1
            order = stable_order(shifted, len(names) + 1)[n_missing:]
        else:
            order = np.arange(raw.size, dtype=positions) if ordered else \
                stable_order(raw, len(names))
        np.cumsum(totals, out=bounds[1:])
        return {"order": order.astype(positions, copy=False), "bounds": bounds, **common}
