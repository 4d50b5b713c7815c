"""Engine metrics as OpenMetrics text with sample timestamps: vLLM 0.33 or SGLang 0.5.23 names.

Gauges and counters come from the engine's per-tick snapshots; histograms from the individual
observations (each request's TTFT, queue time, ... observed when the engine would observe it),
bucketed with the engines' real bounds; the inter-token-latency histogram from the decode steps.

What each side observes follows the engines in P/D mode: on a vLLM decode instance TTFT runs
from the decode request's arrival (the end of prefill) and includes the KV transfer; the prefill
instance serves a one-token request. SGLang's router sends a request to both servers at once, so
the decode server's TTFT and E2E cover the whole request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from pdprobe.sim.engine import F, SimResult
from pdprobe.sim.writers import buckets as BK
from pdprobe.sim.writers.common import (
    engine_labels,
    family_text,
    histogram_text,
    label_text,
    observations_matrix,
    open_out,
    out_name,
    scrape_offsets_s,
)

if TYPE_CHECKING:
    import numpy.typing as npt

VLLM_BLOCK_TOKENS: Final = 16  # vLLM's default KV block size; one descriptor per block
MIB: Final = float(2**20)
GIB: Final = float(2**30)

Matrix = "npt.NDArray[np.float64]"


@dataclass(frozen=True)
class Scrapes:
    """Which snapshots are scraped, when, and which instance series exist at each."""

    idx: npt.NDArray[np.int64]  # snapshot indices at multiples of the scrape interval
    t_s: npt.NDArray[np.float64]  # simulated time of each scrape
    ts: npt.NDArray[np.float64]  # [instance, scrape] Unix timestamps (with target offsets)
    alive: npt.NDArray[np.bool_]  # [instance, scrape]
    X: npt.NDArray[np.float64]  # [instance, scrape, field]
    roles: npt.NDArray[np.str_]  # per instance
    labels: list[str]  # label text (without braces) per instance


def scrapes(result: SimResult, interval_s: float, drop: tuple[str, ...] = ()) -> Scrapes:
    """The scraped snapshots; ``drop`` names labels left out (those Prometheus adds itself)."""
    cfg = result.config
    idx = np.flatnonzero(np.isclose(np.mod(result.tick_s, interval_s), 0.0))
    t_s = result.tick_s[idx]
    specs = result.layout.instances
    offsets = scrape_offsets_s([s.name for s in specs], cfg.seed)
    ts = cfg.start_ts + t_s[None, :] + offsets[:, None]
    alive = result.alive[idx].T.copy()
    X = np.transpose(result.inst[idx], (1, 0, 2))
    labels = [label_text([(k, v) for k, v in engine_labels(result, s) if k not in drop])[1:-1]
              for s in specs]
    return Scrapes(idx, t_s, ts, alive, X, np.array([s.role for s in specs]), labels)


def write_engine_metrics(result: SimResult, out_dir: Path, compress: bool) -> Path:
    """``metrics.om``: every engine instance's families, ``# EOF`` at the end."""
    from pdprobe.sim.config import SCRAPE_INTERVAL_S

    sc = scrapes(result, SCRAPE_INTERVAL_S)
    parts = _sglang(result, sc) if result.config.engine == "sglang" else _vllm(result, sc)
    path = out_dir / "metrics.om"
    with open_out(path, compress) as fh:
        for part in parts:
            fh.write(part)
        fh.write("# EOF\n")
    return out_name(path, compress)


def write_per_target_metrics(result: SimResult, out_dir: Path, compress: bool,
                             stems: Mapping[int, str] | None = None) -> list[Path]:
    """``metrics/<host>_<port>.prom`` (or ``stems[instance index]``): each engine target's
    scrapes, concatenated.

    What a scrape of the engine's ``/metrics`` endpoint holds: no ``instance`` or ``job`` label
    (Prometheus attaches those from the target at scrape time), sample timestamps kept so the
    concatenated scrapes stay a time series. Each file is one instance's share of the dump.
    """
    from dataclasses import replace

    from pdprobe.sim.config import SCRAPE_INTERVAL_S

    sc = scrapes(result, SCRAPE_INTERVAL_S, drop=("instance", "job"))
    metrics_dir = out_dir / "metrics"
    metrics_dir.mkdir(exist_ok=True)
    paths = []
    for spec in result.layout.instances:
        only = np.zeros_like(sc.alive)
        only[spec.index] = sc.alive[spec.index]  # the families write only unmasked cells
        one = replace(sc, alive=only)
        parts = _sglang(result, one) if result.config.engine == "sglang" else _vllm(result, one)
        stem = (stems or {}).get(spec.index, spec.file_stem)
        path = metrics_dir / f"{stem}.prom"
        with open_out(path, compress) as fh:
            for part in parts:
                fh.write(part)
            fh.write("# EOF\n")
        paths.append(out_name(path, compress))
    return paths


