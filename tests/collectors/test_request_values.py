"""Tests for pdprobe/collectors/request_values.py: arrival units scaled without a second copy."""

from __future__ import annotations

import numpy as np

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
