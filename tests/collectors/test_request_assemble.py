"""Tests for pdprobe/collectors/request_assemble.py: batches give what one table gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdprobe.collectors import request_formats
from pdprobe.collectors.base import ReadContext
from pdprobe.collectors.request_assemble import assemble
from pdprobe.collectors.request_columns import map_columns
from pdprobe.collectors.requests_file import read_requests


def _table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    decode = [f"d{i}" for i in rng.integers(0, 5, n)]
    decode[3] = " d9 "  # untrimmed: cleaned per batch
    return pa.table({
        "arrival_ts": 1.75e12 + np.arange(n) * 10.0,  # epoch milliseconds
        "prompt_tokens": rng.integers(1, 4000, n),
        "output_tokens": pa.array([None if i % 17 == 0 else int(v)
                                   for i, v in enumerate(rng.integers(1, 500, n))], pa.int64()),
        "ttft_ms": rng.uniform(5, 900, n),
        "decode_instance": pa.array(decode).dictionary_encode(),
        "prefill_instance": pa.array([f"p{(i * 7) % 3}" for i in range(n)]),
        "status": pa.array(["ok" if i % 11 else "HTTP 503" for i in range(n)]),
    })


def test_batches_assemble_to_what_the_whole_table_gives() -> None:
    table = pa.concat_tables([_table(300, 1), _table(200, 2)])  # two dictionaries
    cmap = map_columns(table.column_names)
    whole = assemble(table.combine_chunks().to_batches(), table.schema, cmap, table.num_rows)
    sliced = assemble(table.to_batches(max_chunksize=64), table.schema, cmap, None)
    # reserved for too few rows (a batch straddles the end) or for too many: the same
    for reserve in (150, 2000):
        other = assemble(table.to_batches(max_chunksize=64), table.schema, cmap, reserve)
        np.testing.assert_array_equal(other.arrival, whole.arrival)
        np.testing.assert_array_equal(other.numeric["ttft_s"][0], whole.numeric["ttft_s"][0])
        np.testing.assert_array_equal(other.categories["decode_instance"][0],
                                      whole.categories["decode_instance"][0])
    np.testing.assert_array_equal(whole.arrival, sliced.arrival)
    assert whole.arrival_notes == sliced.arrival_notes
    for name in whole.numeric:
        np.testing.assert_array_equal(whole.numeric[name][0], sliced.numeric[name][0])
    for name, (codes, names, unknown) in whole.categories.items():
        other_codes, other_names, other_unknown = sliced.categories[name]
        assert names == other_names == sorted(names)
        np.testing.assert_array_equal(codes, other_codes)
        assert unknown == other_unknown
    assert sliced.categories["status"][2] == {"HTTP 503": 47}
    assert "d9" in sliced.categories["decode_instance"][1]


def test_parquet_row_groups_and_slices_read_as_one_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = pa.concat_tables([_table(400, 3), _table(400, 4)])
    path = tmp_path / "r.parquet"
    pq.write_table(table, path, row_group_size=300)
    one = tmp_path / "one.parquet"
    pq.write_table(table, one, row_group_size=10_000)
    expect = read_requests(one, ReadContext()).requests
    monkeypatch.setattr(request_formats, "PARQUET_BATCH_ROWS", 128)  # groups read in slices
    for got in (read_requests(path, ReadContext()).requests,
                read_requests(one, ReadContext()).requests):
        pd.testing.assert_frame_equal(got, expect)
    assert expect["prompt_tokens"].dtype == np.int64
    assert expect["arrival_ts"].max() == pytest.approx(1.75e9 + 3.99)  # milliseconds read
    assert isinstance(expect["decode_instance"].dtype, pd.CategoricalDtype)
    assert expect["ttft_s"].max() < 1.0  # ttft_ms scaled


def test_token_columns_the_footer_shows_in_range_are_read_as_int64(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(500, 7).drop_columns(["output_tokens"]).append_column(
        "output_tokens", pa.array(np.arange(500) % 7 + 1, pa.int64()))
    path = tmp_path / "r.parquet"
    pq.write_table(table, path, row_group_size=200)
    cmap = map_columns(table.column_names)
    batches, _ = request_formats._read_parquet(path, None, False)
    assert batches.bounds is not None
    got = assemble(batches.batches, batches.schema, cmap, batches.rows, bounds=batches.bounds)
    for name in ("prompt_tokens", "output_tokens"):
        assert got.numeric[name][0].dtype == np.int64  # no float64 detour
    expect = read_requests(path, ReadContext()).requests
    monkeypatch.setattr(request_formats, "parquet_bounds", lambda *a: {})  # no footer ranges
    pd.testing.assert_frame_equal(read_requests(path, ReadContext()).requests, expect)


def test_a_null_the_footer_did_not_announce_turns_int64_tokens_into_floats() -> None:
    """A footer that shows no null where there is one: the int64 tokens turn into float64 with
    NaN, and the footer's bounds of every column where that happened (read as int64 or as
    float64) are dropped, so the canonical step drops and warns about the row as without a
    footer instead of trusting "no NaN" (NaN as int64 is -2**63)."""
    from pdprobe.collectors.request_bounds import Bounds
    from pdprobe.collectors.request_canonical import _canonicalise

    table = pa.table({"arrival_ts": np.arange(6.0),
                      "prompt_tokens": pa.array([1, 2, 3, None, 5, 6], pa.int64()),
                      "output_tokens": pa.array([1, 2, 3, 4, None, 6], pa.int64()),
                      "ttft_s": pa.array([1, None, 3, 4, 5, 6], pa.int64())})
    cmap = map_columns(table.column_names)
    lying = {"prompt_tokens": Bounds(1.0, 6.0, False),  # in range: read as int64 at first
             "output_tokens": Bounds(1.0, 1e12, False),  # out of range: read as float64
             "ttft_s": Bounds(1.0, 6.0, False), "arrival_ts": Bounds(0.0, 5.0, True)}

    def read(bounds: dict[str, Bounds] | None) -> Any:
        return assemble(table.to_batches(max_chunksize=2), table.schema, cmap, 6, bounds=bounds)

    got, plain = read(lying), read(None)
    np.testing.assert_array_equal(got.numeric["prompt_tokens"][0],
                                  plain.numeric["prompt_tokens"][0])  # float64, NaN kept
    assert got.numeric["prompt_tokens"][0].dtype == np.float64
    assert set(got.bounds) == {"arrival_ts"}  # footers that missed a null are not trusted
    loaded, expect = (_canonicalise(Path("r.parquet"), a, cmap, "parquet", 0, False)
                      for a in (read(lying), plain))
    pd.testing.assert_frame_equal(loaded.frame, expect.frame)
    assert loaded.rows == expect.rows == 4
    assert loaded.warnings == expect.warnings and len(expect.warnings) == 2
    assert loaded.frame["prompt_tokens"].min() == 1


def test_text_in_a_numeric_column_is_converted_over_the_whole_column() -> None:
    table = pa.table({"arrival_ts": [1.0, 2.0, 3.0, 4.0],
                      "prompt_tokens": ["10", "20", "x", "40"],
                      "output_tokens": [1, 2, 3, 4]})
    cmap = map_columns(table.column_names)
    got = assemble(table.to_batches(max_chunksize=2), table.schema, cmap, None)
    values, non_numeric = got.numeric["prompt_tokens"]
    assert non_numeric == 1 and np.isnan(values[2]) and values[3] == 40.0
    assert values.flags.writeable  # fixed in place by the canonical step


def test_odd_parquet_batch_sizes_give_the_same_frame(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = pa.concat_tables([_table(333, 5), _table(290, 6)])
    path = tmp_path / "r.parquet"
    pq.write_table(table, path, row_group_size=250)
    monkeypatch.setattr(request_formats, "PARQUET_BATCH_ROWS", 1 << 20)
    expect = read_requests(path, ReadContext())
    for rows in (1, 37, 250, 251):  # batches across, at and within row-group edges
        monkeypatch.setattr(request_formats, "PARQUET_BATCH_ROWS", rows)
        got = read_requests(path, ReadContext())
        pd.testing.assert_frame_equal(got.requests, expect.requests)
        assert got.warnings == expect.warnings and got.source == expect.source


def test_codes_widen_past_int8_when_a_column_has_many_instances() -> None:
    n = 1000
    # the first batches name few instances, later ones up to 300: codes widen mid-stream
    names = [f"d{(i * 7) % (3 if i < 500 else 300):03d}" for i in range(n)]
    table = pa.table({"arrival_ts": np.arange(n, dtype=np.float64),
                      "prompt_tokens": np.ones(n, np.int64), "output_tokens": np.ones(n, np.int64),
                      "decode_instance": pa.array(names).dictionary_encode(),
                      "prefill_instance": pa.array([f"p{i % 3}" for i in range(n)])})
    cmap = map_columns(table.column_names)
    got = assemble(table.to_batches(max_chunksize=64), table.schema, cmap, n)
    codes, labels, _ = got.categories["decode_instance"]
    assert codes.dtype == np.int32 and len(labels) == 300
    assert [labels[c] for c in codes] == names
    few, few_labels, _ = got.categories["prefill_instance"]
    assert few.dtype == np.int8 and [few_labels[c] for c in few] == [f"p{i % 3}" for i in range(n)]


def test_codes_widen_between_batches_of_different_dictionaries() -> None:
    def part(names: list[str]) -> pa.Table:
        n = len(names)
        return pa.table({"arrival_ts": np.arange(n, dtype=np.float64),
                         "prompt_tokens": np.ones(n, np.int64),
                         "output_tokens": np.ones(n, np.int64),
                         "decode_instance": pa.array(names).dictionary_encode()})

    # few names (int8 codes gathered into the column), then 200 more (widened to int32),
    # then the first few again: each batch's codes name its own rows
    names = ([f"d{i % 3}" for i in range(100)] + [f"x{i:03d}" for i in range(200)]
             + [f"d{i % 3}" for i in range(50)] + [None] * 5)  # type: ignore[list-item]
    table = pa.concat_tables([part(names[:100]), part(names[100:300]), part(names[300:])])
    cmap = map_columns(table.column_names)
    for reserve in (len(names), 120):  # in place, and appended beyond the reserve
        got = assemble(table.to_batches(max_chunksize=40), table.schema, cmap, reserve)
        codes, labels, _ = got.categories["decode_instance"]
        assert codes.dtype == np.int32
        assert [labels[c] if c >= 0 else None for c in codes] == names


def test_batches_sharing_a_dictionary_map_it_once_and_count_as_one_column() -> None:
    from pdprobe.collectors.request_values import _category_codes

    def dict_table(values: list[str | None], dictionary: list[str]) -> pa.Table:
        n = len(values)
        indices = pa.array([None if v is None else dictionary.index(v) for v in values],
                           pa.int32())
        status = pa.DictionaryArray.from_arrays(indices, pa.array(dictionary))
        return pa.table({"arrival_ts": np.arange(n, dtype=np.float64),
                         "prompt_tokens": np.ones(n, np.int64),
                         "output_tokens": np.ones(n, np.int64), "status": status})

    first = ["ok", "HTTP 503", " ok", "weird", "500", None]
    second = ["weird", "200", "timeout", None]  # another dictionary: mapped afresh
    table = pa.concat_tables([dict_table([first[i % 6] for i in range(90)], first),
                              dict_table([second[i % 4] for i in range(50)], second)])
    cmap = map_columns(table.column_names)
    got = assemble(table.to_batches(max_chunksize=16), table.schema, cmap, table.num_rows)
    codes, names, unknown = got.categories["status"]
    whole_codes, whole_names, _ = _category_codes(table.column("status").cast(pa.string()),
                                                  status=True)
    assert names == whole_names and codes.tolist() == whole_codes.tolist()
    assert unknown == {"HTTP 503": 15, "weird": 15 + 13}


def _ids_table(ids: list[str | None]) -> pa.Table:
    n = len(ids)
    return pa.table({"request_id": pa.array(ids, pa.string()),
                     "arrival_ts": np.arange(n, dtype=np.float64),
                     "prompt_tokens": np.ones(n, dtype=np.int64)})


def _id_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith("pdprobe-ids")]


@pytest.mark.parametrize("tail", ["plain", "not-hashable"])
def test_ids_hashed_beside_the_loop_are_the_row_hashes(tail: str) -> None:
    """Ids hashed in their own thread batch by batch give each row's hash in row order (or
    none at all once a batch holds an id the hash does not take), and the thread is gone when
    ``assemble`` returns."""
    from pdprobe.collectors.request_ids import row_hashes

    ids: list[str | None] = [f"req-{i % 700}" if i % 13 else None for i in range(2_000)]
    if tail == "not-hashable":
        ids[1_500] = "é" * 3  # not ASCII: counted exactly from the ids read again
    table = _ids_table(ids)
    cmap = map_columns(table.column_names)
    got = assemble(table.to_batches(max_chunksize=128), table.schema, cmap, 1_000,
                   ids_again=lambda: iter(table.column("request_id").chunks))
    if tail == "plain":
        want = row_hashes(table.column("request_id").combine_chunks())
        assert got.id_hashes is not None
        np.testing.assert_array_equal(got.id_hashes, want)
    else:
        assert got.id_hashes is None
    assert not _id_threads()


def test_a_failing_read_leaves_no_hashing_thread() -> None:
    """A batch source raising mid-read (a broken file) stops the id hashing thread too."""
    table = _ids_table([f"r{i}" for i in range(600)])
    cmap = map_columns(table.column_names)

    def broken() -> Iterator[pa.RecordBatch]:
        yield from table.to_batches(max_chunksize=200)[:2]
        raise OSError("truncated file")

    with pytest.raises(OSError, match="truncated"):
        assemble(broken(), table.schema, cmap, None, ids_again=lambda: iter([]))
    assert not _id_threads()


def test_the_last_batch_hashes_are_kept_however_the_thread_is_timed() -> None:
    """The last batch's hashes are written before the hashing thread is closed: read many
    times over (the thread may not have started the last batch when the loop ends)."""
    from pdprobe.collectors.request_ids import row_hashes

    table = _ids_table([f"q{i}" for i in range(40)])
    cmap = map_columns(table.column_names)
    want = row_hashes(table.column("request_id").combine_chunks())
    for _ in range(30):
        got = assemble(table.to_batches(max_chunksize=7), table.schema, cmap, 40,
                       ids_again=lambda: iter(table.column("request_id").chunks))
        assert got.id_hashes is not None
        np.testing.assert_array_equal(got.id_hashes, want)


@pytest.mark.parametrize("first_seen", [["a", "b", "c"], ["b", "a", "c"], ["c"]])
def test_codes_first_seen_in_sorted_order_are_kept_without_a_remap(
        first_seen: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Names first seen in sorted order (one batch per name, each its own dictionary): the
    codes are already the sorted ones (no pass); otherwise remapped. Missing values stay -1
    either way."""
    from pdprobe.collectors import request_assemble

    remaps: list[int] = []
    real = request_assemble.remap_codes

    def counted(codes: np.ndarray, remap: np.ndarray) -> np.ndarray:
        remaps.append(codes.size)
        return real(codes, remap)

    monkeypatch.setattr(request_assemble, "remap_codes", counted)
    pieces = [[v] for v in first_seen] + [["", *sorted(first_seen), None]]
    rows = [v for piece in pieces for v in piece]
    start = 0
    tables = []
    for piece in pieces:
        tables.append(pa.table({
            "arrival_ts": np.arange(start, start + len(piece), dtype=float) + 1.75e9,
            "prompt_tokens": [5] * len(piece), "output_tokens": [3] * len(piece),
            "decode_instance": pa.array(piece, pa.string()).dictionary_encode()}))
        start += len(piece)
    table = pa.concat_tables(tables)
    got = read_requests_table(table)
    names = sorted(first_seen)
    want = [names.index(v) if v else -1 for v in rows]
    assert got["decode_instance"].cat.codes.tolist() == want
    assert remaps == ([] if first_seen == names else [len(rows)])


