"""The model at the deployed count against the window, and the plan re-sized with the
recalibrated waits: every figure of it describes the one model its count comes from."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.base import CapacityResult
from pdprobe.analysis.capacity import alternatives
from pdprobe.analysis.capacity.alternatives import band
from pdprobe.analysis.capacity.estimate import CapacityPlan, capacity_plan
from pdprobe.analysis.capacity.mix import mix_from_requests
from pdprobe.analysis.capacity.model_build import BuiltModel
from pdprobe.analysis.capacity.recalibrate import check_model
from pdprobe.analysis.capacity.recommend import LengthWork, Slo, prefill_pool, recommend, size
from pdprobe.analysis.capacity.sizings import Sizings
from pdprobe.analysis.capacity.windows import ratio_windows
from pdprobe.profiles import load_profile

from ._data import busy_prompts_requests, dataset, round_robin_waits, simple_model

MODEL = simple_model(pb=8e-5)
SLO = Slo(2.0, 0.1)
DEPLOYED = 16  # ~75 % busy: round-robin queues wait far longer than one pooled queue
WINDOW_S = 10.0  # seven windows of ~600 requests over the 67 s of arrivals


def test_check_model_recalibrates_only_beyond_the_tolerance_and_sizes_with_the_waits() -> None:
    """Poisson arrivals at the model's own count: when the window's waits are far longer than
    the model's and its attainment far below the prediction, the calibrated prediction stands
    and the waits become a sizing input that needs more prefill; waits as the model says
    change nothing."""
    rng = np.random.default_rng(3)
    n = 3000
    ts = np.sort(rng.uniform(0, 600, n))
    req = pd.DataFrame({"arrival_ts": ts, "prompt_tokens": rng.integers(500, 3000, n),
                        "output_tokens": 100})
    m = mix_from_requests(req, rate_rps=None, timescale_s=2.0, description="t", rescale=False)
    model = simple_model(pb=6e-5)
    work = LengthWork.of(m, model, SLO)
    dep = recommend(m, model, SLO, work).prefill
    pool, _ = prefill_pool(m, work)
    pool_p90 = pool.ttft_quantile(dep, np.zeros(n), 0.9)
    rest = work.bare
    same = (np.full(n, pool_p90), rest)  # p90 of a constant: the model's own level
    checked = check_model(m, model, SLO, work, dep, same)
    assert checked.calibration is not None and not checked.recalibrated
    assert checked.waits is None and checked.calibrated_prefill is None
    waits = rng.exponential(1.0, n)
    waits *= 2.5 / np.quantile(waits, 0.9)  # a tenth of the requests wait over 2.5 s
    checked = check_model(m, model, SLO, work, dep, (waits, rest))
    assert checked.recalibrated and checked.calibration is not None
    assert checked.calibration.wait_scale > 1
    # the count with the window's waits; applied by the check only when nothing vetoes it
    assert checked.waits is not None and checked.calibrated_prefill is not None
    assert checked.calibrated_prefill > dep
    assert size(m, model, SLO, work, checked.waits).prefill == checked.calibrated_prefill


def _round_robin() -> tuple[CapacityPlan, pd.DataFrame]:
    """The busy-prompts window on ``DEPLOYED`` instances routed round-robin (each its own
    FIFO queue), its records carrying the measured waits, planned as a diagnosis plans it."""
    req = busy_prompts_requests()
    m = mix_from_requests(req, rate_rps=None, timescale_s=2.0, description="t", rescale=False)
    service = LengthWork.of(m, MODEL, SLO).bare  # arrival order: the requests' own prefills
    queue = round_robin_waits(req["arrival_ts"].to_numpy(), service, DEPLOYED)
    req = req.assign(queue_s=queue, ttft_s=queue + service, status="ok")
    built = BuiltModel(MODEL, load_profile("llama3-70b-h100-tp4"), "test", {}, ())
    plan = capacity_plan(m, built, SLO, deployed_prefill=DEPLOYED, deployed_decode=3,
                         dataset=dataset(req), window_s=WINDOW_S)
    return plan, req


def _checked_round_robin() -> tuple[pd.DataFrame, Any, LengthWork, Any]:
    """The busy prompts on per-instance queues, their mix and work, and the model checked
    against their measured waits (recalibrated: ``waits`` set)."""
    req = busy_prompts_requests()
    m = mix_from_requests(req, rate_rps=None, timescale_s=2.0, description="t", rescale=False)
    work = LengthWork.of(m, MODEL, SLO)
    queue = round_robin_waits(req["arrival_ts"].to_numpy(), work.bare, DEPLOYED)
    checked = check_model(m, MODEL, SLO, work, DEPLOYED, (queue, work.bare))
    assert checked.waits is not None
    return req, m, work, checked


def _sized_range(windows: tuple[object, ...], pool: str) -> tuple[int, int]:
    counts = [int(getattr(w, f"recommended_{pool}")) for w in windows
              if isinstance(getattr(w, f"recommended_{pool}"), int)]
    assert len(counts) >= 5
    return min(counts), max(counts)


def _load_rows(cap: CapacityResult, pool: str) -> tuple[int, int]:
    low = next(getattr(b, pool) for b in cap.band if b.label.startswith("load -"))
    high = next(getattr(b, pool) for b in cap.band if b.label.startswith("load +"))
    return low, high


def test_the_recalibrated_plan_sizes_windows_band_and_estimates_with_the_same_waits() -> None:
    """Round-robin queues: the model's pooled waits are too short, the recalibrated ones
    (a queue per instance) need more prefill. The plan re-sized with them says so in every
    figure: the whole window's count lies within its windows' counts (a window at higher load
    needs at least as many, one at lower load as few), the band's load rows bracket it, and
    the TTFT estimates at the count meet the objective by the calibrated model, as a replay of
    the same arrivals on that count does."""
    plan, req = _round_robin()
    model_plan = plan.result
    assert model_plan.recalibrated and plan.recalibrated is not None
    cal_p = model_plan.calibrated_prefill
    assert isinstance(cal_p, int) and cal_p > int(model_plan.recommended_prefill)  # type: ignore[arg-type]
    planned = plan.recalibrated(0)
    assert planned is not None
    rec = int(planned.recommended_prefill)  # type: ignore[arg-type]
    assert rec >= cal_p
    # the whole window is a mixture of its windows: its count lies within theirs
    lo, hi = _sized_range(planned.windows, "prefill")
    assert lo <= cal_p <= hi and rec <= hi
    low, high = _load_rows(planned, "prefill")
    assert low <= cal_p <= high and low < high
    # the same holds for the model as built, whose figures are untouched by the other plan
    lo, hi = _sized_range(model_plan.windows, "prefill")
    assert lo <= int(model_plan.recommended_prefill) <= hi  # type: ignore[arg-type]
    assert hi < _sized_range(planned.windows, "prefill")[1]
    # estimates at the recommended count, by the calibrated model: within the objective
    assert planned.ttft_attainment_estimate >= SLO.attainment
    assert planned.ttft_estimate_p90_s <= SLO.ttft_s
    assert planned.prefill_utilization == pytest.approx(
        model_plan.prefill_utilization * int(model_plan.recommended_prefill) / rec)  # type: ignore[arg-type,operator]
    # ... and in a replay of the same arrivals on the recommended count
    ts, service = req["arrival_ts"].to_numpy(), (req["ttft_s"] - req["queue_s"]).to_numpy()
    assert float(np.mean(round_robin_waits(ts, service, rec) + service <= SLO.ttft_s)) >= 0.9
    # the report says which model the figures are
    said = "the band and the windows are sized with the recalibrated waits (a queue per"
    assert any(said in n for n in planned.notes)
    assert not any("sized with the recalibrated waits" in n for n in model_plan.notes)
    # what does not depend on the waits is the same in both plans
    for name in ("theoretical_ratio", "recommended_decode", "deployed_ttft_attainment_estimate",
                 "deployed_ttft_p90_estimate_s", "calibrated_ttft_attainment_estimate",
                 "calibrated_prefill", "wait_scale", "deployed_prefill_utilization"):
        assert getattr(planned, name) == getattr(model_plan, name), name
    assert [w.recommended_decode for w in planned.windows] == \
        [w.recommended_decode for w in model_plan.windows]


def test_the_band_at_the_observed_load_is_the_recommendation_by_either_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A load factor of 1 is the recommendation's own sizing, with the model's waits and
    with the recalibrated ones alike."""
    _, m, work, checked = _checked_round_robin()
    monkeypatch.setattr(alternatives, "BAND_LOAD_FACTORS", (1.0,))
    for waits, count in ((None, recommend(m, MODEL, SLO, work).prefill),
                         (checked.waits, checked.calibrated_prefill)):
        row = band(m, MODEL, SLO, work=work, waits=waits)[0]
        assert row.label.startswith("load +0%") and row.prefill == count
        assert row.prefill == recommend(m, MODEL, SLO, work, waits).prefill


