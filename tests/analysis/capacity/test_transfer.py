"""KV bytes per token (model shape and measured) and link capacity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe.analysis import sampling
from pdprobe.analysis.capacity.transfer import (
    LINK_USABLE_FRACTION,
    KvBytes,
    kv_bytes_from_profile,
    link_capacity,
    measured_kv_bytes,
    profile_matching_kv_bytes,
)
from pdprobe.dataset import InstanceInfo
from pdprobe.profiles import DEEPSEEK_V3, LLAMA3_70B, QWEN3_235B, load_profile

from ._data import dataset


def test_kv_bytes_llama3_70b() -> None:
    # 2 (K and V) * 80 layers * 8 KV heads * 128 dims * 2 bytes
    assert LLAMA3_70B.kv_bytes_per_token_logical() == 327_680
    assert LLAMA3_70B.kv_bytes_per_token_physical(4) == 327_680
    assert LLAMA3_70B.kv_bytes_per_token_physical(8) == 327_680
    kv = kv_bytes_from_profile(load_profile("llama3-70b-h100-tp4"))
    assert kv.bytes_per_token == 327_680
    assert kv.basis == "uncached"


def test_kv_bytes_qwen3_235b_replicated_at_tp8() -> None:
    assert QWEN3_235B.kv_bytes_per_token_logical() == 192_512
    # 4 KV heads on 8 ranks: every rank holds one head, twice the logical volume moves
    assert QWEN3_235B.kv_bytes_per_token_physical(8) == 385_024
    # Mooncake's measurement: 12.62 GB for a 32K-token prompt
    assert pytest.approx(12.62, abs=0.01) == 385_024 * 32_768 / 1e9
    kv = kv_bytes_from_profile(load_profile("qwen3-235b-h20-tp8"))
    assert kv.bytes_per_token == 385_024
    assert "replicated" in kv.source


def test_kv_bytes_mla_not_sharded() -> None:
    # 61 layers * (512 latent + 64 rope) * 2 bytes ~ 70 KB
    assert DEEPSEEK_V3.kv_bytes_per_token_physical(8) == 61 * 576 * 2
    assert "MLA" in kv_bytes_from_profile(load_profile("deepseek-v3-h200-tp8")).source


def test_measured_kv_bytes_picks_the_basis_that_fits() -> None:
    rng = np.random.default_rng(0)
    prompt = rng.integers(1000, 9000, 50)
    cached = (prompt * rng.uniform(0, 0.8, 50)).astype(int)
    ds = dataset({"arrival_ts": np.arange(50.0), "prompt_tokens": prompt, "output_tokens": 10,
                  "cached_tokens": cached, "kv_bytes": (prompt - cached) * 1000.0})
    kv = measured_kv_bytes(ds)
    assert not isinstance(kv, str)
    assert kv.basis == "uncached"
    assert kv.bytes_per_token == pytest.approx(1000.0)
    ds2 = dataset({"arrival_ts": np.arange(50.0), "prompt_tokens": prompt, "output_tokens": 10,
                   "cached_tokens": cached, "kv_bytes": prompt * 327_680.0})
    kv2 = measured_kv_bytes(ds2)
    assert not isinstance(kv2, str)
    assert kv2.basis == "prompt"
    assert kv2.bytes_per_token == pytest.approx(327_680)
    assert profile_matching_kv_bytes(kv2.bytes_per_token).name == "llama3-70b-h100-tp4"
    assert profile_matching_kv_bytes(385_024 * 1.01).name == "qwen3-235b-h20-tp8"
    assert profile_matching_kv_bytes(123.0) is None


def test_measured_kv_bytes_needs_data() -> None:
    ds = dataset({"arrival_ts": [0.0], "prompt_tokens": [10], "output_tokens": [5]})
    assert isinstance(measured_kv_bytes(ds), str)


def test_link_capacity_from_port_rates_shared_by_instances() -> None:
    rows = []
    for node in ("n1", "n2"):
        for dev in ("mlx5_0", "mlx5_1"):
            rows.append({"ts": 100.0, "node": node, "device": dev, "port": "1",
                         "signal": "link_rate_bytes_per_s", "kind": "gauge", "value": 50e9})
            rows.append({"ts": 100.0, "node": node, "device": dev, "port": "1",
                         "signal": "port_state", "kind": "gauge", "value": 4.0})
    # a down port on n2 does not count
    rows.append({"ts": 100.0, "node": "n2", "device": "mlx5_2", "port": "1",
                 "signal": "link_rate_bytes_per_s", "kind": "gauge", "value": 50e9})
    rows.append({"ts": 100.0, "node": "n2", "device": "mlx5_2", "port": "1",
                 "signal": "port_state", "kind": "gauge", "value": 1.0})
    insts = (InstanceInfo("n1:8000", "prefill", "t", node="n1"),
             InstanceInfo("n1:8001", "prefill", "t", node="n1"),
             InstanceInfo("n2:8000", "decode", "t", node="n2"))
    ds = dataset(network=pd.DataFrame(rows), instances=insts)
    cap = link_capacity(ds, load_profile("llama3-70b-h100-tp4"))
    # n1: 100 GB/s * 0.8 shared by 2 instances = 40; n2: 80 for one; median 60
    assert cap.bytes_per_s == pytest.approx(np.median([100e9 * LINK_USABLE_FRACTION / 2,
                                                       100e9 * LINK_USABLE_FRACTION]))
    assert "measured on 2 nodes" in cap.source


def test_link_capacity_falls_back_to_profile() -> None:
    p = load_profile("llama3-8b-h100")
    cap = link_capacity(dataset(), p)
    assert cap.bytes_per_s == p.link_bytes_per_s
    assert p.name in cap.source


@pytest.mark.parametrize("chunk", [5, 1 << 16])
def test_measured_kv_bytes_by_chunks_is_the_whole_array_figure(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Ratios and sums a chunk at a time (unusable rows skipped) give the whole arrays'
    basis and bytes per token to the bit."""
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    rng = np.random.default_rng(4)
    n = 3000
    prompt = rng.integers(1, 8000, n)
    cached = np.where(rng.random(n) < 0.3, np.nan, np.floor(prompt * rng.uniform(0, 0.9, n)))
    kv = (prompt - np.nan_to_num(cached)) * 131072.0 * rng.uniform(0.97, 1.03, n)
    kv[rng.random(n) < 0.05] = np.nan
    kv[rng.random(n) < 0.02] = 0.0
    got = measured_kv_bytes(dataset({"arrival_ts": np.arange(n, dtype=float),
                                     "prompt_tokens": prompt, "output_tokens": 10,
                                     "cached_tokens": cached, "kv_bytes": kv}))
    ok = np.isfinite(kv) & (kv > 0)
    p, c, b = prompt[ok].astype(float), np.nan_to_num(cached[ok], nan=0.0), kv[ok]
    u = np.maximum(p - c, 1.0)
    assert isinstance(got, KvBytes) and got.basis == "uncached" and got.n == int(ok.sum())
    assert float(np.std(b / u) / np.mean(b / u)) < float(np.std(b / p) / np.mean(b / p))
    assert got.bytes_per_token == float(b.sum() / u.sum())
    # moved with the whole prompt (every row usable): the prompt basis, to the bit
    kv = prompt * 131072.0 * rng.uniform(0.97, 1.03, n)
    got = measured_kv_bytes(dataset({"arrival_ts": np.arange(n, dtype=float),
                                     "prompt_tokens": prompt, "output_tokens": 10,
                                     "cached_tokens": cached, "kv_bytes": kv}))
    assert isinstance(got, KvBytes) and got.basis == "prompt" and got.n == n
    assert got.bytes_per_token == float(kv.sum() / prompt.astype(float).sum())


