"""bench/request_data.py: the benchmark's synthetic cluster is physically possible."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[2]
# Times rebuilt from the absolute arrival_ts (~1.7e9 s) carry its rounding, 2.4e-7 s.
ULP = 1e-6

# The columns and types the benchmarks (and the files other engineers measure) always had.
SCHEMA = [
    ("request_id", pa.string()), ("arrival_ts", pa.float64()), ("prompt_tokens", pa.int64()),
    ("output_tokens", pa.int64()), ("cached_tokens", pa.float64()),
    ("prefill_instance", pa.dictionary(pa.int32(), pa.string())),
    ("decode_instance", pa.dictionary(pa.int32(), pa.string())),
    ("queue_s", pa.float64()), ("prefill_s", pa.float64()), ("kv_transfer_s", pa.float64()),
    ("kv_bytes", pa.float64()), ("ttft_s", pa.float64()), ("tpot_s", pa.float64()),
    ("e2e_s", pa.float64()), ("status", pa.dictionary(pa.int32(), pa.string())),
]


@pytest.fixture(scope="module")
def rd() -> Any:
    spec = importlib.util.spec_from_file_location("request_data",
                                                  REPO / "bench" / "request_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table(rd: Any) -> pa.Table:
    # 200k rows span ~11 minutes: the swell's rise and its busiest minutes
    return rd.generate(200_000)


def _np(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).combine_chunks()
    if pa.types.is_dictionary(col.type):
        return col.indices.to_numpy()
    return col.to_numpy()


def _sequential_fifo(t: np.ndarray, alone: np.ndarray, batched: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The reference: one request after the other (a test-only loop)."""
    wait, service = np.zeros(t.size), np.zeros(t.size)
    end = -np.inf
    for i in range(t.size):
        start = max(t[i], end)
        wait[i] = start - t[i]
        service[i] = alone[i] if wait[i] == 0 else batched[i]
        end = start + service[i]
    return wait, service


def test_columns_and_types_as_before(table: pa.Table, rd: Any) -> None:
    assert [(f.name, f.type) for f in table.schema] == SCHEMA
    assert table.num_rows == 200_000
    assert table.column("prefill_instance").combine_chunks().dictionary.to_pylist() == [
        f"vllm-prefill-{i}" for i in range(rd.PREFILL)]
    assert table.column("status").combine_chunks().dictionary.to_pylist() == [
        "ok", "error", "timeout", "aborted"]
    assert np.all(np.diff(_np(table, "arrival_ts")) >= 0)


