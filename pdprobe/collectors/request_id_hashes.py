"""Request ids hashed batch by batch while the read converts the other columns
(``request_assemble``; the duplicate check on the hashes is ``request_ids``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdprobe.collectors.request_ids import row_hashes
from pdprobe.collectors.request_outputs import OutputColumn
from pdprobe.collectors.request_values import _to_text

if TYPE_CHECKING:
    from concurrent.futures import Future

    import pyarrow as pa


class IdHashes:
    """Request ids (a string column) hashed batch by batch (``request_ids.row_hashes``) and
    dropped: 8 bytes per row instead of the ids themselves (~15 bytes each at 10M rows).

    Each batch's ids are hashed in a thread of their own while the reading loop converts the
    batch's other columns (cleaning and hashing are pyarrow and numpy work that releases the
    GIL: at 10M rows ~0.5 CPU-s that otherwise ran alone on the loop's core). One batch is in
    flight at a time, so memory holds one batch's ids more at most. Its rows of the reserved
    output are claimed in row order as it is handed over and the thread writes its hashes
    there (no copy on the reading loop's core); rows beyond the reservation are appended in
    row order when the next batch arrives or at ``finish``. ``close`` stops the thread (the
    reading loop calls it whatever happens)."""

    def __init__(self, rows: int | None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.hashes: OutputColumn | None = OutputColumn(rows, np.uint64)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pdprobe-ids")
        self._pending: Future[list[np.ndarray] | None] | None = None

    def add(self, arr: pa.Array) -> None:
        self.settle()
        if self.hashes is None:
            return  # an id the hash does not take: the ids are read again whole
        if len(arr):
            self._pending = self._pool.submit(batch_hashes, arr, self.hashes.slot(len(arr)))

    def settle(self) -> None:
        """Write the batch in flight's hashes (or give up on hashing when it had an id the
        hash does not take)."""
        pending, self._pending = self._pending, None
        if pending is None or self.hashes is None:
            return
        parts = pending.result()
        if parts is None:
            self.hashes = None
            return
        for h in parts:
            self.hashes.put(h)  # none when written in place

    def finish(self) -> np.ndarray | None:
        """Every batch's hashes in row order (``settle`` after the last batch first), or None
        when an id could not be hashed."""
        self.settle()
        self.close()
        return None if self.hashes is None else self.hashes.collected()

    def close(self) -> None:
        """Stop the hashing thread: a batch in flight and not settled is dropped (the read
        failed), so ``settle`` comes first on success."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def batch_hashes(arr: pa.Array, into: np.ndarray | None = None) -> list[np.ndarray] | None:
    """The hashes of a batch's raw ids, cleaned chunk by chunk (written into ``into``, one
    row per id, when given: then none is returned); None when a chunk holds an id the hash
    does not take."""
    out = []
    start = 0
    for chunk in cleaned_ids(arr):
        end = start + len(chunk)
        h = row_hashes(chunk, None if into is None else into[start:end])
        if h is None:
            return None
        if into is None:
            out.append(h)
        start = end
    return out


def cleaned_ids(arr: pa.Array) -> list[pa.Array]:
    """A batch of raw ids cleaned as ``_to_text`` cleans the whole column (trimmed, empty as
    null: value by value, so batch by batch gives the same)."""
    import pyarrow as pa

    return list(_to_text(pa.chunked_array([arr], arr.type)).chunks)
