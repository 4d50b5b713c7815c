"""The evidence means the same at every table size: a sampled grouping (forced far below its
thresholds) gives each column the source and meaning the exact one gives."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rules.builders import Cluster


def _sample_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampling thresholds far below a test cluster's rows."""
    from pdprobe.analysis import grouped

    monkeypatch.setattr(grouped, "QUANTILE_EXACT_ROWS", 10_000)
    monkeypatch.setattr(grouped, "GROUP_SAMPLE_MAX", 2_000)
    monkeypatch.setattr(grouped, "CELL_SAMPLE_MAX", 200)
    monkeypatch.setattr(grouped, "COLUMN_SAMPLE_ROWS", 8_000)


def test_prefill_transfer_p90_from_the_records_exact_and_sampled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With kv_transfer_s in the records (and KV-transfer histograms beside them) every
    instance's xfer_s_p90 is the records' p90 on an exact and on a sampled grouping alike,
    never a fallback to the histograms or gauges on the sampled one only."""
    cluster = Cluster(duration_s=400, rate_rps=60.0, seed=5)
    exact = cluster.context()
    _sample_small(monkeypatch)
    sampled = cluster.context()
    assert len(sampled.dataset.requests) > 20_000
    a, b = exact.evidence.instances, sampled.evidence.instances
    prefill = list(exact.evidence.names("prefill"))
    assert prefill
    assert (a["xfer_s_p90_source"] == "request records").all()
    assert (b["xfer_s_p90_source"] == a["xfer_s_p90_source"]).all()
    req = exact.dataset.requests
    for name in prefill:
        mine = req.loc[(req["prefill_instance"] == name).to_numpy(), "kv_transfer_s"]
        assert a.loc[name, "xfer_s_p90"] == pytest.approx(float(mine.quantile(0.9)))
    np.testing.assert_allclose(b["xfer_s_p90"], a["xfer_s_p90"], rtol=0.05)
