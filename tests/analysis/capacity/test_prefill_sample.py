"""Tests for pdprobe/analysis/capacity/prefill_sample.py: the prefill fit on a bounded sample.

Above ``PREFILL_FIT_MAX_POINTS`` usable observations the prefill fit observes a proportional
stratified sample (prefill instance × uncached-length octave); below it nothing changes. The
sampled fit agrees with the full one within the tolerances docs/model.md states ("Bounded
prefill fit").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity import estimate_capacity, prefill_sample
from pdprobe.analysis.capacity.estimate import CapacityOptions
from pdprobe.analysis.capacity.perf_fit import (
    BUSY_SEGMENTS,
    fit_prefill,
    isolated_rows,
    prefill_observations,
)
from pdprobe.analysis.capacity.prefill_sample import sample_prefill_rows
from pdprobe.analysis.strata import LENGTH_OCTAVES
from pdprobe.dataset import Dataset
from pdprobe.values import Missing
from tests.analysis.capacity._data import dataset
from tests.analysis.capacity.test_estimate import INSTANCES, PROFILE, capture

LONE = "prefill_s of requests alone on their instance"


def _capture(n: int, seed: int = 0, queue: bool = True) -> Dataset:
    """``test_estimate.capture`` on four prefill instances (round robin); with ``queue`` the
    records say when prefill started (most requests then ran alone), else only every
    request's prefill_s is known."""
    frame = capture(n, rate=2.0, seed=seed)
    frame["prefill_instance"] = [f"p{i % 4}" for i in range(n)]
    if queue:
        frame["queue_s"] = 0.0
    return dataset(frame, instances=INSTANCES)


def _messy(n: int, seed: int = 3, instances: int = 5) -> pd.DataFrame:
    """Prefill records with unusable rows (unknown or non-positive times, failed requests), some
    without an instance, lengths over many octaves."""
    rng = np.random.default_rng(seed)
    prompt = np.maximum(np.round(rng.lognormal(7.0, 1.5, n)), 1.0)
    t = 0.02 + 1e-4 * prompt
    t[rng.random(n) < 0.05] = np.nan
    t[rng.random(n) < 0.02] = 0.0
    inst = np.array([f"p{i}" for i in rng.integers(0, instances, n)], dtype=object)
    inst[rng.random(n) < 0.02] = None
    return pd.DataFrame({
        "arrival_ts": 1.7e9 + np.arange(n, dtype=float),
        "prompt_tokens": prompt.astype(np.int64), "output_tokens": np.full(n, 50),
        "cached_tokens": np.where(rng.random(n) < 0.5, np.nan, np.floor(prompt / 3)),
        "prefill_s": t,
        "prefill_instance": inst,
        "status": np.where(rng.random(n) < 0.05, "error", "ok"),
    })


def test_below_the_bound_every_usable_observation_is_read() -> None:
    ds = _capture(3000)
    default = prefill_observations(ds)
    assert not isinstance(default, str) and default[3] == LONE
    usable = len(default[1])
    for bound in (usable, 10**9):
        got = prefill_observations(ds, max_points=bound)
        assert not isinstance(got, str) and got[3] == LONE
        for a, b in zip(got[:3], default[:3], strict=True):
            np.testing.assert_array_equal(a, b)
    assert sample_prefill_rows(ds.requests, None, max_points=len(ds.requests)) is None