def test_a_floor_sizes_nothing_and_estimates_at_the_count_kept() -> None:
    """The deployed count kept (a policy floor): the windows and band are the calibrated
    model's as without it, the estimates those at the count kept (more instances, fewer
    misses)."""
    plan, _ = _round_robin()
    assert plan.recalibrated is not None
    own, kept = plan.recalibrated(0), plan.recalibrated(DEPLOYED + 4)
    assert own is not None and kept is not None
    assert kept.recommended_prefill == DEPLOYED + 4
    assert kept.windows == own.windows and kept.band == own.band
    assert kept.ttft_attainment_estimate >= own.ttft_attainment_estimate  # type: ignore[operator]
    assert kept.ttft_estimate_p90_s <= own.ttft_estimate_p90_s  # type: ignore[operator]


def test_the_windows_take_their_own_run_of_the_calibrated_waits() -> None:
    """Each window is sized with its own requests' measured rests: shuffling the measured
    rests between windows changes the windows' counts, not the whole window's parts."""
    req, m, _, checked = _checked_round_robin()
    windows = ratio_windows(dataset(req), m, MODEL, SLO, WINDOW_S, checked.waits)
    plain = ratio_windows(dataset(req), m, MODEL, SLO, WINDOW_S)
    for w, p in zip(windows, plain, strict=True):  # never below the model's own count
        assert int(w.recommended_prefill) >= int(p.recommended_prefill)  # type: ignore[arg-type]
    # every rest measured 0.5 s longer than the model's bare TTFT: more instances needed
    from dataclasses import replace

    later = replace(checked.waits, rest_s=checked.waits.rest_s + 0.5)
    longer = ratio_windows(dataset(req), m, MODEL, SLO, WINDOW_S, later)
    assert all(int(a.recommended_prefill) >= int(b.recommended_prefill)  # type: ignore[arg-type]
               for a, b in zip(longer, windows, strict=True))
    assert any(int(a.recommended_prefill) > int(b.recommended_prefill)  # type: ignore[arg-type]
               for a, b in zip(longer, windows, strict=True))


