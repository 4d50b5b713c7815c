"""Workload mixes: arrival burstiness, synthetic length distributions, histogram sampling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis.capacity.arrivals import estimate_arrival_cv2
from pdprobe.analysis.capacity.mix import (
    gamma_from_mean_p90,
    mix_from_requests,
    mix_from_summary,
    sample_from_histogram,
)
from pdprobe.errors import UsageError

from ._data import mix


def test_poisson_arrivals_have_ca2_one() -> None:
    ts = np.cumsum(np.random.default_rng(0).exponential(0.1, 20_000))
    cv2, how = estimate_arrival_cv2(ts, 2.0)
    assert cv2 == pytest.approx(1.0, abs=0.1)
    assert "index of dispersion over 2 s bins" in how


def test_regular_arrivals_have_ca2_near_zero() -> None:
    cv2, _ = estimate_arrival_cv2(np.arange(0, 1000, 0.25), 2.0)
    assert cv2 < 0.05


def test_bucketed_timestamps_widen_the_bins() -> None:
    rng = np.random.default_rng(1)
    ts = np.floor(np.cumsum(rng.exponential(0.3, 12_000)) / 3.0) * 3.0  # Mooncake's 3 s buckets
    cv2, how = estimate_arrival_cv2(ts, 2.0)
    assert "bucketed every 3 s" in how
    assert "15 s bins" in how
    assert cv2 == pytest.approx(1.0, abs=0.25)


def test_bursty_arrivals_have_large_ca2() -> None:
    rng = np.random.default_rng(2)
    bursts = np.concatenate([t + rng.uniform(0, 1, 30) for t in np.arange(0, 2000, 20.0)])
    cv2, _ = estimate_arrival_cv2(bursts, 2.0)
    assert cv2 > 10


def test_few_arrivals_assume_poisson() -> None:
    cv2, how = estimate_arrival_cv2(np.arange(10.0), 2.0)
    assert cv2 == 1.0 and "assumed Poisson" in how


def test_gamma_fit_matches_mean_and_p90() -> None:
    from scipy.stats import gamma

    k, scale = gamma_from_mean_p90(2048.0, 5188.0, "prompt")
    assert k * scale == pytest.approx(2048.0)
    assert gamma.ppf(0.9, k, scale=scale) == pytest.approx(5188.0, rel=1e-6)
    with pytest.raises(UsageError, match="must exceed"):
        gamma_from_mean_p90(100.0, 90.0, "prompt")
    with pytest.raises(UsageError, match="wider than"):
        gamma_from_mean_p90(100.0, 1000.0, "prompt")


def test_mix_from_summary() -> None:
    m = mix_from_summary(prompt_mean=2000, prompt_p90=5000, output_mean=300, output_p90=600,
                         rate_rps=5.0, hit_rate=0.25, arrival_cv2=1.0, max_prompt_tokens=131072)
    assert m.prompt_tokens.mean() == pytest.approx(2000, rel=1e-3)
    assert np.quantile(m.prompt_tokens, 0.9) == pytest.approx(5000, rel=0.02)
    assert m.output_tokens.mean() == pytest.approx(300, rel=1e-3)
    assert m.hit_rate == pytest.approx(0.25, rel=1e-3)
    assert abs(np.corrcoef(m.prompt_tokens, m.output_tokens)[0, 1]) < 0.05
    fixed = mix_from_summary(prompt_mean=1000, prompt_p90=None, output_mean=100, output_p90=None,
                             rate_rps=1.0, hit_rate=0.0, arrival_cv2=1.0, max_prompt_tokens=8192)
    assert fixed.size == 1 and fixed.prompt_tokens[0] == 1000


def test_sample_from_histogram_reproduces_quantiles() -> None:
    le = np.array([100, 1000, 10_000, np.inf])
    cum = np.array([10, 60, 100, 100])  # 10 % <= 100, 50 % in (100, 1000], 40 % above
    sample = sample_from_histogram(le, cum, 1000)
    assert sample is not None
    assert np.mean(sample <= 100) == pytest.approx(0.1, abs=0.01)
    assert np.median(sample) == pytest.approx(100 + 0.8 * 900, rel=0.02)
    assert sample_from_histogram(le, np.zeros(4), 10) is None


def test_mix_from_requests_rate_and_rescale() -> None:
    frame = pd.DataFrame({"arrival_ts": np.arange(101, dtype=float), "prompt_tokens": 100,
                          "output_tokens": [0] + [5] * 100, "cached_tokens": [np.nan] * 50 + [150.0] * 51})
    m = mix_from_requests(frame, rate_rps=None, timescale_s=2.0, description="t")
    assert m.rate_rps == pytest.approx(1.0)
    assert m.output_tokens.min() == 1.0  # zero outputs count as one step
    assert m.cached_tokens.max() == 99.0  # at least one token is computed
    fast = mix_from_requests(frame, rate_rps=4.0, timescale_s=2.0, description="t")
    assert fast.arrival_ts is not None and fast.arrival_ts[-1] == pytest.approx(25.0)


def test_mix_operations() -> None:
    m = mix([1000, 3000], [10, 30], rate=2.0, cached=[500, 0])
    assert m.hit_rate == pytest.approx(0.125)
    shifted = m.with_hit_rate_shift(0.1)
    assert shifted.cached_tokens == pytest.approx([600, 300])
    c = m.collapsed()
    assert (c.prompt_tokens[0], c.cached_tokens[0], c.output_tokens[0]) == (2000, 250, 20)
    p90 = m.at_lengths(5000, 50, "p90")
    assert p90.hit_rate == pytest.approx(0.125)


def test_ideal_prefix_hits_by_hand() -> None:
    from pdprobe.analysis.capacity.prefix_hits import ideal_prefix_hits

    # r0 [1, 2, 3]; r1 [1, 2, 4] shares two leading blocks; r2 [5, 1] misses first
    offsets = np.array([0, 3, 6, 8])
    blocks = np.array([1, 2, 3, 1, 2, 4, 5, 1])
    cached = ideal_prefix_hits(offsets, blocks, np.array([1536.0, 1536.0, 1024.0]))
    assert cached == pytest.approx([0.0, 1024.0, 0.0])
    # a full-prompt hit still computes the last token
    assert ideal_prefix_hits(np.array([0, 1, 2]), np.array([7, 7]),
                             np.array([512.0, 512.0]))[1] == 511.0


def test_unsorted_records_give_the_sorted_mix() -> None:
    rng = np.random.default_rng(4)
    n = 2000
    frame = pd.DataFrame({"arrival_ts": rng.uniform(0, 200, n),
                          "prompt_tokens": rng.integers(1, 5000, n),
                          "output_tokens": rng.integers(1, 500, n)})
    shuffled = mix_from_requests(frame, rate_rps=None, timescale_s=1.0, description="t")
    ordered = mix_from_requests(frame.sort_values("arrival_ts"), rate_rps=None, timescale_s=1.0,
                                description="t")
    assert shuffled.arrival_ts is not None and ordered.arrival_ts is not None
    assert np.all(np.diff(shuffled.arrival_ts) >= 0)
    for a, b in ((shuffled.arrival_ts, ordered.arrival_ts),
                 (shuffled.prompt_tokens, ordered.prompt_tokens),
                 (shuffled.output_tokens, ordered.output_tokens)):
        assert np.array_equal(a, b)
    assert shuffled.arrival_cv2 == ordered.arrival_cv2
    # the 5 s load windows carry each arrival's window for the pool (the tail joins the last)
    load = ordered.load
    assert load is not None and load.window_of is not None and load.width_s == 5.0
    rel = ordered.arrival_ts - ordered.arrival_ts[0]
    assert np.array_equal(load.window_of, np.minimum(rel // 5.0, len(load.share) - 1))


def test_arrival_profile_memory_follows_the_arrivals_not_the_span() -> None:
    """One arrival of 1970 in a 583-row 2025 trace asked for 55 years of windows (12-24 GB)."""
    import resource

    from pdprobe.analysis.capacity.arrivals import (
        MAX_LOAD_WINDOWS,
        arrival_profile,
        estimate_arrival_cv2,
    )

    rng = np.random.default_rng(1)
    ts = 1.75e9 + np.cumsum(rng.exponential(0.2, 583))
    ts[0] = 1.0
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _cv2, how, load = arrival_profile(ts, 2.0)
    estimate_arrival_cv2(ts, 2.0)
    assert load is not None and len(load.share) <= MAX_LOAD_WINDOWS
    assert "windows widened" in how
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB
    wild = np.array([-1.7e308, *ts[1:], 1.7e308])
    assert arrival_profile(wild, 2.0)[2] is None


def test_unusable_rows_are_left_out_whatever_the_length_dtype() -> None:
    """A request needs a finite arrival, a finite prompt of at least one token and a finite
    output length: float columns with NaN, infinities and zero prompts give the mix of the
    usable rows alone, which integer columns (no NaN to test for) give too."""
    rng = np.random.default_rng(6)
    n = 3000
    frame = pd.DataFrame({"arrival_ts": np.sort(rng.uniform(0, 300, n)),
                          "prompt_tokens": rng.integers(1, 5000, n).astype(float),
                          "output_tokens": rng.integers(1, 500, n).astype(float)})
    bad = rng.choice(n, 60, replace=False)
    frame.loc[bad[:15], "prompt_tokens"] = np.nan
    frame.loc[bad[15:25], "prompt_tokens"] = 0.0
    frame.loc[bad[25:35], "prompt_tokens"] = np.inf
    frame.loc[bad[35:45], "output_tokens"] = np.nan
    frame.loc[bad[45:50], "output_tokens"] = -np.inf
    frame.loc[bad[50:], "arrival_ts"] = np.nan
    kept = frame.drop(index=bad).astype({"prompt_tokens": np.int64, "output_tokens": np.int64})
    got = mix_from_requests(frame, rate_rps=None, timescale_s=1.0, description="t")
    want = mix_from_requests(kept, rate_rps=None, timescale_s=1.0, description="t")
    assert got.size == want.size == n - 60
    for a, b in ((got.arrival_ts, want.arrival_ts), (got.prompt_tokens, want.prompt_tokens),
                 (got.output_tokens, want.output_tokens)):
        assert np.array_equal(a, b)
