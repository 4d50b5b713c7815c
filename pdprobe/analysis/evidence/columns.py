"""Building blocks of the evidence tables: the per-instance column set, bins, names, records.

``InstanceColumns`` collects per-instance columns one by one and refuses a name the registry
does not declare, so no producer can write a column no reader can find. ``request_column`` is
the one reader of request-record columns that may be absent (``kv_transfer_s`` among them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from pdprobe.analysis.evidence.registry import spec

if TYPE_CHECKING:
    import pandas as pd

    from pdprobe.analysis.evidence.model import Window
    from pdprobe.dataset import Dataset

# The request column that names the instance of each role.
ROLE_COLUMN: Final[Mapping[str, str]] = {"prefill": "prefill_instance",
                                         "decode": "decode_instance"}


class InstanceColumns:
    """Per-instance columns collected one by one, assembled into one frame at the end."""

    def __init__(self, index: pd.Index) -> None:
        self.index = index
        self.data: dict[str, pd.Series] = {}
        self.text: dict[str, Any] = {}

    def put(self, name: str, values: pd.Series) -> None:
        """Set ``name`` where ``values`` (indexed by instance) has a value; keep the rest."""
        import pandas as pd

        spec("instances", name)
        v = pd.Series(values, dtype="float64")
        if v.index.dtype != object:
            v.index = v.index.astype(str).astype(object)
        new = v.reindex(self.index)
        old = self.data.get(name)
        self.data[name] = new if old is None else new.combine_first(old)

    def set(self, name: str, values: Any) -> None:
        """Set the whole float column ``name``."""
        import pandas as pd

        spec("instances", name)
        self.data[name] = pd.Series(np.asarray(values, dtype="float64"), index=self.index)

    def set_series(self, name: str, values: pd.Series) -> None:
        """Set the whole column ``name`` to a series already on the instance index."""
        spec("instances", name)
        self.data[name] = values

    def set_text(self, name: str, values: Any) -> None:
        """Set a label column (role, node, a choice's source)."""
        spec("instances", name)
        self.text[name] = values

    def get(self, name: str) -> pd.Series:
        """The float column ``name``, all-NaN when nothing produced it."""
        import pandas as pd

        spec("instances", name)
        if name in self.data:
            return self.data[name]
        return pd.Series(np.nan, index=self.index, dtype="float64")

    def frame(self) -> pd.DataFrame:
        """The table: label columns first, then the float columns in production order."""
        import pandas as pd

        parts: dict[str, Any] = dict(self.text)
        parts.update(self.data)
        return pd.DataFrame(parts, index=self.index)


def host(name: str) -> str:
    """``host:port`` -> ``host``; a pod name stays as it is."""
    name = str(name)
    if name.startswith("["):  # [v6]:port
        return name.split("]")[0].lstrip("[")
    return name.rsplit(":", 1)[0] if name.count(":") == 1 else name


def instance_names(ds: Dataset) -> set[str]:
    """Every instance the dataset names: known instances, request columns, metric labels."""
    from pdprobe.analysis.grouped import key_groups

    names = {i.name for i in ds.instances}
    req = ds.requests
    for col in ROLE_COLUMN.values():
        if col in ds.request_columns and len(req):
            # the values some row holds: the labels of the column's grouping, which the
            # instance summaries and the evidence share (no pass over the rows here)
            names.update(key_groups(req, col).labels)
    if len(ds.metrics):
        from pdprobe.analysis.tables import column_codes

        names.update(str(v) for v in column_codes(ds.metrics, "instance")[1])
    names.discard("")
    return names


def request_column(ds: Dataset, name: str) -> pd.Series | None:
    """A request-record column the inputs carried with at least one value, else None."""
    if name not in ds.request_columns or not len(ds.requests):
        return None
    from pdprobe.analysis.row_slices import has_values

    return ds.requests[name] if has_values(ds.requests, name) else None


def transfer_seconds(ds: Dataset) -> pd.Series | None:
    """Per-request KV-transfer time (``kv_transfer_s``), None when the records lack it.

    The one place the evidence reads the column: every transfer figure derives from this.
    """
    return request_column(ds, "kv_transfer_s")


def arrival_bins(ds: Dataset, window: Window) -> np.ndarray:
    """The bin of every request's arrival (``window.bin_of``), computed once per request table
    and window (read-only).

    Arrivals in time order (``arrivals_in_order``) have bins that never decrease (a
    subtraction, a division by the positive step, a floor and a clip each keep the order), so
    each bin's rows are one run: its first row is found by a binary search of the very bins
    (``key_search.key_starts``) and the bins are the runs repeated, not a float division of
    every arrival (10M rows: ~25 ms -> ~5 ms)."""
    from pdprobe.analysis.key_search import key_starts
    from pdprobe.analysis.row_slices import compact_dtype
    from pdprobe.analysis.table_cache import table_cache

    cache = table_cache(ds.requests)
    key = ("arrival_bins", window)
    if key not in cache:
        arrival = ds.requests["arrival_ts"].to_numpy(dtype=np.float64)
        if arrival.size and arrivals_in_order(ds):
            n = window.n_bins
            starts = key_starts(lambda at: window.bin_of(arrival[at]), n, arrival.size)
            runs = np.diff(np.append(starts, arrival.size))
            bins = np.repeat(np.arange(n, dtype=compact_dtype(n)), runs)  # bin_of's type
        else:
            bins = window.bin_of(arrival)
        bins.setflags(write=False)
        cache[key] = bins
    found: np.ndarray = cache[key]
    return found


def arrivals_in_order(ds: Dataset) -> bool:
    """Whether the requests' arrivals never decrease (``row_slices.ascending``: so they hold
    no NaN), checked once per request table (``table_facts.column_ascending``, the entry the
    workload and the instance series read too): the burst bins, the alive cells and the
    length mix's split each read runs of rows when they do."""
    from pdprobe.analysis.table_facts import column_ascending

    return column_ascending(ds.requests, "arrival_ts")


def reindex_bins(frame: pd.DataFrame, window: Window) -> pd.DataFrame:
    """A frame indexed by bin number as one indexed by bin start, every bin present."""
    out = frame.reindex(range(window.n_bins))
    out.index = window.bin_ts
    out.index.name = "ts"
    out.columns = [str(c) for c in out.columns]
    return out.astype("float64")
