"""Request ids: cleaned without a copy when they need no cleaning, duplicates counted by hash.

At 10M rows a hash table of 10M distinct strings (``pyarrow.compute.unique``) costs 2.5-4
CPU-s and trimming every id another second. Most exports write ids that are plain ASCII with
no surrounding blanks, so: a look at each id's first and last byte tells whether anything
needs trimming (the full cleaning runs only when something does), and duplicates are counted
from a 64-bit hash of each id, sorted; ids whose hashes collide are compared exactly, so the
count is exact whatever the hash does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.collectors.request_blocks import compact

if TYPE_CHECKING:
    import pyarrow as pa

# Below this many ids the plain hash table is as fast and simpler.
HASH_MIN_IDS: Final = 200_000
# Ids longer than this (bytes) are counted with the plain hash table: padding them to one
# width would cost more than it saves.
HASH_MAX_ID_BYTES: Final = 64
# Odd 64-bit multipliers for the word mix (from splitmix64).
_MIX_A: Final = np.uint64(0xBF58476D1CE4E5B9)
_MIX_B: Final = np.uint64(0x94D049BB133111EB)
_SEED: Final = np.uint64(0x9E3779B97F4A7C15)
# Above this many ids the duplicate check's hashing (of ids held whole) and its sort run on two
# cores (``sort_in_place``, ``_hash_into``): at 10M ids the sort alone is ~0.7 CPU-s, at the
# end of the read when the other core is idle.
TWO_CORES_MIN_IDS: Final = 1_000_000
# Words (8 bytes, blank-padded) of every id hashed whatever its length: ids of up to 16 bytes
# (most exports') are mixed word by word in place, with no mask of the ids long enough for
# a word (three passes less per word at 10M ids).
_ALWAYS_WORDS: Final = 2
# The largest ASCII byte.
_ASCII_MAX: Final = 0x7F
# Bytes that may need trimming or are not ASCII: controls, the space, DEL and above.
_PLAIN_LOW: Final = 0x21
_PLAIN_HIGH: Final = 0x7E


def _offsets_and_data(chunk: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow as pa

    bufs = chunk.buffers()
    kind = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=kind)[chunk.offset:chunk.offset + len(chunk) + 1]
    data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None
            else np.zeros(0, np.uint8))
    return offsets, data


def all_ascii(chunk: pa.Array) -> bool:
    """Whether the bytes of a string ``chunk``'s values are all ASCII (then it is valid UTF-8):
    one ``max`` over its data, no mask."""
    offsets, data = _offsets_and_data(chunk)
    used = data[offsets[0]:offsets[-1]] if offsets.size else data[:0]
    return not used.size or int(used.max()) <= _ASCII_MAX


def plain_ids(chunk: pa.Array) -> bool:
    """Whether every non-null id of a string ``chunk`` is non-empty and starts and ends with a
    printable ASCII character that is not a blank: then cleaning (trim, empty -> missing)
    would change nothing."""
    import pyarrow as pa

    if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
        return False
    if len(chunk) == chunk.null_count:
        return False
    offsets, data = _offsets_and_data(chunk)
    starts, ends = offsets[:-1], offsets[1:]
    if chunk.null_count:
        valid = chunk.is_valid().to_numpy(zero_copy_only=False)
        starts, ends = starts[valid], ends[valid]
    if (ends - starts).min() <= 0:  # an empty id (offsets never decrease)
        return False
    # ``take`` rather than fancy indexing: the same bytes, ~40 % less CPU at 64K ids a chunk
    first, last = data.take(starts), data.take(ends - 1)  # copies: shifted in place
    # one comparison for both bounds: a byte below _PLAIN_LOW wraps around above the range
    first -= _PLAIN_LOW
    last -= _PLAIN_LOW
    np.maximum(first, last, out=first)
    return int(first.max()) <= _PLAIN_HIGH - _PLAIN_LOW


def _hashes(chunk: pa.Array, out: np.ndarray | None = None) -> np.ndarray | None:
    """A 64-bit hash of each id of a null-free string chunk (computed in ``out`` when given),
    or None when the chunk is not ASCII or holds an id longer than ``HASH_MAX_ID_BYTES``
    (then the caller counts exactly)."""
    import pyarrow.compute as pc

    offsets = _offsets_and_data(chunk)[0]
    lengths = np.diff(offsets)
    if lengths.size == 0:
        return np.zeros(0, np.uint64)
    longest = int(lengths.max())
    if longest > HASH_MAX_ID_BYTES or not all_ascii(chunk):
        return None
    width = max(8 * _ALWAYS_WORDS, -(-longest // 8) * 8)
    # every id padded with blanks to one width: a (rows, words) matrix without a gather;
    # trimmed ids end in no blank, so padding keeps distinct ids distinct (ASCII: the byte
    # padding is the character padding, and cheaper)
    padded = pc.ascii_rpad(chunk, width=width, padding=" ")
    p_offsets, p_data = _offsets_and_data(padded)
    words = p_data[p_offsets[0]:p_offsets[-1]].view(np.uint64).reshape(len(chunk), width // 8)
    h = np.empty(len(chunk), dtype=np.uint64) if out is None else out
    tmp = np.empty_like(h)
    mixed = None
    with np.errstate(over="ignore"):
        for k in range(words.shape[1]):
            # the first ``_ALWAYS_WORDS`` words of every id (blank padding for a short one),
            # then only the words an id has: the padding's width is the chunk's longest id,
            # and an id must hash alike in every chunk (a blank word more would change it)
            rows = None if k < _ALWAYS_WORDS else lengths > 8 * k
            if k == 0:  # the seed and the first word in one pass (no fill of ``h`` first)
                np.bitwise_xor(words[:, 0], _SEED, out=h)
                _mix(h, tmp)
            elif rows is None or rows.all():  # every id hashes this word: mixed in place
                h ^= words[:, k]
                _mix(h, tmp)
            else:  # every row mixed, kept where the id is this long (no gather, no scatter)
                if mixed is None:
                    mixed = np.empty_like(h)
                np.bitwise_xor(h, words[:, k], out=mixed)
                _mix(mixed, tmp)
                np.copyto(h, mixed, where=rows)
    return h


def _mix(h: np.ndarray, tmp: np.ndarray | None = None) -> None:
    """splitmix64's finaliser, in place (``tmp``: a scratch array like ``h``)."""
    if tmp is None:
        tmp = np.empty_like(h)
    np.right_shift(h, np.uint64(30), out=tmp)
    h ^= tmp
    h *= _MIX_A
    np.right_shift(h, np.uint64(27), out=tmp)
    h ^= tmp
    h *= _MIX_B
    np.right_shift(h, np.uint64(31), out=tmp)
    h ^= tmp


