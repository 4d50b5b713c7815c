"""SLO attainment per request and from histograms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdprobe import signals as S
from pdprobe.analysis.slo import slo_attainment
from pdprobe.collectors.fuse import fuse
from pdprobe.dataset import ROLE_FROM_LABEL, Partial, RoleHint, SourceInfo
from pdprobe.values import Missing


def _ds(requests=None, metrics=None, hints=()):
    return fuse([Partial(source=SourceInfo("t", "x", "x", 0), requests=requests, metrics=metrics,
                         role_hints=tuple(hints),
                         request_columns=frozenset(requests.columns) if requests is not None else frozenset())])


def test_per_request_attainment_counts_failures_and_single_token_requests() -> None:
    req = pd.DataFrame({
        "arrival_ts": np.arange(5.0), "prompt_tokens": [10] * 5, "output_tokens": [5, 5, 1, 5, 5],
        "ttft_s": [0.5, 1.5, 0.5, 0.5, np.nan], "tpot_s": [0.05, 0.05, np.nan, 0.2, np.nan],
        "status": ["ok", "ok", "ok", "ok", "error"],
    })
    res = slo_attainment(_ds(req), 1.0, 0.1)
    assert not isinstance(res, Missing)
    assert res.ttft == pytest.approx(3 / 5)  # the failed request misses
    assert res.tpot == pytest.approx(3 / 5)  # one-token request has no TPOT and meets it
    assert res.both == pytest.approx(2 / 5)
    assert res.method == "per-request"


def test_no_slo_given_is_missing_with_reason() -> None:
    req = pd.DataFrame({"arrival_ts": [1.0], "prompt_tokens": [1], "output_tokens": [1], "ttft_s": [0.1]})
    res = slo_attainment(_ds(req), None, None)
    assert isinstance(res, Missing) and "--slo-ttft" in res.reason


def test_histogram_attainment_prefers_decode_over_prefill() -> None:
    rows = []
    for inst, counts in (("dec", [80, 90, 100]), ("pre", [0, 0, 100])):
        for step, scale in enumerate((0, 1)):
            for le, c in zip([0.5, 1.0, float("inf")], counts, strict=True):
                rows.append({"ts": 100.0 + 15 * step, "instance": inst, "signal": S.TTFT_S,
                             "kind": S.BUCKET, "le": le, "value": float(c * scale)})
    hints = [RoleHint("dec", "decode", "t", ROLE_FROM_LABEL), RoleHint("pre", "prefill", "t", ROLE_FROM_LABEL)]
    res = slo_attainment(_ds(metrics=pd.DataFrame(rows), hints=hints), 0.5, None)
    assert not isinstance(res, Missing)
    assert res.ttft == pytest.approx(0.8)  # decode TTFT covers the whole request
    assert res.method == "histogram interpolation"
    assert isinstance(res.tpot, Missing)


def test_per_request_attainment_slice_by_slice_is_the_whole_mask_mean(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted over slices of 7 rows: the very shares of the full-length masks' means."""
    from pdprobe.analysis import row_slices

    rng = np.random.default_rng(3)
    n = 103
    req = pd.DataFrame({
        "arrival_ts": np.arange(float(n)), "prompt_tokens": [10] * n,
        "output_tokens": rng.integers(1, 4, n),
        "ttft_s": np.where(rng.random(n) < 0.1, np.nan, rng.random(n) * 2),
        "tpot_s": np.where(rng.random(n) < 0.2, np.nan, rng.random(n) * 0.2),
        "status": rng.choice(["ok", "ok", "error"], n),
    })
    failed = (req["status"] != "ok").to_numpy()
    ttft_ok = (req["ttft_s"].to_numpy() <= 1.0) & ~failed
    tpot = req["tpot_s"].to_numpy()
    tpot_ok = ((tpot <= 0.1) | ((req["output_tokens"].to_numpy() <= 1) & np.isnan(tpot))) & ~failed
    monkeypatch.setattr(row_slices, "CHUNK_ROWS", 7)
    res = slo_attainment(_ds(req), 1.0, 0.1)
    assert not isinstance(res, Missing)
    assert (res.ttft, res.tpot, res.both) == (float(ttft_ok.mean()), float(tpot_ok.mean()),
                                              float((ttft_ok & tpot_ok).mean()))
