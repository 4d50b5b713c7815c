"""Producer, transfer and consumer rates per instance over the whole length distribution.

- Prefill (producer): a request's share of busy time when forwards are packed to the token
  budget is ``a·u/T + b·u + c·((C+u)² − C²)`` (``u`` computed, ``C`` cached tokens); capacity is ``1 / E[share]`` requests/s, so the variance of
  ``u`` counts (``E[u²] = mean² + var``), unlike ``f(mean)``.
- Decode (consumer): the batch ``B`` is the largest that keeps the step time within the TPOT
  objective and the KV cache within memory; context per sequence is the step-weighted mean
  ``κ = Σ O_i (I_i + O_i/2) / Σ O_i`` (KV-token-seconds per decode-step), which keeps the
  prompt × output covariance. By Little's law capacity is ``B / (E[O] · step(B, B·κ))``.
- Transfer: bytes per request ``tokens · kv_bytes_per_token`` against the usable link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from pdprobe.analysis.capacity.mix import WorkloadMix
from pdprobe.analysis.capacity.perf_fit import DecodeModel, PrefillModel
from pdprobe.analysis.capacity.transfer import KvBytes
from pdprobe.analysis.capacity.wait_tail import first_meeting

# Size the *mean* decode step to this share of the TPOT objective: the batch a request shares
# fluctuates around its mean while the objective holds per request at a percentile, and
# engines lose a few percent to scheduling (aiconfigurator applies 0.92 to decode throughput).
DECODE_TPOT_HEADROOM: Final = 0.9
# Plan decode KV occupancy at this share of capacity: blocks are allocated per page and a full
# cache preempts or retracts requests (sglang #6351: decode memory pressure stalls prefill).
KV_MEMORY_TARGET: Final = 0.9
# Size decode KV memory so that occupancy stays below the target this many standard deviations
# out (z of the 90th percentile): KV held is a sum of requests' contexts, which fluctuates like
# shot noise, and while the cache is full new requests wait for admission, adding to TTFT for
# the same share of requests the objectives are set at.
KV_OCCUPANCY_Z: Final = 1.2816
# Keep each link below this utilisation: transfers queue like any server and at 80 % an M/D/1
# transfer already waits two transfer times on average.
TRANSFER_MAX_UTILIZATION: Final = 0.8


@dataclass(frozen=True)
class ModelInputs:
    """Everything the rate formulas need about the deployment."""

    prefill: PrefillModel
    decode: DecodeModel
    kv: KvBytes
    link_bytes_per_s: float
    link_base_latency_s: float


@dataclass(frozen=True)
class StageRates:
    """Per-instance rates of the three stages for one workload mix (requests/s unless named)."""

    mean_prompt_tokens: float
    mean_uncached_tokens: float
    mean_output_tokens: float
    prefill_service_s: float  # mean busy time per request under full batches
    prefill_service_cv2: float
    prefill_capacity_rps: float
    prefill_tokens_per_s: float  # uncached prompt tokens per second at capacity
    decode_context_tokens: float  # step-weighted mean context per sequence (kappa)
    decode_batch: float
    decode_batch_limit: str  # "tpot-slo", "kv-memory", "max-batch"
    decode_step_s: float
    decode_capacity_rps: float
    decode_tokens_per_s: float
    decode_slo_feasible: bool  # a batch of one meets the TPOT objective
    transfer_bytes_per_request: float
    transfer_capacity_rps: float  # per instance link, at TRANSFER_MAX_UTILIZATION

    @property
    def producer_capacity_rps(self) -> float:
        """Requests/s one prefill instance can produce and ship (the slower of the two)."""
        return min(self.prefill_capacity_rps, self.transfer_capacity_rps)

    @property
    def consumer_capacity_rps(self) -> float:
        """Requests/s one decode instance can receive and consume."""
        return min(self.decode_capacity_rps, self.transfer_capacity_rps)

    @property
    def theoretical_ratio(self) -> float:
        """Prefill instances per decode instance that balance production and consumption."""
        return self.consumer_capacity_rps / self.producer_capacity_rps


def transfer_tokens(mix: WorkloadMix, kv: KvBytes) -> np.ndarray:
    return mix.uncached_tokens if kv.basis == "uncached" else mix.prompt_tokens


def decode_context(mix: WorkloadMix) -> float:
    """``Σ O_i (I_i + O_i/2) / Σ O_i``: mean context per sequence in a decode step."""
    o = mix.output_tokens
    return float(np.sum(o * (mix.prompt_tokens + o / 2.0)) / np.sum(o))


def decode_batch(model: DecodeModel, kappa: float, slo_tpot_s: float) -> tuple[float, str, bool]:
    """Largest mean batch within the TPOT objective, KV memory and the engine's batch limit."""
    target = DECODE_TPOT_HEADROOM * slo_tpot_s
    per_seq = model.b_s_per_ctx_token * kappa + model.c_s_per_seq
    feasible = target > model.a_s + per_seq
    b_slo = (target - model.a_s) / per_seq if per_seq > 0 else math.inf
    b_mem = KV_MEMORY_TARGET * model.kv_capacity_tokens / kappa
    candidates = {"tpot-slo": b_slo, "kv-memory": b_mem, "max-batch": float(model.max_batch)}
    limit = min(candidates, key=lambda k: candidates[k])
    # Below one sequence the objective (or memory) cannot be met at all; run one at a time.
    return max(candidates[limit], 1.0), limit, feasible