def count_duplicates(ids: pa.ChunkedArray) -> int:
    """How many of the non-null ``ids`` repeat an earlier one (``len - distinct``), exactly."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if ids.null_count:
        ids = ids.drop_null()
    n = len(ids)
    if n < HASH_MIN_IDS or not (pa.types.is_string(ids.type)
                                or pa.types.is_large_string(ids.type)):
        return n - len(pc.unique(ids))
    hashes = np.empty(n, dtype=np.uint64)
    if not _hash_into(ids.chunks, hashes):
        return n - len(pc.unique(ids))
    sort_in_place(hashes)  # one array of 8 bytes per id is all the check holds
    same = hashes[1:] == hashes[:-1]
    if not same.any():
        return 0  # distinct hashes: distinct ids
    # ids whose hash is shared are compared exactly; every other id is distinct from all
    shared = np.unique(hashes[1:][same])
    del hashes, same
    rows = np.flatnonzero(np.concatenate([np.isin(_hashes(chunk), shared)  # type: ignore[arg-type]
                                          for chunk in ids.chunks]))
    candidates = ids.take(pa.array(rows))
    return len(candidates) - len(pc.unique(candidates))


def _hash_into(chunks: list[pa.Array], hashes: np.ndarray) -> bool:
    """Each null-free chunk's ``_hashes`` written at its rows' place in ``hashes``; False as soon
    as a chunk holds ids the hash does not take. Above ``TWO_CORES_MIN_IDS`` ids the chunks
    are split between two threads at about half the rows (the hashing is pyarrow and numpy
    work that releases the GIL): each chunk's place is fixed, so the array is the same."""
    ends = np.cumsum([len(c) for c in chunks], dtype=np.int64)

    def hash_chunks(first: int, stop: int) -> bool:
        for i in range(first, stop):
            h = _hashes(chunks[i])
            if h is None:
                return False
            hashes[int(ends[i]) - h.size:int(ends[i])] = h
        return True

    if not chunks or hashes.size < TWO_CORES_MIN_IDS:
        return hash_chunks(0, len(chunks))
    from concurrent.futures import ThreadPoolExecutor

    split = int(np.searchsorted(ends, hashes.size // 2))  # chunks ending before the middle
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pdprobe-hash") as pool:
        upper = pool.submit(hash_chunks, split, len(chunks))
        lower = hash_chunks(0, split)
        return upper.result() and lower


def row_hashes(chunk: pa.Array, out: np.ndarray | None = None) -> np.ndarray | None:
    """The hash of each id of a cleaned string ``chunk`` as ``count_duplicates`` hashes it, 0
    for a null id (an id's hash of 0 becomes 1), written into ``out`` (one row per id) when
    given; None when the chunk holds ids the hash does not take (not ASCII, longer than
    ``HASH_MAX_ID_BYTES``)."""
    if not len(chunk):  # no ids: no hashes (None would mean ids the hash cannot take)
        return np.zeros(0, np.uint64) if out is None else out
    nulls = chunk.null_count
    if out is None:
        out = np.zeros(len(chunk), np.uint64) if nulls else None
    elif nulls:
        out.fill(0)
    if nulls == len(chunk):
        return out
    h = _hashes(chunk.drop_null()) if nulls or out is None else _hashes(chunk, out)
    if h is None:
        return None
    np.maximum(h, np.uint64(1), out=h)  # 0 marks a null id: an id's 0 becomes 1
    if out is None:
        return h
    if not nulls:
        if h is not out:
            out[...] = h
        return out
    out[chunk.is_valid().to_numpy(zero_copy_only=False)] = h
    return out


def sort_in_place(values: np.ndarray) -> None:
    """``values.sort()``, on two cores above ``TWO_CORES_MIN_IDS`` values: partitioned at the
    middle rank (every value left of it no larger, every value right of it no smaller, in
    place), then the two halves sorted at once in two threads (numpy's sort releases the
    GIL). Sorting both sides of a partition sorts the whole: the same array."""
    if values.size < TWO_CORES_MIN_IDS:
        values.sort()
        return
    from concurrent.futures import ThreadPoolExecutor

    middle = values.size // 2
    values.partition(middle)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pdprobe-sort") as pool:
        upper = pool.submit(values[middle:].sort)
        values[:middle].sort()
        upper.result()


def count_hashed(hashes: np.ndarray, rows: np.ndarray | None,
                 again: Callable[[], Iterable[pa.Array]]) -> tuple[int, int]:
    """``(duplicates, ids)`` among the ``rows`` (a mask over all rows; None for all) of a
    column whose ids were hashed as they were read (``row_hashes``; 0 for null), exactly:
    only ids whose hash is shared are read again (``again`` yields the cleaned id chunks in
    row order) and compared. ``hashes`` is overwritten: the chosen rows' hashes are compacted
    to its front and sorted there (no copy of 8 bytes per row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if hashes.flags.writeable and hashes.flags.c_contiguous:
        h = hashes if rows is None else compact(hashes, rows)
    else:  # not ours to overwrite
        h = hashes.copy() if rows is None else hashes[rows]
    sort_in_place(h)
    h = h[int(np.searchsorted(h, np.uint64(1))):]  # nulls (0) first: not ids
    present = int(h.size)
    same = h[1:] == h[:-1]
    if not same.any():
        return 0, present  # distinct hashes: distinct ids
    shared = np.unique(h[1:][same])
    del h, same
    candidates: list[pa.Array] = []
    start = 0
    for chunk in again():
        end = start + len(chunk)
        hit = np.isin(row_hashes(chunk), shared)  # type: ignore[arg-type]
        if rows is not None:
            hit &= rows[start:end]
        if hit.any():
            candidates.append(chunk.filter(pa.array(hit)))
        start = end
    if not candidates:
        return 0, present
    ids = pa.chunked_array(candidates)
    return len(ids) - len(pc.unique(ids)), present
