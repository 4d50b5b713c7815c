"""Failure evidence from request records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

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
    # every record's bytes known (the done records counted per status value) or -inf; OK/ok
    for third, want in ((3.0, 1 / 4), (-np.inf, 1 / 3)):
        known = requests.assign(kv_bytes=[0.0, 10.0, third, 0.0, 5.0, 0.0, 7.0],
                                status=["ok", "OK", "ok", "error", "ok", None, "timeout"])
        kv_k, status_k = known["kv_bytes"].to_numpy(), known["status"].str.lower().to_numpy()
        done = np.isfinite(kv_k) & (status_k == "ok")
        for frame in (known, known.assign(status=known["status"].astype("category"))):
            assert _no_kv_share(make_dataset(frame)) == float((kv_k[done] <= 0).mean()) == want


@pytest.mark.parametrize("with_status", [True, False])
@pytest.mark.parametrize("kv_case", ["finite", "nan", "inf", "-inf", "none_done"])
def test_no_kv_share_is_the_masked_share(kv_case: str, with_status: bool) -> None:
    """The share of done records (bytes finite; status ok when there is a status column)
    without bytes (at most 0): the very share of masking every row, with bytes finite, NaN
    or infinite, zeros and negatives among them, and no status column (every row done when
    every value is finite: the sum proves it)."""
    rng = np.random.default_rng(5)
    n = 300
    kv = rng.integers(1, 1 << 20, n).astype(np.float64)
    kv[rng.random(n) < 0.2] = 0.0
    kv[[3, 50]] = -1.0
    if kv_case in ("nan", "inf", "-inf"):
        kv[[7, 8, 200]] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[kv_case]
    if kv_case == "none_done":
        kv[:] = np.nan
    status = rng.choice(["ok", "OK", "error", "timeout"], n)
    requests = pd.DataFrame({"arrival_ts": np.arange(n, dtype=np.float64),
                             "prompt_tokens": 10, "output_tokens": 5, "kv_bytes": kv})
    if with_status:
        requests["status"] = status
    done = np.isfinite(kv)
    if with_status:
        done &= np.char.lower(status.astype(str)) == "ok"
    want = float(np.count_nonzero(done & (kv <= 0)) / np.count_nonzero(done)) \
        if done.any() else None
    assert _no_kv_share(make_dataset(requests)) == want


def test_records_counts_errors_not_ok_and_hand_off_failures() -> None:
    """Records, those with status error (any case) and not ok, and the errors at the hand-off
    (prefill done, no first token): counted from the status values and the error rows."""
    from pdprobe.analysis.evidence.failures import _records

    status = ["ok", "error", "ERROR", "timeout", "aborted", "ok", "error", None]
    prefill = [0.1, 0.2, np.nan, 0.1, 0.1, 0.1, 0.3, 0.1]
    ttft = [0.5, np.nan, np.nan, np.nan, 0.4, 0.6, 0.9, np.nan]
    requests = pd.DataFrame({"arrival_ts": np.arange(8.0), "prompt_tokens": 10,
                             "output_tokens": 5, "prefill_s": prefill, "ttft_s": ttft,
                             "status": status})
    got = _records(make_dataset(requests))
    assert got == (8, 3, 5, 8.0, 1)  # the hand-off: row 1 (row 2 never prefilled)
    assert _records(make_dataset(requests.assign(status="ok")))[1:] == (0, 0, 8.0, 0)
