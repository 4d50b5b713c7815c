"""Vectorised pyarrow helpers the log splitters share: null-safe masks and time stamps.

``bool_mask`` turns a boolean pyarrow array into numpy (null as False); ``stamp_seconds`` turns a
collector's time stamps (RFC 3339 strings, or epoch numbers in seconds, milliseconds or
microseconds, as numbers or strings) into Unix seconds, UTC. Used by ``log_streams`` (line
prefixes) and ``log_json`` (JSON-lines exports).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Epoch numbers above these are milliseconds / microseconds (CloudWatch ms, journald µs).
_MS_ABOVE: Final = 1e11
_US_ABOVE: Final = 1e14


def bool_mask(values: pa.Array) -> np.ndarray:
    """A boolean pyarrow array as numpy, null as False."""
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


def count_true(mask: pa.Array) -> int:
    """How many entries of a boolean pyarrow array are true (null as False)."""
    return int(bool_mask(mask).sum())


def stamp_seconds(values: pa.Array) -> np.ndarray:
    """Unix seconds (UTC) from RFC 3339 strings or epoch numbers; NaN where absent."""
    n = len(values)
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
        return _epoch(np.asarray(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False),
                                 dtype=float))
    values = pc.cast(values, pa.large_string())
    m = pc.extract_regex(values, r"^\s*(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<H>\d\d):"
                                 r"(?P<M>\d\d):(?P<S>\d\d)(?:[.,](?P<f>\d{1,9}))?\s*"
                                 r"(?:Z|(?P<sign>[+-])(?P<oh>\d\d):?(?P<om>\d\d))?\s*$")

    def num(name: str) -> np.ndarray:
        text = pc.if_else(pc.equal(pc.fill_null(pc.struct_field(m, name), ""), ""), "0",
                          pc.fill_null(pc.struct_field(m, name), "0"))
        return np.asarray(pc.cast(text, pa.int64()).to_numpy(zero_copy_only=False), dtype=float)

    ok = bool_mask(m.is_valid())
    out = np.full(n, np.nan)
    if ok.any():
        y, mo, d = num("y"), num("mo"), num("d")
        good = ok & (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= 31)
        months = ((np.where(good, y, 1970) - 1970) * 12 + np.where(good, mo, 1) - 1)
        days = (months.astype(np.int64).astype("datetime64[M]").astype("datetime64[D]")
                + (np.where(good, d, 1).astype(np.int64) - 1)).astype(np.int64)
        frac_text = pc.utf8_rpad(pc.fill_null(pc.struct_field(m, "f"), ""), 9, "0")
        frac = np.asarray(pc.cast(frac_text, pa.int64()).to_numpy(zero_copy_only=False)) / 1e9
        sign = np.where(bool_mask(pc.equal(pc.struct_field(m, "sign"), "-")), -1.0, 1.0)
        offset = sign * (num("oh") * 3600 + num("om") * 60)
        seconds = days * 86400.0 + num("H") * 3600 + num("M") * 60 + num("S") + frac - offset
        out = np.where(good, seconds, np.nan)
    digits = pc.fill_null(pc.match_substring_regex(values, r"^\d+(\.\d+)?$"), False)
    if count_true(digits):  # epoch numbers written as strings (journald's µs)
        as_num = pc.cast(pc.if_else(digits, values, pa.scalar(None, values.type)), pa.float64())
        epoch = _epoch(np.asarray(as_num.to_numpy(zero_copy_only=False), dtype=float))
        out = np.where(np.isnan(out), epoch, out)
    return out


def _epoch(values: np.ndarray) -> np.ndarray:
    return values * np.where(values > _US_ABOVE, 1e-6, np.where(values > _MS_ABOVE, 1e-3, 1.0))
