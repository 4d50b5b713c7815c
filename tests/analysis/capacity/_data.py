"""Small generated inputs for the capacity-model tests."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from pdprobe.analysis.capacity.mix import WorkloadMix
from pdprobe.analysis.capacity.perf_busy import BUSY_GAP_TOLERANCE_S, BusyPeriods
from pdprobe.analysis.capacity.perf_fit import DecodeModel, PrefillModel
from pdprobe.analysis.capacity.rates import ModelInputs
from pdprobe.analysis.capacity.transfer import KvBytes
from pdprobe.dataset import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    NETWORK_COLUMNS,
    REQUEST_COLUMNS,
    Dataset,
    InstanceInfo,
    conform,
    empty_frame,
)


def dataset(requests: Mapping[str, object] | pd.DataFrame | None = None, *,
            metrics: pd.DataFrame | None = None, network: pd.DataFrame | None = None,
            instances: tuple[InstanceInfo, ...] = ()) -> Dataset:
    frame = pd.DataFrame(requests) if requests is not None else pd.DataFrame()
    cols = frozenset(frame.columns) & frozenset(REQUEST_COLUMNS)
    req = conform(frame, REQUEST_COLUMNS) if len(frame) else empty_frame(REQUEST_COLUMNS)
    return Dataset(
        requests=req,
        metrics=conform(metrics, METRIC_COLUMNS) if metrics is not None else empty_frame(METRIC_COLUMNS),
        network=conform(network, NETWORK_COLUMNS) if network is not None else empty_frame(NETWORK_COLUMNS),
        events=empty_frame(EVENT_COLUMNS),
        instances=instances,
        sources=(),
        request_columns=cols,
    )


def mix(prompt: list[float] | np.ndarray, output: list[float] | np.ndarray, rate: float = 1.0,
        cached: list[float] | np.ndarray | None = None, ca2: float = 1.0) -> WorkloadMix:
    p = np.asarray(prompt, dtype=np.float64)
    o = np.asarray(output, dtype=np.float64)
    c = np.zeros(len(p)) if cached is None else np.asarray(cached, dtype=np.float64)
    return WorkloadMix(p, c, o, rate, ca2, "test", "test mix")


def simple_model(*, pa: float = 0.0, pb: float = 1e-4, pc: float = 0.0, budget: int = 8192,
                 da: float = 0.01, db: float = 0.0, dc: float = 0.0, max_batch: int = 256,
                 kv_tokens: int = 10**9, bpt: float = 1000.0, link: float = 1e12,
                 base_latency: float = 0.0) -> ModelInputs:
    return ModelInputs(PrefillModel(pa, pb, pc, budget), DecodeModel(da, db, dc, max_batch, kv_tokens),
                       KvBytes(bpt, "uncached", "test"), link, base_latency)


def round_robin_waits(ts: np.ndarray, service: np.ndarray, servers: int) -> np.ndarray:
    """Waits when request i goes to instance i mod ``servers``, each a FIFO queue (Lindley):
    what vLLM's round-robin disaggregated proxy gives."""
    wait = np.zeros(len(ts))
    for k in range(servers):
        free = -np.inf
        for i in range(k, len(ts), servers):
            start = max(ts[i], free)
            wait[i] = start - ts[i]
            free = start + service[i]
    return wait


def busy_prompts_requests(seed: int = 3, n: int = 4000) -> pd.DataFrame:
    """Request records arriving at 60 req/s with lognormal prompts (median 1,500 tokens),
    in arrival order: about 0.2 s of prefill each under ``simple_model(pb=8e-5)``."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.uniform(0, n / 60.0, n))
    prompt = np.clip(np.rint(rng.lognormal(np.log(1500), 1.0, n)), 1, 30000)
    return pd.DataFrame({"arrival_ts": ts, "prompt_tokens": prompt, "output_tokens": 100})


def busy_prompts_mix(seed: int = 3, n: int = 4000) -> tuple[np.ndarray, WorkloadMix]:
    """The arrivals of ``busy_prompts_requests`` and their mix: a pool of ~16 kept busy."""
    from pdprobe.analysis.capacity.mix import mix_from_requests

    req = busy_prompts_requests(seed, n)
    return req["arrival_ts"].to_numpy(), mix_from_requests(
        req, rate_rps=None, timescale_s=2.0, description="t", rescale=False)


def alone_reference(req: pd.DataFrame, periods: BusyPeriods | None = None) -> np.ndarray:
    """Which requests' prefills overlapped (or touched, within ``BUSY_GAP_TOLERANCE_S``) no
    other on their instance, the plain pandas way (sort, running maximum, groupby), as a
    mask of every request: the ground truth for ``perf_busy.isolated_rows``. With sampled
    ``periods``, of their observed requests only (those whose neighbours are all known)."""
    start = req["arrival_ts"].astype(float) + req["queue_s"].astype(float)
    frame = pd.DataFrame({"inst": req["prefill_instance"].astype("string"), "start": start,
                          "end": start + req["prefill_s"].astype(float),
                          "row": np.arange(len(req))})
    frame = frame.dropna().sort_values(["inst", "start"], kind="stable")
    reach = frame.groupby("inst")["end"].cummax()
    before = reach.groupby(frame["inst"]).shift(1)
    # a start within the tolerance of the reach continues the period (timestamp rounding)
    period = np.cumsum(before.isna() | (frame["start"] > before + BUSY_GAP_TOLERANCE_S))
    sizes = frame.groupby(period.to_numpy())["row"].transform("size")
    alone = np.zeros(len(req), dtype=bool)
    alone[frame.loc[sizes.to_numpy() == 1, "row"].to_numpy()] = True
    if periods is not None and periods.observed is not None:
        observed = np.zeros(len(req), dtype=bool)
        observed[periods.row[periods.observed]] = True
        alone &= observed
    return alone