# --- building blocks ------------------------------------------------------------------------

Series = Sequence[tuple[tuple[tuple[str, str], ...], "Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]"]]


def _scalar_family(sc: Scrapes, name: str, kind: str, help_text: str, roles: tuple[str, ...],
                   series: Series) -> str:
    """A gauge/counter family: for each instance of ``roles``, one series per variant."""
    chosen = np.flatnonzero(np.isin(sc.roles, roles))
    prefixes: list[str] = []
    values = []
    masks = []
    times = []
    for i in chosen:
        for extra, fn in series:
            lab = sc.labels[i]
            if extra:
                lab = ",".join(sorted(lab.split(",") + [f'{k}="{v}"' for k, v in extra]))
            prefixes.append(f"{name}{{{lab}}}")
            values.append(fn(sc.X[i]))
            masks.append(sc.alive[i])
            times.append(sc.ts[i])
    if not prefixes:
        return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
    return family_text(name, kind, help_text, prefixes, np.vstack(values), np.vstack(times),
                       np.vstack(masks))


def f(field: str) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """A metric's value from one scrape column (``F[field]``) of the scrape matrix."""
    col = F[field]
    return lambda X: X[:, col]


def zero(X: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A metric that is always zero (a family the engine exports but the simulation does not drive)."""
    return np.zeros(X.shape[0])


def ratio(num: str, den: str) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """A metric that is the ratio of two scrape columns (zero where the denominator is)."""
    a, b = F[num], F[den]
    return lambda X: np.divide(X[:, a], X[:, b], out=np.zeros(X.shape[0]), where=X[:, b] > 0)


def _obs_histogram(result: SimResult, sc: Scrapes, name: str, help_text: str,
                   roles: tuple[str, ...], bounds: Sequence[float],
                   obs: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]],
                   extra: str = "") -> str:
    """A histogram family filled from observations ``(time_s, value, instance)``."""
    chosen = np.flatnonzero(np.isin(sc.roles, roles))
    series_of = np.full(len(sc.roles), -1, dtype=np.int64)
    series_of[chosen] = np.arange(chosen.size)
    t, v, inst = obs
    s = np.where(inst >= 0, series_of[np.clip(inst, 0, None)], -1)
    buckets, sums = observations_matrix(t, v, s, chosen.size, sc.t_s, bounds)
    labels = [sc.labels[i] + ("," + extra if extra else "") for i in chosen]
    labels = [",".join(sorted(lab.split(","))) for lab in labels]
    return histogram_text(name, help_text, labels, bounds, buckets, sums, sc.ts[chosen],
                          sc.alive[chosen])


def _itl_histogram(result: SimResult, sc: Scrapes, name: str, help_text: str,
                   roles: tuple[str, ...]) -> str:
    chosen = np.flatnonzero(np.isin(sc.roles, roles))
    buckets = np.transpose(result.itl_buckets[sc.idx], (1, 0, 2))[chosen]
    sums = result.itl_sum[sc.idx].T[chosen]
    return histogram_text(name, help_text, [sc.labels[i] for i in chosen], result.itl_bounds,
                          buckets, sums, sc.ts[chosen], sc.alive[chosen])


def _req(result: SimResult) -> dict[str, npt.NDArray]:
    return result.requests


def _prefill_obs(r: dict[str, npt.NDArray], value: npt.NDArray[np.float64],
                 ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Observed by the prefill instance when its leg ends."""
    done = np.isfinite(r["t_pend"])
    return (np.where(done, r["t_pend"], np.nan), np.where(done, value, np.nan), r["p_inst"])


def _decode_obs(r: dict[str, npt.NDArray], at: npt.NDArray[np.float64],
                value: npt.NDArray[np.float64],
                ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Observed by the decode instance at ``at`` for requests that finished there."""
    ok = (r["status"] == 0) & np.isfinite(r["t_finish"])
    return (np.where(ok, at, np.nan), np.where(ok, value, np.nan), r["d_inst"])


def _tpot(r: dict[str, npt.NDArray]) -> npt.NDArray[np.float64]:
    out = r["output"].astype(np.float64)
    return np.where(out > 1, (r["t_finish"] - r["t_first"]) / np.maximum(out - 1, 1), np.nan)


def _xfer_obs(r: dict[str, npt.NDArray], value: npt.NDArray[np.float64], side: str,
              ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """A successful KV transfer, observed when the KV arrived, on ``side``'s instance."""
    done = np.isfinite(r["t_kv"])
    inst = r["p_inst"] if side == "prefill" else r["d_inst"]
    return np.where(done, r["t_kv"], np.nan), np.where(done, value, np.nan), inst


# --- vLLM 0.33 -------------------------------------------------------------------------------

P, D, PD = ("prefill",), ("decode",), ("prefill", "decode")


def _vllm(result: SimResult, sc: Scrapes) -> list[str]:
    r = _req(result)
    cfg = result.config
    out = [
        _scalar_family(sc, "vllm:num_requests_running", "gauge",
                       "Number of requests in model execution batches.", PD,
                       [((), f("running"))]),
        _scalar_family(sc, "vllm:num_requests_waiting", "gauge",
                       "Number of requests waiting to be processed.", PD,
                       [((), lambda X: X[:, F["waiting"]] + X[:, F["deferred"]])]),
        _scalar_family(sc, "vllm:num_requests_waiting_by_reason", "gauge",
                       "Number of waiting requests by reason.", PD,
                       [((("reason", "capacity"),), f("waiting")),
                        ((("reason", "deferred"),), f("deferred"))]),
        _scalar_family(sc, "vllm:num_requests_kv_fetch_by_stage", "gauge",
                       "Number of waiting requests by async KV load stage.", D,
                       [((("stage", "waiting_to_start"),), zero),
                        ((("stage", "in_progress"),), f("kv_fetch_in_progress")),
                        ((("stage", "completed_waiting"),), f("kv_fetch_completed"))]),
        _scalar_family(sc, "vllm:kv_cache_usage_perc", "gauge",
                       "KV-cache usage. 1 means 100 percent usage.", PD,
                       [((), ratio("kv_used_tokens", "kv_capacity_tokens"))]),
        _scalar_family(sc, "vllm:prefix_cache_queries_total", "counter",
                       "Prefix cache queries, in terms of number of queried tokens.", PD,
                       [((), f("prefix_queries"))]),
        _scalar_family(sc, "vllm:prefix_cache_hits_total", "counter",
                       "Prefix cache hits, in terms of number of cached tokens.", PD,
                       [((), f("prefix_hits"))]),
        _scalar_family(sc, "vllm:external_prefix_cache_queries_total", "counter",
                       "External prefix cache queries from KV connector cross-instance cache "
                       "sharing, in terms of number of queried tokens.", D,
                       [((), f("ext_queries"))]),
        _scalar_family(sc, "vllm:external_prefix_cache_hits_total", "counter",
                       "External prefix cache hits from KV connector cross-instance cache "
                       "sharing, in terms of number of cached tokens.", D,
                       [((), f("ext_hits"))]),
        _scalar_family(sc, "vllm:num_preemptions_total", "counter",
                       "Cumulative number of preemption from the engine.", PD,
                       [((), f("preemptions"))]),
        _scalar_family(sc, "vllm:prompt_tokens_total", "counter",
                       "Number of prefill tokens processed.", PD, [((), f("prompt_total"))]),
        _scalar_family(sc, "vllm:prompt_tokens_by_source_total", "counter",
                       "Number of prompt tokens by source.", PD,
                       [((("source", "local_compute"),), f("prompt_computed")),
                        ((("source", "local_cache_hit"),), f("prompt_cached")),
                        ((("source", "external_kv_transfer"),), f("prompt_external"))]),
        _scalar_family(sc, "vllm:prompt_tokens_cached_total", "counter",
                       "Number of cached prompt tokens (local + external).", PD,
                       [((), lambda X: X[:, F["prompt_cached"]] + X[:, F["prompt_external"]])]),
        _scalar_family(sc, "vllm:generation_tokens_total", "counter",
                       "Number of generation tokens processed.", PD, [((), f("gen_total"))]),
        _scalar_family(sc, "vllm:request_success_total", "counter",
                       "Count of successfully processed requests.", P,
                       [((("finished_reason", "length"),), f("fin_ok")),
                        ((("finished_reason", "abort"),), f("fin_abort")),
                        ((("finished_reason", "error"),), f("fin_err"))]),
        _scalar_family(sc, "vllm:request_success_total", "counter",
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
        _obs_histogram(result, sc, "vllm:time_to_first_token_seconds",
                       "Histogram of time to first token in seconds.", P, BK.VLLM_TTFT,
                       _prefill_obs(r, ttft_p)),
    ]
    out[-1] += _obs_histogram(result, sc, "vllm:time_to_first_token_seconds", "", D,
                              BK.VLLM_TTFT,
                              _decode_obs(r, r["t_first"], r["t_first"] - r["t_pend"])
                              ).split("\n", 2)[2]
    out.append(_itl_histogram(result, sc, "vllm:inter_token_latency_seconds",
                              "Histogram of inter-token latency in seconds.", PD))
    pairs: list[tuple[str, str, Sequence[float], object, object]] = [
        ("vllm:request_time_per_output_token_seconds",
         "Histogram of time_per_output_token_seconds per request.", BK.VLLM_ITL,
         None, _decode_obs(r, r["t_finish"], _tpot(r))),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
         BK.VLLM_REQUEST_LATENCY, _prefill_obs(r, ttft_p),
         _decode_obs(r, r["t_finish"], r["t_finish"] - r["t_pend"])),
        ("vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.", BK.VLLM_REQUEST_LATENCY,
         _prefill_obs(r, r["t_pstart"] - r["arrival_s"]),
         _decode_obs(r, r["t_finish"], r["t_join"] - r["t_pend"])),
        ("vllm:request_inference_time_seconds",
         "Histogram of time spent in RUNNING phase for request.", BK.VLLM_REQUEST_LATENCY,
         _prefill_obs(r, r["t_pend"] - r["t_pstart"]),
         _decode_obs(r, r["t_finish"], r["t_finish"] - r["t_join"])),
        ("vllm:request_prefill_time_seconds",
         "Histogram of time spent in PREFILL phase for request.", BK.VLLM_REQUEST_LATENCY,
         _prefill_obs(r, r["t_pend"] - r["t_pstart"]),
         _decode_obs(r, r["t_finish"], r["t_first"] - r["t_join"])),
        ("vllm:request_decode_time_seconds",
         "Histogram of time spent in DECODE phase for request.", BK.VLLM_REQUEST_LATENCY,
         _prefill_obs(r, np.zeros(r["arrival_s"].size)),
         _decode_obs(r, r["t_finish"], r["t_finish"] - r["t_first"])),
    ]
    tokens = BK.vllm_request_tokens(cfg.profile.max_model_len)
    prompt = r["prompt"].astype(np.float64)
    pairs += [
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens,
         _prefill_obs(r, prompt), _decode_obs(r, r["t_finish"], prompt)),
        ("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens,
         _prefill_obs(r, np.ones(prompt.size)),
         _decode_obs(r, r["t_finish"], r["generated"].astype(np.float64))),
        ("vllm:request_prefill_kv_computed_tokens",
         "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokens,
         _prefill_obs(r, prompt - r["cached_p"]),
         _decode_obs(r, r["t_finish"], np.zeros(prompt.size))),
    ]
    for name, help_text, bounds, p_obs, d_obs in pairs:
        text = ""
        if p_obs is not None:
            text = _obs_histogram(result, sc, name, help_text, P, bounds, p_obs)  # type: ignore[arg-type]
        d_text = _obs_histogram(result, sc, name, help_text, D, bounds, d_obs)  # type: ignore[arg-type]
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
        _obs_histogram(result, sc, f"vllm:{conn}_xfer_time_seconds",
                       "Histogram of transfer duration for KV cache transfers.", roles,
                       BK.VLLM_XFER_TIME, _xfer_obs(r, xfer_s, side)),
        _obs_histogram(result, sc, f"vllm:{conn}_bytes_transferred",
                       "Histogram of bytes transferred per KV cache transfers.", roles,
                       BK.VLLM_XFER_BYTES, _xfer_obs(r, r["kv_bytes"], side)),
        _obs_histogram(result, sc, f"vllm:{conn}_num_descriptors",
                       "Histogram of number of descriptors per KV cache transfers.", roles,
                       BK.VLLM_DESCRIPTORS,
                       _xfer_obs(r, np.ceil(sent_tokens / VLLM_BLOCK_TOKENS), side)),
        _scalar_family(sc, f"vllm:{conn}_num_failed_transfers_total", "counter",
                       "Number of failed KV cache transfers.", roles, [((), f("fin_err"))]),
        _scalar_family(sc, f"vllm:{conn}_num_kv_expired_reqs_total", "counter",
                       "Number of requests that had their KV expire.", P, [((), zero)]),
    ]
    if conn == "mooncake":
        out.append(_scalar_family(sc, "vllm:mooncake_num_failed_recvs_total", "counter",
                                  "Number of failed KV cache receives.", D, [((), f("fin_err"))]))
    return out


