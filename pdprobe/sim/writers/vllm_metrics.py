"""vLLM 0.33's metric families (``vllm:*``) from the simulated engine's scrapes.

What a vLLM instance observes in P/D mode: on a decode instance TTFT runs from the decode
request's arrival (the end of prefill) and includes the KV transfer; the prefill instance serves
a one-token request. The KV connector's families follow the configured connector (Mooncake or
NIXL). Written by ``pdprobe.sim.writers.openmetrics``.
"""

from __future__ import annotations

from collections.abc import Sequence
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

VLLM_BLOCK_TOKENS: Final = 16  # vLLM's default KV block size; one descriptor per block


def vllm_families(result: SimResult, sc: Scrapes) -> list[str]:
    r = request_columns(result)
    cfg = result.config
    out = [
        scalar_family(sc, "vllm:num_requests_running", "gauge",
                       "Number of requests in model execution batches.", PD,
                       [((), f("running"))]),
        scalar_family(sc, "vllm:num_requests_waiting", "gauge",
                       "Number of requests waiting to be processed.", PD,
                       [((), lambda X: X[:, F["waiting"]] + X[:, F["deferred"]])]),
        scalar_family(sc, "vllm:num_requests_waiting_by_reason", "gauge",
                       "Number of waiting requests by reason.", PD,
                       [((("reason", "capacity"),), f("waiting")),
                        ((("reason", "deferred"),), f("deferred"))]),
        scalar_family(sc, "vllm:num_requests_kv_fetch_by_stage", "gauge",
                       "Number of waiting requests by async KV load stage.", D,
                       [((("stage", "waiting_to_start"),), zero),
                        ((("stage", "in_progress"),), f("kv_fetch_in_progress")),
                        ((("stage", "completed_waiting"),), f("kv_fetch_completed"))]),
        scalar_family(sc, "vllm:kv_cache_usage_perc", "gauge",
                       "KV-cache usage. 1 means 100 percent usage.", PD,
                       [((), ratio("kv_used_tokens", "kv_capacity_tokens"))]),
        scalar_family(sc, "vllm:prefix_cache_queries_total", "counter",
                       "Prefix cache queries, in terms of number of queried tokens.", PD,
                       [((), f("prefix_queries"))]),
        scalar_family(sc, "vllm:prefix_cache_hits_total", "counter",
                       "Prefix cache hits, in terms of number of cached tokens.", PD,
                       [((), f("prefix_hits"))]),
        scalar_family(sc, "vllm:external_prefix_cache_queries_total", "counter",
                       "External prefix cache queries from KV connector cross-instance cache "
                       "sharing, in terms of number of queried tokens.", D,
                       [((), f("ext_queries"))]),
        scalar_family(sc, "vllm:external_prefix_cache_hits_total", "counter",
                       "External prefix cache hits from KV connector cross-instance cache "
                       "sharing, in terms of number of cached tokens.", D,
                       [((), f("ext_hits"))]),
        scalar_family(sc, "vllm:num_preemptions_total", "counter",
                       "Cumulative number of preemption from the engine.", PD,
                       [((), f("preemptions"))]),
        scalar_family(sc, "vllm:prompt_tokens_total", "counter",
                       "Number of prefill tokens processed.", PD, [((), f("prompt_total"))]),
        scalar_family(sc, "vllm:prompt_tokens_by_source_total", "counter",
                       "Number of prompt tokens by source.", PD,
                       [((("source", "local_compute"),), f("prompt_computed")),
                        ((("source", "local_cache_hit"),), f("prompt_cached")),
                        ((("source", "external_kv_transfer"),), f("prompt_external"))]),
        scalar_family(sc, "vllm:prompt_tokens_cached_total", "counter",
                       "Number of cached prompt tokens (local + external).", PD,
                       [((), lambda X: X[:, F["prompt_cached"]] + X[:, F["prompt_external"]])]),
        scalar_family(sc, "vllm:generation_tokens_total", "counter",
                       "Number of generation tokens processed.", PD, [((), f("gen_total"))]),
        scalar_family(sc, "vllm:request_success_total", "counter",
                       "Count of successfully processed requests.", P,
                       [((("finished_reason", "length"),), f("fin_ok")),
                        ((("finished_reason", "abort"),), f("fin_abort")),
                        ((("finished_reason", "error"),), f("fin_err"))]),
        scalar_family(sc, "vllm:request_success_total", "counter",
                       "Count of successfully processed requests.", D,
                       [((("finished_reason", "stop"),), f("fin_ok")),
                        ((("finished_reason", "abort"),), f("fin_abort")),
                        ((("finished_reason", "error"),), f("fin_err"))]),
    ]
    # the two request_success_total parts are one family: drop the second header
    second = out.pop()
    out[-1] += second.split("\n", 2)[2]
    ttft_p = r["t_pend"] - r["arrival_s"]
    out += [
        obs_histogram(result, sc, "vllm:time_to_first_token_seconds",
                       "Histogram of time to first token in seconds.", P, BK.VLLM_TTFT,
                       prefill_obs(r, ttft_p)),
    ]
    out[-1] += obs_histogram(result, sc, "vllm:time_to_first_token_seconds", "", D,
                              BK.VLLM_TTFT,
                              decode_obs(r, r["t_first"], r["t_first"] - r["t_pend"])
                              ).split("\n", 2)[2]
    out.append(itl_histogram(result, sc, "vllm:inter_token_latency_seconds",
                              "Histogram of inter-token latency in seconds.", PD))
    pairs: list[tuple[str, str, Sequence[float], object, object]] = [
        ("vllm:request_time_per_output_token_seconds",
         "Histogram of time_per_output_token_seconds per request.", BK.VLLM_ITL,
         None, decode_obs(r, r["t_finish"], tpot(r))),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
         BK.VLLM_REQUEST_LATENCY, prefill_obs(r, ttft_p),
         decode_obs(r, r["t_finish"], r["t_finish"] - r["t_pend"])),
        ("vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.", BK.VLLM_REQUEST_LATENCY,
         prefill_obs(r, r["t_pstart"] - r["arrival_s"]),
         decode_obs(r, r["t_finish"], r["t_join"] - r["t_pend"])),
        ("vllm:request_inference_time_seconds",
         "Histogram of time spent in RUNNING phase for request.", BK.VLLM_REQUEST_LATENCY,
         prefill_obs(r, r["t_pend"] - r["t_pstart"]),
         decode_obs(r, r["t_finish"], r["t_finish"] - r["t_join"])),
        ("vllm:request_prefill_time_seconds",
         "Histogram of time spent in PREFILL phase for request.", BK.VLLM_REQUEST_LATENCY,
         prefill_obs(r, r["t_pend"] - r["t_pstart"]),
         decode_obs(r, r["t_finish"], r["t_first"] - r["t_join"])),
        ("vllm:request_decode_time_seconds",
         "Histogram of time spent in DECODE phase for request.", BK.VLLM_REQUEST_LATENCY,
         prefill_obs(r, np.zeros(r["arrival_s"].size)),
         decode_obs(r, r["t_finish"], r["t_finish"] - r["t_first"])),
    ]
    tokens = BK.vllm_request_tokens(cfg.profile.max_model_len)
    prompt = r["prompt"].astype(np.float64)
    pairs += [
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens,
         prefill_obs(r, prompt), decode_obs(r, r["t_finish"], prompt)),
        ("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens,
         prefill_obs(r, np.ones(prompt.size)),
         decode_obs(r, r["t_finish"], r["generated"].astype(np.float64))),
        ("vllm:request_prefill_kv_computed_tokens",
         "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokens,
         prefill_obs(r, prompt - r["cached_p"]),
         decode_obs(r, r["t_finish"], np.zeros(prompt.size))),
    ]
    for name, help_text, bounds, p_obs, d_obs in pairs:
        text = ""
        if p_obs is not None:
            text = obs_histogram(result, sc, name, help_text, P, bounds, p_obs)  # type: ignore[arg-type]
        d_text = obs_histogram(result, sc, name, help_text, D, bounds, d_obs)  # type: ignore[arg-type]
        out.append(text + d_text.split("\n", 2)[2] if text else d_text)
    out += _vllm_connector(result, sc, r)
    return out