@pytest.mark.parametrize(("chunk", "instances"), [(7, 5), (1 << 16, 5), (1 << 16, 600)])
@pytest.mark.parametrize("given_rows", [False, True])
def test_the_sample_is_usable_rows_in_proportion_to_instance_and_length(
        monkeypatch: pytest.MonkeyPatch, chunk: int, instances: int, given_rows: bool) -> None:
    """(600 instances: more strata than small codes hold, the sort path.)"""
    monkeypatch.setattr(prefill_sample, "PASS_CHUNK", chunk)
    req = dataset(_messy(6000, instances=instances)).requests
    rows = np.flatnonzero(np.arange(len(req)) % 3 != 1) if given_rows else None
    cand = np.arange(len(req)) if rows is None else rows
    t = req["prefill_s"].to_numpy(dtype=float)
    prompt = req["prompt_tokens"].to_numpy(dtype=float)
    ok = np.isfinite(t) & (t > 0) & np.isfinite(prompt) & (req["status"] == "ok").to_numpy()
    usable = cand[ok[cand]]
    taken = sample_prefill_rows(req, rows, max_points=900)
    assert taken is not None and len(taken.rows) == 900 and taken.total == len(usable)
    assert np.all(np.diff(taken.rows) > 0) and np.all(np.isin(taken.rows, usable))
    assert taken.describe().startswith(f"a sample of 900 of {len(usable):,} requests, stratified")
    # strata as the fit sees them: instance (missing is one of its own) × octave of uncached
    uncached = np.maximum(prompt - np.nan_to_num(req["cached_tokens"].to_numpy(dtype=float)), 1.0)
    inst = req["prefill_instance"].astype("string").fillna("-").to_numpy(dtype=str)
    octave = np.clip(np.frexp(uncached)[1], 0, LENGTH_OCTAVES - 1)
    stratum = np.char.add(inst, octave.astype(str))
    names, counts = np.unique(stratum[usable], return_counts=True)
    picked = dict(zip(*np.unique(stratum[taken.rows], return_counts=True), strict=True))
    share = counts * 900 / len(usable)
    assert len(names) > 20  # many strata, each within one request of its proportional share
    for name, expect in zip(names, share, strict=True):
        assert abs(picked.get(name, 0) - expect) <= 1.0 + 1e-9, name
    # the same sample whatever the chunk size
    monkeypatch.setattr(prefill_sample, "PASS_CHUNK", 1 << 16)
    again = sample_prefill_rows(req, rows, max_points=900)
    assert again is not None
    np.testing.assert_array_equal(again.rows, taken.rows)


def test_sampled_observations_are_the_full_ones_at_the_sampled_rows() -> None:
    ds = _capture(3000)
    full = prefill_observations(ds, max_points=10**9)
    part = prefill_observations(ds, max_points=500)
    assert not isinstance(full, str) and not isinstance(part, str)
    assert part[3].startswith(f"{LONE} (a sample of 500 of {len(full[1]):,} requests, stratified")
    alone = isolated_rows(ds.requests)
    taken = sample_prefill_rows(ds.requests, alone, max_points=500)
    assert taken is not None
    at = np.searchsorted(alone, taken.rows)  # every lone request is usable here
    for a, b in zip(part[:3], full[:3], strict=True):
        np.testing.assert_array_equal(a, b[at])


def test_without_start_times_every_request_is_sampled_and_said() -> None:
    ds = _capture(3000, queue=False)
    obs = prefill_observations(ds, max_points=500)
    assert not isinstance(obs, str) and len(obs[1]) == 500
    assert obs[3].startswith("per-request prefill_s (a sample of 500 of 3,000 requests, stratified")
    queued = _capture(3000)
    arrival = queued.requests["arrival_ts"]
    queued.requests["queue_s"] = arrival.iloc[0] - arrival  # all start at once: none alone
    fallback = prefill_observations(queued, max_points=500)
    assert not isinstance(fallback, str)
    assert fallback[3].startswith(f"{BUSY_SEGMENTS} (a sample of 500 of 3,000 requests, stratified")


