"""SLO-aware counts, the band, and the monotonicity properties (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdprobe.analysis.capacity.alternatives import band
from pdprobe.analysis.capacity.estimate import build_model
from pdprobe.analysis.capacity.mix import WorkloadMix
from pdprobe.analysis.capacity.queueing import allen_cunneen
from pdprobe.analysis.capacity.recommend import (
    DEFAULT_SLO_TPOT_S,
    DEFAULT_SLO_TTFT_S,
    LengthWork,
    Slo,
    recommend,
    size,
)
from pdprobe.profiles import BUILTIN_PROFILES, load_profile

from ._data import mix, simple_model

PROFILES = sorted(BUILTIN_PROFILES)


def _inputs(name: str = "llama3-70b-h100-tp4"):  # type: ignore[no-untyped-def]
    return build_model(None, mix([1000], [100]), load_profile(name)).inputs


def test_slo_defaults_are_flagged() -> None:
    slo = Slo.of(None, 0.05)
    assert slo.ttft_s == DEFAULT_SLO_TTFT_S and slo.ttft_default
    assert slo.tpot_s == 0.05 and not slo.tpot_default
    assert Slo.of(None, None).tpot_s == DEFAULT_SLO_TPOT_S


def test_prefill_count_is_smallest_meeting_ttft() -> None:
    model = simple_model(pa=0.0, pb=1e-4, pc=0.0, da=0.01)
    m = mix([2000] * 50, [100] * 50, rate=20.0, ca2=1.0)  # 0.2 s each, offered load 4
    slo = Slo.of(0.5, 0.1)
    rec = recommend(m, model, slo)
    assert rec.prefill_limit == "ttft-slo"
    assert rec.prefill > 4
    # one fewer instance would miss: P(W > 0.3 s) above 10 %
    fewer = allen_cunneen(rec.prefill - 1, 20.0, 0.2, 1.0, 0.0)
    assert fewer.exceed_probability(np.array([0.3]))[0] > 0.1
    assert rec.ttft_attainment >= 0.9
    assert rec.infeasible_ttft_fraction == 0.0
    assert rec.md1_ttft_s == pytest.approx(0.2 + (20 / rec.prefill) * 0.04
                                           / (2 * (1 - 20 / rec.prefill * 0.2)))


def test_unreachable_ttft_is_said_and_sized_anyway() -> None:
    model = simple_model(pb=1e-3)  # 10 s for a 10k prompt
    m = mix([10_000] * 20 + [100] * 80, [50] * 100, rate=0.5)
    rec = recommend(m, model, Slo.of(2.0, 0.1))
    assert rec.infeasible_ttft_fraction == pytest.approx(0.2)
    assert rec.ttft_target_s == pytest.approx(10.0, rel=0.01)
    assert any("no prefill count fixes that" in n for n in rec.notes)
    assert rec.prefill >= 1


def test_unreachable_tpot_is_said() -> None:
    rec = recommend(mix([100], [10], rate=1.0), simple_model(da=0.2), Slo.of(2.0, 0.1))
    assert any("TPOT objective" in n for n in rec.notes)


def test_transfer_bound_cluster() -> None:
    model = simple_model(pb=1e-6, bpt=1e6, link=1e9, da=0.001)  # 1 MB/token over 1 GB/s
    rec = recommend(mix([1000] * 10, [10] * 10, rate=4.0), model, Slo.of(10.0, 0.1))
    # 1 GB per request at 0.8 GB/s usable: 0.8 req/s per instance -> 5 each side
    assert rec.prefill_limit == "transfer"
    assert rec.decode_limit == "transfer"
    assert (rec.prefill, rec.decode) == (5, 5)
    assert rec.binding == "transfer"
    assert rec.transfer_required_bytes_per_s == pytest.approx(4e9 / 5)


def test_band_entries() -> None:
    m = mix(np.linspace(500, 8000, 200), np.linspace(50, 400, 200), rate=8.0,
            cached=np.linspace(0, 2000, 200))
    entries = band(m, _inputs(), Slo.of(2.0, 0.1))
    labels = [e.label for e in entries]
    assert labels[0].startswith("load -20%") and labels[1].startswith("load +20%")
    assert labels[2].startswith("p90 lengths")
    assert any(lbl.startswith("hit rate") and "+10 pts" in lbl for lbl in labels)
    assert any(lbl.startswith("hit rate") and "-10 pts" in lbl for lbl in labels)
    base = recommend(m, _inputs(), Slo.of(2.0, 0.1))
    assert entries[1].prefill >= base.prefill >= entries[0].prefill
    assert entries[2].prefill >= base.prefill  # p90 lengths need more prefill


lengths = st.lists(st.tuples(st.integers(1, 40_000), st.integers(1, 2000)), min_size=1,
                   max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=lengths, rate=st.floats(0.05, 80.0), factor=st.floats(1.0, 3.0),
       ca2=st.floats(0.0, 6.0), ttft=st.floats(0.3, 10.0), tpot=st.floats(0.02, 0.3),
       profile=st.sampled_from(PROFILES))
def test_more_load_never_recommends_fewer_instances(pairs: list[tuple[int, int]], rate: float,
                                                    factor: float, ca2: float, ttft: float,
                                                    tpot: float, profile: str) -> None:
    p, o = zip(*pairs, strict=True)
    inputs = _inputs(profile)
    slo = Slo.of(ttft, tpot)
    low = recommend(mix(p, o, rate, ca2=ca2), inputs, slo)
    high = recommend(mix(p, o, rate * factor, ca2=ca2), inputs, slo)
    assert high.prefill >= low.prefill
    assert high.decode >= low.decode


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=lengths, rate=st.floats(0.05, 40.0), factor=st.floats(1.0, 3.0),
       ca2=st.floats(0.0, 6.0), ttft=st.floats(0.3, 10.0), tpot=st.floats(0.02, 0.3),
       profile=st.sampled_from(PROFILES))
def test_longer_prompts_never_lower_the_prefill_share(pairs: list[tuple[int, int]],
                                                      rate: float, factor: float, ca2: float,
                                                      ttft: float, tpot: float,
                                                      profile: str) -> None:
    p, o = zip(*pairs, strict=True)
    inputs = _inputs(profile)
    slo = Slo.of(ttft, tpot)
    short = recommend(mix(p, o, rate, ca2=ca2), inputs, slo)
    long = recommend(mix(np.asarray(p) * factor, o, rate, ca2=ca2), inputs, slo)
    share = short.theoretical_ratio / (1 + short.theoretical_ratio)
    share_long = long.theoretical_ratio / (1 + long.theoretical_ratio)
    assert share_long >= share * (1 - 1e-9)
    assert long.prefill >= short.prefill


timed = st.lists(st.tuples(st.floats(0.0, 600.0), st.integers(1, 30_000), st.integers(1, 1500)),
                 min_size=60, max_size=200)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=timed, factor=st.floats(1.0, 3.0), ttft=st.floats(0.5, 10.0),
       profile=st.sampled_from(PROFILES))
def test_properties_hold_with_arrival_times(rows: list[tuple[float, int, int]], factor: float,
                                            ttft: float, profile: str) -> None:
    """With real arrival times (load windows, fluid backlog) the properties still hold."""
    import pandas as pd

    from pdprobe.analysis.capacity.mix import mix_from_requests

    frame = pd.DataFrame(rows, columns=["arrival_ts", "prompt_tokens", "output_tokens"])
    if frame["arrival_ts"].max() - frame["arrival_ts"].min() < 1.0:
        return  # a sub-second trace means an arbitrary arrival rate
    inputs = _inputs(profile)
    slo = Slo.of(ttft, 0.1)
    base = mix_from_requests(frame, rate_rps=None, timescale_s=ttft, description="t")
    busier = base.with_rate(base.rate_rps * factor)
    longer = mix_from_requests(frame.assign(prompt_tokens=frame["prompt_tokens"] * factor),
                               rate_rps=None, timescale_s=ttft, description="t")
    r0, r_busy, r_long = (recommend(m, inputs, slo) for m in (base, busier, longer))
    assert r_busy.prefill >= r0.prefill and r_busy.decode >= r0.decode
    assert r_long.prefill >= r0.prefill
    assert r_long.theoretical_ratio >= r0.theoretical_ratio * (1 - 1e-9)


def _timed_mix(n: int = 3000, seed: int = 0) -> WorkloadMix:
    import pandas as pd

    from pdprobe.analysis.capacity.mix import mix_from_requests

    rng = np.random.default_rng(seed)
    ts = np.sort(np.concatenate([rng.uniform(0, 900, n - n // 4), rng.uniform(300, 360, n // 4)]))
    prompt = np.clip(rng.lognormal(7.5, 1.0, n), 20, 30_000).round()
    frame = pd.DataFrame({"arrival_ts": ts, "prompt_tokens": prompt,
                          "output_tokens": np.clip(rng.lognormal(5, 0.8, n), 1, 2000).round(),
                          "cached_tokens": (prompt * rng.uniform(0, 0.5, n)).round()})
    return mix_from_requests(frame, rate_rps=None, timescale_s=2.0, description="t")


def test_size_is_the_recommendation_without_estimates() -> None:
    m = _timed_mix()
    slo = Slo.of(1.0, 0.05)
    inputs = _inputs()
    rec = recommend(m, inputs, slo)
    s = size(m, inputs, slo)
    for field in ("prefill", "decode", "theoretical_ratio", "prefill_limit", "decode_limit",
                  "prefill_utilization", "decode_utilization", "transfer_utilization",
                  "binding", "ttft_target_s", "infeasible_ttft_fraction",
                  "transfer_required_bytes_per_s"):
        assert getattr(s, field) == getattr(rec, field), field
    assert set(s.notes) <= set(rec.notes)
    # the TTFT estimates belong to the recommendation only
    assert rec.ttft_attainment >= 0.9 and rec.ttft_p90_s > 0


def test_length_work_is_shared_across_loads() -> None:
    m = _timed_mix(seed=1)
    slo = Slo.of(2.0, 0.1)
    inputs = _inputs()
    work = LengthWork.of(m, inputs, slo)
    assert band(m, inputs, slo, work=work) == band(m, inputs, slo)
    busier = m.with_rate(2 * m.rate_rps)
    assert size(busier, inputs, slo, work) == size(busier, inputs, slo)
    assert recommend(busier, inputs, slo, work) == recommend(busier, inputs, slo)


def test_quantile_sample_is_numpy_quantile_bit_for_bit() -> None:
    from pdprobe.analysis.capacity.recommend import _quantile_sample

    rng = np.random.default_rng(9)
    for values in (rng.gamma(0.5, 2.0, 4000), np.round(rng.gamma(2.0, 1.0, 1501), 1),
                   np.full(2000, 0.3)):
        ref = np.quantile(values, (np.arange(1000) + 0.5) / 1000)
        assert np.array_equal(_quantile_sample(values, 1000), ref)
    small = np.array([3.0, 1.0, 2.0])
    assert _quantile_sample(small, 1000) is small  # no more points than asked: kept as is