def _vllm_connector(result: SimResult, sc: Scrapes, r: dict[str, npt.NDArray]) -> list[str]:
    """KV-connector families: Mooncake (push: observed on prefill) or NIXL (pull: on decode)."""
    conn = result.config.kv_connector
    side = "prefill" if conn == "mooncake" else "decode"
    roles = P if side == "prefill" else D
    xfer_s = r["t_kv"] - r["t_xfer"]
    sent_tokens = (r["prompt"] - r["cached_d"]).astype(np.float64)
    out = [
        obs_histogram(result, sc, f"vllm:{conn}_xfer_time_seconds",
                       "Histogram of transfer duration for KV cache transfers.", roles,
                       BK.VLLM_XFER_TIME, xfer_obs(r, xfer_s, side)),
        obs_histogram(result, sc, f"vllm:{conn}_bytes_transferred",
                       "Histogram of bytes transferred per KV cache transfers.", roles,
                       BK.VLLM_XFER_BYTES, xfer_obs(r, r["kv_bytes"], side)),
        obs_histogram(result, sc, f"vllm:{conn}_num_descriptors",
                       "Histogram of number of descriptors per KV cache transfers.", roles,
                       BK.VLLM_DESCRIPTORS,
                       xfer_obs(r, np.ceil(sent_tokens / VLLM_BLOCK_TOKENS), side)),
        scalar_family(sc, f"vllm:{conn}_num_failed_transfers_total", "counter",
                       "Number of failed KV cache transfers.", roles, [((), f("fin_err"))]),
        scalar_family(sc, f"vllm:{conn}_num_kv_expired_reqs_total", "counter",
                       "Number of requests that had their KV expire.", P, [((), zero)]),
    ]
    if conn == "mooncake":
        out.append(scalar_family(sc, "vllm:mooncake_num_failed_recvs_total", "counter",
                                  "Number of failed KV cache receives.", D, [((), f("fin_err"))]))
    return out
