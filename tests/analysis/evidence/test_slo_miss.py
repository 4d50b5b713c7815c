"""The SLO-miss shape from request rows: stage excess and bursts without full-length copies."""

from __future__ import annotations

import numpy as np
import pytest

from pdprobe.analysis.evidence.model import Window
from pdprobe.analysis.evidence.slo_miss import (
    REST,
    _bursts,
    _excess,
    _few_as_positions,
)


def _columns(seed: int, n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    queue = rng.exponential(0.3, n)
    prefill = rng.exponential(0.5, n)
    xfer = rng.exponential(0.05, n)
    queue[::11] = np.nan  # a stage a record lacks counts 0
    ttft = queue + prefill + xfer + rng.exponential(0.2, n)
    ttft[::17] = np.nan
    return ttft, {"queue": queue, "prefill": prefill, "kv-transfer": xfer}


def _reference(ttft: np.ndarray, columns: dict[str, np.ndarray], missed: np.ndarray,
               met: np.ndarray, sample: np.ndarray | None) -> dict[str, tuple[float, float]]:
    """The whole-column computation: every stage NaN-filled at full length, then the rest."""
    parts = {k: np.nan_to_num(v, nan=0.0) for k, v in columns.items()}
    total = np.sum(list(parts.values()), axis=0)
    parts[REST] = np.clip(np.nan_to_num(ttft - total, nan=0.0), 0.0, None)
    out = {}
    for stage, values in parts.items():
        base_rows = values[met] if sample is None else values[sample][met[sample]]
        out[stage] = (float(values[missed].mean()), float(np.median(base_rows)))
    return out


@pytest.mark.parametrize("sampled", [False, True])
@pytest.mark.parametrize("objective", [0.8, 3.0])  # many misses (a mask), few (positions)
def test_excess_equals_the_whole_column_figures(sampled: bool, objective: float) -> None:
    ttft, columns = _columns(1, 3_000)
    missed = np.isfinite(ttft) & (ttft > objective)
    positions = _few_as_positions(missed)
    assert (positions.dtype == np.int32) == (objective == 3.0)  # both ways are exercised
    met = np.isfinite(ttft) & ~missed
    sample = np.arange(0, ttft.size, 3) if sampled else None
    got = {s.stage: (s.missed_mean_s, s.met_median_s) for s in
           _excess(ttft, columns, missed, met, sample)}
    want = _reference(ttft, columns, missed, met, sample)
    assert got == want  # the very same floats


@pytest.mark.parametrize("chunk", [13, 1 << 20])
def test_bursts_from_slices(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    from pdprobe.analysis import row_slices

    rng = np.random.default_rng(2)
    arrival = np.sort(rng.uniform(0.0, 600.0, 4_000))
    arrival = np.sort(np.concatenate([arrival, rng.uniform(100.0, 110.0, 800)]))
    arrival[::97] = np.nan
    missed = rng.random(arrival.size) < 0.05
    missed[(arrival > 100.0) & (arrival < 110.0)] = True
    window = Window(0.0, 600.0, 15.0)
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", chunk)
    got = _bursts(arrival, missed, window)
    ok = np.isfinite(arrival)
    t = arrival[ok]
    bins = np.floor((t - t.min()) / 15.0).astype(np.int64)
    counts = np.bincount(bins)
    busy = np.zeros(counts.size, dtype=bool)
    busy[np.argsort(-counts, kind="stable")[:max(1, round(0.2 * counts.size))]] = True
    want = (float(busy[bins][missed[ok]].mean()), float(busy[bins].mean()))
    assert got == want


@pytest.mark.parametrize("step", [15.0, 1.0])
def test_bursts_of_sorted_arrivals_are_searched_runs(monkeypatch: pytest.MonkeyPatch,
                                                     step: float) -> None:
    """Arrivals in time order take the searched path (bins as runs of rows): the very shares
    of binning every arrival, and of the same rows in another order."""
    from pdprobe.analysis.evidence import slo_miss

    searched: list[int] = []
    real = slo_miss._bursts_sorted
    monkeypatch.setattr(slo_miss, "_bursts_sorted",
                        lambda *args: searched.append(1) or real(*args))
    rng = np.random.default_rng(3)
    arrival = np.sort(np.concatenate([rng.uniform(0.0, 600.0, 4_000),
                                      rng.uniform(100.0, 130.0, 900),
                                      np.full(50, 300.0)]))  # ties on a bin's edge
    missed = rng.random(arrival.size) < 0.05
    burst = (arrival > 100.0) & (arrival < 130.0)
    missed[burst] = rng.random(int(burst.sum())) < 0.5
    window = Window(0.0, 600.0, step)
    got = _bursts(arrival, missed, window)
    width = max(step, 10.0)
    bins = np.floor((arrival - arrival[0]) / width).astype(np.int64)
    counts = np.bincount(bins)
    busy = np.zeros(counts.size, dtype=bool)
    busy[np.argsort(-counts, kind="stable")[:max(1, round(0.2 * counts.size))]] = True
    assert got == (float(busy[bins][missed].mean()), float(busy[bins].mean()))
    assert got[0] is not None and got[0] > 0.2  # the burst holds most misses
    shuffled = rng.permutation(arrival.size)
    assert _bursts(arrival[shuffled], missed[shuffled], window) == got
    assert searched == [1]  # the sorted rows were searched, the shuffled ones binned


def test_excess_holds_one_stage_besides_the_total() -> None:
    # half the rows missed: the stage values at them are read one stage at a time (two
    # arrays of the missed rows at once, not the four stages together)
    import tracemalloc

    ttft, columns = _columns(4, 200_000)
    missed = np.isfinite(ttft) & (ttft > np.nanmedian(ttft))
    met = np.isfinite(ttft) & ~missed
    sample = np.arange(0, ttft.size, 50)
    per_stage = int(np.count_nonzero(missed)) * 8
    tracemalloc.start()
    try:
        _excess(ttft, columns, missed, met, sample)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3.2 * per_stage  # (a boolean gather makes its positions too)


def test_zero_nan_is_nan_to_num() -> None:
    """NaN made 0 and infinities the largest finite values, in place, as ``nan_to_num``; an
    all-finite array returned as it is."""
    from pdprobe.analysis.evidence.slo_miss import _zero_nan

    finite = np.array([0.5, -1.0, 3.0])
    assert _zero_nan(finite) is finite
    odd = np.array([np.nan, np.inf, -np.inf, 2.0])
    want = np.nan_to_num(odd.copy(), nan=0.0)
    got = _zero_nan(odd)
    assert got is odd and np.array_equal(got, want)


def test_the_shape_is_computed_when_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evidence computes the SLO-miss shape when a rule first reads it (PD801, when the
    objective is missed), once, and it is ``slo_miss_shape``'s of the same inputs."""
    from pdprobe.analysis.evidence import slo_miss
    from tests.rules.builders import Cluster

    calls: list[int] = []
    real = slo_miss.slo_miss_shape

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(slo_miss, "slo_miss_shape", counted)
    ctx = Cluster(duration_s=120, rate_rps=20.0, seed=3).context(slo_ttft_s=0.05)
    evidence = ctx.evidence
    assert not calls and "not read" in repr(evidence.slo_miss_later)
    shape = evidence.slo_miss
    assert calls == [1] and shape.ttft_missed and shape.stages
    assert evidence.slo_miss is shape and calls == [1]
    assert shape == real(ctx.dataset, evidence.slo, evidence.window)
