"""The output arrays request records are assembled into, batch by batch (``request_assemble``).

Each canonical column is written into one array reserved for the rows the reader announced
(the batch is then released), so a 10M-row read holds each column once plus one batch.
"""

from __future__ import annotations

import numpy as np


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
