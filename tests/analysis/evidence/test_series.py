"""Per-bin request series of the cluster table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pdprobe.analysis.evidence.model import Window
from pdprobe.analysis.evidence.series import _request_series
from tests.rules.builders import make_dataset


def test_transfer_seconds_per_gb_median_per_bin() -> None:
    """The per-bin median of 1e9 * kv_transfer_s / kv_bytes (records without bytes, or 0
    bytes, left out), and the per-bin byte rate."""
    rng = np.random.default_rng(6)
    n = 600
    arrival = np.sort(rng.uniform(0.0, 300.0, n))
    kv = rng.uniform(1e6, 5e8, n)
    kv[::7] = 0.0
    kv[::11] = np.nan
    xfer = rng.uniform(0.001, 0.2, n)
    requests = pd.DataFrame({"arrival_ts": arrival, "prompt_tokens": 100, "output_tokens": 10,
                             "kv_bytes": kv, "kv_transfer_s": xfer})
    window = Window(0.0, 300.0, 30.0)
    out = pd.DataFrame(index=pd.Index(window.bin_ts, name="ts"))
    _request_series(make_dataset(requests), window, out)
    bins = np.clip(np.floor(arrival / 30.0), 0, window.n_bins - 1)
    per_gb = pd.Series(1e9 * xfer / np.where(kv > 0, kv, np.nan))
    want = per_gb.groupby(bins).median().reindex(range(window.n_bins))
    np.testing.assert_array_equal(out["xfer_s_per_gb_p50"].to_numpy(), want.to_numpy())
    rate = pd.Series(kv).groupby(bins).sum(min_count=1).reindex(range(window.n_bins)) / 30.0
    np.testing.assert_allclose(out["kv_bytes_per_s"].to_numpy(), rate.to_numpy(), rtol=1e-12)