# --- agreement with the full-data fit ---------------------------------------------------------
# A sample of 2,000 of ~19,000 lone requests (3 % noise), three captures: coefficients within
# COEF_REL (measured: at most 1.6 %, on the quadratic term), the predicted alone time at 500,
# 2,000 and 8,000 tokens and the scale against the profile within PRED_REL (measured 0.2 %),
# the same recommended counts and prefill capacity within PRED_REL (measured 0.18 %).
COEF_REL = 0.03
PRED_REL = 0.005


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_fit_and_recommendation_agree_with_the_full_ones(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    ds = _capture(20_000, seed=seed)
    full = prefill_observations(ds, max_points=10**9)
    part = prefill_observations(ds, max_points=2000)
    assert not isinstance(full, str) and not isinstance(part, str) and len(part[1]) == 2000
    mf, ff = fit_prefill(full[0], full[1], PROFILE, cached=full[2], what=full[3])
    ms, fs = fit_prefill(part[0], part[1], PROFILE, cached=part[2], what=part[3])
    assert (ff.method, fs.method) == ("fit", "fit")
    assert fs.notes[0].startswith("prefill: the fit observes a sample of 2,000 of")
    for name in ("a_s", "b_s_per_token", "c_s_per_token2"):
        assert getattr(ms, name) == pytest.approx(getattr(mf, name), rel=COEF_REL), name
    u = np.array([500.0, 2000.0, 8000.0])
    np.testing.assert_allclose(ms.alone_s(u), mf.alone_s(u), rtol=PRED_REL)
    assert fs.scale_vs_profile == pytest.approx(ff.scale_vs_profile, rel=PRED_REL)

    a = estimate_capacity(ds, Missing("x"), CapacityOptions())
    monkeypatch.setattr(prefill_sample, "PREFILL_FIT_MAX_POINTS", 2000)
    b = estimate_capacity(ds, Missing("x"), CapacityOptions())
    assert not isinstance(a, Missing) and not isinstance(b, Missing)
    assert "a sample of" not in a.model_source and "(a sample of 2,000 of" in b.model_source
    assert b.fit_quality["prefill_n"] == 2000
    assert (b.recommended_prefill, b.recommended_decode) == (
        a.recommended_prefill, a.recommended_decode)
    assert b.prefill_capacity_rps == pytest.approx(a.prefill_capacity_rps, rel=PRED_REL)


@pytest.mark.slow
@pytest.mark.parametrize("cause", ["routing-skew", "decode-bound"])
def test_sampled_prefill_fit_agrees_on_simulated_scenarios(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cause: str) -> None:
    """The simulator's requests (2,187 and 1,439 alone), the bound forced to a quarter of
    them: the same counts, figures within 2 % (measured: equal to 1e-4, the simulator's
    prefill times follow the model exactly)."""
    from pdprobe.analysis.workload import summarize_workload
    from pdprobe.services.diagnose import DiagnoseRequest, load_dataset
    from pdprobe.services.verify import capacity_options
    from pdprobe.sim.scenarios import run_scenario

    run_scenario(cause, tmp_path / cause)
    request = DiagnoseRequest(paths=(tmp_path / cause / "requests.jsonl",))
    ds, _ = load_dataset(request)
    workload = summarize_workload(ds)
    full = estimate_capacity(ds, workload, capacity_options(request))
    obs = prefill_observations(ds)
    assert not isinstance(obs, str) and not isinstance(full, Missing)
    bound = len(obs[1]) // 4
    monkeypatch.setattr(prefill_sample, "PREFILL_FIT_MAX_POINTS", bound)
    sampled = estimate_capacity(ds, workload, capacity_options(request))
    assert not isinstance(sampled, Missing)
    assert f"a sample of {bound:,} of" in sampled.model_source
    assert (sampled.recommended_prefill, sampled.recommended_decode) == (
        full.recommended_prefill, full.recommended_decode)
    for name in ("prefill_capacity_rps", "prefill_service_s", "theoretical_ratio"):
        assert getattr(sampled, name) == pytest.approx(getattr(full, name), rel=0.02), name
    assert sampled.fit_quality["prefill_scale_vs_profile"] == pytest.approx(
        full.fit_quality["prefill_scale_vs_profile"], rel=0.02)
