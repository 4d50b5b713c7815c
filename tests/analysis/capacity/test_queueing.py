"""Queueing formulas against hand-worked numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pdprobe.analysis.capacity.queueing import (
    WaitEstimate,
    allen_cunneen,
    erlang_c,
    kingman_factor,
    kingman_wait_s,
    md1_ttft_s,
    min_servers,
)


def test_kingman_factor_reference_points() -> None:
    # aiconfigurator's autoscale_ttft_correction: rho 0.9, Poisson arrivals, fixed service
    assert kingman_factor(0.9, 1.0, 0.0) == pytest.approx(5.5)
    # router splitting over ~5 workers: ca2 ~ 0.18 gives the 1.8x TTFT filter
    assert kingman_factor(0.9, 0.18, 0.0) == pytest.approx(1.81)
    assert kingman_factor(0.0, 1.0, 1.0) == 1.0
    assert kingman_factor(1.0, 1.0, 0.0) == math.inf


def test_md1_matches_distserve_formula_by_hand() -> None:
    # D = 0.5 s, R = 1 req/s: 0.5 + 1 * 0.25 / (2 * 0.5) = 0.75 s
    assert md1_ttft_s(0.5, 1.0) == pytest.approx(0.75)
    # D = 0.2 s, R = 4 req/s (rho 0.8): 0.2 + 4 * 0.04 / 0.4 = 0.6 s
    assert md1_ttft_s(0.2, 4.0) == pytest.approx(0.6)
    assert md1_ttft_s(0.5, 2.0) == math.inf


def test_md1_is_kingman_with_poisson_arrivals_and_fixed_service() -> None:
    d, r = 0.3, 2.5
    assert md1_ttft_s(d, r) == pytest.approx(d + kingman_wait_s(d, r * d, 1.0, 0.0))
    assert md1_ttft_s(d, r) == pytest.approx(d * kingman_factor(r * d, 1.0, 0.0))


def test_erlang_c_by_hand() -> None:
    # two servers, offered load 1 (rho 0.5): C = (1/2 * 2) / (1 + 1 + 1) = 1/3
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    # one server: the probability of waiting is rho
    assert erlang_c(1, 0.7) == pytest.approx(0.7)
    assert erlang_c(3, 3.5) == 1.0  # unstable


def test_allen_cunneen_reduces_to_mm1_and_kingman() -> None:
    lam, s = 2.0, 0.4  # rho 0.8
    est = allen_cunneen(1, lam, s, 1.0, 1.0)
    assert est.mean_wait_s == pytest.approx(0.8 / (1 / 0.4 - 2.0))  # M/M/1: rho / (mu - lam)
    est2 = allen_cunneen(1, lam, s, 2.0, 0.5)
    assert est2.mean_wait_s == pytest.approx(kingman_wait_s(s, 0.8, 2.0, 0.5))


def test_allen_cunneen_mm2_by_hand() -> None:
    # M/M/2 with lam 1, mu 1: C = 1/3, Wq = C / (c mu - lam) = 1/3
    est = allen_cunneen(2, 1.0, 1.0, 1.0, 1.0)
    assert est.p_wait == pytest.approx(1 / 3)
    assert est.mean_wait_s == pytest.approx(1 / 3)
    assert est.utilization == pytest.approx(0.5)


def test_wait_quantile_and_tail() -> None:
    est = WaitEstimate(1, 0.5, 0.5, 0.5, 1.0)  # half wait, those wait Exp(mean 1 s)
    assert est.quantile_s(0.9) == pytest.approx(math.log(5.0))
    assert est.quantile_s(0.4) == 0.0  # 60 % never wait
    probs = est.exceed_probability(np.array([-1.0, 0.0, math.log(5.0)]))
    assert probs == pytest.approx([1.0, 0.5, 0.1])


def test_min_servers_finds_smallest_pool() -> None:
    lam, s = 10.0, 0.5  # offered load 5
    found = min_servers(lam, s, 1.0, 1.0, lambda e: e.mean_wait_s <= 0.05)
    assert found is not None
    assert found.mean_wait_s <= 0.05
    before = allen_cunneen(found.servers - 1, lam, s, 1.0, 1.0)
    assert before.mean_wait_s > 0.05
    assert found.servers > 5


def test_more_load_never_needs_fewer_servers() -> None:
    counts = [min_servers(lam, 0.2, 2.0, 0.5, lambda e: e.quantile_s(0.9) <= 0.3).servers
              for lam in np.linspace(0.5, 60, 40)]
    assert counts == sorted(counts)
    assert counts[-1] > counts[0]
