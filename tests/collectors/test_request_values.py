"""Tests for pdprobe/collectors/request_values.py: arrival units scaled without a second copy."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.collectors.request_columns import map_columns
from pdprobe.collectors.request_values import _numeric_arrival


def test_millisecond_arrivals_scale_in_place_as_a_copy_would() -> None:
    cmap = map_columns(["arrival_ts", "prompt_tokens", "output_tokens"])
    ms = 1.75e12 + np.arange(1000) * 37.3
    expect = ms * 1e-3
    held = ms.copy()
    out, notes, _ = _numeric_arrival(held, cmap, "arrival_ts", [])
    assert out is held and out.tolist() == expect.tolist()
    assert notes == ["arrival_ts read as epoch milliseconds (detected by magnitude)"]
    frozen = ms.copy()
    frozen.flags.writeable = False  # a view of Arrow memory: scaled into a new array
    out2, _, _ = _numeric_arrival(frozen, cmap, "arrival_ts", [])
    assert out2 is not frozen and out2.tolist() == expect.tolist()
    assert frozen.tolist() == ms.tolist()


def _former_clean_text(arr):  # type: ignore[no-untyped-def]
    """``_clean_text`` as it was, with Python values as arguments (the reference)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    trimmed = pc.utf8_trim_whitespace(arr)
    return pc.if_else(pc.equal(trimmed, ""), pa.scalar(None, pa.string()), trimmed)


def _former_dictionary_codes(dictionary, status):  # type: ignore[no-untyped-def]
    """``_dictionary_codes`` as it was, with ``pa.array``, ``fill_null`` and ``to_numpy``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pdprobe.collectors.request_values import REQUEST_STATUSES, _status_of

    cleaned = _former_clean_text(dictionary)
    unknown = []
    if status:
        values = cleaned.to_pylist()
        mapped = [_status_of(value) for value in values]
        cleaned = pa.array(mapped, pa.string())
        unknown = [(str(v), i) for i, (v, m) in enumerate(zip(values, mapped, strict=True))
                   if m is None and v is not None]
        names = sorted(REQUEST_STATUSES)
    else:
        names = sorted(pc.unique(cleaned.drop_null()).to_pylist())
    remap = np.append(pc.fill_null(pc.index_in(cleaned, value_set=pa.array(names, pa.string())),
                                   -1).to_numpy(zero_copy_only=False), -1).astype(np.int32)
    return remap, names, unknown


DICTIONARIES = [
    ["p1", " p0 ", "", "  ", None, "p1 ", "é-node", "Z", "a", "\u00a0x\u00a0", "\u2003"],
    ["ok", "HTTP 503", " OK ", "", None, "weird", "timeout", "408", "499", "200", "ok"],
    [], [None, None], ["only"], ["b", "a", "c", "a "], [f"d{i:04d}" for i in range(3000, 0, -7)],
]


@pytest.mark.parametrize("values", DICTIONARIES)
@pytest.mark.parametrize("status", [False, True])
def test_dictionary_codes_are_what_the_former_arrow_conversions_gave(
        values: list[str | None], status: bool) -> None:
    """Codes built without pyarrow's Python-value conversions (which import pandas from a
    reading thread): the same remap, names and unknown statuses as before, trims, empties,
    nulls, non-ASCII and unsorted names included, and sliced dictionaries."""
    import pyarrow as pa

    from pdprobe.collectors.request_values import _clean_text, _dictionary_codes

    for arr in (pa.array(values, pa.string()), pa.array(["x", *values, "y"], pa.string())[1:-1]):
        remap, names, unknown = _dictionary_codes(arr, status)
        expect_remap, expect_names, expect_unknown = _former_dictionary_codes(arr, status)
        assert remap.dtype == np.int32 and remap.tolist() == expect_remap.tolist()
        assert names == expect_names and unknown == expect_unknown
        cleaned = _clean_text(arr)
        assert cleaned.type == pa.string()
        assert cleaned.to_pylist() == _former_clean_text(arr).to_pylist()


def test_clean_text_of_chunked_and_large_strings_is_what_it_was() -> None:
    import pyarrow as pa

    from pdprobe.collectors.request_values import _clean_text

    chunked = pa.chunked_array([pa.array([" a", "", None]), pa.array(["b ", " "])])
    large = pa.array([" a", "", None, "b"], pa.large_string())
    for arr in (chunked, large):
        got, expect = _clean_text(arr), _former_clean_text(arr)
        assert got.type == expect.type and got.to_pylist() == expect.to_pylist()
