"""Robust statistics behind the rules: outliers, trends, onsets and change points."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.evidence.stats import (
    OUTLIER_Z,
    change_point,
    hinge,
    leave_one_out_z,
    peer_median,
    robust_z,
    significant_figures,
    spearman,
    trend,
)


def test_robust_z_flags_one_outlier_and_ignores_identical_peers() -> None:
    z = robust_z(np.array([30.0, 31.0, 29.0, 30.0, 66.0]))
    assert z[-1] > OUTLIER_Z
    assert np.all(np.abs(z[:-1]) < 1.0)
    # Identical peers: MAD 0 is floored at 5 % of the median, so 2 % off is not an outlier.
    z = robust_z(np.array([1.0, 1.0, 1.0, 1.02]))
    assert abs(z[-1]) < 1.0


def test_leave_one_out_compares_each_with_its_peers_only() -> None:
    values = np.array([0.030, 0.031, 0.029, 0.066])
    z = leave_one_out_z(values)
    assert z[3] > 10  # peers 0.029..0.031: MAD floored at 5 % of 0.030
    assert np.all(np.abs(z[:3]) < 2)
    assert peer_median(values)[3] == pytest.approx(0.030)
    assert np.isnan(leave_one_out_z(np.array([1.0, 2.0]))).all()  # two values: no spread


def test_trend_detects_a_ramp_after_an_onset() -> None:
    t = np.arange(60) * 15.0
    v = np.where(t < 300, 0.3, 0.3 + (t - 300) / 15 * 0.7)
    tr = trend(t, v + np.random.default_rng(1).normal(0, 0.3, t.size))
    assert tr is not None
    assert tr.p_value < 1e-6 and tr.tau > 0.5
    assert tr.onset_ts == pytest.approx(300, abs=45)
    assert tr.growth == pytest.approx(0.7 * (885 - 300) / 15, rel=0.1)
    assert tr.rising(0.01, 0.3, 3.0)


def test_trend_ignores_noise_and_a_single_bad_scrape() -> None:
    rng = np.random.default_rng(2)
    t = np.arange(60) * 15.0
    flat = 2.0 + rng.normal(0, 0.5, t.size)
    spiked = flat.copy()
    spiked[-1] = 80.0  # one bad scrape at the very end
    for v in (flat, spiked):
        tr = trend(t, v)
        assert tr is not None
        assert not tr.rising(0.01, 0.3, 3.0)
    assert trend(t[:5], flat[:5]) is None  # too few points to test


def test_hinge_finds_the_onset_of_a_rise() -> None:
    t = np.arange(40, dtype=float)
    v = np.where(t < 25, 1.0, 1.0 + 2.0 * (t - 25))
    onset, level, end = hinge(t, v)
    assert onset == 25
    assert level == pytest.approx(1.0, abs=1e-6)
    assert end == pytest.approx(1.0 + 2.0 * 14, abs=1e-6)


def test_change_point_finds_a_level_shift_not_an_outlier() -> None:
    rng = np.random.default_rng(3)
    t = np.arange(40) * 30.0
    v = np.where(t < 600, 1000.0, 3000.0) * rng.uniform(0.9, 1.1, t.size)
    cp = change_point(t, v)
    assert cp is not None
    assert cp.ts == 600.0
    assert cp.relative_change == pytest.approx(2.0, rel=0.1)
    assert cp.p_value < 1e-6
    # One outlying bin in a flat series is not a significant shift.
    flat = 1000.0 * rng.uniform(0.9, 1.1, t.size)
    flat[20] = 5000.0
    cp = change_point(t, flat)
    assert cp is not None and cp.p_value > 0.01
    assert change_point(t[:5], flat[:5]) is None


def test_spearman_and_rounding() -> None:
    x = np.arange(20.0)
    rho, p, n = spearman(x, x ** 2)
    assert rho == pytest.approx(1.0) and p < 1e-6 and n == 20
    rho, p, n = spearman(x[:3], x[:3])
    assert np.isnan(rho) and p == 1.0
    assert significant_figures(0.123456789) == 0.1235
    assert significant_figures(123456.0) == 123500.0
