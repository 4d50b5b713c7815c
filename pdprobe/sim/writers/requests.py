"""Per-request records with every canonical column (docs/contract.md), as JSONL or Parquet.

``arrival_ts`` is absolute Unix seconds (``start_ts`` + simulated time). Latencies follow the
request's life: ``queue_s`` until its first prefill chunk, ``prefill_s`` until its KV is ready
on the prefill instance, ``kv_transfer_s`` until the KV is usable on the decode instance
(including any wait for decode memory), ``ttft_s`` to the first output token. Failed and timed-
out requests keep their lengths and placement but no latencies; ``output_tokens`` counts what
was generated, so token totals match the engines' counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pdprobe.dataset import REQUEST_COLUMNS
from pdprobe.sim.engine import SimResult
from pdprobe.sim.state import STATUS_NAMES

if TYPE_CHECKING:
    import pandas as pd


def request_frame(result: SimResult, names: Sequence[str] | None = None) -> pd.DataFrame:
    """The canonical request table of a run (columns and dtypes of ``REQUEST_COLUMNS``).

    ``names`` are the instance names the records use, by instance index (default ``host:port``).
    """
    import pandas as pd

    r = result.requests
    cfg = result.config
    n = r["arrival_s"].size
    if names is None:
        names = [s.name for s in result.layout.instances]
    shown = np.array([*names, ""], dtype=object)
    ok = r["status"] == 0
    out = r["output"].astype(np.float64)
    tpot = np.where(out > 1, (r["t_finish"] - r["t_first"]) / np.maximum(out - 1, 1), np.nan)

    def when_ok(values: np.ndarray) -> np.ndarray:
        return np.where(ok, values, np.nan)

    ids = pd.Series(np.arange(n)).astype(str).str.zfill(6)
    frame = pd.DataFrame({
        "arrival_ts": cfg.start_ts + r["arrival_s"],
        "prompt_tokens": r["prompt"],
        "output_tokens": np.where(ok, r["output"], r["generated"]),
        "request_id": ("req-" + ids).to_numpy(),
        "cached_tokens": r["cached_p"].astype(np.float64),
        "prefill_instance": shown[r["p_inst"]],
        "decode_instance": shown[r["d_inst"]],
        "queue_s": r["t_pstart"] - r["arrival_s"],
        "prefill_s": r["t_pend"] - r["t_pstart"],
        "kv_transfer_s": r["t_kv"] - r["t_pend"],
        # a request decode prefilled itself (not-disaggregated) moved no KV: 0, not unknown
        "kv_bytes": np.where(np.isfinite(r["t_kv"]) | (r["status"] != 0) | (r["p_inst"] < 0),
                             r["kv_bytes"], np.nan),
        "ttft_s": when_ok(r["t_first"] - r["arrival_s"]),
        "tpot_s": when_ok(tpot),
        "e2e_s": when_ok(r["t_finish"] - r["arrival_s"]),
        "status": np.array(STATUS_NAMES, dtype=object)[r["status"]],
    })
    frame = frame.astype({k: v for k, v in REQUEST_COLUMNS.items() if k in frame.columns})
    return frame[list(REQUEST_COLUMNS)]


def write_requests(result: SimResult, out_dir: Path, fmt: str, compress: bool,
                   names: Sequence[str] | None = None) -> Path:
    """``requests.jsonl`` (``.gz``) or ``requests.parquet``; ``names`` as in ``request_frame``."""
    frame = request_frame(result, names)
    if fmt == "parquet":
        path = out_dir / "requests.parquet"
        frame.to_parquet(path, index=False, compression="zstd" if compress else "snappy")
        return path
    path = out_dir / ("requests.jsonl.gz" if compress else "requests.jsonl")
    frame.to_json(path, orient="records", lines=True, double_precision=6,
                  compression="gzip" if compress else None)
    return path
