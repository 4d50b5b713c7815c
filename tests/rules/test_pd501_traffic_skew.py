"""PD501 routing-skew: uneven traffic shares within a role."""

from __future__ import annotations

import pytest

from pdprobe.rules.base import Inconclusive, Severity
from pdprobe.rules.pd501_traffic_skew import TrafficSkew
from tests.rules.builders import (
    Cluster,
    make_context,
    make_dataset,
    only,
    scenario_context,
    step,
)

RULE = TrafficSkew()


def test_one_decode_with_41_percent_and_slower_tokens() -> None:
    [f] = only(RULE.evaluate(scenario_context("skew")), "PD501")
    assert f.cause == "routing-skew" and f.component == "router"
    assert f.severity is Severity.WARNING
    assert f.instances == ("decode-0",)
    assert f.summary.startswith("decode-0 gets 4")  # 41 % +- sampling
    assert "(fair share 25.0%)" in f.summary and f.summary.endswith("not the P/D ratio")
    share = next(e for e in f.evidence if e.what == "share of decode traffic to decode-0")
    assert share.value == pytest.approx(41, abs=2.5) and share.baseline == 25
    chi = next(e for e in f.evidence if e.what.startswith("chi-square"))
    assert float(chi.value) < 1e-10
    assert any(e.what == "TPOT p90 on decode-0" for e in f.evidence)


def test_hit_rate_named_when_the_overloaded_instance_also_misses_its_cache() -> None:
    c = Cluster(duration_s=600, decode_shares=[0.2, 0.2, 0.41, 0.19], hit_ratio=0.62,
                hit_by_decode={"decode-2": 0.03})
    [f] = only(RULE.evaluate(c.context(("requests",))), "PD501")
    assert "decode-2 gets 4" in f.summary
    assert "prefix-hit rate against 61.9% on its peers" in f.summary


def test_skew_without_impact_is_info_below_twice_the_fair_share() -> None:
    c = Cluster(duration_s=600, decode_shares=[0.41, 0.2, 0.2, 0.19])
    [f] = only(RULE.evaluate(c.context(("requests",))), "PD501")
    assert f.severity is Severity.INFO and f.confidence <= 0.45


def test_twice_the_fair_share_warns_without_impact() -> None:
    c = Cluster(duration_s=600, n_decode=3, decode_shares=[0.7, 0.15, 0.15])
    [f] = only(RULE.evaluate(c.context(("requests",))), "PD501")
    assert f.severity is Severity.WARNING and "70.2%" in f.summary


def test_instances_joining_mid_window_are_not_skew() -> None:
    # prefill-2 and prefill-3 join half-way: a quarter of the traffic each from then on is
    # their fair share, an eighth over the window.
    c = Cluster(duration_s=600, n_prefill=4, deployed_prefill=step(2, 4, at=0.5))
    for mix in (("requests",), ("metrics",)):
        assert RULE.evaluate(c.context(mix)) == []
    skewed = c.with_(prefill_shares=[0.55, 0.15, 0.15, 0.15], deployed_prefill=None)
    [f] = only(RULE.evaluate(skewed.context(("requests",))), "PD501")
    assert f.instances == ("prefill-0",)


def test_throughput_from_logs_when_nothing_else_names_instances() -> None:
    [f] = only(RULE.evaluate(scenario_context("skew", "logs")), "PD501")
    share = next(e for e in f.evidence if e.what.startswith("share of decode traffic"))
    assert "throughput in logs" in share.source


def test_under_used_slow_instance_is_a_straggler_not_skew() -> None:
    c = Cluster(duration_s=600, decode_shares=[0.1, 0.3, 0.3, 0.3], tpot_factor={"decode-0": 3})
    assert RULE.evaluate(c.context(("requests",))) == []


def test_chance_is_not_skew() -> None:
    # 40 requests over 4 decodes: 14/9/9/8 happens by chance.
    c = Cluster(duration_s=10, rate_rps=4)
    assert RULE.evaluate(c.context(("requests",))) == []
    assert RULE.evaluate(scenario_context("healthy")) == []
    assert RULE.evaluate(scenario_context("healthy", "logs")) == []


def test_inconclusive_without_instance_names() -> None:
    req = Cluster(duration_s=300).requests().drop(columns=["prefill_instance", "decode_instance"])
    [res] = RULE.evaluate(make_context(make_dataset(req)))
    assert isinstance(res, Inconclusive) and "decode_instance" in res.needs


def test_chi_square_p_equals_scipy_stats_chisquare() -> None:
    """The p-value without scipy.stats is scipy.stats.chisquare's, bit for bit."""
    import numpy as np
    import pandas as pd
    from scipy import stats

    from pdprobe.rules.pd501_traffic_skew import COUNT_SOURCES, _chi_square_p

    source = sorted(COUNT_SOURCES)[0]
    rng = np.random.default_rng(7)
    for _ in range(200):
        k = int(rng.integers(2, 30))
        counts = pd.Series(rng.integers(50, 5000, size=k).astype("float64"))
        weights = rng.random(k) + 0.05
        fair = pd.Series(weights / weights.sum())
        expected = float(counts.sum()) * fair.to_numpy()
        want = float(stats.chisquare(counts.to_numpy(), f_exp=expected).pvalue)
        assert _chi_square_p(source, counts, fair) == want


def test_instance_rows_of_a_frame_without_instance_columns_are_all_missing() -> None:
    """A per-bin frame holding no instance column gives NaN rows (the even share follows),
    as for a name the frame lacks, not an IndexError."""
    import numpy as np
    import pandas as pd

    from pdprobe.rules.pd501_traffic_skew import instance_rows

    empty = instance_rows(pd.DataFrame(index=[1.0, 2.0]), ["a", "b"])
    assert empty.shape == (2, 2) and np.isnan(empty).all()
    some = instance_rows(pd.DataFrame({"b": [1.0, 2.0]}, index=[1.0, 2.0]), ["a", "b"])
    assert np.isnan(some[0]).all() and some[1].tolist() == [1.0, 2.0]
