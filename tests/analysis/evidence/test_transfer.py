"""The length-mix rank test on a bounded sample and the transfer figures from request records (evidence/transfer.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
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


def test_mix_split_of_arrivals_in_order_is_the_masked_split(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Arrivals in time order: the requests either side of a length shift found by a binary
    search, the rank tests' figures of the masks (requests at the split's very time on the
    later side)."""
    import pandas as pd

    from pdprobe.analysis.evidence import transfer
    from pdprobe.analysis.evidence.build import compute_evidence
    from pdprobe.values import Missing
    from tests.rules.builders import make_dataset

    rng = np.random.default_rng(4)
    n = 4_000
    arrival = np.sort(rng.uniform(0.0, 1_200.0, n))
    arrival[2_000:2_010] = arrival[2_000]  # ties at the split's neighbourhood
    prompt = np.rint(rng.lognormal(6.0, 0.3, n) * np.where(arrival < 600.0, 1.0, 2.0))
    output = np.rint(rng.lognormal(5.0, 0.3, n) * np.where(arrival < 800.0, 1.0, 0.5))
    ds = make_dataset(pd.DataFrame({"arrival_ts": arrival, "prompt_tokens": prompt,
                                    "output_tokens": output}))
    evidence = compute_evidence(ds, workload=Missing("x"), slo=Missing("x"),
                                capacity=Missing("x"))
    got = transfer.mix_figures(ds, evidence.window, evidence.cluster)
    assert got.prompt is not None and got.prompt_p_requests is not None
    monkeypatch.setattr(transfer, "arrivals_in_order", lambda ds: False)  # the masks
    assert transfer.mix_figures(ds, evidence.window, evidence.cluster) == got


def test_bytes_in_total_are_pandas_sum_of_the_column() -> None:
    """The records' KV bytes in total (summed once with the achieved bandwidth's sums) are
    pandas' sum of the column, NaN rows and all."""
    import pandas as pd

    from pdprobe.analysis.evidence.build import compute_evidence
    from pdprobe.values import Missing
    from tests.rules.builders import make_dataset

    rng = np.random.default_rng(5)
    n = 3_000
    kv = rng.uniform(1e6, 1e9, n)
    for nan_rows in (slice(0, 0), slice(None, None, 7)):
        kv_bytes = kv.copy()
        kv_bytes[nan_rows] = np.nan
        ds = make_dataset(pd.DataFrame({"arrival_ts": np.sort(rng.uniform(0.0, 600.0, n)),
                                        "prompt_tokens": 100, "output_tokens": 10,
                                        "kv_transfer_s": rng.uniform(0.01, 0.5, n),
                                        "kv_bytes": kv_bytes}))
        got = compute_evidence(ds, workload=Missing("x"), slo=Missing("x"),
                               capacity=Missing("x")).transfer
        assert got.bytes_total == float(pd.Series(kv_bytes).sum())
        assert got.achieved_bytes_per_s is not None


_KV_CASES = {"finite": None, "nan": np.nan, "inf": np.inf}
_X_CASES = {"positive": None, "zero": 0.0, "negative": -0.5, "nan": np.nan, "inf": np.inf,
            "sum_inf": "sum_inf"}


@pytest.mark.parametrize("x_case", list(_X_CASES))
@pytest.mark.parametrize("kv_case", list(_KV_CASES))
def test_transfer_bytes_rate_and_count_are_the_masked_figures(kv_case: str,
                                                              x_case: str) -> None:
    """The bytes in total, the achieved rate and the transfers counted, taken from the
    column's sums when every row has both (``every``) and from masks otherwise: the very
    figures of the masked computation (pandas' NaN-skipping sum; both > 0 and bytes known;
    finite times), with bytes finite, NaN or infinite and times above 0, 0, below 0, NaN,
    infinite or summing to infinity."""
    from pdprobe.analysis.evidence.model import Window
    from pdprobe.analysis.evidence.transfer import transfer_figures
    from tests.rules.builders import make_dataset

    rng = np.random.default_rng(7)
    n = 400
    kv = rng.integers(1, 1 << 30, n).astype(np.float64)
    x = rng.uniform(0.01, 0.2, n)
    if _KV_CASES[kv_case] is not None:
        kv[[5, 77]] = _KV_CASES[kv_case]
    bad = _X_CASES[x_case]
    if bad == "sum_inf":
        x[:] = 1e307  # each finite, their sum infinite
    elif bad is not None:
        x[[9, 123]] = bad
    requests = pd.DataFrame({"arrival_ts": np.arange(n, dtype=np.float64), "prompt_tokens": 10,
                             "output_tokens": 5, "kv_bytes": kv, "kv_transfer_s": x,
                             "ttft_s": x + 0.5})
    ds = make_dataset(requests)
    table = pd.DataFrame({c: pd.Series(dtype="float64") for c in
                          ("xfer_bytes_per_s", "xfer_s_p50", "xfer_s_p90")})
    with np.errstate(invalid="ignore", over="ignore"):
        got = transfer_figures(ds, Window(0.0, float(n), 10.0), table, pd.DataFrame())
        both = (x > 0) & ~np.isnan(kv)
        want_rate = float(kv[both].sum() / x[both].sum()) if both.any() else None
    assert got.bytes_total == float(pd.Series(kv).sum()) or (
        np.isnan(got.bytes_total) and np.isnan(pd.Series(kv).sum()))
    assert got.transfers == int(np.count_nonzero(np.isfinite(x)))
    if want_rate is None or got.achieved_bytes_per_s is None:
        assert got.achieved_bytes_per_s is want_rate is None
    else:
        assert np.array_equal(got.achieved_bytes_per_s, want_rate, equal_nan=True)
