"""The length-mix rank test on a bounded sample (evidence/transfer.py)."""

from __future__ import annotations

import numpy as np
from scipy import stats

from pdprobe.analysis.evidence.transfer import MIX_RANK_TEST_MAX, rank_sample


def test_rank_sample_is_bounded_and_deterministic() -> None:
    values = np.arange(1_000_003, dtype=np.float64)
    sample = rank_sample(values)
    assert sample.size <= MIX_RANK_TEST_MAX
    assert sample.size > MIX_RANK_TEST_MAX * 0.8
    np.testing.assert_array_equal(sample, rank_sample(values))
    small = values[:1000]
    assert rank_sample(small) is small


def test_sampled_rank_test_agrees_with_full_on_a_million_requests() -> None:
    """1M synthetic prompt lengths either side of a split: a 5 % shift is significant on the
    sample as on every request; no shift stays insignificant on both."""
    rng = np.random.default_rng(3)
    before = np.rint(rng.lognormal(7.0, 1.0, 600_000))
    shifted = np.rint(rng.lognormal(7.0 + np.log(1.05), 1.0, 400_000))
    same = np.rint(rng.lognormal(7.0, 1.0, 400_000))
    for after, significant in ((shifted, True), (same, False)):
        p_full = stats.mannwhitneyu(before, after).pvalue
        p_sample = stats.mannwhitneyu(rank_sample(before), rank_sample(after)).pvalue
        assert (p_full < 1e-3) == significant == (p_sample < 1e-3), (p_full, p_sample)
