"""Tests for pdprobe/analysis/capacity/wait_tail.py: the wait tail and the TTFT search's
bracketed share."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pdprobe.analysis.capacity.pool import PoolWaits
from pdprobe.analysis.capacity.wait_tail import ShareAbove, exceed_probability


def test_within_a_bracket_with_a_vanishing_tail_warns_nothing() -> None:
    """A window whose wait tail is subnormal (a pool with almost no queueing) overflows the
    decay's exponent before the cap: no RuntimeWarning, and the same share as the sum over
    every request (its waits past the bracket's start are nil). A request due exactly at the
    bracket's start keeps that window's decayed sum."""
    waits = PoolWaits(servers=1, utilization=np.array([0.5, 0.5]),
                      p_wait=np.array([0.4, 0.3]), tail_s=np.array([0.2, 1e-310]),
                      fluid_window_s=np.zeros(2), window=np.array([0, 1, 0, 1, 1, 0]))
    due = np.array([0.1, 0.15, 0.5, 0.55, 0.9, 1.2])
    share = ShareAbove(due, waits)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        within = share.within(0.15, 1.0)
        for t in (0.15, 0.45, 0.7, 1.0):
            expected = float(np.mean(exceed_probability(t - due, waits.p_wait[waits.window],
                                                        waits.tail_s[waits.window])))
            assert within(t) == pytest.approx(expected, rel=1e-12, abs=1e-15)
