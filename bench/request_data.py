"""Synthetic per-request records for the benchmarks: a P/D cluster that could exist.

``generate(n)`` returns a pyarrow Table of ``n`` request records with every canonical column.
The timings come from a physical model of one cluster, so what pdprobe infers from them (how
busy each pool is, how many instances the load needs) has a true answer:

- **Arrivals**: Poisson within each minute at 300 req/s on average, the per-minute rate
  following a +-40 % daily-like swell (the captured part of the swell averages ~370 req/s and
  peaks at ~423 req/s in its busiest minute).
- **Lengths**: chat (60 %), RAG/documents (30 %), code (10 %), lognormal; 70 % of requests hit
  the prefix cache for a Beta(2, 5) share of their prompt.
- **Prefill** (``PREFILL`` = 120 instances, each Llama-3.1-70B BF16 TP4 on H100: the
  coefficients of pdprobe's ``llama3-70b-h100-tp4`` profile, i.e. ~12,700 tokens/s per
  instance at the margin, ~10,600 tokens/s on this mix). The router round-robins requests
  over the instances (vLLM's disaggregated proxy's policy); each instance serves its requests
  first come, first served. A request that finds its instance idle runs alone
  (``ceil(u/T)`` forwards of ``a + b*u + c*q``); one that finds a queue is packed into full
  forwards with the queue (``a*u/T + b*u + c*q``). ``queue_s`` is the wait in that queue
  (Lindley's recursion, exact), ``prefill_s`` the service. The pool is ~64 % busy over the
  captured window and ~76 % in the busiest minute: sized so that per-instance queues (which
  queue more than one pooled queue at the same load) keep the TTFT p90 well inside 2 s.
- **KV transfer**: all prompt tokens (327,680 B each) at 20 GB/s per transfer plus a small
  exponential delay; ``ttft_s = queue + prefill + transfer + 0.02 s``.
- **Decode** (``DECODE`` = 40 instances of the same shape): a mildly skewed random router
  (the busiest instance gets ~1.3x its fair share), one straggler (``vllm-decode-7``) whose
  steps are 1.35x slower. Each instance's step time is ``a + b*K + c*B`` for its batch ``B``
  and context ``K``; per instance and minute ``B`` follows from Little's law at the tokens it
  is asked to generate, so TPOT grows mildly with the instance's concurrency (~19 ms at the
  swell's trough to ~24 ms at its peak on a fair-share instance, batch ~66, KV ~40 % of
  450,000 tokens) and the straggler's batch grows more. ``e2e = ttft + tpot * (output - 1)``.
- **Status**: 1 % failures (error, timeout, aborted).

Generation is vectorised (numpy, one pass per instance for the queues) and seeded: the same
rows on every machine. 10M rows take ~7 CPU-s and ~1.8 GB.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from pdprobe.profiles import BUILTIN_PROFILES

# The cluster's instances: pdprobe's profile (its coefficients are read, not copied).
PROFILE: Final = BUILTIN_PROFILES["llama3-70b-h100-tp4"]
SEED: Final = 20240501
MEAN_RATE_RPS: Final = 300.0
START_TS: Final = 1_714_557_600.0  # 2024-05-01T10:00:00Z

# -- prefill -------------------------------------------------------------------------------
# Llama-3.1-70B BF16, TP4 on H100 SXM: pdprobe's llama3-70b-h100-tp4 profile (derived from
# FLOPs at a realistic MFU, docs/model.md). One forward over uncached chunks l_i takes
# a + b*sum(l) + c*sum(q), q = (C + l)^2 - C^2 the attention over the cached prefix too; a
# forward holds at most T tokens (vLLM's max_num_batched_tokens).
PREFILL_A_S: Final = PROFILE.prefill_a_s  # 0.020
PREFILL_B_S_PER_TOKEN: Final = PROFILE.prefill_b_s_per_token  # 7.9e-5
PREFILL_C_S_PER_TOKEN2: Final = PROFILE.prefill_c_s_per_token2  # 7.4e-10
PREFILL_CHUNK_TOKENS: Final = PROFILE.prefill_max_batch_tokens  # 8192
# 120 instances: the mix needs 0.216 s of prefill per request alone, so the busiest minute
# (423 req/s) keeps the pool ~76 % busy and the window ~64 %. Round-robin routing makes each
# instance its own first-come-first-served queue; at that load its TTFT p90 is ~1.3 s and
# ~97 % of requests meet a 2 s objective (at 106 instances, 72 % busy, only ~93 % would).
PREFILL: Final = 120
# For other loads (bench_partitions.py): the same operating point, 120 x ~0.65 busy.
PREFILL_BUSY_TARGET: Final = 0.65
# The queues' fixed point (service depends on whether a request queued) converges in ~5
# passes at any size seen; more than this means something is wrong, not slow.
MAX_QUEUE_PASSES: Final = 64

# -- KV transfer ---------------------------------------------------------------------------
# Llama-3-70B, bf16: 80 layers x 8 KV heads x 128 x 2 x 2 B = 327,680
KV_BYTES_PER_TOKEN: Final = float(PROFILE.model.kv_bytes_per_token_logical())
TRANSFER_BYTES_PER_S: Final = 20e9  # one transfer over a 200 Gb/s path at 80 %
TTFT_OVERHEAD_S: Final = 0.02  # routing, handshake and the first decode step

# -- decode ----------------------------------------------------------------------------------
# The same profile's decode step: a + b*K + c*B for B sequences holding K context tokens.
DECODE_A_S: Final = PROFILE.decode_a_s  # 0.014
DECODE_B_S_PER_CTX_TOKEN: Final = PROFILE.decode_b_s_per_ctx_token  # 3.6e-8
DECODE_C_S_PER_SEQ: Final = PROFILE.decode_c_s_per_seq  # 6.0e-5
# 40 instances: at the busiest minute a fair-share instance holds ~66 sequences (~40 % of its
# 450,000-token KV cache, TPOT ~24 ms); the busiest (1.3x its share) and the straggler stay
# under ~80 % of the cache, which they would not with fewer instances: a slow instance that
# the router keeps feeding accumulates a larger batch, which slows its steps further.
DECODE: Final = 40
ROUTING_SKEW: Final = 0.1  # decode weights 1/k^0.1: the busiest instance ~1.3x its fair share
STRAGGLER: Final = 7  # vllm-decode-7
STRAGGLER_STEP_FACTOR: Final = 1.35  # its steps 1.35x slower: its TPOT ends ~1.6x its peers'
# Little's law B = g*tau with tau = f*(a + (b*kappa + c)*B) has the solution
# tau = f*a / (1 - x), x = f*(b*kappa + c)*g: the share of the step that grows with the batch.
# Above this share the instance is near its throughput wall (the batch and TPOT explode); the
# generator refuses to write such a cluster rather than write impossible TPOTs.
MAX_DECODE_LOAD: Final = 0.8
DECODE_BIN_S: Final = 60.0  # Little's law per instance and minute (the swell's time scale)
# For other loads: decode tokens asked per instance and second, what the 40 instances are asked
# in the main files' busiest minute (423 req/s x 251 steps / 40).
DECODE_TOKENS_PER_S: Final = 2_650.0


def prefill_costs(uncached: np.ndarray, cached: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(alone, batched) prefill seconds of each request: run on an idle instance, or packed
    into full forwards with a queue (the fixed cost per forward shared by its tokens)."""
    q = (cached + uncached) ** 2 - cached**2
    per_token = PREFILL_B_S_PER_TOKEN * uncached + PREFILL_C_S_PER_TOKEN2 * q
    alone = np.ceil(uncached / PREFILL_CHUNK_TOKENS) * PREFILL_A_S + per_token
    batched = PREFILL_A_S * uncached / PREFILL_CHUNK_TOKENS + per_token
    return alone, batched


