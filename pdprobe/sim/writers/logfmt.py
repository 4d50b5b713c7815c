"""Vectorised pieces of log lines: timestamps in each engine's style, fixed-decimal numbers.

Lines are assembled column-wise with pyarrow string kernels, then merged per instance in time
order and written in one go.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.writers.common import open_out, out_name

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

Piece = "pa.Array | str"

MAX_DECIMALS: Final = 6


def iso_us(unix_ts: npt.NDArray[np.float64]) -> pa.Array:
    """``YYYY-MM-DDTHH:MM:SS.ffffff`` (UTC) per timestamp."""
    import pyarrow as pa

    us = np.rint(np.asarray(unix_ts, dtype=np.float64) * 1e6).astype("datetime64[us]")
    return pa.array(np.datetime_as_string(us, unit="us"))


def vllm_time(unix_ts: npt.NDArray[np.float64]) -> pa.Array:
    """``MM-DD HH:MM:SS`` (vLLM's ``%m-%d %H:%M:%S``; no year)."""
    import pyarrow.compute as pc

    iso = iso_us(unix_ts)
    return pc.replace_substring(pc.utf8_slice_codeunits(iso, 5, 19), "T", " ")


def sglang_time(unix_ts: npt.NDArray[np.float64]) -> pa.Array:
    """``YYYY-MM-DD HH:MM:SS``."""
    import pyarrow.compute as pc

    iso = iso_us(unix_ts)
    return pc.replace_substring(pc.utf8_slice_codeunits(iso, 0, 19), "T", " ")


def glog_time(unix_ts: npt.NDArray[np.float64]) -> pa.Array:
    """``MMDD HH:MM:SS.uuuuuu`` (glog's prefix after the level letter)."""
    import pyarrow.compute as pc

    iso = iso_us(unix_ts)
    mmdd = pc.replace_substring(pc.utf8_slice_codeunits(iso, 5, 10), "-", "")
    return pc.binary_join_element_wise(mmdd, pc.utf8_slice_codeunits(iso, 11, 26), " ")


def fixed(values: npt.NDArray[np.float64], decimals: int) -> pa.Array:
    """``%.{decimals}f`` for non-negative numbers, vectorised."""
    import pyarrow as pa
    import pyarrow.compute as pc

    assert 0 <= decimals <= MAX_DECIMALS
    scaled = np.rint(np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), 0, None)
                     * 10**decimals).astype(np.int64)
    whole = pa.array(scaled // 10**decimals).cast(pa.string())
    if decimals == 0:
        return whole
    frac = pc.utf8_lpad(pa.array(scaled % 10**decimals).cast(pa.string()), decimals, "0")
    return pc.binary_join_element_wise(whole, frac, ".")


def ints(values: npt.NDArray[np.float64] | npt.NDArray[np.int64]) -> pa.Array:
    """Values as an int64 Arrow array (floats rounded), for log columns printed as integers."""
    import pyarrow as pa

    arr = np.asarray(values)
    if not np.issubdtype(arr.dtype, np.integer):
        arr = np.rint(arr.astype(np.float64)).astype(np.int64)
    return pa.array(arr).cast(pa.string())


def concat(pieces: Sequence[pa.Array | str], n: int) -> pa.Array:
    """Join string arrays and literal strings element-wise into ``n`` lines."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays = [pa.array([p] * n, type=pa.string()) if isinstance(p, str) else p for p in pieces]
    if not arrays:
        return pa.array([""] * n)
    return pc.binary_join_element_wise(*arrays, "")


def write_lines(path: Path, compress: bool, times: list[npt.NDArray[np.float64]],
                lines: list[pa.Array]) -> Path:
    """Write the lines of several sources merged in time order (stable for equal times)."""
    import pyarrow as pa

    all_t = np.concatenate(times) if times else np.zeros(0)
    all_lines = pa.concat_arrays([a.cast(pa.string()) for a in lines]) if lines else pa.array([], pa.string())
    order = np.argsort(all_t, kind="stable")
    ordered = all_lines.take(pa.array(order))
    with open_out(path, compress) as fh:
        if len(ordered):
            import pyarrow.compute as pc

            list_arr = pa.ListArray.from_arrays(pa.array([0, len(ordered)], pa.int32()), ordered)
            fh.write(str(pc.binary_join(list_arr, "\n")[0].as_py()))
            fh.write("\n")
    return out_name(path, compress)