def read_requests_table(table: pa.Table) -> pd.DataFrame:
    from pdprobe.collectors.requests_file import partial_from_table

    cmap = map_columns(table.column_names)
    return partial_from_table(Path("t.parquet"), table, cmap, "parquet").requests


@pytest.mark.parametrize("arr", [
    pa.array(np.arange(10, dtype=np.int64) * 3), pa.array(np.arange(5, dtype=np.uint8)),
    pa.array(np.arange(6, dtype=np.int32) - 3), pa.array(np.array([1.5, -0.0, np.nan, np.inf])),
    pa.array(np.arange(4, dtype=np.float32)), pa.array(np.arange(20, dtype=np.int16)).slice(7, 9),
    pa.array(np.arange(20, dtype=np.float64)).slice(3, 0), pa.array([], pa.int64())])
def test_values_view_is_what_to_numpy_gives(arr: pa.Array) -> None:
    from pdprobe.collectors.request_values import values_view

    got = values_view(arr)
    assert got is not None and not got.flags.writeable
    expect = arr.to_numpy()
    assert got.dtype == expect.dtype
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("arr", [pa.array([1, None, 3]), pa.array([1.0, None]),
                                 pa.array(["a"]), pa.array([True, False]),
                                 pa.array([1, 2], pa.timestamp("s"))])