def fifo_queue(t: np.ndarray, alone: np.ndarray, batched: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """(wait, service) of each request of one first-come-first-served instance, arrivals ``t``
    ascending: service is ``alone`` when the request found the instance idle, else
    ``batched``.

    With service ``S`` fixed, request ``i`` starts at ``max(t_i, end of i-1)``; with
    ``C`` the cumulative service that is ``C_{i-1} + M_i`` where ``M_i`` is the running maximum
    of ``f_k = t_k - C_{k-1}`` (Lindley's recursion unrolled), so the wait is ``M_i - f_i`` and
    it is exactly 0 where ``f_i`` is its own running maximum (the instance was idle). Which
    service applies depends on the waits, so the waits are recomputed until the services stop
    changing: each pass fixes at least the next request in order, and the only fixed point is
    the sequential answer.
    """
    service = batched
    for _ in range(MAX_QUEUE_PASSES):
        done_before = np.cumsum(service) - service  # C_{i-1}
        free = t - done_before
        latest = np.maximum.accumulate(free)
        idle = latest == free
        again = np.where(idle, alone, batched)
        if np.array_equal(again, service):
            return latest - free, service
        service = again
    raise RuntimeError(f"prefill queue did not settle in {MAX_QUEUE_PASSES} passes")


def prefill_queues(t: np.ndarray, instance: np.ndarray, alone: np.ndarray,
                   batched: np.ndarray, instances: int) -> tuple[np.ndarray, np.ndarray]:
    """(queue_s, prefill_s) of every request, each instance's requests (``t`` ascending
    within it) through its own FIFO queue."""
    order = np.argsort(instance, kind="stable")
    bounds = np.searchsorted(instance[order], np.arange(instances + 1))
    wait = np.empty_like(t)
    service = np.empty_like(t)
    for j in range(instances):
        rows = order[bounds[j]:bounds[j + 1]]
        wait[rows], service[rows] = fifo_queue(t[rows], alone[rows], batched[rows])
    return wait, service


def decode_step_s(decode_idx: np.ndarray, bin_idx: np.ndarray, prompt: np.ndarray,
                  output: np.ndarray, slow: np.ndarray) -> np.ndarray:
    """Each request's mean decode step (TPOT before noise): its instance's step in the
    minute it arrived, at the batch Little's law gives for the tokens asked of it then."""
    bins = int(bin_idx.max()) + 1
    key = decode_idx.astype(np.int64) * bins + bin_idx
    steps = (output - 1).astype(np.float64)
    asked = np.bincount(key, steps, slow.size * bins)
    ctx_weight = np.bincount(key, steps * (prompt + output / 2.0), slow.size * bins)
    # step-weighted context per sequence: a sequence of O tokens sits in O - 1 steps holding
    # on average its prompt plus half its output
    kappa = np.divide(ctx_weight, asked, out=np.zeros_like(asked), where=asked > 0)
    factor = np.repeat(slow, bins)
    load = factor * (DECODE_B_S_PER_CTX_TOKEN * kappa + DECODE_C_S_PER_SEQ) * (asked / DECODE_BIN_S)
    if load.max() > MAX_DECODE_LOAD:
        raise ValueError(f"decode instance at {load.max():.2f} of its throughput wall "
                         f"(limit {MAX_DECODE_LOAD}): add decode instances")
    tau = factor * DECODE_A_S / (1.0 - load)
    return tau[key]


def cluster_timings(rng: np.random.Generator, since_start: np.ndarray, bin_idx: np.ndarray,
                    prompt: np.ndarray, output: np.ndarray, cached: np.ndarray | float,
                    prefill: int, decode_weights: np.ndarray, slow: np.ndarray
                    ) -> dict[str, np.ndarray]:
    """The cluster's side of ``n`` requests (arrivals ``since_start`` ascending, in minute
    ``bin_idx``): instance codes and every timing column, in the canonical columns' order.

    Prefill round-robins over ``prefill`` instances, each a FIFO queue; decode picks an instance
    at random with ``decode_weights``, whose steps are ``slow`` times the profile's.
    """
    n = since_start.size
    prefill_idx = (np.arange(n) % prefill).astype(np.int32)
    uncached = np.maximum(prompt - cached, 1.0)
    alone, batched = prefill_costs(uncached, np.broadcast_to(np.asarray(cached, float), (n,)))
    queue_s, prefill_s = prefill_queues(since_start, prefill_idx, alone, batched, prefill)
    del alone, batched, uncached

    p = decode_weights / decode_weights.sum()
    decode_idx = rng.choice(p.size, size=n, p=p).astype(np.int32)
    kv_bytes = prompt * KV_BYTES_PER_TOKEN
    kv_transfer_s = kv_bytes / TRANSFER_BYTES_PER_S + rng.exponential(0.002, n)
    ttft_s = queue_s + prefill_s + kv_transfer_s + TTFT_OVERHEAD_S
    step = decode_step_s(decode_idx, bin_idx, prompt, output, slow)
    tpot_s = step * rng.lognormal(0.0, 0.1, n)
    e2e_s = ttft_s + tpot_s * (output - 1)
    return {"prefill_idx": prefill_idx, "decode_idx": decode_idx, "queue_s": queue_s,
            "prefill_s": prefill_s, "kv_transfer_s": kv_transfer_s, "kv_bytes": kv_bytes,
            "ttft_s": ttft_s, "tpot_s": tpot_s, "e2e_s": e2e_s}


def pool_sizes(rate_rps: float, prompt: np.ndarray, output: np.ndarray,
               cached: np.ndarray | float = 0.0) -> tuple[int, int]:
    """(prefill, decode) instances for a steady ``rate_rps`` of requests shaped like the
    sample (``prompt``, ``output``, ``cached``), at the main files' operating point: prefill
    ``PREFILL_BUSY_TARGET`` busy, decode asked ``DECODE_TOKENS_PER_S`` per instance."""
    alone, _ = prefill_costs(np.maximum(prompt - cached, 1.0),
                             np.broadcast_to(np.asarray(cached, float), prompt.shape))
    prefill = int(np.ceil(rate_rps * float(alone.mean()) / PREFILL_BUSY_TARGET))
    decode = int(np.ceil(rate_rps * float((output - 1).mean()) / DECODE_TOKENS_PER_S))
    return max(prefill, 1), max(decode, 1)


def generate(n: int, seed: int = SEED) -> Any:
    """A pyarrow Table of ``n`` request records (all canonical columns) from the cluster the
    module docstring describes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    # Arrivals: Poisson within each minute, the per-minute rate following a +-40 % daily-like
    # swell so the arrival series is not flat.
    minutes = int(np.ceil(n / (MEAN_RATE_RPS * 60) * 1.5)) + 2
    rate = MEAN_RATE_RPS * (1 + 0.4 * np.sin(np.linspace(0, 2 * np.pi, minutes)))
    per_minute = rng.poisson(rate * 60)
    while per_minute.sum() < n:
        per_minute = np.concatenate((per_minute, rng.poisson(rate * 60)))
    minute_of = np.repeat(np.arange(per_minute.size), per_minute)[:n]
    # sorting keeps each arrival in its minute (values of minute m lie in [60m, 60m + 60))
    since_start = np.sort(minute_of * 60.0 + rng.uniform(0, 60, n))
    arrival = START_TS + since_start

    # Length mix: chat turns, RAG/document prompts, code completion.
    kind = rng.choice(3, size=n, p=[0.6, 0.3, 0.1])
    p_median = np.array([600.0, 6000.0, 2000.0])[kind]
    p_sigma = np.array([0.9, 0.5, 0.8])[kind]
    o_median = np.array([250.0, 150.0, 40.0])[kind]
    o_sigma = np.array([0.7, 0.6, 1.0])[kind]
    prompt = np.clip(np.rint(rng.lognormal(np.log(p_median), p_sigma)), 1, 131072).astype(np.int64)
    output = np.clip(np.rint(rng.lognormal(np.log(o_median), o_sigma)), 1, 8192).astype(np.int64)
    cached = np.where(rng.random(n) < 0.7, np.floor(prompt * rng.beta(2, 5, n)), 0.0)
    del kind, p_median, p_sigma, o_median, o_sigma

    weights = 1.0 / np.arange(1, DECODE + 1) ** ROUTING_SKEW  # mild routing skew
    slow = np.where(np.arange(DECODE) == STRAGGLER, STRAGGLER_STEP_FACTOR, 1.0)
    cols = cluster_timings(rng, since_start, minute_of, prompt, output, cached,
                           PREFILL, weights, slow)
    status_idx = rng.choice(4, size=n, p=[0.99, 0.005, 0.003, 0.002]).astype(np.int32)

    prefill_names = pa.array([f"vllm-prefill-{i}" for i in range(PREFILL)])
    decode_names = pa.array([f"vllm-decode-{i}" for i in range(DECODE)])
    statuses = pa.array(["ok", "error", "timeout", "aborted"])
    ids = pc.binary_join_element_wise("req-", pc.cast(pa.array(np.arange(n)), pa.string()), "")
    return pa.table({
        "request_id": ids,
        "arrival_ts": arrival,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "cached_tokens": cached,
        "prefill_instance": pa.DictionaryArray.from_arrays(cols.pop("prefill_idx"),
                                                           prefill_names),
        "decode_instance": pa.DictionaryArray.from_arrays(cols.pop("decode_idx"), decode_names),
        **cols,
        "status": pa.DictionaryArray.from_arrays(status_idx, statuses),
    })