@pytest.mark.parametrize("chunk", [5, 1 << 16])
def test_infinite_cached_tokens_count_as_numpys_nan_to_num_makes_them(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Chunks with no missing or infinite cached tokens are read without a copy; the others
    count NaN as 0 and infinities as the largest finite numbers, as before (a prompt less
    -inf cached tokens is a huge uncached count, not an infinite one)."""
    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    rng = np.random.default_rng(6)
    n = 400
    prompt = rng.integers(1, 8000, n)
    cached = np.floor(prompt * rng.uniform(0, 0.9, n))
    kv = (prompt - cached) * 65536.0 * rng.uniform(0.97, 1.03, n)
    cached[[3, 50]], cached[[7, 51]], cached[9] = np.nan, np.inf, -np.inf
    got = measured_kv_bytes(dataset({"arrival_ts": np.arange(n, dtype=float),
                                     "prompt_tokens": prompt, "output_tokens": 10,
                                     "cached_tokens": cached, "kv_bytes": kv}))
    p = prompt.astype(float)
    u = np.maximum(p - np.nan_to_num(cached, nan=0.0), 1.0)
    assert np.isfinite(u).all() and u.max() > 1e300
    cv_u, cv_p = (float(np.std(kv / x) / np.mean(kv / x)) for x in (u, p))
    basis = "uncached" if cv_u < cv_p else "prompt"
    assert isinstance(got, KvBytes) and got.basis == basis
    assert got.bytes_per_token == float(kv.sum() / (u if basis == "uncached" else p).sum())


@pytest.mark.parametrize("chunk", [7, 1 << 16])
def test_every_row_usable_spread_from_the_leaves_is_the_two_pass_one(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """With every row usable the ratios' squared deviations come from each leaf's own (one
    pass, no second read of the columns): the same as numpy's two passes up to rounding, and
    the same basis either way it fits."""
    from pdprobe.analysis.capacity.chunked import leaf_ranges
    from pdprobe.analysis.capacity.transfer import _combined_spread, _leaf_spread

    monkeypatch.setattr(sampling, "PASS_CHUNK", chunk)
    rng = np.random.default_rng(9)
    n = 2000
    by_p, by_u = rng.lognormal(3.0, 0.4, n), 1e5 + rng.normal(0.0, 1e-3, n)
    spreads = [_leaf_spread(hi - lo, float(by_p[lo:hi].sum()), float(by_u[lo:hi].sum()),
                            by_p[lo:hi].copy(), by_u[lo:hi].copy())
               for lo, hi in leaf_ranges(n)]
    sq_p, sq_u = _combined_spread(spreads, float(by_p.mean()), float(by_u.mean()))
    assert sq_p == pytest.approx(float(np.sum((by_p - by_p.mean()) ** 2)), rel=1e-12)
    assert sq_u == pytest.approx(float(np.sum((by_u - by_u.mean()) ** 2)), rel=1e-9)
    prompt = rng.integers(2, 8000, n)
    cached = np.floor(prompt * rng.uniform(0, 0.9, n))
    for moved, basis in ((prompt - cached, "uncached"), (prompt, "prompt")):
        kv = moved * 131072.0 * rng.uniform(0.97, 1.03, n)
        got = measured_kv_bytes(dataset({"arrival_ts": np.arange(n, dtype=float),
                                         "prompt_tokens": prompt, "output_tokens": 10,
                                         "cached_tokens": cached, "kv_bytes": kv}))
        assert isinstance(got, KvBytes) and got.basis == basis and got.n == n
        assert got.bytes_per_token == float(kv.sum() / moved.astype(float).sum())
