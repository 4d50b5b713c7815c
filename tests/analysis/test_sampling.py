"""Tests for pdprobe/analysis/sampling.py: bounded time-block samples with exact figures."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pdprobe.analysis import sample_runs, sampling
from pdprobe.analysis.capacity.perf_observations import decode_concurrency
from pdprobe.analysis.sampling import SAMPLE_BLOCK_S, time_sample


def _intervals(n: int, seed: int = 3, hours: float = 1.0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    start = 1.7e9 + np.sort(rng.uniform(0, 3600 * hours, n))
    dur = rng.lognormal(np.log(8.0), 1.0, n)
    dur[rng.random(n) < 0.01] *= 40  # a few very long decodes span several blocks
    group = rng.integers(0, 6, n)
    return start, start + dur, group


def test_small_inputs_are_not_sampled() -> None:
    start, end, _ = _intervals(1000)
    assert time_sample(start, end) is None
    assert time_sample(start, end, max_requests=1000) is None


def test_sample_is_bounded_and_spread_over_the_capture() -> None:
    start, end, _ = _intervals(60_000)
    sample = time_sample(start, end, max_requests=10_000)
    assert sample is not None and sample.every == 6
    n_obs = int(sample.observed.sum())
    assert 0.7 * 10_000 <= n_obs <= 1.3 * 10_000
    # one block in every six, spread over the whole hour
    blocks = np.unique(((start[sample.observed] - start.min()) // SAMPLE_BLOCK_S).astype(int))
    assert set(blocks % 6) == {3}
    assert blocks.min() < 6 and blocks.max() >= 60 - 6
    assert sample.needed[sample.observed].all()
    assert "of 60,000 requests" in sample.describe("requests")


def test_sampled_requests_get_the_exact_concurrency() -> None:
    """Every request overlapping a sampled one is in ``needed``: its batch and context, computed
    on ``needed`` alone, equal the full reconstruction's."""
    start, end, group = _intervals(40_000, seed=9, hours=4.0)
    ctx0 = np.random.default_rng(1).integers(10, 8000, len(start)).astype(float)
    growth = np.maximum((end - start) * 30.0, 1.0)
    full_b, full_k = decode_concurrency(start, end, ctx0, growth, group)
    sample = time_sample(start, end, group, max_requests=2_000)
    assert sample is not None
    rows = np.flatnonzero(sample.needed)
    b, k = decode_concurrency(start[rows], end[rows], ctx0[rows], growth[rows], group[rows])
    at = np.zeros(len(start), dtype=np.int64)
    at[rows] = np.arange(len(rows))
    obs = np.flatnonzero(sample.observed)
    assert b[at[obs]] == pytest.approx(full_b[obs], rel=1e-9)
    assert k[at[obs]] == pytest.approx(full_k[obs], rel=1e-9)
    assert len(rows) < 0.5 * len(start)  # the overlap margin is small against the blocks


# Tolerance of a sampled fit against the full one (docs/model.md, "Sampled reconstructions"):
# the same recommended counts, decode capacity and step-time predictions at the median batch
# within 3 %, median relative error of the fit within 0.02.
PRED_REL = 0.03


