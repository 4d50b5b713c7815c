"""The output arrays request records are assembled into, batch by batch (``request_assemble``).

Each canonical column is written into one array reserved for the rows the reader announced
(the batch is then released), so a 10M-row read holds each column once plus one batch.
Numeric columns are written as float64 (``Floats``), or as int64 for token columns whose
footer range makes the float64 detour useless (``Ints``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe.collectors.request_values import values_view

if TYPE_CHECKING:
    import pyarrow as pa


class OutputColumn:
    """One output column written batch by batch: into an array reserved for ``rows`` while it
    has room (the batch is then released), the rest into copies appended after it."""

    def __init__(self, rows: int | None, dtype: type) -> None:
        self.dtype = dtype
        self.out: np.ndarray | None = (np.empty(rows, dtype=dtype) if rows is not None
                                       else None)
        self.written = 0
        self.parts: list[np.ndarray] = []

    def put(self, values: np.ndarray) -> None:
        if self.out is not None and not self.parts:
            head = values[:self.out.size - self.written]  # numpy casts ints as Arrow does
            self.out[self.written:self.written + head.size] = head
            self.written += head.size
            values = values[head.size:]
        if values.size:
            self.parts.append(np.array(values, dtype=self.dtype))  # a copy: the batch goes

    def slot(self, n: int) -> np.ndarray | None:
        """The next ``n`` reserved rows to write in place (counted as written), or None when
        they do not fit (then ``put`` appends)."""
        if self.out is None or self.parts or self.written + n > self.out.size:
            return None
        view = self.out[self.written:self.written + n]
        self.written += n
        return view

    def collected(self) -> np.ndarray:
        pieces = ([self.out[:self.written]] if self.out is not None else []) + self.parts
        self.out = None
        self.parts = []
        if not pieces:
            return np.empty(0, dtype=self.dtype)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def owned(values: np.ndarray) -> np.ndarray:
    """``values`` writable (the canonical step fixes values in place); a read-only view of
    Arrow memory is copied."""
    return values if values.flags.writeable else values.copy()


class Floats(OutputColumn):
    """float64 values of a numeric-typed column. ``nulls``: whether a batch held a null (a
    footer that said none was wrong: ``request_assemble`` then drops its bounds)."""

    def __init__(self, rows: int | None) -> None:
        super().__init__(rows, np.float64)
        self.nulls = False

    def add(self, arr: pa.Array) -> None:
        """One batch of the column (an Arrow array), converted and written."""
        self.nulls = self.nulls or bool(arr.null_count)
        self.put(batch_floats(arr))

    def finish(self) -> np.ndarray:
        """Every batch's values in row order, writable."""
        return owned(self.collected())


class Ints(OutputColumn):
    """int64 values of an integer token column the footer shows null-free and in range
    (``request_assemble._whole_tokens``): the canonical int64 column written as read, not
    float64 that ``request_canonical`` turns back into int64 (two full-length conversions at
    10M rows). A batch with nulls all the same (a footer that lied) turns the column into
    float64 with NaN, what ``Floats`` would have held, and sets ``nulls`` (the footer's
    bounds are then dropped: their "no NaN" is wrong)."""

    def __init__(self, rows: int | None) -> None:
        super().__init__(rows, np.int64)
        self.rows = rows
        self.nulls = False

    def add(self, arr: pa.Array) -> None:
        """One batch of the column (an Arrow array), written as int64 while it has no null."""
        self.nulls = self.nulls or bool(arr.null_count)
        view = values_view(arr) if self.dtype == np.int64 else None
        if view is None and self.dtype == np.int64:
            held = self.collected()  # float64 from here on, as Floats holds them
            OutputColumn.__init__(self, self.rows, np.float64)
            self.put(held)
        self.put(view if view is not None else batch_floats(arr))

    def finish(self) -> np.ndarray:
        """Every batch's values in row order (int64, or float64 once a null came), writable."""
        return owned(self.collected())


def batch_floats(arr: pa.Array) -> np.ndarray:
    """One batch of an integer or float column as numbers (NaN for null, no copy when the
    column is float64 or integers without nulls)."""
    import pyarrow as pa

    view = values_view(arr)
    if view is not None and (view.dtype == np.float64 or view.dtype.kind in "iu"):
        return view  # integers -> float64 when written into Floats, as Arrow casts them
    import pyarrow.compute as pc

    # safe=False: int64 beyond 2**53 (epoch nanoseconds) rounds instead of failing
    return np.asarray(pc.cast(arr, pa.float64(), safe=False).to_numpy(zero_copy_only=False),
                      dtype=np.float64)