def test_prefill_instances_are_never_more_than_busy(table: pa.Table, rd: Any) -> None:
    t = _np(table, "arrival_ts") - rd.START_TS
    inst, queue, service = _np(table, "prefill_instance"), _np(table, "queue_s"), \
        _np(table, "prefill_s")
    assert queue.min() >= 0 and service.min() > 0
    for j in range(rd.PREFILL):
        rows = inst == j
        start = t[rows] + queue[rows]
        end = start + service[rows]
        # first come, first served: each starts when it arrived or when the one before ended
        assert np.all(start[1:] >= end[:-1] - ULP)
        assert np.allclose(start[1:], np.maximum(t[rows][1:], end[:-1]), rtol=0, atol=ULP)
        # busy fraction below 1 over the window and in its busiest minute
        assert service[rows].sum() / (end[-1] - t[rows][0]) < 1.0
    per_minute = np.bincount((t // 60).astype(np.int64), service) / (60.0 * rd.PREFILL)
    assert per_minute[:-1].max() < 0.9  # sized with headroom at the swell's peak
    assert 0.5 < service.sum() / (t[-1] - t[0]) / rd.PREFILL < 0.8


def test_queue_is_the_fifo_recursion(table: pa.Table, rd: Any) -> None:
    t = _np(table, "arrival_ts") - rd.START_TS
    inst = _np(table, "prefill_instance")
    prompt, cached = _np(table, "prompt_tokens"), _np(table, "cached_tokens")
    alone, batched = rd.prefill_costs(np.maximum(prompt - cached, 1.0), cached)
    for j in (0, 57, rd.PREFILL - 1):
        rows = inst == j
        wait, service = _sequential_fifo(t[rows], alone[rows], batched[rows])
        assert np.allclose(_np(table, "queue_s")[rows], wait, rtol=0, atol=ULP)
        assert np.array_equal(_np(table, "prefill_s")[rows], service)
        assert 0 < (wait == 0).mean() < 1  # some ran alone, some queued


def test_fifo_queue_matches_the_loop_near_saturation(rd: Any) -> None:
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.exponential(1.0, 5000))
    batched = rng.lognormal(np.log(0.8), 1.0, 5000) * 0.95 / np.exp(0.5)  # 95 % busy
    alone = batched + rng.uniform(0, 0.3, 5000)
    wait, service = rd.fifo_queue(t, alone, batched)
    ref_wait, ref_service = _sequential_fifo(t, alone, batched)
    assert np.allclose(wait, ref_wait, rtol=0, atol=1e-9)
    assert np.array_equal(service, ref_service)


def test_times_add_up(table: pa.Table, rd: Any) -> None:
    ttft = _np(table, "queue_s") + _np(table, "prefill_s") + _np(table, "kv_transfer_s") \
        + rd.TTFT_OVERHEAD_S
    assert np.allclose(_np(table, "ttft_s"), ttft, rtol=1e-12)
    e2e = _np(table, "ttft_s") + _np(table, "tpot_s") * (_np(table, "output_tokens") - 1)
    assert np.allclose(_np(table, "e2e_s"), e2e, rtol=1e-12)
    assert np.mean(_np(table, "ttft_s") <= 2.0) > 0.9  # the cluster meets a 2 s TTFT p90


def test_decode_batch_is_littles_law(table: pa.Table, rd: Any) -> None:
    t = _np(table, "arrival_ts") - rd.START_TS
    inst, tpot = _np(table, "decode_instance"), _np(table, "tpot_s")
    prompt, output = _np(table, "prompt_tokens"), _np(table, "output_tokens")
    minute = (t // 60).astype(np.int64)
    slow = np.where(np.arange(rd.DECODE) == rd.STRAGGLER, rd.STRAGGLER_STEP_FACTOR, 1.0)
    step = rd.decode_step_s(inst, minute, prompt, output, slow)
    # per instance and minute: batch = tokens asked per second x step, and the step is the
    # profile's step at that batch and its context
    key = inst.astype(np.int64) * (minute.max() + 1) + minute
    first = np.unique(key, return_index=True)[1]
    steps = (output - 1).astype(float)
    asked = np.bincount(key, steps)[key[first]] / rd.DECODE_BIN_S
    ctx = np.bincount(key, steps * (prompt + output / 2.0))[key[first]] / (asked * 60.0)
    tau = step[first]
    batch = asked * tau
    f = slow[inst[first]]
    expected = f * (rd.DECODE_A_S + rd.DECODE_B_S_PER_CTX_TOKEN * batch * ctx
                    + rd.DECODE_C_S_PER_SEQ * batch)
    assert np.allclose(tau, expected, rtol=1e-9)
    # plausible batches, KV within the cache, and the one straggler ~1.5x+ slower
    whole = minute[first] < minute.max()
    assert batch[whole].max() < rd.PROFILE.decode_max_batch  # 256
    assert (batch * ctx)[whole].max() < 0.9 * rd.PROFILE.kv_capacity_tokens  # 450,000
    medians = np.array([np.median(tpot[inst == j]) for j in range(rd.DECODE)])
    peers = np.median(np.delete(medians, rd.STRAGGLER))
    assert medians[rd.STRAGGLER] > 1.5 * peers
    assert np.all(np.delete(medians, rd.STRAGGLER) < 1.3 * peers)


def test_an_overloaded_decode_pool_is_refused(rd: Any) -> None:
    n = 60_000  # all in one minute on 2 instances: far beyond their throughput
    with pytest.raises(ValueError, match="decode instances"):
        rd.decode_step_s(np.arange(n, dtype=np.int32) % 2, np.zeros(n, dtype=np.int64),
                         np.full(n, 3000), np.full(n, 300), np.ones(2))


def test_seeded(rd: Any) -> None:
    assert rd.generate(5000).equals(rd.generate(5000))