@pytest.mark.parametrize("cause", ["decode-bound", "healthy-low"])
def test_sampled_fit_agrees_with_the_full_fit_on_simulated_scenarios(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cause: str) -> None:
    """The simulator's scenarios are below the threshold; forcing it to a quarter of their
    requests must move the decode fit and the recommendation no further than stated."""
    from pdprobe.services.diagnose import DiagnoseRequest, diagnose
    from pdprobe.sim.scenarios import run_scenario

    run_scenario(cause, tmp_path / cause)
    request = DiagnoseRequest(paths=(tmp_path / cause / "requests.jsonl",))
    full = diagnose(request).capacity
    n = int(full.fit_quality["decode_n"])
    monkeypatch.setattr(sampling, "SAMPLE_MAX_REQUESTS", max(n // 4, 100))
    sampled = diagnose(request).capacity
    assert sampled.fit_quality["decode_n"] < 0.6 * n  # it did sample
    assert any("a sample of" in note for note in sampled.notes)
    assert (sampled.recommended_prefill, sampled.recommended_decode) == (
        full.recommended_prefill, full.recommended_decode)
    assert sampled.decode_capacity_rps == pytest.approx(full.decode_capacity_rps, rel=PRED_REL)
    assert sampled.fit_quality["decode_median_rel_error"] == pytest.approx(
        full.fit_quality["decode_median_rel_error"], abs=0.02)
    # the coefficients themselves
    from pdprobe.analysis.capacity.perf_fit import decode_observations, fit_decode
    from pdprobe.collectors.base import ReadContext
    from pdprobe.collectors.fuse import fuse
    from pdprobe.collectors.requests_file import read_requests
    from pdprobe.profiles import DEFAULT_PROFILE, load_profile

    ds = fuse([read_requests(tmp_path / cause / "requests.jsonl", ReadContext())])
    profile = load_profile(DEFAULT_PROFILE)
    models = []
    for limit in (None, max(n // 4, 100)):
        if limit is not None:
            monkeypatch.setattr(sampling, "SAMPLE_MAX_REQUESTS", limit)
        else:
            monkeypatch.setattr(sampling, "SAMPLE_MAX_REQUESTS", 10**9)
        obs = decode_observations(ds)
        assert not isinstance(obs, str)
        models.append((fit_decode(obs[0], obs[1], obs[2], profile)[0], obs))
    (m_full, o_full), (m_sampled, _) = models
    b_med, k_med = float(np.median(o_full[0])), float(np.median(o_full[1]))
    assert float(m_sampled.step_s(b_med, k_med)) == pytest.approx(
        float(m_full.step_s(b_med, k_med)), rel=PRED_REL)


def _decode_load(n: int, seed: int = 4, hours: float = 8.3, instances: int = 2
                 ) -> dict[str, object]:
    """Requests whose TPOT follows the batch and context they shared: ``0.009 + 8e-8·ctx +
    6e-4·batch`` seconds, lognormal noise (σ 0.05), a near fixed point of the reconstruction
    (twelve rounds). The load is heavy (batch 14, 27 and 74 at the 10th, 50th and 90th
    percentile), so the batch and context terms are most of the step time (71 % at the
    median batch and context: the intercept does not hide their errors), and it drifts: the
    arrival rate swings ±15 % over 4.3 cycles and prompt lengths ±60 % over 2.7, so the
    context per sequence varies apart from the batch and both coefficients are pinned."""
    rng = np.random.default_rng(seed)
    u = np.sort(rng.uniform(0, 1, n))
    arrival = 1.7e9 + hours * 3600 * (u + 0.15 * np.sin(2 * np.pi * 4.3 * u) / (2 * np.pi * 4.3))
    ttft = rng.uniform(0.05, 0.5, n)
    out = rng.integers(2, 1200, n)
    prompt = np.maximum(np.round(rng.integers(10, 6000, n) * (
        1 + 0.6 * np.sin(2 * np.pi * 2.7 * u + 1.0))), 1).astype(np.int64)
    inst = rng.integers(0, instances, n)
    noise = rng.lognormal(0.0, 0.05, n)
    tpot = np.full(n, 0.03)
    start = arrival + ttft
    for _ in range(12):  # the TPOT from the batch, the batch from the TPOT (test data only)
        b, k = decode_concurrency(start, start + tpot * (out - 1), prompt.astype(float),
                                  (out - 1).astype(float), inst)
        tpot = (0.009 + 8e-8 * k + 6e-4 * b) * noise
    return {"arrival_ts": arrival, "prompt_tokens": prompt, "output_tokens": out,
            "ttft_s": ttft, "tpot_s": tpot, "decode_instance": [f"d{i}" for i in inst]}


# Tolerance of a bounded decode sample against the full fit (docs/model.md, "Bounded decode
# sample"): the per-sequence and per-context-token coefficients within 5 %, the step time
# within 1 % at the 10th, 50th and 90th percentile batch and context.
COEF_REL = 0.05


def test_a_bounded_decode_sample_keeps_the_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``SAMPLE_MAX_REQUESTS`` the decode sample is a size (``DECODE_SAMPLE_REQUESTS``),
    not a fraction: forced to a quarter and a twentieth of 80,000 requests (one block in
    twenty, 3,925 observations: 200,000 of 10 million is one in fifty), its coefficients
    stay within ``COEF_REL`` of the full fit's and its step time within 1 % (measured: c
    +0.7 %, b -1.3 %, step within 0.1 %). Counting the sampled requests' batches without
    their overlapping neighbours fails it, and so does a sample of 314 or 140 observations
    (one block in 300 or 400); 751 (one in 100) pass."""
    from pdprobe.analysis.capacity.perf_observations import decode_observations
    from pdprobe.analysis.capacity.perf_policy import fit_decode
    from pdprobe.profiles import DEFAULT_PROFILE, load_profile
    from tests.analysis.capacity._data import dataset

    n = 80_000
    ds = dataset(_decode_load(n))
    profile = load_profile(DEFAULT_PROFILE)
    fits = {}
    for limit, size in ((10**9, 10**9), (n // 4, n // 20)):
        monkeypatch.setattr(sampling, "SAMPLE_MAX_REQUESTS", limit)
        monkeypatch.setattr(sampling, "DECODE_SAMPLE_REQUESTS", size)
        obs = decode_observations(ds)
        assert not isinstance(obs, str)
        fits[size] = (fit_decode(obs[0], obs[1], obs[2], profile)[0], obs)
    (full, f_obs), (part, p_obs) = fits[10**9], fits[n // 20]
    assert "a sample of" not in f_obs[3] and "one 60 s block in every 20;" in p_obs[3]
    assert 0.03 * n <= len(p_obs[0]) <= 0.07 * n  # about the size asked for
    assert full.source.startswith("fit") and part.source.startswith("fit")
    assert part.c_s_per_seq == pytest.approx(full.c_s_per_seq, rel=COEF_REL)
    assert part.b_s_per_ctx_token == pytest.approx(full.b_s_per_ctx_token, rel=COEF_REL)
    # at the 10th, 50th and 90th percentile batch and context of the full data
    b_q, k_q = np.percentile(f_obs[0], [10, 50, 90]), np.percentile(f_obs[1], [10, 50, 90])
    assert part.step_s(b_q, k_q) == pytest.approx(full.step_s(b_q, k_q), rel=0.01)


@pytest.mark.parametrize("closed", [False, True])
def test_needed_is_every_request_overlapping_a_sampled_one(closed: bool) -> None:
    """Against a brute-force check; ``closed`` also takes requests that only touch a sampled
    one (starting as it ends), as busy periods chain them."""
    rng = np.random.default_rng(4)
    n = 3000
    start = np.round(np.sort(rng.uniform(0, 1800, n)), 1)
    end = start + np.round(rng.exponential(5.0, n), 1)
    chain = rng.integers(1, n, 300)  # some start exactly when the one before ends
    start[chain] = end[chain - 1]
    end[chain] = np.maximum(end[chain], start[chain] + 0.5)
    group = rng.integers(0, 3, n)
    sample = time_sample(start, end, group, max_requests=600, closed=closed)
    assert sample is not None
    obs = np.flatnonzero(sample.observed)
    expected = sample.observed.copy()
    for j in range(n):  # brute force over the observed ones of the same group
        same = obs[group[obs] == group[j]]
        if closed:
            expected[j] |= bool(np.any((start[same] <= end[j]) & (start[j] <= end[same])))
        else:
            expected[j] |= bool(np.any((start[same] < end[j]) & (start[j] < end[same])))
    assert np.array_equal(sample.needed, expected)


def _recording_spans(start: np.ndarray, end: np.ndarray,
                     read: list[int]) -> Callable[[slice | np.ndarray], tuple[np.ndarray,
                                                                          np.ndarray]]:
    """The ``spans`` reader the sampling passes call, appending to ``read`` how many rows each
    pass over a slice reads (positions given as an array are a second look at candidates)."""

    def spans(rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(rows, slice):
            read.append(rows.stop - rows.start)
        return start[rows], end[rows]

    return spans


@pytest.mark.parametrize("ordered", [False, True])
def test_candidates_reread_only_rows_a_sampled_blocks_reach_gets_to(
        monkeypatch: pytest.MonkeyPatch, ordered: bool) -> None:
    """The candidates' second look (requests starting before a sampled block's reach) reads
    only the runs of rows holding a block reached that way: in arrival order, with requests
    far shorter than a block, about the block after each sampled one; unordered, every run.
    Long requests reach several blocks on. Either way ``needed`` is the brute-force one."""
    monkeypatch.setattr(sample_runs, "RUN_ROWS", 64)
    rng = np.random.default_rng(21)
    n = 20_000
    start = np.round(rng.uniform(0, 6000, n), 2)
    if ordered:
        start = np.sort(start)
    end = start + np.round(rng.exponential(3.0, n), 2)
    end[rng.integers(0, n, 40)] += 150.0  # a few reach two or three blocks further
    group = rng.integers(0, 3, n).astype(np.int8)
    read: list[int] = []
    spans = _recording_spans(start, end, read)

    sample = sampling.sample_intervals(spans, n, None, group, max_requests=2_000,
                                       start_range=(float(start.min()), float(start.max())))
    assert sample is not None and sample.every == 10
    again = sum(read) - n  # beyond the sampling pass over every row
    assert again < 0.35 * n if ordered else again == n
    obs = np.flatnonzero(sample.observed)
    expected = sample.observed.copy()
    for j in range(n):  # brute force over the observed ones of the same group
        same = obs[group[obs] == group[j]]
        expected[j] |= bool(np.any((start[same] < end[j]) & (start[j] < end[same])))
    assert np.array_equal(sample.needed, expected)


@pytest.mark.parametrize(("chunk", "run", "every"), [(1000, 64, 10), (1 << 16, 4096, 10),
                                                   (333, 50, 3), (7, 3, 25)])
@pytest.mark.parametrize("ordered", [False, True])
def test_runs_skipped_by_their_ranges_give_the_same_sample(
        monkeypatch: pytest.MonkeyPatch, chunk: int, run: int, every: int,
        ordered: bool) -> None:
    """With the caller's per-run ranges the sampling pass reads only runs holding a sampled
    block or ending in or after the next one: the same masks and (group, start) order as
    reading every row, invalid rows (NaN, and valid-looking ones masked off) included; in
    arrival order most rows are not read, unordered nearly all are."""
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    monkeypatch.setattr(sample_runs, "RUN_ROWS", run)
    rng = np.random.default_rng(every + run)
    n = 30_000
    start = np.round(rng.uniform(0, 9000, n), 2)
    if ordered:
        start = np.sort(start)
    end = start + np.round(rng.exponential(4.0, n), 2)
    end[rng.integers(0, n, 30)] += 200.0  # a few reach several blocks further
    valid = rng.random(n) > 0.05
    start[~valid & (rng.random(n) < 0.5)] = np.nan
    group = rng.integers(0, 4, n).astype(np.int8)
    read: list[int] = []
    spans = _recording_spans(start, end, read)

    built = sample_runs.RunRangesBuilder()
    for lo in range(0, n, chunk):
        ok = valid[lo:lo + chunk]
        built.add(lo, start[lo:lo + chunk].copy(), end[lo:lo + chunk].copy(), ok)  # scratch
    runs = built.done()
    limit = int(valid.sum()) // every
    plain = sampling.sample_intervals(spans, n, valid, group, max_requests=limit,
                                      start_range=runs.start_range, by_group=True)
    read_all, read[:] = sum(read), []
    got = sampling.sample_intervals(spans, n, valid, group, max_requests=limit, runs=runs,
                                    by_group=True)
    assert plain is not None and got is not None and got.every == plain.every >= every
    assert np.array_equal(got.observed, plain.observed)
    assert np.array_equal(got.needed, plain.needed)
    assert plain.by_group is not None and got.by_group is not None
    assert np.array_equal(got.by_group, plain.by_group)
    assert read_all > n and (sum(read) < 0.6 * n if ordered and every > 3 and run <= 64 else True)
    assert runs.start_range == (float(np.nanmin(start[valid])), float(np.nanmax(start[valid])))


@pytest.mark.parametrize("chunk", [7, 1000, 1 << 16])
@pytest.mark.parametrize("closed", [False, True])
def test_sample_intervals_by_chunks_is_time_sample_of_the_valid_rows(
        monkeypatch: pytest.MonkeyPatch, chunk: int, closed: bool) -> None:
    """``sample_intervals`` reads the intervals chunk by chunk (odd chunk boundaries here) over
    every row, invalid ones included as NaN, and gathers group codes at candidates only: the
    same sample as ``time_sample`` of the valid rows' whole arrays, mapped back to rows."""
    start, end, group = _intervals(30_000, seed=11, hours=2.0)
    rng = np.random.default_rng(2)
    valid = rng.random(len(start)) > 0.1
    s_all, e_all = start.copy(), end.copy()
    s_all[~valid & (rng.random(len(start)) < 0.5)] = np.nan  # what a missing column gives
    e_all[~valid] = np.nan
    reference = time_sample(start[valid], end[valid], group[valid], max_requests=3_000,
                            closed=closed)
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    seen: list[int] = []

    def spans(rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.append(rows.stop - rows.start if isinstance(rows, slice) else -len(rows))
        return s_all[rows], e_all[rows]

    sample = sampling.sample_intervals(spans, len(start), valid, group.astype(np.int8),
                                       max_requests=3_000, closed=closed)
    assert reference is not None and sample is not None
    assert max(seen) <= chunk  # whole-size arrays are never asked for, only positions
    assert (sample.every, sample.total) == (reference.every, reference.total)
    assert np.array_equal(sample.observed[valid], reference.observed)
    assert np.array_equal(sample.needed[valid], reference.needed)
    assert not sample.observed[~valid].any() and not sample.needed[~valid].any()
    assert sample.describe("requests") == reference.describe("requests")


# --- floor_quotient: numpy's floor division, computed mostly by a division -------------------

@pytest.mark.parametrize("width", [60.0, 0.1, 0.3, 2.5, 1 / 3, 1e-3])
def test_floor_quotient_is_numpys_floor_division(width: float) -> None:
    """Bit for bit ``x // width``, also where the rounded quotient is whole but the exact one
    is not (just below a multiple of the width), on multiples, signed zeros, NaN and
    infinities."""
    rng = np.random.default_rng(int(width * 1000))
    multiples = rng.integers(-10**6, 10**6, 5_000) * width
    below = np.nextafter(multiples, -np.inf)  # x / width rounds up to a whole number here
    above = np.nextafter(multiples, np.inf)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, -1e300, 5e-324, -5e-324])
    x = np.concatenate([rng.uniform(-1e5, 1e5, 5_000), multiples, below, above,
                        rng.integers(0, 10**9, 5_000) * 0.1, special])
    with np.errstate(invalid="ignore"):
        expected = x // width
        got = sampling.floor_quotient(x, width)
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(expected))
    if width in (0.1, 0.3, 1e-3):  # inputs where a plain floor of the division is wrong
        with np.errstate(invalid="ignore"):
            assert np.any(np.floor(x / width) != expected)


def test_blocks_before_the_first_sampled_one_look_ahead_to_it() -> None:
    """Before any sampled block, the next sampled block is the first one (``every // 2``),
    not a negative block every row would reach (each would become a candidate)."""
    prev, nxt = sample_runs.sampled_around(12, 5)
    assert prev.tolist()[:2] == [-3, -3] and nxt.tolist()[:2] == [2.0, 2.0]
    assert nxt.tolist()[2:7] == [7.0] * 5 and nxt.tolist()[7:] == [12.0] * 5
