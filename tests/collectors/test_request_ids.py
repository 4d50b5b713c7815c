"""Tests for pdprobe/collectors/request_ids.py: the id cleaning shortcut, exact duplicate counts."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pdprobe.collectors import request_ids
from pdprobe.collectors.request_ids import count_duplicates, plain_ids
from pdprobe.collectors.request_values import _to_text


def _exact(ids: pa.ChunkedArray) -> int:
    ids = ids.drop_null()
    return len(ids) - len(pc.unique(ids))


@pytest.mark.parametrize(("values", "plain"), [
    (["req-1", "req-2", None], True),
    ([" req-1", "req-2"], False),  # leading blank
    (["req-1\t", "req-2"], False),  # trailing tab
    (["req-1", ""], False),  # empty: becomes missing
    (["réq", "req"], True),  # non-ASCII inside, plain ends
    (["req-é", "req"], False),  # non-ASCII at an end: may be a Unicode blank
    ([None, None], False),
])
def test_plain_ids_only_when_cleaning_changes_nothing(values: list[str | None],
                                                      plain: bool) -> None:
    chunk = pa.array(values, pa.string())
    assert plain_ids(chunk) is plain
    cleaned = _to_text(pa.chunked_array([chunk]))
    if plain:  # the shortcut returns the ids as they are, which is what cleaning gives
        assert cleaned.to_pylist() == values


def test_to_text_still_cleans_when_one_chunk_needs_it() -> None:
    ids = pa.chunked_array([pa.array(["a", "b"]), pa.array([" c ", ""])])
    assert _to_text(ids).to_pylist() == ["a", "b", "c", None]


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_ids, "HASH_MIN_IDS", 1)


@pytest.mark.usefixtures("small")
def test_duplicate_count_is_exact_across_chunks_and_lengths() -> None:
    rng = np.random.default_rng(3)
    numbers = rng.integers(0, 5000, 6000)  # many repeats
    values = [f"id-{n}" + "x" * int(n % 40) for n in numbers]  # 4 to 49 bytes
    values[7] = None  # type: ignore[call-overload]
    ids = pa.chunked_array([pa.array(values[:2500]), pa.array(values[2500:])])
    assert count_duplicates(ids) == _exact(ids)
    unique = pa.chunked_array([pa.array([f"u{i}" for i in range(3000)])])
    assert count_duplicates(unique) == 0


@pytest.mark.usefixtures("small")
def test_colliding_hashes_are_compared_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = pa.chunked_array([pa.array(["a", "b", "c", "a", "d"])])
    monkeypatch.setattr(request_ids, "_hashes",
                        lambda chunk: np.zeros(len(chunk), np.uint64))  # every hash collides
    assert count_duplicates(ids) == 1


@pytest.mark.usefixtures("small")
@pytest.mark.parametrize("values", [
    ["é1", "é2", "é1"],  # not ASCII: padding by characters is not by bytes
    ["x" * 100, "y" * 100, "x" * 100],  # longer than HASH_MAX_ID_BYTES
])
def test_ids_the_hash_does_not_take_are_counted_exactly(values: list[str]) -> None:
    ids = pa.chunked_array([pa.array(values)])
    assert count_duplicates(ids) == 1


def test_ids_that_differ_only_in_length_hash_apart() -> None:
    h = request_ids._hashes(pa.array(["ab", "abc", "abcd", "abcdefgh", "abcdefghi"]))
    assert h is not None and len(set(h.tolist())) == 5


def _reference_hash(value: str) -> int:
    """splitmix64's finaliser over the id's 8-byte words (blank-padded), one id at a time."""
    mask = (1 << 64) - 1
    h = int(request_ids._SEED)
    raw = value.encode("ascii")
    # the words the id has, and at least the first _ALWAYS_WORDS (blank for a short id)
    for k in range(0, max(len(raw), 8 * request_ids._ALWAYS_WORDS), 8):
        h ^= int.from_bytes(raw[k:k + 8].ljust(8, b" "), "little")
        h ^= h >> 30
        h = (h * int(request_ids._MIX_A)) & mask
        h ^= h >> 27
        h = (h * int(request_ids._MIX_B)) & mask
        h ^= h >> 31
    return h


def test_each_id_hashes_as_its_own_words_whatever_its_neighbours() -> None:
    # lengths around the word edges in one chunk: longer ids must not mix into shorter ones
    values = ["", "a", "abcdefg", "abcdefgh", "abcdefghi", "x" * 16, "y" * 17, "z" * 40, "q-1"]
    h = request_ids._hashes(pa.array(values))
    assert h is not None
    assert h.tolist() == [_reference_hash(v) for v in values]


@pytest.mark.usefixtures("small")
def test_an_id_hashes_alike_in_chunks_of_different_widths() -> None:
    # the first chunk pads to 24 bytes, the second to 8: "abc" is the same id in both
    ids = pa.chunked_array([pa.array(["abc", "x" * 20, "q"]), pa.array(["abc", "zz"])])
    assert count_duplicates(ids) == 1
    first, second = (request_ids.row_hashes(c) for c in ids.chunks)
    assert first is not None and second is not None and first[0] == second[0]


@pytest.mark.parametrize("collide", [False, True])
def test_hashed_ids_are_counted_exactly_among_the_chosen_rows(
        monkeypatch: pytest.MonkeyPatch, collide: bool) -> None:
    rng = np.random.default_rng(9)
    values: list[str | None] = [f"r{n}" for n in rng.integers(0, 300, 1000)]
    values[5] = values[17] = None
    chunks = [pa.array(values[s:s + 128]) for s in range(0, 1000, 128)]
    if collide:  # every hash equal: every id is read again and compared
        monkeypatch.setattr(request_ids, "_hashes", lambda c: np.zeros(len(c), np.uint64))
    hashes = np.concatenate([request_ids.row_hashes(c) for c in chunks])  # type: ignore[misc]
    rows = rng.random(1000) < 0.7
    ids = pa.chunked_array(chunks)
    chosen = ids.filter(pa.array(rows))
    got = request_ids.count_hashed(hashes.copy(), rows, lambda: iter(chunks))
    assert got == (_exact(chosen), len(chosen) - chosen.null_count)
    frozen = hashes.copy()
    frozen.flags.writeable = False  # not ours to overwrite: the chosen rows are copied out
    assert request_ids.count_hashed(frozen, rows, lambda: iter(chunks)) == got
    got_all = request_ids.count_hashed(hashes.copy(), None, lambda: iter(chunks))
    assert got_all == (_exact(ids), 998)
    nothing = request_ids.count_hashed(np.zeros(4, np.uint64), None, lambda: iter([]))
    assert nothing == (0, 0)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000, 1001])
def test_sort_in_place_on_two_cores_is_the_sort(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Partitioned at the middle and the halves sorted apart, the hashes come out as one sort
    puts them: duplicates on both sides of the middle, nulls (0) and the largest hash."""
    monkeypatch.setattr(request_ids, "TWO_CORES_MIN_IDS", 1)
    rng = np.random.default_rng(n)
    values = rng.integers(0, 50, n).astype(np.uint64) * np.uint64(2 ** 58)  # many repeats
    if n > 2:
        values[:2] = [0, np.iinfo(np.uint64).max]
    got = values.copy()
    request_ids.sort_in_place(got)
    np.testing.assert_array_equal(got, np.sort(values))