@pytest.mark.parametrize("sample", [None, 1500])
def test_each_window_mix_is_its_run_of_the_plans_mix(sample: int | None) -> None:
    """The calibrated waits are per request of the plan's mix; a window takes rows lo..hi of
    them, which must be that window's own requests: of the whole mix, or of its sample when
    the plan sizes on one (``Population``)."""
    from pdprobe.analysis.capacity.windows import window_frames

    req = busy_prompts_requests()
    m = mix_from_requests(req, rate_rps=None, timescale_s=2.0, description="t", rescale=False,
                          max_requests=sample)
    assert (m.population is not None) == (sample is not None)
    frames = window_frames(dataset(req), m, MODEL, SLO, WINDOW_S)
    runs = [w for w in frames.mixes if w is not None]
    assert len(runs) >= 5
    assert runs[0].lo == 0 and runs[-1].hi == m.size
    for w, nxt in itertools.pairwise(runs):
        assert w.hi == nxt.lo
    for w in runs:
        assert w.hi - w.lo == w.mix.size
        assert np.array_equal(w.mix.prompt_tokens, m.prompt_tokens[w.lo:w.hi])


def test_a_what_if_no_calibrated_count_meets_leaves_its_row_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A band row that no count can size with the calibrated waits is left out, the other
    rows kept (the re-plan stands, as windows that cannot be sized do); with the model's own
    waits the failure is raised as before."""
    _, m, work, checked = _checked_round_robin()
    whole = band(m, MODEL, SLO, work=work, waits=checked.waits)
    calls = itertools.count()
    sized = Sizings.sized

    def second_fails(self: Sizings, *args: Any, **kwargs: Any) -> Any:
        if next(calls) == 1:
            raise ValueError("no count meets the objective")
        return sized(self, *args, **kwargs)

    monkeypatch.setattr(Sizings, "sized", second_fails)
    kept = band(m, MODEL, SLO, work=work, waits=checked.waits)
    assert [r.label for r in kept] == [r.label for i, r in enumerate(whole) if i != 1]
    calls = itertools.count()
    with pytest.raises(ValueError, match="no count"):
        band(m, MODEL, SLO, work=work, waits=None)


def test_the_recalibrated_plan_is_the_same_with_its_band_and_windows_made_ahead() -> None:
    """``prepare_recalibrated`` (run by the analysis' pool thread while the rules run) makes
    the band and windows the re-sized plan uses: the plans re-sized after it equal those
    sized without it, figure for figure, at any least count."""
    ahead_plan, _ = _round_robin()
    plain_plan, _ = _round_robin()
    assert ahead_plan.prepare_recalibrated is not None
    assert ahead_plan.recalibrated is not None and plain_plan.recalibrated is not None
    ahead_plan.prepare_recalibrated()
    for at_least in (0, DEPLOYED + 4):
        assert ahead_plan.recalibrated(at_least) == plain_plan.recalibrated(at_least)


def test_a_plan_the_window_does_not_recalibrate_has_nothing_to_prepare() -> None:
    req = busy_prompts_requests()
    m = mix_from_requests(req, rate_rps=None, timescale_s=2.0, description="t", rescale=False)
    built = BuiltModel(MODEL, load_profile("llama3-70b-h100-tp4"), "test", {}, ())
    plan = capacity_plan(m, built, SLO, deployed_prefill=DEPLOYED, deployed_decode=3)
    assert plan.recalibrated is None and plan.prepare_recalibrated is None