def test_values_view_refuses_nulls_and_other_types(arr: pa.Array) -> None:
    from pdprobe.collectors.request_values import values_view

    assert values_view(arr) is None


def test_numbers_and_dictionaries_are_read_without_importing_pandas() -> None:
    """The reading threads convert numbers and dictionary codes without pyarrow's
    ``to_numpy``, whose first call imports pandas (a reader then waited for the analysis
    modules' imports in another thread)."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, pyarrow as pa\n"
            "from pdprobe.collectors.request_outputs import batch_floats, values_view\n"
            "def arr(t, values):  # pa.array would import pandas itself\n"
            "    return pa.Array.from_buffers(t, len(values), [None, pa.py_buffer(values)])\n"
            "out = [batch_floats(arr(pa.float64(), np.arange(5.0))),\n"
            "       batch_floats(arr(pa.int64(), np.arange(5))),\n"
            "       values_view(arr(pa.int32(), np.arange(5, dtype=np.int32)))]\n"
            "from pdprobe.collectors.request_values import _dictionary_codes\n"
            "names = pa.StringArray.from_buffers(3, pa.py_buffer(np.array([0, 3, 4, 4],\n"
            "    np.int32)), pa.py_buffer(b' b a'))  # ' b ', 'a', ''\n"
            "assert _dictionary_codes(names, False)[:2][1] == ['a', 'b']\n"
            "assert _dictionary_codes(names, True)[2] == [('b', 0), ('a', 1)]\n"
            "print('pandas' in sys.modules, [float(x.sum()) for x in out])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False", "[10.0,", "10.0,", "10.0]"]


def test_the_output_columns_and_token_limit_shared_across_modules_are_public() -> None:
    """``request_assemble`` and ``request_canonical`` use these names of other modules: they are
    public there (no leading underscore), and no module imports the old private names."""
    import ast

    from pdprobe.collectors import request_outputs, request_values

    for module, name in ((request_outputs, "Floats"), (request_outputs, "Ints"),
                         (request_outputs, "batch_floats"), (request_values, "upper_bound")):
        assert callable(getattr(module, name, None)), name
    private = {"_batch_floats", "_Floats", "_Ints", "_upper_bound"}
    root = Path(request_outputs.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not private & {a.name for a in node.names}, path.name