def test_hashed_ids_counted_with_the_two_core_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """The duplicate count is the same whichever way the hashes were sorted."""
    rng = np.random.default_rng(4)
    values = [f"id-{n}" for n in rng.integers(0, 5000, 20_000)]
    chunks = [pa.array(values[s:s + 4096]) for s in range(0, len(values), 4096)]
    hashes = np.concatenate([request_ids.row_hashes(c) for c in chunks])  # type: ignore[misc]
    one = request_ids.count_hashed(hashes.copy(), None, lambda: iter(chunks))
    monkeypatch.setattr(request_ids, "TWO_CORES_MIN_IDS", 2)
    assert request_ids.count_hashed(hashes.copy(), None, lambda: iter(chunks)) == one
    assert one == (_exact(pa.chunked_array(chunks)), len(values))


@pytest.mark.usefixtures("small")
@pytest.mark.parametrize("odd_chunk", [None, 1, 9])
def test_ids_held_whole_are_hashed_on_two_cores_alike(monkeypatch: pytest.MonkeyPatch,
                                                      odd_chunk: int | None) -> None:
    """Chunks hashed in two threads land at their rows' places: the same hashes and the same
    duplicate count as one thread, and a chunk the hash does not take (in either half) still
    falls back to the exact count."""
    rng = np.random.default_rng(11)
    values = [f"c-{n}" for n in rng.integers(0, 900, 4000)]
    chunks = [pa.array(values[s:s + 400]) for s in range(0, 4000, 400)]
    if odd_chunk is not None:
        chunks[odd_chunk] = pa.array(["é-" + v for v in values[:400]])  # not ASCII
    ids = pa.chunked_array(chunks)
    one_thread = count_duplicates(ids)
    single = np.empty(4000, np.uint64)
    assert request_ids._hash_into(ids.chunks, single) is (odd_chunk is None)
    monkeypatch.setattr(request_ids, "TWO_CORES_MIN_IDS", 2)
    both = np.empty(4000, np.uint64)
    assert request_ids._hash_into(ids.chunks, both) is (odd_chunk is None)
    if odd_chunk is None:
        np.testing.assert_array_equal(both, single)
    assert count_duplicates(ids) == one_thread == _exact(ids)


def test_an_empty_chunk_hashes_to_no_rows_not_to_unhashable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty chunk is zero hashes (None would mean "these ids cannot be hashed"): counting
    among chosen rows with an empty chunk read again, and a batch's hashes past the reserved
    rows (``into`` None), go on as without it."""
    from pdprobe.collectors import request_id_hashes

    empty = pa.array([], pa.string())
    got = request_ids.row_hashes(empty)
    assert got is not None and got.dtype == np.uint64 and got.size == 0
    slot = np.zeros(0, np.uint64)
    assert request_ids.row_hashes(empty, slot) is slot
    values = ["a", "b", "a", None, "c", "b"]
    chunks = [pa.array(values[:3]), empty, pa.array(values[3:], pa.string())]
    hashes = np.concatenate([request_ids.row_hashes(c) for c in chunks])  # type: ignore[misc]
    rows = np.array([True, True, True, True, False, True])
    assert request_ids.count_hashed(hashes, rows, lambda: iter(chunks)) == (2, 4)
    # a batch whose cleaning left an empty chunk, hashed past the reserved rows
    monkeypatch.setattr(request_id_hashes, "cleaned_ids", lambda arr: [arr, empty])
    parts = request_id_hashes.batch_hashes(pa.array(["x", "y"]))
    assert parts is not None and [p.size for p in parts] == [2, 0]
