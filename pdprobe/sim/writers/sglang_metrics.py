"""SGLang 0.5.23's metric families (``sglang:*``) from the simulated engine's scrapes.

SGLang's router sends a request to both servers at once, so the decode server's TTFT and E2E
cover the whole request; windowed ratios hold their last value while idle, as SGLang does.
Written by ``pdprobe.sim.writers.openmetrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.engine import F, SimResult
from pdprobe.sim.writers import buckets as BK
from pdprobe.sim.writers.metric_scrapes import (
    PD,
    D,
    P,
    Scrapes,
    decode_obs,
    f,
    itl_histogram,
    obs_histogram,
    prefill_obs,
    ratio,
    request_columns,
    scalar_family,
    tpot,
    xfer_obs,
    zero,
)

if TYPE_CHECKING:
    import numpy.typing as npt

MIB: Final = float(2**20)
GIB: Final = float(2**30)


def _windowed(num: str, den: str) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """Ratio of counter increases between scrapes; holds the last value when idle (SGLang
    reports the last prefill's hit rate and does not decay it)."""
    a, b = F[num], F[den]

    def fn(X: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        dn = np.diff(X[:, a], prepend=0.0)
        dd = np.diff(X[:, b], prepend=0.0)
        has = dd > 0
        vals = np.divide(dn, dd, out=np.zeros_like(dn), where=has)
        last = np.maximum.accumulate(np.where(has, np.arange(vals.size), -1))
        return np.where(last >= 0, vals[np.clip(last, 0, None)], 0.0)

    return fn


def _rate(field: str, interval_s: float) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    col = F[field]
    return lambda X: np.diff(X[:, col], prepend=0.0) / interval_s


def sglang_families(result: SimResult, sc: Scrapes) -> list[str]:
    from pdprobe.sim.config import SCRAPE_INTERVAL_S

    r = request_columns(result)
    stream = 'is_streaming="true"'
    out = [
        scalar_family(sc, "sglang:num_running_reqs", "gauge", "The number of running requests.",
                       PD, [((), f("running"))]),
        scalar_family(sc, "sglang:num_queue_reqs", "gauge",
                       "The number of requests in the waiting queue.", P, [((), f("waiting"))]),
        scalar_family(sc, "sglang:num_queue_reqs", "gauge", "", D,
                       [((), lambda X: X[:, F["kv_fetch_completed"]] + X[:, F["retracted"]])]),
        scalar_family(sc, "sglang:token_usage", "gauge", "The token usage.", PD,
                       [((), lambda X: np.round(ratio("kv_used_tokens", "kv_capacity_tokens")(X), 2))]),
        scalar_family(sc, "sglang:num_used_tokens", "gauge", "The number of used tokens.", PD,
                       [((), f("kv_used_tokens"))]),
        scalar_family(sc, "sglang:decode_sum_seq_lens", "gauge",
                       "The sum of all sequence lengths in decode.", D,
                       [((), f("context_tokens"))]),
        scalar_family(sc, "sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", PD,
                       [((), _windowed("prefix_hits", "prefix_queries"))]),
        scalar_family(sc, "sglang:gen_throughput", "gauge",
                       "The generation throughput (token/s).", D,
                       [((), _rate("gen_total", SCRAPE_INTERVAL_S))]),
        scalar_family(sc, "sglang:num_prefill_bootstrap_queue_reqs", "gauge",
                       "The number of requests in the prefill bootstrap queue.", P,
                       [((), f("bootstrap"))]),
        scalar_family(sc, "sglang:num_prefill_inflight_queue_reqs", "gauge",
                       "The number of requests in the prefill inflight queue.", P,
                       [((), f("inflight"))]),
        scalar_family(sc, "sglang:num_decode_prealloc_queue_reqs", "gauge",
                       "The number of requests in the decode prealloc queue.", D,
                       [((), f("waiting"))]),
        scalar_family(sc, "sglang:num_decode_transfer_queue_reqs", "gauge",
                       "The number of requests in the decode transfer queue.", D,
                       [((), f("kv_fetch_in_progress"))]),
        scalar_family(sc, "sglang:num_retracted_reqs", "gauge",
                       "The number of retracted requests.", D, [((), f("retracted"))]),
        scalar_family(sc, "sglang:prompt_tokens_total", "counter",
                       "Number of prefill tokens processed.", PD,
                       [((("is_streaming", "true"),), f("prompt_total"))]),
        scalar_family(sc, "sglang:generation_tokens_total", "counter",
                       "Number of generation tokens processed.", PD,
                       [((("is_streaming", "true"),), f("gen_total"))]),
        scalar_family(sc, "sglang:num_requests_total", "counter",
                       "Number of requests processed.", PD,
                       [((("is_streaming", "true"),), f("fin_ok"))]),
        scalar_family(sc, "sglang:cached_tokens_total", "counter",
                       "Number of cached prompt tokens.", PD,
                       [((("cache_source", "device"),), f("prompt_cached"))]),
        scalar_family(sc, "sglang:num_aborted_requests_total", "counter",
                       "Number of requests aborted.", PD,
                       [((), lambda X: X[:, F["fin_abort"]] + X[:, F["fin_err"]])]),
        scalar_family(sc, "sglang:num_bootstrap_failed_reqs_total", "counter",
                       "The number of bootstrap failed requests.", PD, [((), zero)]),
        scalar_family(sc, "sglang:num_transfer_failed_reqs_total", "counter",
                       "The number of transfer failed requests.", PD, [((), f("fin_err"))]),
        scalar_family(sc, "sglang:num_retracted_requests_total", "counter",
                       "Total number of retracted requests.", PD, [((), f("preemptions"))]),
    ]
    # merge the prefill and decode halves of sglang:num_queue_reqs into one family
    decode_half = out.pop(2)
    out[1] += decode_half.split("\n", 2)[2]
    ttft = obs_histogram(result, sc, "sglang:time_to_first_token_seconds",
                          "Histogram of time to first token in seconds.", P, BK.SGLANG_TTFT,
                          prefill_obs(r, r["t_pend"] - r["arrival_s"]), stream)
    ttft += obs_histogram(result, sc, "sglang:time_to_first_token_seconds", "", D,
                           BK.SGLANG_TTFT,
                           decode_obs(r, r["t_first"], r["t_first"] - r["arrival_s"]),
                           stream).split("\n", 2)[2]
    e2e = obs_histogram(result, sc, "sglang:e2e_request_latency_seconds",
                         "Histogram of End-to-end request latency in seconds", P, BK.SGLANG_E2E,
                         prefill_obs(r, r["t_pend"] - r["arrival_s"]), stream)
    e2e += obs_histogram(result, sc, "sglang:e2e_request_latency_seconds", "", D, BK.SGLANG_E2E,
                          decode_obs(r, r["t_finish"], r["t_finish"] - r["arrival_s"]),
                          stream).split("\n", 2)[2]
    queue = obs_histogram(result, sc, "sglang:queue_time_seconds",
                           "Histogram of queueing time in seconds.", P, BK.SGLANG_QUEUE,
                           prefill_obs(r, r["t_pstart"] - r["t_admit"]))
    queue += obs_histogram(result, sc, "sglang:queue_time_seconds", "", D, BK.SGLANG_QUEUE,
                            decode_obs(r, r["t_finish"], r["t_join"] - r["t_kv"])
                            ).split("\n", 2)[2]
    latency_s = r["t_kv"] - r["t_pend"]
    out += [
        ttft,
        itl_histogram(result, sc, "sglang:inter_token_latency_seconds",
                       "Histogram of inter-token latency in seconds.", D),
        obs_histogram(result, sc, "sglang:request_time_per_output_token_seconds",
                       "Histogram of time per output token in seconds.", D, BK.SGLANG_ITL,
                       decode_obs(r, r["t_finish"], tpot(r)), stream),
        e2e,
        queue,
        obs_histogram(result, sc, "sglang:kv_transfer_latency_ms",
                       "The transfer latency of the KV cache in ms.", P,
                       BK.SGLANG_XFER_LATENCY_MS, xfer_obs(r, latency_s * 1e3, "prefill")),
        obs_histogram(result, sc, "sglang:kv_transfer_speed_gb_s",
                       "The transfer speed of the KV cache in GB/s.", P,
                       BK.SGLANG_XFER_SPEED_GB_S,
                       xfer_obs(r, np.divide(r["kv_bytes"] / GIB, latency_s,
                                              out=np.full(latency_s.size, np.nan),
                                              where=latency_s > 0), "prefill")),
        obs_histogram(result, sc, "sglang:kv_transfer_total_mb",
                       "The total size of the KV cache transferred in MB.", P,
                       BK.SGLANG_XFER_TOTAL_MB, xfer_obs(r, r["kv_bytes"] / MIB, "prefill")),
    ]
    return out
