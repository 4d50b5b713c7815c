"""Performance-model fits: recovery, fallbacks, rejections and the concurrency reconstruction."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.capacity import perf_fit, perf_observations, perf_solver
from pdprobe.analysis.capacity.perf_fit import (
    MIN_FIT_POINTS,
    MIN_SCALE_POINTS,
    PrefillModel,
    decode_concurrency,
    decode_observations,
    fit_decode,
    fit_prefill,
    fit_sample,
    nnls_relative,
    nnls_triangular,
    prefill_observations,
)
from pdprobe.dataset import InstanceInfo
from pdprobe.profiles import load_profile

from ._data import dataset

PROFILE = load_profile("llama3-70b-h100-tp4")


def test_prefill_model_formulas_by_hand() -> None:
    m = PrefillModel(a_s=0.02, b_s_per_token=1e-4, c_s_per_token2=1e-9, max_batch_tokens=1000)
    # 2500 tokens alone: 3 forwards * 0.02 + 0.25 + 1e-9 * 2500^2 = 0.06 + 0.25 + 0.00625
    assert m.alone_s(np.array([2500.0]))[0] == pytest.approx(0.31625)
    # batched share: 0.02 * 2.5 + 0.25 + 0.00625
    assert m.batched_s(np.array([2500.0]))[0] == pytest.approx(0.30625)
    # 500 computed after 1000 cached tokens attend 1500^2 - 1000^2 = 1.25e6
    assert m.alone_s(np.array([500.0]), np.array([1000.0]))[0] == pytest.approx(
        0.02 + 0.05 + 1.25e-3)


def test_nnls_relative_recovers_coefficients() -> None:
    rng = np.random.default_rng(0)
    u = rng.uniform(100, 20000, 400)
    x = np.column_stack([np.ones_like(u), u, u * u])
    y = (0.03 + 8e-5 * u + 7e-10 * u * u) * rng.lognormal(0, 0.03, len(u))
    fit = nnls_relative(x, y)
    assert fit.coef == pytest.approx([0.03, 8e-5, 7e-10], rel=0.1)
    assert fit.r2 > 0.99
    assert fit.median_rel_error < 0.04


def test_nnls_relative_resists_outliers() -> None:
    rng = np.random.default_rng(1)
    u = rng.uniform(100, 8000, 300)
    y = 0.01 + 1e-4 * u
    y[:15] *= 10  # 5 % stalled requests
    fit = nnls_relative(np.column_stack([np.ones_like(u), u]), y)
    assert fit.coef[1] == pytest.approx(1e-4, rel=0.05)


def test_fit_prefill_recovers_profile_curve() -> None:
    rng = np.random.default_rng(2)
    u = rng.uniform(200, 30000, 200)
    truth = PrefillModel(0.05, 1.2e-4, 1.5e-9, PROFILE.prefill_max_batch_tokens)
    t = truth.alone_s(u) * rng.lognormal(0, 0.02, len(u))
    model, fit = fit_prefill(u, t, PROFILE)
    assert fit.method == "fit"
    assert fit.n == 200
    assert fit.r2 is not None and fit.r2 > 0.99
    assert model.b_s_per_token == pytest.approx(1.2e-4, rel=0.1)
    assert model.c_s_per_token2 == pytest.approx(1.5e-9, rel=0.2)


def test_fit_prefill_too_few_requests_falls_back_with_count() -> None:
    model, fit = fit_prefill(np.array([1000.0] * 5), np.array([0.1] * 5), PROFILE)
    assert fit.method == "profile"
    assert model.b_s_per_token == PROFILE.prefill_b_s_per_token
    assert f"{MIN_SCALE_POINTS} are needed" in fit.notes[0]
    assert str(MIN_FIT_POINTS) in fit.notes[0]


def test_fit_prefill_narrow_lengths_scale_the_profile() -> None:
    u = np.full(50, 4000.0)
    t = 3.0 * PrefillModel(PROFILE.prefill_a_s, PROFILE.prefill_b_s_per_token,
                           PROFILE.prefill_c_s_per_token2, PROFILE.prefill_max_batch_tokens
                           ).alone_s(u)
    model, fit = fit_prefill(u, t, PROFILE)
    assert fit.method == "scaled profile"
    assert fit.scale_vs_profile == pytest.approx(3.0)
    assert model.b_s_per_token == pytest.approx(3 * PROFILE.prefill_b_s_per_token)
    # the observed prefill is 3x slower than the profile: said so
    assert any("3.0× slower" in n for n in fit.notes)


def test_fit_prefill_rejects_flat_times() -> None:
    rng = np.random.default_rng(3)
    u = rng.uniform(100, 10000, 100)
    t = np.full(100, 0.5) * rng.lognormal(0, 0.01, 100)  # no growth with length
    _, fit = fit_prefill(u, t, PROFILE)
    assert fit.method == "scaled profile"
    assert any("rejected" in n for n in fit.notes)


def test_fit_decode_recovers_step_model() -> None:
    rng = np.random.default_rng(4)
    b = rng.uniform(1, 200, 300)
    k = b * rng.uniform(500, 5000, 300)
    t = (0.012 + 4e-8 * k + 5e-5 * b) * rng.lognormal(0, 0.02, 300)
    model, fit = fit_decode(b, k, t, PROFILE)
    assert fit.method == "fit"
    assert model.a_s == pytest.approx(0.012, rel=0.05)
    assert model.b_s_per_ctx_token == pytest.approx(4e-8, rel=0.15)
    assert model.c_s_per_seq == pytest.approx(5e-5, rel=0.3)
    assert model.kv_capacity_tokens == PROFILE.kv_capacity_tokens


def test_decode_concurrency_by_hand() -> None:
    # A decodes on x over [0, 10] from 100 context tokens, +10 tokens; B over [5, 15] from 200, +10
    start = np.array([0.0, 5.0])
    end = np.array([10.0, 15.0])
    batch, ctx = decode_concurrency(start, end, np.array([100.0, 200.0]), np.array([10.0, 10.0]),
                                    np.array(["x", "x"], dtype=object))
    assert batch == pytest.approx([1.5, 1.5])
    # A: own context averages 105; B adds (5 * 200 + 12.5) over 10 s -> 105 + 101.25
    # B: A's share over [5, 10] is 5 * 100 + (100 - 25) / 2 = 537.5; B's own averages 205
    assert ctx == pytest.approx([206.25, 205.0 + 53.75])


def test_decode_concurrency_separates_instances() -> None:
    batch, _ = decode_concurrency(np.array([0.0, 0.0]), np.array([10.0, 10.0]),
                                  np.array([10.0, 10.0]), np.array([5.0, 5.0]),
                                  np.array(["x", "y"], dtype=object))
    assert batch == pytest.approx([1.0, 1.0])


def test_observations_from_request_records() -> None:
    n = 40
    ds = dataset({
        "arrival_ts": np.arange(n, dtype=float),
        "prompt_tokens": np.full(n, 1000),
        "output_tokens": np.full(n, 11),
        "cached_tokens": np.full(n, 200.0),
        "prefill_s": np.full(n, 0.1),
        "ttft_s": np.full(n, 0.2),
        "tpot_s": np.full(n, 0.5),  # 10 steps = 5 s: five requests overlap
        "decode_instance": ["d0"] * n,
        "status": ["ok"] * (n - 1) + ["error"],
    })
    obs = prefill_observations(ds)
    assert not isinstance(obs, str)
    assert len(obs[0]) == n - 1
    assert obs[0][0] == 800.0
    dec = decode_observations(ds)
    assert not isinstance(dec, str)
    batch, ctx, _, how = dec
    assert how == "per decode_instance"
    assert np.median(batch) == pytest.approx(5.0)
    # five sequences, context 1000 + 5 on average each
    assert np.median(ctx) == pytest.approx(5 * 1005.0)


def test_observations_explain_what_is_missing() -> None:
    ds = dataset({"arrival_ts": [0.0], "prompt_tokens": [10], "output_tokens": [5]})
    assert prefill_observations(ds) == "no prefill_s column in the request records"
    assert decode_observations(ds) == "no tpot_s column in the request records"


def test_decode_pool_split_without_instance_column() -> None:
    n = 30
    ds = dataset({
        "arrival_ts": np.arange(n, dtype=float), "prompt_tokens": np.full(n, 100),
        "output_tokens": np.full(n, 5), "ttft_s": np.full(n, 0.1), "tpot_s": np.full(n, 1.0),
    }, instances=(InstanceInfo("d0", "decode", "test"), InstanceInfo("d1", "decode", "test")))
    dec = decode_observations(ds)
    assert not isinstance(dec, str)
    assert "split evenly over 2" in dec[3]
    assert np.median(dec[0]) == pytest.approx(2.0)  # 4 overlapping, two instances


def _pairwise_concurrency(start: np.ndarray, end: np.ndarray, ctx0: np.ndarray,
                          growth: np.ndarray, group: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
    """The definition, request by request: overlaps and context integrals over every pair."""
    rate = growth / (end - start)
    batch, ctx = np.zeros(len(start)), np.zeros(len(start))
    for j in range(len(start)):
        same = group == group[j]
        a = np.maximum(start, start[j])
        b = np.minimum(end, end[j])
        on = same & (b > a)
        batch[j] = np.sum(b[on] - a[on])
        ctx[j] = np.sum(ctx0[on] * (b[on] - a[on])
                        + rate[on] * ((b[on] - start[on]) ** 2 - (a[on] - start[on]) ** 2) / 2)
    span = end - start
    return batch / span, ctx / span


@pytest.mark.parametrize("block", [perf_fit.SWEEP_BLOCK_REQUESTS, 7])
def test_decode_concurrency_matches_pairwise_overlaps(monkeypatch: pytest.MonkeyPatch,
                                                      block: int) -> None:
    rng = np.random.default_rng(11)
    n = 400
    start = 1.7e9 + np.round(rng.uniform(0, 300, n), 1)  # rounded: many tied event times
    end = start + np.round(rng.uniform(0.5, 60, n), 1)
    end[:20] = start[20:40]  # some requests end exactly when others start
    ok = end > start
    start, end = start[ok], end[ok]
    ctx0 = rng.integers(10, 20_000, len(start)).astype(float)
    growth = rng.integers(1, 2000, len(start)).astype(float)
    group = rng.choice(np.array(["d2", "d0", "d10", "d1"], dtype=object), len(start))
    monkeypatch.setattr(perf_observations, "SWEEP_BLOCK_REQUESTS", block)  # 7: many blocks
    batch, ctx = decode_concurrency(start, end, ctx0, growth, group)
    ref_b, ref_k = _pairwise_concurrency(start, end, ctx0, growth, group)
    assert batch == pytest.approx(ref_b, rel=1e-9)
    assert ctx == pytest.approx(ref_k, rel=1e-9)
    # integer instance codes (any values) group the same way
    codes = np.select([group == g for g in ("d2", "d0", "d10", "d1")], [70, -3, 5, 9])
    batch_i, ctx_i = decode_concurrency(start, end, ctx0, growth, codes)
    assert batch_i == pytest.approx(batch, rel=1e-12)
    assert ctx_i == pytest.approx(ctx, rel=1e-12)


def test_decode_concurrency_zero_length_and_empty() -> None:
    batch, ctx = decode_concurrency(np.array([0.0, 0.0]), np.array([0.0, 4.0]),
                                    np.array([10.0, 10.0]), np.array([0.0, 4.0]),
                                    np.array(["x", "x"], dtype=object))
    assert np.isnan(batch[0]) and np.isnan(ctx[0])  # no decode interval: no average
    assert batch[1] == pytest.approx(1.0)
    assert ctx[1] == pytest.approx(12.0)
    empty = decode_concurrency(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0),
                               np.zeros(0, dtype=object))
    assert len(empty[0]) == 0 and len(empty[1]) == 0


def test_nnls_triangular_matches_scipy() -> None:
    from scipy.optimize import nnls

    rng = np.random.default_rng(5)
    for k in (1, 2, 3, 4):
        for _ in range(25):
            a = rng.normal(size=(40, k))
            if k > 1 and rng.random() < 0.3:
                a[:, -1] = a[:, 0]  # a collinear pair: the optimum is not unique in x
            b = rng.normal(size=40)
            q, r = np.linalg.qr(a)
            ours = nnls_triangular(r, q.T @ b)
            ref, _ = nnls(a, b)
            assert np.all(ours >= 0)
            cost = float(np.sum((a @ ours - b) ** 2))
            assert cost == pytest.approx(float(np.sum((a @ ref - b) ** 2)), rel=1e-10)
            if np.linalg.matrix_rank(a) == k:
                assert ours == pytest.approx(ref, rel=1e-8, abs=1e-10)


def test_fit_sample_is_stratified_and_seeded() -> None:
    assert fit_sample(1000, 1000) is None
    rows = fit_sample(1000, 100)
    assert rows is not None and len(rows) == 100
    assert np.all(rows // 10 == np.arange(100))  # one row from each block of ten
    again = fit_sample(1000, 100)
    assert again is not None and np.array_equal(rows, again)
    uneven = fit_sample(1003, 100)
    assert uneven is not None and uneven.max() < 1003 and np.all(np.diff(uneven) > 0)


def test_nnls_relative_on_a_sample_matches_the_full_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(8)
    n = 20_000
    u = np.clip(rng.lognormal(7.5, 0.9, n), 50, 30_000)
    x = np.column_stack([np.ceil(u / 8192), u, u * u])
    y = (0.03 * x[:, 0] + 8e-5 * u + 7e-10 * u * u) * rng.lognormal(0, 0.05, n)
    y[rng.random(n) < 0.03] *= 10  # stalls: the reweighting must still damp them
    full = nnls_relative(x, y)
    monkeypatch.setattr(perf_solver, "NNLS_MAX_POINTS", 1000)
    sampled = nnls_relative(x, y)
    assert sampled.coef == pytest.approx(full.coef, rel=0.03)
    assert sampled.coef == pytest.approx([0.03, 8e-5, 7e-10], rel=0.1)
    # quality is measured on every observation, not the sample
    pred = x @ sampled.coef
    r2 = 1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2)
    assert sampled.r2 == pytest.approx(r2)
    assert sampled.median_rel_error == pytest.approx(np.median(np.abs(pred - y) / y))


def test_alone_and_batched_in_one_go_are_exact() -> None:
    m = PrefillModel(a_s=0.02, b_s_per_token=1e-4, c_s_per_token2=1e-9, max_batch_tokens=1000)
    u = np.array([1.0, 999.0, 1000.0, 1001.0, 25_000.0])
    c = np.array([0.0, 10.0, 0.0, 500.0, 7000.0])
    alone, batched = m.alone_and_batched_s(u, c)
    assert np.array_equal(alone, m.alone_s(u, c))
    assert np.array_equal(batched, m.batched_s(u, c))


def test_decode_observations_of_no_rows_say_so() -> None:
    """An empty table with every column: a reason, not a traceback."""
    ds = dataset({"arrival_ts": np.zeros(0), "prompt_tokens": np.zeros(0, np.int64),
                  "output_tokens": np.zeros(0, np.int64), "ttft_s": np.zeros(0),
                  "tpot_s": np.zeros(0), "decode_instance": np.array([], dtype=object)})
    assert isinstance(decode_observations(ds), str)