# --- SGLang 0.5.23 ---------------------------------------------------------------------------

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


def _sglang(result: SimResult, sc: Scrapes) -> list[str]:
    from pdprobe.sim.config import SCRAPE_INTERVAL_S

    r = _req(result)
    stream = 'is_streaming="true"'
    out = [
        _scalar_family(sc, "sglang:num_running_reqs", "gauge", "The number of running requests.",
                       PD, [((), f("running"))]),
        _scalar_family(sc, "sglang:num_queue_reqs", "gauge",
                       "The number of requests in the waiting queue.", P, [((), f("waiting"))]),
        _scalar_family(sc, "sglang:num_queue_reqs", "gauge", "", D,
                       [((), lambda X: X[:, F["kv_fetch_completed"]] + X[:, F["retracted"]])]),
        _scalar_family(sc, "sglang:token_usage", "gauge", "The token usage.", PD,
                       [((), lambda X: np.round(ratio("kv_used_tokens", "kv_capacity_tokens")(X), 2))]),
        _scalar_family(sc, "sglang:num_used_tokens", "gauge", "The number of used tokens.", PD,
                       [((), f("kv_used_tokens"))]),
        _scalar_family(sc, "sglang:decode_sum_seq_lens", "gauge",
                       "The sum of all sequence lengths in decode.", D,
                       [((), f("context_tokens"))]),
        _scalar_family(sc, "sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", PD,
                       [((), _windowed("prefix_hits", "prefix_queries"))]),
        _scalar_family(sc, "sglang:gen_throughput", "gauge",
                       "The generation throughput (token/s).", D,
                       [((), _rate("gen_total", SCRAPE_INTERVAL_S))]),
        _scalar_family(sc, "sglang:num_prefill_bootstrap_queue_reqs", "gauge",
                       "The number of requests in the prefill bootstrap queue.", P,
                       [((), f("bootstrap"))]),
        _scalar_family(sc, "sglang:num_prefill_inflight_queue_reqs", "gauge",
                       "The number of requests in the prefill inflight queue.", P,
                       [((), f("inflight"))]),
        _scalar_family(sc, "sglang:num_decode_prealloc_queue_reqs", "gauge",
                       "The number of requests in the decode prealloc queue.", D,
                       [((), f("waiting"))]),
        _scalar_family(sc, "sglang:num_decode_transfer_queue_reqs", "gauge",
                       "The number of requests in the decode transfer queue.", D,
                       [((), f("kv_fetch_in_progress"))]),
        _scalar_family(sc, "sglang:num_retracted_reqs", "gauge",
                       "The number of retracted requests.", D, [((), f("retracted"))]),
        _scalar_family(sc, "sglang:prompt_tokens_total", "counter",
                       "Number of prefill tokens processed.", PD,
                       [((("is_streaming", "true"),), f("prompt_total"))]),
        _scalar_family(sc, "sglang:generation_tokens_total", "counter",
                       "Number of generation tokens processed.", PD,
                       [((("is_streaming", "true"),), f("gen_total"))]),
        _scalar_family(sc, "sglang:num_requests_total", "counter",
                       "Number of requests processed.", PD,
                       [((("is_streaming", "true"),), f("fin_ok"))]),
        _scalar_family(sc, "sglang:cached_tokens_total", "counter",
                       "Number of cached prompt tokens.", PD,
                       [((("cache_source", "device"),), f("prompt_cached"))]),
        _scalar_family(sc, "sglang:num_aborted_requests_total", "counter",
                       "Number of requests aborted.", PD,
                       [((), lambda X: X[:, F["fin_abort"]] + X[:, F["fin_err"]])]),
        _scalar_family(sc, "sglang:num_bootstrap_failed_reqs_total", "counter",
                       "The number of bootstrap failed requests.", PD, [((), zero)]),
        _scalar_family(sc, "sglang:num_transfer_failed_reqs_total", "counter",
                       "The number of transfer failed requests.", PD, [((), f("fin_err"))]),
        _scalar_family(sc, "sglang:num_retracted_requests_total", "counter",
                       "Total number of retracted requests.", PD, [((), f("preemptions"))]),
    ]
    # merge the prefill and decode halves of sglang:num_queue_reqs into one family
    decode_half = out.pop(2)
    out[1] += decode_half.split("\n", 2)[2]
    ttft = _obs_histogram(result, sc, "sglang:time_to_first_token_seconds",
                          "Histogram of time to first token in seconds.", P, BK.SGLANG_TTFT,
                          _prefill_obs(r, r["t_pend"] - r["arrival_s"]), stream)
    ttft += _obs_histogram(result, sc, "sglang:time_to_first_token_seconds", "", D,
                           BK.SGLANG_TTFT,
                           _decode_obs(r, r["t_first"], r["t_first"] - r["arrival_s"]),
                           stream).split("\n", 2)[2]
    e2e = _obs_histogram(result, sc, "sglang:e2e_request_latency_seconds",
                         "Histogram of End-to-end request latency in seconds", P, BK.SGLANG_E2E,
                         _prefill_obs(r, r["t_pend"] - r["arrival_s"]), stream)
    e2e += _obs_histogram(result, sc, "sglang:e2e_request_latency_seconds", "", D, BK.SGLANG_E2E,
                          _decode_obs(r, r["t_finish"], r["t_finish"] - r["arrival_s"]),
                          stream).split("\n", 2)[2]
    queue = _obs_histogram(result, sc, "sglang:queue_time_seconds",
                           "Histogram of queueing time in seconds.", P, BK.SGLANG_QUEUE,
                           _prefill_obs(r, r["t_pstart"] - r["t_admit"]))
    queue += _obs_histogram(result, sc, "sglang:queue_time_seconds", "", D, BK.SGLANG_QUEUE,
                            _decode_obs(r, r["t_finish"], r["t_join"] - r["t_kv"])
                            ).split("\n", 2)[2]
    latency_s = r["t_kv"] - r["t_pend"]
    out += [
        ttft,
        _itl_histogram(result, sc, "sglang:inter_token_latency_seconds",
                       "Histogram of inter-token latency in seconds.", D),
        _obs_histogram(result, sc, "sglang:request_time_per_output_token_seconds",
                       "Histogram of time per output token in seconds.", D, BK.SGLANG_ITL,
                       _decode_obs(r, r["t_finish"], _tpot(r)), stream),
        e2e,
        queue,
        _obs_histogram(result, sc, "sglang:kv_transfer_latency_ms",
                       "The transfer latency of the KV cache in ms.", P,
                       BK.SGLANG_XFER_LATENCY_MS, _xfer_obs(r, latency_s * 1e3, "prefill")),
        _obs_histogram(result, sc, "sglang:kv_transfer_speed_gb_s",
                       "The transfer speed of the KV cache in GB/s.", P,
                       BK.SGLANG_XFER_SPEED_GB_S,
                       _xfer_obs(r, np.divide(r["kv_bytes"] / GIB, latency_s,
                                              out=np.full(latency_s.size, np.nan),
                                              where=latency_s > 0), "prefill")),
        _obs_histogram(result, sc, "sglang:kv_transfer_total_mb",
                       "The total size of the KV cache transferred in MB.", P,
                       BK.SGLANG_XFER_TOTAL_MB, _xfer_obs(r, r["kv_bytes"] / MIB, "prefill")),
    ]
    return out
