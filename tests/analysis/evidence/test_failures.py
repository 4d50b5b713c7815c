"""Failure evidence from request records."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pdprobe.analysis.evidence.failures import _no_kv_share
from tests.rules.builders import make_dataset


def test_no_kv_share_counts_completed_records_only() -> None:
    """The share of completed (ok, with kv_bytes) records that moved no KV: records with a
    missing kv_bytes or another status do not count, on either side of the share."""
    kv = np.array([0.0, 10.0, np.nan, 0.0, 5.0, 0.0, 7.0])
    status = ["ok", "ok", "ok", "error", "ok", "ok", "timeout"]
    requests = pd.DataFrame({"arrival_ts": np.arange(7.0), "prompt_tokens": 10,
                             "output_tokens": 5, "kv_bytes": kv, "status": status})
    share = _no_kv_share(make_dataset(requests))
    done = ~np.isnan(kv) & (np.array(status) == "ok")
    assert share == float((kv[done] <= 0).mean()) == 2 / 4
    none_done = requests.assign(status="error")
    assert _no_kv_share(make_dataset(none_done)) is None
