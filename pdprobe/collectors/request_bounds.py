"""The range of a Parquet file's numeric columns from its footer, so the row checks need not
scan them.

A Parquet writer stores each column chunk's smallest and largest value and its null count.
At 10M rows the range checks of ``request_canonical`` (every value in ``[0, limit]``?) and the
time checks of ``validate.check_times`` cost two full passes per column (~0.2 CPU-s over the
eleven numeric columns of a request file); the footer answers the same question for free
when every value is in range, which is the usual case. Out-of-range values (or no usable
statistics) leave the scans to run exactly as before, so what is dropped or warned about never
depends on the footer.

Parquet statistics leave NaN out of the minimum and maximum (and count it nowhere): the range
is that of the values that are not NaN, which is exactly what the range checks ask (NaN is
missing, not implausible). Whether a column may hold NaN is known only for integer columns
(their nulls are their only NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import pyarrow as pa

# Footers with more row groups than this are not read for ranges: a Python call per row group
# and column would cost more than the scans it spares (a 10M-row file of 1k-row groups).
MAX_ROW_GROUPS: Final = 256


@dataclass(frozen=True)
class Bounds:
    """The smallest and largest value of a numeric column that is not NaN (as float64), and
    whether any value may be NaN once converted (a null, or a floating column)."""

    low: float
    high: float
    may_be_nan: bool

    def within(self, low: float, high: float, scale: float = 1.0) -> bool:
        """Whether every value that is not NaN, times ``scale`` (> 0), is in ``[low, high]``:
        what ``validate.implausible`` finds nothing in. Rounding is monotone, so the scaled
        extremes are the extremes of the scaled values."""
        return bool(self.low * scale >= low and self.high * scale <= high)

    def scaled(self, scale: float) -> Bounds:
        """The bounds of the column times ``scale`` (> 0)."""
        return Bounds(self.low * scale, self.high * scale, self.may_be_nan)


def _plain(t: pa.DataType) -> bool:
    """Integer or float32/float64: types whose statistics are the values as numpy reads them."""
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t))


def parquet_bounds(metadata: Any, schema: pa.Schema, names: list[str]) -> dict[str, Bounds]:
    """``Bounds`` of each of the ``names`` (plain numeric columns of the Arrow ``schema``)
    whose every non-empty row group has statistics (a row group of nothing but nulls needs
    none); columns without are left out, as are all when the file has more than
    ``MAX_ROW_GROUPS`` row groups or a column is nested."""
    import pyarrow as pa

    if metadata.num_row_groups > MAX_ROW_GROUPS or not metadata.num_row_groups:
        return {}
    paths = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    out: dict[str, Bounds] = {}
    for name in names:
        if name not in schema.names or name not in paths:
            continue
        t = schema.field(name).type
        if not _plain(t):
            continue
        found = _column_bounds(metadata, paths[name])
        if found is not None:
            low, high, nulls = found
            out[name] = Bounds(low, high, nulls or not pa.types.is_integer(t))
    return out


def _column_bounds(metadata: Any, index: int) -> tuple[float, float, bool] | None:
    """(smallest, largest, any null) of column ``index`` over the row groups, or None when a
    row group holding a value has no usable statistics."""
    low, high = math.inf, -math.inf
    nulls = False
    seen = False
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if not group.num_rows:
            continue
        stats = group.column(index).statistics
        if stats is None or not stats.has_null_count:
            return None
        if stats.null_count:
            nulls = True
        if stats.null_count == group.num_rows:
            continue  # only nulls: no value to bound
        if not stats.has_min_max:
            return None
        lo, hi = stats.min, stats.max
        if not (_number(lo) and _number(hi)):
            return None
        lo, hi = float(lo), float(hi)
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            return None  # a writer that let NaN in, or nonsense: scan instead
        low, high = min(low, lo), max(high, hi)
        seen = True
    if not seen:
        return None
    return low, high, nulls


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
