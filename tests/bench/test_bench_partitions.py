"""bench/bench_partitions.py: every hour of the dataset comes from the same sized cluster."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bp() -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REPO / "bench"))  # it imports request_data as a sibling
        module = importlib.import_module("bench_partitions")
        yield module


def test_hours_share_one_sized_cluster(bp: Any) -> None:
    n = 50_000  # 13.9 req/s
    a, b = bp.hour_table(0, n), bp.hour_table(1, n)
    assert a.schema == b.schema
    assert [f.name for f in a.schema] == [
        "request_id", "arrival_ts", "prompt_tokens", "output_tokens", "prefill_instance",
        "decode_instance", "queue_s", "prefill_s", "kv_transfer_s", "kv_bytes", "ttft_s",
        "tpot_s", "e2e_s", "status"]
    assert a.schema.field("prefill_instance").type == pa.dictionary(pa.int32(), pa.string())
    n_prefill, n_decode = bp.pools(n)
    for table in (a, b):
        names = table.column("prefill_instance").combine_chunks().dictionary.to_pylist()
        assert names == [f"vllm-prefill-{i}" for i in range(n_prefill)]
        codes = table.column("prefill_instance").combine_chunks().indices.to_numpy()
        busy = np.bincount(codes, table.column("prefill_s").to_numpy()) / 3600.0
        assert 0.5 < busy.mean() < 0.75 and busy.max() < 0.8
        assert table.column("queue_s").to_numpy().min() >= 0
        assert np.bincount(table.column("decode_instance").combine_chunks().indices
                           .to_numpy()).size == n_decode
    assert np.all(np.diff(b.column("arrival_ts").to_numpy()) >= 0)
    assert b.column("arrival_ts").to_numpy()[0] >= bp.T0 + 3600