def stage_rates(mix: WorkloadMix, model: ModelInputs, slo_tpot_s: float,
                batched: np.ndarray | None = None) -> StageRates:
    """Per-instance rates for ``mix``; ``batched`` is ``model.prefill.batched_s`` if known."""
    u = mix.uncached_tokens
    share = model.prefill.batched_s(u, mix.cached_tokens) if batched is None else batched
    s_mean = float(share.mean())
    s_cv2 = float(share.var() / s_mean**2) if s_mean > 0 else 0.0
    kappa = decode_context(mix)
    batch, limit, feasible = decode_batch(model.decode, kappa, slo_tpot_s)
    step = float(model.decode.step_s(batch, batch * kappa))
    mean_out = float(mix.output_tokens.mean())
    d_cap = batch / (mean_out * step)
    bytes_req = float(transfer_tokens(mix, model.kv).mean() * model.kv.bytes_per_token)
    x_cap = (TRANSFER_MAX_UTILIZATION * model.link_bytes_per_s / bytes_req
             if bytes_req > 0 else math.inf)
    return StageRates(
        mean_prompt_tokens=float(mix.prompt_tokens.mean()),
        mean_uncached_tokens=float(u.mean()),
        mean_output_tokens=mean_out,
        prefill_service_s=s_mean,
        prefill_service_cv2=s_cv2,
        prefill_capacity_rps=1.0 / s_mean,
        prefill_tokens_per_s=float(u.mean()) / s_mean,
        decode_context_tokens=kappa,
        decode_batch=batch,
        decode_batch_limit=limit,
        decode_step_s=step,
        decode_capacity_rps=d_cap,
        decode_tokens_per_s=d_cap * mean_out,
        decode_slo_feasible=feasible,
        transfer_bytes_per_request=bytes_req,
        transfer_capacity_rps=x_cap,
    )


def bare_ttft_s(mix: WorkloadMix, model: ModelInputs,
                alone: np.ndarray | None = None) -> np.ndarray:
    """Each request's TTFT with no queueing: its own prefill plus its KV transfer.

    ``alone`` is ``model.prefill.alone_s`` of the mix when the caller has it already.
    """
    tokens = transfer_tokens(mix, model.kv)
    xfer = model.link_base_latency_s + tokens * model.kv.bytes_per_token / model.link_bytes_per_s
    if alone is None:
        alone = model.prefill.alone_s(mix.uncached_tokens, mix.cached_tokens)
    return alone + xfer


@dataclass(frozen=True)
class Occupancy:
    """KV tokens held by one decode instance at a given per-instance arrival rate."""

    mean_tokens: float
    sd_tokens: float
    step_s: float

    def quantile_tokens(self, z: float = KV_OCCUPANCY_Z) -> float:
        return self.mean_tokens + z * self.sd_tokens


@dataclass(frozen=True)
class OccupancyMoments:
    """The length moments KV occupancy needs (they do not depend on the rate)."""

    mean_output_tokens: float  # E[O]
    kappa: float  # step-weighted context per sequence
    held: float  # E[O (I + O/2)]
    held_sq: float  # E[O I² + I O² + O³/3]

    @classmethod
    def of(cls, mix: WorkloadMix) -> OccupancyMoments:
        i, o = mix.prompt_tokens, mix.output_tokens
        return cls(float(o.mean()), decode_context(mix), float(np.mean(o * (i + o / 2.0))),
                   float(np.mean(o * i * i + i * o * o + o**3 / 3.0)))


def decode_occupancy(mix: WorkloadMix, model: DecodeModel, rate_rps: float,
                     moments: OccupancyMoments | None = None) -> Occupancy:
    """Mean and spread of KV occupancy (M/G/∞ shot noise) at ``rate_rps`` per instance.

    Request ``i`` holds a context growing from ``I`` to ``I + O`` over ``O`` steps of ``τ``;
    by Campbell's theorem the mean is ``r·τ·E[O (I + O/2)]`` and the variance
    ``r·τ·E[O I² + I O² + O³/3]`` (the integral of its squared context). The step time solves
    ``τ = a + (b·κ + c)·B`` with the batch ``B = r·E[O]·τ`` (Little).
    """
    m = moments or OccupancyMoments.of(mix)
    per_seq = model.b_s_per_ctx_token * m.kappa + model.c_s_per_seq
    load = per_seq * rate_rps * m.mean_output_tokens
    if load >= 1.0:
        return Occupancy(math.inf, math.inf, math.inf)
    tau = model.a_s / (1.0 - load)
    mean = rate_rps * tau * m.held
    var = rate_rps * tau * m.held_sq
    return Occupancy(mean, math.sqrt(var), tau)


def decode_count_for_memory(mix: WorkloadMix, model: DecodeModel, rate_rps: float,
                            moments: OccupancyMoments | None = None) -> int:
    """Fewest decode instances whose KV occupancy stays within memory (``KV_OCCUPANCY_Z``)."""
    limit = KV_MEMORY_TARGET * model.kv_capacity_tokens
    m = moments or OccupancyMoments.of(mix)  # once: the search below only changes the rate

    def fits(n: int) -> bool:
        return decode_occupancy(mix, model, rate_rps / n, m).quantile_tokens() <= limit

    lo, hi = 0, 1  # fits(lo) is false (no instances), find a hi that fits
    while not fits(hi):  # occupancy falls with every instance added
        lo, hi = hi, hi * 2
        if hi > 1_000_000:
            raise ValueError("decode KV memory cannot hold the workload")
    return first_meeting(fits, lo, hi)
